// The FNO layer's transforms of the last axis (fftmatvec/fno/_rows.py), on the row FFTs of
// rowfft.cuh: the real FFT of each row of length L, truncated to its first m bins, and the
// inverse real FFT of rows that hold only those m bins. They take the place of the DFT products
// of the last axis (fftmatvec/fno/_dft.py), whose flops grow with L m where these move bytes.
//
// The spectral side is real, rows of 2 m values: the m real parts, then the m imaginary parts
// (the layout of the DFT products' chain). Each bin k has a real scale s[k] (1 / L for the
// layer's forward analysis, c_k for the adjoint of its synthesis, 1 / (L c_k) for the adjoint of
// its analysis; c_k the Hermitian weight), applied on the way out of the forward transform and
// on the way into the inverse one. The inverse drops the imaginary parts of the DC and Nyquist
// bins, as a real inverse FFT does. Only float32, the layer's compute precision on a GPU.
//
// The inverse kernels (and the planes' below) take the layer's bias: where bias is not null,
// bias[r % channels] is added to the real part of bin 0 of row r (r = b O + o: the rows of y in
// (batch, channel) order, channels = O) as it is loaded, before its scale, so that y is exactly
// the synthesis of the modes with the bias added to their constant mode (the chain's forward
// end: fftmatvec/fno/_dft.py, PairedChain.end_bias), with no pass of its own. A null bias (the
// backward's uses of the kernels, the chains whose middle adds it) adds nothing.
#pragma once
#include "rowfft.cuh"
// cp.async for the channel product below (NVIDIA sm_80 and newer: FFTMATVEC_MMA)
#include "sbgemm.cuh"

// The spectral side in one of three layouts (modes_major): 0, rows of 2 m values (the m real
// parts, then the m imaginary parts: element (r, p, k) at r 2m + p m + k); 1, modes-major split,
// the rows innermost (element (r, p, k) at (p m + k) rows + r: the real parts of bin 0 of every
// row, then of bin 1, ..., then the imaginary parts), the layout of the chain's split modes
// (fftmatvec/fno/_dft.py: SplitChain); 2, modes-major in pairs (element (r, p, k) at
// 2 (k rows + r) + p: bin 0 of every row as complex values, then bin 1, ...), the complex
// modes-major layout that the channel product's complex GEMM reads and writes in place
// (fftmatvec/fno/_dft.py: PairedChain). Modes-major, a block's values go through shared memory
// (as columns of the split layout) so that consecutive threads write (or read) consecutive
// values of one bin.
#define FNO_PAIRED 2

// The bias of row (or plane) r of channels (0 where bias is null): what the inverse kernels add
// to the real part of the constant mode.
__device__ __forceinline__ float fno_bias_of(const float* __restrict__ bias, i64 r, int channels) {
  return bias != nullptr ? bias[r % channels] : 0.f;
}

// out = s[k] (Re, Im) of bin k < m of the unnormalised real FFT of each row of x (rows, L).
template <int MAXR>
__device__ __forceinline__ void fno_rfft_body(const float* __restrict__ x, float* __restrict__ out,
                                              const float2* __restrict__ tw,
                                              const float* __restrict__ scale, i64 rows, int L,
                                              int m, int rpb, unsigned long long radices,
                                              int npass, int modes_major) {
  const int n = L % 2 == 0 ? L / 2 : L;
  float2* a = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* b = a + rpb * (n + 1);
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  unsigned int km = 0u;
  const float2* z = rfft_rows<MAXR, float, float, float>(x + row0 * L, a, b, tw, nrow, L, L,
                                                         radices, npass, false, km);
  if (!modes_major) {
    float* o = out + row0 * 2 * m;
    rfft_split(z, tw, nrow, L, [&](int r, int f, float2 v) {
      if (f < m) {
        const float s = scale[f];
        o[r * 2 * m + f] = v.x * s;
        o[r * 2 * m + m + f] = v.y * s;
      }
    });
    return;
  }
  // the kept bins into the buffer rfft_rows left free (its last pass read it before a barrier),
  // 2 m columns of the block's rows, sp apart (odd where it fits: no bank conflicts)
  float* st = reinterpret_cast<float*>(z == a ? b : a);
  const int sp = 2 * m * (rpb + 1) <= 2 * rpb * (n + 1) ? rpb + 1 : rpb;
  rfft_split(z, tw, nrow, L, [&](int r, int f, float2 v) {
    if (f < m) {
      const float s = scale[f];
      st[f * sp + r] = v.x * s;
      st[(m + f) * sp + r] = v.y * s;
    }
  });
  __syncthreads();
  if (modes_major == FNO_PAIRED) {
    RowCursor at(2 * nrow);  // at.r: the bin, at.c: 2 (row) + part, one run of global memory
    for (int i = threadIdx.x; i < 2 * m * nrow; i += blockDim.x, at.next())
      out[((i64)at.r * rows + row0) * 2 + at.c] = st[((at.c & 1) * m + at.r) * sp + (at.c >> 1)];
    return;
  }
  RowCursor at(nrow);  // at.r: the column (part, bin), at.c: the row
  for (int i = threadIdx.x; i < 2 * m * nrow; i += blockDim.x, at.next())
    out[(i64)at.r * rows + row0 + at.c] = st[at.r * sp + at.c];
}

// out[r, :] (L samples) is the unnormalised inverse real FFT of the spectrum s[k] (Re + i Im of
// bin k of row r of y) for k < m, zero above.
template <int MAXR>
__device__ __forceinline__ void fno_irfft_body(const float* __restrict__ y,
                                               float* __restrict__ out,
                                               const float2* __restrict__ tw,
                                               const float* __restrict__ scale, i64 rows, int L,
                                               int m, int rpb, unsigned long long radices,
                                               int npass, int modes_major,
                                               const float* __restrict__ bias, int channels) {
  const int n = L % 2 == 0 ? L / 2 : L, nf = L / 2 + 1;
  float2* a = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* b = a + rpb * (n + 1);
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  if (!modes_major) {
    const float* src = y + row0 * 2 * m;
    RowCursor at(nf);
    for (int i = threadIdx.x; i < nrow * nf; i += blockDim.x, at.next()) {
      float2 v = make_c(0.f, 0.f);
      if (at.c < m) {
        const float s = scale[at.c];
        const float* sr = src + at.r * 2 * m;
        const float re = at.c == 0 ? sr[0] + fno_bias_of(bias, row0 + at.r, channels) : sr[at.c];
        v = make_c(re * s, sr[m + at.c] * s);
      }
      b[i] = v;  // rows of nf values, as irfft_rows reads them
    }
  } else {
    RowCursor at(nrow);  // at.r: the bin, at.c: the row; consecutive threads, consecutive rows
    for (int i = threadIdx.x; i < nrow * nf; i += blockDim.x, at.next()) {
      float2 v = make_c(0.f, 0.f);
      if (at.r < m && modes_major == FNO_PAIRED) {
        float2 p = *reinterpret_cast<const float2*>(y + ((i64)at.r * rows + row0 + at.c) * 2);
        if (at.r == 0) p.x += fno_bias_of(bias, row0 + at.c, channels);
        v = c_scale(p, scale[at.r]);
      } else if (at.r < m) {
        const float s = scale[at.r];
        const float* sr = y + (i64)at.r * rows + row0 + at.c;
        const float re = at.r == 0 ? sr[0] + fno_bias_of(bias, row0 + at.c, channels) : sr[0];
        v = make_c(re * s, sr[(i64)m * rows] * s);
      }
      b[at.c * nf + at.r] = v;
    }
  }
  __syncthreads();
  irfft_rows<MAXR, float, float, float>(a, b, tw, out + row0 * L, nrow, L, L, radices, npass);
}

// ---- the last two axes in one kernel (fftmatvec/fno/_rows.py: Plane) -------------------------
// One block a plane of n0 x n1 real values (the last two axes of one (batch, channel, ...)
// slice), read once and written once, the transforms of both axes in shared memory in between,
// where the DFT products of the chain run a GEMM for each axis and go through memory between
// them. The spectral side of a plane is (2, m0, m1) real values: the real parts of its kept
// modes (j < m0 of the first axis, k < m1 bins of the last), then the imaginary parts, the
// layout of the chain after its first two transforms; or the layer's modes-major layout in
// complex pairs (the pass form's kernels ..._p, the warp form's with paired_planes > 0): mode
// i = j m1 + k of plane p at complex element i paired_planes + p (fftmatvec/fno/_dft.py:
// PairedChain, the channel product's complex GEMM reading and writing it in place). A block
// writes (reads) its plane's modes a pair at a time, planes apart: the neighbouring planes'
// blocks, running at the same time, fill the rest of each sector.
//
// * fno_plane_rfft: the real FFT of each row (rfft_rows), its first m1 bins times s1[k] into the
//   shared columns T (m1 rows of n0 + 1, the + 1 against bank conflicts), then the complex FFT
//   (forward) of g columns at a time, of which the bins bins0[j] times s0 are written.
// * fno_plane_irfft: the inverse complex FFT of g columns at a time, each loaded from the modes
//   (inv0[bin] the mode j of a bin, -1 for none: zero) times s0, into T times s1[k]; then the
//   inverse real FFT of each row (irfft_rows), bins past m1 zero, the imaginary parts of its DC
//   and Nyquist bins dropped.
// Both unnormalised but for the scales, which give the analysis (1 / n, the analysis
// frequencies), the synthesis (1, the output bins) and their adjoints (the host's Plane).
// The warp and direct forms' inverse kernels take the layer's bias as the rows' do: where bias
// is not null, bias[p % channels] is added to the real part of mode bias_mode (i = j m1 + k, the
// mode constant over the plane: the output bin 0 of both axes) of plane p as it is loaded,
// before its scales. This pass form's does not: every way of adding it in its loads spilled
// the AMD kernel's scalar registers (the host adds the bias before it: fftmatvec/fno/_rows.py,
// Plane.bias_mode None).
// The twiddles: tw1 the table of the rows' real FFT, tw0 that of a complex FFT of length n0
// (rowfft.cuh: its passes from tw0 + n0 / 2 + 1). Shared memory: T, then the rows' two buffers
// of rpb rows of nc1 + 1 values, which the columns' two buffers of g rows of n0 share.
#define FNO_PLANE_THREADS 256
#if defined(FFTMATVEC_HIP)
#define FNO_PLANE_BOUNDS __launch_bounds__(FNO_PLANE_THREADS)
#else
#define FNO_PLANE_BOUNDS __launch_bounds__(FNO_PLANE_THREADS, 4)
#endif

template <int MAXR, bool PAIRED>
__device__ __forceinline__ void fno_plane_rfft_body(
    const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw1,
    const float2* __restrict__ tw0, const float* __restrict__ s1, const int* __restrict__ bins0,
    float s0, int n0, int n1, int m0, int m1, int rpb, int g, unsigned long long rad1, int np1,
    unsigned long long rad0, int np0, int paired_planes) {
  const int nc1 = n1 % 2 == 0 ? n1 / 2 : n1, n0p = n0 + 1, M = m0 * m1;
  float2* T = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* a = T + m1 * n0p;
  float2* b = a + rpb * (nc1 + 1);
  const i64 plane = blockIdx.x;
  const float* xp = x + plane * n0 * n1;
  const bool packed = n1 % 2 == 0;
  for (int r0 = 0; r0 < n0; r0 += rpb) {
    const int nrow = n0 - r0 < rpb ? n0 - r0 : rpb;
    // rfft_rows' transforms with one load for both parities (an even row packed two samples a
    // value, an odd one a sample): one first pass in the code, not two, which kept the kernel
    // within the AMD scalar registers
    auto load = [&](int r, int m) {
      const float* xr = xp + (i64)(r0 + r) * n1;
      return packed ? make_c(xr[2 * m], xr[2 * m + 1]) : make_c(xr[m], 0.f);
    };
    const float2* z = fft_rows_loaded<MAXR, -1, float2>(load, a, b, tw1 + nc1 / 2 + 1, nc1, nrow,
                                                        rad1, np1);
    rfft_split(z, tw1, nrow, n1, [&](int r, int f, float2 v) {
      if (f < m1) T[f * n0p + r0 + r] = c_scale(v, s1[f]);
    });
    __syncthreads();
  }
  // PAIRED: mode i at complex element i paired_planes + plane, below 2^31 (the host's Plane
  // checks; a layout a kernel and 32-bit indices: a run-time choice, or 64-bit ones, spilled
  // the AMD kernel's scalar registers)
  float* o = out + plane * 2 * M;
  float2* o2 = reinterpret_cast<float2*>(out);
  for (int k0 = 0; k0 < m1; k0 += g) {
    const int ng = m1 - k0 < g ? m1 - k0 : g;
    auto load = [&](int r, int m) { return T[(k0 + r) * n0p + m]; };
    const float2* Z = fft_rows_loaded<MAXR, -1, float2>(load, a, a + g * n0, tw0 + n0 / 2 + 1,
                                                        n0, ng, rad0, np0);
    RowCursor at(ng);  // (mode j, column r)
    for (int i = threadIdx.x; i < ng * m0; i += blockDim.x, at.next()) {
      const float2 v = Z[at.c * n0 + bins0[at.r]];
      const int mode = at.r * m1 + k0 + at.c;
      if constexpr (PAIRED) {
        o2[mode * paired_planes + (int)plane] = make_c(v.x * s0, v.y * s0);
      } else {
        o[mode] = v.x * s0;
        o[M + mode] = v.y * s0;
      }
    }
    __syncthreads();
  }
}

template <int MAXR, bool PAIRED>
__device__ __forceinline__ void fno_plane_irfft_body(
    const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw1,
    const float2* __restrict__ tw0, const float* __restrict__ s1, const int* __restrict__ inv0,
    float s0, int n0, int n1, int m0, int m1, int rpb, int g, unsigned long long rad1, int np1,
    unsigned long long rad0, int np0, int paired_planes) {
  const int nc1 = n1 % 2 == 0 ? n1 / 2 : n1, nf1 = n1 / 2 + 1, n0p = n0 + 1, M = m0 * m1;
  float2* T = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* a = T + m1 * n0p;
  float2* b = a + rpb * (nc1 + 1);
  const i64 plane = blockIdx.x;
  const float* yp = y + plane * 2 * M;
  const float2* y2 = reinterpret_cast<const float2*>(y);  // PAIRED: as the forward's
  for (int k0 = 0; k0 < m1; k0 += g) {
    const int ng = m1 - k0 < g ? m1 - k0 : g;
    auto load = [&](int r, int m) {
      const int j = inv0[m];
      if (j < 0) return make_c(0.f, 0.f);
      const int at = j * m1 + k0 + r;
      if constexpr (PAIRED) return c_scale(y2[at * paired_planes + (int)plane], s0);
      return make_c(yp[at] * s0, yp[M + at] * s0);
    };
    const float2* Z = fft_rows_loaded<MAXR, 1, float2>(load, a, a + g * n0, tw0 + n0 / 2 + 1,
                                                       n0, ng, rad0, np0);
    RowCursor at(n0);
    for (int i = threadIdx.x; i < ng * n0; i += blockDim.x, at.next())
      T[(k0 + at.r) * n0p + at.c] = c_scale(Z[i], s1[k0 + at.r]);
    __syncthreads();
  }
  float* o = out + plane * n0 * n1;
  for (int r0 = 0; r0 < n0; r0 += rpb) {
    const int nrow = n0 - r0 < rpb ? n0 - r0 : rpb;
    RowCursor at(nf1);
    for (int i = threadIdx.x; i < nrow * nf1; i += blockDim.x, at.next())
      b[i] = at.c < m1 ? T[at.c * n0p + r0 + at.r] : make_c(0.f, 0.f);
    __syncthreads();
    irfft_rows<MAXR, float, float, float>(a, b, tw1, o + (i64)r0 * n1, nrow, n1, n1, rad1, np1);
    __syncthreads();
  }
}

// ---- The plane kernels, warp form (fftmatvec/fno/_rows.py: Plane, variant "warp") ----------
// For planes whose rows hold 32 P complex values (n1 = 64 P reals) and whose columns 32 Q
// (n0 = 32 Q), P in {1, 2, 4} and Q in {1, 2, 4, 8}: a group of 32 lanes transforms one row or
// one column at a time, lane l holding its values l, l + 32, ... in registers: a P-point DFT in
// registers, the twiddles, then a 32-point FFT across the lanes by shuffles (decimation in
// frequency; one more shuffle puts the bins in natural order: lane l, register k2 holds bin
// P l + k2). A row or a column makes no pass through shared memory and waits on no barrier: the
// pass form's rows ran latency-bound in their shared-memory passes and barriers, and this form
// ran faster (docs/benchmarks.md, fortieth run).
// Shared memory holds the kept columns T (m1 rows of n0 + 1 values, as in the pass form) and
// the plane's 2 m0 m1 modes, staged so that global memory is read and written in whole rows.
// Lanes of 32 on AMD's 64-wide wavefronts too (the shuffles' width is 32). The results are the
// pass form's up to float32 rounding (the twiddles of the lanes' FFTs computed, exactly reduced,
// with sincospif).
// Launch bounds: registers for four blocks a multiprocessor on NVIDIA, two for columns of 256
// (Q = 8), whose planes' shared memory allows no more (and whose 64 registers spilled).
#define FNO_WARP_THREADS 256
#define FNO_WARP_MIN_BLOCKS_1 4
#define FNO_WARP_MIN_BLOCKS_2 4
#define FNO_WARP_MIN_BLOCKS_4 4
#define FNO_WARP_MIN_BLOCKS_8 2
#if defined(FFTMATVEC_HIP)
#define FNO_WARP_BOUNDS(Q) __launch_bounds__(FNO_WARP_THREADS)
#else
#define FNO_WARP_BOUNDS(Q) __launch_bounds__(FNO_WARP_THREADS, FNO_WARP_MIN_BLOCKS_##Q)
#endif
// The planes' rows loaded ahead of their FFTs (warp_rows_rfft's PIPE): NVIDIA, where it was
// measured; the AMD build as it was.
#if defined(FFTMATVEC_HIP)
#define FNO_PLANE_PIPE false
#else
#define FNO_PLANE_PIPE true
#endif

// exp(S 2 pi i num / den), the angle reduced to (-1/2, 1/2] of a turn in integers
__device__ __forceinline__ float2 unit_root(int num, int den, int S) {
  int r = num % den;
  if (2 * r > den) r -= den;
  float s, c;
  sincospif(2.0f * (float)r / (float)den, &s, &c);
  return make_c(c, S > 0 ? s : -s);
}

__device__ __forceinline__ float2 shfl_c(float2 v, int src) {
  return make_c(__shfl_sync(0xffffffffu, v.x, src, 32), __shfl_sync(0xffffffffu, v.y, src, 32));
}

__device__ __forceinline__ float2 shfl_xor_c(float2 v, int mask) {
  return make_c(__shfl_xor_sync(0xffffffffu, v.x, mask, 32),
                __shfl_xor_sync(0xffffffffu, v.y, mask, 32));
}

// The 32-point FFT across a group's lanes (sign S): lane l gives element l and gets bin l.
// Each stage is the same instructions on every lane (no branch on the lane's half, whose two
// sides every lane issued): the lane's value times sg (-1 on the upper half of a butterfly, where
// o - v is wanted, +1 on the lower, where v + o) plus its partner's o, then times w[s] (the
// twiddle on the upper half, exactly 1 on the lower): the same sums, bit for bit.
template <int S>
struct Lanes32 {
  float2 w[4];  // the twiddles of the stages combining 32, 16, 8 and 4 values (2: none)
  int lane, rev;
  __device__ __forceinline__ Lanes32() {
    lane = (int)(threadIdx.x & 31u);
    rev = (int)(__brev((unsigned int)lane) >> 27);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int h = 16 >> s;
      w[s] = (lane & h) ? unit_root(lane & (h - 1), 2 * h, S) : make_c(1.f, 0.f);
    }
  }
  // the stages alone: afterwards lane j holds bin brev(j) (rev of lane j)
  __device__ __forceinline__ float2 fft_brev(float2 v) const {
#pragma unroll
    for (int s = 0; s < 5; ++s) {
      const int h = 16 >> s;
      const float2 o = shfl_xor_c(v, h);
      const float sg = (lane & h) ? -1.f : 1.f;
      v = make_c(fmaf(sg, v.x, o.x), fmaf(sg, v.y, o.y));
      if (s < 4) v = c_mul(v, w[s]);
    }
    return v;
  }
  // lane j holds bin j
  __device__ __forceinline__ float2 fft(float2 v) const { return shfl_c(fft_brev(v), rev); }
};

// The complex FFT (sign S) of length 32 P held by a group, lane l register p holding element
// l + 32 p: afterwards lane l register k2 holds bin P l + k2, or with ORDERED false bin
// P brev(l) + k2 (brev(l) = lanes.rev: the lanes' last permutation, two shuffles a register,
// left to the caller, who may read or write the bins in any order). tw[k2] = exp(S 2 pi i l
// k2 / 32 P).
template <int P, int S, bool ORDERED = true>
__device__ __forceinline__ void group_fft(float2 (&v)[P], const Lanes32<S>& lanes,
                                          const float2 (&tw)[P]) {
  if constexpr (P > 1) {
    Dft<P, S, float2>::run(v);
#pragma unroll
    for (int k2 = 1; k2 < P; ++k2) v[k2] = c_mul(v[k2], tw[k2]);
  }
#pragma unroll
  for (int k2 = 0; k2 < P; ++k2) v[k2] = ORDERED ? lanes.fft(v[k2]) : lanes.fft_brev(v[k2]);
}

// exp(-2 pi i k / 64 P) for k < 32 P from the rows' table, which holds k <= 16 P (its split
// twiddles: rowfft.py's twiddle_table), by exp(-2 pi i (32 P - k) / 64 P) = -conj of it.
template <int P>
__device__ __forceinline__ float2 split_twiddle(const float2* __restrict__ tw1, int k) {
  constexpr int N1 = 32 * P;
  if (2 * k <= N1) return tw1[k];
  const float2 t = tw1[N1 - k];
  return make_c(-t.x, t.y);
}

// The twiddles of a group's real FFT of a row of 64 P reals (warp_row_rfft): twr, group_fft's,
// and spw[k2] = split_twiddle<P>(tw, P bl + k2), bl the lane of this lane's bins (bl = lane;
// lanes.rev where its FFT leaves them in that order).
template <int P>
__device__ __forceinline__ void warp_rfft_twiddles(const float2* __restrict__ tw, int lane,
                                                   float2 (&twr)[P], float2 (&spw)[P],
                                                   int bl) {
#pragma unroll
  for (int k2 = 0; k2 < P; ++k2) {
    twr[k2] = unit_root(lane * k2, 32 * P, -1);
    spw[k2] = split_twiddle<P>(tw, P * bl + k2);
  }
}
template <int P>
__device__ __forceinline__ void warp_rfft_twiddles(const float2* __restrict__ tw, int lane,
                                                   float2 (&twr)[P], float2 (&spw)[P]) {
  warp_rfft_twiddles<P>(tw, lane, twr, spw, lane);
}

// The twiddles of its inverse (warp_row_irfft): twr, group_fft's, and
// ctw[k2] = conj(split_twiddle<P>(tw, lane + 32 k2)).
template <int P>
__device__ __forceinline__ void warp_irfft_twiddles(const float2* __restrict__ tw, int lane,
                                                    float2 (&twr)[P], float2 (&ctw)[P]) {
#pragma unroll
  for (int k2 = 0; k2 < P; ++k2) {
    twr[k2] = unit_root(lane * k2, 32 * P, 1);
    ctw[k2] = c_conj(split_twiddle<P>(tw, lane + 32 * k2));
  }
}

// Rows a group loads before it transforms the first of them, in the warp form's real FFTs (R of
// the kernels' templates): 8 P values a lane in flight rather than P, where a group's FFT of a
// row is short against the latency of its loads.
#define FNO_WARP_AHEAD(P) (8 / (P))

// A row of 64 P reals into a group's registers as z[n] = x[2n] + i x[2n + 1], lane l register p
// holding n = l + 32 p.
template <int P>
__device__ __forceinline__ void warp_load_row(const float* __restrict__ xr, float2 (&v)[P],
                                              int lane) {
#pragma unroll
  for (int p = 0; p < P; ++p) v[p] = *reinterpret_cast<const float2*>(xr + 2 * (lane + 32 * p));
}

// The real FFT of the row v holds (warp_load_row): emit(k, X[k]) for this lane's bins
// k = P bl + k2 (bl = lane; with ORDERED false bl = lanes.rev, the bins as group_fft leaves
// them, in the order no caller of emit depends on), and for the Nyquist bin k = 32 P on the lane
// of bl = 0. twr: group_fft's twiddles, spw[k2] = split_twiddle<P>(tw, P bl + k2).
template <int P, typename Emit, bool ORDERED = true>
__device__ __forceinline__ void warp_row_rfft(float2 (&v)[P], const Lanes32<-1>& lanes,
                                              const float2 (&twr)[P], const float2 (&spw)[P],
                                              Emit emit) {
  constexpr int N1 = 32 * P;
  const int lane = lanes.lane, bl = ORDERED ? lane : lanes.rev;
  group_fft<P, -1, ORDERED>(v, lanes, twr);
  // conj Z[N1 - k] for this lane's bins k = P bl + k2: bin P ((32 - bl) mod 32) for k2 = 0, bin
  // P (31 - bl) + P - k2 else, on the lanes whose bl those are (brev(31 - b) = 31 - brev(b))
  const int from0 = ORDERED ? (32 - lane) & 31 : (int)(__brev((unsigned)((32 - bl) & 31)) >> 27);
  float2 zn[P];
#pragma unroll
  for (int k2 = 0; k2 < P; ++k2)
    zn[k2] = c_conj(shfl_c(v[k2 == 0 ? 0 : P - k2], k2 == 0 ? from0 : 31 - lane));
#pragma unroll
  for (int k2 = 0; k2 < P; ++k2) {
    const int k = P * bl + k2;
    const float2 xe = c_scale(c_add(v[k2], zn[k2]), 0.5f);
    const float2 xo = c_muli<-1>(c_scale(c_sub(v[k2], zn[k2]), 0.5f));
    const float2 wxo = c_mul(spw[k2], xo);
    emit(k, c_add(xe, wxo));
    if (k == 0) emit(N1, c_conj(c_sub(xe, wxo)));
  }
}

// The rows r = r0, r0 + step, ... below n (a group's) of base (rows of 64 P reals) in steps of
// R: each step loads its R rows, then transforms them; or with PIPE, R rows always in flight:
// each row's slot is loaded again with the row R steps on before the row is transformed, so
// that the next rows' loads run under this row's FFT (the planes' kernels take it: their
// forwards ran faster so; the one-kernel layer and the row kernels ran slower so, and do not:
// docs/benchmarks.md, fifty-fifth run). row(r, k, X[k]) for every bin.
template <int P, int R, typename Row, bool ORDERED = true, bool PIPE = false>
__device__ __forceinline__ void warp_rows_rfft(const float* __restrict__ base, int r0, int step,
                                               int n, const Lanes32<-1>& lanes,
                                               const float2 (&twr)[P], const float2 (&spw)[P],
                                               Row row) {
  if constexpr (PIPE) {
    float2 v[R][P];
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int r = r0 + j * step;
      if (r < n) warp_load_row<P>(base + (i64)r * 64 * P, v[j], lanes.lane);
    }
    for (int ra = r0; ra < n; ra += step * R) {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int r = ra + j * step;
        if (r < n) {
          float2 u[P];
#pragma unroll
          for (int p = 0; p < P; ++p) u[p] = v[j][p];
          const int rn = r + step * R;
          if (rn < n) warp_load_row<P>(base + (i64)rn * 64 * P, v[j], lanes.lane);
          auto emit = [&](int k, float2 b) { row(r, k, b); };
          warp_row_rfft<P, decltype(emit), ORDERED>(u, lanes, twr, spw, emit);
        }
      }
    }
  } else {
    for (int ra = r0; ra < n; ra += step * R) {
      float2 v[R][P];
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int r = ra + j * step;
        if (r < n) warp_load_row<P>(base + (i64)r * 64 * P, v[j], lanes.lane);
      }
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int r = ra + j * step;
        if (r < n) {
          auto emit = [&](int k, float2 b) { row(r, k, b); };
          warp_row_rfft<P, decltype(emit), ORDERED>(v[j], lanes, twr, spw, emit);
        }
      }
    }
  }
}

// The inverse real FFT of a row of 64 P reals from its spectrum bin(k), k <= 32 P (zero past the
// kept bins; the imaginary parts of the DC and Nyquist bins dropped): the packed spectrum
// Z[k] = E + i O, its inverse FFT; afterwards lane l register k2 holds z[j] = y[2j] + i y[2j + 1],
// j = P l + k2 (with ORDERED false j = P lanes.rev + k2: group_fft's). twr: group_fft's
// twiddles, ctw[p] = conj(split_twiddle<P>(tw, lane + 32 p)).
template <int P, typename Bin, bool ORDERED = true>
__device__ __forceinline__ void warp_row_irfft(float2 (&v)[P], const Lanes32<1>& lanes,
                                               const float2 (&twr)[P], const float2 (&ctw)[P],
                                               Bin bin) {
  constexpr int N1 = 32 * P;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int k = lanes.lane + 32 * p;
    float2 xk = bin(k), xnk = bin(N1 - k);
    if (k == 0) {
      xk.y = 0.f;
      xnk.y = 0.f;
    }
    const float2 e = c_add(xk, c_conj(xnk));
    const float2 od = c_mul(c_sub(xk, c_conj(xnk)), ctw[p]);
    v[p] = c_add(e, c_muli<1>(od));
  }
  group_fft<P, 1, ORDERED>(v, lanes, twr);
}

template <int P, int Q, int R>
__device__ __forceinline__ void fno_plane_rfft_warp_body(
    const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw1,
    const float* __restrict__ s1, const int* __restrict__ inv0, float s0, int m0, int m1,
    int paired_planes) {
  constexpr int N1 = 32 * P, N0 = 32 * Q, n0p = N0 + 1;
  const int M = m0 * m1;
  float2* T = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float* O = reinterpret_cast<float*>(T + m1 * n0p);
  const Lanes32<-1> lanes;
  const int lane = lanes.lane, group = (int)(threadIdx.x >> 5), groups = (int)(blockDim.x >> 5);
  float2 twr[P], sp[P];  // the columns' twiddles are made after the rows, to spare registers
  warp_rfft_twiddles<P>(tw1, lane, twr, sp);
  const i64 plane = blockIdx.x;
  const float* xp = x + plane * (i64)(N0 * 2 * N1);
  // the rows: z[n] = x[2n] + i x[2n + 1], its FFT Z, the real FFT's bins k < m1 into T[k][row]
  auto keep = [&](int r, int k, float2 b) {
    if (k < m1) T[k * n0p + r] = c_scale(b, s1[k]);
  };
  warp_rows_rfft<P, R, decltype(keep), true, FNO_PLANE_PIPE>(xp, group, groups, N0, lanes, twr,
                                                              sp, keep);
  __syncthreads();
  // the kept columns: their FFTs, the kept bins (inv0[bin] = mode, -1 for none) into O
  float2 twc[Q];
#pragma unroll
  for (int k2 = 0; k2 < Q; ++k2) twc[k2] = unit_root(lane * k2, N0, -1);
  for (int k = group; k < m1; k += groups) {
    float2 v[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) v[q] = T[k * n0p + lane + 32 * q];
    group_fft<Q, -1>(v, lanes, twc);
#pragma unroll
    for (int k2 = 0; k2 < Q; ++k2) {
      const int j = inv0[Q * lane + k2];
      if (j >= 0) {
        O[j * m1 + k] = v[k2].x * s0;
        O[M + j * m1 + k] = v[k2].y * s0;
      }
    }
  }
  __syncthreads();
  if (paired_planes > 0) {  // mode i at o2[i planes]: a pair of values a mode
    float2* o2 = reinterpret_cast<float2*>(out) + plane;
    for (int i = threadIdx.x; i < M; i += blockDim.x)
      o2[(i64)i * paired_planes] = make_c(O[i], O[M + i]);
  } else {
    float* o = out + plane * 2 * M;
    for (int i = threadIdx.x; i < 2 * M; i += blockDim.x) o[i] = O[i];
  }
}

template <int P, int Q>
__device__ __forceinline__ void fno_plane_irfft_warp_body(
    const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw1,
    const float* __restrict__ s1, const int* __restrict__ inv0, float s0, int m0, int m1,
    int paired_planes, const float* __restrict__ bias, int channels, int bias_mode) {
  constexpr int N1 = 32 * P, N0 = 32 * Q, n0p = N0 + 1;
  const int M = m0 * m1;
  float2* T = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float* O = reinterpret_cast<float*>(T + m1 * n0p);
  const Lanes32<1> lanes;
  const int lane = lanes.lane, group = (int)(threadIdx.x >> 5), groups = (int)(blockDim.x >> 5);
  float2 twc[Q];  // the rows' twiddles are made after the columns, to spare registers
#pragma unroll
  for (int k2 = 0; k2 < Q; ++k2) twc[k2] = unit_root(lane * k2, N0, 1);
  const i64 plane = blockIdx.x;
  const int bm = bias != nullptr ? bias_mode : -1;  // the mode that takes the bias, if any
  const float bp = fno_bias_of(bias, plane, channels);
  if (paired_planes > 0) {  // mode i at y2[i planes]
    const float2* y2 = reinterpret_cast<const float2*>(y) + plane;
    for (int i = threadIdx.x; i < M; i += blockDim.x) {
      const float2 v = y2[(i64)i * paired_planes];
      O[i] = i == bm ? v.x + bp : v.x;
      O[M + i] = v.y;
    }
  } else {
    const float* yp = y + plane * 2 * M;
    for (int i = threadIdx.x; i < 2 * M; i += blockDim.x) O[i] = i == bm ? yp[i] + bp : yp[i];
  }
  __syncthreads();
  // the kept columns: the modes at their bins (zero elsewhere), the inverse FFT, times s1[k],
  // into T[k] with row r = Q l + k2 at (r % Q) 32 + r / Q (lanes on consecutive banks)
  for (int k = group; k < m1; k += groups) {
    float2 v[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int j = inv0[lane + 32 * q];
      v[q] = j < 0 ? make_c(0.f, 0.f) : make_c(O[j * m1 + k] * s0, O[M + j * m1 + k] * s0);
    }
    group_fft<Q, 1>(v, lanes, twc);
    const float s = s1[k];
#pragma unroll
    for (int k2 = 0; k2 < Q; ++k2) T[k * n0p + k2 * 32 + lane] = c_scale(v[k2], s);
  }
  __syncthreads();
  // the rows: the packed spectrum Z[k] = E + i O of X[k] = T[k][r] (k < m1, zero above; the
  // imaginary parts of DC and Nyquist dropped), its inverse FFT z, y[2m] + i y[2m + 1] = z[m]
  float2 twr[P], ctw[P];
  warp_irfft_twiddles<P>(tw1, lane, twr, ctw);
  float* op = out + plane * (i64)(N0 * 2 * N1);
  for (int r = group; r < N0; r += groups) {
    const int sr = (r % Q) * 32 + r / Q;
    float2 v[P];
    warp_row_irfft<P>(v, lanes, twr, ctw, [&](int k) {
      return k < m1 ? T[k * n0p + sr] : make_c(0.f, 0.f);
    });
    float* orow = op + (i64)r * 2 * N1;
#pragma unroll
    for (int k2 = 0; k2 < P; ++k2) {
      const int m = P * lane + k2;
      orow[2 * m] = v[k2].x;
      orow[2 * m + 1] = v[k2].y;
    }
  }
}

// ---- the last axis in the warp form (fftmatvec/fno/_rows.py: LastAxis, variant "warp") -----
// A group of 32 lanes a row of L = 64 P points (N1 = 32 P complex values), as the plane kernels'
// warp form transforms its rows: no pass through shared memory but the block's kept bins, rpb
// rows of them staged (S: rows of 2 m values, or modes-major 2 m columns rpb + 1 apart), so that
// the block writes (reads) them in whole runs of each layout of the spectral side. tw: the
// rows' table of LastAxis (its split twiddles); scale[k] on the way out (in).

#define FNO_ROW_WARP_THREADS 256
#define FNO_ROW_WARP_BOUNDS __launch_bounds__(FNO_ROW_WARP_THREADS)

// Row r's real and imaginary parts of bin k in S.
struct BinStage {
  float* s;
  int m, sp, modes_major;
  __device__ __forceinline__ int re(int r, int k) const {
    return modes_major ? k * sp + r : r * 2 * m + k;
  }
  __device__ __forceinline__ int im(int r, int k) const {
    return modes_major ? (m + k) * sp + r : r * 2 * m + m + k;
  }
  // global memory g's element of column j (part, bin) of row c of the block's nrow rows, and
  // S's, i = threadIdx.x, threadIdx.x + blockDim.x, ...: whole runs of g in each layout
  template <typename F>
  __device__ __forceinline__ void each(i64 rows, i64 row0, int nrow, F f) const {
    if (!modes_major) {
      for (int i = threadIdx.x; i < nrow * 2 * m; i += blockDim.x) f(row0 * 2 * m + i, i);
      return;
    }
    if (modes_major == FNO_PAIRED) {
      RowCursor at(2 * nrow);  // at.r: the bin, at.c: 2 (row) + part
      for (int i = threadIdx.x; i < 2 * m * nrow; i += blockDim.x, at.next())
        f(((i64)at.r * rows + row0) * 2 + at.c, ((at.c & 1) * m + at.r) * sp + (at.c >> 1));
      return;
    }
    RowCursor at(nrow);  // at.r: the column (part, bin), at.c: the row
    for (int i = threadIdx.x; i < 2 * m * nrow; i += blockDim.x, at.next())
      f((i64)at.r * rows + row0 + at.c, at.r * sp + at.c);
  }
  __device__ __forceinline__ void load(const float* __restrict__ g, i64 rows, i64 row0,
                                       int nrow) const {
    each(rows, row0, nrow, [&](i64 gi, int si) { s[si] = g[gi]; });
  }
  __device__ __forceinline__ void store(float* __restrict__ g, i64 rows, i64 row0,
                                        int nrow) const {
    each(rows, row0, nrow, [&](i64 gi, int si) { g[gi] = s[si]; });
  }
};

template <int P>
__device__ __forceinline__ void fno_rfft_warp_body(const float* __restrict__ x,
                                                   float* __restrict__ out,
                                                   const float2* __restrict__ tw,
                                                   const float* __restrict__ scale, i64 rows,
                                                   int m, int rpb, int modes_major) {
  constexpr int N1 = 32 * P, L = 2 * N1;
  const BinStage st{reinterpret_cast<float*>(fftmatvec_dynamic_smem), m, rpb + 1, modes_major};
  const Lanes32<-1> lanes;
  const int lane = lanes.lane, group = (int)(threadIdx.x >> 5), groups = (int)(blockDim.x >> 5);
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  float2 twr[P], spw[P];
  warp_rfft_twiddles<P>(tw, lane, twr, spw);
  // z[n] = x[2n] + i x[2n + 1], its FFT Z, the real FFT's bins k < m times scale[k] into S
  warp_rows_rfft<P, FNO_WARP_AHEAD(P)>(x + row0 * L, group, groups, nrow, lanes, twr, spw,
                                       [&](int r, int k, float2 b) {
                                         if (k < m) {
                                           b = c_scale(b, scale[k]);
                                           st.s[st.re(r, k)] = b.x;
                                           st.s[st.im(r, k)] = b.y;
                                         }
                                       });
  __syncthreads();
  st.store(out, rows, row0, nrow);
}

template <int P>
__device__ __forceinline__ void fno_irfft_warp_body(const float* __restrict__ y,
                                                    float* __restrict__ out,
                                                    const float2* __restrict__ tw,
                                                    const float* __restrict__ scale, i64 rows,
                                                    int m, int rpb, int modes_major,
                                                    const float* __restrict__ bias,
                                                    int channels) {
  constexpr int N1 = 32 * P, L = 2 * N1;
  const BinStage st{reinterpret_cast<float*>(fftmatvec_dynamic_smem), m, rpb + 1, modes_major};
  const Lanes32<1> lanes;
  const int lane = lanes.lane, group = (int)(threadIdx.x >> 5), groups = (int)(blockDim.x >> 5);
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  st.load(y, rows, row0, nrow);
  float2 twr[P], ctw[P];
  warp_irfft_twiddles<P>(tw, lane, twr, ctw);
  __syncthreads();
  if (bias != nullptr) {  // (the same for the whole block) the bias on each row's bin 0 in S
    for (int r = threadIdx.x; r < nrow; r += blockDim.x)
      st.s[st.re(r, 0)] += fno_bias_of(bias, row0 + r, channels);
    __syncthreads();
  }
  // the packed spectrum Z[k] = E + i O of X[k] = scale[k] (bin k of S; zero from m, the
  // imaginary parts of DC and Nyquist dropped), its inverse FFT z, y[2n] + i y[2n + 1] = z[n]
  for (int r = group; r < nrow; r += groups) {
    float2 v[P];
    warp_row_irfft<P>(v, lanes, twr, ctw, [&](int k) {
      return k < m ? c_scale(make_c(st.s[st.re(r, k)], st.s[st.im(r, k)]), scale[k])
                   : make_c(0.f, 0.f);
    });
    float* orow = out + (row0 + r) * L;
#pragma unroll
    for (int k2 = 0; k2 < P; ++k2) *reinterpret_cast<float2*>(orow + 2 * (P * lane + k2)) = v[k2];
  }
}

// ---- long rows in the column form: L = 64 R reals (LastAxis, variant "columns") -------------
// Sample n = n1 + R n2 of a row (n1 < R, n2 < 64). Thread n1 of the row's R holds column n1
// (x[n1 + R n2], n2 < 64; a warp's loads of one n2 are consecutive values) in registers and
// takes its real FFT there, C_{n1}[q] for q <= 32 (the packed z[j] = x[2j] + i x[2j + 1], a
// 32-point FFT in registers, the split), C_{n1}[64 - q] = conj C_{n1}[q]. The kept bins are
// X[k] = sum_{n1} w^{n1 k} C_{n1}[k mod 64] (w = e^{-2 pi i / L}; k < m), the columns' bins
// through shared memory, the twiddles tw[n1 m + k] = w^{n1 k} a table of the host's (exact,
// rounded once; every FNO_COLS_SEED-th read, products between). The inverse runs it
// backwards: thread n1 sums D_{n1}[q] = sum of X[k] w^{-n1 k} over the bins k = q (mod 64) of
// the Hermitian spectrum (tw[k R + n1] = w^{-n1 k}; the kept bins, scaled, through shared
// memory), and the inverse real FFT of D_{n1} (64 points) is column n1. A thread's work on the
// bins is m complex products each way, whatever L; no shuffles, one pass through shared memory.
// rpb rows a block of rpb R threads, their kept bins staged (BinStage) so that the spectral
// side moves in whole runs of its layout.
// Launch bounds: on NVIDIA, registers for B blocks of the most threads a multiprocessor: the
// forward two (three ran slower), the inverse three (faster than two on rows of 1024-4096
// points).
// The inverse also with R a template argument RC (16, 32, 64, 128: rows of 1024-8192 points; 0:
// R read at run time): a thread's 64 stores R apart then take their offsets in the instruction,
// where a run-time R costs a 64-bit address sum each, which made it faster (docs/benchmarks.md,
// fifty-fourth run). The forward so built ran slower, also with only its loads' offsets fixed,
// and slower again at fewer blocks a multiprocessor: it reads R at run time.
#define FNO_COLS_THREADS 256
#if defined(FFTMATVEC_HIP)
#define FNO_COLS_BOUNDS(B) __launch_bounds__(FNO_COLS_THREADS)
#else
#define FNO_COLS_BOUNDS(B) __launch_bounds__(FNO_COLS_THREADS, B)
#endif

// cos(2 pi j / 64), j <= 16
__host__ __device__ constexpr float cos64(int j) {
  constexpr float t[17] = {1.000000000e+00f, 9.951847196e-01f, 9.807852507e-01f,
                           9.569403529e-01f, 9.238795042e-01f, 8.819212914e-01f,
                           8.314695954e-01f, 7.730104327e-01f, 7.071067691e-01f,
                           6.343932748e-01f, 5.555702448e-01f, 4.713967443e-01f,
                           3.826834261e-01f, 2.902846634e-01f, 1.950903237e-01f,
                           9.801714122e-02f, 0.0f};
  return t[j];
}

// v exp(S 2 pi i j / 64); constants where j is (the loops below unrolled), the products by 1
// and +-i left out
template <int S>
__device__ __forceinline__ float2 twiddle64(float2 v, int j) {
  j &= 63;
  if (j == 0) return v;
  if (j == 16) return c_muli<S>(v);
  if (j == 32) return make_c(-v.x, -v.y);
  if (j == 48) return c_muli<-S>(v);
  const int r = j & 15;
  const float c = cos64(r), s = cos64(16 - r);  // cos and sin of 2 pi r / 64
  const int quarter = j >> 4;
  const float re = quarter == 0 ? c : quarter == 1 ? -s : quarter == 2 ? -c : s;
  const float im = quarter == 0 ? s : quarter == 1 ? c : quarter == 2 ? -s : -c;
  return c_mul(v, make_c(re, S > 0 ? im : -im));
}

__host__ __device__ constexpr int bitrev5(int k) {
  return ((k & 1) << 4) | ((k & 2) << 2) | (k & 4) | ((k & 8) >> 2) | ((k & 16) >> 4);
}

// The FFT (sign S) of N <= 64 complex values (a power of two) in registers, radix 2, decimation
// in frequency: afterwards v[bit reversal of k] holds bin k.
template <int N, int S, int H = N / 2>
__device__ __forceinline__ void reg_fft(float2 (&v)[N]) {
#pragma unroll
  for (int b = 0; b < N; b += 2 * H) {
#pragma unroll
    for (int j = 0; j < H; ++j) {
      const float2 a = v[b + j], c = v[b + j + H];
      v[b + j] = c_add(a, c);
      v[b + j + H] = twiddle64<S>(c_sub(a, c), j * (32 / H));
    }
  }
  if constexpr (H > 1) reg_fft<N, S, H / 2>(v);
}

// The twiddles of the sums over columns (bins) are read from the table every FNO_COLS_SEED
// terms, multiplied by the step's between: the table's reads an eighth, the products' rounding
// at most seven steps deep.
#define FNO_COLS_SEED 8

// Threads that sum one bin of a row over its R columns in the forward: up to 8 (a power of
// two) while a block of rows of R threads has as many for its m bins a row
// (fftmatvec/fno/_rows.py: cols_parts).
__device__ __forceinline__ int fno_cols_parts(int R, int m) {
  int parts = 1;
  while (parts < 8 && 2 * parts * m <= R) parts *= 2;
  return parts;
}

__device__ __forceinline__ void fno_rfft_cols_body(const float* __restrict__ x,
                                                   float* __restrict__ out,
                                                   const float2* __restrict__ tw,
                                                   const float* __restrict__ scale, i64 rows,
                                                   int R, int m, int rpb, int modes_major) {
  const i64 L = 64 * (i64)R;
  float2* cs = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);  // [rpb R][33]
  const BinStage st{reinterpret_cast<float*>(cs + rpb * R * 33), m, rpb + 1, modes_major};
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  const int r = (int)threadIdx.x / R, n1 = (int)threadIdx.x - r * R;
  if (r < nrow) {
    const float* xc = x + (row0 + r) * L + n1;
    float2 v[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = make_c(xc[(2 * j) * R], xc[(2 * j + 1) * R]);
    reg_fft<32, -1>(v);
    // the split: C[q] = E + w64^{-q} O, E = (Z[q] + conj Z[32 - q]) / 2,
    // O = -i (Z[q] - conj Z[32 - q]) / 2 (Z[32] = Z[0])
    float2* c = cs + threadIdx.x * 33;
    c[0] = make_c(v[0].x + v[0].y, 0.f);
    c[32] = make_c(v[0].x - v[0].y, 0.f);
    // and C[32 - q] = conj(E - w64^{-q} O): the pair from one E and one product
#pragma unroll
    for (int q = 1; q <= 16; ++q) {
      const float2 a = v[bitrev5(q)], b = c_conj(v[bitrev5(32 - q)]);
      const float2 e = c_scale(c_add(a, b), 0.5f);
      const float2 t = twiddle64<-1>(c_muli<-1>(c_scale(c_sub(a, b), 0.5f)), q);
      c[q] = c_add(e, t);
      if (q < 16) c[32 - q] = c_conj(c_sub(e, t));
    }
  }
  __syncthreads();
  // bin k of row rr: sum_{n1} w^{n1 k} C_{n1}[k mod 64], times scale[k], into the stage; each
  // sum in `parts` strided parts where the block has threads to spare (fno_cols_parts), the
  // parts through shared memory after the stage
  const int items = nrow * m, parts = fno_cols_parts(R, m);
  float2* part = reinterpret_cast<float2*>(st.s + 2 * m * (rpb + 1));
  for (int i = threadIdx.x; i < items * parts; i += blockDim.x) {
    const int p = i / items, it = i - p * items, rr = it / m, k = it - rr * m;
    int q = k & 63;
    // C[q] = conj C[64 - q]: for those bins the sum of conj(C w'), w' = conj w, conjugated
    const float sg = q > 32 ? -1.f : 1.f;
    if (q > 32) q = 64 - q;
    const float2* c = cs + rr * R * 33 + q;
    const float2* t = tw + k;
    // w^{n1 k} from the table every FNO_COLS_SEED columns, by products with w^{parts k} between
    float2 step = t[(i64)parts * m];
    step.y *= sg;
    float2 acc[2] = {make_c(0.f, 0.f), make_c(0.f, 0.f)};
    for (int n0 = p; n0 < R; n0 += FNO_COLS_SEED * parts) {
      float2 w = t[(i64)n0 * m];
      w.y *= sg;
#pragma unroll
      for (int j = 0; j < FNO_COLS_SEED; ++j) {
        const int n1 = n0 + j * parts;
        if (n1 < R) cfma(acc[j & 1], c[n1 * 33], w);
        w = c_mul(w, step);
      }
    }
    float2 b = c_add(acc[0], acc[1]);
    b.y *= sg;
    if (parts > 1) {
      part[i] = b;
    } else {
      st.s[st.re(rr, k)] = b.x * scale[k];
      st.s[st.im(rr, k)] = b.y * scale[k];
    }
  }
  if (parts > 1) {
    __syncthreads();
    for (int it = threadIdx.x; it < items; it += blockDim.x) {
      const int rr = it / m, k = it - rr * m;
      float2 b = part[it];
      for (int p = 1; p < parts; ++p) b = c_add(b, part[p * items + it]);
      st.s[st.re(rr, k)] = b.x * scale[k];
      st.s[st.im(rr, k)] = b.y * scale[k];
    }
  }
  __syncthreads();
  st.store(out, rows, row0, nrow);
}

template <int RC>
__device__ __forceinline__ void fno_irfft_cols_body(const float* __restrict__ y,
                                                    float* __restrict__ out,
                                                    const float2* __restrict__ tw,
                                                    const float* __restrict__ scale, i64 rows,
                                                    int R_, int m, int rpb, int modes_major,
                                                    const float* __restrict__ bias,
                                                    int channels) {
  const int R = RC > 0 ? RC : R_;
  const i64 L = 64 * (i64)R;
  float2* xs = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);  // [rpb][m], scaled
  const BinStage st{reinterpret_cast<float*>(xs + rpb * m), m, rpb + 1, modes_major};
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  const int r = (int)threadIdx.x / R, n1 = (int)threadIdx.x - r * R;
  st.load(y, rows, row0, nrow);
  __syncthreads();
  // the kept bins times scale[k] (the bias on bin 0's real part first), the imaginary parts of
  // DC and Nyquist dropped
  for (int i = threadIdx.x; i < nrow * m; i += blockDim.x) {
    const int rr = i / m, k = i - rr * m;
    const float re = k == 0 ? st.s[st.re(rr, 0)] + fno_bias_of(bias, row0 + rr, channels)
                            : st.s[st.re(rr, k)];
    float2 b = c_scale(make_c(re, st.s[st.im(rr, k)]), scale[k]);
    if (k == 0 || 2 * (i64)k == L) b.y = 0.f;
    xs[i] = b;
  }
  __syncthreads();
  if (r >= nrow) return;
  // D[q] (q <= 32): a = X[k] w^{-n1 k} goes to D[k mod 64], conj a to D[-k mod 64] (the bin
  // L - k; none for DC and Nyquist), where that is at most 32
  float2 d[33];
#pragma unroll
  for (int q = 0; q <= 32; ++q) d[q] = make_c(0.f, 0.f);
  const float2* xr = xs + r * m;
  // w^{-n1 k} from the table every FNO_COLS_SEED bins, by products with w^{-n1} between
  const float2 step = tw[(i64)(m > 1) * R + n1];
  float2 w = step;
  for (int k0 = 0; k0 < m; k0 += 64) {
#pragma unroll
    for (int q = 0; q < 64; ++q) {
      const int k = k0 + q;
      if (k < m) {
        w = q % FNO_COLS_SEED == 0 ? tw[(i64)k * R + n1] : c_mul(w, step);
        const float2 a = c_mul(xr[k], w);
        if (q <= 32) d[q] = c_add(d[q], a);
        if ((q == 0 ? k0 > 0 : q >= 32) && 2 * (i64)k != L)
          d[(64 - q) & 63] = c_add(d[(64 - q) & 63], c_conj(a));
      }
    }
  }
  // the packed spectrum Z[q] = E + i O, E = D[q] + conj D[32 - q],
  // O = (D[q] - conj D[32 - q]) w64^{q}; its inverse FFT z[j] = y[2j] + i y[2j + 1]
  float2 v[32];
  v[0] = make_c(d[0].x + d[32].x, d[0].x - d[32].x);
  // (and Z[32 - q] = conj(E - i t), t = (D[q] - conj D[32 - q]) w64^{q}: one product a pair)
#pragma unroll
  for (int q = 1; q <= 16; ++q) {
    const float2 a = d[q], b = c_conj(d[32 - q]);
    const float2 e = c_add(a, b), t = c_muli<1>(twiddle64<1>(c_sub(a, b), q));
    v[q] = c_add(e, t);
    if (q < 16) v[32 - q] = c_conj(c_sub(e, t));
  }
  reg_fft<32, 1>(v);
  float* o = out + (row0 + r) * L + n1;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float2 z = v[bitrev5(j)];
    o[(2 * j) * R] = z.x;
    o[(2 * j + 1) * R] = z.y;
  }
}

// ---- the paired modes' channel product for small batches (fftmatvec/fno/_product.py) --------
// Y[m] = X[m] W[m] for every mode m: X (M, B, C), W (M, C, O), Y (M, B, O) complex64, each
// matrix row-major (the paired layout: fftmatvec/fno/_dft.py, PairedChain). For batches of a few
// rows, where cuBLAS's batched complex GEMM runs tiles of 32 x 64 on 16 rows and takes longer
// than this kernel, well short of the bytes' rate. A block takes mpb
// modes (blockDim.x = mpb O / 2 threads), a thread two output columns of NB rows (blockIdx.y:
// the rows' tile); the weight streams from global memory, UR pairs of k-steps ahead; the block's
// rows of X go through shared memory in chunks of FNO_PRODUCT_KC columns ([mode][row][k], two
// k-steps a 16-byte read, the same address for all of a mode's threads), double-buffered by
// cp.async on NVIDIA sm_80 and newer, loaded in turn elsewhere. C and O even, 16-byte aligned
// arrays (the host's ModeProduct checks both).
#define FNO_PRODUCT_KC 32
#define FNO_PRODUCT_MIN_BLOCKS_8 3
#define FNO_PRODUCT_MIN_BLOCKS_16 2
#if defined(FFTMATVEC_HIP)
#define FNO_PRODUCT_BOUNDS(NB) __launch_bounds__(256)
#else
#define FNO_PRODUCT_BOUNDS(NB) __launch_bounds__(256, FNO_PRODUCT_MIN_BLOCKS_##NB)
#endif

// acc += x w, complex, each part's imaginary-by-imaginary (or cross) term added first
__device__ __forceinline__ void fno_cmac(float2& acc, float2 x, float2 w) {
  acc.x = fmaf(x.x, w.x, fmaf(-x.y, w.y, acc.x));
  acc.y = fmaf(x.x, w.y, fmaf(x.y, w.x, acc.y));
}

// acc0 += x (w.x, w.y), acc1 += x (w.z, w.w): two output columns of one row, complex
__device__ __forceinline__ void fno_cmac2(float2& acc0, float2& acc1, float2 x, float4 w) {
  fno_cmac(acc0, x, make_c(w.x, w.y));
  fno_cmac(acc1, x, make_c(w.z, w.w));
}

template <int NB, int UR>
__device__ __forceinline__ void fno_modes_cgemm_body(const float2* __restrict__ X,
                                                     const float2* __restrict__ W,
                                                     float2* __restrict__ Y, int M, int B, int C,
                                                     int O) {
  constexpr int KC = FNO_PRODUCT_KC;
  float2* xs = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);  // two chunks
  const int tpm = O / 2, mpb = (int)blockDim.x / tpm;
  const int lm = (int)threadIdx.x / tpm, t = (int)threadIdx.x % tpm;
  const int m = (int)blockIdx.x * mpb + lm, b0 = (int)blockIdx.y * NB;
  const int chunk = mpb * NB * KC;  // values of one chunk
  // chunk buf <- X[modes of the block, rows b0.., columns k0..k0 + KC), zero past the ends
  auto load = [&](int buf, int k0) {
    for (int i = threadIdx.x; i < mpb * NB * (KC / 2); i += blockDim.x) {
      const int mm = i / (NB * KC / 2), r = i % (NB * KC / 2), b = r / (KC / 2);
      const int k = k0 + 2 * (r % (KC / 2)), gm = (int)blockIdx.x * mpb + mm;
      float2* dst = xs + buf * chunk + (mm * NB + b) * KC + (k - k0);
      const bool ok = gm < M && b0 + b < B && k < C;
      const float2* src = X + ((i64)(ok ? gm : 0) * B + (ok ? b0 + b : 0)) * C + (ok ? k : 0);
#if defined(FFTMATVEC_MMA)
      cp_async<16>(smem_u32(dst), src, ok);
#else
      *reinterpret_cast<float4*>(dst) =
          ok ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
    }
  };
  float2 acc0[NB], acc1[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) acc0[b] = acc1[b] = make_c(0.f, 0.f);
  const float4* w = reinterpret_cast<const float4*>(W + (i64)(m < M ? m : 0) * C * O) + t;
  const int chunks = (C + KC - 1) / KC;
#if defined(FFTMATVEC_MMA)
  load(0, 0);
  cp_async_commit();
#endif
  for (int c = 0; c < chunks; ++c) {
    const int k0 = c * KC, kc = C - k0 < KC ? C - k0 : KC;
#if defined(FFTMATVEC_MMA)
    if (c + 1 < chunks) load((c + 1) & 1, k0 + KC);
    cp_async_commit();
    cp_async_wait<1>();
#else
    load(c & 1, k0);
#endif
    __syncthreads();
    if (m < M) {
      const float2* xm = xs + (c & 1) * chunk + lm * NB * KC;
#pragma unroll UR
      for (int k = 0; k < kc; k += 2) {
        const float4 w0 = __ldg(w + (i64)(k0 + k) * tpm);
        const float4 w1 = __ldg(w + (i64)(k0 + k + 1) * tpm);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          const float4 xx = *reinterpret_cast<const float4*>(xm + b * KC + k);
          fno_cmac2(acc0[b], acc1[b], make_c(xx.x, xx.y), w0);
          fno_cmac2(acc0[b], acc1[b], make_c(xx.z, xx.w), w1);
        }
      }
    }
    __syncthreads();  // before the next chunk's copy overwrites this one
  }
  if (m >= M) return;
  float4* y = reinterpret_cast<float4*>(Y + ((i64)m * B + b0) * O) + t;
#pragma unroll
  for (int b = 0; b < NB; ++b)
    if (b0 + b < B)
      y[(i64)b * tpm] = make_float4(acc0[b].x, acc0[b].y, acc1[b].x, acc1[b].y);
}

// ---- a one-axis layer in one kernel (fftmatvec/fno/_fused1d.py) -------------------------------
// y = S(X W + b), X = F x, for a one-axis layer whose rows hold L = 64 P points (the warp form's
// rows) and C = O = 64 CQ channels: where the paired chain runs the analysis's row kernel, the
// complex GEMM of the modes and the synthesis's row kernel, each through global memory, a
// block takes NB batch rows (a multiple of 4) from x to y, its modes in shared memory between:
// 1. the real FFTs of its NB C rows (the warp form's), the kept bins k < m into
//    S[k kp + b C + c] (kp = NB C + 1, odd: a row's bins on distinct banks);
// 2. the channel product, a group of 32 lanes an item (mode k, RB batch rows b = RB h ..
//    RB h + RB - 1; RB = NB: the weight read once a block), lane l the output channels
//    2 l + {0, 1} + 64 q: X read from S two channels at a time (one address a group:
//    fno_layer1d_product), the weight W[k][c][o] (the layer's modes-major weight, read in
//    place) in 16-byte loads from global memory, the items of one mode (where RB < NB) on
//    neighbouring groups (its second read from L1); the sums times both steps' scales of the
//    mode, sa[k] ss[k] (once an item, not once a row's bin in each step), the bias times ss[0]
//    added to the real part of mode 0, the product written over the item's inputs (the group
//    alone reads them). The items go to the groups in turn, and a group to the scheduler of
//    its number mod 4: where the items are not a multiple of 4 (33 modes of 8 rows), one
//    scheduler would issue one item more than the others, so the last (items mod 4) are split
//    into quarters of RB / 4 rows, a quarter each scheduler (FNO_L1_BALANCE, where the groups
//    are a multiple of 4), which made the (1024, 64, 128, 64) kernel faster
//    (docs/benchmarks.md, fifty-fifth run);
// 3. the inverse real FFTs of the NB O output rows from S (zero from m; the imaginary parts of
//    DC and Nyquist dropped), written to y.
// One block a multiprocessor (S is NB C m complex values: 135 KB at NB = 8, C = 64, m = 33),
// blockDim.x a multiple of 32 that the host sizes to the items. Float32 throughout: the same
// sums as the chain's, in another order.
// Threads a block at most (fftmatvec/fno/_fused1d.py: MAX_THREADS), by P, CQ and RB: with
// items of 4 rows, 22 groups for 64 channels (their registers: 80 on sm_90; 20 for rows of 256
// points, which spilled at 80), 16 for 128 (104-127 registers); with items of 8 rows (twice the
// sums a lane), 20 groups (96 registers; 16 for rows of 256 points).
#define FNO_L1_BOUNDS(P, CQ, RB) __launch_bounds__(FNO_L1_THREADS_##P##_##CQ##_##RB, 1)
#define FNO_L1_THREADS_1_1_8 640
#define FNO_L1_THREADS_2_1_8 640
#define FNO_L1_THREADS_4_1_8 512
#define FNO_L1_THREADS_1_1_4 FNO_L1_THREADS_1_1
#define FNO_L1_THREADS_2_1_4 FNO_L1_THREADS_2_1
#define FNO_L1_THREADS_4_1_4 FNO_L1_THREADS_4_1
#define FNO_L1_THREADS_1_2_4 FNO_L1_THREADS_1_2
#define FNO_L1_THREADS_2_2_4 FNO_L1_THREADS_2_2
#define FNO_L1_THREADS_4_2_4 FNO_L1_THREADS_4_2
#define FNO_L1_THREADS_1_1 704
#define FNO_L1_THREADS_2_1 704
#define FNO_L1_THREADS_4_1 640
#define FNO_L1_THREADS_1_2 512
#define FNO_L1_THREADS_2_2 512
#define FNO_L1_THREADS_4_2 512
// A group's lanes past their reads of shared memory before any writes over them: a warp
// barrier on NVIDIA (its lanes may diverge), a wavefront's (which runs in lock step) on AMD.
#if defined(FFTMATVEC_HIP)
#define FNO_L1_SYNC_GROUP() __builtin_amdgcn_wave_barrier()
#define FNO_L1_FOLD false
#define FNO_L1_PAIRS false
#define FNO_L1_BALANCE false
#define FNO_L1_ORDERED true
#else
#define FNO_L1_SYNC_GROUP() asm volatile("bar.warp.sync -1;" ::: "memory")
#define FNO_L1_FOLD true
#define FNO_L1_PAIRS true
#define FNO_L1_BALANCE true
#define FNO_L1_ORDERED false
#endif
// FNO_L1_PAIRS, FNO_L1_FOLD: the product's inputs read two channels at a time
// (fno_layer1d_product) and both steps' scales applied once a mode in the product (NVIDIA), or
// a channel at a time and the scales on each row's bins in the analysis and the synthesis (AMD,
// where the pairs' registers spilled on gfx90a and the kernel serves no layer: a block's 64 KB
// of shared memory hold none of these). FNO_L1_BALANCE: the last items in quarters (NVIDIA,
// whose multiprocessors have 4 schedulers; off on AMD, for the same reason). FNO_L1_ORDERED
// false: the analysis's and the synthesis's FFTs leave their lanes in bit-reversed order
// (group_fft), two shuffles a register fewer, the bins going to shared memory and the outputs
// to y from whichever lane holds them, which made the (1024, 64, 128, 64) kernel faster
// (docs/benchmarks.md, fifty-fifth run; NVIDIA only, the AMD build as it was).

// The channel product of one item of fno_layer1d_body: a0, a1 += the RB rows xs[j C + c]
// (c < C) times the weight columns of this lane, w[c C / 2 + 32 q] (two complex values each).
// The inputs are read two columns at a time in 16-byte reads (one address a group: half the
// shared-memory reads of one a column), from c = 0 where xs is 16-byte aligned (ODD false),
// else one column, then pairs from c = 1, then the last one; on AMD one column at a time.
template <int CQ, int RB, bool ODD>
__device__ __forceinline__ void fno_layer1d_product(const float2* __restrict__ xs,
                                                    const float4* __restrict__ w,
                                                    float2 (&a0)[CQ][RB], float2 (&a1)[CQ][RB]) {
  constexpr int C = 64 * CQ;
  auto one = [&](int c) {
    float4 wc[CQ];
#pragma unroll
    for (int q = 0; q < CQ; ++q) wc[q] = __ldg(w + c * (C / 2) + 32 * q);
#pragma unroll
    for (int j = 0; j < RB; ++j) {
      const float2 xv = xs[j * C + c];
#pragma unroll
      for (int q = 0; q < CQ; ++q) fno_cmac2(a0[q][j], a1[q][j], xv, wc[q]);
    }
  };
  if (!FNO_L1_PAIRS) {  // (AMD: one channel a read)
#pragma unroll 4
    for (int c = 0; c < C; ++c) one(c);
    return;
  }
  if (ODD) one(0);
#pragma unroll 2
  for (int c = ODD ? 1 : 0; c < (ODD ? C - 1 : C); c += 2) {
    float4 wc0[CQ], wc1[CQ];
#pragma unroll
    for (int q = 0; q < CQ; ++q) {
      wc0[q] = __ldg(w + c * (C / 2) + 32 * q);
      wc1[q] = __ldg(w + (c + 1) * (C / 2) + 32 * q);
    }
#pragma unroll
    for (int j = 0; j < RB; ++j) {
      const float4 xv = *reinterpret_cast<const float4*>(xs + j * C + c);
#pragma unroll
      for (int q = 0; q < CQ; ++q) {
        fno_cmac2(a0[q][j], a1[q][j], make_c(xv.x, xv.y), wc0[q]);
        fno_cmac2(a0[q][j], a1[q][j], make_c(xv.z, xv.w), wc1[q]);
      }
    }
  }
  if (ODD) one(C - 1);
}

// One item of fno_layer1d_body's channel product: mode k of the RJ batch rows at xs (RJ C
// complex values), the product of this lane's two output columns (a group of 32 lanes), both
// steps' scales (FNO_L1_FOLD), the bias on mode 0, written over the inputs.
template <int CQ, int RJ>
__device__ __forceinline__ void fno_layer1d_item(float2* xs, const float2* __restrict__ W,
                                                 const float* __restrict__ bias,
                                                 const float* __restrict__ sa,
                                                 const float* __restrict__ ss, int k, int lane) {
  constexpr int C = 64 * CQ;
  const float4* w = reinterpret_cast<const float4*>(W + (i64)k * C * C) + lane;
  float2 a0[CQ][RJ], a1[CQ][RJ];
#pragma unroll
  for (int q = 0; q < CQ; ++q)
#pragma unroll
    for (int j = 0; j < RJ; ++j) a0[q][j] = a1[q][j] = make_c(0.f, 0.f);
  // (kp odd: the item's inputs 16-byte aligned for an even k, from c = 1 for an odd one)
  if (!FNO_L1_PAIRS || !(k & 1))
    fno_layer1d_product<CQ, RJ, false>(xs, w, a0, a1);
  else
    fno_layer1d_product<CQ, RJ, true>(xs, w, a0, a1);
  if (FNO_L1_FOLD) {  // both steps' scales of mode k here (sa[k] ss[k]), not on each bin
    const float sk = sa[k] * ss[k];
#pragma unroll
    for (int q = 0; q < CQ; ++q)
#pragma unroll
      for (int j = 0; j < RJ; ++j) {
        a0[q][j] = c_scale(a0[q][j], sk);
        a1[q][j] = c_scale(a1[q][j], sk);
      }
  }
  if (k == 0 && bias != nullptr) {  // the bias on the real part of mode 0 (times ss[0])
    const float s0 = FNO_L1_FOLD ? ss[0] : 1.f;
#pragma unroll
    for (int q = 0; q < CQ; ++q) {
      const float2 bq = *reinterpret_cast<const float2*>(bias + 2 * lane + 64 * q);
#pragma unroll
      for (int j = 0; j < RJ; ++j) {
        a0[q][j].x = fmaf(bq.x, s0, a0[q][j].x);
        a1[q][j].x = fmaf(bq.y, s0, a1[q][j].x);
      }
    }
  }
  FNO_L1_SYNC_GROUP();  // every lane's reads of the item's inputs done
#pragma unroll
  for (int q = 0; q < CQ; ++q)
#pragma unroll
    for (int j = 0; j < RJ; ++j) {
      xs[j * C + 2 * lane + 64 * q] = a0[q][j];
      xs[j * C + 2 * lane + 1 + 64 * q] = a1[q][j];
    }
}

template <int P, int CQ, int RB>
__device__ __forceinline__ void fno_layer1d_body(
    const float* __restrict__ x, const float2* __restrict__ W, const float* __restrict__ bias,
    float* __restrict__ y, const float2* __restrict__ tw, const float* __restrict__ sa,
    const float* __restrict__ ss, int B, int m, int NB) {
  constexpr int C = 64 * CQ, N1 = 32 * P, L = 2 * N1;
  float2* S = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  const int kp = NB * C + 1;
  const int lane = (int)(threadIdx.x & 31u), group = (int)(threadIdx.x >> 5),
            groups = (int)(blockDim.x >> 5);
  const int b0 = (int)blockIdx.x * NB, nb = B - b0 < NB ? B - b0 : NB;
  {  // 1. the analysis: z[n] = x[2n] + i x[2n + 1], its FFT, the kept bins into S
    // (the FFTs' bins in the lanes' bit-reversed order, FNO_L1_ORDERED false: the bins go to
    // shared memory, any lane any bin)
    const Lanes32<-1> lanes;
    float2 twr[P], spw[P];
    warp_rfft_twiddles<P>(tw, lane, twr, spw, FNO_L1_ORDERED ? lane : lanes.rev);
    auto keep = [&](int r, int k, float2 v) {
      if (k < m) S[k * kp + r] = FNO_L1_FOLD ? v : c_scale(v, sa[k]);
    };
    warp_rows_rfft<P, FNO_WARP_AHEAD(P), decltype(keep), FNO_L1_ORDERED>(
        x + (i64)b0 * C * L, group, groups, nb * C, lanes, twr, spw, keep);
  }
  __syncthreads();
  // 2. the channel product, item (k, h): mode k of batch rows RB h .. RB h + RB - 1; where the
  // items do not fill the 4 schedulers evenly (FNO_L1_BALANCE), the last T mod 4 in quarters
  const int NH = NB / RB, T = m * NH;
  const int r4 = FNO_L1_BALANCE && !(groups & 3) ? T & 3 : 0, full = T - r4;
  for (int it = group; it < full + 4 * r4; it += groups) {
    if (it < full) {
      const int k = it / NH;
      fno_layer1d_item<CQ, RB>(S + k * kp + RB * (it % NH) * C, W, bias, sa, ss, k, lane);
    } else if constexpr (FNO_L1_BALANCE) {
      const int u = full + (it - full) / 4, k = u / NH;
      fno_layer1d_item<CQ, RB / 4>(S + k * kp + (RB * (u % NH) + RB / 4 * ((it - full) & 3)) * C,
                                   W, bias, sa, ss, k, lane);
    }
  }
  __syncthreads();
  {  // 3. the synthesis: the packed spectrum of ss[k] S[k][r], its inverse FFT, the row of y
    const Lanes32<1> lanes;
    float2 twr[P], ctw[P];
    warp_irfft_twiddles<P>(tw, lane, twr, ctw);
    // (its outputs in the lanes' bit-reversed order, FNO_L1_ORDERED false: a lane's P values
    // side by side in y wherever the lane's are, the group's stores the same 256 P bytes)
    const int ol = FNO_L1_ORDERED ? lane : lanes.rev;
    for (int r = group; r < nb * C; r += groups) {
      float2 v[P];
      auto bin = [&](int k) {
        return k < m ? (FNO_L1_FOLD ? S[k * kp + r] : c_scale(S[k * kp + r], ss[k]))
                     : make_c(0.f, 0.f);
      };
      warp_row_irfft<P, decltype(bin), FNO_L1_ORDERED>(v, lanes, twr, ctw, bin);
      float* orow = y + ((i64)b0 * C + r) * L + 2 * P * ol;
      if constexpr (P % 2 == 0) {
#pragma unroll
        for (int k2 = 0; k2 < P; k2 += 2)
          *reinterpret_cast<float4*>(orow + 2 * k2) =
              make_float4(v[k2].x, v[k2].y, v[k2 + 1].x, v[k2 + 1].y);
      } else {
#pragma unroll
        for (int k2 = 0; k2 < P; ++k2) *reinterpret_cast<float2*>(orow + 2 * k2) = v[k2];
      }
    }
  }
}
// ---- the planes' direct form: truncated DFTs as register-tiled sums, any plane size ---------
// fno_plane_rdft_f32_b<MB> / fno_plane_irdft_f32_b<MB> take the transforms of the plane kernels
// above (fftmatvec/fno/_rows.py: Plane; here DirectPlane) as sums over the points rather than
// FFTs: a plane of n0 x n1 points keeping m0 x m1 modes costs n0 m1 (n1 + 2 m0) complex
// multiply-adds, which the FFTs' passes do not undercut where the modes are few, and the lengths
// need no small factors (85 = 5 x 17). One block a plane, FNO_DIRECT_THREADS threads, up to MB
// bins of the last axis (m1 <= MB, MB a multiple of 4) in each thread's registers.
// The host's tables carry the scales and the zeros past m1, so that no sum tests a bound:
//   r2c: T1[c][k] = s1[k] e^{-2 pi i k c / n1} (k < MB, zero from m1), T0[j][r] = s0
//        e^{-2 pi i bins[j] r / n0} (rows of n0p = n0 | 1 values: odd, a warp's modes on
//        distinct banks);
//   c2r: T0[j][r] = s0 e^{+2 pi i bins[j] r / n0} (rows of n0p), U[k][c] = w_k s1[k]
//        e^{+2 pi i k c / n1} (w_k 1 at the DC and Nyquist bins, 2 elsewhere, zero from m1: the
//        real inverse FFT's Hermitian sum, the imaginary parts of the DC and Nyquist bins
//        dropped by U's real values there).
// r2c: the plane into shared memory (rows of n1 | 1 values; 8 loads in flight a thread); the
// rows' sums Z[k][r] = sum_c x[r][c] T1[c][k], a thread a row and a part of its points (the
// threads' parts summed through shared memory), every lane of a part reading the same twiddles
// (16-byte broadcasts); then the modes' sums sum_r Z[k][r] T0[j][r], a thread a mode and a part
// of the rows, written out. c2r: the modes into shared memory (the bias on mode bias_mode, as
// the plane kernels above take it); W[r][k] = sum_j Y[j][k] T0[j][r],
// a thread a (row, bin); then out[r][c] = sum_k Re(W[r][k] U[k][c]), a thread a column (its
// U[.][c] in registers) and every G-th row (G = threads / n1), the lanes of a row reading the same
// W (a broadcast) and writing consecutive points.
// Launch bounds: registers for four blocks a multiprocessor on NVIDIA (64 a thread), three for
// 12 and 16 bins (the r2c's sums of 12 and 16 bins spilled at 64; its loop over a row's points
// stays rolled, which spilled at 80 unrolled).
#define FNO_DIRECT_THREADS 256
#define FNO_DIRECT_MIN_BLOCKS_4 4
#define FNO_DIRECT_MIN_BLOCKS_8 4
#define FNO_DIRECT_MIN_BLOCKS_12 3
#define FNO_DIRECT_MIN_BLOCKS_16 3
#if defined(FFTMATVEC_HIP)
#define FNO_DIRECT_BOUNDS(MB) __launch_bounds__(FNO_DIRECT_THREADS)
#else
#define FNO_DIRECT_BOUNDS(MB) __launch_bounds__(FNO_DIRECT_THREADS, FNO_DIRECT_MIN_BLOCKS_##MB)
#endif

// float2 offsets rounded up to 16 bytes
__device__ __forceinline__ int fno_direct_align(int n) { return (n + 1) & ~1; }

// parts a sum of n terms is cut into where n tasks leave threads idle
__device__ __forceinline__ int fno_direct_parts(int n, int threads) {
  return n <= threads ? threads / n : 1;
}

// n (even) complex values of a host table into shared memory, in 16-byte copies by the block
__device__ __forceinline__ void fno_direct_copy(float2* __restrict__ dst,
                                                const float4* __restrict__ src, int n) {
  for (int i = (int)threadIdx.x; i < n / 2; i += (int)blockDim.x)
    reinterpret_cast<float4*>(dst)[i] = __ldg(src + i);
}

// the index of mode i of plane p: paired planes apart (a float2 each), or in the plane's row
__device__ __forceinline__ void fno_direct_store(float* __restrict__ out, i64 p, int i, int M,
                                                 int paired_planes, float2 v) {
  if (paired_planes) {
    reinterpret_cast<float2*>(out)[(i64)i * paired_planes + p] = v;
  } else {
    out[p * 2 * M + i] = v.x;
    out[p * 2 * M + M + i] = v.y;
  }
}

template <int MB>
__device__ __forceinline__ void fno_plane_rdft_body(
    const float* __restrict__ x, float* __restrict__ out, const float4* __restrict__ T1g,
    const float4* __restrict__ T0g, int n0, int n1, int m0, int m1, int paired_planes) {
  static_assert(MB % 4 == 0, "MB: a multiple of 4");
  const int T = (int)blockDim.x, t = (int)threadIdx.x;
  const int ld = n1 | 1, n0p = n0 | 1;
  const int P1 = fno_direct_parts(n0, T), CL = (n1 + P1 - 1) / P1;
  const int M = m0 * m1, P2 = fno_direct_parts(M, T), RL = (n0 + P2 - 1) / P2;
  float* A = reinterpret_cast<float*>(fftmatvec_dynamic_smem);
  const int a_floats =
      2 * fno_direct_align(max(max((n0 * ld + 1) / 2, (P1 - 1) * n0 * MB), (P2 - 1) * M));
  float2* T1 = reinterpret_cast<float2*>(A + a_floats);  // [c][MB]
  float2* T0 = T1 + n1 * MB;                              // [j][n0p]
  float2* Z = T0 + fno_direct_align(m0 * n0p);            // [k][n0p], k < m1
  // (A: the plane, then the rows' and the modes' partial sums; fno/_rows.py: direct_bytes)
  const i64 plane = blockIdx.x;
  // the tables (16-byte copies) and the plane, 8 loads in flight a thread
  fno_direct_copy(T1, T1g, n1 * MB);
  fno_direct_copy(T0, T0g, fno_direct_align(m0 * n0p));
  {
    const float* xp = x + plane * n0 * n1;
    const int total = n0 * n1, q = T / n1, rem = T % n1;
    int row = t / n1, col = t % n1;
    for (int e0 = t; e0 < total; e0 += 8 * T) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = e0 + u * T < total ? __ldg(xp + e0 + u * T) : 0.f;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (e0 + u * T < total) A[row * ld + col] = v[u];
        col += rem;
        row += q;
        if (col >= n1) {
          col -= n1;
          ++row;
        }
      }
    }
  }
  __syncthreads();
  // the rows: Z[k][r] = sum_c x[r][c] T1[c][k], task (r, part): the part's points of row r
  float2 acc[MB];
  const int tasks = n0 * P1;
  for (int task = t; task < tasks; task += T) {  // one task a thread where P1 > 1
    const int r = task % n0, part = task / n0;
    const int c0 = part * CL, c1 = min(n1, c0 + CL);
#pragma unroll
    for (int k = 0; k < MB; ++k) acc[k] = make_c(0.f, 0.f);
    const float* xr = A + r * ld;
#pragma unroll 1
    for (int c = c0; c < c1; ++c) {
      const float v = xr[c];
      const float4* tw = reinterpret_cast<const float4*>(T1 + c * MB);
#pragma unroll
      for (int k = 0; k < MB; k += 2) {
        const float4 w = tw[k / 2];
        acc[k].x = fmaf(v, w.x, acc[k].x);
        acc[k].y = fmaf(v, w.y, acc[k].y);
        acc[k + 1].x = fmaf(v, w.z, acc[k + 1].x);
        acc[k + 1].y = fmaf(v, w.w, acc[k + 1].y);
      }
    }
    if (P1 == 1) {
#pragma unroll
      for (int k = 0; k < MB; ++k)
        if (k < m1) Z[k * n0p + r] = acc[k];
    }
  }
  if (P1 > 1) {  // the parts' sums: parts 1.. through A (the plane read), summed by part 0
    const int r = t % n0, part = t / n0;
    float2* S = reinterpret_cast<float2*>(A);  // [part - 1][k][r]
    __syncthreads();
    if (t < tasks && part > 0) {
#pragma unroll
      for (int k = 0; k < MB; ++k)
        if (k < m1) S[((part - 1) * MB + k) * n0 + r] = acc[k];
    }
    __syncthreads();
    if (part == 0) {
      for (int p = 1; p < P1; ++p)
#pragma unroll
        for (int k = 0; k < MB; ++k)
          if (k < m1) acc[k] = c_add(acc[k], S[((p - 1) * MB + k) * n0 + r]);
#pragma unroll
      for (int k = 0; k < MB; ++k)
        if (k < m1) Z[k * n0p + r] = acc[k];
    }
  }
  __syncthreads();
  // the columns at the kept bins: mode i = j m1 + k = sum_r Z[k][r] T0[j][r], task (i, part)
  float2 a = make_c(0.f, 0.f);
  for (int task = t; task < M * P2; task += T) {
    const int i = task % M, part = task / M, j = i / m1, k = i - j * m1;
    const float2* zk = Z + k * n0p;
    const float2* tj = T0 + j * n0p;
    float2 b = make_c(0.f, 0.f);
    a = make_c(0.f, 0.f);
    const int r1 = min(n0, part * RL + RL);
    int r = part * RL;
    for (; r + 1 < r1; r += 2) {  // (both pairs' loads before their sums)
      const float2 z0 = zk[r], w0 = tj[r], z1 = zk[r + 1], w1 = tj[r + 1];
      fno_cmac(a, z0, w0);
      fno_cmac(b, z1, w1);
    }
    if (r < r1) fno_cmac(a, zk[r], tj[r]);
    a = c_add(a, b);
    if (P2 == 1) fno_direct_store(out, plane, i, M, paired_planes, a);
  }
  if (P2 > 1) {  // the parts' sums through A (free since the rows' sums)
    const int i = t % M, part = t / M;
    float2* S = reinterpret_cast<float2*>(A);  // [part - 1][i]
    if (t < M * P2 && part > 0) S[(part - 1) * M + i] = a;
    __syncthreads();
    if (part == 0) {
      for (int p = 1; p < P2; ++p) a = c_add(a, S[(p - 1) * M + i]);
      fno_direct_store(out, plane, i, M, paired_planes, a);
    }
  }
}

template <int MB>
__device__ __forceinline__ void fno_plane_irdft_body(
    const float* __restrict__ y, float* __restrict__ out, const float4* __restrict__ T0g,
    const float2* __restrict__ U, int n0, int n1, int m0, int m1, int paired_planes,
    const float* __restrict__ bias, int channels, int bias_mode) {
  static_assert(MB % 4 == 0, "MB: a multiple of 4");
  const int T = (int)blockDim.x, t = (int)threadIdx.x;
  const int n0p = n0 | 1, M = m0 * m1;
  float2* T0 = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);  // [j][n0p]
  float2* Ys = T0 + fno_direct_align(m0 * n0p);                     // [j][k]
  float2* W = Ys + fno_direct_align(M);                             // [r][MB]
  const i64 plane = blockIdx.x;
  fno_direct_copy(T0, T0g, fno_direct_align(m0 * n0p));
  const int bm = bias != nullptr ? bias_mode : -1;  // the mode that takes the bias, if any
  for (int i = t; i < M; i += T) {
    float2 v;
    if (paired_planes) {
      v = __ldg(reinterpret_cast<const float2*>(y) + (i64)i * paired_planes + plane);
    } else {
      v = make_c(__ldg(y + plane * 2 * M + i), __ldg(y + plane * 2 * M + M + i));
    }
    if (i == bm) v.x += fno_bias_of(bias, plane, channels);  // (the scales are in T0 and U)
    Ys[i] = v;
  }
  __syncthreads();
  // the columns: W[r][k] = sum_j Y[j][k] T0[j][r] (zero from m1: U is zero there, W must be
  // finite)
  for (int o = t; o < n0 * MB; o += T) {
    const int r = o / MB, k = o % MB;
    float2 a = make_c(0.f, 0.f);
    if (k < m1) {
      for (int j = 0; j < m0; ++j) fno_cmac(a, Ys[j * m1 + k], T0[j * n0p + r]);
    }
    W[o] = a;
  }
  __syncthreads();
  // the rows: out[r][c] = sum_k Re(W[r][k] U[k][c]), task (c, g): rows g, g + G, ...
  const int G = fno_direct_parts(n1, T);
  float* op = out + plane * n0 * n1;
  for (int task = t; task < n1 * G; task += T) {
    const int c = task % n1, g = task / n1;
    float2 u[MB];
#pragma unroll
    for (int k = 0; k < MB; ++k) u[k] = __ldg(U + k * n1 + c);
    for (int r = g; r < n0; r += G) {
      const float4* wr = reinterpret_cast<const float4*>(W + r * MB);
      float v0 = 0.f, v1 = 0.f;
#pragma unroll
      for (int k = 0; k < MB; k += 2) {
        const float4 w = wr[k / 2];
        v0 = fmaf(w.x, u[k].x, fmaf(-w.y, u[k].y, v0));
        v1 = fmaf(w.z, u[k + 1].x, fmaf(-w.w, u[k + 1].y, v1));
      }
      op[(i64)r * n1 + c] = v0 + v1;
    }
  }
}
