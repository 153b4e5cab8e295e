// Stages 1 and 5 fused into the FFTs of stages 2 and 4, as cuFFT load and store callbacks
// (NVIDIA only). NVRTC compiles them at run time to LTO-IR and cuFFT links them into its own
// kernels when a plan is made, so the zero-padding, unpadding and precision casts cost no pass
// over memory of their own: the forward FFT reads the unpadded input, the inverse FFT writes
// the unpadded output.
//
// One callback is compiled per program (cuFFT links one image per callback it is given),
// chosen by FMV_PAD_LOAD, FMV_XHAT_STORE, FMV_XHAT_SCALE_STORE, FMV_YHAT_LOAD,
// FMV_SPLIT_LOAD or FMV_UNPAD_STORE, with the
// sizes and types given as macros: FMV_L (FFT length), FMV_NT (samples kept), FMV_TIN /
// FMV_TOUT (the arrays read or written), FMV_TMID (the precision the padded or unpadded values
// are rounded to), FMV_TFFT (the FFT's real type). cuFFT passes each callback the element offset into the logical
// array of the plan: (rows, L) reals, or (rows, L/2 + 1) complex values. With the sizes known
// at compile time, splitting an offset into row and column is a multiply, not a division.
// The file includes nothing: the types it needs (double2, float2) are built into NVRTC.

#if defined(FMV_PAD_LOAD)
// Stage 1 as the real-to-complex FFT's load: sample c of padded row r is in[r, c] rounded to
// stage 1's precision for c < Nt, and zero for Nt <= c < L. dataIn is the unpadded (rows, Nt)
// input itself.
__device__ FMV_TFFT fmv_pad_load(void* dataIn, unsigned long long offset, void* callerInfo,
                                 void* sharedPointer) {
  const unsigned long long r = offset / (FMV_L), c = offset - r * (FMV_L);
  if (c >= (FMV_NT)) return (FMV_TFFT)0;
  return (FMV_TFFT)(FMV_TMID) static_cast<const FMV_TIN*>(dataIn)[r * (FMV_NT) + c];
}
#endif

#if defined(FMV_XHAT_STORE)
// The forward FFT's output written in complex64 for a stage 3 that computes in float32 (`s`
// and `h`), which would round every value to float32 on its load anyway: half the bytes
// written here and read there, the same product.
__device__ void fmv_xhat_store(void* dataOut, unsigned long long offset, double2 element,
                               void* callerInfo, void* sharedPointer) {
  static_cast<float2*>(dataOut)[offset] = make_float2((float)element.x, (float)element.y);
}
#endif

#if defined(FMV_XHAT_SCALE_STORE)
// The forward FFT's output for a float16 adjoint, in complex64, each value times the float32
// scale of its row of Khat: with Khat[i, j, f] = scale[i, f] q[i, j, f], the adjoint
// Khat[f]^H x[f] is q[f]^H (scale[:, f] x[f]), so stage 3 reads one prescaled vector instead
// of the vector and the scales again for every block of its output rows. callerInfo is the
// scales (FMV_ND, FMV_NFP) float32; the output is (rows, FMV_NF), row r being sensor r % FMV_ND
// of right-hand side r / FMV_ND. FMV_TFFTC is the FFT's complex type (double2 or float2).
__device__ void fmv_xhat_scale_store(void* dataOut, unsigned long long offset,
                                     FMV_TFFTC element, void* callerInfo, void* sharedPointer) {
  const unsigned long long r = offset / (FMV_NF), f = offset - r * (FMV_NF);
  const unsigned long long i = r % (FMV_ND);
  const float s = static_cast<const float*>(callerInfo)[i * (FMV_NFP) + f];
  static_cast<float2*>(dataOut)[offset] = make_float2((float)(element.x * s), (float)(element.y * s));
}
#endif

#if defined(FMV_YHAT_LOAD)
// The inverse FFT's input read in complex64 where stage 3 computes in float32 (`s` and `h`)
// and stage 4 in float64: stage 3 writes its float32 sums as they are, and they are widened
// here, exactly. Half the bytes written there and read here, the same product to the bit.
__device__ double2 fmv_yhat_load(void* dataIn, unsigned long long offset, void* callerInfo,
                                 void* sharedPointer) {
  const float2 v = static_cast<const float2*>(dataIn)[offset];
  return make_double2((double)v.x, (double)v.y);
}
#endif

#if defined(FMV_SPLIT_LOAD)
// The split-K sum of a fused product's stage 3 (one launch) as the inverse FFT's load, so that
// it costs no launch of its own: dataIn is stage 3's FMV_SPLITS partial results (FMV_TPART,
// its compute precision), FMV_SPLIT_STRIDE elements apart. They are added in split order from
// zero, as the serial sum kernel adds them (hip_kernels/sbgemv.cuh), rounded to the type that
// kernel would write (FMV_TYHAT), then widened to the FFT's complex type FMV_TFFTC: to the bit
// the values that kernel would hand the inverse FFT. Any number of splits; the engine folds
// only a few (fftmatvec/gpu/rules.py: FOLD_MAX_SPLITS).
__device__ FMV_TFFTC fmv_split_load(void* dataIn, unsigned long long offset, void* callerInfo,
                                    void* sharedPointer) {
  const FMV_TPART* p = static_cast<const FMV_TPART*>(dataIn) + offset;
  FMV_TPART acc;
  acc.x = 0;
  acc.y = 0;
  for (int s0 = 0; s0 < (FMV_SPLITS); s0 += 8) {  // 8 loads in flight, then their sum in order
    FMV_TPART v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (s0 + u < (FMV_SPLITS)) v[u] = p[(unsigned long long)(s0 + u) * (FMV_SPLIT_STRIDE)];
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (s0 + u < (FMV_SPLITS)) {
        acc.x += v[u].x;
        acc.y += v[u].y;
      }
  }
  FMV_TYHAT r;
  r.x = acc.x;
  r.y = acc.y;
  FMV_TFFTC out;
  out.x = r.x;
  out.y = r.y;
  return out;
}
#endif

#if defined(FMV_UNPAD_STORE)
// Stage 5 as the complex-to-real FFT's store: sample c < Nt of row r, rounded to stage 5's
// precision, goes to out[r, c] in the interface dtype; the samples Nt <= c < L are dropped.
__device__ void fmv_unpad_store(void* dataOut, unsigned long long offset, FMV_TFFT element,
                                void* callerInfo, void* sharedPointer) {
  const unsigned long long r = offset / (FMV_L), c = offset - r * (FMV_L);
  if (c < (FMV_NT)) static_cast<FMV_TOUT*>(dataOut)[r * (FMV_NT) + c] = (FMV_TOUT)(FMV_TMID)element;
}
#endif
