// Stage 3 for several right-hand sides on tensor cores (NVIDIA sm_80 and newer).
//
// With k right-hand sides the per-frequency product Y[f] = A[f] X[f] (A = Khat[f] or its
// conjugate transpose, X the k vectors) is a small complex GEMM per frequency, and with k = 16
// its arithmetic outgrows the FMA units: the complex128 product needs 64 GFLOP for a Khat of
// 8 GB. These kernels run it as real MMAs with the complex product folded into the reduction:
//
//   [Yr Yi] = [Ar Ai] [[ Xr  Xi]
//                      [-Xi  Xr]]
//
// A k-step takes 4 complex reduction rows r0..r0+3, i.e. 8 real ones: the Ar columns and the
// Ai columns come from the same complex load of Khat, so each thread loads whole complex values,
// V consecutive frequencies at a time, straight from the (Nd, Nm, Nfp) layout (no transpose,
// no shared memory, no barriers). The 16 right-hand sides are
// the MMA's N = 32 real columns: [Yr of b 0-7 | Yr of b 8-15 | Yi of b 0-7 | Yi of b 8-15].
//
//   complex128 (`d`): DMMA m8n8k4 in float64, two MMAs (Ar and Ai) per k-step and n-tile.
//   complex64  (`s`): TF32 m16n8k8 with float32 accumulation, operands split hi + lo ("3xTF32":
//                     A_hi B_hi + A_hi B_lo + A_lo B_hi). The tensor cores' float32
//                     accumulation truncates, so the error is a few times that of float32
//                     FMAs (a few 1e-6 relative, measured; tests/test_kernels.py).
//   float16    (`h`): TF32 m16n8k8; float16 values are exact in TF32, so only X is split
//                     (2 MMAs); the float32 scales are applied to X (adjoint) or to Y (forward).
//
// A warp owns MT m-tiles of output rows, all right-hand sides of the launch (kb <= 16; columns
// past kb are zero and never stored) and V consecutive frequencies. A block has `wo` warps
// along the rows for each of its frequency groups, so its vector reads come from L1 after the
// first warp. blockIdx.y splits the reduction (split-K) like the GEMV kernels.
//
// The engine uses these kernels for forward products of 16 right-hand sides, where they beat
// the GEMV kernels by 1.06-1.4x on an H200 (docs/benchmarks.md); adjoints, with few reduction
// rows and many scattered output rows, stay on the GEMV kernels, as do smaller batches (a
// launch costs about the same for any kb).
//
// Only compiled where FFTMATVEC_MMA is defined (the build and the run-time compiler define it
// for NVIDIA sm_80 and newer); elsewhere the GEMV kernels serve several right-hand sides.
#pragma once
#include "common.cuh"

#if defined(FFTMATVEC_MMA)

__device__ __forceinline__ void mma_f64(double (&d)[2], double a, double b) {
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
      : "+d"(d[0]), "+d"(d[1])
      : "d"(a), "d"(b));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned tf32_round(float v) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
}

// v = hi + lo in TF32, to about 2^-22 relative.
struct Tf32Pair {
  unsigned hi, lo;
};
__device__ __forceinline__ Tf32Pair tf32_split(float v) {
  const unsigned hi = tf32_round(v);
  return {hi, tf32_round(v - __uint_as_float(hi))};
}
__device__ __forceinline__ unsigned tf32_neg(unsigned v) { return v ^ 0x80000000u; }

// Where a warp works: MT row tiles from o0, V frequencies from f0, its split-K share.
struct MmaWarp {
  int g, t;  // MMA groupID (lane / 4) and thread in group (lane % 4)
  i64 o0, f0, r_begin, r_end;
  bool active;
};

// Warps of a block: wo along the output rows (fastest), blockDim.y / wo along the frequencies.
// Row blocks vary fastest across blocks, so blocks running side by side read the same vectors.
__device__ __forceinline__ MmaWarp mma_warp(int rows_per_warp, int V, i64 n_out, i64 nf,
                                            i64 n_red, i64 red_chunk, int wo) {
  MmaWarp w;
  w.g = threadIdx.x >> 2;
  w.t = threadIdx.x & 3;
  const int osub = threadIdx.y % wo, fsub = threadIdx.y / wo, wf = blockDim.y / wo;
  const i64 n_otiles = (n_out + rows_per_warp - 1) / rows_per_warp;
  const i64 n_oblocks = (n_otiles + wo - 1) / wo;
  w.o0 = ((i64)blockIdx.x % n_oblocks * wo + osub) * rows_per_warp;
  w.f0 = ((i64)blockIdx.x / n_oblocks * wf + fsub) * V;
  w.r_begin = (i64)blockIdx.y * red_chunk;
  w.r_end = w.r_begin + red_chunk < n_red ? w.r_begin + red_chunk : n_red;
  // o0 and f0 are uniform across a warp, so whole warps leave together: mma.sync needs all lanes.
  w.active = w.o0 < n_out && w.f0 < nf;
  return w;
}

// The vectors a thread feeds into its B fragments at reduction row r: right-hand sides g and
// g + 8, V frequencies each; zero past kb and past the reduction (valid == false). The float16
// adjoint multiplies by the per-row scale.
template <typename R, typename TIn, int V>
__device__ __forceinline__ void mma_load_x(typename Complex<R>::type (&xv)[2][V],
                                           const TIn* __restrict__ x, i64 x_bstride, i64 nf,
                                           const i64 (&fx)[V], int g, int kb, i64 r, bool valid,
                                           const float* __restrict__ red_scale, i64 nfp,
                                           i64 f0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int b = g + 8 * h;
    const bool ok = valid && b < kb;
    const TIn* xb = x + (i64)(ok ? b : 0) * x_bstride + r * nf;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      typename Complex<R>::type c = ccast<typename Complex<R>::type>(xb[fx[v]]);
      if (red_scale != nullptr) {
        const R s = (R)red_scale[r * nfp + f0 + v];
        c.x *= s;
        c.y *= s;
      }
      xv[h][v] = ok ? c : make_c((R)0, (R)0);
    }
  }
}

// Store y[b, o, f] (skipped past kb, n_out or nf), times the forward float16 row scale.
template <typename TOut, typename C>
__device__ __forceinline__ void mma_store_one(TOut* __restrict__ y, i64 y_bstride, i64 nf,
                                              i64 nfp, i64 n_out, int kb, int b, i64 o, i64 f,
                                              C val, const float* __restrict__ fwd_scale) {
  if (b >= kb || o >= n_out || f >= nf) return;
  if (fwd_scale != nullptr) {
    const float s = fwd_scale[o * nfp + f];
    val.x *= s;
    val.y *= s;
  }
  y[(i64)b * y_bstride + o * nf + f] = ccast<TOut>(val);
}

// ---- complex128 on DMMA m8n8k4: A (row g, col t), B (row t, col g), C (row g, cols 2t, 2t+1)
template <typename TIn, typename TOut, int MT, int V>
__device__ __forceinline__ void sbgemm_f64_body(
    const double2* __restrict__ kh, const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf,
    i64 nfp, i64 n_out, i64 n_red, i64 so, i64 sr, int adjoint, i64 red_chunk, int kb, int wo,
    i64 x_bstride, i64 y_bstride, i64 y_split_stride) {
  const MmaWarp w = mma_warp(8 * MT, V, n_out, nf, n_red, red_chunk, wo);
  if (!w.active) return;
  i64 koff[MT], fx[V];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    const i64 o = w.o0 + 8 * m + w.g;
    koff[m] = (o < n_out ? o : n_out - 1) * so + w.f0;  // clamped rows: cached re-reads
  }
#pragma unroll
  for (int v = 0; v < V; ++v) fx[v] = (w.f0 + v < nf) ? w.f0 + v : nf - 1;
  const double sgn = adjoint ? -1.0 : 1.0;  // conj(Khat) for the adjoint: negate Ai

  double acc[V][MT][4][2];
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < 4; ++n) acc[v][m][n][0] = acc[v][m][n][1] = 0.0;

  // Software pipeline: the loads of k-step s + 1 are in flight while k-step s multiplies.
  struct Step {
    double2 a[MT][V], x[2][V];
  } cur, nxt;
  auto load = [&](i64 r0, Step& s) {
    double2(&a_)[MT][V] = s.a;
    double2(&x_)[2][V] = s.x;
    const i64 r = r0 + w.t;
    const bool valid = r < w.r_end;
    const i64 rr = valid ? r : w.r_end - 1;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      StoreC128::load<V>(kh + koff[m] + rr * sr, a_[m]);
#pragma unroll
      for (int v = 0; v < V; ++v)
        if (!valid) a_[m][v] = make_double2(0.0, 0.0);
    }
    mma_load_x<double, TIn, V>(x_, x, x_bstride, nf, fx, w.g, kb, rr, valid, nullptr, nfp,
                               w.f0);
  };
  if (w.r_begin < w.r_end) load(w.r_begin, cur);
  for (i64 r0 = w.r_begin; r0 < w.r_end; r0 += 4) {
    load((r0 + 4 < w.r_end) ? r0 + 4 : r0, nxt);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const double xr0 = cur.x[0][v].x, xi0 = cur.x[0][v].y;
      const double xr1 = cur.x[1][v].x, xi1 = cur.x[1][v].y;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const double ar = cur.a[m][v].x, ai = sgn * cur.a[m][v].y;
        mma_f64(acc[v][m][0], ar, xr0);  // Yr += Ar Xr
        mma_f64(acc[v][m][1], ar, xr1);
        mma_f64(acc[v][m][2], ar, xi0);  // Yi += Ar Xi
        mma_f64(acc[v][m][3], ar, xi1);
        mma_f64(acc[v][m][0], ai, -xi0);  // Yr -= Ai Xi
        mma_f64(acc[v][m][1], ai, -xi1);
        mma_f64(acc[v][m][2], ai, xr0);  // Yi += Ai Xr
        mma_f64(acc[v][m][3], ai, xr1);
      }
    }
    cur = nxt;
  }

  TOut* yb = y + (i64)blockIdx.y * y_split_stride;
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const i64 o = w.o0 + 8 * m + w.g;
        const int b = 2 * w.t + i;
        mma_store_one(yb, y_bstride, nf, nfp, n_out, kb, b, o, w.f0 + v,
                      make_double2(acc[v][m][0][i], acc[v][m][2][i]), (const float*)nullptr);
        mma_store_one(yb, y_bstride, nf, nfp, n_out, kb, b + 8, o, w.f0 + v,
                      make_double2(acc[v][m][1][i], acc[v][m][3][i]), (const float*)nullptr);
      }
}

// ---- complex64 and float16 storage on TF32 m16n8k8 ---------------------------------------
// A: a0 (row g, col t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4), columns 0-3 the Ar
// part and 4-7 the Ai part of 4 complex rows; B: b0 (row t, col g), b1 (row t + 4, col g);
// C: c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8).
//   n-tile 0/1 (Yr of b = g / g + 8): b0 = Xr, b1 = -Xi;  n-tile 2/3 (Yi): b0 = Xi, b1 = Xr.
template <typename Store, typename TIn, typename TOut, int MT, int V>
__device__ __forceinline__ void sbgemm_tf32_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, int kb, int wo, i64 x_bstride, i64 y_bstride,
    i64 y_split_stride) {
  constexpr bool split_a = !Store::exact_tf32;  // float16 values are exact in TF32
  const MmaWarp w = mma_warp(16 * MT, V, n_out, nf, n_red, red_chunk, wo);
  if (!w.active) return;
  i64 koff[MT][2], fx[V];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const i64 o = w.o0 + 16 * m + 8 * h + w.g;
      koff[m][h] = (o < n_out ? o : n_out - 1) * so + w.f0;
    }
#pragma unroll
  for (int v = 0; v < V; ++v) fx[v] = (w.f0 + v < nf) ? w.f0 + v : nf - 1;
  const float sgn = adjoint ? -1.0f : 1.0f;
  const float* red_scale = (scale != nullptr && adjoint) ? scale : nullptr;
  const float* fwd_scale = (scale != nullptr && !adjoint) ? scale : nullptr;

  float acc[V][MT][4][4];
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[v][m][n][c] = 0.0f;

  struct Step {
    float2 a[MT][2][V], x[2][V];
  } cur, nxt;
  auto load = [&](i64 r0, Step& s) {
    float2(&a_)[MT][2][V] = s.a;
    float2(&x_)[2][V] = s.x;
    const i64 r = r0 + w.t;
    const bool valid = r < w.r_end;
    const i64 rr = valid ? r : w.r_end - 1;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        Store::template load<V>(kh + koff[m][h] + rr * sr, a_[m][h]);
#pragma unroll
        for (int v = 0; v < V; ++v)
          if (!valid) a_[m][h][v] = make_float2(0.0f, 0.0f);
      }
    mma_load_x<float, TIn, V>(x_, x, x_bstride, nf, fx, w.g, kb, rr, valid, red_scale, nfp,
                              w.f0);
  };
  if (w.r_begin < w.r_end) load(w.r_begin, cur);
  for (i64 r0 = w.r_begin; r0 < w.r_end; r0 += 4) {
    load((r0 + 4 < w.r_end) ? r0 + 4 : r0, nxt);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      Tf32Pair xr[2], xi[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        xr[h] = tf32_split(cur.x[h][v].x);
        xi[h] = tf32_split(cur.x[h][v].y);
      }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const float f0r = cur.a[m][0][v].x, f1r = cur.a[m][1][v].x;
        const float f0i = sgn * cur.a[m][0][v].y, f1i = sgn * cur.a[m][1][v].y;
        Tf32Pair a0, a1, a2, a3;
        if constexpr (split_a) {
          a0 = tf32_split(f0r);
          a1 = tf32_split(f1r);
          a2 = tf32_split(f0i);
          a3 = tf32_split(f1i);
        } else {
          a0 = {__float_as_uint(f0r), 0u};
          a1 = {__float_as_uint(f1r), 0u};
          a2 = {__float_as_uint(f0i), 0u};
          a3 = {__float_as_uint(f1i), 0u};
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const int h = n & 1;
          const Tf32Pair b0 = (n < 2) ? xr[h] : xi[h];
          const Tf32Pair b1 = (n < 2) ? Tf32Pair{tf32_neg(xi[h].hi), tf32_neg(xi[h].lo)} : xr[h];
          // the small terms first, then the leading one
          mma_tf32(acc[v][m][n], a0.hi, a1.hi, a2.hi, a3.hi, b0.lo, b1.lo);
          if constexpr (split_a)
            mma_tf32(acc[v][m][n], a0.lo, a1.lo, a2.lo, a3.lo, b0.hi, b1.hi);
          mma_tf32(acc[v][m][n], a0.hi, a1.hi, a2.hi, a3.hi, b0.hi, b1.hi);
        }
      }
    }
    cur = nxt;
  }

  TOut* yb = y + (i64)blockIdx.y * y_split_stride;
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const i64 o = w.o0 + 16 * m + 8 * (c >> 1) + w.g;
        const int b = 2 * w.t + (c & 1);
        mma_store_one(yb, y_bstride, nf, nfp, n_out, kb, b, o, w.f0 + v,
                      make_float2(acc[v][m][0][c], acc[v][m][2][c]), fwd_scale);
        mma_store_one(yb, y_bstride, nf, nfp, n_out, kb, b + 8, o, w.f0 + v,
                      make_float2(acc[v][m][1][c], acc[v][m][3][c]), fwd_scale);
      }
}

#endif  // FFTMATVEC_MMA
