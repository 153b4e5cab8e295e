"""Stage-level building blocks of a product with a :class:`~fftmatvec.BlockToeplitz`, the same
functions on the CPU (NumPy/SciPy) and on a GPU (the package's kernels), each in its stage's
precision:

* :func:`pad_fft`: stages 1 and 2 of a chunk of input rows, into their spectrum;
* :func:`stage3_block`: stage 3 of one block of ``Khat`` (sensors ``rows`` x parameters
  ``cols``), forward or adjoint, into (``beta=0``) or added to (``beta=1``) an output
  spectrum, with the launches the plan chooses for a product of that block's shape;
* :func:`ifft_unpad`: stages 4 and 5 of a chunk of output spectra (times a diagonal weight).

Composed by hand (the spectra of the input's row chunks, the stage-3 blocks summed over the
reduction's chunks, the inverse of the output's chunks) they give the whole product to
rounding, for a pipeline that splits a product across devices, ranks or streams.

The stored ``Khat`` of an operator with a reduced stage is scaled by ``2**-kernel_exponent``
(:attr:`~fftmatvec.BlockToeplitz.kernel_exponent`): :func:`ifft_unpad` undoes it, exactly (a
power of two). The input is taken as given: an input whose largest magnitude lies far from
one may over- or underflow in a reduced stage, which the whole product's own scaling avoids.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from . import backend
from ._errors import FFTMatvecTypeError, FFTMatvecValueError
from ._typing import Array
from .operator import BlockToeplitz

__all__ = ["pad_fft", "stage3_block", "ifft_unpad"]


def _span(value, n: int, name: str) -> tuple[int, int]:
    """``(start, stop)`` of a ``slice`` or ``(start, stop)`` pair within ``0..n``."""
    if isinstance(value, slice):
        if value.step not in (None, 1):
            raise FFTMatvecValueError(f"{name} must be a contiguous range, got step "
                                      f"{value.step}")
        start, stop, _ = value.indices(n)
    elif isinstance(value, tuple) and len(value) == 2:
        start, stop = (int(v) for v in value)
    else:
        raise FFTMatvecTypeError(f"{name} must be a slice or a (start, stop) pair, got "
                                 f"{type(value).__name__}")
    if not 0 <= start < stop <= n:
        raise FFTMatvecValueError(f"{name} must be a non-empty range within 0..{n}, got "
                                  f"{start}:{stop}")
    return start, stop


def _array3(F, a, name: str, rows: int | None, last: int):
    """``a`` checked: an array of the operator's module, ``(k, rows, last)``."""
    xp = backend.get_array_module(a, name=name)
    if xp is not F._xp:
        raise FFTMatvecTypeError(f"{name} must be a {F._xp.__name__} array like the operator's "
                                 f"kernel, got a {xp.__name__} array")
    if a.ndim != 3 or a.shape[2] != last or (rows is not None and a.shape[1] != rows):
        want = f"(k, {'n' if rows is None else rows}, {last})"
        raise FFTMatvecValueError(f"{name} must have shape {want}, got {a.shape}")
    return a


def pad_fft(F: BlockToeplitz, x: Array) -> Array:
    """Stages 1 and 2 of a chunk of input rows: ``x`` ``(k, n, Nt)`` (parameter rows for a
    forward product, sensor rows for an adjoint) cast to stage 1's precision, zero-padded to
    ``L`` and transformed in stage 2's: the spectrum ``(k, n, Nf)`` in stage 2's complex
    dtype.

    Parameters
    ----------
    F : BlockToeplitz
        The operator.
    x : numpy.ndarray or cupy.ndarray
        ``(k, n, Nt)``, the operator's array module.

    Returns
    -------
    ndarray
        ``(k, n, Nf)``.
    """
    x = _array3(F, x, "x", None, F.nt)
    with F._on_device():
        return F.fft(F.broadcast_and_pad(x))


def stage3_block(F: BlockToeplitz, xhat: Array, yhat: Array, rows: slice | tuple[int, int],
                 cols: slice | tuple[int, int], adjoint: bool = False,
                 beta: Literal[0, 1] = 0) -> Array:
    """Stage 3 of the block ``Khat[rows, cols]`` (sensors ``rows``, parameters ``cols``):
    forward ``yhat = beta yhat + Khat[rows, cols] xhat``, ``xhat`` the spectra of parameter rows
    ``cols`` and ``yhat`` of sensor rows ``rows``; adjoint ``yhat = beta yhat + Khat[rows,
    cols]^H xhat``, ``xhat`` of sensor rows ``rows`` and ``yhat`` of parameter rows ``cols``.
    On a GPU with the package's kernels the block runs the launches that
    :func:`~fftmatvec.gpu.planning.make_plan` chooses for a product of its shape.

    Parameters
    ----------
    F : BlockToeplitz
        The operator.
    xhat : ndarray
        ``(k, n_in, Nf)`` in stage 2's complex dtype (as :func:`pad_fft` gives it).
    yhat : ndarray
        ``(k, n_out, Nf)`` in stage 4's complex dtype, C-contiguous; written (``beta=0``) or
        added to (``beta=1``).
    rows, cols : slice or (start, stop)
        The block's sensors and parameters.
    adjoint : bool
        ``Khat^H``.
    beta : {0, 1}
        Overwrite or accumulate.

    Returns
    -------
    ndarray
        ``yhat``.
    """
    i0, i1 = _span(rows, F.nd, "rows")
    j0, j1 = _span(cols, F.nm, "cols")
    if beta not in (0, 1) or isinstance(beta, bool):
        raise FFTMatvecValueError(f"beta must be 0 or 1, got {beta!r}")
    n_in, n_out = (i1 - i0, j1 - j0) if adjoint else (j1 - j0, i1 - i0)
    xhat = _array3(F, xhat, "xhat", n_in, F.nf)
    yhat = _array3(F, yhat, "yhat", n_out, F.nf)
    out_dtype = F.precision.complex_dtype("ifft")
    if yhat.dtype != out_dtype or not yhat.flags.c_contiguous or yhat.shape[0] != xhat.shape[0]:
        raise FFTMatvecValueError(f"yhat must be a C-contiguous {np.dtype(out_dtype).name} "
                                  f"array of shape {(xhat.shape[0], n_out, F.nf)}, got "
                                  f"{yhat.dtype} {yhat.shape}")
    return _stage3_unchecked(F, xhat, yhat, i0, i1, j0, j1, bool(adjoint), beta)


def _stage3_unchecked(F: BlockToeplitz, xhat, yhat, i0: int, i1: int, j0: int, j1: int,
                      adjoint: bool, beta: int):
    """:func:`stage3_block` on arguments already checked (the distributed pipeline's, which it
    made itself): the block ``Khat[i0:i1, j0:j1]``, ``xhat`` and ``yhat`` of its shapes and
    dtypes, ``beta`` 0 or 1."""
    eng = F._engine
    with F._on_device():
        if eng.name == "kernels":
            from .gpu.blocks import stage3_into

            return stage3_into(eng.block(i0, i1, j0, j1), xhat, yhat, adjoint, beta)
        return _stage3_matmul(eng, xhat, yhat, i0, i1, j0, j1, adjoint, beta)


def _stage3_matmul(eng, xhat, yhat, i0, i1, j0, j1, adjoint: bool, beta: int):
    """:func:`stage3_block` through the array module (``Khat`` stored ``(Nf, Nd, Nm)``)."""
    xp = eng.xp
    cd = eng.prec.sbgemv_dtype
    x = xhat.astype(cd, copy=False).transpose(2, 1, 0)  # (Nf, n_in, k)
    y = xp.empty((eng.nf, yhat.shape[1], xhat.shape[0]), dtype=cd)
    for f0, f1, kh in eng._blocks():
        kb = kh[:, i0:i1, j0:j1]
        if adjoint:  # Khat^H x = conj(Khat^T conj(x))
            xp.matmul(xp.swapaxes(kb, -1, -2), x[f0:f1].conj(), out=y[f0:f1])
            xp.conjugate(y[f0:f1], out=y[f0:f1])
        else:
            xp.matmul(kb, x[f0:f1], out=y[f0:f1])
    r = y.transpose(2, 1, 0).astype(yhat.dtype, copy=False)
    if beta:
        yhat += r
    else:
        yhat[...] = r
    return yhat


def ifft_unpad(F: BlockToeplitz, yhat: Array, weight: Array | None = None) -> Array:
    """Stages 4 and 5 of a chunk of output rows: the inverse FFT of ``yhat`` ``(k, n, Nf)`` in
    stage 4's precision, its first ``Nt`` samples rounded to stage 5's and returned in the
    operator's dtype, times the stored ``Khat``'s power of two undone, times ``weight``
    ``(n, Nt)`` if given. ``yhat`` may be overwritten.

    Parameters
    ----------
    F : BlockToeplitz
        The operator.
    yhat : ndarray
        ``(k, n, Nf)``, as :func:`stage3_block` writes it.
    weight : ndarray, optional
        ``(n, Nt)``, a diagonal weight of the chunk's rows.

    Returns
    -------
    ndarray
        ``(k, n, Nt)`` in the operator's dtype.
    """
    yhat = _array3(F, yhat, "yhat", None, F.nf)
    if weight is not None:
        weight = _array3(F, weight[None] if getattr(weight, "ndim", 0) == 2 else weight,
                         "weight", yhat.shape[1], F.nt)[0]
    kexp = F._kexp
    with F._on_device():
        y = F.ifft(yhat)
        if F._xp is np:
            return F.unpad_and_reduce(y, weight=weight, exponent=kexp)
        out = F.unpad_and_reduce(y)
        if kexp:
            F._xp.ldexp(out, kexp, out=out)
        if weight is not None:
            out *= weight
        return out
