// Stages 1 and 5: zero-padding and unpadding of the time axis, with the precision casts of the
// neighbouring stages fused in (one pass over the vectors instead of a pad and a cast).
#pragma once
#include "common.cuh"

// Stage 1: out[r, c] = (TOut)(TMid)in[r, c] for c < nt, 0 for nt <= c < L.
// in (rows, nt) in the interface precision; TMid is stage 1's precision, TOut the FFT's.
// Grid: x over column tiles, y over rows (grid-stride, so any number of rows works).
template <typename TIn, typename TMid, typename TOut>
__device__ __forceinline__ void pad_body(const TIn* __restrict__ in, TOut* __restrict__ out,
                                         i64 rows, i64 nt, i64 L) {
  const i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= L) return;
  for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
    TOut v = (TOut)0;
    if (c < nt) v = (TOut)(TMid)in[r * nt + c];
    out[r * L + c] = v;
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
  const i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= nt) return;
  for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
    TOut v = (TOut)(TMid)in[r * L + c];
    if (w != nullptr) v *= w[(r % n_w) * nt + c];
    out[r * nt + c] = v;
  }
}
