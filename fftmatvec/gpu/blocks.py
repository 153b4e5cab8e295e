"""Stage 3 of one block of ``Khat`` on the package's kernels: the sensors ``i0:i1`` against the
parameters ``j0:j1`` (:func:`fftmatvec.blocks.stage3_block` is the entry point, CPU and GPU
alike), with the launches the planning function chooses for a product of that block's shape.

A :class:`BlockView` reads the engine's stored ``Khat`` in place (a block of its
:class:`~fftmatvec.gpu.khat.KhatStore`): its ``data`` and row scales start at the block's first
element, its shape is the block's, and the strides that address ``Khat`` are the whole
array's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ffts import FFTStages
from .stage3 import Stage3Launches

if TYPE_CHECKING:
    from .engine import KernelEngine

__all__ = ["BlockView", "stage3_into"]


class BlockView(Stage3Launches):
    """Stage 3 of rows ``i0:i1`` and columns ``j0:j1`` of a
    :class:`~fftmatvec.gpu.engine.KernelEngine`'s ``Khat`` (made by
    :meth:`~fftmatvec.gpu.engine.KernelEngine.block`; nothing is copied): its launches are
    those of a product of ``i1 - i0`` sensors and ``j1 - j0`` parameters on the engine's
    device, rules and overrides, packed once per shape."""

    name = "kernels"

    def __init__(self, eng: KernelEngine, i0: int, i1: int, j0: int, j1: int):
        self.khat_store = eng.khat_store.block(i0, i1, j0, j1)  # read in place
        self.cp, self.prec, self.store, self.compute = eng.cp, eng.prec, eng.store, eng.compute
        self.nd, self.nm = i1 - i0, j1 - j0
        self.nf, self.nt, self.fft_len = eng.nf, eng.nt, eng.fft_len
        self.device, self.rules, self.resolved = eng.device, eng.rules, eng.resolved
        self.num_sms = eng.num_sms
        self._args: dict = {}  # (launch, adjoint, out dtype) -> kernel, arguments
        self._stage3: dict = {}  # (adjoint, k, in dtype, out dtype) -> packed launches
        self._launches: dict = {}  # (adjoint, k, in dtype, out dtype) -> launches

    # the row kernels' grid (the float16 adjoint's input scaling)
    _rows_launch = FFTStages._rows_launch


def stage3_into(eng, xhat, yhat, adjoint: bool, beta: int):
    """``yhat = beta yhat + K xhat`` (``K^H xhat`` for the adjoint) on the engine or block view
    ``eng``, in ``yhat``'s dtype; ``beta`` 0 or 1 (1: the block's product into a buffer, then
    added)."""
    cp = eng.cp
    if beta == 0:
        return eng.apply(xhat, adjoint, yhat.dtype, out=yhat)
    part = eng.apply(xhat, adjoint, yhat.dtype)
    cp.add(yhat, part, out=yhat)
    return yhat
