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
#pragma once
#include "rowfft.cuh"

// out[r, :] = s[k] (Re, Im) of bin k < m of the unnormalised real FFT of row r of x (rows, L).
template <int MAXR>
__device__ __forceinline__ void fno_rfft_body(const float* __restrict__ x, float* __restrict__ out,
                                              const float2* __restrict__ tw,
                                              const float* __restrict__ scale, i64 rows, int L,
                                              int m, int rpb, unsigned long long radices,
                                              int npass) {
  const int n = L % 2 == 0 ? L / 2 : L;
  float2* a = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* b = a + rpb * (n + 1);
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  unsigned int km = 0u;
  const float2* z = rfft_rows<MAXR, float, float, float>(x + row0 * L, a, b, tw, nrow, L, L,
                                                         radices, npass, false, km);
  float* o = out + row0 * 2 * m;
  rfft_split(z, tw, nrow, L, [&](int r, int f, float2 v) {
    if (f < m) {
      const float s = scale[f];
      o[r * 2 * m + f] = v.x * s;
      o[r * 2 * m + m + f] = v.y * s;
    }
  });
}

// out[r, :] (L samples) is the unnormalised inverse real FFT of the spectrum s[k] (y[r, k] +
// i y[r, m + k]) for k < m, zero above.
template <int MAXR>
__device__ __forceinline__ void fno_irfft_body(const float* __restrict__ y,
                                               float* __restrict__ out,
                                               const float2* __restrict__ tw,
                                               const float* __restrict__ scale, i64 rows, int L,
                                               int m, int rpb, unsigned long long radices,
                                               int npass) {
  const int n = L % 2 == 0 ? L / 2 : L, nf = L / 2 + 1;
  float2* a = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* b = a + rpb * (n + 1);
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  const float* src = y + row0 * 2 * m;
  RowCursor at(nf);
  for (int i = threadIdx.x; i < nrow * nf; i += blockDim.x, at.next()) {
    float2 v = make_c(0.f, 0.f);
    if (at.c < m) {
      const float s = scale[at.c];
      const float* sr = src + at.r * 2 * m;
      v = make_c(sr[at.c] * s, sr[m + at.c] * s);
    }
    b[i] = v;  // rows of nf values, as irfft_rows reads them
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
// layout of the chain after its first two transforms.
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
// The twiddles: tw1 the table of the rows' real FFT, tw0 that of a complex FFT of length n0
// (rowfft.cuh: its passes from tw0 + n0 / 2 + 1). Shared memory: T, then the rows' two buffers
// of rpb rows of nc1 + 1 values, which the columns' two buffers of g rows of n0 share.
#define FNO_PLANE_THREADS 256
#if defined(FFTMATVEC_HIP)
#define FNO_PLANE_BOUNDS __launch_bounds__(FNO_PLANE_THREADS)
#else
#define FNO_PLANE_BOUNDS __launch_bounds__(FNO_PLANE_THREADS, 4)
#endif

template <int MAXR>
__device__ __forceinline__ void fno_plane_rfft_body(
    const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw1,
    const float2* __restrict__ tw0, const float* __restrict__ s1, const int* __restrict__ bins0,
    float s0, int n0, int n1, int m0, int m1, int rpb, int g, unsigned long long rad1, int np1,
    unsigned long long rad0, int np0) {
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
  float* o = out + plane * 2 * M;
  for (int k0 = 0; k0 < m1; k0 += g) {
    const int ng = m1 - k0 < g ? m1 - k0 : g;
    auto load = [&](int r, int m) { return T[(k0 + r) * n0p + m]; };
    const float2* Z = fft_rows_loaded<MAXR, -1, float2>(load, a, a + g * n0, tw0 + n0 / 2 + 1,
                                                        n0, ng, rad0, np0);
    RowCursor at(ng);  // (mode j, column r)
    for (int i = threadIdx.x; i < ng * m0; i += blockDim.x, at.next()) {
      const float2 v = Z[at.c * n0 + bins0[at.r]];
      o[at.r * m1 + k0 + at.c] = v.x * s0;
      o[M + at.r * m1 + k0 + at.c] = v.y * s0;
    }
    __syncthreads();
  }
}

template <int MAXR>
__device__ __forceinline__ void fno_plane_irfft_body(
    const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw1,
    const float2* __restrict__ tw0, const float* __restrict__ s1, const int* __restrict__ inv0,
    float s0, int n0, int n1, int m0, int m1, int rpb, int g, unsigned long long rad1, int np1,
    unsigned long long rad0, int np0) {
  const int nc1 = n1 % 2 == 0 ? n1 / 2 : n1, nf1 = n1 / 2 + 1, n0p = n0 + 1, M = m0 * m1;
  float2* T = reinterpret_cast<float2*>(fftmatvec_dynamic_smem);
  float2* a = T + m1 * n0p;
  float2* b = a + rpb * (nc1 + 1);
  const i64 plane = blockIdx.x;
  const float* yp = y + plane * 2 * M;
  for (int k0 = 0; k0 < m1; k0 += g) {
    const int ng = m1 - k0 < g ? m1 - k0 : g;
    auto load = [&](int r, int m) {
      const int j = inv0[m];
      if (j < 0) return make_c(0.f, 0.f);
      const int at = j * m1 + k0 + r;
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
