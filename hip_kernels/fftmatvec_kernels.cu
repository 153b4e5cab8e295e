// fftmatvec GPU kernels: one translation unit, compiled ahead of time (nvcc -> cubin, hipcc ->
// hsaco after hipify) or at run time (NVRTC / hiprtc). Every entry point is extern "C" with a
// precision suffix so that code objects are looked up by name:
//   c128 = complex128, c64 = complex64, c32h = complex float16 pairs with float32 scales,
//   f64 = float64, f32 = float32.
#include "common.cuh"
#include "sbgemv.cuh"
#include "sbgemm.cuh"
#include "sbgemva.cuh"
#include "sbgemvx.cuh"
#include "stages.cuh"
#include "rowfft.cuh"
#include "fused.cuh"
#include "fno.cuh"

// ---- sections -------------------------------------------------------------------------------
// The build compiles every entry point into one code object. A run-time compile compiles one
// section: FFTMATVEC_SECTION=<n> keeps the entry points of that section and drops the others, so
// that a product compiles the kernels it runs (seconds) rather than all of them (minutes). The
// loader reads these numbers from here and names an entry point's section from its name
// (fftmatvec/kernels.py: section_of); a test checks the two agree for every entry point.
// Sections: the small stage-1/5 kernels; the row FFTs per (FFT precision, complex type); the
// fused adjoints per (storage, input, FFT precision); each stage-3 family per storage.
#define FFTMATVEC_SECTION_MISC 1
#define FFTMATVEC_SECTION_ROWFFT_F64_C128 2
#define FFTMATVEC_SECTION_ROWFFT_F64_C64 3
#define FFTMATVEC_SECTION_ROWFFT_F32_C64 4
#define FFTMATVEC_SECTION_FUSED_C128_C128_F64 5
#define FFTMATVEC_SECTION_FUSED_C128_C128_F32 6
#define FFTMATVEC_SECTION_FUSED_C128_C64_F64 7
#define FFTMATVEC_SECTION_FUSED_C128_C64_F32 8
#define FFTMATVEC_SECTION_FUSED_C64_C64_F64 9
#define FFTMATVEC_SECTION_FUSED_C64_C64_F32 10
#define FFTMATVEC_SECTION_GEMV_C128 11
#define FFTMATVEC_SECTION_GEMV_C64 12
#define FFTMATVEC_SECTION_GEMV_C32H 13
#define FFTMATVEC_SECTION_ASYNC_C128 14
#define FFTMATVEC_SECTION_ASYNC_C64 15
#define FFTMATVEC_SECTION_ASYNC_C32H 16
#define FFTMATVEC_SECTION_MMA_C128 17
#define FFTMATVEC_SECTION_MMA_C64 18
#define FFTMATVEC_SECTION_MMA_C64DMMA 19
#define FFTMATVEC_SECTION_MMA_C32H 20
#define FFTMATVEC_SECTION_XREG_C128 21
#define FFTMATVEC_SECTION_XREG_C64 22
#define FFTMATVEC_SECTION_XREG_C32H 23
#if defined(FFTMATVEC_SECTION)
#define FFTMATVEC_IN_SECTION(NAME) (FFTMATVEC_SECTION == FFTMATVEC_SECTION_##NAME)
#else
#define FFTMATVEC_IN_SECTION(NAME) 1
#endif

// ---- stage 1 / stage 5 --------------------------------------------------------------------
#define FFTMATVEC_PAD(NAME, TIN, TMID, TOUT)                                                  \
  extern "C" __global__ void pad_##NAME(const TIN* __restrict__ in, TOUT* __restrict__ out,   \
                                        i64 rows, i64 nt, i64 L) {                            \
    pad_body<TIN, TMID, TOUT>(in, out, rows, nt, L);                                          \
  }
#define FFTMATVEC_UNPAD(NAME, TIN, TMID, TOUT)                                                \
  extern "C" __global__ void unpad_##NAME(const TIN* __restrict__ in, TOUT* __restrict__ out, \
                                          const TOUT* __restrict__ w, i64 n_w, i64 rows,      \
                                          i64 nt, i64 L) {                                    \
    unpad_body<TIN, TMID, TOUT>(in, out, w, n_w, rows, nt, L);                                \
  }
#define FFTMATVEC_STAGE15(A, TA, B, TB, C, TC) \
  FFTMATVEC_PAD(A##_##B##_##C, TA, TB, TC)     \
  FFTMATVEC_UNPAD(A##_##B##_##C, TA, TB, TC)

#if FFTMATVEC_IN_SECTION(MISC)
FFTMATVEC_STAGE15(f64, double, f64, double, f64, double)
FFTMATVEC_STAGE15(f64, double, f64, double, f32, float)
FFTMATVEC_STAGE15(f64, double, f32, float, f64, double)
FFTMATVEC_STAGE15(f64, double, f32, float, f32, float)
FFTMATVEC_STAGE15(f32, float, f64, double, f64, double)
FFTMATVEC_STAGE15(f32, float, f64, double, f32, float)
FFTMATVEC_STAGE15(f32, float, f32, float, f64, double)
FFTMATVEC_STAGE15(f32, float, f32, float, f32, float)
#endif

// ---- stages 1+2 and 4+5 in one kernel each (rowfft.cuh) ------------------------------------
// rfft_pad_<input>_<stage 1>_<FFT>_<output>_r<M> (and, where amax_scratch is not null, the
// input's largest magnitude: amax_finish): the output is complex64, or complex128 from a
// float64 FFT; irfft_unpad_<input>_<FFT>_<stage 5>_<output>_r<M>: the input is complex64, or
// complex128 into a float64 FFT. M is the largest radix the kernel takes (a family of
// fftmatvec/gpu/rowfft.py's FAMILIES: its registers are its largest butterfly's).
#define FFTMATVEC_RFFT(NAME, M, TIN, TMID, R, COUT)                                            \
  extern "C" __global__ void ROWFFT_BOUNDS rfft_pad_##NAME##_r##M(                             \
      const TIN* __restrict__ x, COUT* __restrict__ out,                                       \
      const Complex<R>::type* __restrict__ tw, const float* __restrict__ scale, i64 rows,      \
      int nt, int L, int rpb, unsigned long long radices, int npass, int nd, int nfp,          \
      unsigned int* amax_scratch) {                                                            \
    rfft_pad_body<M, TIN, TMID, R, COUT>(x, out, tw, scale, rows, nt, L, rpb, radices, npass,  \
                                         nd, nfp, amax_scratch);                               \
  }
#define FFTMATVEC_IRFFT(NAME, M, CIN, R, TMID, TOUT)                                           \
  extern "C" __global__ void ROWFFT_BOUNDS irfft_unpad_##NAME##_r##M(                          \
      const CIN* __restrict__ y, TOUT* __restrict__ out,                                       \
      const Complex<R>::type* __restrict__ tw, i64 rows, int nt, int L, int rpb,               \
      unsigned long long radices, int npass) {                                                 \
    irfft_unpad_body<M, CIN, R, TMID, TOUT>(y, out, tw, rows, nt, L, rpb, radices, npass);     \
  }
// every (input or output, stage 1 or 5) pair of real precisions, for one FFT and complex type
#define FFTMATVEC_ROWFFT(F, R, C, CT, M)                       \
  FFTMATVEC_RFFT(f64_f64_##F##_##C, M, double, double, R, CT)  \
  FFTMATVEC_RFFT(f64_f32_##F##_##C, M, double, float, R, CT)   \
  FFTMATVEC_RFFT(f32_f64_##F##_##C, M, float, double, R, CT)   \
  FFTMATVEC_RFFT(f32_f32_##F##_##C, M, float, float, R, CT)    \
  FFTMATVEC_IRFFT(C##_##F##_f64_f64, M, CT, R, double, double) \
  FFTMATVEC_IRFFT(C##_##F##_f64_f32, M, CT, R, double, float)  \
  FFTMATVEC_IRFFT(C##_##F##_f32_f64, M, CT, R, float, double)  \
  FFTMATVEC_IRFFT(C##_##F##_f32_f32, M, CT, R, float, float)
#define FFTMATVEC_ROWFFT_FAMILIES(F, R, C, CT) \
  FFTMATVEC_ROWFFT(F, R, C, CT, 8)             \
  FFTMATVEC_ROWFFT(F, R, C, CT, 10)
#if FFTMATVEC_IN_SECTION(ROWFFT_F64_C128)
FFTMATVEC_ROWFFT_FAMILIES(f64, double, c128, double2)
#endif
#if FFTMATVEC_IN_SECTION(ROWFFT_F64_C64)
FFTMATVEC_ROWFFT_FAMILIES(f64, double, c64, float2)
#endif
#if FFTMATVEC_IN_SECTION(ROWFFT_F32_C64)
FFTMATVEC_ROWFFT_FAMILIES(f32, float, c64, float2)
#endif

// ---- the FNO layer's last-axis transforms (fno.cuh) -----------------------------------------
// fno_rfft_f32_r<M>, fno_irfft_f32_r<M>: float32 rows, truncated to m bins, the spectral side
// in rows or modes-major (modes_major), in the row FFTs' section of float32 FFTs. The inverse
// kernels here and below (but the planes' pass form) take the layer's bias (null: none) on the
// constant mode of each row (plane) of channels rows (planes) (fno.cuh: fno_bias_of).
#define FFTMATVEC_FNO_ROWFFT(M)                                                                 \
  extern "C" __global__ void ROWFFT_BOUNDS fno_rfft_f32_r##M(                                   \
      const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw,      \
      const float* __restrict__ scale, i64 rows, int L, int m, int rpb,                        \
      unsigned long long radices, int npass, int modes_major) {                                \
    fno_rfft_body<M>(x, out, tw, scale, rows, L, m, rpb, radices, npass, modes_major);         \
  }                                                                                            \
  extern "C" __global__ void ROWFFT_BOUNDS fno_irfft_f32_r##M(                                  \
      const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw,      \
      const float* __restrict__ scale, i64 rows, int L, int m, int rpb,                        \
      unsigned long long radices, int npass, int modes_major, const float* __restrict__ bias,  \
      int channels) {                                                                          \
    fno_irfft_body<M>(y, out, tw, scale, rows, L, m, rpb, radices, npass, modes_major, bias,   \
                      channels);                                                               \
  }
// fno_plane_rfft_f32_r<M>[p], fno_plane_irfft_f32_r<M>[p]: the last two axes of a plane at
// once, the modes in the chain's rows or (p) paired planes apart (paired_planes).
#define FFTMATVEC_FNO_PLANE_AS(M, SUFFIX, PAIRED)                                               \
  extern "C" __global__ void FNO_PLANE_BOUNDS fno_plane_rfft_f32_r##M##SUFFIX(                  \
      const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw1,      \
      const float2* __restrict__ tw0, const float* __restrict__ s1,                              \
      const int* __restrict__ bins0, float s0, int n0, int n1, int m0, int m1, int rpb, int g,   \
      unsigned long long rad1, int np1, unsigned long long rad0, int np0, int paired_planes) {   \
    fno_plane_rfft_body<M, PAIRED>(x, out, tw1, tw0, s1, bins0, s0, n0, n1, m0, m1, rpb, g,     \
                                   rad1, np1, rad0, np0, paired_planes);                        \
  }                                                                                              \
  extern "C" __global__ void FNO_PLANE_BOUNDS fno_plane_irfft_f32_r##M##SUFFIX(                 \
      const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw1,      \
      const float2* __restrict__ tw0, const float* __restrict__ s1,                              \
      const int* __restrict__ inv0, float s0, int n0, int n1, int m0, int m1, int rpb, int g,    \
      unsigned long long rad1, int np1, unsigned long long rad0, int np0, int paired_planes) {   \
    fno_plane_irfft_body<M, PAIRED>(y, out, tw1, tw0, s1, inv0, s0, n0, n1, m0, m1, rpb, g,     \
                                    rad1, np1, rad0, np0, paired_planes);                       \
  }
#define FFTMATVEC_FNO_PLANE(M)            \
  FFTMATVEC_FNO_PLANE_AS(M, , false)      \
  FFTMATVEC_FNO_PLANE_AS(M, p, true)
// fno_plane_rfft_f32_w<P>x<Q>, fno_plane_irfft_f32_w<P>x<Q>: the warp form, rows of 32 P complex
// values (P = 1, 2, 4: rows of 64 to 256 reals), columns of 32 Q (Q = 1, 2, 4, 8);
// fno_plane_rfft_f32_w<P>x<Q>a (P = 1, 2; rows of 256 reals spill with it, those of 64 a few
// bytes on sm_90): its rows loaded FNO_WARP_AHEAD(P) at a time.
#define FFTMATVEC_FNO_PLANE_WARP_AHEAD(P, Q)                                                    \
  extern "C" __global__ void FNO_WARP_BOUNDS(Q) fno_plane_rfft_f32_w##P##x##Q##a(              \
      const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw1,      \
      const float* __restrict__ s1, const int* __restrict__ inv0, float s0, int m0, int m1,      \
      int paired_planes) {                                                                     \
    fno_plane_rfft_warp_body<P, Q, FNO_WARP_AHEAD(P)>(x, out, tw1, s1, inv0, s0, m0, m1,        \
                                                      paired_planes);                          \
  }
#define FFTMATVEC_FNO_PLANE_WARP(P, Q)                                                          \
  extern "C" __global__ void FNO_WARP_BOUNDS(Q) fno_plane_rfft_f32_w##P##x##Q(                 \
      const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw1,      \
      const float* __restrict__ s1, const int* __restrict__ inv0, float s0, int m0, int m1,      \
      int paired_planes) {                                                                     \
    fno_plane_rfft_warp_body<P, Q, 1>(x, out, tw1, s1, inv0, s0, m0, m1, paired_planes);         \
  }                                                                                              \
  extern "C" __global__ void FNO_WARP_BOUNDS(Q) fno_plane_irfft_f32_w##P##x##Q(                \
      const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw1,      \
      const float* __restrict__ s1, const int* __restrict__ inv0, float s0, int m0, int m1,      \
      int paired_planes, const float* __restrict__ bias, int channels, int bias_mode) {        \
    fno_plane_irfft_warp_body<P, Q>(y, out, tw1, s1, inv0, s0, m0, m1, paired_planes, bias,      \
                                    channels, bias_mode);                                        \
  }
#define FFTMATVEC_FNO_PLANE_WARP_ROWS(P)                                                        \
  FFTMATVEC_FNO_PLANE_WARP(P, 1)                                                                 \
  FFTMATVEC_FNO_PLANE_WARP(P, 2)                                                                 \
  FFTMATVEC_FNO_PLANE_WARP(P, 4)                                                                 \
  FFTMATVEC_FNO_PLANE_WARP(P, 8)
#define FFTMATVEC_FNO_PLANE_WARP_AHEAD_ROWS(P)                                                  \
  FFTMATVEC_FNO_PLANE_WARP_AHEAD(P, 1)                                                           \
  FFTMATVEC_FNO_PLANE_WARP_AHEAD(P, 2)                                                           \
  FFTMATVEC_FNO_PLANE_WARP_AHEAD(P, 4)                                                           \
  FFTMATVEC_FNO_PLANE_WARP_AHEAD(P, 8)
// fno_modes_cgemm_f32_b<NB>: the paired modes' channel product, rows in tiles of NB, the
// weight UR pairs of k-steps ahead (fno.cuh; NB = 16: UR = 4, the faster of 2 and 4 when it was
// written; NB = 8: UR = 2).
#define FFTMATVEC_FNO_MODES_CGEMM(NB, UR)                                                       \
  extern "C" __global__ void FNO_PRODUCT_BOUNDS(NB) fno_modes_cgemm_f32_b##NB(                 \
      const float2* __restrict__ X, const float2* __restrict__ W, float2* __restrict__ Y, int M, \
      int B, int C, int O) {                                                                   \
    fno_modes_cgemm_body<NB, UR>(X, W, Y, M, B, C, O);                                         \
  }
// fno_layer1d_f32_w<P>_c<CQ>_r<RB>: a one-axis layer in one kernel, rows of 64 P reals, 64 CQ
// channels in and out, NB batch rows a block, RB of them a group's item (fno.cuh:
// fno_layer1d_body).
#define FFTMATVEC_FNO_LAYER1D(P, CQ, RB)                                                        \
  extern "C" __global__ void FNO_L1_BOUNDS(P, CQ, RB) fno_layer1d_f32_w##P##_c##CQ##_r##RB(    \
      const float* __restrict__ x, const float2* __restrict__ W, const float* __restrict__ bias, \
      float* __restrict__ y, const float2* __restrict__ tw, const float* __restrict__ sa,       \
      const float* __restrict__ ss, int B, int m, int NB) {                                    \
    fno_layer1d_body<P, CQ, RB>(x, W, bias, y, tw, sa, ss, B, m, NB);                          \
  }
// fno_plane_rdft_f32_b<MB>, fno_plane_irdft_f32_b<MB>: the planes' direct form (truncated DFTs
// as register-tiled sums, any plane size, at most MB bins of the last axis), a block a plane.
#define FFTMATVEC_FNO_PLANE_DIRECT(MB)                                                          \
  extern "C" __global__ void FNO_DIRECT_BOUNDS(MB) fno_plane_rdft_f32_b##MB(                     \
      const float* __restrict__ x, float* __restrict__ out, const float4* __restrict__ T1,      \
      const float4* __restrict__ T0, int n0, int n1, int m0, int m1, int paired_planes) {      \
    fno_plane_rdft_body<MB>(x, out, T1, T0, n0, n1, m0, m1, paired_planes);                    \
  }                                                                                            \
  extern "C" __global__ void FNO_DIRECT_BOUNDS(MB) fno_plane_irdft_f32_b##MB(                     \
      const float* __restrict__ y, float* __restrict__ out, const float4* __restrict__ T0,      \
      const float2* __restrict__ U, int n0, int n1, int m0, int m1, int paired_planes,         \
      const float* __restrict__ bias, int channels, int bias_mode) {                           \
    fno_plane_irdft_body<MB>(y, out, T0, U, n0, n1, m0, m1, paired_planes, bias, channels,     \
                             bias_mode);                                                       \
  }
// fno_rfft_f32_w<P>, fno_irfft_f32_w<P>: the last axis in the warp form, rows of 64 P reals.
#define FFTMATVEC_FNO_ROWFFT_WARP(P)                                                            \
  extern "C" __global__ void FNO_ROW_WARP_BOUNDS fno_rfft_f32_w##P(                             \
      const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw,      \
      const float* __restrict__ scale, i64 rows, int m, int rpb, int modes_major) {            \
    fno_rfft_warp_body<P>(x, out, tw, scale, rows, m, rpb, modes_major);                       \
  }                                                                                            \
  extern "C" __global__ void FNO_ROW_WARP_BOUNDS fno_irfft_f32_w##P(                            \
      const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw,      \
      const float* __restrict__ scale, i64 rows, int m, int rpb, int modes_major,              \
      const float* __restrict__ bias, int channels) {                                          \
    fno_irfft_warp_body<P>(y, out, tw, scale, rows, m, rpb, modes_major, bias, channels);      \
  }
// fno_rfft_cols_f32, fno_irfft_cols_f32: long rows in the column form, L = 64 R, rpb rows a
// block of rpb R threads (tw: the host's table of w^{n1 k}, (R, m) forward, (m, R) inverse);
// fno_irfft_cols_f32_r<RC>: the inverse for R = RC only (fno.cuh).
#define FFTMATVEC_FNO_ROWFFT_COLS                                                              \
  extern "C" __global__ void FNO_COLS_BOUNDS(2) fno_rfft_cols_f32(                              \
      const float* __restrict__ x, float* __restrict__ out, const float2* __restrict__ tw,      \
      const float* __restrict__ scale, i64 rows, int R, int m, int rpb, int modes_major) {     \
    fno_rfft_cols_body(x, out, tw, scale, rows, R, m, rpb, modes_major);                       \
  }                                                                                            \
  FFTMATVEC_FNO_IRFFT_COLS(, 0)
#define FFTMATVEC_FNO_IRFFT_COLS(SUFFIX, RC)                                                   \
  extern "C" __global__ void FNO_COLS_BOUNDS(3) fno_irfft_cols_f32##SUFFIX(                     \
      const float* __restrict__ y, float* __restrict__ out, const float2* __restrict__ tw,      \
      const float* __restrict__ scale, i64 rows, int R, int m, int rpb, int modes_major,       \
      const float* __restrict__ bias, int channels) {                                          \
    fno_irfft_cols_body<RC>(y, out, tw, scale, rows, R, m, rpb, modes_major, bias, channels);  \
  }
#if FFTMATVEC_IN_SECTION(ROWFFT_F32_C64)
FFTMATVEC_FNO_ROWFFT_COLS
FFTMATVEC_FNO_IRFFT_COLS(_r16, 16)
FFTMATVEC_FNO_IRFFT_COLS(_r32, 32)
FFTMATVEC_FNO_IRFFT_COLS(_r64, 64)
FFTMATVEC_FNO_IRFFT_COLS(_r128, 128)
FFTMATVEC_FNO_ROWFFT(8)
FFTMATVEC_FNO_ROWFFT(10)
FFTMATVEC_FNO_ROWFFT_WARP(1)
FFTMATVEC_FNO_ROWFFT_WARP(2)
FFTMATVEC_FNO_ROWFFT_WARP(4)
FFTMATVEC_FNO_PLANE(8)
FFTMATVEC_FNO_PLANE(10)
FFTMATVEC_FNO_PLANE_WARP_ROWS(1)
FFTMATVEC_FNO_PLANE_WARP_ROWS(2)
FFTMATVEC_FNO_PLANE_WARP_ROWS(4)
FFTMATVEC_FNO_PLANE_WARP_AHEAD_ROWS(1)
FFTMATVEC_FNO_PLANE_WARP_AHEAD_ROWS(2)
FFTMATVEC_FNO_MODES_CGEMM(8, 2)
FFTMATVEC_FNO_MODES_CGEMM(16, 4)
FFTMATVEC_FNO_LAYER1D(1, 1, 4)
FFTMATVEC_FNO_LAYER1D(1, 1, 8)
FFTMATVEC_FNO_LAYER1D(1, 2, 4)
FFTMATVEC_FNO_LAYER1D(2, 1, 4)
FFTMATVEC_FNO_LAYER1D(2, 1, 8)
FFTMATVEC_FNO_LAYER1D(2, 2, 4)
FFTMATVEC_FNO_LAYER1D(4, 1, 4)
FFTMATVEC_FNO_LAYER1D(4, 1, 8)
FFTMATVEC_FNO_LAYER1D(4, 2, 4)
FFTMATVEC_FNO_PLANE_DIRECT(4)
FFTMATVEC_FNO_PLANE_DIRECT(8)
FFTMATVEC_FNO_PLANE_DIRECT(12)
FFTMATVEC_FNO_PLANE_DIRECT(16)
#endif

// ---- stages 3-5 of an adjoint in one kernel (fused.cuh) -------------------------------------
// sbgemv_irfft_<storage>_<input>_<FFT>_<stage 5>_<output>_n<ND>: complex128 or complex64 Khat,
// up to ND sensors (keep in sync with fftmatvec/gpu/rules.py: FUSED_ND, FUSED_STORES), every
// radix of fftmatvec/gpu/rowfft.py's FAMILIES. The host takes the smallest ND that holds Nd, a
// kernel for a larger ND running slower on the same problem.
#define FFTMATVEC_SBGEMV_IRFFT(NAME, ND, STORE, CIN, R, TMID, TOUT)                            \
  extern "C" __global__ void FUSED_BOUNDS sbgemv_irfft_##NAME##_n##ND(                          \
      const STORE::elem* __restrict__ kh, const CIN* __restrict__ x, TOUT* __restrict__ out,     \
      const Complex<R>::type* __restrict__ tw, i64 nm, int nd, int nt, int L, int rpb,          \
      unsigned long long radices, int npass, i64 so, i64 sr, int fsh, i64 sb) {                 \
    sbgemv_irfft_body<10, ND, 1, STORE, CIN, R, TMID, TOUT>(kh, x, out, tw, nm, nd, nt, L, rpb, \
                                                            radices, npass, so, sr, fsh, sb);   \
  }
#define FFTMATVEC_SBGEMV_IRFFT_ND(NAME, STORE, CIN, R, TMID, TOUT) \
  FFTMATVEC_SBGEMV_IRFFT(NAME, 4, STORE, CIN, R, TMID, TOUT)        \
  FFTMATVEC_SBGEMV_IRFFT(NAME, 8, STORE, CIN, R, TMID, TOUT)        \
  FFTMATVEC_SBGEMV_IRFFT(NAME, 10, STORE, CIN, R, TMID, TOUT)       \
  FFTMATVEC_SBGEMV_IRFFT(NAME, 12, STORE, CIN, R, TMID, TOUT)
#define FFTMATVEC_SBGEMV_IRFFT_IO(S, STORE, C, CT, F, R)                              \
  FFTMATVEC_SBGEMV_IRFFT_ND(S##_##C##_##F##_f64_f64, STORE, CT, R, double, double) \
  FFTMATVEC_SBGEMV_IRFFT_ND(S##_##C##_##F##_f64_f32, STORE, CT, R, double, float)  \
  FFTMATVEC_SBGEMV_IRFFT_ND(S##_##C##_##F##_f32_f64, STORE, CT, R, float, double)  \
  FFTMATVEC_SBGEMV_IRFFT_ND(S##_##C##_##F##_f32_f32, STORE, CT, R, float, float)
// the input is the forward FFT's output: complex128 or complex64 into complex128 sums,
// complex64 into complex64 ones (fftmatvec/gpu/ffts.py: xhat_dtype)
#if FFTMATVEC_IN_SECTION(FUSED_C128_C128_F64)
FFTMATVEC_SBGEMV_IRFFT_IO(c128, StoreC128, c128, double2, f64, double)
#endif
#if FFTMATVEC_IN_SECTION(FUSED_C128_C128_F32)
FFTMATVEC_SBGEMV_IRFFT_IO(c128, StoreC128, c128, double2, f32, float)
#endif
#if FFTMATVEC_IN_SECTION(FUSED_C128_C64_F64)
FFTMATVEC_SBGEMV_IRFFT_IO(c128, StoreC128, c64, float2, f64, double)
#endif
#if FFTMATVEC_IN_SECTION(FUSED_C128_C64_F32)
FFTMATVEC_SBGEMV_IRFFT_IO(c128, StoreC128, c64, float2, f32, float)
#endif
#if FFTMATVEC_IN_SECTION(FUSED_C64_C64_F64)
FFTMATVEC_SBGEMV_IRFFT_IO(c64, StoreC64, c64, float2, f64, double)
#endif
#if FFTMATVEC_IN_SECTION(FUSED_C64_C64_F32)
FFTMATVEC_SBGEMV_IRFFT_IO(c64, StoreC64, c64, float2, f32, float)
#endif
// ---- a float16 adjoint's input times the row scales: scale_rows_<input> -------------------
#define FFTMATVEC_SCALE_ROWS(NAME, C)                                                           \
  extern "C" __global__ void scale_rows_##NAME(const C* __restrict__ x,                         \
                                               const float* __restrict__ scale,                 \
                                               C* __restrict__ out, i64 rows, i64 nd, i64 nf,   \
                                               i64 nfp) {                                       \
    scale_rows_body<C>(x, scale, out, rows, nd, nf, nfp);                                       \
  }
#if FFTMATVEC_IN_SECTION(MISC)
FFTMATVEC_SCALE_ROWS(c128, double2)
FFTMATVEC_SCALE_ROWS(c64, float2)
#endif

// ---- the largest magnitude of an input: amax_<input> ----------------------------------------
#define FFTMATVEC_AMAX(NAME, T)                                                                \
  extern "C" __global__ void __launch_bounds__(256) amax_##NAME(                               \
      const T* __restrict__ x, i64 n, unsigned int* scratch) {                                 \
    amax_body<T>(x, n, scratch);                                                               \
  }
#if FFTMATVEC_IN_SECTION(MISC)
FFTMATVEC_AMAX(f64, double)
FFTMATVEC_AMAX(f32, float)
#endif

// ---- the emulated network's device clock (fftmatvec/distributed/emulated.py) ----------------
// clock_mark: slot[0] = the clock now. clock_wait: returns once the clock has passed
// slot[0] + ticks, so that a collective's copy and this wait take the model's duration on the
// stream. clock_since: out[0] = the ticks since slot[0] (the clock's rate is measured from it).
// One thread of one block; the wait sleeps between reads, leaving its multiprocessor to the
// kernels it overlaps.
#if FFTMATVEC_IN_SECTION(MISC)
extern "C" __global__ void clock_mark(unsigned long long* slot) { slot[0] = device_clock(); }
extern "C" __global__ void clock_wait(const unsigned long long* slot, unsigned long long ticks) {
  const unsigned long long until = slot[0] + ticks;
  while (device_clock() < until) clock_pause();
}
extern "C" __global__ void clock_since(const unsigned long long* slot, unsigned long long* out) {
  out[0] = device_clock() - slot[0];
}
#endif

// ---- split-K reduction ----------------------------------------------------------------------
#define FFTMATVEC_REDUCE(NAME, TIN, TOUT)                                                      \
  extern "C" __global__ void reduce_##NAME(const TIN* __restrict__ part, TOUT* __restrict__ y, \
                                           i64 n, int splits) {                                \
    reduce_splits_body<TIN, TOUT>(part, y, n, splits);                                         \
  }                                                                                            \
  extern "C" __global__ void reduce_serial_##NAME(const TIN* __restrict__ part,                \
                                                  TOUT* __restrict__ y, i64 n, int splits) {   \
    reduce_splits_serial_body<TIN, TOUT>(part, y, n, splits);                                  \
  }
#if FFTMATVEC_IN_SECTION(MISC)
FFTMATVEC_REDUCE(c128_c128, double2, double2)
FFTMATVEC_REDUCE(c128_c64, double2, float2)
FFTMATVEC_REDUCE(c64_c128, float2, double2)
FFTMATVEC_REDUCE(c64_c64, float2, float2)
#endif

// ---- stage 3 --------------------------------------------------------------------------------
// Every stage-3 entry point comes in the four (input, output) precision pairs:
// M(SNAME, STORE, INAME, TIN, ONAME, TOUT, tile...) for each.
#define FFTMATVEC_FOR_IO(M, SNAME, STORE, ...)               \
  M(SNAME, STORE, c128, double2, c128, double2, __VA_ARGS__) \
  M(SNAME, STORE, c128, double2, c64, float2, __VA_ARGS__)   \
  M(SNAME, STORE, c64, float2, c128, double2, __VA_ARGS__)   \
  M(SNAME, STORE, c64, float2, c64, float2, __VA_ARGS__)
// One GEMV entry point NAME: sbgemv_body<STORE, TIN, TOUT, RT, KB, V, W> (sbgemv.cuh).
#define FFTMATVEC_SBGEMV_ENTRY(NAME, STORE, TIN, TOUT, RT, KB, V, W)                            \
  extern "C" __global__ void __launch_bounds__(256)                                             \
      NAME(const STORE::elem* __restrict__ kh, const float* __restrict__ scale,                 \
           const TIN* __restrict__ x, TOUT* __restrict__ y, i64 nf, i64 nfp, i64 n_out,         \
           i64 n_red, i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk,              \
           i64 x_bstride, i64 y_bstride, i64 y_split_stride) {                                  \
    sbgemv_body<STORE, TIN, TOUT, RT, KB, V, W>(kh, scale, x, y, nf, nfp, n_out, n_red, so, sr, \
                                                fsh, sb, adjoint, red_chunk, x_bstride,         \
                                                y_bstride, y_split_stride);                     \
  }
// sbgemv_<storage>_<input>_<output>_r<RT>_k<KB>_v<V>: each thread accumulates RT output rows x
// KB right-hand sides x V consecutive frequencies; the host picks the tile per call.
#define FFTMATVEC_SBGEMV(SNAME, STORE, INAME, TIN, ONAME, TOUT, RT, KB, V)                \
  FFTMATVEC_SBGEMV_ENTRY(sbgemv_##SNAME##_##INAME##_##ONAME##_r##RT##_k##KB##_v##V, STORE, \
                         TIN, TOUT, RT, KB, V, 1)

// The tiles compiled for each storage (keep in sync with fftmatvec/gpu/rules.py: TILES).
#define FFTMATVEC_SBGEMV_IO(SNAME, STORE, RT, KB, V) \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMV, SNAME, STORE, RT, KB, V)

#if FFTMATVEC_IN_SECTION(GEMV_C128)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 1, 1, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 2, 1, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 4, 1, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 8, 1, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 2, 2, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 2, 4, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 1, 8, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 2, 8, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 1, 16, 1)
FFTMATVEC_SBGEMV_IO(c128, StoreC128, 2, 16, 1)
#endif
#if FFTMATVEC_IN_SECTION(GEMV_C64)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 1, 1, 2)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 2, 1, 2)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 4, 1, 2)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 8, 1, 2)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 2, 2, 2)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 2, 4, 1)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 2, 8, 1)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 4, 8, 1)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 2, 16, 1)
FFTMATVEC_SBGEMV_IO(c64, StoreC64, 4, 16, 1)
#endif
#if FFTMATVEC_IN_SECTION(GEMV_C32H)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 1, 1, 4)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 2, 1, 4)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 4, 1, 4)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 8, 1, 2)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 2, 2, 2)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 2, 4, 1)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 2, 8, 1)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 4, 8, 1)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 2, 16, 1)
FFTMATVEC_SBGEMV_IO(c32h, StoreC32h, 4, 16, 1)
#endif

// sbgemv_<storage>_<input>_<output>_r<RT>_k1_v<V>_w<W>: one right-hand side, each thread
// W groups of V consecutive frequencies, blockDim.x groups apart (sbgemv.cuh).
#define FFTMATVEC_SBGEMVW(SNAME, STORE, INAME, TIN, ONAME, TOUT, RT, V, W)                \
  FFTMATVEC_SBGEMV_ENTRY(sbgemv_##SNAME##_##INAME##_##ONAME##_r##RT##_k1_v##V##_w##W, STORE, \
                         TIN, TOUT, RT, 1, V, W)
#define FFTMATVEC_SBGEMVW_IO(SNAME, STORE, RT, V, W) \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVW, SNAME, STORE, RT, V, W)

// (keep in sync with fftmatvec/gpu/rules.py: WIDE_TILES)
#if FFTMATVEC_IN_SECTION(GEMV_C128)
FFTMATVEC_SBGEMVW_IO(c128, StoreC128, 2, 1, 4)
FFTMATVEC_SBGEMVW_IO(c128, StoreC128, 1, 1, 8)
FFTMATVEC_SBGEMVW_IO(c128, StoreC128, 4, 1, 2)
FFTMATVEC_SBGEMVW_IO(c128, StoreC128, 1, 1, 4)
#endif
#if FFTMATVEC_IN_SECTION(GEMV_C64)
FFTMATVEC_SBGEMVW_IO(c64, StoreC64, 2, 2, 4)
FFTMATVEC_SBGEMVW_IO(c64, StoreC64, 1, 2, 8)
FFTMATVEC_SBGEMVW_IO(c64, StoreC64, 4, 2, 2)
#endif

// sbgemvs_<storage>_<input>_<output>_r<RT>_v<V>: one right-hand side, the vectors staged
// through shared memory in chunks of 32 reduction steps; blocks are 32 x TY threads.
#define FFTMATVEC_SBGEMVS(SNAME, STORE, INAME, TIN, ONAME, TOUT, RT, V)                        \
  extern "C" __global__ void __launch_bounds__(512)                                             \
      sbgemvs_##SNAME##_##INAME##_##ONAME##_r##RT##_v##V(                                       \
          const STORE::elem* __restrict__ kh, const float* __restrict__ scale,                  \
          const TIN* __restrict__ x, TOUT* __restrict__ y, i64 nf, i64 nfp, i64 n_out,          \
          i64 n_red, i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk,               \
          i64 y_split_stride) {                                                                 \
    sbgemv_staged_body<STORE, TIN, TOUT, RT, V, 32, 32>(kh, scale, x, y, nf, nfp, n_out, n_red, \
                                                        so, sr, fsh, sb, adjoint, red_chunk,    \
                                                        y_split_stride);                        \
  }
#define FFTMATVEC_SBGEMVS_IO(SNAME, STORE, RT, V) \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVS, SNAME, STORE, RT, V)

// (keep in sync with fftmatvec/gpu/rules.py: STAGED_TILES)
#if FFTMATVEC_IN_SECTION(GEMV_C128)
FFTMATVEC_SBGEMVS_IO(c128, StoreC128, 1, 1)
FFTMATVEC_SBGEMVS_IO(c128, StoreC128, 2, 1)
FFTMATVEC_SBGEMVS_IO(c128, StoreC128, 4, 1)
#endif
#if FFTMATVEC_IN_SECTION(GEMV_C64)
FFTMATVEC_SBGEMVS_IO(c64, StoreC64, 1, 2)
FFTMATVEC_SBGEMVS_IO(c64, StoreC64, 2, 2)
FFTMATVEC_SBGEMVS_IO(c64, StoreC64, 4, 2)
#endif
#if FFTMATVEC_IN_SECTION(GEMV_C32H)
FFTMATVEC_SBGEMVS_IO(c32h, StoreC32h, 1, 4)
FFTMATVEC_SBGEMVS_IO(c32h, StoreC32h, 2, 4)
FFTMATVEC_SBGEMVS_IO(c32h, StoreC32h, 4, 4)
FFTMATVEC_SBGEMVS_IO(c32h, StoreC32h, 2, 2)
FFTMATVEC_SBGEMVS_IO(c32h, StoreC32h, 4, 2)
#endif

// sbgemva_<storage>_<input>_<output>_r<RT>_y<TY>_j<J>_s<NS>[_w<W>]: one right-hand side, Khat
// streamed through shared memory by cp.async (see sbgemva.cuh): blocks of 32 x TY threads own
// RT x TY rows and 32 x V x W frequencies (V = 16 bytes of Khat; the suffix only for W > 1),
// J reduction steps per stage, NS stages. NVIDIA sm_80 and newer only, like the tensor-core
// kernels below.
#if defined(FFTMATVEC_MMA)
#define FFTMATVEC_SBGEMVA_ENTRY(NAME, STORE, TIN, TOUT, RT, TY, J, NS, W)                        \
  extern "C" __global__ void __launch_bounds__(32 * TY)                                         \
      NAME(const STORE::elem* __restrict__ kh, const float* __restrict__ scale,                 \
           const TIN* __restrict__ x, TOUT* __restrict__ y, i64 nf, i64 nfp, i64 n_out,         \
           i64 n_red, i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk,             \
           i64 y_split_stride) {                                                                \
    sbgemv_async_body<STORE, TIN, TOUT, RT, TY, J, NS, W>(kh, scale, x, y, nf, nfp, n_out,      \
                                                          n_red, so, sr, fsh, sb, adjoint,      \
                                                          red_chunk, y_split_stride);           \
  }
#define FFTMATVEC_SBGEMVA(SNAME, STORE, INAME, TIN, ONAME, TOUT, RT, TY, J, NS)          \
  FFTMATVEC_SBGEMVA_ENTRY(sbgemva_##SNAME##_##INAME##_##ONAME##_r##RT##_y##TY##_j##J##_s##NS, \
                          STORE, TIN, TOUT, RT, TY, J, NS, 1)
#define FFTMATVEC_SBGEMVAW(SNAME, STORE, INAME, TIN, ONAME, TOUT, RT, TY, J, NS, W)         \
  FFTMATVEC_SBGEMVA_ENTRY(                                                                  \
      sbgemva_##SNAME##_##INAME##_##ONAME##_r##RT##_y##TY##_j##J##_s##NS##_w##W, STORE, TIN, \
      TOUT, RT, TY, J, NS, W)
#define FFTMATVEC_SBGEMVA_IO(SNAME, STORE, RT, TY, J, NS) \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVA, SNAME, STORE, RT, TY, J, NS)
#define FFTMATVEC_SBGEMVAW_IO(SNAME, STORE, RT, TY, J, NS, W) \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVAW, SNAME, STORE, RT, TY, J, NS, W)

// The tiles of every storage (keep in sync with fftmatvec/gpu/rules.py: ASYNC_TILES).
#define FFTMATVEC_SBGEMVA_TILES(SNAME, STORE)    \
  FFTMATVEC_SBGEMVA_IO(SNAME, STORE, 4, 8, 2, 3) \
  FFTMATVEC_SBGEMVA_IO(SNAME, STORE, 4, 4, 2, 4) \
  FFTMATVEC_SBGEMVA_IO(SNAME, STORE, 4, 8, 1, 4) \
  FFTMATVEC_SBGEMVA_IO(SNAME, STORE, 1, 8, 8, 3) \
  FFTMATVEC_SBGEMVA_IO(SNAME, STORE, 8, 8, 2, 3)

#if FFTMATVEC_IN_SECTION(ASYNC_C128)
FFTMATVEC_SBGEMVA_TILES(c128, StoreC128)
#endif
#if FFTMATVEC_IN_SECTION(ASYNC_C64)
FFTMATVEC_SBGEMVA_TILES(c64, StoreC64)
#endif
#if FFTMATVEC_IN_SECTION(ASYNC_C32H)
FFTMATVEC_SBGEMVA_TILES(c32h, StoreC32h)
// two chunks per thread and row: float16 storage only
FFTMATVEC_SBGEMVAW_IO(c32h, StoreC32h, 4, 4, 2, 3, 2)
FFTMATVEC_SBGEMVAW_IO(c32h, StoreC32h, 4, 4, 1, 4, 2)
FFTMATVEC_SBGEMVAW_IO(c32h, StoreC32h, 2, 4, 2, 4, 2)
#endif
#endif  // FFTMATVEC_MMA

// sbgemmp_<storage>_<input>_<output>_m<MT>_v<V>_w<WR>x<WF>_k<KS>_s<NS>: up to 16 right-hand
// sides on tensor cores (see sbgemm.cuh): blocks of 32 x (WR x WF) threads own WR x MT row
// tiles of 16 rows and WF x V frequencies, and stream KS reduction rows per stage, NS stages
// deep, through PipeTile::BYTES x NS bytes of dynamic shared memory.
// NVIDIA sm_80 and newer only: elsewhere these names do not exist and the engine uses the GEMV
// kernels.
#if defined(FFTMATVEC_MMA)
#define FFTMATVEC_SBGEMMP(SNAME, STORE, INAME, TIN, ONAME, TOUT, MT, V, WR, WF, KS, NS)          \
  extern "C" __global__ void __launch_bounds__(32 * WR * WF)                                     \
      sbgemmp_##SNAME##_##INAME##_##ONAME##_m##MT##_v##V##_w##WR##x##WF##_k##KS##_s##NS(          \
          const STORE::elem* __restrict__ kh, const float* __restrict__ scale,                   \
          const TIN* __restrict__ x, TOUT* __restrict__ y, i64 nf, i64 nfp, i64 n_out,           \
          i64 n_red, i64 so, i64 sr, int fsh, i64 sb, int adjoint, i64 red_chunk, int kb,        \
          i64 x_bstride, i64 y_bstride, i64 y_split_stride, int freq_major) {                    \
    sbgemm_pipe_body<STORE, TIN, TOUT, MT, V, WR, WF, KS, NS>(kh, scale, x, y, nf, nfp, n_out,   \
                                                              n_red, so, sr, fsh, sb, adjoint,   \
                                                              red_chunk, kb, x_bstride,          \
                                                              y_bstride, y_split_stride,         \
                                                              freq_major);                       \
  }
#define FFTMATVEC_SBGEMMP_IO(SNAME, STORE, MT, V, WR, WF, KS, NS) \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMMP, SNAME, STORE, MT, V, WR, WF, KS, NS)

// (keep in sync with fftmatvec/gpu/rules.py: PIPE_TILES)
#if FFTMATVEC_IN_SECTION(MMA_C128)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 4, 1, 1, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 2, 2, 2, 4, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 4, 1, 2, 4, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 2, 2, 4, 2, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 2, 1, 4, 4, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 1, 2, 1, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 2, 2, 1, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c128, StoreC128, 1, 2, 1, 8, 4, 3)
#endif
#if FFTMATVEC_IN_SECTION(MMA_C64)
FFTMATVEC_SBGEMMP_IO(c64, StoreC64, 2, 2, 1, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c64, StoreC64, 1, 2, 4, 2, 4, 4)
FFTMATVEC_SBGEMMP_IO(c64, StoreC64, 1, 2, 1, 8, 4, 2)
#endif
#if FFTMATVEC_IN_SECTION(MMA_C64DMMA)
FFTMATVEC_SBGEMMP_IO(c64dmma, StoreC64Dmma, 2, 2, 2, 4, 4, 4)
FFTMATVEC_SBGEMMP_IO(c64dmma, StoreC64Dmma, 1, 2, 1, 8, 4, 3)
FFTMATVEC_SBGEMMP_IO(c64dmma, StoreC64Dmma, 1, 2, 1, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c64dmma, StoreC64Dmma, 2, 2, 1, 8, 4, 4)
#endif
#if FFTMATVEC_IN_SECTION(MMA_C32H)
FFTMATVEC_SBGEMMP_IO(c32h, StoreC32h, 2, 2, 2, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c32h, StoreC32h, 2, 4, 1, 8, 4, 4)
FFTMATVEC_SBGEMMP_IO(c32h, StoreC32h, 1, 2, 1, 8, 4, 2)
#endif
#endif  // FFTMATVEC_MMA

// sbgemvx_<storage>_<input>_<output>_n<ND>_f<FW>: adjoints of up to 16 right-hand sides over at
// most ND reduction rows, the input in registers and Khat streamed through shared memory (see
// sbgemvx.cuh): blocks of FW x ceil(kb / BG) threads own FW frequencies and BG right-hand sides
// per thread, RS rows per stage, NS stages. NVIDIA sm_80 and newer only.
// (keep in sync with fftmatvec/gpu/rules.py: XREG_ND, XREG_TILES)
#if defined(FFTMATVEC_MMA)
#define FFTMATVEC_SBGEMVX(SNAME, STORE, INAME, TIN, ONAME, TOUT, ND, BG, FW, RS, NS, MINB)         \
  extern "C" __global__ void __launch_bounds__(FW * 16 / BG, MINB)                                \
      sbgemvx_##SNAME##_##INAME##_##ONAME##_n##ND##_f##FW(                                        \
          const STORE::elem* __restrict__ kh, const float* __restrict__ scale,                    \
          const TIN* __restrict__ x, TOUT* __restrict__ y, i64 nf, i64 nfp, i64 n_out,            \
          i64 n_red, i64 so, i64 sr, int fsh, i64 sb, int kb, int rpb) {                          \
    sbgemv_xreg_body<STORE, TIN, TOUT, ND, BG, FW, RS, NS>(kh, x, y, nf, nfp, n_out, n_red, so,  \
                                                           sr, fsh, sb, kb, rpb);                 \
  }
#define FFTMATVEC_SBGEMVX_ND(SNAME, STORE, BG, FW, RS, NS, MINB)                       \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVX, SNAME, STORE, 4, BG, FW, RS, NS, MINB)   \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVX, SNAME, STORE, 8, BG, FW, RS, NS, MINB)   \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVX, SNAME, STORE, 10, BG, FW, RS, NS, MINB)  \
  FFTMATVEC_FOR_IO(FFTMATVEC_SBGEMVX, SNAME, STORE, 12, BG, FW, RS, NS, MINB)
// complex128: 2 right-hand sides per thread (their input takes 8 ND registers); complex64 and
// float16: 4. Blocks of 128 threads with 4 per multiprocessor, or of 256 with 2.
#if FFTMATVEC_IN_SECTION(XREG_C128)
FFTMATVEC_SBGEMVX_ND(c128, StoreC128, 2, 16, 2, 6, 4)
FFTMATVEC_SBGEMVX_ND(c128, StoreC128, 2, 32, 2, 4, 2)
#endif
#if FFTMATVEC_IN_SECTION(XREG_C64)
FFTMATVEC_SBGEMVX_ND(c64, StoreC64, 4, 32, 2, 4, 4)
FFTMATVEC_SBGEMVX_ND(c64, StoreC64, 4, 64, 2, 4, 2)
#endif
#if FFTMATVEC_IN_SECTION(XREG_C32H)
FFTMATVEC_SBGEMVX_ND(c32h, StoreC32h, 4, 32, 2, 4, 4)
FFTMATVEC_SBGEMVX_ND(c32h, StoreC32h, 4, 64, 2, 4, 2)
#endif
#endif  // FFTMATVEC_MMA
