// Stage 3 of an adjoint for several right-hand sides over few reduction rows (Nd <= ND sensors),
// with the input held in registers and Khat streamed through shared memory by cp.async
// (NVIDIA sm_80 and newer, like sbgemva.cuh).
//
// With few sensors an adjoint reads Nd x Nm x Nf values of Khat and writes k x Nm x Nf outputs:
// at k = 16 and Nd = 10 it writes more bytes than it reads, and each Khat value takes part in
// only Nd x k multiply-adds per output row. The tensor-core kernels (sbgemm.cuh) spend their
// k-steps on a reduction of 10 rows and stage every output through shared memory; the GEMV
// kernels read the vectors once per row. Here the whole input of a frequency, x[b, d, f] for a
// thread's BG right-hand sides and every sensor d, stays in registers for all the rows a block
// takes, and every output is written once, straight from its register.
//
// Thread mapping (a block of FW x ceil(kb / BG) threads): thread t takes frequency
// f0 + t % FW (f0 = blockIdx.x FW) and right-hand sides BG (t / FW) .. + BG - 1; blockIdx.y takes
// rpb consecutive output rows. Consecutive threads read consecutive frequencies, so the copies,
// the shared-memory reads and the stores are coalesced; the threads of one frequency read the
// same shared word. No split-K: a row's sum over the sensors lies within one thread.
//
// Khat: NS stages of RS rows x ND sensors x FW frequencies in shared memory, copied NS - 1 stages
// ahead. The copies keep the bytes in flight that a register pipeline would hold, and cost no
// registers: the registers go to the input (BG x ND complex values). Sensors past nd, rows past
// the block's and frequencies past the padded length are zero-filled (src-size 0).
//
// At k = 16 and k = 8 on (Nm, Nd, Nt) = (100000, 10, 100) it ran the adjoint faster than the
// tensor-core kernels in complex128, complex64 and float16 storage. The same kernel with Khat
// loaded into registers, one or two rows at a time, had too few bytes in flight and was slower
// than the tensor cores in complex128. Its mirror for forward products with few outputs (the
// sums over a split of the reduction in registers, Khat and the vectors through shared memory)
// was slower than them too, and is not built.
#pragma once
#include "common.cuh"
#include "sbgemm.cuh"

#if defined(FFTMATVEC_MMA)

template <typename Store, typename TIn, typename TOut, int ND, int BG, int FW, int RS, int NS>
__device__ __forceinline__ void sbgemv_xreg_body(
    const typename Store::elem* __restrict__ kh, const TIn* __restrict__ x, TOut* __restrict__ y,
    i64 nf, i64 nfp, i64 nm, i64 nd, i64 so, i64 sr, int fsh, i64 sb, int kb, int rpb) {
  typedef typename Store::elem E;
  typedef typename Store::real R;
  typedef typename Complex<R>::type C;
  constexpr int EB = sizeof(E);
  static_assert((FW * EB) % 16 == 0, "a row's frequencies must be whole 16-byte chunks");
  constexpr int EPC = 16 / EB;        // elements per 16-byte chunk
  constexpr int CPD = FW / EPC;       // chunks per (row, sensor)
  constexpr int CPS = RS * ND * CPD;  // chunks per stage
  E* sk = reinterpret_cast<E*>(fftmatvec_dynamic_smem);
  const int nt = blockDim.x, t = threadIdx.x, fl = t % FW, g = t / FW;
  const i64 f0 = (i64)blockIdx.x * FW, f = f0 + fl;
  const i64 row0 = (i64)blockIdx.y * rpb;
  const int nrow = (int)(nm - row0 < rpb ? nm - row0 : rpb);
  const int nsteps = (nrow + RS - 1) / RS;

  C xv[BG][ND];
#pragma unroll
  for (int j = 0; j < BG; ++j)
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      const int b = g * BG + j;
      xv[j][d] = (b < kb && d < nd && f < nf) ? ccast<C>(x[((i64)b * nd + d) * nf + f])
                                              : make_c((R)0, (R)0);
    }

  const E* kr = kh + row0 * so;
  auto copy = [&](int s) {  // stage s: rows s RS .. s RS + RS - 1 of the block
    const unsigned base = smem_u32(sk + (s % NS) * (RS * ND * FW));
    for (int c = t; c < CPS; c += nt) {
      const int rr = c / (ND * CPD), d = (c / CPD) % ND, ch = c % CPD;
      const int r = s * RS + rr;
      const i64 fc = f0 + ch * EPC;
      const bool ok = r < nrow && d < nd && fc < nfp;
      const E* src = ok ? kr + (i64)r * so + d * sr + khat_foff(fc, fsh, sb) : kh;
      cp_async<16>(base + ((rr * ND + d) * FW + ch * EPC) * EB, src, ok);
    }
  };
#pragma unroll
  for (int s = 0; s < NS - 1; ++s) {
    if (s < nsteps) copy(s);
    cp_async_commit();
  }
  TOut* yp = y + row0 * nf + f;
  const i64 yb = nm * nf;
  for (int s = 0; s < nsteps; ++s) {
    cp_async_wait<NS - 2>();
    __syncthreads();  // stage s is in, and every thread is done with stage s - 1
    if (s + NS - 1 < nsteps) copy(s + NS - 1);
    cp_async_commit();
    const E* st = sk + (s % NS) * (RS * ND * FW);
#pragma unroll
    for (int rr = 0; rr < RS; ++rr) {
      const int r = s * RS + rr;
      if (r < nrow && f < nf) {
        C acc[BG];
#pragma unroll
        for (int j = 0; j < BG; ++j) acc[j] = make_c((R)0, (R)0);
#pragma unroll
        for (int d = 0; d < ND; ++d)
          if (d < nd) {
            const C kv = Store::expand(st[(rr * ND + d) * FW + fl]);
#pragma unroll
            for (int j = 0; j < BG; ++j) cfma_conj(acc[j], kv, xv[j][d]);
          }
#pragma unroll
        for (int j = 0; j < BG; ++j)
          if (g * BG + j < kb) yp[(g * BG + j) * yb + (i64)r * nf] = ccast<TOut>(acc[j]);
      }
    }
  }
  cp_async_wait<0>();
}

#endif  // FFTMATVEC_MMA
