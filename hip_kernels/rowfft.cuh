// Stages 1+2 and 4+5 as one kernel each: the real FFTs of the time axis, with the padding,
// unpadding and precision casts around them, for 5-smooth lengths L.
//
// cuFFT with the pad and unpad as callbacks ran these transforms far from their memory floor
// at the lengths the operator uses (L = 2000, 1000, 200: docs/benchmarks.md, twenty-ninth
// run). Here a block reads `rpb` rows once, transforms them in shared memory and
// writes them out once. The first Stockham pass of an even L loads its butterflies' inputs from
// global memory itself (fft_first_pass), forward always and inverse from complex64 spectra,
// instead of after a copy of the rows into shared memory (complex128 spectra are packed as they
// are loaded: irfft_unpad_body): that made the forward transforms of 5000-100000 rows faster,
// the float64 ones the most.
//
// * The real input of a row is packed as N complex values z[n] = x[2n] + i x[2n+1] and
//   transformed by a complex FFT of length N (Stockham passes between two shared-memory
//   buffers, natural order in and out, of radix 2, 3, 4, 5 and 8 and of the composite radices
//   6 and 10 (prime-factor DFTs in registers: Pfa), the odd ones first), then split
//   into the N + 1 values of the real FFT:
//   X[k] = (Z[k] + conj Z[N-k]) / 2 + w^k (Z[k] - conj Z[N-k]) / (2i), w = exp(-2 pi i / L),
//   and X[N-k] = conj((Z[k] + conj Z[N-k]) / 2 - w^k (...) / (2i)).
// * The inverse runs the same steps backwards: Z[k] = E[k] + i O[k] with E[k] = X[k] +
//   conj X[N-k] and O[k] = (X[k] - conj X[N-k]) conj(w^k), an inverse complex FFT of length N,
//   and x[2n] = Re z[n], x[2n+1] = Im z[n], unnormalised like cuFFT's complex-to-real
//   transform (the 1/L is in the stored Khat). The imaginary parts of X[0] and X[N] are taken
//   as zero, as a real signal's are.
// * An odd L (the operator's default length for some Nt, e.g. 15 for Nt = 7) takes one complex
//   FFT of length N = L: of the samples with zero imaginary parts forward, of the whole
//   Hermitian spectrum inverse.
//
// The twiddles come from one table, made in float64 on the host and rounded to the transform's
// precision: exp(-2 pi i k / 2N) for k <= N / 2 (the w^k above, for an even L), then each
// pass's table (fft_pass; complex128 passes read only its first row: TwiddlePowers).
// Nothing here depends on the warp size; indices inside a block are 32-bit (a block holds at
// most a few thousand values), row offsets 64-bit. The host (fftmatvec/gpu/rowfft.py) picks the
// radices, the rows per block and the block size.
#pragma once
#include "common.cuh"

template <typename C> struct RealOf;
template <> struct RealOf<double2> { typedef double type; };
template <> struct RealOf<float2> { typedef float type; };

template <typename C> __device__ __forceinline__ C c_add(C a, C b) {
  return make_c(a.x + b.x, a.y + b.y);
}
template <typename C> __device__ __forceinline__ C c_sub(C a, C b) {
  return make_c(a.x - b.x, a.y - b.y);
}
template <typename C> __device__ __forceinline__ C c_conj(C a) { return make_c(a.x, -a.y); }
template <typename C> __device__ __forceinline__ C c_mul(C a, C b) {
  return make_c(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
// a times s i (s = +1 or -1)
template <int S, typename C> __device__ __forceinline__ C c_muli(C a) {
  return S > 0 ? make_c(-a.y, a.x) : make_c(a.y, -a.x);
}
template <typename C, typename R> __device__ __forceinline__ C c_scale(C a, R s) {
  return make_c(a.x * s, a.y * s);
}

// In-register DFT of radix RAD, y[q] = sum_p v[p] exp(S 2 pi i p q / RAD): S = -1 forward,
// +1 inverse.
template <int RAD, int S, typename C> struct Dft;
template <int S, typename C> struct Dft<2, S, C> {
  static __device__ __forceinline__ void run(C* v) {
    const C a = v[0], b = v[1];
    v[0] = c_add(a, b);
    v[1] = c_sub(a, b);
  }
};
template <int S, typename C> struct Dft<3, S, C> {
  static __device__ __forceinline__ void run(C* v) {
    typedef typename RealOf<C>::type R;
    const R h = (R)0.86602540378443864676;  // sin(2 pi / 3)
    const C t1 = c_add(v[1], v[2]);
    const C t2 = c_sub(v[0], c_scale(t1, (R)0.5));
    const C t3 = c_muli<S>(c_scale(c_sub(v[1], v[2]), h));
    v[0] = c_add(v[0], t1);
    v[1] = c_add(t2, t3);
    v[2] = c_sub(t2, t3);
  }
};
template <int S, typename C> struct Dft<4, S, C> {
  static __device__ __forceinline__ void run(C* v) {
    const C a = c_add(v[0], v[2]), b = c_sub(v[0], v[2]);
    const C c = c_add(v[1], v[3]), d = c_muli<S>(c_sub(v[1], v[3]));
    v[0] = c_add(a, c);
    v[2] = c_sub(a, c);
    v[1] = c_add(b, d);
    v[3] = c_sub(b, d);
  }
};
template <int S, typename C> struct Dft<5, S, C> {
  static __device__ __forceinline__ void run(C* v) {
    typedef typename RealOf<C>::type R;
    // cos(2 pi / 5), cos(4 pi / 5), sin(2 pi / 5), sin(4 pi / 5)
    const R c1 = (R)0.30901699437494742410, c2 = (R)-0.80901699437494742410;
    const R s1 = (R)0.95105651629515357212, s2 = (R)0.58778525229247312917;
    const C a1 = c_add(v[1], v[4]), b1 = c_sub(v[1], v[4]);
    const C a2 = c_add(v[2], v[3]), b2 = c_sub(v[2], v[3]);
    const C m1 = make_c(v[0].x + c1 * a1.x + c2 * a2.x, v[0].y + c1 * a1.y + c2 * a2.y);
    const C m2 = make_c(v[0].x + c2 * a1.x + c1 * a2.x, v[0].y + c2 * a1.y + c1 * a2.y);
    const C n1 = c_muli<S>(make_c(s1 * b1.x + s2 * b2.x, s1 * b1.y + s2 * b2.y));
    const C n2 = c_muli<S>(make_c(s2 * b1.x - s1 * b2.x, s2 * b1.y - s1 * b2.y));
    v[0] = c_add(v[0], c_add(a1, a2));
    v[1] = c_add(m1, n1);
    v[4] = c_sub(m1, n1);
    v[2] = c_add(m2, n2);
    v[3] = c_sub(m2, n2);
  }
};
template <int S, typename C> struct Dft<8, S, C> {
  static __device__ __forceinline__ void run(C* v) {
    typedef typename RealOf<C>::type R;
    const R r = (R)0.70710678118654752440;  // 1 / sqrt(2)
    C e[4] = {v[0], v[2], v[4], v[6]}, o[4] = {v[1], v[3], v[5], v[7]};
    Dft<4, S, C>::run(e);
    Dft<4, S, C>::run(o);
    // o[q] *= exp(S 2 pi i q / 8)
    o[1] = c_scale(c_add(o[1], c_muli<S>(o[1])), r);
    o[2] = c_muli<S>(o[2]);
    o[3] = c_scale(c_sub(c_muli<S>(o[3]), o[3]), r);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      v[q] = c_add(e[q], o[q]);
      v[q + 4] = c_sub(e[q], o[q]);
    }
  }
};

// a^-1 mod m, for coprime a and m > 1 (compile-time radices)
__host__ __device__ constexpr int inv_mod(int a, int m, int x = 1) {
  return (a * x) % m == 1 ? x : inv_mod(a, m, x + 1);
}

// A composite radix R = A B with A and B coprime, by the prime-factor (Good-Thomas) algorithm:
// with the input index n = (n1 B + n2 A) mod R and the output index k = (k1 B e1 + k2 A e2)
// mod R (e1 = B^-1 mod A, e2 = A^-1 mod B), the DFT of length R is B DFTs of length A followed
// by A DFTs of length B with no twiddles between them, and in registers the two index maps are
// only renamings. A pass of radix 6 or 10 takes the place of two passes of 2 and 3 or 5, one
// round trip through shared memory fewer. (Radices 12-40 this way were slower: their registers
// cost more blocks than their passes saved.)
template <int A, int B, int S, typename C> struct Pfa {
  static __device__ __forceinline__ void run(C* v) {
    constexpr int R = A * B, E1 = inv_mod(B % A, A), E2 = inv_mod(A % B, B);
    C t[B][A];
#pragma unroll
    for (int n2 = 0; n2 < B; ++n2) {
#pragma unroll
      for (int n1 = 0; n1 < A; ++n1) t[n2][n1] = v[(n1 * B + n2 * A) % R];
      Dft<A, S, C>::run(t[n2]);
    }
#pragma unroll
    for (int k1 = 0; k1 < A; ++k1) {
      C u[B];
#pragma unroll
      for (int n2 = 0; n2 < B; ++n2) u[n2] = t[n2][k1];
      Dft<B, S, C>::run(u);
#pragma unroll
      for (int k2 = 0; k2 < B; ++k2) v[(k1 * B * E1 + k2 * A * E2) % R] = u[k2];
    }
  }
};
template <int S, typename C> struct Dft<6, S, C> : Pfa<2, 3, S, C> {};
template <int S, typename C> struct Dft<10, S, C> : Pfa<2, 5, S, C> {};

// Whether a pass loads only w^k of its twiddles and makes w^(q k) = w^(q/2 k) w^((q - q/2) k)
// in registers, or loads all RAD - 1 from the pass's table. The loads go through the L1 pipe
// that the shared-memory passes keep busy; the products add a few units in the last place.
// complex128 takes the powers (the FP64 units have room). complex64 keeps the table: the powers
// gained it little, for larger errors.
template <typename C> struct TwiddlePowers { static constexpr bool value = false; };
template <> struct TwiddlePowers<double2> { static constexpr bool value = true; };

// The kernels' launch bounds: at most ROWFFT_MAX_THREADS threads a block (fftmatvec/gpu/rowfft.py:
// THREADS), and on NVIDIA registers for ROWFFT_MIN_BLOCKS blocks per multiprocessor, as many as
// the blocks' 32 KB of shared memory allow there (ROWS_BYTES there). Without them the complex128
// kernels took more registers than that many blocks leave, _r10 the most; with them most fit
// without spills, and the rest spill a few bytes. Under HIP, where a second bound means something
// else, only the first applies.
#define ROWFFT_MAX_THREADS 128
#define ROWFFT_MIN_BLOCKS 7
#if defined(FFTMATVEC_HIP)
#define ROWFFT_BOUNDS __launch_bounds__(ROWFFT_MAX_THREADS)
#else
#define ROWFFT_BOUNDS __launch_bounds__(ROWFFT_MAX_THREADS, ROWFFT_MIN_BLOCKS)
#endif

// One Stockham pass over `rows` transforms of length n held back to back in src: the
// sub-transforms of length ls (done by the earlier passes) are combined RAD at a time into
// length ls * RAD, written to dst. twp is the pass's twiddle table, (RAD - 1) x ls values,
// entry (q - 1) ls + k = exp(-2 pi i q k / (ls RAD)): for each q, the lanes of consecutive
// butterflies read consecutive entries (a table of w^j indexed q k apart spreads one load of a
// warp over up to 32 cache lines, and those loads, not the arithmetic, held the first version).
template <int RAD, int S, typename C>
__device__ __forceinline__ void fft_pass(const C* __restrict__ src, C* __restrict__ dst,
                                         const C* __restrict__ twp, int n, int ls, int rows) {
  // butterfly b = row * stride + j, k = j % ls; the threads step through them blockDim.x at a
  // time, (row, j, k) updated without divisions (stride = n / RAD is a multiple of ls)
  const int stride = n / RAD, total = rows * stride, step = blockDim.x;
  const int drow = step / stride, dj = step - drow * stride, dk = dj % ls;
  int row = threadIdx.x / stride, j = threadIdx.x - row * stride, k = j % ls;
  for (int b = threadIdx.x; b < total; b += step) {
    const C* s = src + row * n + j;
    C v[RAD];
#pragma unroll
    for (int q = 0; q < RAD; ++q) v[q] = s[q * stride];
    if (ls > 1) {
      if (TwiddlePowers<C>::value) {  // one load, the rest as products of powers
        C w[RAD];
        w[1] = twp[k];
        if (S > 0) w[1].y = -w[1].y;
#pragma unroll
        for (int q = 2; q < RAD; ++q) w[q] = c_mul(w[q / 2], w[q - q / 2]);
#pragma unroll
        for (int q = 1; q < RAD; ++q) v[q] = c_mul(v[q], w[q]);
      } else {
#pragma unroll
        for (int q = 1; q < RAD; ++q) {
          C w = twp[(q - 1) * ls + k];
          if (S > 0) w.y = -w.y;
          v[q] = c_mul(v[q], w);
        }
      }
    }
    Dft<RAD, S, C>::run(v);
    C* d = dst + row * n + (j - k) * RAD + k;
#pragma unroll
    for (int q = 0; q < RAD; ++q) d[q * ls] = v[q];
    row += drow;
    j += dj;
    k += dk;
    if (j >= stride) {
      j -= stride;
      ++row;
    }
    if (k >= ls) k -= ls;
  }
}

// The complex FFT of `rows` rows of length n in a, through b and back as the passes alternate;
// returns the buffer that holds the result. radices: 6 bits per pass, first pass lowest (the
// host's RADICES in fftmatvec/gpu/rowfft.py are the values it may hold), none above MAXR: a
// kernel's registers are those of its largest butterfly, so each family of kernels (FAMILIES
// there) compiles the
// radices up to its own MAXR only. The passes' twiddle tables follow each other from twp.
template <int MAXR, int S, typename C>
__device__ __forceinline__ C* fft_rows(C* a, C* b, const C* __restrict__ twp, int n, int rows,
                                       unsigned long long radices, int npass, int ls = 1) {
  for (int p = 0; p < npass; ++p) {
    const int rad = (int)((radices >> (6 * p)) & 63);
    switch (rad) {
      case 2: fft_pass<2, S, C>(a, b, twp, n, ls, rows); break;
      case 3: fft_pass<3, S, C>(a, b, twp, n, ls, rows); break;
      case 4: fft_pass<4, S, C>(a, b, twp, n, ls, rows); break;
      case 5: fft_pass<5, S, C>(a, b, twp, n, ls, rows); break;
      case 6: fft_pass<6, S, C>(a, b, twp, n, ls, rows); break;
      case 8: fft_pass<8, S, C>(a, b, twp, n, ls, rows); break;
      default: if constexpr (MAXR >= 10) fft_pass<10, S, C>(a, b, twp, n, ls, rows); break;
    }
    __syncthreads();
    C* t = a;
    a = b;
    b = t;
    twp += (rad - 1) * ls;
    ls *= rad;
  }
  return a;
}

// The first pass (ls = 1: no twiddles) of `rows` transforms of length n whose inputs come from
// load(r, m), element m of row r, instead of shared memory: the loads of global memory that
// would fill the shared buffer feed the butterflies' registers directly, so a row takes one
// round trip through shared memory and one barrier fewer. Written to dst as fft_pass writes.
template <int RAD, int S, typename C, typename Load>
__device__ __forceinline__ void fft_first_pass(Load load, C* __restrict__ dst, int n, int rows) {
  const int stride = n / RAD, total = rows * stride, step = blockDim.x;
  const int drow = step / stride, dj = step - drow * stride;
  int row = threadIdx.x / stride, j = threadIdx.x - row * stride;
  for (int b = threadIdx.x; b < total; b += step) {
    C v[RAD];
#pragma unroll
    for (int q = 0; q < RAD; ++q) v[q] = load(row, j + q * stride);
    Dft<RAD, S, C>::run(v);
    C* d = dst + row * n + j * RAD;
#pragma unroll
    for (int q = 0; q < RAD; ++q) d[q] = v[q];
    row += drow;
    j += dj;
    if (j >= stride) {
      j -= stride;
      ++row;
    }
  }
}

// fft_rows over inputs from load(r, m) (fft_first_pass) into a, then through b and a; returns
// the buffer that holds the result.
template <int MAXR, int S, typename C, typename Load>
__device__ __forceinline__ C* fft_rows_loaded(Load load, C* a, C* b, const C* __restrict__ twp,
                                              int n, int rows, unsigned long long radices,
                                              int npass) {
  if (npass == 0) {  // n = 1
    for (int r = threadIdx.x; r < rows; r += blockDim.x) a[r] = load(r, 0);
    __syncthreads();
    return a;
  }
  const int rad = (int)(radices & 63);
  switch (rad) {
    case 2: fft_first_pass<2, S, C>(load, a, n, rows); break;
    case 3: fft_first_pass<3, S, C>(load, a, n, rows); break;
    case 4: fft_first_pass<4, S, C>(load, a, n, rows); break;
    case 5: fft_first_pass<5, S, C>(load, a, n, rows); break;
    case 6: fft_first_pass<6, S, C>(load, a, n, rows); break;
    case 8: fft_first_pass<8, S, C>(load, a, n, rows); break;
    default: if constexpr (MAXR >= 10) fft_first_pass<10, S, C>(load, a, n, rows); break;
  }
  __syncthreads();
  return fft_rows<MAXR, S, C>(a, b, twp + (rad - 1), n, rows, radices >> 6, npass - 1, rad);
}

// Position (r, c) of element i = r * len + c of a block's rows, for i = threadIdx.x,
// threadIdx.x + blockDim.x, ...: stepped without a division per element.
struct RowCursor {
  int r, c, dr, dc, len;
  __device__ __forceinline__ explicit RowCursor(int len_) : len(len_) {
    dr = blockDim.x / len;
    dc = blockDim.x - dr * len;
    r = threadIdx.x / len;
    c = threadIdx.x - r * len;
  }
  __device__ __forceinline__ void next() {
    r += dr;
    c += dc;
    if (c >= len) {
      c -= len;
      ++r;
    }
  }
};

// The block's rows of the input, contiguous in global memory (nrow rows of nt), into
// shared memory as rows of len >= nt reals, zero-padded: the loads of ROWFFT_UNROLL steps are
// issued before their stores, so that each thread has that many in flight.
#define ROWFFT_UNROLL 8
template <typename TIn, typename TMid, typename R>
__device__ __forceinline__ void load_padded(const TIn* __restrict__ src, R* __restrict__ dst,
                                            int nrow, int nt, int len, bool track,
                                            unsigned int& km) {
  const int total = nrow * nt, step = blockDim.x * ROWFFT_UNROLL;
  RowCursor at(nt);
  for (int base = threadIdx.x; base < total; base += step) {
    R v[ROWFFT_UNROLL];
#pragma unroll
    for (int u = 0; u < ROWFFT_UNROLL; ++u) {
      const int i = base + u * blockDim.x;
      const TIn s = i < total ? src[i] : (TIn)0;
      if (track) {
        const unsigned int k = amax_key(s);
        km = k > km ? k : km;
      }
      v[u] = (R)(TMid)s;
    }
#pragma unroll
    for (int u = 0; u < ROWFFT_UNROLL; ++u, at.next())
      if (base + u * blockDim.x < total) dst[at.r * len + at.c] = v[u];
  }
  const int pad = len - nt;
  if (pad > 0) {
    RowCursor z(pad);
    for (int i = threadIdx.x; i < nrow * pad; i += blockDim.x, z.next())
      dst[z.r * len + nt + z.c] = (R)0;
  }
}

// The block's rows of a complex input (nrow rows of nf values, contiguous) into shared memory,
// widened to C, the loads of ROWFFT_UNROLL steps in flight per thread.
template <typename CIn, typename C>
__device__ __forceinline__ void load_rows(const CIn* __restrict__ src, C* __restrict__ dst,
                                          int total) {
  const int step = blockDim.x * ROWFFT_UNROLL;
  for (int base = threadIdx.x; base < total; base += step) {
    CIn v[ROWFFT_UNROLL];
#pragma unroll
    for (int u = 0; u < ROWFFT_UNROLL; ++u) {
      const int i = base + u * blockDim.x;
      if (i < total) v[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < ROWFFT_UNROLL; ++u) {
      const int i = base + u * blockDim.x;
      if (i < total) dst[i] = ccast<C>(v[u]);
    }
  }
}

// Stages 1 and 2 of a block's nrow rows of x (contiguous, nt each) into shared memory: each
// sample rounded to stage 1's precision TMid, zero-padded to L and transformed in R. a and b are
// the two buffers of rows of n + 1 values; returns the one that holds the complex FFTs (rows n
// apart), which rfft_split turns into the real FFTs' values.
// Where ``track``, km is the largest amax_key of this thread's samples.
template <int MAXR, typename TIn, typename TMid, typename R>
__device__ __forceinline__ const typename Complex<R>::type* rfft_rows(
    const TIn* __restrict__ x, typename Complex<R>::type* a, typename Complex<R>::type* b,
    const typename Complex<R>::type* __restrict__ tw, int nrow, int nt, int L,
    unsigned long long radices, int npass, bool track, unsigned int& km) {
  typedef typename Complex<R>::type C;
  const bool packed = L % 2 == 0;  // else one complex FFT of length L, imaginary parts zero
  const int n = packed ? L / 2 : L;
  if (packed) {  // z[m] = x[2m] + i x[2m + 1], zero past nt, loaded by the first pass
    auto load = [&](int r, int m) {
      const TIn* xr = x + (i64)r * nt;
      const int c = 2 * m;
      const TIn v0 = c < nt ? xr[c] : (TIn)0, v1 = c + 1 < nt ? xr[c + 1] : (TIn)0;
      if (track) {
        const unsigned int k0 = amax_key(v0), k1 = amax_key(v1), k = k0 > k1 ? k0 : k1;
        km = k > km ? k : km;
      }
      return make_c((R)(TMid)v0, (R)(TMid)v1);
    };
    return fft_rows_loaded<MAXR, -1, C>(load, a, b, tw + n / 2 + 1, n, nrow, radices, npass);
  }
  load_padded<TIn, TMid, R>(x, reinterpret_cast<R*>(b), nrow, nt, n, track, km);
  __syncthreads();
  const R* br = reinterpret_cast<const R*>(b);
  for (int i = threadIdx.x; i < nrow * n; i += blockDim.x) a[i] = make_c(br[i], (R)0);
  __syncthreads();
  return fft_rows<MAXR, -1, C>(a, b, tw + n / 2 + 1, n, nrow, radices, npass);
}

// The real FFTs' values X[r, k], k <= L / 2, of rfft_rows' complex FFTs z: emit(r, k, X[r, k])
// once for each, by the block's threads in turn.
template <typename C, typename Emit>
__device__ __forceinline__ void rfft_split(const C* z, const C* __restrict__ tw, int nrow, int L,
                                           Emit emit) {
  typedef typename RealOf<C>::type R;
  if (L % 2 != 0) {  // the first nf values of the transform, as they are
    const int nf = L / 2 + 1;
    RowCursor at(nf);
    for (int i = threadIdx.x; i < nrow * nf; i += blockDim.x, at.next())
      emit(at.r, at.c, z[at.r * L + at.c]);
    return;
  }
  const int n = L / 2, half = n / 2 + 1;
  RowCursor at(half);
  for (int i = threadIdx.x; i < nrow * half; i += blockDim.x, at.next()) {
    const int r = at.r, k = at.c;
    const C* zr = z + r * n;
    const C zk = zr[k], znk = c_conj(zr[k == 0 ? 0 : n - k]);
    const C xe = c_scale(c_add(zk, znk), (R)0.5);
    const C xo = c_muli<-1>(c_scale(c_sub(zk, znk), (R)0.5));  // (zk - znk) / (2i)
    const C wxo = c_mul(tw[k], xo);
    emit(r, k, c_add(xe, wxo));
    if (n - k != k) emit(r, n - k, c_conj(c_sub(xe, wxo)));
  }
}

// Stages 1 and 2: out[r, f] (f <= N) is the real FFT of row r of x (rows, nt), zero-padded to
// L = 2N, each sample rounded to stage 1's precision TMid and computed in R; written in COut,
// times scale[(r % nd) * nfp + f] when scale is given (a float16 adjoint's row scales, as the
// FMV_XHAT_SCALE_STORE callback applies them); x's largest magnitude where amax_scratch is
// given (amax_finish). Block b transforms rows b rpb .. b rpb + rpb - 1.
template <int MAXR, typename TIn, typename TMid, typename R, typename COut>
__device__ __forceinline__ void rfft_pad_body(const TIn* __restrict__ x, COut* __restrict__ out,
                                              const typename Complex<R>::type* __restrict__ tw,
                                              const float* __restrict__ scale, i64 rows, int nt,
                                              int L, int rpb, unsigned long long radices,
                                              int npass, int nd, int nfp,
                                              unsigned int* amax_scratch) {
  typedef typename Complex<R>::type C;
  const int n = L % 2 == 0 ? L / 2 : L, nf = L / 2 + 1;
  C* a = reinterpret_cast<C*>(fftmatvec_dynamic_smem);
  C* b = a + rpb * (n + 1);  // two buffers of rpb rows of n + 1 values (the inverse loads n + 1)
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  const bool track = amax_scratch != nullptr;
  unsigned int km = 0u;
  const C* z = rfft_rows<MAXR, TIn, TMid, R>(x + row0 * nt, a, b, tw, nrow, nt, L, radices, npass,
                                             track, km);
  // the sensor of the block's first row: one 64-bit remainder a block, 32-bit ones a value
  // (a 64-bit one in the loop held the f64 families' registers past gfx90a's SGPRs)
  const int d0 = scale != nullptr ? (int)(row0 % nd) : 0;
  rfft_split(z, tw, nrow, L, [&](int r, int f, C v) {
    if (scale != nullptr) v = c_scale(v, (R)scale[(i64)((d0 + r) % nd) * nfp + f]);
    out[(row0 + r) * nf + f] = ccast<COut>(v);
  });
  if (track) amax_finish(km, amax_scratch);
}

// The first nt samples of each of the nrow inverse transforms z (rows n apart; packed: of n
// complex values holding 2n real samples) to o (rows nt apart), rounded to TMid, in TOut.
template <typename TMid, typename C, typename TOut>
__device__ __forceinline__ void unpad_rows(const C* z, TOut* __restrict__ o, int nrow, int nt,
                                           int n, bool packed) {
  typedef typename RealOf<C>::type R;
  RowCursor at(nt);
  if (packed) {
    const R* zr = reinterpret_cast<const R*>(z);  // row r's samples are zr[r * 2n + c]
    for (int i = threadIdx.x; i < nrow * nt; i += blockDim.x, at.next())
      o[i] = (TOut)(TMid)zr[at.r * 2 * n + at.c];
  } else {
    for (int i = threadIdx.x; i < nrow * nt; i += blockDim.x, at.next())
      o[i] = (TOut)(TMid)z[at.r * n + at.c].x;
  }
}

// Stages 4 and 5 of a block's nrow rows of spectra, already in shared memory in b (rows of
// L / 2 + 1 values, contiguous), through a: out[r, c] (c < nt; rows nt apart) is sample c of
// the unnormalised inverse real FFT of row r, computed in R, rounded to stage 5's precision TMid,
// in TOut. The caller has synchronised the block after writing b.
template <int MAXR, typename R, typename TMid, typename TOut>
__device__ __forceinline__ void irfft_rows(typename Complex<R>::type* a,
                                           typename Complex<R>::type* b,
                                           const typename Complex<R>::type* __restrict__ tw,
                                           TOut* __restrict__ o, int nrow, int nt, int L,
                                           unsigned long long radices, int npass) {
  typedef typename Complex<R>::type C;
  const bool packed = L % 2 == 0;  // else one complex FFT of length L of the whole spectrum
  const int n = packed ? L / 2 : L, nf = L / 2 + 1;
  if (packed) {
    const int half = n / 2 + 1;
    RowCursor at(half);
    for (int i = threadIdx.x; i < nrow * half; i += blockDim.x, at.next()) {
      const int r = at.r, k = at.c;
      const C* src = b + r * nf;
      C xk = src[k], xnk = src[n - k];
      if (k == 0) {  // X[0] and X[N] of a real signal are real
        xk.y = 0;
        xnk.y = 0;
      }
      const C e = c_add(xk, c_conj(xnk));
      const C o = c_mul(c_sub(xk, c_conj(xnk)), c_conj(tw[k]));
      C* zr = a + r * n;
      zr[k] = c_add(e, c_muli<1>(o));
      if (k != 0 && n - k != k) zr[n - k] = c_add(c_conj(e), c_muli<1>(c_conj(o)));
    }
  } else {  // the Hermitian spectrum: Z[k] = X[k], Z[L - k] = conj X[k]
    for (int i = threadIdx.x; i < nrow * nf; i += blockDim.x) {
      const int r = i / nf, k = i - r * nf;
      C v = b[r * nf + k];
      if (k == 0) v.y = 0;
      a[r * n + k] = v;
      if (k != 0) a[r * n + n - k] = c_conj(v);
    }
  }
  __syncthreads();
  const C* z = fft_rows<MAXR, 1, C>(a, b, tw + n / 2 + 1, n, nrow, radices, npass);
  unpad_rows<TMid>(z, o, nrow, nt, n, packed);
}

// Stages 4 and 5 of a block's nrow rows of an even L = 2n, the first pass loading its inputs
// Z[m] = E + i O (irfft_rows) from the spectra yb in global memory (rows of n + 1 values): X[k]
// and X[n - k] with k = m for m <= n / 2, else their conjugate form with k = n - m, so the rows
// go through shared memory neither as they are nor packed. a and b: the two buffers.
template <int MAXR, typename CIn, typename R, typename TMid, typename TOut>
__device__ __forceinline__ void irfft_loaded(const CIn* __restrict__ yb, TOut* __restrict__ o,
                                             typename Complex<R>::type* a,
                                             typename Complex<R>::type* b,
                                             const typename Complex<R>::type* __restrict__ tw,
                                             int nrow, int nt, int n, unsigned long long radices,
                                             int npass) {
  typedef typename Complex<R>::type C;
  const int nf = n + 1, half = n / 2;
  auto load = [&](int r, int m) {
    const bool low = m <= half;
    const int k = low ? m : n - m;
    const CIn* src = yb + (i64)r * nf;
    C xk = ccast<C>(src[k]), xnk = ccast<C>(src[n - k]);
    if (k == 0) {  // X[0] and X[N] of a real signal are real
      xk.y = 0;
      xnk.y = 0;
    }
    const C e = c_add(xk, c_conj(xnk));
    const C od = c_mul(c_sub(xk, c_conj(xnk)), c_conj(tw[k]));
    return low ? c_add(e, c_muli<1>(od)) : c_add(c_conj(e), c_muli<1>(c_conj(od)));
  };
  const C* z = fft_rows_loaded<MAXR, 1, C>(load, a, b, tw + n / 2 + 1, n, nrow, radices, npass);
  unpad_rows<TMid>(z, o, nrow, nt, n, true);
}

// The packed spectra Z (irfft_rows) of nrow rows of an even L = 2n into a (rows n apart),
// computed as the rows yb (n + 1 values each) are loaded from global memory: each thread loads
// X[k] and X[n - k] of PACK_UNROLL pairs before it writes Z[k] and Z[n - k].
#define PACK_UNROLL 4
template <typename CIn, typename C>
__device__ __forceinline__ void pack_spectra(const CIn* __restrict__ yb, C* __restrict__ a,
                                             const C* __restrict__ tw, int nrow, int n) {
  const int nf = n + 1, half = n / 2 + 1, total = nrow * half;
  RowCursor at(half);
  for (int base = threadIdx.x; base < total; base += PACK_UNROLL * blockDim.x) {
    CIn xk[PACK_UNROLL], xnk[PACK_UNROLL];
    int rr[PACK_UNROLL], kk[PACK_UNROLL];
#pragma unroll
    for (int u = 0; u < PACK_UNROLL; ++u, at.next()) {
      rr[u] = at.r;
      kk[u] = at.c;
      if (base + u * (int)blockDim.x < total) {
        const CIn* src = yb + (i64)at.r * nf;
        xk[u] = src[at.c];
        xnk[u] = src[n - at.c];
      }
    }
#pragma unroll
    for (int u = 0; u < PACK_UNROLL; ++u) {
      if (base + u * (int)blockDim.x >= total) break;
      const int k = kk[u];
      C x0 = ccast<C>(xk[u]), x1 = ccast<C>(xnk[u]);
      if (k == 0) {  // X[0] and X[N] of a real signal are real
        x0.y = 0;
        x1.y = 0;
      }
      const C e = c_add(x0, c_conj(x1));
      const C o = c_mul(c_sub(x0, c_conj(x1)), c_conj(tw[k]));
      C* zr = a + rr[u] * n;
      zr[k] = c_add(e, c_muli<1>(o));
      if (k != 0 && n - k != k) zr[n - k] = c_add(c_conj(e), c_muli<1>(c_conj(o)));
    }
  }
}

// Stages 4 and 5: out[r, c] (c < nt) is sample c of the unnormalised inverse real FFT of row r
// of y (rows, N + 1) in CIn, computed in R, rounded to stage 5's precision TMid, in TOut.
// Complex64 spectra of an even L take irfft_loaded, which made the inverse transforms of
// 5000-100000 rows faster in float32 and in float64 (`ddhdd`). From complex128 spectra, where its
// doubled loads cost spills, it was slower; those are packed as they are loaded instead
// (pack_spectra), one pass through shared memory fewer than the copy and irfft_rows' packing,
// and faster than them (docs/benchmarks.md, twenty-ninth run).
template <int MAXR, typename CIn, typename R, typename TMid, typename TOut>
__device__ __forceinline__ void irfft_unpad_body(const CIn* __restrict__ y, TOut* __restrict__ out,
                                                 const typename Complex<R>::type* __restrict__ tw,
                                                 i64 rows, int nt, int L, int rpb,
                                                 unsigned long long radices, int npass) {
  typedef typename Complex<R>::type C;
  const int n = L % 2 == 0 ? L / 2 : L, nf = L / 2 + 1;
  C* a = reinterpret_cast<C*>(fftmatvec_dynamic_smem);
  C* b = a + rpb * (n + 1);  // two buffers of rpb rows of n + 1 values (the inverse loads n + 1)
  const i64 row0 = (i64)blockIdx.x * rpb;
  const int nrow = (int)(rows - row0 < rpb ? rows - row0 : rpb);
  if (L % 2 == 0) {
    if constexpr (sizeof(CIn) == 8) {
      irfft_loaded<MAXR, CIn, R, TMid, TOut>(y + row0 * nf, out + row0 * nt, a, b, tw, nrow, nt,
                                             n, radices, npass);
    } else {
      pack_spectra(y + row0 * nf, a, tw, nrow, n);
      __syncthreads();
      const C* z = fft_rows<MAXR, 1, C>(a, b, tw + n / 2 + 1, n, nrow, radices, npass);
      unpad_rows<TMid>(z, out + row0 * nt, nrow, nt, n, true);
    }
    return;
  }
  load_rows<CIn, C>(y + row0 * nf, b, nrow * nf);
  __syncthreads();
  irfft_rows<MAXR, R, TMid, TOut>(a, b, tw, out + row0 * nt, nrow, nt, L, radices, npass);
}
