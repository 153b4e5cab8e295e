"""Conjugate gradients written once for serial and distributed operators.

The only global operations CG needs are the operator and inner products: an operator with a
``dot(a, b)`` method (a distributed one, whose vectors are each rank's slice) supplies the
global inner product, any other uses ``xp.vdot``. The same lines thus solve ``F^T W F m = b``
on one process with :class:`~fftmatvec.NormalOperator` and on a grid with
:class:`~fftmatvec.distributed.DistributedNormalOperator`.
"""

from __future__ import annotations

import math

from .. import backend
from .._errors import FFTMatvecValueError

__all__ = ["cg"]


def cg(A, b, x0=None, *, rtol: float = 1e-10, maxiter: int | None = None, callback=None):
    """Solve ``A x = b`` for symmetric positive (semi)definite ``A``.

    Parameters
    ----------
    A : operator with ``matvec``; ``dot(a, b)`` if its vectors are distributed
    b : array
        Right-hand side (this rank's slice for a distributed ``A``).
    x0 : array, optional
        Initial guess (zeros by default).
    rtol : float
        Stop when ``||r|| <= rtol * ||b||``.
    maxiter : int, optional
        Most iterations (default: the size of ``b`` on this rank, at least 10).
    callback : callable, optional
        ``callback(x)`` after each iteration.

    Returns
    -------
    x : array
    info : dict
        ``iterations`` and ``residual`` (the final ``||r|| / ||b||``).
    """
    xp = backend.get_array_module(b, name="b")
    dot = getattr(A, "dot", None) or (lambda u, v: float(xp.vdot(u.reshape(-1), v.reshape(-1))))
    if not (rtol > 0):
        raise FFTMatvecValueError(f"rtol must be positive, got {rtol!r}")
    if maxiter is None:  # the global size: every rank must stop at the same iteration
        ones = xp.ones_like(b)
        maxiter = max(10, int(round(dot(ones, ones))))
    x = xp.zeros_like(b) if x0 is None else xp.array(x0, copy=True)
    r = b - A.matvec(x) if x0 is not None else xp.array(b, copy=True)
    p = xp.array(r, copy=True)
    rr = dot(r, r)
    bnorm = math.sqrt(max(dot(b, b), 0.0)) or 1.0
    it = 0
    while it < maxiter and math.sqrt(max(rr, 0.0)) > rtol * bnorm:
        q = A.matvec(p)
        pq = dot(p, q)
        if pq <= 0:
            break  # A is singular along p: nothing more to gain
        alpha = rr / pq
        x += alpha * p
        r -= alpha * q
        rr_new = dot(r, r)
        p *= rr_new / rr
        p += r
        rr = rr_new
        it += 1
        if callback is not None:
            callback(x)
    return x, {"iterations": it, "residual": math.sqrt(max(rr, 0.0)) / bnorm}
