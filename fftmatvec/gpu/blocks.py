"""Stage 3 of one block of ``Khat`` on the package's kernels: the sensors ``i0:i1`` against the
parameters ``j0:j1`` (:func:`fftmatvec.blocks.stage3_block` is the entry point, CPU and GPU
alike), with the launches the planning function chooses for a product of that block's shape.

A :class:`BlockView` reads the engine's stored ``Khat`` in place: its ``data`` and row scales
start at the block's first element, its shape is the block's, and the strides that address
``Khat`` are the whole array's."""

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
        if not (0 <= i0 < i1 <= eng.nd and 0 <= j0 < j1 <= eng.nm):
            raise ValueError(f"a block of Khat within its ({eng.nd}, {eng.nm}) rows and columns, "
                             f"got rows {i0}:{i1}, columns {j0}:{j1}")
        self.cp, self.prec, self.store, self.compute = eng.cp, eng.prec, eng.store, eng.compute
        self.nd, self.nm = i1 - i0, j1 - j0
        self.nf, self.nfp, self.nt, self.fft_len = eng.nf, eng.nfp, eng.nt, eng.fft_len
        self.device, self.rules, self.resolved = eng.device, eng.rules, eng.resolved
        self.num_sms = eng.num_sms
        self.khat_block, self.khat_shift = eng.khat_block, eng.khat_shift
        self.data = eng.data[:, i0:i1, j0:j1]  # its pointer: the block's first element
        self.scale = None if eng.scale is None else eng.scale[i0:i1]
        self._whole = (eng.nd, eng.nm)
        self._args: dict = {}  # (launch, adjoint, out dtype) -> kernel, arguments
        self._stage3: dict = {}  # (adjoint, k, in dtype, out dtype) -> packed launches
        self._launches: dict = {}  # (adjoint, k, in dtype, out dtype) -> launches

    # the row kernels' grid (the float16 adjoint's input scaling)
    _rows_launch = FFTStages._rows_launch

    def khat_strides(self, adjoint: bool) -> tuple[int, int, int, int]:
        """The strides of the whole ``Khat`` (the block is read in place)."""
        B = self.khat_block
        nd, nm = self._whole
        so, sr = (B, nm * B) if adjoint else (nm * B, B)
        return so, sr, self.khat_shift, nd * nm * B


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
