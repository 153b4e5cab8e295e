// Stages 3-5 of an adjoint product in one kernel, for products with few sensors (Nd <= ND) and
// few frequencies (Nf <= blockDim.x), one right-hand side.
//
// There stage 3's output (Nm x Nf complex values) is as large as a good part of Khat
// (Nd x Nm x Nf), and its round trip through memory, written by stage 3 and read by the inverse
// FFT, costs about as much as the FFT itself. Here it never leaves the multiprocessor: a block
// computes the Nf frequencies of its rpb output rows, each the sum over the Nd sensors of
// conj(Khat) times the input (held in registers), into shared memory, then transforms them back
// and unpads them (rowfft.cuh: irfft_rows). No split-K: a row's sum lies within one thread.
//
// Thread mapping: thread t takes frequency f = t % Nf and row lane t / Nf of Q = blockDim.x / Nf
// lanes, which take the block's rows in turn (threads past Q Nf idle in the product). The loads
// of Khat for U rows, one per sensor, are all issued before their arithmetic; consecutive threads
// read consecutive frequencies of one row of Khat, so every load is coalesced.
//
// It made the adjoint of (Nm, Nd, Nt) = (100000, 10, 100) faster than the stages apart with
// complex128 and complex64 Khat; with float16 Khat it was slower than them (also with 16-byte
// loads and the input in shared memory). The same fusion of stages 1-3 forward was slower, with
// or without L2 prefetches of Khat: its running sums and the FFT's passes share the registers,
// and too few of Khat's bytes were in flight (docs/benchmarks.md, twenty-third run). The engine
// takes this kernel for complex128 and complex64 storage (fftmatvec/gpu/planner.py:
// Planner.fused_adjoint_takes).
#pragma once
#include "common.cuh"
#include "rowfft.cuh"

template <bool B, typename T, typename F> struct IfType { typedef T type; };
template <typename T, typename F> struct IfType<false, T, F> { typedef F type; };

// The complex type stage 3 hands an FFT in R (fftmatvec/gpu/ffts.py: yhat_dtype): complex64 where
// stage 3 or the FFT computes in float32, else complex128.
template <typename Store, typename R> struct Handoff {
  typedef typename IfType<sizeof(typename Store::real) == 8 && sizeof(R) == 8, double2,
                          float2>::type type;
};

// The kernels' launch bounds: 128 threads, and registers for 4 blocks per multiprocessor on
// NVIDIA (the complex128 kernels then spill little; unbounded, their FFT passes took more
// registers than 4 blocks leave; with 5 blocks, their spills made them slower). Under HIP, where a
// second bound means something else, only the first.
#define FUSED_MAX_THREADS 128
#define FUSED_MIN_BLOCKS 4
#if defined(FFTMATVEC_HIP)
#define FUSED_BOUNDS __launch_bounds__(FUSED_MAX_THREADS)
#else
#define FUSED_BOUNDS __launch_bounds__(FUSED_MAX_THREADS, FUSED_MIN_BLOCKS)
#endif

// Stages 3-5, adjoint, one right-hand side: out[row, c] (c < nt) for the rpb rows of block
// blockIdx.x is sample c of the unnormalised inverse real FFT of sum_d conj(Khat[d, row, f])
// x[d, f] over f (x (nd, nf) in CIn, times the float16 row scales already where Khat is
// float16), summed in stage 3's compute precision and rounded to the type stage 3 would hand
// the FFT (Handoff), transformed in R, rounded to stage 5's precision TMid. Khat is addressed as
// in sbgemv.cuh's adjoint (so, sr: output row m, reduction row d). Dynamic shared memory: the
// FFT's two buffers of rpb rows of n + 1 values (rowfft.cuh).
template <int MAXR, int ND, int U, typename Store, typename CIn, typename R, typename TMid,
          typename TOut>
__device__ __forceinline__ void sbgemv_irfft_body(
    const typename Store::elem* __restrict__ kh, const CIn* __restrict__ x, TOut* __restrict__ out,
    const typename Complex<R>::type* __restrict__ tw, i64 nm, int nd, int nt, int L, int rpb,
    unsigned long long radices, int npass, i64 so, i64 sr, int fsh, i64 sb) {
  typedef typename Complex<R>::type C;
  typedef typename Store::real RS;
  typedef typename Complex<RS>::type CC;
  typedef typename Handoff<Store, R>::type CX;
  const int n = L % 2 == 0 ? L / 2 : L, nf = L / 2 + 1;
  C* a = reinterpret_cast<C*>(fftmatvec_dynamic_smem);
  C* b = a + rpb * (n + 1);
  const int lanes = blockDim.x / nf;  // >= 1: the host launches at least nf threads
  const int f = threadIdx.x % nf, lane = threadIdx.x / nf;
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(nm - row0 < rpb ? nm - row0 : rpb);
  if (lane < lanes) {
    CC xv[ND];
#pragma unroll
    for (int d = 0; d < ND; ++d)
      if (d < nd) xv[d] = ccast<CC>(x[d * nf + f]);
    const typename Store::elem* kp = kh + row0 * so + khat_foff(f, fsh, sb);
    for (int r0 = lane; r0 < nrow; r0 += U * lanes) {
      typename Store::elem kv[U][ND];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int r = r0 + u * lanes < nrow ? r0 + u * lanes : r0;  // past the end: row r0 again
#pragma unroll
        for (int d = 0; d < ND; ++d)
          if (d < nd) kv[u][d] = load_khat(kp + r * so + d * sr);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        CC acc = make_c((RS)0, (RS)0);
#pragma unroll
        for (int d = 0; d < ND; ++d)
          if (d < nd) cfma_conj(acc, Store::expand(kv[u][d]), xv[d]);
        const int r = r0 + u * lanes;
        if (r < nrow) b[r * nf + f] = ccast<C>(ccast<CX>(acc));
      }
    }
  }
  __syncthreads();
  irfft_rows<MAXR, R, TMid, TOut>(a, b, tw, out + row0 * nt, nrow, nt, L, radices, npass);
}
