// Stage 3 for several right-hand sides on tensor cores (NVIDIA sm_80 and newer).
//
// With k right-hand sides the per-frequency product Y[f] = A[f] X[f] (A = Khat[f] or its
// conjugate transpose, X the k vectors) is a small complex GEMM per frequency, and with k = 16
// its arithmetic outgrows the FMA units: the complex128 product needs 64 GFLOP for a Khat of
// 8 GB. These kernels run it as real MMAs, a k-step taking 4 complex reduction rows.
//
//   complex128 (`d`): DMMA m16n8k8 in float64 (mma_f64_k8): 16 rows of Khat are the MMA's 16
//                     rows and its 8 reduction columns are the real parts (columns 0-3) and the
//                     imaginary parts (4-7) of 4 complex reduction rows, so that one MMA by
//                     [Xr; -Xi] gives Yr and one by [Xi; Xr] gives Yi of 8 right-hand sides.
//                     The accumulators are Y itself: 16 doubles per lane for 16 rows and 16
//                     right-hand sides.
//   complex64, float16: the complex product folded into the reduction,
//
//                       [Yr Yi] = [Ar Ai] [[ Xr  Xi]
//                                          [-Xi  Xr]]
//
//                     8 real reduction rows per k-step (the Ar and the Ai columns come from the
//                     same complex value of Khat), and the 16 right-hand sides as N = 32 real
//                     columns: [Yr of b 0-7 | Yr of b 8-15 | Yi of b 0-7 | Yi of b 8-15].
//   complex64  (`s`): either the complex128 kernel's DMMAs on the values converted to float64
//                     (exact), summed in float64 (`c64dmma`: faster than 3xTF32 on every case
//                     compared where the FP64 tensor cores are fast; the conversions run on the
//                     XU pipe, not the FP64 one), or TF32 m16n8k8 with the operands split hi + lo
//                     ("3xTF32": A_hi B_hi + A_hi B_lo + A_lo B_hi), each k-step's sum added in
//                     float32 FMA units (below): GPUs whose FP64 tensor cores are slow.
//   float16    (`h`): TF32 m16n8k8; float16 values are exact in TF32, so only X is split
//                     (2 MMAs); the float32 scales are applied to Y (forward), or come applied
//                     to X (adjoint: see sbgemv.cuh).
//
// Khat and the vectors are read straight from their layouts, (Nd, Nm, Nfp) in blocks of
// frequencies (common.cuh: khat_foff; a tile's F frequencies lie in one block) and (k, n, Nf),
// with no transpose pass: a block copies tiles of them into shared memory with cp.async, several
// stages ahead (sbgemm_pipe_body below). Columns past kb are zero and never stored;
// blockIdx.y splits the reduction (split-K) like the GEMV kernels.
//
// The engine uses these kernels for launches of up to 16 right-hand sides in both directions,
// from a per-storage count where they beat the GEMV kernels (MMA_MIN_KB in fftmatvec/gpu/rules.py,
// docs/benchmarks.md); smaller batches stay on the GEMV kernels (a launch costs about the same
// for any kb: it always computes 16 columns).
//
// Only compiled where FFTMATVEC_MMA is defined (the build and the run-time compiler define it
// for NVIDIA sm_80 and newer); elsewhere the GEMV kernels serve several right-hand sides.
#pragma once
#include "common.cuh"

#if defined(FFTMATVEC_MMA)

// Select<B, T, U>::type: T where B holds, else U (no <type_traits> under the run-time compilers)
template <bool B, typename T, typename U> struct Select { typedef T type; };
template <typename T, typename U> struct Select<false, T, U> { typedef U type; };

// A (16 rows x 8) B (8 x 8) on one MMA: A's columns t and t + 4 are the real and imaginary parts
// of Khat at reduction row t, so lane (g, t) holds them as the complex values of rows g (ag)
// and g + 8 (ag8); b0 and b1 are B's rows t and t + 4 at column g. m16n8k8 in float64 is an
// sm_90 instruction; elsewhere it is the four
// m8n8k4 it stands for (rows g and g + 8, columns 0-3 and 4-7).
// d: d0, d1 = D[g][2t, 2t + 1]; d2, d3 = D[g + 8][2t, 2t + 1].
__device__ __forceinline__ void mma_f64_k8(double (&d)[4], double2 ag, double2 ag8, double b0,
                                           double b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(ag.x), "d"(ag8.x), "d"(ag.y), "d"(ag8.y), "d"(b0), "d"(b1));
#else
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const double2 a = h ? ag8 : ag;
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
        : "+d"(d[2 * h]), "+d"(d[2 * h + 1])
        : "d"(a.x), "d"(b0));
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};"
        : "+d"(d[2 * h]), "+d"(d[2 * h + 1])
        : "d"(a.y), "d"(b1));
  }
#endif
}

// v with its sign bit flipped where `mask` has it (an integer op: the FP64 units are the
// tensor cores' pipe).
__device__ __forceinline__ double flip_sign(double v, unsigned long long mask) {
  return __longlong_as_double(__double_as_longlong(v) ^ mask);
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

// v = hi + lo: hi rounded to TF32, lo = v - hi exactly, passed as is (the tensor cores read
// its leading 10 mantissa bits), so v is carried to about 2^-21 relative.
struct Tf32Pair {
  unsigned hi, lo;
};
__device__ __forceinline__ Tf32Pair tf32_split(float v) {
  const unsigned hi = tf32_round(v);
  return {hi, __float_as_uint(v - __uint_as_float(hi))};
}
// v = hi + lo with hi truncated to TF32 (one AND instead of the rounding's four instructions:
// sm_90 has no single conversion for it): lo is then below 2^-10 |v| instead of 2^-11, and v is
// carried to about 2^-20 relative. The float16 products use it for X, whose rounding error there
// is far below Khat's own (2^-11); complex64 ones keep the rounded split.
__device__ __forceinline__ Tf32Pair tf32_split_trunc(float v) {
  const unsigned hi = __float_as_uint(v) & 0xffffe000u;
  return {hi, __float_as_uint(v - __uint_as_float(hi))};
}
__device__ __forceinline__ unsigned tf32_neg(unsigned v) { return v ^ 0x80000000u; }

// ---- the arithmetic of one k-step (4 complex reduction rows), shared by both kernels --------

// complex128: per 16-row tile, reduction rows t, frequency v and the 8 right-hand sides of
// half h, Yr += Ar Xr - s Ai Xi and Yi += Ar Xi + s Ai Xr (s = 1, or -1 for the adjoint's
// conj(Khat)) as two MMAs, B = [Xr; -s Xi] and [Xi; s Xr]. a[m][j][v]: Khat at row 16m + 8j + g,
// reduction row t; x[h][v]: right-hand side g + 8h, row t. acc[v][m][2h]: Yr, [2h + 1]: Yi
// (mma_f64_k8's d). neg_r / neg_i: the sign bit where -s / s is negative (both passed: deriving
// one from the other here made the few-row tile, at its register bound already, spill).
template <int MT, int V>
__device__ __forceinline__ void mma_kstep_f64(double (&acc)[V][MT][4][4],
                                              const double2 (&a)[MT][2][V],
                                              const double2 (&x)[2][V],
                                              unsigned long long neg_r, unsigned long long neg_i) {
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const double xr = x[h][v].x, xi = x[h][v].y;
      const double br = flip_sign(xi, neg_r), bi = flip_sign(xr, neg_i);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma_f64_k8(acc[v][m][2 * h], a[m][0][v], a[m][1][v], xr, br);
        mma_f64_k8(acc[v][m][2 * h + 1], a[m][0][v], a[m][1][v], xi, bi);
      }
    }
}

// complex64 and float16 storage on TF32 m16n8k8.
// A: a0 (row g, col t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4), columns 0-3 the Ar
// part and 4-7 the Ai part of 4 complex rows; B: b0 (row t, col g), b1 (row t + 4, col g);
// C: c0, c1 (row g, cols 2t, 2t + 1), c2, c3 (row g + 8).
//   n-tile 0/1 (Yr of b = g / g + 8): b0 = Xr, b1 = -Xi;  n-tile 2/3 (Yi): b0 = Xi, b1 = Xr.
// a[m][h][v]: Khat at row 16m + 8h + g, reduction row t.
template <bool SPLIT_A, int MT, int V>
__device__ __forceinline__ void mma_kstep_tf32(float (&acc)[V][MT][4][4],
                                               const float2 (&a)[MT][2][V],
                                               const float2 (&x)[2][V], float sgn) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    Tf32Pair xr[2], xi[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (SPLIT_A) {
        xr[h] = tf32_split(x[h][v].x);
        xi[h] = tf32_split(x[h][v].y);
      } else {  // float16 storage
        xr[h] = tf32_split_trunc(x[h][v].x);
        xi[h] = tf32_split_trunc(x[h][v].y);
      }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      const float f0r = a[m][0][v].x, f1r = a[m][1][v].x;
      const float f0i = sgn * a[m][0][v].y, f1i = sgn * a[m][1][v].y;
      Tf32Pair a0, a1, a2, a3;
      if constexpr (SPLIT_A) {
        a0 = tf32_split(f0r);
        a1 = tf32_split(f1r);
        a2 = tf32_split(f0i);
        a3 = tf32_split(f1i);
      } else {  // float16 values are exact in TF32
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
        if constexpr (SPLIT_A) {
          // into a fresh accumulator: the tensor cores truncate when they add, which over a
          // reduction of thousands of rows costs 1e-4 relative, so complex64 products
          // accumulate in the float32 FMA units (rounded to nearest), one k-step at a time
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_tf32(part, a0.hi, a1.hi, a2.hi, a3.hi, b0.lo, b1.lo);
          mma_tf32(part, a0.lo, a1.lo, a2.lo, a3.lo, b0.hi, b1.hi);
          mma_tf32(part, a0.hi, a1.hi, a2.hi, a3.hi, b0.hi, b1.hi);
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[v][m][n][c] += part[c];
        } else {  // float16 storage: its own error (1e-3) dwarfs the truncation
          mma_tf32(acc[v][m][n], a0.hi, a1.hi, a2.hi, a3.hi, b0.lo, b1.lo);
          mma_tf32(acc[v][m][n], a0.hi, a1.hi, a2.hi, a3.hi, b0.hi, b1.hi);
        }
      }
    }
  }
}

// Where a block and a lane of the tensor-core kernel store: the block's first output row and
// frequency, the lane's MMA coordinates (g, t), its warp's first row and frequency in the
// block, its thread index, and whether its warp has rows.
struct PipePlace {
  i64 o_blk, f_blk;
  int g, t, wrow, wf, tid;
  bool busy;
};

// The float64 accumulators of a block, stored through shared memory (free once the
// pipeline is drained): acc[v][m][2h] and [2h + 1] are Yr and Yi (mma_kstep_f64). A lane holds
// one 16-byte value per (vector, row), so stored directly every lane would write its own 16
// bytes; staged as tile[b][row][f] (rows RS = F + 1 apart where that fits: no bank conflicts
// between the lanes g of one write), the block stores runs of F contiguous frequencies per
// (vector, row), which made the complex128 adjoints with 16 vectors faster than direct stores.
// NB vectors at a time: 16, or 8 in two passes where the tile of 16 would not fit the
// pipeline's shared memory (complex64 storage, whose stages are smaller).
template <typename TOut, int MT, int V, int R, int F, int RS, int NT, int NB>
__device__ __forceinline__ void mma_store_f64_staged(
    const double (&acc)[V][MT][4][4], unsigned char* smem, TOut* y, i64 y_bstride, i64 nf,
    i64 n_out, int kb, const PipePlace& p) {
  const i64 o_blk = p.o_blk, f_blk = p.f_blk;
  const int g = p.g, t = p.t, wrow = p.wrow, wf = p.wf, tid = p.tid;
  double2* tile = reinterpret_cast<double2*>(smem);
#pragma unroll
  for (int q = 0; q < 16 / NB; ++q) {  // vectors NB q .. NB q + NB - 1
    if (q * NB >= kb) break;          // uniform: kb is a kernel argument
    if (q > 0) __syncthreads();       // the first pass's tile has been stored
    if (p.busy) {
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (NB == 8 && h != q) continue;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int b = 2 * t + (c & 1) + 8 * h - NB * q,
                        row = wrow + 16 * m + 8 * (c >> 1) + g;
              tile[(b * R + row) * RS + wf + v] =
                  make_double2(acc[v][m][2 * h][c], acc[v][m][2 * h + 1][c]);
            }
          }
    }
    __syncthreads();
    for (int e = tid; e < NB * R * F; e += NT) {
      const int f = e % F, row = (e / F) % R, b = e / (F * R);
      const i64 o = o_blk + row, ff = f_blk + f;
      if (NB * q + b < kb && o < n_out && ff < nf)
        y[(i64)(NB * q + b) * y_bstride + o * nf + ff] =
            ccast<TOut>(tile[(b * R + row) * RS + f]);
    }
  }
}

// The float32 accumulators of a block (complex64 and float16 storage), stored through shared
// memory like the complex128 ones: a lane holds one 8-byte value per (vector, row) and
// frequency, 32 scattered pieces per store instruction when stored directly. Staged as
// tile[b][row][f] for the 8 vectors of one half of the 16 at a time (so that every tile fits
// the pipeline's shared memory), rows RS = F + 1 and vectors BS = R RS + PAD apart: the lanes
// of one write (rows g, vectors 2t + i) then fall on distinct 8-byte slots of a 128-byte line
// in each half-warp. The block then stores runs of F contiguous frequencies per (vector, row),
// times the forward float16 row scale.
template <typename TOut, int MT, int V, int R, int F, int NT>
__device__ __forceinline__ void mma_store_tf32_staged(
    const float (&acc)[V][MT][4][4], unsigned char* smem, TOut* y, i64 y_bstride, i64 nf,
    i64 nfp, i64 n_out, int kb, const PipePlace& p, const float* __restrict__ fwd_scale) {
  const i64 o_blk = p.o_blk, f_blk = p.f_blk;
  const int g = p.g, t = p.t, wrow = p.wrow, wf = p.wf, tid = p.tid;
  constexpr int RS = F + 1, BS = R * RS + ((2 - R * RS) % 8 + 8) % 8;  // BS = 2 (mod 8)
  float2* tile = reinterpret_cast<float2*>(smem);
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // vectors 8h .. 8h + 7
    if (8 * h >= kb) break;       // uniform: kb is a kernel argument
    if (h > 0) __syncthreads();   // the first half's tile has been stored
    if (p.busy) {
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int b = 2 * t + (c & 1), row = wrow + 16 * m + 8 * (c >> 1) + g;
            tile[b * BS + row * RS + wf + v] = make_float2(acc[v][m][h][c], acc[v][m][2 + h][c]);
          }
    }
    __syncthreads();
    for (int e = tid; e < 8 * R * F; e += NT) {
      const int f = e % F, row = (e / F) % R, b = e / (F * R);
      const i64 o = o_blk + row, ff = f_blk + f;
      if (8 * h + b < kb && o < n_out && ff < nf) {
        float2 val = tile[b * BS + row * RS + f];
        if (fwd_scale != nullptr) {
          const float s = fwd_scale[o * nfp + ff];
          val.x *= s;
          val.y *= s;
        }
        y[(i64)(8 * h + b) * y_bstride + o * nf + ff] = ccast<TOut>(val);
      }
    }
  }
}

// The same accumulators stored directly, each lane its own 8-byte values: forward products,
// whose outputs are few (Nd rows), and the tiles of 512 threads, whose 128 registers the float16
// forward tile already uses to the last (it serves forward products only, by default).
template <typename TOut, int MT, int V>
__device__ __forceinline__ void mma_store_tf32(const float (&acc)[V][MT][4][4], TOut* y,
                                               i64 y_bstride, i64 nf, i64 nfp, i64 n_out,
                                               int kb, const PipePlace& p,
                                               const float* __restrict__ fwd_scale) {
  if (!p.busy) return;
  const i64 o0 = p.o_blk + p.wrow, f0 = p.f_blk + p.wf;
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const i64 o = o0 + 16 * m + 8 * (c >> 1) + p.g, f = f0 + v;
        if (o >= n_out || f >= nf) continue;
        const float s = fwd_scale != nullptr ? fwd_scale[o * nfp + f] : 1.0f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int b = 2 * p.t + (c & 1) + 8 * h;
          if (b < kb)
            y[(i64)b * y_bstride + o * nf + f] =
                ccast<TOut>(make_float2(s * acc[v][m][h][c], s * acc[v][m][2 + h][c]));
        }
      }
}

__device__ __forceinline__ void zero_fill(double& v) { v = 0.0; }
__device__ __forceinline__ void zero_fill(float& v) { v = 0.0f; }
template <typename A, int N>
__device__ __forceinline__ void zero_fill(A (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) zero_fill(acc[i]);
}

// ---- the kernel: tiles staged through shared memory by cp.async, NS stages deep ------------
//
// A block owns R = WR x MT x 16 output rows and F = WF x V frequencies; per stage it
// copies KS reduction rows of Khat (R x KS segments of F contiguous frequencies) and of the 16
// vectors (16 x KS segments) into shared memory with cp.async, NS - 1 stages ahead of the
// tensor cores, so that enough bytes are in flight to stream Khat at the memory's rate (loading
// the MMA fragments straight from global memory, one k-step ahead in registers, was bound by
// latency well short of it). Segments are stored as
// 16-byte chunks, the chunk index XOR-swizzled per (row, reduction row) so that the eight
// lanes of each 16-byte read phase (rows g, g + 1 x reduction rows t = 0..3) hit distinct
// banks. Rows past n_out, reduction rows past the split's end, frequencies past Khat's padded
// length and vectors past kb are zero-filled by the copy itself (src-size 0).

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
// Copy BYTES (8 or 16) to shared memory, or zeros when !ok.
template <int BYTES>
__device__ __forceinline__ void cp_async(unsigned dst, const void* src, bool ok) {
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src),
                 "r"(ok ? 8 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// Byte offset of element e of segment (row, r) in a tile of KS reduction rows whose segments
// hold NCH 16-byte chunks of elements of E bytes.
template <int NCH, int KS, int E>
__device__ __forceinline__ int tile_offset(int row, int r, int e) {
  int key = 0;
  if constexpr (NCH >= 8) key = ((row & 1) << 2) | (r & 3);
  else if constexpr (NCH == 4) key = ((row & 1) << 1) | ((r >> 1) & 1);
  else if constexpr (NCH == 2) key = row & 1;
  constexpr int PER = 16 / E;
  return ((row * KS + r) * NCH + ((e / PER) ^ key)) * 16 + (e % PER) * E;
}

// N consecutive elements (within one 16-byte chunk) from shared memory.
template <typename T, int N>
__device__ __forceinline__ void lds(const unsigned char* p, T* out) {
  constexpr int B = N * (int)sizeof(T);
  static_assert(B == 4 || B == 8 || B == 16, "shared-memory reads of 4, 8 or 16 bytes");
  if constexpr (B == 16) *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(p);
  else if constexpr (B == 8) *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(p);
  else *reinterpret_cast<unsigned*>(out) = *reinterpret_cast<const unsigned*>(p);
}
// V consecutive elements from frequency e of segment (row, r), as N-wide reads.
template <typename T, int V, int NCH, int KS>
__device__ __forceinline__ void lds_run(const unsigned char* tile, int row, int r, int e,
                                        T (&out)[V]) {
  constexpr int PER = 16 / (int)sizeof(T);
  constexpr int N = V < PER ? V : PER;
#pragma unroll
  for (int v = 0; v < V; v += N)
    lds<T, N>(tile + tile_offset<NCH, KS, (int)sizeof(T)>(row, r, e + v), out + v);
}

template <typename Store, typename TIn, int RPT, int WR, int MT, int V, int WF, int KS>
struct PipeTile {
  typedef typename Store::elem EA;
  static constexpr int R = WR * MT * RPT, F = WF * V;
  static constexpr int NCH_A = F * (int)sizeof(EA) / 16, NCH_X = F * (int)sizeof(TIn) / 16;
  static_assert(NCH_A * 16 == F * (int)sizeof(EA) && NCH_A >= 2, "Khat runs of 32+ bytes");
  static_assert(NCH_X * 16 == F * (int)sizeof(TIn) && NCH_X >= 2, "vector runs of 32+ bytes");
  static_assert(KS % 4 == 0, "whole k-steps per stage");
  static constexpr int A_BYTES = R * KS * NCH_A * 16, X_BYTES = 16 * KS * NCH_X * 16;
  static constexpr int BYTES = A_BYTES + X_BYTES;
};

// A thread's share of copying one operand's stage: units of UB bytes (16-byte chunks of Khat,
// single vector elements) of elements T, UNITS of them per segment, ROWS x KS segments per
// stage, NT threads.
// Each thread's units keep the same position in their segment and the same reduction row, and
// lie ROW_STEP tile rows apart, so everything but the stage's advance along the reduction is
// computed once: a copy is a pointer bump, a mask test and the cp.async.
template <typename T, int UB, int UNITS, int ROWS, int KS, int NCH, int NT>
struct PipeCopy {
  static constexpr int EPU = UB / (int)sizeof(T);  // elements per unit
  static constexpr int PER_ROW = UNITS * KS, TOTAL = ROWS * PER_ROW;
  static_assert(NT % PER_ROW == 0 && (NT / PER_ROW) % 2 == 0,
                "a block's threads cover whole tile rows, an even number at a time");
  static constexpr int ROW_STEP = NT / PER_ROW, ITERS = (TOTAL + NT - 1) / NT;
  static_assert(ITERS <= 32, "one mask bit per unit");
  const unsigned char* g;  // global address of the first unit, current stage
  const void* base;        // a valid address for the zero-filling copies
  i64 row_bytes;           // global bytes between units (ROW_STEP rows apart)
  unsigned s;              // shared offset of the first unit in a stage
  unsigned ok;             // bit j: unit j is in the tile and in bounds (rows, frequencies)
  int rl;                  // reduction row within the stage

  // base: the operand; row0, n_rows: its first tile row and its row count; rs, ks: elements
  // between rows and between reduction rows; r0: the first reduction row; f0, f_limit: the
  // tile's first frequency and the operand's row length; fsh, sb: its frequency blocks
  // (khat_foff; KHAT_ONE_BLOCK and 0 for one block).
  __device__ __forceinline__ void init(int tid, const T* base, i64 row0, i64 n_rows, i64 rs,
                                       i64 ks, i64 r0, i64 f0, i64 f_limit, int fsh, i64 sb) {
    const int u = tid % UNITS, seg = tid / UNITS, row = seg / KS;
    rl = seg % KS;
    this->base = base;
    const i64 f = f0 + (i64)u * EPU;
    g = reinterpret_cast<const unsigned char*>(base + (row0 + row) * rs + (r0 + rl) * ks +
                                               khat_foff(f, fsh, sb));
    row_bytes = ROW_STEP * rs * (i64)sizeof(T);
    s = tile_offset<NCH, KS, UB>(row, rl, u);
    ok = 0;
#pragma unroll
    for (int j = 0; j < ITERS; ++j)
      if (j * NT + tid < TOTAL && row0 + row + j * ROW_STEP < n_rows && f < f_limit) ok |= 1u << j;
  }
  // Copy this stage into `stage` (reduction rows past r_left zero-filled), then step
  // stage_bytes to the next.
  __device__ __forceinline__ void copy(unsigned stage, i64 r_left, i64 stage_bytes) {
    const bool r_ok = rl < r_left;
#pragma unroll
    for (int j = 0; j < ITERS; ++j) {
      if (TOTAL % NT != 0 && j * NT + (int)(threadIdx.y * 32 + threadIdx.x) >= TOTAL) break;
      const bool on = r_ok && ((ok >> j) & 1u);
      cp_async<UB>(stage + s + j * ROW_STEP * KS * NCH * 16,
                   on ? (const void*)(g + j * row_bytes) : base, on);
    }
    g += stage_bytes;
  }
};

template <typename Store, typename TIn, typename TOut, int MT, int V, int WR, int WF, int KS,
          int NS>
__device__ __forceinline__ void sbgemm_pipe_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk, int kb, i64 x_bstride,
    i64 y_bstride, i64 y_split_stride, int freq_major) {
  constexpr bool f64 = Store::f64_mma;  // complex128, and complex64 as c64dmma
  typedef typename Select<f64, double, typename Store::real>::type Real;
  typedef typename Complex<Real>::type C;
  constexpr int RPT = 16;  // rows of an m-tile
  typedef PipeTile<Store, TIn, RPT, WR, MT, V, WF, KS> Tile;
  unsigned char* smem = reinterpret_cast<unsigned char*>(fftmatvec_dynamic_smem);

  // Consecutive blocks take the row tiles of one frequency tile (they share its vector tiles
  // in L2: forward products, whose vectors are large), or with freq_major the frequency tiles
  // of one row tile (a round of blocks then reads each row's frequencies as one run: adjoints,
  // whose rows are many and vectors small).
  const i64 n_oblocks = (n_out + Tile::R - 1) / Tile::R;
  const i64 n_fblocks = (nf + Tile::F - 1) / Tile::F;
  const i64 o_blk = (freq_major ? (i64)blockIdx.x / n_fblocks : (i64)blockIdx.x % n_oblocks) * Tile::R;
  const i64 f_blk = (freq_major ? (i64)blockIdx.x % n_fblocks : (i64)blockIdx.x / n_oblocks) * Tile::F;
  const int g = threadIdx.x >> 2, t = threadIdx.x & 3;
  const int wrow = (threadIdx.y % WR) * MT * RPT, wf = (threadIdx.y / WR) * V;
  // whole warps idle on rows past n_out (uniform per warp, as mma.sync needs); their other
  // m-tiles past n_out are computed on zeros (skipping them, tried, made the loop slower)
  const bool busy = o_blk + wrow < n_out;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
  const i64 nsteps = r_end > r_begin ? (r_end - r_begin + KS - 1) / KS : 0;
  const Real sgn = adjoint ? (Real)-1 : (Real)1;  // conj(Khat) for the adjoint: negate Ai
  // complex128: the sign bits of -sgn and sgn (mma_kstep_f64)
  const unsigned long long sign_bit = 1ull << 63;
  const unsigned long long neg_r = adjoint ? 0ull : sign_bit, neg_i = adjoint ? sign_bit : 0ull;

  Real acc[V][MT][4][4];
  zero_fill(acc);

  // Khat: 16-byte chunks of (row, reduction row) runs; vectors: single elements (their rows are
  // nf long, not padded, so complex64 ones are only 8-byte aligned).
  constexpr int NT = 32 * WR * WF;
  typedef typename Store::elem EA;
  PipeCopy<EA, 16, Tile::NCH_A, Tile::R, KS, Tile::NCH_A, NT> ca;
  PipeCopy<TIn, (int)sizeof(TIn), Tile::F, 16, KS, Tile::NCH_X, NT> cx;
  const int tid = threadIdx.y * 32 + threadIdx.x;
  ca.init(tid, kh, o_blk, n_out, so, sr, r_begin, f_blk, nfp, fsh, sb);
  cx.init(tid, x, 0, kb, x_bstride, nf, r_begin, f_blk, nf, KHAT_ONE_BLOCK, 0);
  const i64 a_step = KS * sr * (i64)sizeof(EA), x_step = KS * nf * (i64)sizeof(TIn);
  const unsigned smem0 = smem_u32(smem);

#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nsteps) {
      ca.copy(smem0 + s * Tile::BYTES, r_end - r_begin - s * KS, a_step);
      cx.copy(smem0 + s * Tile::BYTES + Tile::A_BYTES, r_end - r_begin - s * KS, x_step);
    }
    cp_async_commit();
  }
  for (i64 it = 0; it < nsteps; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage `it` has landed for every thread; stage it - 1 is consumed
    const i64 next = it + NS - 1;
    if (next < nsteps) {
      const unsigned st = smem0 + (unsigned)(next % NS) * Tile::BYTES;
      ca.copy(st, r_end - r_begin - next * KS, a_step);
      cx.copy(st + Tile::A_BYTES, r_end - r_begin - next * KS, x_step);
    }
    cp_async_commit();
    if (!busy) continue;
    const unsigned char* sa = smem + (it % NS) * Tile::BYTES;
    const unsigned char* sx = sa + Tile::A_BYTES;
#pragma unroll
    for (int kk = 0; kk < KS; kk += 4) {
      const int rl = kk + t;
      TIn xin[2][V];
      C xv[2][V];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        lds_run<TIn, V, Tile::NCH_X, KS>(sx, g + 8 * h, rl, wf, xin[h]);
#pragma unroll
        for (int v = 0; v < V; ++v) xv[h][v] = ccast<C>(xin[h][v]);
      }
      if constexpr (f64) {
        double2 a[MT][2][V];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if constexpr (sizeof(EA) == 16) {
              lds_run<double2, V, Tile::NCH_A, KS>(sa, wrow + 16 * m + 8 * j + g, rl, wf,
                                                   a[m][j]);
            } else {  // complex64 storage, exact in float64
              EA raw[V];
              lds_run<EA, V, Tile::NCH_A, KS>(sa, wrow + 16 * m + 8 * j + g, rl, wf, raw);
#pragma unroll
              for (int v = 0; v < V; ++v) a[m][j][v] = ccast<double2>(Store::expand(raw[v]));
            }
          }
        mma_kstep_f64<MT, V>(acc, a, xv, neg_r, neg_i);
      } else {
        float2 a[MT][2][V];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            typename Store::elem raw[V];
            lds_run<typename Store::elem, V, Tile::NCH_A, KS>(sa, wrow + 16 * m + 8 * h + g, rl,
                                                            wf, raw);
#pragma unroll
            for (int v = 0; v < V; ++v) a[m][h][v] = Store::expand(raw[v]);
          }
        mma_kstep_tf32<!Store::exact_tf32, MT, V>(acc, a, xv, sgn);
      }
    }
  }
  cp_async_wait<0>();
  // the stores' place, from the values the loop kept in registers (recomputing it here from the
  // special registers, read by volatile asm, took the float16 forward tile's main loop from 190
  // to 236 instructions)
  const PipePlace q = {o_blk, f_blk, g, t, wrow, wf, tid, busy};
  TOut* y_split = y + (i64)blockIdx.y * y_split_stride;
  if constexpr (f64) {  // a lane's outputs are one 16-byte value per (vector, row): stage them
    // all 16 vectors at once where they fit the pipeline's shared memory, else 8 at a time
    constexpr int NB = 16 * Tile::R * Tile::F * 16 <= NS * Tile::BYTES ? 16 : 8;
    constexpr int RS = NB * Tile::R * (Tile::F + 1) * 16 <= NS * Tile::BYTES ? Tile::F + 1 : Tile::F;
    static_assert(NB * Tile::R * RS * 16 <= NS * Tile::BYTES,
                  "the staged store fits the pipeline's shared memory");
    __syncthreads();  // every warp has read its last stage
    mma_store_f64_staged<TOut, MT, V, Tile::R, Tile::F, RS, NT, NB>(acc, smem, y_split, y_bstride,
                                                                    nf, n_out, kb, q);
  } else {
    const float* fwd_scale = (scale != nullptr && !adjoint) ? scale : nullptr;
    if constexpr (NT <= 256) {
      if (adjoint) {  // Nm output rows: one float2 per (vector, row) and frequency, staged
        static_assert(8 * (Tile::R * (Tile::F + 1) + 8) * 8 <= NS * Tile::BYTES,
                      "the staged store fits the pipeline's shared memory");
        __syncthreads();  // every warp has read its last stage
        mma_store_tf32_staged<TOut, MT, V, Tile::R, Tile::F, NT>(
            acc, smem, y_split, y_bstride, nf, nfp, n_out, kb, q, fwd_scale);
        return;
      }
    }
    mma_store_tf32<TOut, MT, V>(acc, y_split, y_bstride, nf, nfp, n_out, kb, q, fwd_scale);
  }
}

#endif  // FFTMATVEC_MMA
