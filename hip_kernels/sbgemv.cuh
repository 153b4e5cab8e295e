// Stage 3: per-frequency complex product with Khat, forward (Khat[f] @ x[f]) and adjoint
// (Khat[f]^H @ x[f]), for one or several right-hand sides.
//
// Layouts (all C order, frequency innermost, as the FFT stages produce and consume them):
//   Khat  (Nd, Nm, Nfp)       storage precision; Nfp = Nf rounded up to the storage's PAD
//   scale (Nd, Nfp) float32   float16 storage only: Khat[i, j, f] = scale[i, f] * stored[i, j, f].
//                             The forward product multiplies its outputs by it; the adjoint's
//                             input comes already multiplied (x[i, f] scale[i, f]: the forward
//                             FFT's store callback, or scale_rows in stages.cuh), so the
//                             kernels of the adjoint never read it.
//   x     (k, n_red, Nf)      the FFT output, in the FFT precision
//   y     (k, n_out, Nf)      in the inverse FFT's precision, or split-K partial sums
// Forward: output index o = sensor i, reduced index r = parameter j. Adjoint: o = j, r = i.
// Khat[o, r, f] is at element o*so + r*sr + f, so one kernel serves both directions.
//
// Thread mapping: threadIdx.x runs over groups of V consecutive frequencies (consecutive lanes
// read consecutive words of Khat, 16 bytes each for one right-hand side: every load is
// coalesced, in both directions, with no transpose); threadIdx.y over groups of RT output rows; blockIdx.x enumerates (frequency
// tile, output tile) pairs and blockIdx.y splits the reduction (split-K) so that skinny
// problems fill the device. Each Khat element is read once per launch; a launch handles KB
// right-hand sides. Nothing depends on the warp or wavefront width.
#pragma once
#include "common.cuh"

// The arithmetic of one reduction step r with Khat values kv already in registers.
template <typename Store, typename TIn, int RT, int KB, int V>
__device__ __forceinline__ void sbgemv_fma(
    typename Complex<typename Store::real>::type (&acc)[RT][KB][V],
    const typename Complex<typename Store::real>::type (&kv)[RT][V], i64 r,
    const TIn* __restrict__ x, i64 x_bstride, i64 nf, const i64 (&fx)[V], bool adjoint) {
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  C xv[KB][V];
#pragma unroll
  for (int b = 0; b < KB; ++b)
#pragma unroll
    for (int v = 0; v < V; ++v) xv[b][v] = ccast<C>(x[b * x_bstride + r * nf + fx[v]]);
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int b = 0; b < KB; ++b) {
        if (adjoint)
          cfma_conj(acc[t][b][v], kv[t][v], xv[b][v]);
        else
          cfma(acc[t][b][v], kv[t][v], xv[b][v]);
      }
}

// U consecutive reduction steps: all U*RT Khat loads are issued before any arithmetic so that
// enough bytes are in flight to cover the memory latency.
template <typename Store, typename TIn, int RT, int KB, int V, int U>
__device__ __forceinline__ void sbgemv_steps(
    typename Complex<typename Store::real>::type (&acc)[RT][KB][V],
    const typename Store::elem* __restrict__ kh, const i64 (&koff)[RT], i64 r, i64 sr,
    const TIn* __restrict__ x, i64 x_bstride, i64 nf, const i64 (&fx)[V], bool adjoint) {
  typedef typename Complex<typename Store::real>::type C;
  C kv[U][RT][V];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int t = 0; t < RT; ++t) Store::template load<V>(kh + koff[t] + (r + u) * sr, kv[u][t]);
#pragma unroll
  for (int u = 0; u < U; ++u)
    sbgemv_fma<Store, TIn, RT, KB, V>(acc, kv[u], r + u, x, x_bstride, nf, fx, adjoint);
}

// Write a thread's RT x KB x V results (rows past n_out and frequencies past nf are skipped),
// times the float16 row scale in the forward direction, cast to the output precision.
template <typename TOut, int RT, int KB, int V, typename C>
__device__ __forceinline__ void sbgemv_store(const C (&acc)[RT][KB][V], TOut* __restrict__ yb,
                                             i64 y_bstride, const float* __restrict__ scale,
                                             bool adj, i64 o0, i64 f0, i64 n_out, i64 nf,
                                             i64 nfp) {
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const i64 o = o0 + t;
    if (o >= n_out) continue;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (f0 + v >= nf) continue;
      float s = 1.0f;
      if (scale != nullptr && !adj) s = scale[o * nfp + f0 + v];
#pragma unroll
      for (int b = 0; b < KB; ++b) {
        C c = acc[t][b][v];
        c.x *= s;
        c.y *= s;
        yb[b * y_bstride + o * nf + f0 + v] = ccast<TOut>(c);
      }
    }
  }
}

template <typename Store, typename TIn, typename TOut, int RT, int KB, int V>
__device__ __forceinline__ void sbgemv_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 x_bstride, i64 y_bstride,
    i64 y_split_stride) {
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  // Output tiles vary fastest across blocks: blocks running side by side read the same vector
  // rows x[:, r, f-tile], which then come from L2 instead of memory.
  const i64 n_otiles = ((n_out + RT - 1) / RT + blockDim.y - 1) / blockDim.y;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 ftile = (i64)blockIdx.x / n_otiles;
  const i64 fv = ftile * blockDim.x + threadIdx.x;
  const i64 f0 = fv * V;
  if (f0 >= nf) return;
  const i64 o0 = (otile * blockDim.y + threadIdx.y) * RT;
  if (o0 >= n_out) return;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  i64 r_end = r_begin + red_chunk;
  if (r_end > n_red) r_end = n_red;

  // Frequencies past Nf (the padding of the last vector) read x at Nf-1 and are never written;
  // output rows past the end are clamped onto the last row likewise. Both keep the inner loop
  // free of branches; their loads hit the cache.
  i64 fx[V];
#pragma unroll
  for (int v = 0; v < V; ++v) fx[v] = (f0 + v < nf) ? f0 + v : nf - 1;
  i64 koff[RT];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    i64 o = o0 + t;
    if (o >= n_out) o = n_out - 1;
    koff[t] = o * so + f0;
  }

  C acc[RT][KB][V];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int b = 0; b < KB; ++b)
#pragma unroll
      for (int v = 0; v < V; ++v) acc[t][b][v] = make_c((R)0, (R)0);

  const bool adj = adjoint != 0;
  if constexpr (KB < 8) {
    // Memory-bound tiles: two reduction steps per iteration, all their loads issued first.
    i64 r = r_begin;
    for (; r + 2 <= r_end; r += 2)
      sbgemv_steps<Store, TIn, RT, KB, V, 2>(acc, kh, koff, r, sr, x, x_bstride, nf, fx, adj);
    if (r < r_end)
      sbgemv_steps<Store, TIn, RT, KB, V, 1>(acc, kh, koff, r, sr, x, x_bstride, nf, fx, adj);
  } else {
    // Arithmetic-bound multi-RHS tiles: registers hold accumulators, so Khat is prefetched one
    // step ahead (double buffering) instead of unrolling.
    C kcur[RT][V], knext[RT][V];
    if (r_begin < r_end) {
#pragma unroll
      for (int t = 0; t < RT; ++t) Store::template load<V>(kh + koff[t] + r_begin * sr, kcur[t]);
    }
    for (i64 r = r_begin; r < r_end; ++r) {
      const i64 rn = (r + 1 < r_end) ? r + 1 : r;
#pragma unroll
      for (int t = 0; t < RT; ++t) Store::template load<V>(kh + koff[t] + rn * sr, knext[t]);
      sbgemv_fma<Store, TIn, RT, KB, V>(acc, kcur, r, x, x_bstride, nf, fx, adj);
#pragma unroll
      for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int v = 0; v < V; ++v) kcur[t][v] = knext[t][v];
    }
  }

  sbgemv_store<TOut, RT, KB, V>(acc, y + (i64)blockIdx.y * y_split_stride, y_bstride, scale,
                                adj, o0, f0, n_out, nf, nfp);
}

// One right-hand side, the vectors staged through shared memory. A block covers BX*V
// frequencies and RT*blockDim.y output rows (all of them when they fit), and walks its share
// of the reduction in chunks of J steps: the chunk x[r:r+J, f-tile] is read from memory once
// per block, converted to the compute type on the way, and every row group of the block reads
// it from shared memory.
// Without staging each warp fetches its own copy of x through L2; those copies, and the ones
// that fall out of L2, are the difference between this kernel and a plain stream of Khat.
// One reduction step of the staged kernel: Khat values kv in registers, x from shared memory.
template <int RT, int V, typename C>
__device__ __forceinline__ void staged_fma(C (&acc)[RT][1][V], const C (&kv)[RT][V],
                                           const C* xrow, bool adj) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const C xv = xrow[v];
#pragma unroll
    for (int t = 0; t < RT; ++t) {
      if (adj)
        cfma_conj(acc[t][0][v], kv[t][v], xv);
      else
        cfma(acc[t][0][v], kv[t][v], xv);
    }
  }
}

template <typename Store, typename TIn, typename TOut, int RT, int V, int BX, int J>
__device__ __forceinline__ void sbgemv_staged_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 y_split_stride) {
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  constexpr int FT = BX * V;  // frequencies per block
  __shared__ C xs[J][FT];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int nthreads = BX * blockDim.y;
  const int tid = ty * BX + tx;
  const i64 rows_per_block = (i64)RT * blockDim.y;
  const i64 n_otiles = (n_out + rows_per_block - 1) / rows_per_block;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 fbase = ((i64)blockIdx.x / n_otiles) * FT;
  const i64 f0 = fbase + (i64)tx * V;
  const i64 o0 = otile * rows_per_block + (i64)ty * RT;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  i64 r_end = r_begin + red_chunk;
  if (r_end > n_red) r_end = n_red;
  const bool adj = adjoint != 0;

  // Rows past n_out are clamped onto the last row (their loads hit the cache, nothing is
  // written); frequencies past nf read padding that is never written. No thread leaves early:
  // all of them take part in staging x and in the barriers.
  i64 koff[RT];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    i64 o = o0 + t;
    if (o >= n_out) o = n_out - 1;
    koff[t] = o * so + (f0 < nfp ? f0 : nfp - V);
  }
  C acc[RT][1][V];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[t][0][v] = make_c((R)0, (R)0);

  for (i64 rc = r_begin; rc < r_end; rc += J) {
    const int nj = (int)((r_end - rc < J) ? (r_end - rc) : J);
    __syncthreads();  // the previous chunk has been read by every thread
    for (int e = tid; e < J * FT; e += nthreads) {
      const int jj = e / FT, ff = e % FT;
      if (jj < nj) {
        i64 f = fbase + ff;
        if (f >= nf) f = nf - 1;
        xs[jj][ff] = ccast<C>(x[(rc + jj) * nf + f]);
      }
    }
    __syncthreads();
    const typename Store::elem* kp = kh + rc * sr;
    int jj = 0;
    for (; jj + 2 <= nj; jj += 2) {  // two steps, all their loads issued first
      C kv[2][RT][V];
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int t = 0; t < RT; ++t) Store::template load<V>(kp + koff[t] + (i64)(jj + u) * sr, kv[u][t]);
#pragma unroll
      for (int u = 0; u < 2; ++u) staged_fma<RT, V>(acc, kv[u], &xs[jj + u][tx * V], adj);
    }
    if (jj < nj) {
      C kv[RT][V];
#pragma unroll
      for (int t = 0; t < RT; ++t) Store::template load<V>(kp + koff[t] + (i64)jj * sr, kv[t]);
      staged_fma<RT, V>(acc, kv, &xs[jj][tx * V], adj);
    }
  }

  sbgemv_store<TOut, RT, 1, V>(acc, y + (i64)blockIdx.y * y_split_stride, 0, scale, adj, o0, f0,
                               n_out, nf, nfp);
}

// Sum the split-K partial results (S, k, n_out, Nf) and cast to the inverse FFT's precision.
// Blocks of 32 x blockDim.y threads (blockDim.y <= REDUCE_LANES): x over 32 consecutive
// elements, y over every blockDim.y-th split; the partial sums meet in shared memory. Skinny
// products split their reduction hundreds of times over a few thousand outputs, and one thread
// per output summing every split in turn was bound by the latency of that chain.
constexpr int REDUCE_LANES = 8;
template <typename TIn, typename TOut>
__device__ __forceinline__ void reduce_splits_body(const TIn* __restrict__ part,
                                                   TOut* __restrict__ y, i64 n, int splits) {
  __shared__ TIn sums[REDUCE_LANES][32];
  const int lanes = blockDim.y;
  for (i64 base = (i64)blockIdx.x * 32; base < n; base += (i64)gridDim.x * 32) {
    const i64 e = base + threadIdx.x;
    TIn acc;
    acc.x = 0;
    acc.y = 0;
    if (e < n) {
      for (int s = threadIdx.y; s < splits; s += lanes) {
        const TIn v = part[(i64)s * n + e];
        acc.x += v.x;
        acc.y += v.y;
      }
    }
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && e < n) {
      for (int l = 1; l < lanes; ++l) {
        acc.x += sums[l][threadIdx.x].x;
        acc.y += sums[l][threadIdx.x].y;
      }
      y[e] = ccast<TOut>(acc);
    }
    __syncthreads();  // sums is rewritten by the next tile
  }
}
