"""Stage 3 of one block of ``Khat`` on the package's kernels: the sensors ``i0:i1`` against the
parameters ``j0:j1``, with the launches the planner chooses for a product of that block's
shape (:func:`fftmatvec.blocks.stage3_block` is the entry point, CPU and GPU alike).

A block is an engine over the same stored ``Khat``: its ``data`` and row scales start at the
block's first element, its shape is the block's, and the strides that address ``Khat`` are the
whole array's, so the kernels read the block in place."""

from __future__ import annotations

from .engine import KernelEngine


class _BlockEngine(KernelEngine):
    """The engine of rows ``i0:i1`` and columns ``j0:j1`` of a :class:`KernelEngine`'s
    ``Khat`` (made by :func:`block_engine`; nothing is copied)."""

    def khat_strides(self, adjoint: bool) -> tuple[int, int, int, int]:
        B = self.khat_block
        nd, nm = self._whole
        so, sr = (B, nm * B) if adjoint else (nm * B, B)
        return so, sr, self.khat_shift, nd * nm * B


def block_engine(eng: KernelEngine, i0: int, i1: int, j0: int, j1: int) -> KernelEngine:
    """The engine of the block ``Khat[i0:i1, j0:j1]`` of ``eng``, made once per block (held by
    ``eng``): its plans are those of a product of ``i1 - i0`` sensors and ``j1 - j0``
    parameters."""
    blocks = eng.__dict__.setdefault("_blocks", {})
    key = (i0, i1, j0, j1)
    hit = blocks.get(key)
    if hit is not None:
        return hit
    if (i0, j0) == (0, 0) and (i1, j1) == (eng.nd, eng.nm):
        blocks[key] = eng
        return eng
    view = object.__new__(_BlockEngine)
    view.__dict__.update({k: v for k, v in eng.__dict__.items() if k != "_blocks"})
    view._whole = getattr(eng, "_whole", (eng.nd, eng.nm))
    view.nd, view.nm = i1 - i0, j1 - j0
    view.data = eng.data[:, i0:i1, j0:j1]  # its pointer: the block's first element
    view.scale = None if eng.scale is None else eng.scale[i0:i1]
    view._nbytes = int(eng.data.itemsize * view.nd * view.nm * eng.nf)
    view._plans, view._args, view._stage3 = {}, {}, {}
    view._fft_plans = {}
    blocks[key] = view
    return view


def stage3_into(eng: KernelEngine, xhat, yhat, adjoint: bool, beta: int):
    """``yhat = beta yhat + K xhat`` (``K^H xhat`` for the adjoint) on block engine ``eng``, in
    ``yhat``'s dtype; ``beta`` 0 or 1 (1: the block's product into a buffer, then added)."""
    cp = eng.cp
    if beta == 0:
        return eng.apply(xhat, adjoint, yhat.dtype, out=yhat)
    part = eng.apply(xhat, adjoint, yhat.dtype)
    cp.add(yhat, part, out=yhat)
    return yhat

