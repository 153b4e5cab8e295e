// Stage 3 for several right-hand sides with float16 storage (`h`) on float16 tensor cores
// (mma.sync m16n8k16, float32 accumulation; NVIDIA sm_80 and newer).
//
// Khat is already float16: its values go into the MMA as they are stored. The real and
// imaginary parts of 8 complex rows are the MMA's 16 rows (as in the complex128 kernel of
// sbgemm.cuh), so an A fragment is two byte permutes of the stored words per register, with no
// conversion and no signs; 16 reduction rows make one k-step. The vectors are split into float16
// pairs, X = (hi + lo) 2^-e, which carry about 22 bits: far below Khat's own rounding (2^-11).
// The exponent e is per vector and frequency, chosen so that the largest |Re| or |Im| seen so
// far in the block's share of the reduction lands in [2^14, 2^15): nothing overflows float16,
// and values down to 2^-18 of that largest one keep their 22 bits (smaller ones their absolute
// precision). e only decreases as the reduction goes on; the MMA lanes scale their accumulators
// by the change when it does, and by 2^-e when they store.
//
// Each stage of KS reduction rows:
//   - Khat's tile (R rows x KS reduction rows x F frequencies) is copied into shared memory by
//     cp.async, NS - 1 stages ahead, in 8-byte units (two frequencies) laid out by HalfTileA;
//   - the vectors' tile (16 x KS x F) is read from global memory into registers one stage
//     ahead, each vector column (b, f) by TPC threads, and converted once per block into
//     "planes": for every (f, b) and every lane t of an MMA quad, the eight float16 values that
//     lane's B fragments take (hi and lo of Re and Im, reduction rows 2t, 2t + 1, 2t + 8, 2t + 9),
//     32 bytes, so that a lane reads its fragments with two 16-byte loads;
//   - every warp then runs its 8 MMAs per 8-row tile, frequency and k-step: [Kr; Ki] times Xr and
//     Xi, hi and lo, for right-hand sides 0-7 and 8-15.
// The store combines the products into Y = A X (forward) or A^H X (adjoint, conj(Khat)) and
// reuses the TF32 kernels' stores (sbgemm.cuh), with the forward row scales.
//
// Argument layouts and split-K are those of sbgemm_pipe_body. Only compiled where FFTMATVEC_MMA
// is defined.
#pragma once
#include "common.cuh"
#include "sbgemm.cuh"

#if defined(FFTMATVEC_MMA)

__device__ __forceinline__ void mma_f16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                        unsigned a3, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (a, b) rounded to float16 and packed, a in the low half.
__device__ __forceinline__ unsigned pack_half2(float a, float b) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
}

// Two values already scaled into float16's range, split into float16 hi + lo (packed pairs).
__device__ __forceinline__ void split_half2(float a, float b, unsigned& hi, unsigned& lo) {
  hi = pack_half2(a, b);
  const float2 h = unpack_half2(hi);
  lo = pack_half2(a - h.x, b - h.y);
}

// 2^k as a float, for -126 <= k <= 127.
__device__ __forceinline__ float pow2i(int k) { return __int_as_float((k + 127) << 23); }

// Byte offset of 8-byte unit u (frequencies 2u, 2u + 1) of segment (row, r) in a Khat tile of
// KS reduction rows and F frequencies. Units are XOR-swizzled within each 128-byte line so that
// the 16 lanes of each 8-byte read phase (rows g of 4 consecutive values, reduction rows 2t + c,
// t = 0..3) hit distinct banks: the key takes row & 3 and bits 1-2 of the reduction row, which
// are the same across a line (checked over F = 8..64 by brute force).
template <int F, int KS>
struct HalfTileA {
  static constexpr int ROW_PERIOD = 4;
  static_assert(F % 8 == 0 && KS % 4 == 0, "Khat tiles of whole 32-byte runs, 4 rows at a time");
  __device__ static __forceinline__ int at(int row, int r, int u) {
    const int l = (row * KS + r) * (F / 2) + u;
    const int key = (row & 3) | (((r >> 1) & 3) << 2);
    return ((l & ~15) | ((l & 15) ^ key)) * 8;
  }
};

template <typename TIn, typename TOut, int MT, int V, int WR, int WF, int KS, int NS>
struct HalfMmaTile {
  static constexpr int R = 8 * MT * WR, F = V * WF, NT = 32 * WR * WF, NK = KS / 16;
  static constexpr int TPC = NT / (16 * F);       // threads per vector column
  static constexpr int CHUNKS = 4 * NK / TPC;     // quads of reduction rows per thread
  static constexpr int A_BYTES = R * KS * F * 4;  // one stage of Khat
  static constexpr int P_BYTES = NK * F * 16 * 4 * 32, E_BYTES = F * 16 * 4;
  static constexpr int BYTES = NS * A_BYTES + P_BYTES + E_BYTES;
  static_assert(V == 2 && MT % 2 == 0 && KS % 16 == 0, "2 frequencies, pairs of 8-row tiles");
  static_assert(TPC * 16 * F == NT && 4 * NK % TPC == 0, "whole vector columns per thread");
};

template <typename TIn, typename TOut, int MT, int V, int WR, int WF, int KS, int NS>
__device__ __forceinline__ void sbgemmh_body(
    const unsigned* __restrict__ kh, const float* __restrict__ scale, const TIn* __restrict__ x,
    TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red, i64 so, i64 sr, int adjoint,
    i64 red_chunk, int kb, i64 x_bstride, i64 y_bstride, i64 y_split_stride, int freq_major) {
  typedef HalfMmaTile<TIn, TOut, MT, V, WR, WF, KS, NS> Tile;
  constexpr int R = Tile::R, F = Tile::F, NT = Tile::NT, NK = Tile::NK, TPC = Tile::TPC;
  constexpr int CHUNKS = Tile::CHUNKS;
  unsigned char* smem = reinterpret_cast<unsigned char*>(fftmatvec_dynamic_smem);
  unsigned char* planes = smem + NS * Tile::A_BYTES;
  int* etab = reinterpret_cast<int*>(planes + Tile::P_BYTES);

  const i64 n_oblocks = (n_out + R - 1) / R;
  const i64 n_fblocks = (nf + F - 1) / F;
  const i64 o_blk = (freq_major ? (i64)blockIdx.x / n_fblocks : (i64)blockIdx.x % n_oblocks) * R;
  const i64 f_blk = (freq_major ? (i64)blockIdx.x % n_fblocks : (i64)blockIdx.x / n_oblocks) * F;
  const int g = threadIdx.x >> 2, t = threadIdx.x & 3;
  const int wrow = (threadIdx.y % WR) * MT * 8, wf = (threadIdx.y / WR) * V;
  const bool busy = o_blk + wrow < n_out;  // whole warps idle on rows past n_out
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
  const i64 nsteps = r_end > r_begin ? (r_end - r_begin + KS - 1) / KS : 0;
  const float sgn = adjoint ? -1.0f : 1.0f;
  const int tid = threadIdx.y * 32 + threadIdx.x;

  // Khat's stages: 8-byte units (two frequencies) of (row, reduction row) segments
  PipeCopy<unsigned, 8, F / 2, R, KS, F / 4, NT, HalfTileA<F, KS>> ca;
  ca.init(tid, kh, o_blk, n_out, so, sr, r_begin, f_blk, nfp);
  const i64 a_step = KS * sr * (i64)sizeof(unsigned);
  const unsigned smem0 = smem_u32(smem);

  // This thread's vector column (b, f) and its quads of reduction rows: quad j = jj TPC + part
  // holds rows 16 (j / 4) + {2q, 2q + 1, 2q + 8, 2q + 9}, q = j % 4, of the stage.
  const int col = tid / TPC, part = tid % TPC;
  const int cb = col / F, cf = col % F;
  const bool col_ok = cb < kb && f_blk + cf < nf;
  const TIn* xcol = x + (i64)cb * x_bstride + f_blk + cf;
  int e_col = 126;  // the column's running exponent
  float2 xv[CHUNKS][4];
  auto load_x = [&](i64 it) {  // the column's values of stage it (zeros past the split's end)
    const i64 r0 = r_begin + it * KS;
#pragma unroll
    for (int jj = 0; jj < CHUNKS; ++jj) {
      const int j = jj * TPC + part, q = j % 4, k0 = 16 * (j / 4);
      const int rows[4] = {k0 + 2 * q, k0 + 2 * q + 1, k0 + 2 * q + 8, k0 + 2 * q + 9};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const i64 r = r0 + rows[i];
        xv[jj][i] = (col_ok && r < r_end) ? ccast<float2>(xcol[r * nf]) : make_float2(0.f, 0.f);
      }
    }
  };

  float acc[V][MT][4][4];  // [v][m][n][c]: n = 0, 1: times Xr of vectors 0-7, 8-15; 2, 3: Xi
  zero_fill(acc);
  int e_lane[V][2][2];  // the exponents of this lane's columns: vectors 2t + i + 8h, per v
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int h = 0; h < 2; ++h) e_lane[v][h][0] = e_lane[v][h][1] = 126;

#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nsteps) ca.copy(smem0 + s * Tile::A_BYTES, r_end - r_begin - s * KS, a_step);
    cp_async_commit();
  }
  if (nsteps > 0) load_x(0);
  for (i64 it = 0; it < nsteps; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // Khat's stage `it` has landed; every warp is done with the last planes
    const i64 next = it + NS - 1;
    if (next < nsteps)
      ca.copy(smem0 + (unsigned)(next % NS) * Tile::A_BYTES, r_end - r_begin - next * KS, a_step);
    cp_async_commit();

    // the vectors' stage into planes, with the columns' exponents
    float mx = 0.0f;
#pragma unroll
    for (int jj = 0; jj < CHUNKS; ++jj)
#pragma unroll
      for (int i = 0; i < 4; ++i) mx = fmaxf(mx, fmaxf(fabsf(xv[jj][i].x), fabsf(xv[jj][i].y)));
#pragma unroll
    for (int o = 1; o < TPC; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (mx > 0.0f) {
      const int en = 141 - ((__float_as_int(mx) >> 23) & 0xff);  // mx 2^en in [2^14, 2^15)
      e_col = en < e_col ? en : e_col;
    }
    const float sc = pow2i(e_col);
#pragma unroll
    for (int jj = 0; jj < CHUNKS; ++jj) {
      const int j = jj * TPC + part, q = j % 4, ks = j / 4;
      unsigned re_hi[2], re_lo[2], im_hi[2], im_lo[2];
#pragma unroll
      for (int p = 0; p < 2; ++p) {  // rows 2q, 2q + 1 (p = 0) and 2q + 8, 2q + 9 (p = 1)
        const float2 u = xv[jj][2 * p], w = xv[jj][2 * p + 1];
        split_half2(u.x * sc, w.x * sc, re_hi[p], re_lo[p]);
        split_half2(u.y * sc, w.y * sc, im_hi[p], im_lo[p]);
      }
      unsigned char* entry = planes + (((ks * F + cf) * 16 + cb) * 4 + q) * 32;
      *reinterpret_cast<uint4*>(entry + 16 * (cb & 1)) =
          make_uint4(re_hi[0], re_hi[1], re_lo[0], re_lo[1]);
      *reinterpret_cast<uint4*>(entry + 16 * (1 - (cb & 1))) =
          make_uint4(im_hi[0], im_hi[1], im_lo[0], im_lo[1]);
    }
    if (part == 0) etab[cf * 16 + cb] = e_col;
    if (it + 1 < nsteps) load_x(it + 1);  // in flight while the tensor cores run
    __syncthreads();  // the planes of stage `it` are written
    if (!busy) continue;

    // the lane's columns whose exponent dropped: their sums so far scaled by the change
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int2 en = *reinterpret_cast<const int2*>(etab + (wf + v) * 16 + 8 * h + 2 * t);
        const int ne[2] = {en.x, en.y};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (ne[i] != e_lane[v][h][i]) {
            const int d = ne[i] - e_lane[v][h][i];
            const float fac = d < -126 ? 0.0f : pow2i(d);
            e_lane[v][h][i] = ne[i];
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
              for (int qq = 0; qq < 2; ++qq) {
                acc[v][m][2 * qq + h][i] *= fac;
                acc[v][m][2 * qq + h][2 + i] *= fac;
              }
          }
        }
      }

    const unsigned char* sa = smem + (it % NS) * Tile::A_BYTES;
#pragma unroll
    for (int ks = 0; ks < NK; ++ks) {
      // B fragments: per frequency and vector group h, {Xr hi, Xr lo} and {Xi hi, Xi lo}
      uint4 bre[V][2], bim[V][2];
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const unsigned char* entry =
              planes + (((ks * F + wf + v) * 16 + 8 * h + g) * 4 + t) * 32;
          bre[v][h] = *reinterpret_cast<const uint4*>(entry + 16 * (g & 1));
          bim[v][h] = *reinterpret_cast<const uint4*>(entry + 16 * (1 - (g & 1)));
        }
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int row = wrow + 8 * m + g;
        const int rl = 16 * ks + 2 * t;
        uint2 w[4];  // Khat at reduction rows rl, rl + 1, rl + 8, rl + 9; frequencies wf, wf + 1
        w[0] = *reinterpret_cast<const uint2*>(sa + HalfTileA<F, KS>::at(row, rl, wf / 2));
        w[1] = *reinterpret_cast<const uint2*>(sa + HalfTileA<F, KS>::at(row, rl + 1, wf / 2));
        w[2] = *reinterpret_cast<const uint2*>(sa + HalfTileA<F, KS>::at(row, rl + 8, wf / 2));
        w[3] = *reinterpret_cast<const uint2*>(sa + HalfTileA<F, KS>::at(row, rl + 9, wf / 2));
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const unsigned w0 = v ? w[0].y : w[0].x, w1 = v ? w[1].y : w[1].x;
          const unsigned w8 = v ? w[2].y : w[2].x, w9 = v ? w[3].y : w[3].x;
          // rows 0-7 of the MMA: real parts; rows 8-15: imaginary parts
          const unsigned a0 = __byte_perm(w0, w1, 0x5410), a1 = __byte_perm(w0, w1, 0x7632);
          const unsigned a2 = __byte_perm(w8, w9, 0x5410), a3 = __byte_perm(w8, w9, 0x7632);
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // the small terms first, then the leading one
            mma_f16(acc[v][m][h], a0, a1, a2, a3, bre[v][h].z, bre[v][h].w);
            mma_f16(acc[v][m][h], a0, a1, a2, a3, bre[v][h].x, bre[v][h].y);
            mma_f16(acc[v][m][2 + h], a0, a1, a2, a3, bim[v][h].z, bim[v][h].w);
            mma_f16(acc[v][m][2 + h], a0, a1, a2, a3, bim[v][h].x, bim[v][h].y);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // Y = A X (A^H X): Yr = KrXr - s KiXi, Yi = KrXi + s KiXr, s = 1 or -1, times 2^-e per
  // column, in the TF32 kernels' accumulator layout (16-row tiles) for their stores
  float out[V][MT / 2][4][4];
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int m2 = 0; m2 < MT / 2; ++m2)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int m = 2 * m2 + (c >> 1), i = c & 1;
          const float fac = pow2i(-e_lane[v][h][i]);
          const float* p = acc[v][m][h];      // Kr Xr (i), Ki Xr (2 + i)
          const float* q = acc[v][m][2 + h];  // Kr Xi, Ki Xi
          out[v][m2][h][c] = (p[i] - sgn * q[2 + i]) * fac;
          out[v][m2][2 + h][c] = (q[i] + sgn * p[2 + i]) * fac;
        }
  const PipePlace pl = {o_blk, f_blk, g, t, wrow, wf, tid, busy};
  TOut* y_split = y + (i64)blockIdx.y * y_split_stride;
  const float* fwd_scale = (scale != nullptr && !adjoint) ? scale : nullptr;
  if constexpr (NT <= 256) {
    if (adjoint) {  // Nm output rows: staged through shared memory
      static_assert(8 * (R * (F + 1) + 8) * 8 <= Tile::BYTES,
                    "the staged store fits the kernel's shared memory");
      __syncthreads();  // every warp has read its last stage
      mma_store_tf32_staged<TOut, MT / 2, V, R, F, NT>(out, smem, y_split, y_bstride, nf, nfp,
                                                       n_out, kb, pl, fwd_scale);
      return;
    }
  }
  mma_store_tf32<TOut, MT / 2, V>(out, y_split, y_bstride, nf, nfp, n_out, kb, pl, fwd_scale);
}

#endif  // FFTMATVEC_MMA
