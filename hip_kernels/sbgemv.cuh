// Stage 3: per-frequency complex product with Khat, forward (Khat[f] @ x[f]) and adjoint
// (Khat[f]^H @ x[f]), for one or several right-hand sides.
//
// Layouts (all C order, frequency innermost, as the FFT stages produce and consume them):
//   Khat  (Nd, Nm, Nf)        storage precision (complex128, complex64, or packed float16 pairs)
//   scale (Nd, Nf) float32    only for float16 storage: Khat[i, j, f] = scale[i, f] * stored
//   x     (k, n_red, Nf)      the FFT output, in the FFT precision
//   y     (k, n_out, Nf)      in the inverse FFT's precision, or partial sums (compute precision)
// Forward: out index o = sensor i, reduced index r = parameter j.  Adjoint: o = j, r = i.
// Khat[o, r, f] lives at o*so + r*sr + f, so one kernel serves both directions.
//
// Thread mapping: threadIdx.x runs over frequencies (consecutive lanes read consecutive
// Khat entries: every load is coalesced, in both directions, with no transpose), threadIdx.y
// over groups of RT output rows; blockIdx.x enumerates (frequency tile, output tile) pairs and
// blockIdx.y splits the reduction (split-K) so that skinny problems fill the device. Each
// Khat element is read exactly once per launch; a launch handles KB right-hand sides.
#pragma once
#include "common.cuh"

template <typename Store, typename TIn, typename TOut, int RT, int KB>
__device__ __forceinline__ void sbgemv_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 n_ftiles, i64 x_bstride, i64 y_bstride,
    i64 y_split_stride) {
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;

  const i64 ftile = (i64)blockIdx.x % n_ftiles;
  const i64 otile = (i64)blockIdx.x / n_ftiles;
  const i64 f = ftile * blockDim.x + threadIdx.x;
  if (f >= nf) return;
  const i64 o0 = (otile * blockDim.y + threadIdx.y) * RT;
  if (o0 >= n_out) return;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  i64 r_end = r_begin + red_chunk;
  if (r_end > n_red) r_end = n_red;

  // Output rows past the end are clamped onto the last row: their loads hit the cache and their
  // results are never written, which keeps the inner loop free of branches.
  i64 koff[RT];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    i64 o = o0 + t;
    if (o >= n_out) o = n_out - 1;
    koff[t] = o * so + f;
  }

  C acc[RT][KB];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int b = 0; b < KB; ++b) acc[t][b] = make_c((R)0, (R)0);

  const bool per_reduced_scale = (scale != nullptr) && adjoint;
#pragma unroll 2
  for (i64 r = r_begin; r < r_end; ++r) {
    C xv[KB];
#pragma unroll
    for (int b = 0; b < KB; ++b) xv[b] = ccast<C>(x[b * x_bstride + r * nf + f]);
    if (per_reduced_scale) {
      const R s = (R)scale[r * nf + f];
#pragma unroll
      for (int b = 0; b < KB; ++b) {
        xv[b].x *= s;
        xv[b].y *= s;
      }
    }
    const i64 rof = r * sr;
    if (adjoint) {
#pragma unroll
      for (int t = 0; t < RT; ++t) {
        const C kv = Store::load(kh + koff[t] + rof);
#pragma unroll
        for (int b = 0; b < KB; ++b) cfma_conj(acc[t][b], kv, xv[b]);
      }
    } else {
#pragma unroll
      for (int t = 0; t < RT; ++t) {
        const C kv = Store::load(kh + koff[t] + rof);
#pragma unroll
        for (int b = 0; b < KB; ++b) cfma(acc[t][b], kv, xv[b]);
      }
    }
  }

  TOut* yb = y + (i64)blockIdx.y * y_split_stride;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const i64 o = o0 + t;
    if (o < n_out) {
      R s = (R)1;
      if (scale != nullptr && !adjoint) s = (R)scale[o * nf + f];
#pragma unroll
      for (int b = 0; b < KB; ++b) {
        C v = acc[t][b];
        v.x *= s;
        v.y *= s;
        yb[b * y_bstride + o * nf + f] = ccast<TOut>(v);
      }
    }
  }
}

// Sum the split-K partial results (S, k, n_out, Nf) and cast to the inverse FFT's precision.
template <typename TIn, typename TOut>
__device__ __forceinline__ void reduce_splits_body(const TIn* __restrict__ part,
                                                   TOut* __restrict__ y, i64 n, int splits) {
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    TIn acc = part[e];
    for (int s = 1; s < splits; ++s) {
      const TIn v = part[(i64)s * n + e];
      acc.x += v.x;
      acc.y += v.y;
    }
    y[e] = ccast<TOut>(acc);
  }
}
