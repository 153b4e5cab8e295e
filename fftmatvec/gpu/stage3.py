"""Stage 3 run: the launches of a plan (:mod:`fftmatvec.gpu.launches`) packed once with their
arguments (:class:`_Stage3`), the split-K sums, and the float16 adjoint's input scaling. Which
launches a product takes is the planning function's choice (:mod:`fftmatvec.gpu.planning`)."""

from __future__ import annotations

import math

import numpy as np

from .. import kernels
from .launches import (_Launch, _holding, _i64, _split_k, async_chunks, pipe_max_splits,
                       pipe_split_count, pipe_split_time, rows_launch, serial_sum)
from .rules import REDUCE_LANES, REDUCE_SERIAL_THREADS, XREG_MAX_SMEM, _CPLX_SUFFIX

__all__ = ["Stage3Runner", "async_chunks", "pipe_max_splits", "pipe_split_count",
           "pipe_split_time", "_split_k", "_holding"]


class Stage3Runner:
    """Stage 3 run on a stored ``Khat`` (``store``, a
    :class:`~fftmatvec.gpu.khat.KhatStore`: the whole array, an engine's
    :attr:`~fftmatvec.gpu.engine.KernelEngine.stage3`, or a block of it,
    :meth:`~fftmatvec.gpu.engine.KernelEngine.block`) on ``device``
    (:class:`~fftmatvec.gpu.planning.DeviceInfo`), of a product of ``precision`` over ``nt``
    time steps: the launches given (a plan's), or those the planning function chooses for stage
    3 on its own under ``rules`` and ``overrides`` (:meth:`launches`), packed once
    (:meth:`pack`)."""

    def __init__(self, store, device, rules, overrides, precision, nt: int):
        self.khat_store = store  # read in place
        self.cp, self.prec = store.xp, precision
        self.nd, self.nm, self.nf, self.fft_len, self.nt = (store.nd, store.nm, store.nf,
                                                            store.fft_len, nt)
        self.compute = store.compute
        self.device, self.rules, self.resolved = device, rules, overrides
        self.num_sms = device.multiprocessors
        self._launches: dict = {}  # (adjoint, k, in dtype, out dtype) -> launches (launches())
        self._args: dict = {}  # (launch, adjoint, out dtype) -> kernel, arguments (_launch_args)
        self._packed: dict = {}  # (adjoint, k, in dtype, out dtype) -> packed launches (pack())

    def launches(self, adjoint: bool, k: int, in_dtype, out_dtype) -> tuple:
        """Stage 3's launches for an input of ``in_dtype`` and an output of ``out_dtype`` run on
        their own (the operator's sbgemv stage, the building blocks): those of
        :func:`~fftmatvec.gpu.planning.stage3_launches` for this shape, device (``device``),
        rules (``rules``) and overrides (``resolved``), asked once per shape."""
        from .planning import Problem, stage3_launches

        key = (bool(adjoint), int(k), np.dtype(in_dtype), np.dtype(out_dtype))
        hit = self._launches.get(key)
        if hit is None:
            problem = Problem(self.nd, self.nm, self.nt, self.fft_len, k, adjoint,
                              self.prec.letters)
            hit = self._launches[key] = stage3_launches(problem, self.device, self.rules,
                                                        self.resolved, in_dtype, out_dtype)
        return hit

    def workspace_size(self, adjoint: bool, k: int, in_dtype, out_dtype) -> int:
        """Elements (of the compute dtype) of split-K workspace a product needs."""
        return self.pack(adjoint, k, in_dtype, out_dtype).workspace_bytes // self.compute.itemsize


    def apply(self, xhat, adjoint: bool, out_dtype, out=None, workspace=None, plan=None,
              xhat_scaled: bool = False):
        """``xhat`` ``(k, n_in, Nf)`` -> ``(k, n_out, Nf)`` in ``out_dtype`` (into ``out`` if given,
        a C-contiguous array of that shape and dtype). The kernels of a float16 adjoint take
        their input times the row scales: ``xhat_scaled`` says ``xhat`` is so already (the FFT's
        store callback), else :meth:`scale_xhat` makes it so first. ``plan``: the launches to run,
        packed (:meth:`pack`: an executor's) or a list of launches; by default those of
        :meth:`launches`."""
        cp = self.cp
        xhat = cp.ascontiguousarray(xhat)
        scales = self.khat_store.scales_input(adjoint)
        if xhat_scaled and not scales:
            raise ValueError("only a float16 adjoint's input carries the row scales")
        if scales and not xhat_scaled:
            xhat = self.scale_xhat(xhat)
        k = xhat.shape[0]
        n_out = self.nm if adjoint else self.nd
        out_dtype = np.dtype(out_dtype)
        y = cp.empty((k, n_out, self.nf), dtype=out_dtype) if out is None else out
        run = plan if isinstance(plan, _Stage3) else self.pack(adjoint, k, xhat.dtype,
                                                               out_dtype, plan)
        work = 0
        if run.workspace_bytes:
            if workspace is None:
                work_mem = cp.cuda.alloc(run.workspace_bytes)  # held until the launches are queued
                work = work_mem.ptr
            elif workspace.nbytes < run.workspace_bytes:
                raise ValueError(f"the split-K workspace has {workspace.nbytes} bytes, this "
                                 f"product needs {run.workspace_bytes}")
            else:
                work = workspace.data.ptr
        run(cp.cuda.get_current_stream().ptr, xhat.data.ptr, y.data.ptr, work)
        return y


    def pack(self, adjoint: bool, k: int, in_dtype, out_dtype, plan=None) -> "_Stage3":
        """Stage 3 of a product of ``k`` right-hand sides, its launches packed once
        (:class:`_Stage3`): ``plan``'s launches (a :class:`~fftmatvec.gpu.plan.Plan`'s
        ``launches``: an executor, tests, tuning), packed afresh for the caller to hold; without
        ``plan``, the launches the planning function chooses for stage 3 on its own
        (:meth:`launches`), packed once per shape."""
        in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
        if plan is not None:
            return _Stage3(self, adjoint, k, in_dtype, out_dtype, tuple(plan))
        plan = self.launches(adjoint, k, in_dtype, out_dtype)
        key = (adjoint, k, in_dtype, out_dtype)
        run = self._packed.get(key)
        if run is None or run.plan != tuple(plan):  # re-packed where the plan was made afresh
            run = _Stage3(self, adjoint, k, in_dtype, out_dtype, tuple(plan))
            self._packed[key] = run
        return run


    def scale_xhat(self, xhat, out=None):
        """An adjoint's input ``(k, Nd, Nf)`` times the float16 row scales, in its own dtype
        (into ``out`` if given): what the forward FFT's store callback writes, as a kernel of
        its own for the products that run without callbacks."""
        khat = self.khat_store
        if khat.scale is None:
            raise ValueError("only float16 storage has row scales")
        cp = self.cp
        xhat = cp.ascontiguousarray(xhat)
        k, n, nf = xhat.shape
        if n != self.nd or nf != self.nf:
            raise ValueError(f"an adjoint's input is (k, {self.nd}, {self.nf}), got {xhat.shape}")
        if out is None:
            out = cp.empty_like(xhat)
        rows = k * n
        kernels.get_function(f"scale_rows_{_CPLX_SUFFIX[xhat.dtype]}")(
            *rows_launch(rows, nf, self.num_sms),
            (xhat, khat.scale, out, _i64(rows), _i64(self.nd), _i64(nf), _i64(khat.nfp)))
        return out


    def split_sum(self, n: int, splits: int, out_dtype, serial: bool | None = None) -> tuple:
        """(kernel, grid, block, arguments after the two pointers) of the split-K sum of
        ``splits`` partial results of ``n`` outputs each (in the compute dtype) into
        ``out_dtype``: one thread per output (``serial`` True: a plan's launch says so,
        :attr:`~fftmatvec.gpu.launches._Launch.serial_sum`), else lanes of threads summing each
        output's splits; ``serial`` None: the rule (:func:`~fftmatvec.gpu.launches.serial_sum`),
        for the probes."""
        pair = f"{_CPLX_SUFFIX[self.compute]}_{_CPLX_SUFFIX[np.dtype(out_dtype)]}"
        args = (_i64(n), np.int32(splits))
        if serial is None:
            serial = serial_sum(self.rules, self.num_sms, n, splits)
        if serial:
            threads = REDUCE_SERIAL_THREADS
            blocks = min(math.ceil(n / threads), 8 * self.num_sms)
            return kernels.get_function(f"reduce_serial_{pair}"), (blocks,), (threads,), args
        lanes = min(REDUCE_LANES, splits)  # threads summing one output's splits
        blocks = min(math.ceil(n / 32), 32 * self.num_sms)
        return kernels.get_function(f"reduce_{pair}"), (blocks,), (32, lanes), args


    def _launch_args(self, launch: _Launch, adjoint: bool, n_out: int, n_red: int, out_dtype):
        """(kernel, its arguments after Khat, scale, x and y, the split-K sum or None) of a
        launch, made once: a product's host time before its first kernel runs is time the
        device waits."""
        key = (launch, adjoint, out_dtype)
        hit = self._args.get(key)
        if hit is not None:
            return hit
        nf, nfp, kb = self.nf, self.khat_store.nfp, launch.kb
        so, sr, shift, sb = self.khat_store.strides(adjoint)
        args = (_i64(nf), _i64(nfp), _i64(n_out), _i64(n_red), _i64(so), _i64(sr),
                np.int32(shift), _i64(sb))
        smem = launch.smem
        if launch.xreg_rows:
            if not adjoint:
                raise ValueError("the input-in-registers kernel serves adjoints only")
            args += (np.int32(kb), np.int32(launch.xreg_rows))
            smem = smem if smem > XREG_MAX_SMEM else 0  # no opt-in: the default carveout
        else:
            args += (np.int32(adjoint), _i64(launch.red_chunk))
            if launch.staged:
                args += (_i64(n_out * nf),)
            elif launch.mma:
                args += (np.int32(kb), _i64(n_red * nf), _i64(n_out * nf),
                         _i64(kb * n_out * nf), np.int32(launch.freq_major))
            else:
                args += (_i64(n_red * nf), _i64(n_out * nf), _i64(kb * n_out * nf))
        reduce = None
        if launch.splits > 1:
            n = kb * n_out * nf
            reduce = self.split_sum(n, launch.splits, out_dtype, launch.serial_sum)
        hit = (kernels.get_function(launch.name, shared_mem=smem), args, reduce)
        self._args[key] = hit
        return hit


class _Stage3:
    """Stage 3 of one product shape (direction, right-hand sides, dtypes): its launches, their
    arguments packed once (:class:`~fftmatvec.kernels.PackedLaunch`). A call passes the
    input, output and split-K workspace pointers; launches of a slice of the right-hand sides
    take them at that slice's offset."""

    def __init__(self, eng: Stage3Runner, adjoint: bool, k: int, in_dtype, out_dtype, plan):
        n_in, n_out, n_red = (eng.nd, eng.nm, eng.nd) if adjoint else (eng.nm, eng.nd, eng.nm)
        in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
        if sum(la.kb for la in plan) != k:
            raise ValueError(f"the plan's launches take {sum(la.kb for la in plan)} "
                             f"right-hand sides, the product {k}")
        self.plan = plan
        khat = eng.khat_store
        scale = np.uint64(0) if khat.scale is None or adjoint else khat.scale  # forward only
        in_row, out_row = n_in * eng.nf * in_dtype.itemsize, n_out * eng.nf * out_dtype.itemsize
        self.steps = []  # (launch, split-K sum or None, input offset, output offset)
        self.workspace_bytes = 0
        b0 = 0
        for la in plan:
            fn, args, reduce = eng._launch_args(la, adjoint, n_out, n_red, out_dtype)
            main = kernels.PackedLaunch(fn, la.grid, la.block, la.smem,
                                        (khat.data, scale, None, None) + args)
            red = None
            if reduce is not None:
                red_fn, grid, block, red_args = reduce
                red = kernels.PackedLaunch(red_fn, grid, block, 0, (None, None) + red_args)
                self.workspace_bytes = max(self.workspace_bytes, la.splits * la.kb * n_out
                                           * eng.nf * eng.compute.itemsize)
            self.steps.append((main, red, b0 * in_row, b0 * out_row))
            b0 += la.kb

    def partials_launch(self):
        """The launch of a plan of one launch with split-K, without its sum: called as
        ``launch(stream_ptr, x_ptr, work_ptr)``, it writes the partial sums
        ``(splits, k, n_out, Nf)`` into the workspace, for an inverse FFT that adds them
        (:attr:`FusedPlans.split_sum`)."""
        if len(self.steps) != 1 or self.steps[0][1] is None:
            raise ValueError("only a stage 3 of one launch with split-K leaves partial sums")
        return self.steps[0][0]

    def __call__(self, stream_ptr: int, x_ptr: int, y_ptr: int, work_ptr: int = 0) -> None:
        for main, red, xo, yo in self.steps:
            if red is None:
                main(stream_ptr, x_ptr + xo, y_ptr + yo)
            else:  # partial sums into the workspace, then their sum into the output
                main(stream_ptr, x_ptr + xo, work_ptr)
                red(stream_ptr, work_ptr, y_ptr + yo)
