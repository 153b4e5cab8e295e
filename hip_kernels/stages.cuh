// Stages 1 and 5: zero-padding and unpadding of the time axis, with the precision casts of the
// neighbouring stages fused in (one pass over the vectors instead of a pad and a cast).
#pragma once
#include "common.cuh"

// The row kernels run a grid of long-lived blocks of blockDim.y rows: row group
// g = blockIdx.x + n * gridDim.x, each row swept by blockDim.x threads (the host sizes
// blockDim.x to the row length, so short rows idle few threads and long rows keep many loads
// in flight; one block per row tile would launch tens of thousands of blocks that each move a
// few kilobytes, and the block launches, not the memory, would set the pace). With too few
// rows to fill the device, gridDim.y blocks share each row, column chunk blockIdx.y of every
// gridDim.y.

// Stage 1: out[r, c] = (TOut)(TMid)in[r, c] for c < nt, 0 for nt <= c < L.
// in (rows, nt) in the interface precision; TMid is stage 1's precision, TOut the FFT's.
template <typename TIn, typename TMid, typename TOut>
__device__ __forceinline__ void pad_body(const TIn* __restrict__ in, TOut* __restrict__ out,
                                         i64 rows, i64 nt, i64 L) {
  const i64 step = (i64)gridDim.x * blockDim.y;
  for (i64 r = (i64)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
    const TIn* src = in + r * nt;
    TOut* dst = out + r * L;
    for (i64 c = (i64)blockIdx.y * blockDim.x + threadIdx.x; c < L; c += (i64)gridDim.y * blockDim.x)
      dst[c] = (c < nt) ? (TOut)(TMid)src[c] : (TOut)0;
  }
}

// Stage 5: out[r, c] = (TOut)(TMid)in[r, c] * w[r % n_w, c] for c < nt.
// in (rows, L) in the inverse FFT's precision; TMid is stage 5's precision, TOut the
// interface dtype. w (n_w, nt) is an optional diagonal weight (nullptr: none), used by the
// normal operator F^T W F to weight the residual without another pass.
template <typename TIn, typename TMid, typename TOut>
__device__ __forceinline__ void unpad_body(const TIn* __restrict__ in, TOut* __restrict__ out,
                                           const TOut* __restrict__ w, i64 n_w, i64 rows, i64 nt,
                                           i64 L) {
  const i64 step = (i64)gridDim.x * blockDim.y;
  for (i64 r = (i64)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
    const TIn* src = in + r * L;
    TOut* dst = out + r * nt;
    const TOut* wr = (w != nullptr) ? w + (r % n_w) * nt : nullptr;
    for (i64 c = (i64)blockIdx.y * blockDim.x + threadIdx.x; c < nt; c += (i64)gridDim.y * blockDim.x) {
      TOut v = (TOut)(TMid)src[c];
      if (wr != nullptr) v *= wr[c];
      dst[c] = v;
    }
  }
}

// Between stages 2 and 3 for an adjoint with float16 storage, where the forward FFT's store
// callback cannot do it: out[r, f] = x[r, f] * scale[r % nd, f], in the input's precision.
// x is (rows, nf), rows = k * Nd; scale is (Nd, nfp). With Khat[i, j, f] = scale[i, f]
// q[i, j, f], the adjoint is then q[f]^H out[f], and stage 3 reads no scales. Launched like
// the row kernels above (KernelEngine._rows_launch).
template <typename C>
__device__ __forceinline__ void scale_rows_body(const C* __restrict__ x,
                                                const float* __restrict__ scale,
                                                C* __restrict__ out, i64 rows, i64 nd, i64 nf,
                                                i64 nfp) {
  const i64 step = (i64)gridDim.x * blockDim.y;
  for (i64 r = (i64)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += step) {
    const float* s = scale + (r % nd) * nfp;
    for (i64 f = (i64)blockIdx.y * blockDim.x + threadIdx.x; f < nf; f += (i64)gridDim.y * blockDim.x) {
      C v = x[r * nf + f];
      v.x *= s[f];
      v.y *= s[f];
      out[r * nf + f] = v;
    }
  }
}

// The largest magnitude of x[0 .. n) (amax_finish), for an input whose first read is not one
// of the package's kernels.
template <typename T>
__device__ __forceinline__ void amax_body(const T* __restrict__ x, i64 n, unsigned int* scratch) {
  unsigned int m = 0u;
  const i64 stride = (i64)gridDim.x * blockDim.x;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned int k = amax_key(x[i]);
    m = k > m ? k : m;
  }
  amax_finish(m, scratch);
}
