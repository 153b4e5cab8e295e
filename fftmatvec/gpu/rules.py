"""The measured rules of the GPU path: tiles compiled in ``hip_kernels/``, and the thresholds
that choose between kernels (docs/gpu.md and docs/benchmarks.md hold the measurements; the
comments here say what each constant means). :class:`Rules` gathers the thresholds of one
architecture (:func:`rules_for`), which the planner (:mod:`fftmatvec.gpu.planner`) reads; a
plan override (:mod:`fftmatvec.gpu.plan`) sets a choice aside."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Mapping

import numpy as np

from .._errors import FFTMatvecValueError

__all__ = ["Rules", "rules_for", "ASYNC_DEFAULTS", "ASYNC_FEW", "ASYNC_FEW_ROWS",
           "ASYNC_FILL_ALT", "ASYNC_MIN_FILL", "ASYNC_MIN_RED",
           "ASYNC_MIN_RED_C64_INPUT", "ASYNC_SPLIT_ROWS", "ASYNC_TILES",
           "DMMA_C64_ARCHS", "FOLD_MAX_SPLITS", "FUSED_MAX_ND", "FUSED_MAX_RADIX",
           "FUSED_MAX_SMEM", "FUSED_MIN_BLOCKS_PER_SM", "FUSED_ND", "FUSED_STORES",
           "FUSED_THREADS", "GRAPH_MAX_KHAT_BYTES", "GRAPH_MAX_VECTOR_BYTES",
           "GRAPH_MEDIUM_KHAT_BYTES", "HOLD_KHAT_FRACTION", "HOLD_MAX_BYTES",
           "HOLD_STREAMS", "KHAT_BLOCK", "KHAT_MAX_WASTE", "MMA_FEW_MIN_KB",
           "MMA_FEW_OUT_MIN_KB", "MMA_FEW_RED", "MMA_MAX_KB", "MMA_MIN_KB", "PAD",
           "PIPE_DEFAULTS", "PIPE_FEW", "PIPE_FEW_ROWS", "PIPE_FEW_WAVES",
           "PIPE_MAX_SPLIT_ROWS", "PIPE_SPLIT_MODEL", "PIPE_TILES", "REDUCE_LANES",
           "REDUCE_SERIAL_MAX_SPLITS", "REDUCE_SERIAL_MIN_OUTPUTS",
           "REDUCE_SERIAL_THREADS", "ROW_FFT_DTYPES", "ROW_FFT_MIN_BLOCKS_PER_SM",
           "STAGED_TILES", "TILES", "WIDE_DEFAULTS", "WIDE_MIN_BLOCKS_PER_SM",
           "WIDE_MIN_FILL", "WIDE_TILES", "XREG_FEW_ROWS", "XREG_GEMV_KB",
           "XREG_MAX_ND", "XREG_MAX_SMEM", "XREG_MIN_KB", "XREG_ND", "XREG_ROWS",
           "XREG_TILES"]

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
# block, split-K target in blocks per multiprocessor); see LaunchBuilders._wide_default.
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
# cuFFT has callbacks too (Planner.row_ffts). Where cuFFT has no callbacks (ROCm) they take
# every precision: the alternative is the stages one by one. Measurements: docs/gpu.md.
ROW_FFT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
# ... for transforms whose blocks fill at least this many rounds of the multiprocessors: with
# fewer, a block's latency through its passes is the transform's time, and cuFFT with callbacks
# was faster. Measurements: docs/gpu.md.
ROW_FFT_MIN_BLOCKS_PER_SM = 3
# Stages 3-5 of a one-vector adjoint as one kernel (hip_kernels/fused.cuh: its sums never go
# through memory, the stage-3 output the inverse FFT would read back). By default for complex128
# and complex64 storage with at most FUSED_MAX_ND sensors and FUSED_THREADS frequencies, where the
# row FFT kernels take the inverse transform (Planner.fused_adjoint_takes). Measurements:
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
# The split-K targets of stage 3's launches, which a tuning sweep (scripts/tune_sbgemv.py) sets
# through the rules it plans with: GEMV_BLOCKS_PER_SM thread blocks of 128 threads per
# multiprocessor for the GEMV kernels; STAGED_THREADS_PER_SM threads per multiprocessor for the
# staged kernel (None: 2048 for complex64 storage, 1024 for the others); ASYNC_WAVES rounds of
# the block slots for the cp.async kernel (None: its tile's default); PIPE_WAVES rounds of the
# resident blocks for the tensor-core kernel (None: the split model, or PIPE_FEW_WAVES for its
# few-row tile); PIPE_SPLITS a split-K count for it (None: chosen); PIPE_FREQ_MAJOR its block
# order (None: chosen). 0 rounds or blocks: no split-K.
GEMV_BLOCKS_PER_SM = 8
STAGED_THREADS_PER_SM = None
ASYNC_WAVES = None
PIPE_WAVES = None
PIPE_SPLITS = None
PIPE_FREQ_MAJOR = None
# At most HOLD_STREAMS streams' sets are kept. Measurements: docs/gpu.md.
HOLD_MAX_BYTES = 64 * 2**20
HOLD_KHAT_FRACTION = 4
HOLD_STREAMS = 4


_RULE_NAMES = ("WIDE_DEFAULTS", "WIDE_MIN_FILL", "WIDE_MIN_BLOCKS_PER_SM", "ASYNC_MIN_RED",
               "ASYNC_MIN_RED_C64_INPUT", "ASYNC_FEW_ROWS", "ASYNC_DEFAULTS", "ASYNC_FILL_ALT",
               "ASYNC_SPLIT_ROWS", "ASYNC_MIN_FILL", "ASYNC_FEW", "PIPE_DEFAULTS", "PIPE_FEW_ROWS",
               "PIPE_FEW", "PIPE_FEW_WAVES", "PIPE_SPLIT_MODEL", "PIPE_MAX_SPLIT_ROWS",
               "MMA_MIN_KB", "MMA_FEW_MIN_KB", "MMA_FEW_RED", "MMA_FEW_OUT_MIN_KB", "XREG_ROWS",
               "XREG_FEW_ROWS", "XREG_MIN_KB", "XREG_GEMV_KB", "REDUCE_SERIAL_MAX_SPLITS",
               "REDUCE_SERIAL_MIN_OUTPUTS", "FOLD_MAX_SPLITS", "ROW_FFT_DTYPES",
               "ROW_FFT_MIN_BLOCKS_PER_SM", "FUSED_MIN_BLOCKS_PER_SM", "GRAPH_MAX_KHAT_BYTES",
               "GRAPH_MEDIUM_KHAT_BYTES", "GRAPH_MAX_VECTOR_BYTES", "GEMV_BLOCKS_PER_SM",
               "STAGED_THREADS_PER_SM", "ASYNC_WAVES", "PIPE_WAVES", "PIPE_SPLITS",
               "PIPE_FREQ_MAJOR")


def _frozen(value):
    """A read-only view of a table (a dict), other values as they are."""
    return MappingProxyType(dict(value)) if isinstance(value, dict) else value


@dataclass(frozen=True)
class Rules:
    """The thresholds that choose between the kernels on one architecture, one field per
    constant of this module of the same name in capitals (``mma_min_kb`` is
    :data:`MMA_MIN_KB`): :func:`rules_for` makes them, a tuning table may override fields
    (:meth:`with_table`). ``dmma_c64``: complex64 storage runs its tensor-core kernels on FP64
    MMAs (:data:`DMMA_C64_ARCHS`)."""

    arch: str
    dmma_c64: bool
    wide_defaults: Mapping
    wide_min_fill: float
    wide_min_blocks_per_sm: int
    async_min_red: Mapping
    async_min_red_c64_input: Mapping
    async_few_rows: int
    async_defaults: Mapping
    async_fill_alt: Mapping
    async_split_rows: Mapping
    async_min_fill: float
    async_few: Mapping
    pipe_defaults: Mapping
    pipe_few_rows: int
    pipe_few: Mapping
    pipe_few_waves: int
    pipe_split_model: Mapping
    pipe_max_split_rows: Mapping
    mma_min_kb: Mapping
    mma_few_min_kb: Mapping
    mma_few_red: int
    mma_few_out_min_kb: Mapping
    xreg_rows: int
    xreg_few_rows: Mapping
    xreg_min_kb: Mapping
    xreg_gemv_kb: Mapping
    reduce_serial_max_splits: int
    reduce_serial_min_outputs: int
    fold_max_splits: int
    row_fft_dtypes: tuple
    row_fft_min_blocks_per_sm: int
    fused_min_blocks_per_sm: Mapping
    graph_max_khat_bytes: int
    graph_medium_khat_bytes: int
    graph_max_vector_bytes: int
    gemv_blocks_per_sm: int
    staged_threads_per_sm: int | None
    async_waves: int | None
    pipe_waves: int | None
    pipe_splits: int | None
    pipe_freq_major: bool | None

    def with_table(self, table: Mapping) -> "Rules":
        """These rules with the fields of ``table`` (``{field: value}``, a tuning table's rules)
        in place of their own; an unknown field is an error that names it."""
        if not isinstance(table, Mapping):
            raise FFTMatvecValueError(f"a table of rules must be a mapping, got "
                                      f"{type(table).__name__}")
        unknown = sorted(set(table) - {f.name for f in fields(self)} - {"arch"})
        if unknown:
            raise FFTMatvecValueError(f"unknown rules {', '.join(map(repr, unknown))}; the rules "
                                      f"are {', '.join(f.name for f in fields(self)[1:])}")
        return replace(self, **{k: _frozen(v) for k, v in table.items()})


def rules_for(arch: str, table: Mapping | None = None) -> Rules:
    """The :class:`Rules` of architecture ``arch`` (``sm_90``, ``gfx90a``), from this module's
    constants as they are at the call, with the fields of ``table`` in place of theirs."""
    values = {name.lower(): _frozen(globals()[name]) for name in _RULE_NAMES}
    rules = Rules(arch=str(arch), dmma_c64=arch in DMMA_C64_ARCHS, **values)
    return rules if not table else rules.with_table(table)
