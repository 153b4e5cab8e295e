// Stage 3 for one right-hand side with Khat streamed through shared memory by cp.async
// (NVIDIA sm_80 and newer; elsewhere the GEMV kernels of sbgemv.cuh serve one vector).
//
// A single-vector product reads each Khat element once and does 4 multiply-adds with it, so
// it runs at the rate the memory delivers Khat, and that rate depends on the bytes in flight.
// The register kernels hold those bytes in registers (2 reduction steps x RT rows x 16 bytes
// per thread), and the staged one's barriers drain its loads every chunk. Here every thread
// copies the Khat chunks it will itself consume into shared memory, NS - 1 stages of J
// reduction steps ahead, with cp.async: no registers wait on memory, and the barrier that lets
// the block share the staged vectors does not empty the pipe. It is faster than the register
// kernels for float16 storage, where they spend the most registers per byte, and on forward
// products with at most 16 outputs (narrow tiles, many splits), and otherwise as fast as the
// others for complex128 and complex64; the engine's defaults (fftmatvec/gpu/rules.py:
// ASYNC_MIN_RED, ASYNC_FEW_ROWS) follow those sweeps.
//
// Layout of one stage (NT = 32 x TY threads, V = 16 / sizeof(Khat element) frequencies per
// chunk, W chunks per thread and row, 32 V apart, so a block covers FT = 32 V W frequencies and
// a warp copies W runs of 512 contiguous bytes per row and step):
//   Khat   [J][RT][W][NT] 16-byte chunks: thread tid's chunk w for step j, row t. Consecutive
//          threads use consecutive chunks, so copies and reads are free of bank conflicts.
//   x      [J][W][V][32] elements of the FFT precision: the v-th frequency of lane tx's chunk w
//          at (w, v, tx), so a warp's reads of one (w, v) are consecutive. A float16 adjoint's
//          x comes with the row scales already applied (sbgemv.cuh), so no scales are staged.
// Reduction steps past the split's end, rows past n_out and frequencies past the padded
// length are zero-filled by the copy (src-size 0), so the arithmetic runs without branches.
//
// W = 2 serves float16 forward products by default, faster there than W = 1. With its
// arithmetic taken out this kernel reads Khat more slowly than one linear stream does, and bulk
// copies (TMA) or persistent blocks in its place did no better: blocks that each read many short
// runs spread over Khat leave part of the bandwidth unused, whatever issues the loads.
#pragma once
#include "common.cuh"
#include "sbgemm.cuh"

#if defined(FFTMATVEC_MMA)

template <typename Store, typename TIn, int RT, int TY, int J, int W>
struct AsyncTile {
  typedef typename Store::elem E;
  static constexpr int V = 16 / (int)sizeof(E);
  static constexpr int NT = 32 * TY, G = 32 * V, FT = G * W;
  static constexpr int A_BYTES = J * RT * W * NT * 16;
  static constexpr int X_BYTES = J * FT * (int)sizeof(TIn);
  static constexpr int BYTES = A_BYTES + X_BYTES;
  static constexpr int X_ITERS = (J * FT + NT - 1) / NT;  // x elements per thread
};

template <typename Store, typename TIn, typename TOut, int RT, int TY, int J, int NS, int W = 1>
__device__ __forceinline__ void sbgemv_async_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk, i64 y_split_stride) {
  typedef AsyncTile<Store, TIn, RT, TY, J, W> Tile;
  typedef typename Store::elem E;
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  constexpr int V = Tile::V, NT = Tile::NT, G = Tile::G, FT = Tile::FT;
  static_assert(RT * W <= 32, "one bit per (row, chunk) in a_ok");
  unsigned char* smem = reinterpret_cast<unsigned char*>(fftmatvec_dynamic_smem);
  const unsigned smem0 = smem_u32(smem);

  const int tx = threadIdx.x, tid = threadIdx.y * 32 + threadIdx.x;
  const i64 rows_per_block = (i64)RT * TY;
  const i64 n_otiles = (n_out + rows_per_block - 1) / rows_per_block;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 fbase = ((i64)blockIdx.x / n_otiles) * FT;
  const i64 f0 = fbase + (i64)tx * V;
  const i64 o0 = otile * rows_per_block + (i64)threadIdx.y * RT;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
  const i64 nsteps = r_end > r_begin ? (r_end - r_begin + J - 1) / J : 0;
  const bool adj = adjoint != 0;

  // This thread's Khat rows: a pointer per row at the split's first reduction step; rows past
  // n_out and chunks past the padded length copy zeros (bit t W + w of a_ok: row t, chunk w).
  // A chunk's bytes past chunk 0's: kw[w] (its frequencies may lie in another block of Khat).
  const unsigned char* ka[RT];
  unsigned a_ok = 0;
  const i64 k0 = khat_foff(f0, fsh, sb);
  i64 kw[W];
#pragma unroll
  for (int w = 0; w < W; ++w) kw[w] = (khat_foff(f0 + w * G, fsh, sb) - k0) * (i64)sizeof(E);
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const i64 o = o0 + t;
    ka[t] = reinterpret_cast<const unsigned char*>(o < n_out ? kh + o * so + r_begin * sr + k0 : kh);
#pragma unroll
    for (int w = 0; w < W; ++w)
      if (o < n_out && f0 + w * G < nfp) a_ok |= 1u << (t * W + w);
  }
  const i64 sr_bytes = sr * (i64)sizeof(E);
  // The vectors: element e = tid + i NT of the stage is step e / FT, frequency e % FT.
  const TIn* xg = x + r_begin * nf + fbase;

  auto copy_stage = [&](i64 step, unsigned slot) {
    const i64 r0 = step * J;               // first step of the stage, from r_begin
    const i64 left = r_end - r_begin - r0;  // steps left in the split
    const unsigned sa = smem0 + slot * Tile::BYTES;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const bool on = j < left && ((a_ok >> (t * W + w)) & 1u);
          cp_async<16>(sa + (((j * RT + t) * W + w) * NT + tid) * 16,
                       on ? (const void*)(ka[t] + (r0 + j) * sr_bytes + kw[w])
                          : (const void*)kh,
                       on);
        }
    const unsigned sx = sa + Tile::A_BYTES;
#pragma unroll
    for (int i = 0; i < Tile::X_ITERS; ++i) {
      const int e = tid + i * NT;
      if ((J * FT) % NT != 0 && e >= J * FT) break;
      const int jj = e / FT, ff = e % FT, w = ff / G, g = ff % G;
      const bool on = jj < left && fbase + ff < nf;
      cp_async<(int)sizeof(TIn)>(sx + (((jj * W + w) * V + g % V) * 32 + g / V) * (int)sizeof(TIn),
                                 on ? (const void*)(xg + (r0 + jj) * nf + ff) : (const void*)x,
                                 on);
    }
  };

  C acc[RT][1][W * V];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int v = 0; v < W * V; ++v) acc[t][0][v] = make_c((R)0, (R)0);

#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nsteps) copy_stage(s, s);
    cp_async_commit();
  }
  for (i64 it = 0; it < nsteps; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage `it` has landed for every thread; stage it - 1 is consumed
    const i64 next = it + NS - 1;
    if (next < nsteps) copy_stage(next, (unsigned)(next % NS));
    cp_async_commit();
    const unsigned char* sa = smem + (it % NS) * Tile::BYTES;
    const unsigned char* sx = sa + Tile::A_BYTES;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int w = 0; w < W; ++w) {
        C xv[V];
#pragma unroll
        for (int v = 0; v < V; ++v)
          xv[v] = ccast<C>(*reinterpret_cast<const TIn*>(
              sx + (((j * W + w) * V + v) * 32 + tx) * (int)sizeof(TIn)));
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          E raw[V];
          lds<E, V>(sa + (((j * RT + t) * W + w) * NT + tid) * 16, raw);
#pragma unroll
          for (int v = 0; v < V; ++v) {
            const C kv = Store::expand(raw[v]);
            if (adj)
              cfma_conj(acc[t][0][w * V + v], kv, xv[v]);
            else
              cfma(acc[t][0][w * V + v], kv, xv[v]);
          }
        }
      }
  }
  cp_async_wait<0>();
  sbgemv_store<TOut, RT, 1, V, W>(acc, y + (i64)blockIdx.y * y_split_stride, 0, scale, adj, o0,
                                  f0, n_out, nf, nfp, G);
}

#endif  // FFTMATVEC_MMA
