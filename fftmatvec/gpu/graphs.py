"""Small products replayed as one captured CUDA graph."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import backend

if TYPE_CHECKING:
    from .engine import KernelEngine


class Graphs:
    """The graph runners of an engine (a base class of
    :class:`~fftmatvec.gpu.engine.KernelEngine`)."""

    def graph_runner(self, op, adjoint: bool, x, weight, fused: bool = False):
        """A captured-graph runner for this product, or None to run the stages one by one.

        Small products are dominated by launch and Python overheads; replaying the five stages
        as one CUDA graph removes most of them. ``graphs=0`` disables graphs,
        ``=1`` uses them at every size; by default they serve the sizes ``graph_pays`` names,
        for the products that run stage by stage: a fused product (``fused``, the caller's
        :meth:`fused_product`) takes less time than a replay, which copies its vectors in and
        out (CUDA only: graph capture is untested on ROCm here).
        """
        if not self.replays(x, fused):
            return None
        key = (id(op), adjoint, x.shape[0], x.dtype, None if weight is None else id(weight),
               self.callbacks()[0])
        runner = self._graphs.get(key)  # a runner keeps op and weight alive: ids stay unique
        if runner is None:
            runner = _GraphRunner(op, self, adjoint, x.shape[0], x.dtype, weight)
            self._graphs[key] = runner
            while len(self._graphs) > 16:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        return runner


class _GraphRunner:
    """One product (direction, batch size, input dtype, weight) captured as a CUDA graph over
    buffers it owns. A call copies the input in, replays the graph, and returns a fresh copy
    of the output, so results never alias the runner's buffers."""

    def __init__(self, op, engine: KernelEngine, adjoint: bool, k: int, in_dtype, weight):
        cp = backend.cupy
        prec = op.precision
        n_in, n_out = (op.nd, op.nm) if adjoint else (op.nm, op.nd)
        L, nf, nt = engine.fft_len, engine.nf, engine.nt
        self.op, self.weight = op, weight  # keep the weight alive: the graph reads its memory
        self.x = cp.zeros((k, n_in, nt), dtype=in_dtype)
        product = engine.fused_product(prec, adjoint, k, in_dtype, op.dtype, weight)
        if product is not None:  # stages 1 and 5 inside the FFTs (cuFFT callbacks)
            self.buffers = [cp.empty(max(n, 1), dtype=np.uint8) for n in (
                product.xhat_bytes, product.yhat_bytes, product.work_bytes)]
            self.y = engine.y_buffer(prec, k, n_out, op.dtype)
        else:
            self.yhat = cp.empty((k, n_out, nf), dtype=prec.complex_dtype("ifft"))
            self.padded = cp.empty((k, n_in, L), dtype=prec.real_dtype("fft"))
            self.xhat = cp.empty((k, n_in, nf), dtype=prec.complex_dtype("fft"))
            # a float16 adjoint's input times the row scales, in a buffer the graph owns
            self.xs = cp.empty_like(self.xhat) if engine.scales_input(adjoint) else None
            self.ypad = cp.empty((k, n_out, L), dtype=prec.real_dtype("ifft"))
            self.y = cp.empty((k, n_out, nt), dtype=op.dtype)
            ws = engine.workspace_size(adjoint, k, self.xhat.dtype, self.yhat.dtype)
            self.workspace = cp.empty(max(ws, 1), dtype=engine.compute)

        def stages():
            if product is not None:
                product.launch(cp.cuda.get_current_stream().ptr, self.x.data.ptr,
                               *(b.data.ptr for b in self.buffers), self.y.data.ptr)
                return
            op.broadcast_and_pad(self.x, out=self.padded)
            op.fft(self.padded, out=self.xhat)
            xhat = self.xhat
            if self.xs is not None:
                xhat = engine.scale_xhat(self.xhat, out=self.xs)
            op.sbgemv(xhat, adjoint, out=self.yhat, workspace=self.workspace,
                      xhat_scaled=self.xs is not None)
            op.ifft(self.yhat, out=self.ypad)
            op.unpad_and_reduce(self.ypad, weight, out=self.y)

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
