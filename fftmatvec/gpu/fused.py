"""Fused products: stages 1 and 5 inside the FFTs and stage 3 packed (three launches), or
stages 3-5 of a one-vector adjoint as one kernel; the intermediate arrays they hold."""

from __future__ import annotations

from typing import TYPE_CHECKING

import contextlib
import math
import threading
from collections import OrderedDict

import numpy as np

from .. import backend, kernels
from ..precision import PrecisionConfig
from . import rowfft as _rowfft
from .ffts import FusedPlans, _partials_nbytes, xhat_dtype, yhat_dtype
from .rules import (FUSED_MAX_ND, FUSED_MAX_RADIX, FUSED_MAX_SMEM, FUSED_ND, FUSED_THREADS,
                    HOLD_KHAT_FRACTION, HOLD_MAX_BYTES, HOLD_STREAMS, _CPLX_SUFFIX,
                    _PER_THREAD_STREAM, _REAL_SUFFIX)

if TYPE_CHECKING:
    from .engine import KernelEngine
from .launches import _holding


class FusedBuffers:
    """The sizes and the arrays of a fused product's intermediates, on the array module ``xp``
    (CuPy), for ``nf`` frequencies, ``nt`` time steps, FFT length ``fft_len`` and stage 3's
    ``compute`` dtype (an engine's :attr:`~fftmatvec.gpu.engine.KernelEngine.buffers`); the
    products themselves are built by an :class:`~fftmatvec.gpu.executor.Executor` from its
    plan, and hold their arrays per stream."""

    def __init__(self, xp, nf: int, nt: int, fft_len: int, compute):
        self.cp, self.nf, self.nt, self.fft_len = xp, nf, nt, fft_len
        self.compute = np.dtype(compute)

    # A fused product's arrays take the room of their plan's full logical input or output:
    # cuFFT may use its output buffer as scratch (in stage 2's complex dtype, where a complex64
    # store makes the array itself half that) and may overwrite a complex-to-real input (in
    # stage 4's complex dtype); the inverse writes only Nt of its L samples per row.
    def xhat_nbytes(self, prec: PrecisionConfig, k: int, n: int) -> int:
        return k * n * self.nf * prec.complex_dtype("fft").itemsize


    def yhat_nbytes(self, prec: PrecisionConfig, k: int, n: int) -> int:
        return k * n * self.nf * prec.complex_dtype("ifft").itemsize


    def y_nbytes(self, prec: PrecisionConfig, k: int, n: int, dtype) -> int:
        return max(k * n * self.fft_len * prec.real_dtype("ifft").itemsize,
                   k * n * self.nt * np.dtype(dtype).itemsize)

    def inverse_input_nbytes(self, prec: PrecisionConfig, plans, rows: int) -> int:
        """Bytes an input of ``plans``' inverse over ``rows`` rows takes: the partial sums
        where it adds stage 3's splits (``split_sum``), and at least the room of a
        complex-to-real input of those rows, which cuFFT may overwrite (:meth:`yhat_nbytes`)."""
        return max(_partials_nbytes(self, plans, rows), self.yhat_nbytes(prec, 1, rows))


    def _buffer(self, shape, dtype, nbytes: int):
        """An array ``shape`` of ``dtype`` at the start of a buffer of at least ``nbytes``."""
        cp, dtype = self.cp, np.dtype(dtype)
        memory = cp.cuda.alloc(max(nbytes, math.prod(shape) * dtype.itemsize))
        return cp.ndarray(shape, dtype=dtype, memptr=memory)


    def xhat_buffer(self, prec: PrecisionConfig, k: int, n: int):
        """The forward FFT's output ``(k, n, Nf)`` (:meth:`xhat_nbytes`)."""
        return self._buffer((k, n, self.nf), xhat_dtype(self.compute, prec),
                            self.xhat_nbytes(prec, k, n))


    def yhat_buffer(self, prec: PrecisionConfig, k: int, n: int):
        """Stage 3's output ``(k, n, Nf)`` in a fused product
        (:func:`~fftmatvec.gpu.ffts.yhat_dtype`, :meth:`yhat_nbytes`)."""
        return self._buffer((k, n, self.nf), yhat_dtype(self.compute, prec),
                            self.yhat_nbytes(prec, k, n))


    def y_buffer(self, prec: PrecisionConfig, k: int, n: int, dtype):
        """The inverse FFT's unpadded output ``(k, n, Nt)`` in ``dtype`` (:meth:`y_nbytes`)."""
        return self._buffer((k, n, self.nt), dtype, self.y_nbytes(prec, k, n, dtype))


class _GemvIrfft:
    """Stages 3-5 of a one-vector adjoint as one kernel (``hip_kernels/fused.cuh``): a callable
    ``plan(x_ptr, y_ptr, stream)`` from the forward FFT's output ``(1, Nd, Nf)`` (in
    :func:`~fftmatvec.gpu.ffts.xhat_dtype`) to the unpadded output ``(1, Nm, Nt)``. Each block
    takes the
    rows of a block of the row FFT kernels (:func:`fftmatvec.gpu.rowfft.default_rows_per_block`,
    fewer where they would pass :data:`FUSED_MAX_SMEM`), one thread per frequency."""

    @staticmethod
    def kernel_name(store: str, in_dtype, prec: PrecisionConfig, out_dtype, nd: int) -> str:
        """The entry point for ``nd`` sensors: the smallest of :data:`FUSED_ND` that holds them."""
        real = _REAL_SUFFIX
        tile = _holding(nd, FUSED_ND)
        if tile is None:
            raise ValueError(f"the fused adjoint takes at most {FUSED_MAX_ND} sensors, got {nd}")
        return (f"sbgemv_irfft_{store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{real[np.dtype(prec.real_dtype('ifft'))]}_{real[np.dtype(prec.reduce_dtype)]}_"
                f"{real[np.dtype(out_dtype)]}_n{tile}")

    def __init__(self, eng: "KernelEngine", prec: PrecisionConfig, out_dtype):
        L, nm = eng.fft_len, eng.nm
        fft_real = prec.real_dtype("ifft")
        n = _rowfft.complex_length(L)
        rads = _rowfft.radices(n, FUSED_MAX_RADIX)
        cdtype = np.complex128 if fft_real == np.float64 else np.complex64
        self.twiddles = _rowfft.twiddles(n, cdtype, rads)  # kept alive with the plan
        rpb = max(1, min(_rowfft.default_rows_per_block(L, fft_real), nm))
        while rpb > 1 and _rowfft.block_bytes(L, fft_real, rpb) > FUSED_MAX_SMEM:
            rpb //= 2
        self.rows_per_block, self.radices = rpb, rads
        self.smem = _rowfft.block_bytes(L, fft_real, rpb)
        self.grid = (-(-nm // rpb),)
        self.name = self.kernel_name(eng.store, xhat_dtype(eng.compute, prec), prec, out_dtype,
                                     eng.nd)
        so, sr, shift, sb = eng.khat_store.strides(True)
        packed = _rowfft.packed_radices(rads)
        i64, i32 = np.int64, np.int32
        args = (eng.khat_store.data, None, None, self.twiddles, i64(nm), i32(eng.nd), i32(eng.nt), i32(L),
                i32(rpb), np.uint64(packed), i32(len(rads)), i64(so), i64(sr), i32(shift),
                i64(sb))
        fn = kernels.get_function(self.name)  # no opt-in: the default carveout (FUSED_MAX_SMEM)
        self._launch = kernels.PackedLaunch(fn, self.grid, (FUSED_THREADS,), self.smem, args)

    def __call__(self, x_ptr: int, y_ptr: int, stream: int) -> None:
        self._launch(stream, x_ptr, y_ptr)


class _FusedProduct:
    """One product (direction, right-hand sides, dtypes) with stages 1 and 5 inside the FFTs
    (cuFFT callbacks or the row FFT kernels) and stage 3's launches packed. A call queues the
    forward FFT, stage 3 (without its split-K sum where the inverse FFT adds the splits:
    :attr:`FusedPlans.split_sum`) and the inverse FFT, or the forward FFT and stages 3-5 as one
    kernel (:class:`_GemvIrfft`), in a fraction of the host time of the
    stages one by one.

    The intermediate arrays are held per stream where they are small next to ``Khat``
    (:data:`HOLD_MAX_BYTES`, :data:`HOLD_KHAT_FRACTION`), else taken from CuPy's pool at each
    call. A call queues its three steps under the product's lock, so calls from several
    threads on one stream never interleave over the held arrays; the per-thread default
    stream, one handle for a different stream in every thread, holds a set per thread."""

    def __init__(self, eng: KernelEngine, prec: PrecisionConfig, adjoint: bool, k: int,
                 out_dtype, plans: FusedPlans, fused: "_GemvIrfft | None" = None,
                 stage3=None):
        n_in, n_out = (eng.nd, eng.nm) if adjoint else (eng.nm, eng.nd)
        if plans.xhat_scaled != eng.khat_store.scales_input(adjoint):
            raise ValueError("a float16 adjoint's forward FFT must apply the row scales")
        self.plans = plans
        # its first kernel computes the input's largest magnitude as it reads it
        self.folds_amax = isinstance(plans.fwd, _rowfft.RowFFT)
        # stages 3-5 as one kernel (fused), or stage 3's launches and the inverse FFT
        if (fused is None) == (plans.inv is None):
            raise ValueError("a product takes an inverse plan, or stages 3-5 as one kernel")
        if (fused is None) == (stage3 is None):
            raise ValueError("a product takes stage 3's launches, or stages 3-5 as one kernel")
        self.fused = fused
        self.stage3 = None
        self.xhat_bytes = eng.buffers.xhat_nbytes(prec, k, n_in)
        self.yhat_bytes = self.work_bytes = 0
        self.split_sum = plans.split_sum
        self._partials = None  # stage 3's launch without its sum, where the inverse adds it
        if self.fused is None:
            self.stage3 = stage3  # its plan's launches, packed (_Stage3)
            self.yhat_bytes = eng.buffers.yhat_nbytes(prec, k, n_out)
            self.work_bytes = self.stage3.workspace_bytes
            if self.split_sum:  # the inverse FFT reads the partial sums (and may overwrite
                # them, as it may any complex-to-real input): no array of sums
                plan = self.stage3.plan
                if len(plan) != 1 or plan[0].splits != self.split_sum:
                    raise ValueError(f"the inverse plan adds {self.split_sum} splits, stage 3 "
                                     f"has {[la.splits for la in plan]}")
                self._partials = self.stage3.partials_launch()  # checked once, not per call
                self.work_bytes = eng.buffers.inverse_input_nbytes(prec, plans, k * n_out)
                self.yhat_bytes = 0
        elif self.split_sum:
            raise ValueError("stages 3-5 as one kernel leave no partial sums")
        self.out_dtype = np.dtype(out_dtype)
        self.y_shape = (k, n_out, eng.nt)
        self.y_bytes = eng.buffers.y_nbytes(prec, k, n_out, out_dtype)
        held = self.xhat_bytes + self.yhat_bytes + self.work_bytes
        self.holds = held <= max(HOLD_MAX_BYTES, eng.nbytes // HOLD_KHAT_FRACTION)
        self._held: OrderedDict = OrderedDict()  # stream key -> (xhat, yhat, work) memory
        self._held_ptrs: dict = {}  # stream key -> their pointers
        self._lock = threading.Lock()

    def launch(self, stream: int, x: int, xhat: int, yhat: int, work: int, y: int) -> None:
        """Queue the product on ``stream`` over the given buffers (pointers; ``work`` unused
        where stage 3 has no split-K workspace)."""
        self.plans.fwd(x, xhat, stream)
        self._finish(stream, xhat, yhat, work, y)

    def _finish(self, stream: int, xhat: int, yhat: int, work: int, y: int) -> None:
        """Queue stages 3-5 after the forward FFT."""
        if self.fused is not None:
            self.fused(xhat, y, stream)
        else:
            self.plans.inv(self.queue_stage3(stream, xhat, yhat, work), y, stream)

    def queue_stage3(self, stream: int, xhat: int, yhat: int, work: int) -> int:
        """Queue stage 3; the pointer the inverse FFT reads: its sums in ``yhat``, or the
        partial sums in ``work`` where the inverse adds them (:attr:`split_sum`)."""
        if self.split_sum:
            self._partials(stream, xhat, work)
            return work
        self.stage3(stream, xhat, yhat, work)
        return yhat

    def _alloc(self) -> tuple:
        """(xhat, yhat, work) memory from CuPy's pool, on the current stream."""
        alloc = backend.cupy.cuda.alloc
        return tuple(alloc(max(n, 1)) for n in (self.xhat_bytes, self.yhat_bytes, self.work_bytes))

    def _held_buffers(self, stream: int) -> tuple:
        """(xhat, yhat, work) pointers held for ``stream``; the caller holds the lock."""
        key = (stream, threading.get_ident()) if stream == _PER_THREAD_STREAM else stream
        ptrs = self._held_ptrs.get(key)
        if ptrs is None:
            mem = self._alloc()  # on the current stream: freed back to it
            while len(self._held) >= HOLD_STREAMS:  # the oldest stream's set goes
                del self._held_ptrs[next(iter(self._held))]
                self._held.popitem(last=False)
            self._held[key] = mem
            ptrs = self._held_ptrs[key] = tuple(m.ptr for m in mem)
        return ptrs

    def release(self) -> None:
        """Give the held intermediate arrays back to CuPy's pool (they are made again on the
        next call)."""
        with self._lock:
            self._held_ptrs.clear()
            self._held.clear()

    def __call__(self, x, y_shape=None, contiguous: bool = False, amax=None):
        """``x`` ``(k, n_in, Nt)`` (or any shape of that size) on the current device -> a new
        array of ``y_shape`` (default ``(k, n_out, Nt)``). ``contiguous``: the caller has
        checked that ``x`` is C-contiguous. ``amax``: a largest magnitude of ``x`` not yet
        launched (:meth:`fftmatvec._scaling.DeviceOps.measure`), computed by the forward FFT
        as it reads ``x`` (:attr:`folds_amax`), else launched before it."""
        cp = backend.cupy
        if not (contiguous or x.flags.c_contiguous):
            x = cp.ascontiguousarray(x)
        current = cp.cuda.get_current_stream()
        stream, alloc = current.ptr, cp.cuda.alloc
        fold = amax is not None and not amax.recorded
        if fold and not self.folds_amax:
            amax.ensure(x)
            fold = False
        y_shape = self.y_shape if y_shape is None else y_shape
        with self._lock if self.holds else contextlib.nullcontext():
            if self.holds:
                xhat, yhat, work = self._held_buffers(stream)
            else:  # from the pool for this call: alive until it returns, then reused in order
                mem = self._alloc()
                xhat, yhat, work = (m.ptr for m in mem)
            if fold:  # first: the device starts on it at once
                self.plans.fwd(x.data.ptr, xhat, stream, amax.fold())
                amax.record(current)
            else:
                self.plans.fwd(x.data.ptr, xhat, stream)
            if self.fused is None:
                sums = self.queue_stage3(stream, xhat, yhat, work)
            y = cp.ndarray(y_shape, self.out_dtype, memptr=alloc(self.y_bytes))
            if self.fused is None:
                self.plans.inv(sums, y.data.ptr, stream)
            else:
                self.fused(xhat, y.data.ptr, stream)
        return y
