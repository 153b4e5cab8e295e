// Probe kernels of scripts/probe_khat_access.py: float16-storage stage 3 for one vector, built
// four ways, to find what caps the rate at which it streams Khat. Not part of the package.
//   pa: a copy of the engine's cp.async kernel (sbgemva.cuh) with the MODE switch below.
//   pb: Khat by bulk copies (TMA, sm_90): one lane per warp copies its rows' runs, an mbarrier
//       per stage.
//   pp: persistent blocks: a block walks tiles blockIdx.x, + gridDim.x, ... with one cp.async
//       pipeline across them (no fill and drain per tile, no partial last round).
//   pl: pa on a blocked Khat layout [d / J][f / FT][m][d % J][f % FT].
// MODE 0 computes the product; MODE 1 replaces the arithmetic by one add per loaded word, so only
// the loads and copies are left; MODE 2 (pa, pl) also leaves out the copies of the vector.
#include "sbgemva.cuh"
#include "sbgemv.cuh"

// ---- pieces the probes share --------------------------------------------------------------
// The stage's vector block x[r0 : r0 + J, fbase : fbase + FT] (rows past `left` and frequencies
// past nf zero-filled) into shared memory at sx as [J][W][V][32]; nothing in MODE 2.
template <typename TIn, int J, int W, int V, int NT, int MODE>
__device__ __forceinline__ void copy_x(unsigned sx, const TIn* xg, const TIn* x, i64 r0, i64 left,
                                       i64 fbase, i64 nf, int tid) {
  constexpr int G = 32 * V, FT = G * W, X_ITERS = (J * FT + NT - 1) / NT;
#pragma unroll
  for (int i = 0; i < X_ITERS; ++i) {
    const int e = tid + i * NT;
    if (MODE == 2) break;
    if ((J * FT) % NT != 0 && e >= J * FT) break;
    const int jj = e / FT, ff = e % FT, w = ff / G, g = ff % G;
    const bool on = jj < left && fbase + ff < nf;
    cp_async<(int)sizeof(TIn)>(sx + (((jj * W + w) * V + g % V) * 32 + g / V) * (int)sizeof(TIn),
                               on ? (const void*)(xg + (r0 + jj) * nf + ff) : (const void*)x, on);
  }
}

template <int RT, int S, typename C>
__device__ __forceinline__ void zero_acc(C (&acc)[RT][1][S]) {
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int v = 0; v < S; ++v) acc[t][0][v] = make_c((decltype(C::x))0, (decltype(C::x))0);
}

// Byte offset of thread tid's Khat chunk (step j, row t, chunk w) in a stage laid out as
// [J][RT][W][NT] 16-byte chunks (pa, pp, pl).
template <int RT, int W, int NT>
struct ChunkMajor {
  int tid;
  __device__ __forceinline__ int operator()(int j, int t, int w) const {
    return (((j * RT + t) * W + w) * NT + tid) * 16;
  }
};

// The arithmetic of one stage: its first `left` steps (all J where the copies zero-filled the
// rest), Khat chunk (j, t, w) at sa + at(j, t, w); MODE >= 1 adds each loaded word instead.
template <typename Store, typename TIn, int RT, int J, int W, int MODE, typename C, typename At>
__device__ __forceinline__ void fma_stage(C (&acc)[RT][1][W * (16 / (int)sizeof(typename Store::elem))],
                                          const unsigned char* sa, const unsigned char* sx, int tx,
                                          bool adj, i64 left, At at) {
  typedef typename Store::elem E;
  constexpr int V = 16 / (int)sizeof(E);
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (j >= left) break;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      C xv[V];
#pragma unroll
      for (int v = 0; v < V; ++v)
        xv[v] = ccast<C>(*reinterpret_cast<const TIn*>(sx + (((j * W + w) * V + v) * 32 + tx) *
                                                             (int)sizeof(TIn)));
#pragma unroll
      for (int t = 0; t < RT; ++t) {
        E raw[V];
        lds<E, V>(sa + at(j, t, w), raw);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          if (MODE >= 1) {
            acc[t][0][w * V + v].x += __int_as_float((int)raw[v]);
          } else {
            const C kv = Store::expand(raw[v]);
            if (adj) cfma_conj(acc[t][0][w * V + v], kv, xv[v]);
            else cfma(acc[t][0][w * V + v], kv, xv[v]);
          }
        }
      }
    }
  }
}

// pa and pl: the cp.async pipeline of sbgemva.cuh with a MODE switch; BLOCKED selects the
// layout. The usual one takes (a0, a1) = (so, sr); the blocked one (nm, nft) and reads row t's
// step j of stage s at its row base + s s_stage + j s_in.
template <typename Store, typename TIn, typename TOut, int RT, int TY, int J, int NS, int W, int MODE,
          bool BLOCKED>
__device__ __forceinline__ void stream_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 a0, i64 a1, int adjoint, i64 red_chunk, i64 y_split_stride) {
  typedef typename Store::elem E;
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  constexpr int V = 16 / (int)sizeof(E), NT = 32 * TY, G = 32 * V, FT = G * W;
  constexpr int A_BYTES = J * RT * W * NT * 16, X_BYTES = J * FT * (int)sizeof(TIn);
  constexpr int BYTES = A_BYTES + X_BYTES;
  unsigned char* smem = reinterpret_cast<unsigned char*>(fftmatvec_dynamic_smem);
  const unsigned smem0 = smem_u32(smem);
  const int tx = threadIdx.x, tid = threadIdx.y * 32 + threadIdx.x;
  const i64 rows_per_block = (i64)RT * TY;
  const i64 n_otiles = (n_out + rows_per_block - 1) / rows_per_block;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 ftile = (i64)blockIdx.x / n_otiles;
  const i64 fbase = ftile * FT;
  const i64 f0 = fbase + (i64)tx * V;
  const i64 o0 = otile * rows_per_block + (i64)threadIdx.y * RT;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
  const i64 nsteps = r_end > r_begin ? (r_end - r_begin + J - 1) / J : 0;
  const bool adj = adjoint != 0;
  const unsigned char* ka[RT];
  unsigned a_ok = 0;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const i64 o = o0 + t;
    if constexpr (BLOCKED) {
      const i64 nm = a0, nft = a1, run = (i64)J * FT;  // run: one (m, d / J, f / FT) run
      const i64 s_stage = adj ? nft * nm * run : J * run;
      i64 rb;
      if (adj) rb = (ftile * nm + o) * run + (r_begin / J) * s_stage;  // r_begin: a multiple of J
      else rb = ((o / J) * nft + ftile) * nm * run + (o % J) * FT + r_begin * run;
      ka[t] = reinterpret_cast<const unsigned char*>(o < n_out ? kh + rb + tx * V : kh);
    } else {
      const i64 so = a0, sr = a1;
      ka[t] = reinterpret_cast<const unsigned char*>(o < n_out ? kh + o * so + r_begin * sr + f0 : kh);
    }
#pragma unroll
    for (int w = 0; w < W; ++w)
      if (o < n_out && f0 + w * G < nfp) a_ok |= 1u << (t * W + w);
  }
  // byte strides: the usual layout's next reduction step; the blocked one's next step inside a
  // stage and next stage
  const i64 sr_bytes = a1 * (i64)sizeof(E);
  const i64 s_in_b = (adj ? FT : (i64)J * FT) * (i64)sizeof(E);
  const i64 s_stage_b = (adj ? a1 * a0 * J * FT : (i64)J * J * FT) * (i64)sizeof(E);
  const TIn* xg = x + r_begin * nf + fbase;
  auto copy_stage = [&](i64 step, unsigned slot) {
    const i64 r0 = step * J;
    const i64 left = r_end - r_begin - r0;
    const unsigned sa = smem0 + slot * BYTES;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const bool on = j < left && ((a_ok >> (t * W + w)) & 1u);
          cp_async<16>(sa + (((j * RT + t) * W + w) * NT + tid) * 16,
                       on ? (const void*)((BLOCKED ? ka[t] + step * s_stage_b + j * s_in_b
                                                   : ka[t] + (r0 + j) * sr_bytes) +
                                          w * G * (int)sizeof(E))
                          : (const void*)kh, on);
        }
    copy_x<TIn, J, W, V, NT, MODE>(sa + A_BYTES, xg, x, r0, left, fbase, nf, tid);
  };
  C acc[RT][1][W * V];
  zero_acc(acc);
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nsteps) copy_stage(s, s);
    cp_async_commit();
  }
  for (i64 it = 0; it < nsteps; ++it) {
    cp_async_wait<NS - 2>();
    __syncthreads();
    const i64 next = it + NS - 1;
    if (next < nsteps) copy_stage(next, (unsigned)(next % NS));
    cp_async_commit();
    const unsigned char* sa = smem + (it % NS) * BYTES;
    const unsigned char* sx = sa + A_BYTES;
    fma_stage<Store, TIn, RT, J, W, MODE>(acc, sa, sx, tx, adj, J, ChunkMajor<RT, W, NT>{tid});
  }
  cp_async_wait<0>();
  sbgemv_store<TOut, RT, 1, V, W>(acc, y + (i64)blockIdx.y * y_split_stride, 0, scale, adj, o0, f0,
                                  n_out, nf, nfp, G);
}

template <typename Store, typename TIn, typename TOut, int RT, int TY, int J, int NS, int W, int MODE>
__device__ __forceinline__ void pa_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 y_split_stride) {
  stream_body<Store, TIn, TOut, RT, TY, J, NS, W, MODE, false>(
      kh, scale, x, y, nf, nfp, n_out, n_red, so, sr, adjoint, red_chunk, y_split_stride);
}

// ---- pb: bulk copies ---------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

template <typename Store, typename TIn, typename TOut, int RT, int TY, int J, int NS, int W, int MODE>
__device__ __forceinline__ void pb_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 y_split_stride) {
  typedef typename Store::elem E;
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  constexpr int V = 16 / (int)sizeof(E), NT = 32 * TY, G = 32 * V, FT = G * W;
  constexpr int ROWS = RT * TY;
  constexpr int A_BYTES = J * ROWS * FT * (int)sizeof(E), X_BYTES = J * FT * (int)sizeof(TIn);
  constexpr int BYTES = A_BYTES + X_BYTES;
  __shared__ __align__(8) unsigned long long bars[NS];
  unsigned char* smem = reinterpret_cast<unsigned char*>(fftmatvec_dynamic_smem);
  const unsigned smem0 = smem_u32(smem), bar0 = smem_u32(bars);
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  const i64 n_otiles = (n_out + ROWS - 1) / ROWS;
  const i64 otile = (i64)blockIdx.x % n_otiles;
  const i64 fbase = ((i64)blockIdx.x / n_otiles) * FT;
  const i64 f0 = fbase + (i64)tx * V;
  const i64 o0 = otile * ROWS + (i64)ty * RT;
  const i64 r_begin = (i64)blockIdx.y * red_chunk;
  const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
  const i64 nsteps = r_end > r_begin ? (r_end - r_begin + J - 1) / J : 0;
  const bool adj = adjoint != 0;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < NS; ++s) mbar_init(bar0 + 8 * s, TY);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const i64 seg_elems = nfp - fbase < FT ? nfp - fbase : FT;
  const unsigned seg = (unsigned)(seg_elems * (i64)sizeof(E));
  const i64 rn64 = n_out - o0;
  const int rn = rn64 <= 0 ? 0 : (rn64 < RT ? (int)rn64 : RT);
  const E* kbase = kh + o0 * so + r_begin * sr + fbase;
  const TIn* xg = x + r_begin * nf + fbase;
  auto copy_stage = [&](i64 step, unsigned slot) {
    const i64 r0 = step * J;
    const i64 left = r_end - r_begin - r0;
    const int jn = left < J ? (int)left : J;
    const unsigned sa = smem0 + slot * BYTES;
    if (tx == 0) {
      const unsigned bar = bar0 + 8 * slot;
      mbar_expect(bar, (unsigned)(jn * rn) * seg);
      for (int j = 0; j < jn; ++j)
        for (int t = 0; t < rn; ++t)
          bulk_copy(sa + ((j * ROWS + ty * RT + t) * FT) * (int)sizeof(E),
                    kbase + t * so + (r0 + j) * sr, seg, bar);
    }
    copy_x<TIn, J, W, V, NT, MODE>(sa + A_BYTES, xg, x, r0, left, fbase, nf, tid);
  };
  C acc[RT][1][W * V];
  zero_acc(acc);
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nsteps) copy_stage(s, s);
    cp_async_commit();
  }
  for (i64 it = 0; it < nsteps; ++it) {
    const unsigned slot = (unsigned)(it % NS);
    cp_async_wait<NS - 2>();
    mbar_wait(bar0 + 8 * slot, (unsigned)((it / NS) & 1));
    __syncthreads();
    const i64 next = it + NS - 1;
    if (next < nsteps) copy_stage(next, (unsigned)(next % NS));
    cp_async_commit();
    const i64 left = r_end - r_begin - it * J;
    const unsigned char* sa = smem + slot * BYTES;
    const unsigned char* sx = sa + A_BYTES;
    fma_stage<Store, TIn, RT, J, W, MODE>(
        acc, sa, sx, tx, adj, left, [&](int j, int t, int w) {  // rows' runs: [J][ROWS][FT]
          return ((j * ROWS + ty * RT + t) * FT + w * G + tx * V) * (int)sizeof(E);
        });
  }
  cp_async_wait<0>();
  sbgemv_store<TOut, RT, 1, V, W>(acc, y + (i64)blockIdx.y * y_split_stride, 0, scale, adj, o0, f0,
                                  n_out, nf, nfp, G);
}

// One linear grid-stride read.
extern "C" __global__ void read_lin(const uint4* __restrict__ a, i64 n, unsigned* out) {
  unsigned s = 0;
  const i64 stride = (i64)gridDim.x * blockDim.x;
  i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 v0 = __ldg(a + i), v1 = __ldg(a + i + stride), v2 = __ldg(a + i + 2 * stride),
                v3 = __ldg(a + i + 3 * stride);
    s += (v0.x ^ v1.y) + (v2.z ^ v3.w);
  }
  for (; i < n; i += stride) s += a[i].x;
  out[(i64)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// ---- pp: persistent blocks. Tile t: otile = t % n_otiles, ftile = (t / n_otiles) % n_ftiles,
// split = t / (n_otiles n_ftiles).
template <typename Store, typename TIn, int RT, int TY, int J, int W>
struct PCursor {
  typedef typename Store::elem E;
  static constexpr int V = 16 / (int)sizeof(E), G = 32 * V, FT = G * W;
  i64 tile, step, nsteps, left0, fbase;
  const unsigned char* ka[RT];
  unsigned a_ok;
  const TIn* xg;
  __device__ __forceinline__ void set(i64 t, const E* kh, const TIn* x, i64 nf, i64 nfp, i64 n_out,
                                      i64 n_red, i64 so, i64 sr, i64 red_chunk, i64 n_otiles,
                                      i64 n_ftiles) {
    tile = t;
    step = 0;
    const i64 otile = t % n_otiles, rest = t / n_otiles;
    const i64 ftile = rest % n_ftiles, split = rest / n_ftiles;
    fbase = ftile * FT;
    const i64 f0 = fbase + (i64)threadIdx.x * V;
    const i64 o0 = otile * (i64)(RT * TY) + (i64)threadIdx.y * RT;
    const i64 r_begin = split * red_chunk;
    const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
    left0 = r_end - r_begin;
    nsteps = left0 > 0 ? (left0 + J - 1) / J : 0;
    a_ok = 0;
#pragma unroll
    for (int q = 0; q < RT; ++q) {
      const i64 o = o0 + q;
      ka[q] = reinterpret_cast<const unsigned char*>(o < n_out ? kh + o * so + r_begin * sr + f0 : kh);
#pragma unroll
      for (int w = 0; w < W; ++w)
        if (o < n_out && f0 + w * G < nfp) a_ok |= 1u << (q * W + w);
    }
    xg = x + r_begin * nf + fbase;
  }
};

template <typename Store, typename TIn, typename TOut, int RT, int TY, int J, int NS, int W, int MODE>
__device__ __forceinline__ void pp_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 so, i64 sr, int adjoint, i64 red_chunk, i64 y_split_stride, i64 n_tiles, i64 n_otiles,
    i64 n_ftiles) {
  typedef typename Store::elem E;
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  typedef PCursor<Store, TIn, RT, TY, J, W> Cur;
  constexpr int V = Cur::V, NT = 32 * TY, G = Cur::G, FT = Cur::FT;
  constexpr int A_BYTES = J * RT * W * NT * 16, X_BYTES = J * FT * (int)sizeof(TIn);
  constexpr int BYTES = A_BYTES + X_BYTES;
  unsigned char* smem = reinterpret_cast<unsigned char*>(fftmatvec_dynamic_smem);
  const unsigned smem0 = smem_u32(smem);
  const int tx = threadIdx.x, tid = threadIdx.y * 32 + threadIdx.x;
  const bool adj = adjoint != 0;
  const i64 sr_bytes = sr * (i64)sizeof(E);
  if ((i64)blockIdx.x >= n_tiles) return;

  Cur cc;  // the copy cursor, NS - 1 stages ahead of the arithmetic
  cc.set(blockIdx.x, kh, x, nf, nfp, n_out, n_red, so, sr, red_chunk, n_otiles, n_ftiles);
  bool copying = true;
  auto copy_next = [&](unsigned slot) {
    const i64 r0 = cc.step * J;
    const i64 left = cc.left0 - r0;
    const unsigned sa = smem0 + slot * BYTES;
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int q = 0; q < RT; ++q)
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const bool on = j < left && ((cc.a_ok >> (q * W + w)) & 1u);
          cp_async<16>(sa + (((j * RT + q) * W + w) * NT + tid) * 16,
                       on ? (const void*)(cc.ka[q] + (r0 + j) * sr_bytes + w * G * (int)sizeof(E))
                          : (const void*)kh, on);
        }
    copy_x<TIn, J, W, V, NT, MODE>(sa + A_BYTES, cc.xg, x, r0, left, cc.fbase, nf, tid);
    if (++cc.step == cc.nsteps) {
      const i64 t = cc.tile + gridDim.x;
      if (t < n_tiles) cc.set(t, kh, x, nf, nfp, n_out, n_red, so, sr, red_chunk, n_otiles, n_ftiles);
      else copying = false;
    }
  };

  C acc[RT][1][W * V];
  zero_acc(acc);
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (copying) copy_next(s);
    cp_async_commit();
  }
  // the arithmetic's tile
  i64 tc = blockIdx.x, sc = 0;
  i64 nsc, o0c, f0c, splitc;
  auto set_c = [&](i64 t) {
    const i64 otile = t % n_otiles, rest = t / n_otiles;
    const i64 ftile = rest % n_ftiles;
    splitc = rest / n_ftiles;
    f0c = ftile * FT + (i64)tx * V;
    o0c = otile * (i64)(RT * TY) + (i64)threadIdx.y * RT;
    const i64 r_begin = splitc * red_chunk;
    const i64 r_end = r_begin + red_chunk < n_red ? r_begin + red_chunk : n_red;
    nsc = r_end > r_begin ? (r_end - r_begin + J - 1) / J : 0;
  };
  set_c(tc);
  for (i64 g = 0;; ++g) {
    cp_async_wait<NS - 2>();
    __syncthreads();
    if (copying) copy_next((unsigned)((g + NS - 1) % NS));
    cp_async_commit();
    const unsigned char* sa = smem + (g % NS) * BYTES;
    const unsigned char* sx = sa + A_BYTES;
    fma_stage<Store, TIn, RT, J, W, MODE>(acc, sa, sx, tx, adj, J, ChunkMajor<RT, W, NT>{tid});
    if (++sc == nsc) {
      sbgemv_store<TOut, RT, 1, V, W>(acc, y + splitc * y_split_stride, 0, scale, adj, o0c, f0c,
                                      n_out, nf, nfp, G);
      zero_acc(acc);
      tc += gridDim.x;
      if (tc >= n_tiles) break;
      set_c(tc);
      sc = 0;
    }
  }
  cp_async_wait<0>();
}

// One contiguous chunk of CH 16-byte words per block (no grid stride).
extern "C" __global__ void read_chunks(const uint4* __restrict__ a, i64 n, i64 ch, unsigned* out) {
  unsigned s = 0;
  const i64 b0 = (i64)blockIdx.x * ch;
  const i64 b1 = b0 + ch < n ? b0 + ch : n;
  i64 i = b0 + threadIdx.x;
  for (; i + 3 * (i64)blockDim.x < b1; i += 4 * (i64)blockDim.x) {
    const uint4 v0 = __ldg(a + i), v1 = __ldg(a + i + blockDim.x), v2 = __ldg(a + i + 2 * blockDim.x),
                v3 = __ldg(a + i + 3 * blockDim.x);
    s += (v0.x ^ v1.y) + (v2.z ^ v3.w);
  }
  for (; i < b1; i += blockDim.x) s += a[i].x;
  out[(i64)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// ---- pl: the blocked layout [d / J][f / FT][m][d % J][f % FT] (FT = the block's frequencies).
// Forward blocks stream each of their rows sequentially (J FT elements per step); adjoint blocks
// read one contiguous run of rows x J FT elements per stage.
template <typename Store, typename TIn, typename TOut, int RT, int TY, int J, int NS, int W, int MODE>
__device__ __forceinline__ void pl_body(
    const typename Store::elem* __restrict__ kh, const float* __restrict__ scale,
    const TIn* __restrict__ x, TOut* __restrict__ y, i64 nf, i64 nfp, i64 n_out, i64 n_red,
    i64 nm, i64 nft, int adjoint, i64 red_chunk, i64 y_split_stride) {
  stream_body<Store, TIn, TOut, RT, TY, J, NS, W, MODE, true>(
      kh, scale, x, y, nf, nfp, n_out, n_red, nm, nft, adjoint, red_chunk, y_split_stride);
}
