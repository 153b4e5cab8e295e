"""PyLops adapter (optional: ``pip install pylops``): ``F.aspylops()``.

A :class:`PyLopsOperator` is a ``pylops.LinearOperator`` whose model is an ``(Nm, Nt)`` array
and data an ``(Nd, Nt)`` one (``dims`` and ``dimsd``, space-outer time-inner), so PyLops's
solvers (``cg``, ``cgls``, ``lsqr``), its regularised inversions and its operator algebra
(``+``, ``*``, ``.H``, ``VStack``, ``Diagonal``) run on the FFT products, on NumPy or CuPy
arrays alike.
"""

from __future__ import annotations

try:
    import pylops
except ImportError as exc:  # optional dependency
    raise ImportError("F.aspylops() needs PyLops: pip install pylops") from exc

from ._errors import FFTMatvecTypeError
from .operator import _OperatorBase

__all__ = ["PyLopsOperator"]


class PyLopsOperator(pylops.LinearOperator):
    """An fftmatvec operator as a ``pylops.LinearOperator``.

    Parameters
    ----------
    op : BlockToeplitz, its adjoint ``F.T``, or a NormalOperator
        The operator applied; shares its data (nothing is copied).

    Attributes
    ----------
    op : the operator given
    dims : (n_in, Nt)
        The model's shape: ``(Nm, Nt)`` for ``F``.
    dimsd : (n_out, Nt)
        The data's shape: ``(Nd, Nt)`` for ``F``.

    Notes
    -----
    ``matvec`` takes a flat model of length ``n_in*Nt`` (or ``(n_in*Nt, 1)``) and returns a flat
    datum; ``matmat`` of ``(n_in*Nt, k)`` runs one batched product of ``k`` right-hand sides.
    The products check their inputs as the operator's own do.
    """

    def __init__(self, op: _OperatorBase) -> None:
        if not isinstance(op, _OperatorBase):
            raise FFTMatvecTypeError(
                f"op must be a BlockToeplitz (or its adjoint or normal operator), got "
                f"{type(op).__name__}")
        self.op = op
        super().__init__(dtype=op.dtype, dims=op.model_shape, dimsd=op.data_shape,
                         clinear=True, explicit=False, name="F")

    def _matvec(self, x):
        return self.op.matvec(x.reshape(self.dims)).reshape(-1)

    def _rmatvec(self, x):
        return self.op.rmatvec(x.reshape(self.dimsd)).reshape(-1)

    def _matmat(self, X):
        return _columns(self.op.matmat(_batch(X, self.dims)))

    def _rmatmat(self, X):
        return _columns(self.op.rmatmat(_batch(X, self.dimsd)))


def _batch(X, dims):
    """``(n*Nt, k)`` columns -> ``(k, n, Nt)`` right-hand sides."""
    return X.T.reshape((X.shape[1],) + tuple(dims))


def _columns(Y):
    """``(k, n, Nt)`` results -> ``(n*Nt, k)`` columns."""
    return Y.reshape(Y.shape[0], -1).T
