"""The measured rules of the GPU path: tiles compiled in ``hip_kernels/``, and the thresholds
that choose between kernels, each measured on an H200 (docs/gpu.md holds the table of the
measurements; the comments here say what each constant means). The planner
(:mod:`fftmatvec.gpu.planner`) reads them; a plan override (:mod:`fftmatvec.gpu.plan`) sets a
choice aside."""

from __future__ import annotations

import numpy as np

_REAL_SUFFIX = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
_CPLX_SUFFIX = {np.dtype(np.complex128): "c128", np.dtype(np.complex64): "c64"}
_STORE_SUFFIX = {"d": "c128", "s": "c64", "h": "c32h"}
_CTYPE2 = {np.dtype(np.complex128): "double2", np.dtype(np.complex64): "float2"}

# (RT, KB, V) tiles compiled per storage in hip_kernels/fftmatvec_kernels.cu: each thread
# accumulates RT output rows x KB right-hand sides x V consecutive frequencies.
TILES = {
    "c128": [(1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (2, 2, 1), (2, 4, 1), (1, 8, 1), (2, 8, 1),
             (1, 16, 1), (2, 16, 1)],
    "c64": [(1, 1, 2), (2, 1, 2), (4, 1, 2), (8, 1, 2), (2, 2, 2), (2, 4, 1), (2, 8, 1), (4, 8, 1),
            (2, 16, 1), (4, 16, 1)],
    "c32h": [(1, 1, 4), (2, 1, 4), (4, 1, 4), (8, 1, 2), (2, 2, 2), (2, 4, 1), (2, 8, 1), (4, 8, 1),
             (2, 16, 1), (4, 16, 1)],
}
# (RT, V, W) tiles of the one-vector GEMV kernel whose threads own W groups of V consecutive
# frequencies, blockDim.x groups apart (sbgemv_*_k1_v<V>_w<W>); keep in sync with
# hip_kernels/fftmatvec_kernels.cu. float16 storage has none: its cp.async kernel is faster.
WIDE_TILES = {
    "c128": [(2, 1, 4), (1, 1, 8), (4, 1, 2), (1, 1, 4)],
    "c64": [(2, 2, 4), (1, 2, 8), (4, 2, 2)],
    "c32h": [],
}
# Where one of them is the default for one vector, per (storage, adjoint): ((RT, V, W), (BX, TY)
# block, split-K target in blocks per multiprocessor); see KernelEngine._wide_default.
# Measurements: docs/gpu.md.
WIDE_DEFAULTS = {
    ("c128", False): ((2, 1, 4), (32, 4), 16),
    ("c128", True): ((2, 1, 4), (32, 4), 4),
}
# ... for products whose frequencies fill at least WIDE_MIN_FILL of the blocks' frequency spans
# and that make, split, at least WIDE_MIN_BLOCKS_PER_SM blocks per multiprocessor (one round: at
# 126 registers a thread, 4 blocks of 128 threads fit). Measurements: docs/gpu.md.
WIDE_MIN_FILL = 0.75
WIDE_MIN_BLOCKS_PER_SM = 4
# (RT, V) tiles of the staged one-vector kernel (sbgemvs_*: x staged through shared memory, 32 x
# TY threads per block); keep in sync with hip_kernels/fftmatvec_kernels.cu.
STAGED_TILES = {
    "c128": [(1, 1), (2, 1), (4, 1)],
    "c64": [(1, 2), (2, 2), (4, 2)],
    "c32h": [(1, 4), (2, 4), (4, 4), (2, 2), (4, 2)],
}
_STAGED_J = 32  # reduction steps staged per chunk (the kernel's J)
# (RT, TY, J, NS[, W]) tiles of the one-vector kernel that streams Khat through shared memory with
# cp.async (sbgemva_*: blocks of 32 x TY threads own RT x TY rows and 32 x V x W frequencies, V =
# 16 bytes of Khat, W = 1 when left out, J reduction steps per stage, NS stages); NVIDIA sm_80 and
# newer. Keep in sync with hip_kernels/fftmatvec_kernels.cu.
ASYNC_TILES = {st: [(4, 8, 2, 3), (4, 4, 2, 4), (4, 8, 1, 4), (1, 8, 8, 3), (8, 8, 2, 3)]
               for st in ("c128", "c64", "c32h")}
ASYNC_TILES["c32h"] += [(4, 4, 2, 3, 2), (4, 4, 1, 4, 2), (2, 4, 2, 4, 2)]
# Where it is the default for one vector, per (storage, adjoint): from this many reduction rows
# (None: never; the register and staged kernels are as fast there). Forward products with at most
# ASYNC_FEW_ROWS outputs use it in every storage, with a narrow tile. Measurements: docs/gpu.md.
ASYNC_MIN_RED = {("c128", False): 0, ("c128", True): None, ("c64", False): None,
                 ("c64", True): None, ("c32h", False): 0, ("c32h", True): 32}
# ... and where the input vector is complex64, as the forward FFT writes it for `s` and `h` when
# stages 1 and 5 run inside cuFFT. Measurements: docs/gpu.md.
ASYNC_MIN_RED_C64_INPUT = {**ASYNC_MIN_RED, ("c64", False): 0, ("c64", True): 0}
ASYNC_FEW_ROWS = 16
# Its tile and split-K target (rounds of the block slots) per (storage, adjoint), and per storage
# for the few-row forward products.
ASYNC_DEFAULTS = {(st, adj): ((4, 8, 2, 3), 1 if adj else 2) for st in ("c128", "c64", "c32h")
                  for adj in (False, True)}
ASYNC_DEFAULTS[("c64", False)] = ((1, 8, 8, 3), 8)
ASYNC_DEFAULTS[("c128", False)] = ((1, 8, 8, 3), 8)
# float16 storage. Measurements: docs/gpu.md.
ASYNC_DEFAULTS[("c32h", False)] = ((4, 4, 2, 4), 4)
ASYNC_DEFAULTS[("c32h", True)] = ((4, 4, 2, 4), 1)
# Where the default's blocks fill less than ASYNC_MIN_FILL of their last round of block slots.
# Measurements: docs/gpu.md.
ASYNC_FILL_ALT = {("c32h", True): ((2, 4, 2, 4, 2), 1)}
# Where one split's blocks fill a round of the block slots already, split-K goes on only while
# each split keeps at least this many reduction rows, per (storage, adjoint). Measurements:
# docs/gpu.md.
ASYNC_SPLIT_ROWS = {("c128", False): 400}
ASYNC_MIN_FILL = 0.75
ASYNC_FEW = {"c128": ((4, 4, 2, 4), 2), "c64": ((4, 4, 2, 4), 2), "c32h": ((4, 4, 2, 4), 1)}
# (MT, V, WR, WF, KS, NS) tiles of the tensor-core kernel for several right-hand sides (sbgemmp_*:
# a block of WR x WF warps owns WR x MT row tiles of 16 rows and WF x V frequencies, and streams
# KS reduction rows per stage, NS stages deep, through shared memory); NVIDIA sm_80 and newer.
# Keep in sync with hip_kernels/fftmatvec_kernels.cu.
PIPE_TILES = {
    "c128": [(4, 1, 1, 8, 4, 4), (2, 2, 2, 4, 4, 4), (4, 1, 2, 4, 4, 4), (2, 2, 4, 2, 4, 4),
             (2, 1, 4, 4, 4, 4), (1, 2, 1, 8, 4, 4), (2, 2, 1, 8, 4, 4), (1, 2, 1, 8, 4, 3)],
    "c64": [(2, 2, 1, 8, 4, 4), (1, 2, 4, 2, 4, 4), (1, 2, 1, 8, 4, 2)],
    "c32h": [(2, 2, 2, 8, 4, 4), (2, 4, 1, 8, 4, 4), (1, 2, 1, 8, 4, 2)],
    # complex64 storage on FP64 tensor cores (DMMA_C64_ARCHS)
    "c64dmma": [(2, 2, 2, 4, 4, 4), (1, 2, 1, 8, 4, 3), (1, 2, 1, 8, 4, 4), (2, 2, 1, 8, 4, 4)],
}
# The defaults per (storage, adjoint), from the tile sweeps (scripts/tune_sbgemv.py --k 16).
# Measurements: docs/gpu.md.
PIPE_DEFAULTS = {
    ("c128", False): (4, 1, 1, 8, 4, 4), ("c128", True): (4, 1, 1, 8, 4, 4),
    ("c64", False): (2, 2, 1, 8, 4, 4), ("c64", True): (2, 2, 1, 8, 4, 4),
    ("c32h", False): (2, 2, 2, 8, 4, 4), ("c32h", True): (2, 4, 1, 8, 4, 4),
    ("c64dmma", False): (2, 2, 2, 4, 4, 4), ("c64dmma", True): (1, 2, 1, 8, 4, 3),
}
# Complex64 storage runs its tensor-core kernels on FP64 MMAs on these architectures (``c64dmma``:
# the complex128 kernel's m16n8k8 DMMAs on Khat and the vectors converted to float64, which is
# exact, summed in float64), elsewhere on 3xTF32; dmma_c64=0|1 overrides. Measurements:
# docs/gpu.md.
DMMA_C64_ARCHS = ("sm_90",)
# Forward products with at most PIPE_FEW_ROWS outputs. Measurements: docs/gpu.md.
PIPE_FEW_ROWS = 16
# Complex128 adjoints over few rows take a 16-row tile of 3 stages, whose 127 registers and 96 KB
# of shared memory fit 2 blocks per multiprocessor. Measurements: docs/gpu.md.
PIPE_FEW = {("c128", False): (1, 2, 1, 8, 4, 4), ("c64", False): (1, 2, 1, 8, 4, 2),
            ("c32h", False): (1, 2, 1, 8, 4, 2), ("c64", True): (1, 2, 1, 8, 4, 2),
            ("c32h", True): (1, 2, 1, 8, 4, 2), ("c128", True): (1, 2, 1, 8, 4, 3),
            ("c64dmma", False): (1, 2, 1, 8, 4, 3), ("c64dmma", True): (1, 2, 1, 8, 4, 3)}
PIPE_FEW_WAVES = 4
# The split-K count of a tensor-core launch minimises a model of its time,  T(S) = W(S) (a c(S) +
# w) + b (S > 1) S kb n_out Nf e / 1e6 + constant   (microseconds)  S splits of c(S) reduction
# rows each (whole stages), W(S) = ceil(B S / P) rounds of blocks (B blocks per split, P resident
# on the device at once by shared memory, threads and registers), e bytes per partial sum. a: the
# time of one reduction row for a round of blocks; w: a round's fill and stores; b: a megabyte of
# partial sums, written by the launch and read by the split-K sum. Measurements: docs/gpu.md.
PIPE_SPLIT_MODEL = {
    ("c128", False): (0.1505, 0.0, 1.134), ("c128", True): (0.1495, 8.01, 0.297),
    ("c64", False): (0.2347, 0.0, 1.592), ("c64", True): (0.1616, 22.73, 0.0),
    ("c32h", False): (0.2424, 0.0, 2.105), ("c32h", True): (0.3584, 46.66, 0.0),
}
# Complex64 on DMMA takes the complex128 fit. Measurements: docs/gpu.md.
PIPE_SPLIT_MODEL[("c64dmma", False)] = PIPE_SPLIT_MODEL[("c128", False)]
PIPE_SPLIT_MODEL[("c64dmma", True)] = PIPE_SPLIT_MODEL[("c128", True)]
# The complex128 launches run slower per row in splits of many thousand rows than the model says.
# Measurements: docs/gpu.md.
PIPE_MAX_SPLIT_ROWS = {"c128": 2048, "c64dmma": 2048}
_MMA_ROWS = 16  # rows of one MMA tile (m16 in every storage; the kernels' RPT)
MMA_MAX_KB = 16  # right-hand sides per tensor-core launch (the MMA's N = 2 x 16 real columns)
# The fewest right-hand sides a tensor-core launch takes, per (storage, adjoint): a launch costs
# about the same for any kb (it always computes 16 columns), so smaller batches go to the GEMV
# kernels where those are faster. Measurements: docs/gpu.md.
MMA_MIN_KB = {("c128", False): 4, ("c128", True): 4, ("c64", False): 16, ("c64", True): 8,
              ("c32h", False): 4, ("c32h", True): 8,
              ("c64dmma", False): 8, ("c64dmma", True): 8}
MMA_FEW_MIN_KB = {("c128", True): 8, ("c64dmma", True): 16}
MMA_FEW_RED = 32
# Forward launches over at most this many outputs (sensors) take tensor cores only from this many
# right-hand sides (None: never), in every storage: a tile's 16 rows are then mostly empty, and
# the GEMV kernels read the large vectors once per launch as fast. Measurements: docs/gpu.md.
MMA_FEW_OUT_MIN_KB = {4: None, 8: 9}
# Adjoint batches over few reduction rows (Nd <= XREG_MAX_ND) take the kernel that holds the input
# in registers and streams Khat through shared memory (hip_kernels/sbgemvx.cuh; NVIDIA sm_80 and
# newer), from XREG_MIN_KB right-hand sides per launch. Per storage, the frequencies a block takes
# (FW) -> (right-hand sides per thread, rows per stage, stages); keep in sync with
# hip_kernels/fftmatvec_kernels.cu. Measurements: docs/gpu.md.
XREG_ND = (4, 8, 10, 12)
XREG_MAX_ND = max(XREG_ND)
XREG_TILES = {"c128": {16: (2, 2, 6), 32: (2, 2, 4)},
              "c64": {32: (4, 2, 4), 64: (4, 2, 4)},
              "c32h": {32: (4, 2, 4), 64: (4, 2, 4)}}
XREG_ROWS = 32  # output rows per block (more where the grid's 65535 rows of blocks need them)
# ... except, per (storage, compiled sensor count, FW), where fewer rows per block measured
# faster: over at most 4 sensors, and complex128 over at most 8 in its 128-thread blocks (FW =
# 16). Measurements: docs/gpu.md.
XREG_FEW_ROWS = {("c128", 4, 16): 4, ("c128", 4, 32): 4, ("c128", 8, 16): 8,
                 ("c64", 4, 32): 4, ("c64", 4, 64): 8, ("c32h", 4, 32): 4, ("c32h", 4, 64): 8}
# The launches keep the driver's default shared-memory carveout up to the 48 KB that need no opt-
# in. Measurements: docs/gpu.md.
XREG_MAX_SMEM = 48 * 1024
# From XREG_MIN_KB right-hand sides a launch, but for launches of exactly XREG_GEMV_KB over more
# than 4 sensors (the n8-n12 kernels), which one launch of the GEMV kernels' 4-wide tile serves
# faster. Measurements: docs/gpu.md.
XREG_MIN_KB = {"c128": 3, "c64": 3, "c32h": 3}
XREG_GEMV_KB = {"c128": 4, "c64": 4}
# Frequency padding of the stored Khat, so that V-wide loads are aligned.
PAD = {"c128": 2, "c64": 4, "c32h": 8}
_ELEM_BYTES = {"c128": 16, "c64": 8, "c32h": 4}
# A power of two and a multiple of 16 bytes of elements; products with at most B padded
# frequencies keep one block. Measurements: docs/gpu.md.
KHAT_BLOCK = {"c128": 64, "c64": 64, "c32h": 128}
# The blocks are whole, so the last one may hold frequencies past Nfp that are never read; where
# those would add more than this fraction to Khat's memory (few frequencies: Nf = 101 in blocks of
# 64 would take 128), Khat keeps one block.
KHAT_MAX_WASTE = 1 / 16
_ONE_BLOCK_SHIFT = 62  # khat_foff's shift for one block (common.cuh: KHAT_ONE_BLOCK)
_BATCH_SIZES = (16, 8, 4, 2, 1)
_PER_THREAD_STREAM = 2  # cudaStreamPerThread: one handle, a different stream in each thread
REDUCE_LANES = 8  # the split-K reduction's largest blockDim.y (hip_kernels/sbgemv.cuh)
# The split-K sum of at most REDUCE_SERIAL_MAX_SPLITS splits over at least
# REDUCE_SERIAL_MIN_OUTPUTS outputs a multiprocessor runs with one thread per output
# (``reduce_serial_*``, blocks of REDUCE_SERIAL_THREADS); others with lanes of threads sharing an
# output's splits (``reduce_*``), which skinny products need. Measurements: docs/gpu.md.
REDUCE_SERIAL_MAX_SPLITS = 16
REDUCE_SERIAL_MIN_OUTPUTS = 256
REDUCE_SERIAL_THREADS = 256
# A fused product whose stage 3 is one launch of at most FOLD_MAX_SPLITS splits, and whose inverse
# FFT is a cuFFT plan with callbacks, adds the splits in that FFT's load callback
# (hip_kernels/fft_callbacks.cu: FMV_SPLIT_LOAD) instead of a sum kernel of their own: one launch
# fewer, and the sums are never written. 0 turns it off. Measurements: docs/gpu.md.
FOLD_MAX_SPLITS = 8


# The FFT precisions whose fused products take the package's own row FFT kernels by default where
# cuFFT has callbacks too (KernelEngine.row_ffts). Where cuFFT has no callbacks (ROCm) they take
# every precision: the alternative is the stages one by one. Measurements: docs/gpu.md.
ROW_FFT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
# ... for transforms whose blocks fill at least this many rounds of the multiprocessors: with
# fewer, a block's latency through its passes is the transform's time, and cuFFT with callbacks
# was faster. Measurements: docs/gpu.md.
ROW_FFT_MIN_BLOCKS_PER_SM = 3
# The FNO layer's last axis (fftmatvec/fno/_rows.py): the forward transforms (rows of L points to
# m bins) take the row FFT kernels by default where L m / (L + 2 m), the GEMM's flops per byte
# over 4, is at least this. On an H200 (docs/benchmarks.md, thirty-sixth run) the GEMMs ran at
# 20-28 TFLOPS and the kernels at 1.0-1.7 TB/s: the kernels took (256, 33) in 403 us against
# 762, (4096, 33) in 67 against 101, (128, 33) in 32 against 57, tied (256, 17) at 200 against
# 220, and lost (64, 9) and (128, 9) at 34 and 102 against 24 and 73. The inverse transforms
# lost or tied at every size measured (46-659 us against 24-628), in their pass form.
FNO_ROWS_R2C_MIN = 16.0
# The inverse transforms (the synthesis and the adjoint of the analysis) take the row kernels by
# default where the kernels' warp form takes the axis by default (fftmatvec/fno/_rows.py:
# row_warp_auto: rows of 128 or 256 points). On an H100 (docs/benchmarks.md, forty-first run,
# scripts/bench_fno_rows.py --row-forms, µs, warp form against the GEMM) they took (1024, 64,
# 128) keeping 33 bins in 39 against 47, 128 points keeping 9 in 87 against 99, 256 keeping 17
# in 161 against 234 and 256 keeping 33 in 377 against 687; on 64-point rows (88 against 28)
# and the 4096-point ones (90 against 77) the GEMMs keep them.
FNO_ROWS_C2R_WARP = True
# Both transforms take the row kernels by default where their column form takes the axis by
# default (fftmatvec/fno/_rows.py: row_cols_auto: rows of 64 R points, 16 <= R <= 256, keeping
# at most 129 bins). On an H100 (docs/benchmarks.md, forty-fifth run, scripts/bench_fno_rows.py
# --long-rows, µs, the column form against the GEMM) it took 4096-point rows keeping 16, 64
# and 129 bins in 31 / 31, 36 / 39 and 54 / 63 (forward / inverse) against 47 / 50, 101 / 119
# and 300 / 209, and 1024-point rows keeping 33 in 36 / 41 against 100 / 78.
FNO_ROWS_COLS = True
# The FNO layer's last two axes as one kernel a plane (fftmatvec/fno/_rows.py: Plane), both
# ways, by default where the first of them keeps at least this fraction of its frequencies.
# On an H200 (docs/benchmarks.md, thirty-eighth run; forward / inverse, the plane kernel against
# the chain's last-axis transform and first-axis GEMM it replaces) the planes keeping a quarter
# took (32, 64, 64^2, 16) in 46 / 49 us against 50 / 86, (4, 32, 64^3, 16) in 144 / 172 against
# 176 / 189 and (16, 128, 256^2, 64) in 727 / 862 against 862 / 1086; those keeping an eighth,
# whose GEMMs are cheaper, lost or tied: (32, 64, 128^2, 16) 139 / 151 against 122 / 145,
# (16, 64, 256^2, 32) 284 / 351 against 312 / 291. plan fno_plane=1 forces it. Those times are
# the pass form's, which the rule keeps where the warp form does not take the plane.
FNO_PLANE_MIN_FRACTION = 0.25
# The same where the warp form takes the plane (fortieth run): it took the 128^2 planes keeping
# (16, 9) in 187 / 165 us for 4096 of them and the 256^2 ones keeping (32, 17) in 182 / 192 for
# 1024, about 94 / 82 for (32, 64, 128^2, 16)'s 2048 and 182 / 192 for the 1024 of (16, 64,
# 256^2, 32) and (8, 128, 256^2, 32), against the chain's 122 / 145 and 312 / 291 above (the
# thirty-eighth run: the two runs on the same kind of device, not yet one run; bench_fno's
# dft-noplane column is the chain).
FNO_PLANE_WARP_MIN_FRACTION = 0.125
# The FNO plane kernels' direct form (fftmatvec/fno/_rows.py: DirectPlane, the truncated DFTs
# of both axes as register-tiled sums, a block a plane) by default for the planes whose lengths
# the FFT forms cannot take (a prime factor past 5: 85 = 5 x 17), which otherwise run a GEMM an
# axis. On an H100 (docs/benchmarks.md, forty-seventh run; bench_fno_rows.py --direct, µs a
# launch, direct against the chain's GEMMs of both axes): 640 planes of 85² keeping 12 x 7
# modes r2c 20 against 40, c2r 14 against 42 (10240 planes: 253 / 321, 163 / 653); the (20, 32,
# 85², 12) layer's forward 75 against 129 µs (bench_fno.py dft / dft-nodirect), forward+backward
# 297 against 323. Where the FFT forms take the plane they are faster: 2048 planes of 64²
# keeping 16 x 9 r2c 56 against the warp form's 32, c2r 35 against 30; of 128², 183 / 94 and
# 92 / 79. Plan fno_direct=1 forces it where it takes the plane, fno_direct=0 keeps the GEMMs.
FNO_DIRECT = True
# The one-axis FNO layers' split modes (fftmatvec/fno/_dft.py: SplitChain) by default also where
# the row kernels take the last axis (writing and reading the modes modes-major). Off: on an H100
# (docs/benchmarks.md, forty-first run; bench_fno.py's dft-split column against dft, µs) the
# split took (1024, 64, 128, 64) forward in 237 against 285 but tied forward+backward (655,
# 655), and lost on (64, 64, 4096, 64) (326 against 313, 687 against 666); its four real GEMMs
# ran 1.07-2.3x the interleaved chain's permutes and complex GEMM (bench_fno_rows.py
# --products). Plan fno_split=1 forces it; tune-fno times it per layer.
FNO_SPLIT_WITH_ROW_KERNELS = False
# The one-axis FNO layers' paired modes (fftmatvec/fno/_dft.py: PairedChain) by default where the
# row kernels take all four transforms of the axis: the kernels write the modes modes-major in
# complex pairs and read them back, so the complex GEMM reads and writes them in place, without
# the two permutes of the interleaved chain (55 of the (1024, 64, 128, 64) forward's 226 µs of
# GPU time on an H100, 115 of its forward+backward's 522: docs/benchmarks.md, forty-first run),
# and the inverse transforms run on the kernels even where their GEMMs are as fast (4096-point
# rows: 81 against 77 µs), since the GEMMs cannot read that layout. On an H100 (forty-second
# run, bench_fno.py, µs, paired against fno_paired=0): (1024, 64, 128, 64) forward 193 against
# 246, forward+backward 536 against 629; (64, 64, 4096, 64) 247 against 250 and 698 against 676
# (a tie). Plan fno_paired=0 keeps the other layouts; tune-fno times both.
FNO_PAIRED = True
# The two-axis FNO layers' paired modes by default where the plane kernels take the plane (both
# ways, fno_plane): the plane kernels write and read the modes modes-major in complex pairs, in
# place of the interleaved chain's two permutes around the complex GEMM (149 of the (16, 128,
# 256², 64) forward's 1168 µs of GPU time on an H100, 12 of (32, 64, 128², 16)'s 193). Their
# pairs go out (come in) planes apart, which cost the (16, 128, 256², 64) plane kernels 8 %
# (415 -> 453 and 404 -> 435 µs); its forward's GPU time went from 1168 to 1088 µs. On an H100
# (forty-third run, bench_fno.py, µs, paired against fno_paired=0, one call): forward 146 / 163
# (32, 64, 64², 16), 263 / 277 (32, 64, 128², 16), 481 / 515 (16, 64, 256², 32), 483 / 506
# (8, 128, 256², 32), 1180 / 1249 (16, 128, 256², 64); forward+backward 427 / 436, 705 / 739,
# 1059 / 1112, 1173 / 1174, 2557 / 2717. Plan fno_paired=0 keeps the planes' modes interleaved.
FNO_PAIRED_PLANE = True
# The paired modes' forward channel product (Y[m] = X[m] W[m]) on the package's kernel
# (fftmatvec/fno/_product.py, fno_modes_cgemm_f32_b<NB> in hip_kernels/fno.cuh) for batches of
# at most this many rows, both channel counts even: cuBLAS's batched complex GEMM runs tiles of
# 32 x 64 on them and reads the weight at about half the memory's rate. On an H100 (forty-third
# run, bench_fno_rows.py --products, µs, kernel against cuBLAS): (M, B, C, O) = (2112, 16, 128,
# 128) 139 / 198, (544, 8, 128, 128) 55 / 59; before it went into the package, (144, 32, 64, 64)
# 15 / 26, and it lost with larger batches ((2112, 32, 64, 64) 82 / 63, (64, 1024, 64, 64) 67 /
# 60; the 1-D layers' (33, 1024, 64, 64) 45 / 39).
FNO_PRODUCT_MAX_BATCH = 16
# A one-axis FNO layer's forward without gradients as one kernel (fftmatvec/fno/_fused1d.py:
# the row kernels' analysis, the channel product and the synthesis between one read of x and
# one write of y, the modes in shared memory), where it takes the layer (rows of 64-256 points,
# 64 or 128 channels in and out) and its blocks (of at most 8 batch rows, one a multiprocessor)
# fill at least FNO_FUSED_MIN_FILL of the waves they take: a block's three steps run in turn,
# so the kernel's time is a wave's whatever its blocks, where the chain's three launches take
# time in proportion to the batch. On an H100 (forty-sixth run, bench_fno_rows.py --fused, µs,
# the kernel against the three launches timed alone): 128 blocks on 132 multiprocessors (0.97)
# (1024, 64, 128) keeping 33 bins 75 against 114, (512, 64, 256) keeping 65 85 against 115,
# (512, 128, 128) keeping 33 115 against 137; 256 blocks (0.97) (2048, 64, 64) keeping 17 83
# against 123; 64 blocks (0.48) (512, 64, 128) keeping 33 68 against 54; 32 blocks (0.24)
# 74 against 47 ((128, 64, 256) keeping 65), 100 against 48 ((128, 128, 128)) and 39 against 47
# ((256, 64, 64) keeping 17, a short block).
FNO_FUSED = True
FNO_FUSED_MIN_FILL = 0.75
# The paired chains' bias added by the synthesis's end kernel (the row and plane kernels'
# inverse transforms) to the constant mode as it loads it, where the chain's middle (its CUDA
# graph on a small layer) would run a kernel of its own for it (fftmatvec/fno/_dft.py:
# PairedChain.end_bias, kernel_bias); with it off the kernels are handed a null bias. On an H100
# (fifty-second run, the rule off against on, alternating, in one process) the small forwards
# took 0.6-1.7 µs less: (32, 64, 64², 16) 89.3 -> 88.7 µs, (64, 64, 4096, 64) 106.6 -> 105.6,
# (20, 32, 85², 12) 67.8 -> 66.1, the outputs bit for bit the same.
FNO_END_BIAS = True
# Stages 3-5 of a one-vector adjoint as one kernel (hip_kernels/fused.cuh: its sums never go
# through memory, the stage-3 output the inverse FFT would read back). By default for complex128
# and complex64 storage with at most FUSED_MAX_ND sensors and FUSED_THREADS frequencies, where the
# row FFT kernels take the inverse transform (KernelEngine.fused_adjoint). Measurements:
# docs/gpu.md.
FUSED_ND = (4, 8, 10, 12)  # the sensors its kernels hold (fftmatvec_kernels.cu)
# (FUSED_ND: the smallest that holds Nd, whose loads are then all in use.) Measurements: docs/gpu.md.
FUSED_MAX_ND = max(FUSED_ND)
FUSED_THREADS = 128  # hip_kernels/fused.cuh: FUSED_MAX_THREADS (one thread per frequency)
FUSED_STORES = ("c128", "c64")
# ... where its blocks fill at least this many per multiprocessor, per storage. Measurements:
# docs/gpu.md.
FUSED_MIN_BLOCKS_PER_SM = {"c128": 0, "c64": 16}
# Its inverse FFT's largest radix: 10 in every precision (the kernel's registers are set by its
# sums, not its butterflies). Measurements: docs/gpu.md.
FUSED_MAX_RADIX = 10
# The kernel keeps the driver's default shared-memory carveout. Measurements: docs/gpu.md.
FUSED_MAX_SMEM = 48 * 1024


# Products whose Khat is smaller than GRAPH_MAX_KHAT_BYTES replay a captured CUDA graph (launch-
# bound sizes); so do those with Khat up to GRAPH_MEDIUM_KHAT_BYTES whose input and output vectors
# total at most GRAPH_MAX_VECTOR_BYTES: their GPU time (under a millisecond) is short enough for
# the host's launches to show, and copying the vectors in and out of the graph's buffers costs a
# few microseconds. Measurements: docs/gpu.md.
GRAPH_MAX_KHAT_BYTES = 64 * 2**20
GRAPH_MEDIUM_KHAT_BYTES = 2 * 2**30
GRAPH_MAX_VECTOR_BYTES = 16 * 2**20
# At most HOLD_STREAMS streams' sets are kept. Measurements: docs/gpu.md.
HOLD_MAX_BYTES = 64 * 2**20
HOLD_KHAT_FRACTION = 4
HOLD_STREAMS = 4
