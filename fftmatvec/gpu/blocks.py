"""Stage 3 of one block of ``Khat`` on the package's kernels: the sensors ``i0:i1`` against the
parameters ``j0:j1`` (:func:`fftmatvec.blocks.stage3_block` is the entry point, CPU and GPU
alike), with the launches the planning function chooses for a product of that block's shape.

A block's stage 3 is a :class:`~fftmatvec.gpu.stage3.Stage3Runner` of a block of the engine's
stored ``Khat`` (:meth:`~fftmatvec.gpu.engine.KernelEngine.block`), read in place: its
``data`` and row scales start at the block's first element, its shape is the block's, and the
strides that address ``Khat`` are the whole array's."""

from __future__ import annotations

__all__ = ["stage3_into"]


def stage3_into(runner, xhat, yhat, adjoint: bool, beta: int):
    """``yhat = beta yhat + K xhat`` (``K^H xhat`` for the adjoint) on ``runner`` (a
    :class:`~fftmatvec.gpu.stage3.Stage3Runner` of the whole ``Khat`` or of a block), in
    ``yhat``'s dtype; ``beta`` 0 or 1 (1: the block's product into a buffer, then added)."""
    cp = runner.cp
    if beta == 0:
        return runner.apply(xhat, adjoint, yhat.dtype, out=yhat)
    part = runner.apply(xhat, adjoint, yhat.dtype)
    cp.add(yhat, part, out=yhat)
    return yhat
