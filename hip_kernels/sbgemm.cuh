// Stage 3 for several right-hand sides: the same per-frequency product as sbgemv.cuh, arranged
// for arithmetic rather than bandwidth. With KB right-hand sides every Khat element feeds KB
// complex multiply-adds, and the limit becomes how often the vector values are fetched: here a
// thread block stages a chunk of the vectors, x[:, r0:r0+RC, f-tile], in shared memory once,
// and all its TY x RT output rows reuse it; Khat is prefetched one step ahead in registers.
//
// Same layouts and argument conventions as sbgemv_body; one frequency per thread (V = 1).
// Every thread reaches every barrier: threads past the end of the frequency or row ranges
// compute on clamped indices and write nothing.
#pragma once
#include "common.cuh"

template <typename Store, typename TIn, typename TOut, int RT, int KB, int RC>
__device__ __forceinline__ void sbgemm_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 x_bstride, i64 y_bstride,
    i64 y_split_stride) {
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  extern __shared__ unsigned char smem_raw[];
  C* xs = reinterpret_cast<C*>(smem_raw);  // [RC][KB][blockDim.x]

  const int bx = blockDim.x;
  const int nthreads = bx * blockDim.y;
  const int tid = threadIdx.y * bx + threadIdx.x;
  const i64 n_otiles = ((n_out + RT - 1) / RT + blockDim.y - 1) / blockDim.y;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 ftile = (i64)blockIdx.x / n_otiles;
  const i64 fbase = ftile * bx;
  const i64 f = fbase + threadIdx.x;
  const bool f_ok = f < nf;
  const i64 fc = f_ok ? f : nf - 1;
  const i64 o0 = (otile * blockDim.y + threadIdx.y) * RT;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  i64 r_end = r_begin + red_chunk;
  if (r_end > n_red) r_end = n_red;
  const bool adj = adjoint != 0;
  const float* red_scale = (scale != nullptr && adj) ? scale : nullptr;

  i64 koff[RT];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    i64 o = o0 + t;
    if (o >= n_out) o = n_out - 1;
    koff[t] = o * so + fc;
  }

  C acc[RT][KB];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int b = 0; b < KB; ++b) acc[t][b] = make_c((R)0, (R)0);

  C kcur[RT][1], knext[RT][1];
  if (r_begin < r_end) {
#pragma unroll
    for (int t = 0; t < RT; ++t) Store::template load<1>(kh + koff[t] + r_begin * sr, kcur[t]);
  }

  for (i64 r0 = r_begin; r0 < r_end; r0 += RC) {
    // stage x[:, r0:r0+RC, fbase:fbase+bx] (cast to the compute type, and scaled per reduced
    // index for an adjoint with float16 storage)
    __syncthreads();
    for (int e = tid; e < RC * KB * bx; e += nthreads) {
      const int lane = e % bx;
      const int b = (e / bx) % KB;
      const int rc = e / (bx * KB);
      const i64 r = r0 + rc;
      i64 fl = fbase + lane;
      if (fl >= nf) fl = nf - 1;
      C v = make_c((R)0, (R)0);
      if (r < r_end) {
        v = ccast<C>(x[b * x_bstride + r * nf + fl]);
        if (red_scale != nullptr) {
          const R s = (R)red_scale[r * nfp + fl];
          v.x *= s;
          v.y *= s;
        }
      }
      xs[e] = v;
    }
    __syncthreads();
    const int steps = (r_end - r0 < RC) ? (int)(r_end - r0) : RC;
    for (int rc = 0; rc < steps; ++rc) {
      const i64 r = r0 + rc;
      const i64 rn = (r + 1 < r_end) ? r + 1 : r;
#pragma unroll
      for (int t = 0; t < RT; ++t) Store::template load<1>(kh + koff[t] + rn * sr, knext[t]);
      const C* xr = xs + (i64)rc * KB * bx + threadIdx.x;
#pragma unroll
      for (int b = 0; b < KB; ++b) {
        const C xv = xr[b * bx];
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          if (adj)
            cfma_conj(acc[t][b], kcur[t][0], xv);
          else
            cfma(acc[t][b], kcur[t][0], xv);
        }
      }
#pragma unroll
      for (int t = 0; t < RT; ++t) kcur[t][0] = knext[t][0];
    }
  }

  if (!f_ok) return;
  TOut* yb = y + (i64)blockIdx.y * y_split_stride;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const i64 o = o0 + t;
    if (o >= n_out) continue;
    R s = (R)1;
    if (scale != nullptr && !adj) s = (R)scale[o * nfp + f];
#pragma unroll
    for (int b = 0; b < KB; ++b) {
      C c = acc[t][b];
      c.x *= s;
      c.y *= s;
      yb[b * y_bstride + o * nf + f] = ccast<TOut>(c);
    }
  }
}
