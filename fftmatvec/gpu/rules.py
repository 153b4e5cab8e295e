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
# block, split-K target in blocks per multiprocessor); see KernelEngine._wide_default. From
# scripts/tune_sbgemv.py --unstaged wide on an H200 (docs/history.md, twelfth run): complex128
# forward 1.99 / 1.91 ms against 2.13 / 2.18 for the tile of one group on (5000, 100, 1000) /
# (20000, 50, 500), adjoint 1.96 / 1.97 against 2.01 / 2.04, 0.43 against 0.46 at Nd = 10. The
# complex64 tiles were within the noise (2-4 %) of the cp.async and GEMV defaults, and stay
# out of the defaults.
WIDE_DEFAULTS = {
    ("c128", False): ((2, 1, 4), (32, 4), 16),
    ("c128", True): ((2, 1, 4), (32, 4), 4),
}
# ... for products whose frequencies fill at least WIDE_MIN_FILL of the blocks' frequency spans
# and that make, split, at least WIDE_MIN_BLOCKS_PER_SM blocks per multiprocessor (one round: at
# 126 registers a thread, 4 blocks of 128 threads fit). At Nf = 101, complex128, H200: (20000,
# 50, 100) 0.440 / 0.394 ms forward / adjoint against 0.508 / 0.459 for the tile of one group,
# (100000, 10, 100) adjoint 0.430 against 0.457; (1000, 20, 100) forward, whose 3 row tiles
# split to 93 blocks, 49.8 against 36.2 us (docs/history.md, twelfth run).
WIDE_MIN_FILL = 0.75
WIDE_MIN_BLOCKS_PER_SM = 4
# (RT, V) tiles of the staged one-vector kernel (sbgemvs_*: x staged through shared memory,
# 32 x TY threads per block); keep in sync with hip_kernels/fftmatvec_kernels.cu.
STAGED_TILES = {
    "c128": [(1, 1), (2, 1), (4, 1)],
    "c64": [(1, 2), (2, 2), (4, 2)],
    "c32h": [(1, 4), (2, 4), (4, 4), (2, 2), (4, 2)],
}
_STAGED_J = 32  # reduction steps staged per chunk (the kernel's J)
# (RT, TY, J, NS[, W]) tiles of the one-vector kernel that streams Khat through shared memory
# with cp.async (sbgemva_*: blocks of 32 x TY threads own RT x TY rows and 32 x V x W
# frequencies, V = 16 bytes of Khat, W = 1 when left out, J reduction steps per stage, NS
# stages); NVIDIA sm_80 and newer. Keep in sync with hip_kernels/fftmatvec_kernels.cu.
ASYNC_TILES = {st: [(4, 8, 2, 3), (4, 4, 2, 4), (4, 8, 1, 4), (1, 8, 8, 3), (8, 8, 2, 3)]
               for st in ("c128", "c64", "c32h")}
ASYNC_TILES["c32h"] += [(4, 4, 2, 3, 2), (4, 4, 1, 4, 2), (2, 4, 2, 4, 2)]
# Where it is the default for one vector, per (storage, adjoint): from this many reduction
# rows (None: never; the register and staged kernels are as fast there). Forward products with
# at most ASYNC_FEW_ROWS outputs use it in every storage, with a narrow tile. From the sweeps of
# scripts/tune_sbgemv.py on an H200 (docs/history.md, fifth run). Complex128 forward products
# take it since Khat is stored in blocks of frequencies: (1, 8, 8, 3) with 8 rounds of split-K
# took 0.400 / 1.903 / 1.850 ms on (1000, 100, 1000) / (20000, 50, 500) / (5000, 100, 1000)
# against 0.413 / 1.903 / 1.915 for the wide GEMV tile (seventeenth run).
ASYNC_MIN_RED = {("c128", False): 0, ("c128", True): None, ("c64", False): None,
                 ("c64", True): None, ("c32h", False): 0, ("c32h", True): 32}
# ... and where the input vector is complex64, as the forward FFT writes it for `s` and `h`
# when stages 1 and 5 run inside cuFFT: `s` then gains 3-12 % on this kernel (sixth run).
ASYNC_MIN_RED_C64_INPUT = {**ASYNC_MIN_RED, ("c64", False): 0, ("c64", True): 0}
ASYNC_FEW_ROWS = 16
# Its tile and split-K target (rounds of the block slots) per (storage, adjoint), and per
# storage for the few-row forward products.
ASYNC_DEFAULTS = {(st, adj): ((4, 8, 2, 3), 1 if adj else 2) for st in ("c128", "c64", "c32h")
                  for adj in (False, True)}
ASYNC_DEFAULTS[("c64", False)] = ((1, 8, 8, 3), 8)
ASYNC_DEFAULTS[("c128", False)] = ((1, 8, 8, 3), 8)
# float16 storage: forward, the one-chunk 16-row tile with 4 rounds of split-K since Khat is
# stored in blocks of 128 frequencies: 0.131 / 0.547 / 0.515 ms on (1000, 100, 1000) /
# (20000, 50, 500) / (5000, 100, 1000) against 0.133 / 0.556 / 0.540 for the two-chunk tile
# below with 2 rounds, whose chunks then lie in two blocks (seventeenth run); adjoint, the
# one-chunk 16-row tile, 1 round (seventh run). On the unblocked layout the two-chunk tile had
# been 0-4 % faster than this forward default (thirteenth run).
ASYNC_DEFAULTS[("c32h", False)] = ((4, 4, 2, 4), 4)
ASYNC_DEFAULTS[("c32h", True)] = ((4, 4, 2, 4), 1)
# Where the default's blocks fill less than ASYNC_MIN_FILL of their last round of block slots (a
# round and a bit: the adjoint of (1000, 100, 1000) has 504 blocks for 396 slots), this tile
# takes over if it fills more: 0.124 against 0.137 ms there; on (5000, 100, 1000) and
# (20000, 50, 500), where the default fills 90-97 %, it was 0-4 % slower (thirteenth run).
ASYNC_FILL_ALT = {("c32h", True): ((2, 4, 2, 4, 2), 1)}
# Where one split's blocks fill a round of the block slots already, split-K goes on only while
# each split keeps at least this many reduction rows, per (storage, adjoint). On an H200
# (twenty-sixth run, the fused product, interleaved), complex128 forward: 2 splits of 504 rows
# instead of the 6 that 8 rounds make were 1.027x as fast on (1000, 100, 1000), 3 of 504 instead
# of 6 1.007x on (1500, 100, 1000); 1-3 splits were 1.02x in an earlier call. On
# (5000, 100, 1000) and (20000, 50, 500), with 840 and 1056 rows per split, fewer were 1-13 %
# slower. Where the blocks of one split fill less than a round, cutting the splits cost 1-7 %
# ((2000, 50, 500): 5 against 18, (1000, 40, 1000): 2 against 14), and they split as before.
ASYNC_SPLIT_ROWS = {("c128", False): 400}
ASYNC_MIN_FILL = 0.75
ASYNC_FEW = {"c128": ((4, 4, 2, 4), 2), "c64": ((4, 4, 2, 4), 2), "c32h": ((4, 4, 2, 4), 1)}
# (MT, V, WR, WF, KS, NS) tiles of the tensor-core kernel for several right-hand sides
# (sbgemmp_*: a block of WR x WF warps owns WR x MT row tiles of 16 rows and WF x V frequencies,
# and streams KS reduction rows per stage, NS stages deep, through shared memory); NVIDIA sm_80
# and newer. Keep in sync with hip_kernels/fftmatvec_kernels.cu.
PIPE_TILES = {
    "c128": [(4, 1, 1, 8, 4, 4), (2, 2, 2, 4, 4, 4), (4, 1, 2, 4, 4, 4), (2, 2, 4, 2, 4, 4),
             (2, 1, 4, 4, 4, 4), (1, 2, 1, 8, 4, 4), (2, 2, 1, 8, 4, 4), (1, 2, 1, 8, 4, 3)],
    "c64": [(2, 2, 1, 8, 4, 4), (1, 2, 4, 2, 4, 4), (1, 2, 1, 8, 4, 2)],
    "c32h": [(2, 2, 2, 8, 4, 4), (2, 4, 1, 8, 4, 4), (1, 2, 1, 8, 4, 2)],
    # complex64 storage on FP64 tensor cores (DMMA_C64_ARCHS)
    "c64dmma": [(2, 2, 2, 4, 4, 4), (1, 2, 1, 8, 4, 3), (1, 2, 1, 8, 4, 4), (2, 2, 1, 8, 4, 4)],
}
# The defaults per (storage, adjoint), from the tile sweeps on an H200 (docs/history.md: fourth
# run; complex128 eighteenth run, after its MMAs became m16n8k8 over 16 rows whose accumulators
# are Y itself; scripts/tune_sbgemv.py --k 16 repeats them over the compiled tiles). Complex128
# tiles hold 16 doubles per lane per row tile and frequency, so they stay at MT x V = 4 per warp:
# (4, 1, 1, 8, 4, 4) owns 64 rows x 8 frequencies, and was the fastest or within 1.5 % of it on
# the four sizes both ways (k = 16: 2.549 / 3.036 ms on (5000, 100, 1000), 2.707 / 3.013 on
# (20000, 50, 500), against 3.018 / 3.294 and 3.148 / 3.529 for the 32-row tiles before).
# Complex64 on DMMA (nineteenth run), k = 16: forward (2, 2, 2, 4, 4, 4), 64 rows x 8
# frequencies in a block of 2 x 4 warps, the fastest or within 2.5 % of the best tile swept on
# the three sizes of Nd >= 50 (2.19 / 2.13 / 0.46 ms); adjoint the 3-stage 16-row tile, whose
# 122-126 registers fit two blocks per multiprocessor, the fastest tile swept or within 0.6 %
# of it on all four (2.35 / 2.68 / 0.46 / 1.41-1.49 ms); TF32 took 2.38 / 2.37 forward and
# 2.38 / 3.04 adjoint on (5000, 100, 1000) / (20000, 50, 500).
PIPE_DEFAULTS = {
    ("c128", False): (4, 1, 1, 8, 4, 4), ("c128", True): (4, 1, 1, 8, 4, 4),
    ("c64", False): (2, 2, 1, 8, 4, 4), ("c64", True): (2, 2, 1, 8, 4, 4),
    ("c32h", False): (2, 2, 2, 8, 4, 4), ("c32h", True): (2, 4, 1, 8, 4, 4),
    ("c64dmma", False): (2, 2, 2, 4, 4, 4), ("c64dmma", True): (1, 2, 1, 8, 4, 3),
}
# Complex64 storage runs its tensor-core kernels on FP64 MMAs on these architectures
# (``c64dmma``: the complex128 kernel's m16n8k8 DMMAs on Khat and the vectors converted to
# float64, which is exact, summed in float64), elsewhere on 3xTF32; dmma_c64=0|1
# overrides. On an H200 the TF32 kernel is held by its instructions (three MMAs, the splits and
# the float32 sums per k-step); the DMMA one keeps its MMA pipe 58 % busy and was, at k = 16,
# 1-12 % faster on the four sizes both ways, its errors those of complex64 storage alone
# (nineteenth run). Not measured elsewhere: sm_80's FP64 tensor cores run at 1/8 of its TF32
# rate, an H200's at 1/7.5 of its dense TF32 (wgmma) rate.
DMMA_C64_ARCHS = ("sm_90",)
# Forward products with at most PIPE_FEW_ROWS outputs (Nd), and `s` and `h` adjoints over at most
# that many reduction rows, take a tile of 16 rows, and split the reduction until the blocks fill
# PIPE_FEW_WAVES rounds of the resident ones: the default tiles of 32 or 64 rows compute 3-6 times
# the rows there are at Nd = 10. k = 16 on (100000, 10, 100), H200, forward 1.23 / 0.90 / 0.72 ms
# in `d` / `s` / `h` against 1.43 / 1.25 / 1.33 for the default tiles, adjoint 1.53 / 1.22 in
# `s` / `h` against 1.63 / 1.26 (`d` adjoints then: no gain); at Nd = 50 the default tiles were
# faster (docs/history.md, eleventh run).
PIPE_FEW_ROWS = 16
#
# Complex128 adjoints over few rows take a 16-row tile of 3 stages, whose 127 registers and 96 KB
# of shared memory fit 2 blocks per multiprocessor: 1.661 against 1.703 ms for the default on
# (100000, 10, 100), k = 16 (eighteenth run).
PIPE_FEW = {("c128", False): (1, 2, 1, 8, 4, 4), ("c64", False): (1, 2, 1, 8, 4, 2),
            ("c32h", False): (1, 2, 1, 8, 4, 2), ("c64", True): (1, 2, 1, 8, 4, 2),
            ("c32h", True): (1, 2, 1, 8, 4, 2), ("c128", True): (1, 2, 1, 8, 4, 3),
            ("c64dmma", False): (1, 2, 1, 8, 4, 3), ("c64dmma", True): (1, 2, 1, 8, 4, 3)}
PIPE_FEW_WAVES = 4
# The split-K count of a tensor-core launch minimises a model of its time,
#
#     T(S) = W(S) (a c(S) + w) + b (S > 1) S kb n_out Nf e / 1e6 + constant   (microseconds)
#
# S splits of c(S) reduction rows each (whole stages), W(S) = ceil(B S / P) rounds of blocks (B
# blocks per split, P resident on the device at once by shared memory, threads and registers),
# e bytes per partial sum. a: the time of one reduction row for a round of blocks; w: a round's
# fill and stores; b: a megabyte of partial sums, written by the launch and read by the split-K
# sum. (a, w, b) per (storage, adjoint), fitted by scripts/tune_sbgemv.py --k 16 --pipe-splits
# on an H200 over four sizes (docs/history.md, tenth run): within 6 % of the forward times
# of `s` and `h` swept, 16 % of those of `d` (whose times move with the power limit). Its
# choices were the fastest count timed or within 2 % of it; the old rule (a fixed number of
# rounds of an estimate of the block slots that left out the registers) took up to 44 % longer
# (`h`, (1000, 100, 1000): 0.440 against 0.306 ms). The complex128 fit predates its 16-row
# MMAs (eighteenth run) and was not refitted: on the four sizes its choices for the new default
# were the fastest of the split-K counts swept or within 1.5 % of them.
PIPE_SPLIT_MODEL = {
    ("c128", False): (0.1505, 0.0, 1.134), ("c128", True): (0.1495, 8.01, 0.297),
    ("c64", False): (0.2347, 0.0, 1.592), ("c64", True): (0.1616, 22.73, 0.0),
    ("c32h", False): (0.2424, 0.0, 2.105), ("c32h", True): (0.3584, 46.66, 0.0),
}
# Complex64 on DMMA takes the complex128 fit (the same MMAs per row): with its split-K counts
# each default tile was the fastest of that tile at the rounds swept (1, 2, 4, 8) or within 1 %
# of it (nineteenth run).
PIPE_SPLIT_MODEL[("c64dmma", False)] = PIPE_SPLIT_MODEL[("c128", False)]
PIPE_SPLIT_MODEL[("c64dmma", True)] = PIPE_SPLIT_MODEL[("c128", True)]
# The complex128 launches run slower per row in splits of many thousand rows than the model
# says (k = 16, Nd = 10: one round of 10000-row splits 1.52 ms, five of 2084 rows 1.43 ms), so
# their splits keep at most this many rows.
PIPE_MAX_SPLIT_ROWS = {"c128": 2048, "c64dmma": 2048}
_MMA_ROWS = 16  # rows of one MMA tile (m16 in every storage; the kernels' RPT)
MMA_MAX_KB = 16  # right-hand sides per tensor-core launch (the MMA's N = 2 x 16 real columns)
# The fewest right-hand sides a tensor-core launch takes, per (storage, adjoint): a launch costs
# about the same for any kb (it always computes 16 columns), so smaller batches go to the GEMV
# kernels where those are faster. Measured on (5000, 100, 1000), H200: at k = 8 tensor cores
# take 3.2 / 3.5 ms in `d` forward / adjoint against 4.9 / 3.7 ms (GEMV), at k = 4 and 8 in
# `h` forward 1.4 ms against 1.8-1.9, and at k = 8 adjoint 1.21 / 2.01 ms in `h` / `s` against
# 1.96 / 2.16 (docs/history.md, eleventh run).
#
# Adjoints take tensor cores at any Nd since the float32 accumulators are stored through shared
# memory like the complex128 ones (eleventh run): k = 16 on (20000, 50, 500) 1.80 / 2.65 ms in
# `h` / `s` against 3.59 / 3.72 on the GEMV kernels, and 1.14 / 1.32 against 1.44 / 1.48 on
# (100000, 10, 100).
#
# Complex128 takes tensor cores from 4 right-hand sides since its MMAs run over 16 rows. k = 4,
# eighteenth run: forward 2.26 / 0.48 / 0.66 ms on (5000, 100, 1000) / (1000, 100, 1000) /
# (100000, 10, 100) against 2.88 / 0.62 / 0.97 on the GEMV kernels; adjoint 2.21 / 0.48 / 2.61 /
# 1.92 on (5000, 100, 1000) / (1000, 100, 1000) / (20000, 50, 500) / (20000, 32, 500) against
# 3.22 / 0.68 / 3.45 / 2.28. Adjoints over fewer than MMA_FEW_RED reduction rows, whose k-steps
# are few and stores many, keep MMA_FEW_MIN_KB: k = 4 took 1.15 against 0.68 ms on
# (100000, 10, 100), 1.47 against 1.17 on (20000, 17, 500).
#
# Complex64 on DMMA (nineteenth run): forward k = 8 took 2.14 / 2.05 / 0.45 / 0.57 ms on
# (5000, 100, 1000) / (20000, 50, 500) / (1000, 100, 1000) / (100000, 10, 100) against 2.34 /
# 2.33 / 0.52 / 0.87 on the GEMV kernels, and k = 4 lost on three of them; adjoints at k = 8 were
# within 4 % of the GEMV kernels at Nd >= 50 and lost at Nd = 10 (0.90 against 0.83 ms), where
# k = 16 gains (1.41-1.49 against 1.84).
MMA_MIN_KB = {("c128", False): 4, ("c128", True): 4, ("c64", False): 16, ("c64", True): 8,
              ("c32h", False): 4, ("c32h", True): 8,
              ("c64dmma", False): 8, ("c64dmma", True): 8}
MMA_FEW_MIN_KB = {("c128", True): 8, ("c64dmma", True): 16}
MMA_FEW_RED = 32
# Forward launches over at most this many outputs (sensors) take tensor cores only from this many
# right-hand sides (None: never), in every storage: a tile's 16 rows are then mostly empty, and
# the GEMV kernels read the large vectors once per launch as fast. On an H200, the GEMV plan
# against the tensor cores, interleaved (twenty-fifth run; (200000, 1, 50), (100000, 2, 100),
# (30000, 3, 200), (100000, 4, 100)): k = 4 2.2-3.1x in `d` and 2.3-3.6x in `h` (`s` was on the
# GEMV kernels already), k = 8 1.6-2.2x in all three, k = 16 1.07-1.37x in `d`, 1.25-1.50x in
# `s`, 1.13-1.34x in `h`; at (100000, 8, 100), k = 4 1.35x / 1.55x in `d` / `h`, k = 8 0.99x /
# 1.06x / 1.18x in `d` / `s` / `h`. The same forward launches at k = 4 had taken 1.46-1.52x
# cuBLAS's time at Nd = 1 in `d` and `h`; on the GEMV kernels 0.41-0.49x. Over 5-7 sensors
# (twenty-sixth run, (100000, Nd, 100)) the tensor cores were the faster from 9: k = 9
# 1.24-1.33x / 1.15-1.20x / 1.03-1.04x in `d` / `s` / `h`, k = 16 1.38-1.40x / 1.14-1.17x /
# 1.21-1.25x.
MMA_FEW_OUT_MIN_KB = {4: None, 8: 9}
# Adjoint batches over few reduction rows (Nd <= XREG_MAX_ND) take the kernel that holds the
# input in registers and streams Khat through shared memory (hip_kernels/sbgemvx.cuh; NVIDIA
# sm_80 and newer), from XREG_MIN_KB right-hand sides per launch. On an H200 (twenty-fourth
# run), against the kernels the engine took before, interleaved: k = 8 1.19-1.83x as fast in
# `d`, 1.09-1.43x in `s` and 1.20-1.99x in `h` on (100000, 10, 100), (200000, 6, 50),
# (20000, 10, 500), (50000, 12, 60) and (30000, 3, 200); k = 16 1.15-1.30x, 1.22-1.80x and
# 1.05-1.38x but for (50000, 12, 60) `d` (0.99x) and (30000, 3, 200) `d` and `h` (0.93x,
# 0.90x); k = 4 0.72-1.02x in `d` and `s` (1.16x at Nd = 3), 0.92-1.30x in `h`; k = 2 0.36-0.82x
# (all with 32 rows per block: XREG_FEW_ROWS and XREG_MIN_KB below take the few-sensor and
# small-batch cases that later measurements favoured).
# Per storage, the frequencies a block takes (FW) -> (right-hand sides per thread, rows per
# stage, stages); keep in sync with hip_kernels/fftmatvec_kernels.cu. A launch takes the FW that
# wastes the fewest threads past Nf, the larger on a tie: in the prototype, Nf = 51 (two
# blocks of 32 or four of 16 frequencies) took 1.14 ms with FW = 32 against 1.49 with 16
# (complex128, k = 16, (200000, 6, 50)), Nf = 101 1.33 ms with 16 against 1.52 with 32.
XREG_ND = (4, 8, 10, 12)
XREG_MAX_ND = max(XREG_ND)
XREG_TILES = {"c128": {16: (2, 2, 6), 32: (2, 2, 4)},
              "c64": {32: (4, 2, 4), 64: (4, 2, 4)},
              "c32h": {32: (4, 2, 4), 64: (4, 2, 4)}}
XREG_ROWS = 32  # output rows per block (more where the grid's 65535 rows of blocks need them)
# ... except, per (storage, compiled sensor count, FW), where fewer rows per block measured
# faster: over at most 4 sensors, and complex128 over at most 8 in its 128-thread blocks
# (FW = 16). On an H200, adjoints at k = 16 / 8 against 32 rows, interleaved (twenty-fifth run):
# complex128 at 4 rows 1.26-1.32x on (100000, 1, 100), (200000, 2, 50), (30000, 3, 200),
# (100000, 4, 100), at 8 rows 1.18-1.26x / 0.99-1.27x on (100000, Nd, 100), Nd = 5-8;
# complex64 and float16 at 4 rows 1.24-1.29x on (30000, 3, 200) and (60000, 2, 200) (FW = 32),
# at 8 rows 0.99-1.34x on (100000, Nd, 100), Nd = 1, 3, 4, (200000, 2, 50) and (200000, 4, 50)
# (FW = 64). Elsewhere fewer rows lost: complex128 with FW = 32 at Nd = 5-8 (0.85-0.98x at
# 8-16 rows), every storage at Nd = 10-12 and complex64 and float16 at Nd = 5-12 (0.82-0.99x),
# where 64 rows gained 1-3 % at k = 16 and lost up to 7 % at k = 8.
XREG_FEW_ROWS = {("c128", 4, 16): 4, ("c128", 4, 32): 4, ("c128", 8, 16): 8,
                 ("c64", 4, 32): 4, ("c64", 4, 64): 8, ("c32h", 4, 32): 4, ("c32h", 4, 64): 8}
# The launches keep the driver's default shared-memory carveout up to the 48 KB that need no
# opt-in (the package's opt-in asks for the largest): on (100000, 10, 100), k = 16, 1.34-1.40 ms
# against 1.40-1.45 in complex128 and 0.90-0.91 against 0.93 in complex64. 128 rows per block
# instead of 32 took 1.90 ms in complex128 there, and 0.87 in complex64, but 0.59 against 0.47
# at Nd = 3 (twenty-fourth run).
XREG_MAX_SMEM = 48 * 1024
# From XREG_MIN_KB right-hand sides a launch, but for launches of exactly XREG_GEMV_KB over more
# than 4 sensors (the n8-n12 kernels), which one launch of the GEMV kernels' 4-wide tile serves
# faster. On an H200, against the GEMV plan of each k, interleaved, with XREG_FEW_ROWS
# (twenty-fifth run; (100000, Nd, 100) for Nd = 2, 6, 8, 10, (30000, 3, 200), (200000, 4, 50)):
# k = 3 (GEMV 2 + 1) 0.98-1.43x in `d` (the 0.98x at Nd = 10), 1.03-1.56x in `s`, 1.06-1.42x
# in `h`; k = 5 and 7 (4 + 1, 4 + 2 + 1) 1.07-1.42x and 1.37-1.83x in `d`, 1.07-1.46x and
# 1.42-1.83x in `s`, 0.97-1.39x and 1.29-1.68x in `h`; k = 6 1.07-1.54x everywhere; k = 4
# 1.00-1.69x over at most 4 sensors, and at Nd = 6-10 0.75-0.90x in `d`, 0.84-1.03x in `s`,
# 1.17-1.32x in `h`; k = 2 0.36-0.98x everywhere.
XREG_MIN_KB = {"c128": 3, "c64": 3, "c32h": 3}
XREG_GEMV_KB = {"c128": 4, "c64": 4}
# Frequency padding of the stored Khat, so that V-wide loads are aligned.
PAD = {"c128": 2, "c64": 4, "c32h": 8}
_ELEM_BYTES = {"c128": 16, "c64": 8, "c32h": 4}
# Frequencies per block of the stored Khat, per storage, or None for one block: Khat is then
# [f / B][Nd][Nm][f % B] instead of (Nd, Nm, Nfp) (hip_kernels/common.cuh: khat_foff), so that a
# block of the one-vector kernels, whose tiles span B frequencies, reads each of its rows as one
# run down the reduction instead of runs of B frequencies a row of Khat apart. A power of two and
# a multiple of 16 bytes of elements; products with at most B padded frequencies keep one block.
# From the layouts timed side by side on an H200 (docs/history.md, seventeenth run).
KHAT_BLOCK = {"c128": 64, "c64": 64, "c32h": 128}
# The blocks are whole, so the last one may hold frequencies past Nfp that are never read; where
# those would add more than this fraction to Khat's memory (few frequencies: Nf = 101 in blocks
# of 64 would take 128), Khat keeps one block.
KHAT_MAX_WASTE = 1 / 16
_ONE_BLOCK_SHIFT = 62  # khat_foff's shift for one block (common.cuh: KHAT_ONE_BLOCK)
_BATCH_SIZES = (16, 8, 4, 2, 1)
_PER_THREAD_STREAM = 2  # cudaStreamPerThread: one handle, a different stream in each thread
REDUCE_LANES = 8  # the split-K reduction's largest blockDim.y (hip_kernels/sbgemv.cuh)
# The split-K sum of at most REDUCE_SERIAL_MAX_SPLITS splits over at least
# REDUCE_SERIAL_MIN_OUTPUTS outputs a multiprocessor runs with one thread per output
# (``reduce_serial_*``, blocks of REDUCE_SERIAL_THREADS); others with lanes of threads
# sharing an output's splits (``reduce_*``), which skinny products need. On an H200 the serial
# sum was 1.2-2.1x as fast over 200 000-400 400 outputs and 4-16 splits, as fast within the
# noise of launches of 5-8 µs below that, and slower past 24 splits in complex64
# (a probe git history keeps; docs/history.md, twenty-eighth run).
REDUCE_SERIAL_MAX_SPLITS = 16
REDUCE_SERIAL_MIN_OUTPUTS = 256
REDUCE_SERIAL_THREADS = 256
# A fused product whose stage 3 is one launch of at most FOLD_MAX_SPLITS splits, and whose
# inverse FFT is a cuFFT plan with callbacks, adds the splits in that FFT's load callback
# (hip_kernels/fft_callbacks.cu: FMV_SPLIT_LOAD) instead of a sum kernel of their own: one
# launch fewer, and the sums are never written. 0 turns it off. On an H200, interleaved with the
# sum kernel (a probe git history keeps; docs/history.md, twenty-ninth run), the `ddddd`
# forwards of 2, 3 and 6 splits ((1000 | 1500 | 5000, 100, 1000)) took 0.8-3.0 µs less, waited
# for or back to back, with the same outputs to the bit; the `sssss` forwards of 11 splits took
# 3.9-7.4 µs more, and the `ddddd` one of 14 ((1000, 40, 1000)) 1.9-2.7 more: past 8 splits the
# callback takes a second round of loads in the inverse FFT's latency-bound kernel.
FOLD_MAX_SPLITS = 8


# The FFT precisions whose fused products take the package's own row FFT kernels by default
# where cuFFT has callbacks too (KernelEngine.row_ffts). On an H200, at 5000 rows or more of
# L = 2000, 1000 and 200, they ran float64 transforms 1.15-1.98x as fast as cuFFT with callbacks
# and float32 ones 1.07-1.58x (docs/history.md, twenty-second run; scripts/bench_row_fft.py).
# Where cuFFT has no callbacks (ROCm) they take every precision: the alternative is the stages
# one by one.
ROW_FFT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
# ... for transforms whose blocks fill at least this many rounds of the multiprocessors: with
# fewer, a block's latency through its passes is the transform's time, and cuFFT with callbacks
# was faster. On an H200 with L = 2000 (twenty-second run): 100 and 200 rows in float64 (100
# and 200 blocks) took 0.84-0.96x cuFFT's speed, 500 rows (500 blocks, 3.8 rounds) 1.02-1.08x;
# in float32, 500 rows (250 blocks) 0.88-0.94x, 1000 rows (500 blocks) 1.02-1.05x.
ROW_FFT_MIN_BLOCKS_PER_SM = 3
# Stages 3-5 of a one-vector adjoint as one kernel (hip_kernels/fused.cuh: its sums never go
# through memory, the stage-3 output the inverse FFT would read back). By default for complex128
# and complex64 storage with at most FUSED_MAX_ND sensors and FUSED_THREADS frequencies, where
# the row FFT kernels take the inverse transform (KernelEngine.fused_adjoint). On an H200 it made
# the adjoint of (100000, 10, 100) 1.18-1.20x as fast in `ddddd` and 1.04x in `sssss`; with
# float16 storage it was 0.97-0.98x the stages apart, and is not built for it
# (docs/history.md, twenty-third run).
FUSED_ND = (4, 8, 10, 12)  # the sensors its kernels hold (fftmatvec_kernels.cu): the smallest
# that holds Nd, whose loads are then all in use (on (100000, 10, 100), 0.454 ms with 10, 0.494
# with 12)
FUSED_MAX_ND = max(FUSED_ND)
FUSED_THREADS = 128  # hip_kernels/fused.cuh: FUSED_MAX_THREADS (one thread per frequency)
FUSED_STORES = ("c128", "c64")
# ... where its blocks fill at least this many per multiprocessor, per storage. Interleaved with
# the stages apart on an H200 (twenty-fourth run), every complex128 adjoint took it, from 40
# blocks to 10000: (1000, 6, 40) 0.85x the time, (2000, 10, 100) 0.94x, (3000, 4, 100) 0.81x,
# (20000, 6, 40) 0.92x, (15000, 12, 100) 0.89x, (100000, 10, 100) 0.83-0.85x (twenty-third).
# complex64 ones gained at 20 or more blocks per multiprocessor ((60000, 8, 100) 0.93x,
# (100000, 10, 100) 0.96x) and went either way below: 0.84-1.02x at Nd <= 8, 0.90-1.09x with
# 10 sensors, 1.00-1.16x with 12 ((4000, 12, 100) 1.16x, (15000, 12, 100) 1.06x).
FUSED_MIN_BLOCKS_PER_SM = {"c128": 0, "c64": 16}
# Its inverse FFT's largest radix: 10 in every precision (the kernel's registers are set by its
# sums, not its butterflies). On (100000, 10, 100) radix 10 (10 x 10) took 0.494 ms where radices
# up to 8 (5 x 5 x 4) took 0.508 (twenty-third run).
FUSED_MAX_RADIX = 10
# The kernel keeps the driver's default shared-memory carveout: its blocks take at most
# ~34 KB (default_rows_per_block), within the 48 KB that needs no opt-in, and the L1 the
# largest carveout leaves them made the same product 0.554 ms instead of 0.494.
FUSED_MAX_SMEM = 48 * 1024


# Products whose Khat is smaller than GRAPH_MAX_KHAT_BYTES replay a captured CUDA graph
# (launch-bound sizes); so do those with Khat up to GRAPH_MEDIUM_KHAT_BYTES whose input and output
# vectors total at most GRAPH_MAX_VECTOR_BYTES: their GPU time (under a millisecond) is short
# enough for the host's launches to show, and copying the vectors in and out of the graph's
# buffers costs a few microseconds. On an H200, (1000, 100, 1000) ran 10-15 % faster as a graph;
# (5000, 100, 1000) `ddhdd` and (100000, 10, 100), whose vectors are 40-80 MB, did not
# (docs/history.md, fifth run). That was against the stages run one by one: the fused
# product (three launches, its arguments packed) beat the graph in 23 of 24 cases measured,
# so by default a graph serves only the products that run stage by stage (fourteenth run).
GRAPH_MAX_KHAT_BYTES = 64 * 2**20
GRAPH_MEDIUM_KHAT_BYTES = 2 * 2**30
GRAPH_MAX_VECTOR_BYTES = 16 * 2**20
# A fused product holds its intermediate arrays (forward FFT's output, stage 3's output and
# split-K workspace) from one call to the next, per stream, when together they take at most
# HOLD_MAX_BYTES or 1/HOLD_KHAT_FRACTION of Khat's bytes: taking them from CuPy's pool at every
# call put 10-20 us of host time before the first kernel of a synchronised product
# (docs/history.md, fifteenth run). At most HOLD_STREAMS streams' sets are kept.
HOLD_MAX_BYTES = 64 * 2**20
HOLD_KHAT_FRACTION = 4
HOLD_STREAMS = 4
