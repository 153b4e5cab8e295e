// Stage 3: per-frequency complex product with Khat, forward (Khat[f] @ x[f]) and adjoint
// (Khat[f]^H @ x[f]), for one or several right-hand sides.
//
// Layouts (all C order, frequency innermost, as the FFT stages produce and consume them):
//   Khat  (Nd, Nm, Nfp)       storage precision; Nfp = Nf rounded up to the storage's PAD;
//                             stored in blocks of frequencies, [f / B][Nd][Nm][f % B]
//                             (common.cuh: khat_foff), of which (Nd, Nm, Nfp) is one block
//   scale (Nd, Nfp) float32   float16 storage only: Khat[i, j, f] = scale[i, f] * stored[i, j, f].
//                             The forward product multiplies its outputs by it; the adjoint's
//                             input comes already multiplied (x[i, f] scale[i, f]: the forward
//                             FFT's store callback, or scale_rows in stages.cuh), so the
//                             kernels of the adjoint never read it.
//   x     (k, n_red, Nf)      the FFT output, in the FFT precision
//   y     (k, n_out, Nf)      in the inverse FFT's precision, or split-K partial sums
// Forward: output index o = sensor i, reduced index r = parameter j. Adjoint: o = j, r = i.
// Khat[o, r, f] is at element o*so + r*sr + khat_foff(f, fsh, sb) (common.cuh: the frequency
// axis may be stored in blocks), so one kernel serves both directions.
//
// Thread mapping: threadIdx.x runs over groups of V consecutive frequencies (consecutive lanes
// read consecutive words of Khat, 16 bytes each for one right-hand side: every load is
// coalesced, in both directions, with no transpose); a thread owns W such groups, blockDim.x
// groups apart (W = 1 but for the wide one-vector tiles); threadIdx.y runs over groups of RT
// output rows; blockIdx.x enumerates (frequency tile, output tile) pairs and blockIdx.y splits
// the reduction (split-K) so that skinny problems fill the device. Each Khat element is read
// once per launch; a launch handles KB right-hand sides. Nothing depends on the warp or
// wavefront width.
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

// Khat at one reduction step for one output row: W groups of V consecutive frequencies, group g
// kf[g] elements past p, into the slots g*V .. g*V + V - 1 of kv.
template <typename Store, int V, int W>
__device__ __forceinline__ void load_groups(
    const typename Store::elem* __restrict__ p, const i64 (&kf)[W],
    typename Complex<typename Store::real>::type (&kv)[W * V]) {
  typedef typename Complex<typename Store::real>::type C;
#pragma unroll
  for (int g = 0; g < W; ++g) {
    C part[V];
    Store::template load<V>(p + kf[g], part);
#pragma unroll
    for (int v = 0; v < V; ++v) kv[g * V + v] = part[v];
  }
}

// U consecutive reduction steps: all U*RT*W Khat loads are issued before any arithmetic so that
// enough bytes are in flight to cover the memory latency.
template <typename Store, typename TIn, int RT, int KB, int V, int W, int U>
__device__ __forceinline__ void sbgemv_steps(
    typename Complex<typename Store::real>::type (&acc)[RT][KB][W * V],
    const typename Store::elem* __restrict__ kh, const i64 (&koff)[RT], const i64 (&kf)[W],
    i64 r, i64 sr, const TIn* __restrict__ x, i64 x_bstride, i64 nf, const i64 (&fx)[W * V],
    bool adjoint) {
  typedef typename Complex<typename Store::real>::type C;
  C kv[U][RT][W * V];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int t = 0; t < RT; ++t)
      load_groups<Store, V, W>(kh + koff[t] + (r + u) * sr, kf, kv[u][t]);
#pragma unroll
  for (int u = 0; u < U; ++u)
    sbgemv_fma<Store, TIn, RT, KB, W * V>(acc, kv[u], r + u, x, x_bstride, nf, fx, adjoint);
}

// Write a thread's RT x KB x (W x V) results (rows past n_out and frequencies past nf are
// skipped), times the float16 row scale in the forward direction, cast to the output precision.
// Group g of V frequencies starts at f0 + g * gstride.
template <typename TOut, int RT, int KB, int V, int W = 1, typename C>
__device__ __forceinline__ void sbgemv_store(const C (&acc)[RT][KB][W * V], TOut* __restrict__ yb,
                                             i64 y_bstride, const float* __restrict__ scale,
                                             bool adj, i64 o0, i64 f0, i64 n_out, i64 nf,
                                             i64 nfp, i64 gstride = 0) {
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const i64 o = o0 + t;
    if (o >= n_out) continue;
#pragma unroll
    for (int g = 0; g < W; ++g)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const i64 f = f0 + g * gstride + v;
        if (f >= nf) continue;
        float s = 1.0f;
        if (scale != nullptr && !adj) s = scale[o * nfp + f];
#pragma unroll
        for (int b = 0; b < KB; ++b) {
          C c = acc[t][b][g * V + v];
          c.x *= s;
          c.y *= s;
          yb[b * y_bstride + o * nf + f] = ccast<TOut>(c);
        }
      }
  }
}

// W > 1 (one right-hand side): a thread owns W groups of V consecutive frequencies, blockDim.x
// groups apart, so a block reads W runs of blockDim.x x 16 contiguous bytes per row and step,
// and a thread has RT x W loads of 16 bytes in flight, issued for one step at a time. It streams
// complex128 Khat faster than the tiles of one group, which unroll two steps instead.
template <typename Store, typename TIn, typename TOut, int RT, int KB, int V, int W = 1>
__device__ __forceinline__ void sbgemv_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk, i64 x_bstride, i64 y_bstride,
    i64 y_split_stride) {
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  constexpr int S = W * V;  // frequencies per thread
  static_assert(W == 1 || KB < 8, "several frequency groups only for the memory-bound tiles");
  // Output tiles vary fastest across blocks: blocks running side by side read the same vector
  // rows x[:, r, f-tile], which then come from L2 instead of memory.
  const i64 n_otiles = ((n_out + RT - 1) / RT + blockDim.y - 1) / blockDim.y;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 ftile = (i64)blockIdx.x / n_otiles;
  const i64 fv = ftile * blockDim.x * W + threadIdx.x;
  const i64 f0 = fv * V;
  if (f0 >= nf) return;
  const i64 gstride = (i64)blockDim.x * V;  // frequencies from one group to the next
  const i64 o0 = (otile * blockDim.y + threadIdx.y) * RT;
  if (o0 >= n_out) return;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  i64 r_end = r_begin + red_chunk;
  if (r_end > n_red) r_end = n_red;

  // Frequencies past Nf (the padding of the last vector) read x at Nf-1 and are never written;
  // groups that start past the padded length read group 0's Khat; output rows past the end are
  // clamped onto the last row likewise. All keep the inner loop free of branches; their loads
  // hit the cache.
  i64 fx[S], kf[W];  // kf: a group's Khat offset from group 0's
  const i64 k0 = khat_foff(f0, fsh, sb);
#pragma unroll
  for (int g = 0; g < W; ++g) {
    const i64 fg = f0 + g * gstride;
    kf[g] = (g == 0 || fg >= nfp) ? 0 : khat_foff(fg, fsh, sb) - k0;
#pragma unroll
    for (int v = 0; v < V; ++v) fx[g * V + v] = (fg + v < nf) ? fg + v : nf - 1;
  }
  i64 koff[RT];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    i64 o = o0 + t;
    if (o >= n_out) o = n_out - 1;
    koff[t] = o * so + k0;
  }

  C acc[RT][KB][S];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int b = 0; b < KB; ++b)
#pragma unroll
      for (int s = 0; s < S; ++s) acc[t][b][s] = make_c((R)0, (R)0);

  const bool adj = adjoint != 0;
  if constexpr (KB < 8) {
    // Memory-bound tiles: U reduction steps per iteration, all their loads issued first.
    constexpr int U = W > 1 ? 1 : 2;
    i64 r = r_begin;
    for (; r + U <= r_end; r += U)
      sbgemv_steps<Store, TIn, RT, KB, V, W, U>(acc, kh, koff, kf, r, sr, x, x_bstride, nf, fx,
                                                adj);
    if (U > 1 && r < r_end)
      sbgemv_steps<Store, TIn, RT, KB, V, W, 1>(acc, kh, koff, kf, r, sr, x, x_bstride, nf, fx,
                                                adj);
  } else {
    // Arithmetic-bound multi-RHS tiles: registers hold accumulators, so Khat is prefetched one
    // step ahead (double buffering) instead of unrolling.
    C kcur[RT][S], knext[RT][S];
    if (r_begin < r_end) {
#pragma unroll
      for (int t = 0; t < RT; ++t)
        load_groups<Store, V, W>(kh + koff[t] + r_begin * sr, kf, kcur[t]);
    }
    for (i64 r = r_begin; r < r_end; ++r) {
      const i64 rn = (r + 1 < r_end) ? r + 1 : r;
#pragma unroll
      for (int t = 0; t < RT; ++t) load_groups<Store, V, W>(kh + koff[t] + rn * sr, kf, knext[t]);
      sbgemv_fma<Store, TIn, RT, KB, S>(acc, kcur, r, x, x_bstride, nf, fx, adj);
#pragma unroll
      for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int s = 0; s < S; ++s) kcur[t][s] = knext[t][s];
    }
  }

  sbgemv_store<TOut, RT, KB, V, W>(acc, y + (i64)blockIdx.y * y_split_stride, y_bstride, scale,
                                   adj, o0, f0, n_out, nf, nfp, gstride);
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
    i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk, i64 y_split_stride) {
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
    koff[t] = o * so + khat_foff(f0 < nfp ? f0 : nfp - V, fsh, sb);
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

// The same sum with one thread per output adding the splits in order, REDUCE_BATCH loads in
// flight: for products with many outputs and few splits (batches, one vector over many sensors
// and frequencies), where the lanes above leave most of their threads idle and a block's 32
// outputs are too little work for a block: alone, it was the faster over many outputs and few
// splits, and over few outputs both cost about a launch. Its sum is the one of adding the
// splits in order, to the last bit. The engine picks it by the splits and outputs
// (fftmatvec/gpu/rules.py: REDUCE_SERIAL_MAX_SPLITS, REDUCE_SERIAL_MIN_OUTPUTS).
constexpr int REDUCE_BATCH = 8;
template <typename TIn, typename TOut>
__device__ __forceinline__ void reduce_splits_serial_body(const TIn* __restrict__ part,
                                                          TOut* __restrict__ y, i64 n,
                                                          int splits) {
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    TIn acc;
    acc.x = 0;
    acc.y = 0;
    for (int s0 = 0; s0 < splits; s0 += REDUCE_BATCH) {
      TIn v[REDUCE_BATCH];
#pragma unroll
      for (int u = 0; u < REDUCE_BATCH; ++u) {
        v[u].x = 0;
        v[u].y = 0;
        if (s0 + u < splits) v[u] = part[(i64)(s0 + u) * n + e];
      }
#pragma unroll
      for (int u = 0; u < REDUCE_BATCH; ++u) {
        if (s0 + u < splits) {
          acc.x += v[u].x;
          acc.y += v[u].y;
        }
      }
    }
    y[e] = ccast<TOut>(acc);
  }
}
