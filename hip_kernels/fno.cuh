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
