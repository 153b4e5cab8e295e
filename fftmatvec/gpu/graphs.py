"""Small products replayed as one captured CUDA graph: the steps of an
:class:`~fftmatvec.gpu.executor.Executor` whose plan's path is ``"graph"``, captured over
buffers the runner owns."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from .. import backend

if TYPE_CHECKING:
    from .executor import Executor


class GraphRunner:
    """One product (an executor's: direction, batch size, dtypes) with one weight (None or an
    array, kept alive: the graph reads its memory) captured as a CUDA graph over buffers it
    owns. A call copies the input in, replays the graph, and returns a fresh copy of the
    output, so results never alias the runner's buffers."""

    def __init__(self, executor: Executor, weight=None):
        cp = backend.cupy
        eng, prec, problem = executor.engine, executor.precision, executor.plan.problem
        adjoint, k = executor.adjoint, executor.plan.k
        n_in, n_out = (problem.nd, problem.nm) if adjoint else (problem.nm, problem.nd)
        L, nf, nt = problem.fft_len, problem.nf, problem.nt
        out_dtype = problem.out_dtype
        self.weight = weight
        self.x = cp.zeros((k, n_in, nt), dtype=problem.in_dtype)
        product = executor.product
        if product is not None:  # stages 1 and 5 inside the FFTs
            self.buffers = [cp.empty(max(n, 1), dtype=np.uint8) for n in (
                product.xhat_bytes, product.yhat_bytes, product.work_bytes)]
            self.y = eng.buffers.y_buffer(prec, k, n_out, out_dtype)
        else:
            xhat = cp.empty((k, n_in, nf), dtype=prec.complex_dtype("fft"))
            ws = executor.stage3.workspace_bytes // eng.compute.itemsize
            self.bufs = SimpleNamespace(
                padded=cp.empty((k, n_in, L), dtype=prec.real_dtype("fft")), xhat=xhat,
                # a float16 adjoint's input times the row scales, in a buffer the graph owns
                xs=cp.empty_like(xhat) if eng.khat_store.scales_input(adjoint) else None,
                yhat=cp.empty((k, n_out, nf), dtype=prec.complex_dtype("ifft")),
                ypad=cp.empty((k, n_out, L), dtype=prec.real_dtype("ifft")),
                y=cp.empty((k, n_out, nt), dtype=out_dtype),
                workspace=cp.empty(max(ws, 1), dtype=eng.compute))
            self.y = self.bufs.y

        def stages():
            if product is not None:
                product.launch(cp.cuda.get_current_stream().ptr, self.x.data.ptr,
                               *(b.data.ptr for b in self.buffers), self.y.data.ptr)
            else:
                executor.stages(self.x, weight, bufs=self.bufs)

        stages()  # warm-up: FFT plans made and kernels loaded before capture
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            try:
                stages()
            finally:
                self.graph = stream.end_capture()
        stream.synchronize()

    def __call__(self, x):
        cp = backend.cupy
        self.x[...] = x
        self.graph.launch(cp.cuda.get_current_stream())
        return self.y.copy()
