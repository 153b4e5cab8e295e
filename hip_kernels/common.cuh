// Shared helpers for the fftmatvec kernels. Written once in CUDA C++; hipified for AMD.
// Kernels never assume a warp of 32 lanes and index with 64-bit integers.
#pragma once

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC_RTC__)
#define FFTMATVEC_HIP 1
#endif

typedef long long i64;

// The dynamic shared memory of every kernel that takes some (one declaration for the unit).
extern __shared__ uint4 fftmatvec_dynamic_smem[];

// ---- a device clock ---------------------------------------------------------------------------
// device_clock(): a counter of constant rate, the same on every multiprocessor: %globaltimer
// (nanoseconds) on NVIDIA, wall_clock64() on AMD (its rate is the device's; the host measures
// it). clock_pause(): a short sleep of the calling thread between two reads of the clock.
__device__ __forceinline__ unsigned long long device_clock() {
#if defined(FFTMATVEC_HIP)
  return (unsigned long long)wall_clock64();
#else
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}
__device__ __forceinline__ void clock_pause() {
#if defined(FFTMATVEC_HIP)
  __builtin_amdgcn_s_sleep(8);  // 8 x 64 clock cycles
#else
  asm volatile("nanosleep.u32 500;");  // nanoseconds, at most about twice that
#endif
}

// ---- complex arithmetic on double2 / float2 ------------------------------------------------
template <typename T> struct Complex;
template <> struct Complex<double> { typedef double2 type; };
template <> struct Complex<float> { typedef float2 type; };

__device__ __forceinline__ double2 make_c(double re, double im) { return make_double2(re, im); }
__device__ __forceinline__ float2 make_c(float re, float im) { return make_float2(re, im); }

// Convert between complex precisions (the casts between stages are fused into the kernels).
template <typename To> __device__ __forceinline__ To ccast(double2 v);
template <typename To> __device__ __forceinline__ To ccast(float2 v);
template <> __device__ __forceinline__ double2 ccast<double2>(double2 v) { return v; }
template <> __device__ __forceinline__ float2 ccast<float2>(double2 v) {
  return make_float2((float)v.x, (float)v.y);
}
template <> __device__ __forceinline__ double2 ccast<double2>(float2 v) {
  return make_double2((double)v.x, (double)v.y);
}
template <> __device__ __forceinline__ float2 ccast<float2>(float2 v) { return v; }

// acc += a * b (complex multiply-add)
template <typename C>
__device__ __forceinline__ void cfma(C& acc, C a, C b) {
  acc.x = fma(a.x, b.x, acc.x);
  acc.x = fma(-a.y, b.y, acc.x);
  acc.y = fma(a.x, b.y, acc.y);
  acc.y = fma(a.y, b.x, acc.y);
}

// acc += conj(a) * b
template <typename C>
__device__ __forceinline__ void cfma_conj(C& acc, C a, C b) {
  acc.x = fma(a.x, b.x, acc.x);
  acc.x = fma(a.y, b.y, acc.x);
  acc.y = fma(a.x, b.y, acc.y);
  acc.y = fma(-a.y, b.x, acc.y);
}

// ---- Khat loads: each element is read exactly once per product ------------------------------
// On NVIDIA through the read-only data path (ld.global.nc), which the one-vector products ran
// faster with than with evict-first loads (__ldcs).
template <typename T>
__device__ __forceinline__ T load_khat(const T* p) {
#if defined(FFTMATVEC_HIP)
  return *p;
#else
  return __ldg(p);
#endif
}

// ---- where a frequency of Khat lies -------------------------------------------------------
// Khat may be stored in blocks of 2^fsh frequencies, [f >> fsh][Nd][Nm][f & (2^fsh - 1)], so
// that a tile of a block's frequencies reads one contiguous run down the reduction instead of
// short runs a row apart (fftmatvec/gpu/rules.py: KHAT_BLOCK).
// Element (o, r, f) is at o * so + r * sr + khat_foff(f, fsh, sb): the strides so and sr are
// those of one block's (Nd, Nm) rows, sb the elements between blocks. fsh = KHAT_ONE_BLOCK is
// the unblocked layout (Nd, Nm, Nfp), one block holding every frequency. Every kernel's runs of
// frequencies (16-byte chunks, tiles of F frequencies) lie inside one block: the host keeps
// blocks a multiple of them.
constexpr int KHAT_ONE_BLOCK = 62;  // (fftmatvec/gpu/rules.py: _ONE_BLOCK_SHIFT)
__device__ __forceinline__ i64 khat_foff(i64 f, int fsh, i64 sb) {
  return (f >> fsh) * sb + (f & ((1LL << fsh) - 1));
}

// ---- float16 storage ------------------------------------------------------------------------
// A complex float16 value is stored as one 32-bit word: real part in the low 16 bits, imaginary
// part in the high 16 bits (IEEE binary16). Converted with the hardware instruction on both
// vendors; no half-precision header is needed, so NVRTC and hiprtc compile it as is.
__device__ __forceinline__ float half_bits_to_float(unsigned short h) {
#if defined(FFTMATVEC_HIP)
  return (float)__builtin_bit_cast(_Float16, h);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#endif
}

__device__ __forceinline__ float2 unpack_half2(unsigned int w) {
  return make_float2(half_bits_to_float((unsigned short)(w & 0xffffu)),
                     half_bits_to_float((unsigned short)(w >> 16)));
}

// Khat storage formats. load<V> reads V consecutive frequencies into the compute type with
// the widest aligned loads available (16 bytes when V allows). The stored frequency axis is
// padded to a multiple of PAD so that those loads are aligned.
struct StoreC128 {
  typedef double2 elem;
  typedef double real;
  static constexpr int PAD = 2;
  static constexpr bool f64_mma = true;  // tensor-core kernels on FP64 MMAs (sbgemm.cuh)
  __device__ static __forceinline__ double2 expand(elem v) { return v; }  // to the compute type
  template <int V>
  __device__ static __forceinline__ void load(const elem* p, double2 (&c)[V]) {
#pragma unroll
    for (int v = 0; v < V; ++v) c[v] = load_khat(p + v);
  }
};
struct StoreC64 {
  typedef float2 elem;
  typedef float real;
  static constexpr int PAD = 4;
  static constexpr bool exact_tf32 = false;  // TF32 kernels split a float32 value in two
  static constexpr bool f64_mma = false;     // tensor-core kernels on TF32 MMAs
  __device__ static __forceinline__ float2 expand(elem v) { return v; }
  template <int V>
  __device__ static __forceinline__ void load(const elem* p, float2 (&c)[V]) {
    if constexpr (V % 2 == 0) {
#pragma unroll
      for (int w = 0; w < V / 2; ++w) {
        const float4 q = load_khat(reinterpret_cast<const float4*>(p) + w);
        c[2 * w] = make_float2(q.x, q.y);
        c[2 * w + 1] = make_float2(q.z, q.w);
      }
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) c[v] = load_khat(p + v);
    }
  }
};
// Complex64 storage whose tensor-core kernels run on FP64 MMAs (sbgemm.cuh): its values are
// exact in float64. Kernel names `c64dmma`; the engine takes them on sm_90 (fftmatvec/gpu/rules.py:
// DMMA_C64_ARCHS).
struct StoreC64Dmma : StoreC64 {
  static constexpr bool f64_mma = true;
};
struct StoreC32h {
  typedef unsigned int elem;
  typedef float real;
  static constexpr int PAD = 8;
  static constexpr bool exact_tf32 = true;  // a float16 value is exact in TF32
  static constexpr bool f64_mma = false;
  __device__ static __forceinline__ float2 expand(elem v) { return unpack_half2(v); }
  template <int V>
  __device__ static __forceinline__ void load(const elem* p, float2 (&c)[V]) {
    if constexpr (V % 4 == 0) {
#pragma unroll
      for (int w = 0; w < V / 4; ++w) {
        const uint4 q = load_khat(reinterpret_cast<const uint4*>(p) + w);
        c[4 * w] = expand(q.x);
        c[4 * w + 1] = expand(q.y);
        c[4 * w + 2] = expand(q.z);
        c[4 * w + 3] = expand(q.w);
      }
    } else if constexpr (V == 2) {
      const uint2 q = load_khat(reinterpret_cast<const uint2*>(p));
      c[0] = expand(q.x);
      c[1] = expand(q.y);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) c[v] = expand(load_khat(p + v));
    }
  }
};

// ---- the largest magnitude of an input (fftmatvec/_scaling.py: the finiteness check and the
// input's power-of-two scale) ----------------------------------------------------------------
// A magnitude's key, an unsigned integer that orders as the magnitude does: float32's bits
// with the sign cleared; for float64 the high word of those bits, with its lowest bit set
// where the low word is not zero. The key keeps the exponent, so it tells Inf and NaN from
// finite values (a NaN's key lies above Inf's) and gives the exponent the scale needs.
__device__ __forceinline__ unsigned int amax_key(float v) {
  return __float_as_uint(v) & 0x7fffffffu;
}
__device__ __forceinline__ unsigned int amax_key(double v) {
  const unsigned long long b = (unsigned long long)__double_as_longlong(v);
  return ((unsigned int)(b >> 32) & 0x7fffffffu) | ((unsigned int)b != 0u ? 1u : 0u);
}
// Once per launch: the largest key m of the launch's threads into *out (host memory the host
// reads, and decodes, after the launch; its pointer in scratch[2..3]), through scratch[0] (the
// running maximum) and scratch[1] (the blocks done), zero before the launch and after it (the
// last block resets them), so a launch needs no memset before it and no copy after it. One
// pointer argument, not two: the float64 row FFTs' scalar registers are full on gfx90a. Every
// thread of every (one-dimensional) block calls it once.
__device__ __forceinline__ void amax_finish(unsigned int m, unsigned int* scratch) {
  __shared__ unsigned int block_max;
  if (threadIdx.x == 0) block_max = 0u;
  __syncthreads();
  if (m != 0u) atomicMax(&block_max, m);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(scratch, block_max);
    __threadfence();
    if (atomicAdd(scratch + 1, 1u) == gridDim.x - 1) {  // the last block: every maximum is in
      const unsigned int key = atomicExch(scratch, 0u);
      atomicExch(scratch + 1, 0u);
      **reinterpret_cast<unsigned int* const*>(scratch + 2) = key;
      __threadfence_system();
    }
  }
}
