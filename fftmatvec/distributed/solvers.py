"""Conjugate gradients written once for serial and distributed operators.

The only global operations CG needs are the operator and inner products: an operator with a
``dot(a, b)`` method (a distributed one, whose vectors are each rank's slice) supplies the
global inner product, any other uses ``xp.vdot``. The same lines thus solve ``F^T W F m = b``
on one process with :class:`~fftmatvec.NormalOperator` and on a grid with
:class:`~fftmatvec.distributed.DistributedNormalOperator`.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable

from .. import backend
from .._typing import Array
from .._errors import FFTMatvecTypeError, FFTMatvecValueError

__all__ = ["cg"]


def _check_args(A, rtol, maxiter, callback):
    if not callable(getattr(A, "matvec", None)):
        raise FFTMatvecTypeError(
            f"A must have a matvec method (an fftmatvec operator), got {type(A).__name__}")
    shape = getattr(A, "shape", None)
    if shape is not None and (len(shape) != 2 or shape[0] != shape[1]):
        raise FFTMatvecValueError(
            f"A must be square (conjugate gradients solve A x = b for a symmetric A, such as "
            f"F.normal()), got shape {tuple(shape)}")
    if isinstance(rtol, bool) or not isinstance(rtol, numbers.Real):
        raise FFTMatvecTypeError(f"rtol must be a real number, got {rtol!r}")
    if not (math.isfinite(float(rtol)) and rtol > 0):
        raise FFTMatvecValueError(f"rtol must be positive and finite, got {rtol!r}")
    if maxiter is not None:
        if isinstance(maxiter, bool) or not isinstance(maxiter, numbers.Integral):
            raise FFTMatvecTypeError(f"maxiter must be a positive integer or None, got {maxiter!r}")
        if maxiter < 1:
            raise FFTMatvecValueError(f"maxiter must be a positive integer or None, got {maxiter}")
    if callback is not None and not callable(callback):
        raise FFTMatvecTypeError(f"callback must be callable or None, got {type(callback).__name__}")
    return float(rtol), None if maxiter is None else int(maxiter)


def cg(A: Any, b: Array, x0: Array | None = None, *, rtol: float = 1e-10,
       maxiter: int | None = None,
       callback: Callable[[Array], object] | None = None) -> tuple[Array, int]:
    """Solve ``A x = b`` for symmetric positive (semi)definite ``A``.

    Parameters
    ----------
    A : operator with ``matvec``; ``dot(a, b)`` if its vectors are distributed
        Square (``A.shape[0] == A.shape[1]`` where it has a shape), e.g. ``F.normal(w)``.
    b : array
        Right-hand side (this rank's slice for a distributed ``A``).
    x0 : array, optional
        Initial guess (zeros by default).
    rtol : real number
        Stop when ``||r|| <= rtol * ||b||``; positive and finite.
    maxiter : int, optional
        Most iterations (default: the global size of ``b``, at least 10).
    callback : callable, optional
        ``callback(x)`` after each iteration.

    Returns
    -------
    x : array
    info : int
        SciPy's convention (``scipy.sparse.linalg.cg``): 0 when ``||r|| <= rtol * ||b||``
        was reached, else the number of iterations run (at least 1), either ``maxiter`` or
        the iteration at which ``A`` turned out singular or indefinite along the search
        direction (``p^T A p <= 0``).

    Warns
    -----
    RuntimeWarning
        When it did not converge (``info > 0``), with the final ``||r|| / ||b||``.

    Raises
    ------
    FFTMatvecDistributedError
        For a distributed ``A``, on every rank, when an argument was wrong on some ranks only
        (naming them and the causes), or the ranks passed different ``rtol``, ``maxiter`` or
        one ``x0`` and not another.
    FFTMatvecTypeError
        ``A`` without ``matvec``, a non-numeric ``rtol``, a non-integer ``maxiter``.
    FFTMatvecValueError
        A non-square ``A``, ``rtol`` not positive and finite, ``maxiter < 1``.
    """
    grid = getattr(A, "grid", None)
    if grid is None:
        rtol, maxiter = _check_args(A, rtol, maxiter, callback)
    else:  # a distributed A: a bad argument on one rank raises on every rank
        from .comm import sync

        exc = None
        try:
            rtol, maxiter = _check_args(A, rtol, maxiter, callback)
        except Exception as e:
            exc = e
        sync(grid.base_comm, "cg", exc, f"(rank {grid.rank})")
        # the ranks stop together only with the same tolerance and iterations, and start
        # together only if all or none compute the initial residual
        seen = grid.base_comm.allgather((rtol, maxiter, x0 is None))
        if len(set(seen)) > 1:
            from .._errors import FFTMatvecDistributedError

            raise FFTMatvecDistributedError(
                "cg: the ranks passed different rtol, maxiter or x0 (given or not): "
                + ", ".join(f"rank {q}: rtol={s[0]:g} maxiter={s[1]} x0={'no' if s[2] else 'yes'}"
                            for q, s in enumerate(seen)))
    xp = backend.get_array_module(b, name="b")
    dot = getattr(A, "dot", None) or (lambda u, v: float(xp.vdot(u.reshape(-1), v.reshape(-1))))
    if maxiter is None:  # the global size: every rank must stop at the same iteration
        ones = xp.ones_like(b)
        maxiter = max(10, int(round(dot(ones, ones))))
    x = xp.zeros_like(b) if x0 is None else xp.array(x0, copy=True)
    r = b - A.matvec(x) if x0 is not None else xp.array(b, copy=True)
    p = xp.array(r, copy=True)
    rr = dot(r, r)
    bnorm = math.sqrt(max(dot(b, b), 0.0)) or 1.0
    it = 0
    converged = math.sqrt(max(rr, 0.0)) <= rtol * bnorm
    while it < maxiter and not converged:
        q = A.matvec(p)
        pq = dot(p, q)
        if pq <= 0:
            break  # A is singular or indefinite along p: nothing more to gain
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
        converged = math.sqrt(max(rr, 0.0)) <= rtol * bnorm
    if converged:
        return x, 0
    residual = math.sqrt(max(rr, 0.0)) / bnorm
    why = (f"maxiter={maxiter} reached" if it >= maxiter
           else f"A is singular or indefinite along the search direction at iteration {it + 1}")
    warnings.warn(f"cg did not converge: ||r|| / ||b|| = {residual:.3g} > rtol = {rtol:g} "
                  f"after {it} iteration(s) ({why})", RuntimeWarning, stacklevel=2)
    return x, max(it, 1)
