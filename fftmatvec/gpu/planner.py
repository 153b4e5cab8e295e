"""Every choice of the GPU path, in one place: :class:`Planner`, whose methods decide, for a
problem on a described device, from the rules (:class:`~fftmatvec.gpu.rules.Rules`) and the plan
overrides (``resolved``, :class:`~fftmatvec.gpu.overrides.Overrides`), which kernels a product runs;
:func:`fftmatvec.gpu.planning.make_plan` gathers them into a
:class:`~fftmatvec.gpu.plan.Plan`. The other modules of this package launch what these methods
chose. The ``fftmatvec info`` lines of the rules are here too."""

from __future__ import annotations

import numpy as np

from .. import kernels
from .._errors import FFTMatvecValueError
from ..precision import PrecisionConfig
from . import rowfft as _rowfft
from .ffts import _row_blocks, xhat_dtype, yhat_dtype
from .fused import _GemvIrfft
from .overrides import Overrides
from .plan import unavailable
from .rules import (DMMA_C64_ARCHS, FUSED_MAX_ND, FUSED_MIN_BLOCKS_PER_SM, FUSED_STORES,
                    FUSED_THREADS, MMA_FEW_OUT_MIN_KB, MMA_MAX_KB, ROW_FFT_DTYPES,
                    XREG_GEMV_KB, XREG_MAX_ND, XREG_MIN_KB, XREG_ND, XREG_TILES, _BATCH_SIZES,
                    _STAGED_J)
from .launches import _Launch


def _c64_on_dmma(arch: str, overrides: Overrides) -> bool:
    """Whether complex64 batches run on FP64 tensor cores on a GPU of ``arch``
    (:data:`DMMA_C64_ARCHS`, ``dmma_c64``)."""
    mode = overrides.get("dmma_c64")
    return arch in DMMA_C64_ARCHS if mode == "auto" else mode == "1"


def batch_kernels(arch: str | None, overrides: Overrides | None = None) -> str:
    """How stage 3 runs batches of right-hand sides on a GPU of ``arch`` (``sm_90``,
    ``gfx90a``; None: no GPU) under ``overrides`` (none by default), as ``fftmatvec info``
    prints it."""
    overrides = Overrides() if overrides is None else overrides
    if not arch:
        return "no GPU"
    if not kernels.mma_options(arch):  # the build defines the tensor-core kernels from sm_80
        return "GEMV kernels (the tensor-core ones need NVIDIA sm_80 or newer)"
    mode = overrides.get("mma")
    if mode == "0":
        return "GEMV kernels (mma=0)"
    few = ", ".join(f"over at most {rows} sensors " + ("never" if kb is None else f"from {kb}")
                    for rows, kb in sorted(MMA_FEW_OUT_MIN_KB.items()))
    which = ("every launch (mma=1)" if mode == "1"
             else f"batches of 4 to 16 right-hand sides or more (forward {few}), by storage "
                  "and direction")
    s = "DMMA" if _c64_on_dmma(arch, overrides) else "3xTF32"
    line = f"tensor cores for {which}: d DMMA, s {s}, h TF32"
    xreg = overrides.get("xreg")
    if xreg == "0":
        return line + "; adjoints with the input in registers off (xreg=0)"
    sides = ("every launch (xreg=1)" if xreg == "1" else
             "from " + ", ".join(f"{s} {n}" for s, n in XREG_MIN_KB.items())
             + " right-hand sides (" + ", ".join(f"{s} {n}" for s, n in XREG_GEMV_KB.items())
             + f" over more than {XREG_ND[0]} sensors on the GEMV kernels)")
    return (line + f"; adjoints over at most {XREG_MAX_ND} sensors with the input in "
            f"registers, {sides}")


def row_fft_line(gpu: bool, smem_per_block: int | None = None,
                 overrides: Overrides | None = None) -> str:
    """How the fused products run their FFTs under ``overrides`` (none by default), as
    ``fftmatvec info`` prints it; with the device's shared memory per block, the longest
    lengths the kernels take there."""
    mode = (Overrides() if overrides is None else overrides).get("row_fft")
    if not gpu:
        return "no GPU"
    if mode == "0":
        return "off (row_fft=0): cuFFT with callbacks where it has them"
    which = ("any precision" if mode == "1" else
             ", ".join(d.name for d in ROW_FFT_DTYPES) + " (any where cuFFT has no callbacks)")
    longest = "" if smem_per_block is None else (
        f" (here up to L = {_rowfft.longest_length(np.float64, smem_per_block)} in float64, "
        f"{_rowfft.longest_length(np.float32, smem_per_block)} in float32)")
    return (f"stages 1+2 and 4+5 as the package's own FFT kernels, 5-smooth lengths{longest}, "
            f"{which}; cuFFT with callbacks otherwise")


def fused_adjoint_line(gpu: bool, overrides: Overrides | None = None) -> str:
    """When stages 3-5 of an adjoint run as one kernel under ``overrides`` (none by default),
    as ``fftmatvec info`` prints it."""
    mode = (Overrides() if overrides is None else overrides).get("fused_adjoint")
    if not gpu:
        return "no GPU"
    if mode == "0":
        return "off (fused_adjoint=0)"
    return (f"stages 3-5 of one-vector adjoints as one kernel: {', '.join(FUSED_STORES)} storage, "
            f"Nd <= {FUSED_MAX_ND}, Nf <= {FUSED_THREADS}, inverse FFT on the row FFT kernels, "
            "blocks per multiprocessor: "
            + ", ".join(f"{s} {n}+" for s, n in FUSED_MIN_BLOCKS_PER_SM.items()))


class Planner:
    """The choices of a product (:func:`fftmatvec.gpu.planning.make_plan` asks them):
    ``problem`` (:class:`~fftmatvec.gpu.planning.Problem`: its shape and storage) on
    ``device`` (:class:`~fftmatvec.gpu.planning.DeviceInfo`: multiprocessors, shared memory,
    callbacks, the code object) under ``rules`` (:class:`~fftmatvec.gpu.rules.Rules`) and the
    plan overrides (``overrides``: :class:`~fftmatvec.gpu.overrides.Overrides`, resolved
    once). Stage 3's launches are those it chooses of ``builders``
    (:class:`~fftmatvec.gpu.launches.LaunchBuilders` of the same problem, device, rules and
    overrides). Nothing is compiled, allocated or launched."""

    def __init__(self, problem, device, rules, overrides, builders):
        prec = PrecisionConfig(problem.precision)
        self.prec, self.store = prec, builders.store
        self.nd, self.nm, self.nt = problem.nd, problem.nm, problem.nt
        self.fft_len, self.nf = problem.fft_len, problem.nf
        self.compute = builders.compute
        # bytes of the stored Khat (row scales included): the graph rules read it
        self.nbytes = int(builders.data.itemsize * problem.nd * problem.nm * problem.nf
                          + (4 * problem.nd * problem.nf if self.store == "c32h" else 0))
        self.device, self.rules, self.resolved = device, rules, overrides
        self.builders = builders
        self.arch, self.num_sms = device.arch, device.multiprocessors
        self.smem_per_block = device.smem_per_block
        self._callbacks, self._sm80 = tuple(device.callbacks), device.mma_kernels
        self._plans, self._row_ffts = {}, {}

    @property
    def hip(self) -> bool:
        """Whether the device is an AMD GPU (ROCm)."""
        return self.device.vendor == "amd"

    def has_kernel(self, name: str) -> bool:
        """Whether the device's code object has the entry point ``name``."""
        return self.device.code.has(name)

    def xhat_dtype(self, prec: PrecisionConfig) -> np.dtype:
        """:func:`~fftmatvec.gpu.ffts.xhat_dtype` of the product's compute dtype."""
        return xhat_dtype(self.compute, prec)

    def yhat_dtype(self, prec: PrecisionConfig) -> np.dtype:
        """:func:`~fftmatvec.gpu.ffts.yhat_dtype` of the product's compute dtype."""
        return yhat_dtype(self.compute, prec)

    def _plan(self, adjoint: bool, k: int, in_dtype, out_dtype) -> list[_Launch]:
        key = (adjoint, k, np.dtype(in_dtype), np.dtype(out_dtype))
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        n_out, n_red = (self.nm, self.nd) if adjoint else (self.nd, self.nm)
        plan = []
        remaining = k
        mma_min = self._mma_min_kb(adjoint, n_red, n_out)
        tile, _ = self.builders._pipe_tile(n_out, n_red, adjoint)
        if mma_min is not None and self.builders.pipe_smem(tile, in_dtype) > self.smem_per_block:
            mma_min = None  # a device with less shared memory per block than the tile needs
        xreg_min = self._xreg_min_kb(adjoint, n_red, in_dtype, out_dtype)
        while xreg_min is not None and remaining >= xreg_min and self._xreg_takes(remaining):
            kb = min(remaining, MMA_MAX_KB)
            remaining -= kb
            plan.append(self.builders._launch_xreg(kb, in_dtype, out_dtype))
        while mma_min is not None and remaining >= mma_min:
            kb = min(remaining, MMA_MAX_KB)
            remaining -= kb
            plan.append(self.builders._launch_pipe(kb, n_out, n_red, in_dtype, out_dtype, adjoint=adjoint))
        for kb in _BATCH_SIZES:
            while remaining >= kb:
                remaining -= kb
                plan.append(self._launch(kb, n_out, n_red, in_dtype, out_dtype, adjoint=adjoint))
        self._plans[key] = plan
        return plan


    def _launch(self, kb, n_out, n_red, in_dtype, out_dtype, adjoint=False) -> _Launch:
        """The launch of ``kb`` right-hand sides (past the tensor-core and input-in-registers
        kernels' share): the cp.async kernel (:meth:`_use_async`), the staged one
        (:meth:`_use_staged`), else the GEMV kernels at their default tile."""
        b = self.builders
        if self._use_async(kb, n_out, n_red, adjoint, in_dtype):
            return b._launch_async(n_out, n_red, in_dtype, out_dtype, adjoint=adjoint)
        if self._use_staged(kb, n_red, adjoint):
            return b._launch_staged(n_out, n_red, in_dtype, out_dtype)
        return b._launch_gemv(kb, n_out, n_red, in_dtype, out_dtype, adjoint=adjoint)


    def _mma_min_kb(self, adjoint: bool = False, n_red: int | None = None,
                    n_out: int | None = None) -> int | None:
        """The fewest right-hand sides a tensor-core launch takes, or None when that kernel is
        not used. It exists on NVIDIA sm_80 and newer and by default serves launches of at least
        ``MMA_MIN_KB`` right-hand sides in either direction (``MMA_FEW_MIN_KB`` over fewer
        than ``MMA_FEW_RED`` reduction rows ``n_red``; forward over few outputs ``n_out``, at
        least ``MMA_FEW_OUT_MIN_KB``). ``mma=0`` never uses it, ``=1`` uses it for
        every launch, both directions, down to one right-hand side."""
        mode = self.resolved.get("mma")
        if mode == "0":
            return None
        if not self._sm80_kernels():
            if mode == "1":
                raise FFTMatvecValueError(
                    "mma=1, but this device has no tensor-core kernels "
                    "(NVIDIA sm_80 or newer)")
            return None
        if mode == "1":
            return 1
        key = (self.builders.pipe_store, bool(adjoint))
        least = self.rules.mma_min_kb[key]
        if n_red is not None and n_red < self.rules.mma_few_red and key in self.rules.mma_few_min_kb:
            least = self.rules.mma_few_min_kb[key]
        if not adjoint and n_out is not None:
            holds = [rows for rows in self.rules.mma_few_out_min_kb if n_out <= rows]
            if holds:  # forward over few outputs: the smallest cap that holds n_out
                from_kb = self.rules.mma_few_out_min_kb[min(holds)]
                return None if from_kb is None else max(least, from_kb)
        return least


    def _xreg_min_kb(self, adjoint: bool, n_red: int, in_dtype, out_dtype) -> int | None:
        """The fewest right-hand sides an input-in-registers launch takes (an adjoint over at
        most :data:`XREG_MAX_ND` reduction rows ``n_red``), or None where that kernel is not
        used: by default from :data:`XREG_MIN_KB`. ``xreg=0`` never uses it; ``=1``
        uses it for every adjoint launch, and is an error that says why where it cannot."""
        mode = self.resolved.get("xreg")
        if mode == "0" or not adjoint:
            return None
        why = None
        if self.store not in XREG_TILES:
            why = f"{self.store} storage"
        elif n_red > XREG_MAX_ND:
            why = f"{n_red} reduction rows (it takes at most {XREG_MAX_ND})"
        elif not self._sm80_kernels():
            why = "this device has none (NVIDIA sm_80 or newer)"
        else:
            name = self.builders._xreg_name(self.builders._xreg_fw(), in_dtype, out_dtype)
            if not self.has_kernel(name):
                why = f"the code object has no {name}"
        if unavailable("xreg", mode, "the adjoint kernel with its input in registers "
                        "cannot take this product", why):
            return None
        return 1 if mode == "1" else self.rules.xreg_min_kb[self.store]


    def _xreg_takes(self, kb: int) -> bool:
        """Whether a launch of ``kb`` right-hand sides (past the kernel's minimum) goes to the
        input-in-registers kernel: all of them with ``xreg=1``, else all but the
        batches of :data:`XREG_GEMV_KB` over more than the fewest sensors compiled."""
        return (kb != self.rules.xreg_gemv_kb.get(self.store) or self.nd <= XREG_ND[0]
                or self.resolved.get("xreg") == "1")


    def _use_staged(self, kb: int, n_red: int, adjoint: bool) -> bool:
        """Whether one right-hand side goes through the staged kernel. From the sweeps of
        scripts/tune_sbgemv.py: for `s` forward and `h` both
        ways, where the vector entries per byte of `Khat` are many; `d` streams as fast
        unstaged. Adjoints with less than one chunk of reduction rows stay unstaged.
        ``staged=0`` / ``=1`` never / always stages."""
        if kb != 1:
            return False
        mode = self.resolved.get("staged")
        if mode != "auto":
            return mode == "1"
        if self.store == "c32h":
            return (not adjoint) or n_red >= _STAGED_J
        return self.store == "c64" and not adjoint


    def _use_async(self, kb: int, n_out: int, n_red: int, adjoint: bool, in_dtype) -> bool:
        """Whether one right-hand side goes through the kernel that streams Khat through shared
        memory with cp.async (NVIDIA sm_80 and newer): by default for forward products with
        few outputs, and where ``ASYNC_MIN_RED`` says it is the fastest. ``async=0``
        never uses it, ``=1`` always (an error where the device has none)."""
        if kb != 1:
            return False
        mode = self.resolved.get("async")
        if mode == "0":
            return False
        if mode == "auto" and (adjoint or n_out > self.rules.async_few_rows):
            table = self.rules.async_min_red_c64_input if np.dtype(in_dtype) == np.complex64 else self.rules.async_min_red
            min_red = table[(self.store, bool(adjoint))]
            if min_red is None or n_red < min_red:
                return False
        tile = self.builders._async_default(n_out, n_red, adjoint, in_dtype)[0]
        ok = self._sm80_kernels() and self.builders.async_smem(tile, in_dtype) <= self.smem_per_block
        if mode == "1" and not ok:
            raise FFTMatvecValueError(
                "async=1, but this device has no cp.async kernels (NVIDIA sm_80 or "
                "newer, with enough shared memory per block)")
        return ok


    def _sm80_kernels(self) -> bool:
        """Whether the code object has the kernels compiled for NVIDIA sm_80 and newer only
        (mma: the tensor-core and the cp.async ones), as the device description says
        (``DeviceInfo.mma_kernels``)."""
        return self._sm80


    def graph_pays(self, x) -> bool:
        """Whether a product with input ``x`` ``(k, n_in, Nt)`` replays a graph by default: a
        ``Khat`` under ``GRAPH_MAX_KHAT_BYTES``, or under ``GRAPH_MEDIUM_KHAT_BYTES`` with input
        and output vectors of at most ``GRAPH_MAX_VECTOR_BYTES`` together."""
        if self.nbytes <= self.rules.graph_max_khat_bytes:
            return True
        vectors = x.shape[0] * (self.nm + self.nd) * self.nt * x.dtype.itemsize
        return self.nbytes <= self.rules.graph_medium_khat_bytes and vectors <= self.rules.graph_max_vector_bytes


    def replays(self, x, fused: bool) -> bool:
        """Whether a product with input ``x`` replays a graph (:meth:`graph_runner`)."""
        mode = self.resolved.get("graphs")
        if mode == "auto":
            return not (fused or self.hip) and self.graph_pays(x)
        return mode == "1"

    def callbacks(self) -> tuple[bool, str]:
        """Whether the FFTs can take stages 1 and 5 as callbacks here, and if not, why not.
        ``fft_callbacks=0`` turns them off, ``=1`` makes their absence an error."""
        mode = self.resolved.get("fft_callbacks")
        if mode == "0":
            return False, "turned off (fft_callbacks=0)"
        if mode == "1" and not self._callbacks[0]:
            raise kernels.KernelLoadError(f"fft_callbacks=1, but {self._callbacks[1]}")
        return self._callbacks


    def row_ffts(self, prec: PrecisionConfig) -> bool:
        """Whether the fused products of ``prec`` run their FFTs as the package's own kernels
        (:mod:`fftmatvec.gpu.rowfft`: stages 1+2 and 4+5 one kernel each) instead of cuFFT with
        callbacks. By default where those kernels take the length in both FFTs' precisions and
        these are :data:`ROW_FFT_DTYPES` or cuFFT has no callbacks here;
        ``row_fft=0`` never, ``=1`` in any precision they take, and an error where
        they do not take both FFTs."""
        mode = self.resolved.get("row_fft")
        if mode == "0":
            return False
        key = (prec, mode, self.callbacks()[0])
        hit = self._row_ffts.get(key)  # on every product's path: made once
        if hit is not None:
            return hit
        dtypes = [prec.real_dtype("fft"), prec.real_dtype("ifft")]
        ok = all(_rowfft.supported(self.fft_len, d, self.smem_per_block) for d in dtypes)
        if mode == "1":
            if not ok:
                raise kernels.KernelLoadError(
                    f"row_fft=1, but the row FFT kernels do not take length "
                    f"{self.fft_len} in {', '.join(sorted({d.name for d in dtypes}))}")
        else:
            ok = ok and (all(d in self.rules.row_fft_dtypes for d in dtypes) or not self.callbacks()[0])
        self._row_ffts[key] = ok
        return ok


    def row_fft_pays(self, rows: int, fft_dtype) -> bool:
        """Whether a transform of ``rows`` rows in ``fft_dtype`` that both the row FFT kernels
        and cuFFT with callbacks take runs on the kernels: where its blocks fill
        :data:`ROW_FFT_MIN_BLOCKS_PER_SM` rounds of the multiprocessors; always with
        ``row_fft=1`` or where cuFFT has no callbacks."""
        if self.resolved.get("row_fft") == "1" or not self.callbacks()[0]:
            return True
        blocks = _row_blocks(rows, self.fft_len, fft_dtype)
        return blocks >= self.rules.row_fft_min_blocks_per_sm * self.num_sms


    def fold_splits(self, prec: PrecisionConfig, adjoint: bool, k: int) -> int:
        """The splits of a fused product's stage 3 that its inverse FFT's load callback adds
        (:data:`FOLD_MAX_SPLITS`): those of a stage 3 of one launch with 2 to
        :data:`FOLD_MAX_SPLITS` splits, else 0 (stage 3 sums them itself)."""
        launches = self._plan(adjoint, k, self.xhat_dtype(prec), self.yhat_dtype(prec))
        if len(launches) != 1:
            return 0
        splits = launches[0].splits
        return splits if 1 < splits <= self.rules.fold_max_splits else 0


    def fused_adjoint_takes(self, prec: PrecisionConfig, adjoint: bool, k: int, out_dtype,
                            code: bool = True) -> bool:
        """Whether stages 3-5 of a fused product run as one kernel: by
        default for one-vector adjoints with storage in :data:`FUSED_STORES`, at most
        :data:`FUSED_MAX_ND` sensors and :data:`FUSED_THREADS` frequencies, whose inverse
        transform the row FFT kernels take (:meth:`row_ffts`) and whose blocks fill
        :data:`FUSED_MIN_BLOCKS_PER_SM` per multiprocessor for their storage.
        ``fused_adjoint=0`` never; ``=1`` wherever the kernel takes the product, and an
        error that says why where it does not. ``code=False``: without looking the kernel up in
        the code object (a plan described without a GPU)."""
        mode = self.resolved.get("fused_adjoint")
        if mode == "0" or not adjoint:
            return False
        fft_real = prec.real_dtype("ifft")
        why = None
        if k != 1:
            why = f"{k} right-hand sides (it takes one)"
        elif self.store not in FUSED_STORES:
            why = f"{self.store} storage (it takes {', '.join(FUSED_STORES)})"
        elif self.nd > FUSED_MAX_ND:
            why = f"Nd = {self.nd} sensors (it takes at most {FUSED_MAX_ND})"
        elif self.nf > FUSED_THREADS:
            why = f"Nf = {self.nf} frequencies (it takes at most {FUSED_THREADS})"
        elif not self.row_ffts(prec):
            why = f"the row FFT kernels do not take length {self.fft_len} in {fft_real}"
        if why is None and mode == "auto" and (
                _row_blocks(self.nm, self.fft_len, fft_real)
                < self.rules.fused_min_blocks_per_sm[self.store] * self.num_sms):
            return False  # before the lookup, which compiles the kernel's section (run-time compile)
        if why is None and code:
            name = _GemvIrfft.kernel_name(self.store, self.xhat_dtype(prec), prec, out_dtype,
                                          self.nd)
            if not self.has_kernel(name):
                why = f"the code object has no {name}"
        return not unavailable("fused_adjoint", mode,
                               "this product cannot run stages 3-5 as one kernel", why)
