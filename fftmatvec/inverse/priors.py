"""Gaussian priors on parameter batches: the covariance ``Γpr`` as an operator.

The posterior and the solvers of :mod:`fftmatvec.inverse` need three things of a prior:

* ``matmat(X)``: ``Γpr`` applied to a batch ``X`` of shape ``(k, Nm, Nt)`` (required);
* ``sqrt_matmat(Z)``: a factor ``S`` with ``S S^T = Γpr`` applied to a batch of white noise
  (optional: posterior samples; without it a dense Cholesky factor of ``Γpr`` is formed for
  small problems);
* ``diagonal()``: the pointwise prior variance ``(Nm, Nt)`` (optional: otherwise read off
  products with unit vectors).

Any object with ``matmat`` on ``(k, Nm, Nt)`` arrays qualifies, and so does a SciPy or cupyx
``LinearOperator`` of shape ``(Nm*Nt, Nm*Nt)`` (columns in space-outer, time-inner order).
:func:`as_prior` wraps either. Two priors are built in: :class:`DiagonalPrior` and the
separable space-by-time :class:`SeparablePrior`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import backend
from .._typing import Array
from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from ..operator import fft_length
from ._checks import real_array

__all__ = ["DiagonalPrior", "SeparablePrior", "as_prior"]

# Largest Nm*Nt for which a prior without ``sqrt_matmat`` is factored densely for sampling.
_DENSE_SQRT_LIMIT = 8192


class DiagonalPrior:
    """``Γpr = diag(variance)``: independent Gaussian parameters.

    Parameters
    ----------
    variance : float or (Nm, Nt) array
        Prior variances, ``> 0``. A scalar is broadcast to every parameter.

    Raises
    ------
    FFTMatvecTypeError
        ``variance`` is neither a number nor a real NumPy/CuPy array.
    FFTMatvecValueError
        A variance ``<= 0``, NaN or Inf, or an array that is not 2-D.
    """

    def __init__(self, variance: float | Array) -> None:
        if isinstance(variance, (bool, np.bool_)):
            raise FFTMatvecTypeError(
                f"variance must be a number or an (Nm, Nt) array, got {variance!r}")
        if isinstance(variance, (int, float, np.integer, np.floating)):
            v = float(variance)
            if not (math.isfinite(v) and v > 0):
                raise FFTMatvecValueError(f"variance must be finite and > 0, got {variance!r}")
            self.variance, self.xp = v, None
            return
        xp = real_array(variance, "variance", kinds="fiu")
        if variance.ndim != 2:
            raise FFTMatvecValueError(f"variance must be a scalar or an (Nm, Nt) array, got shape "
                                      f"{variance.shape}")
        if not bool((variance > 0).all()):
            raise FFTMatvecValueError("variance must be > 0 everywhere")
        self.variance, self.xp = xp.array(variance, dtype=np.float64, copy=True), xp

    def matmat(self, X: Array) -> Array:
        """``Γpr X`` for ``X`` of shape ``(k, Nm, Nt)``."""
        return X * self.variance

    def sqrt_matmat(self, Z: Array) -> Array:
        """``Γpr^{1/2} Z`` for white noise ``Z`` of shape ``(k, Nm, Nt)``."""
        xp = backend.get_array_module(Z, name="Z")
        return Z * (math.sqrt(self.variance) if self.xp is None else xp.sqrt(self.variance))

    def diagonal(self, shape: tuple[int, int] | None = None) -> Array:
        """The prior variances, ``(Nm, Nt)`` (``shape`` is needed for a scalar variance)."""
        if self.xp is None:
            return np.full(shape, self.variance)
        return self.variance


class SeparablePrior:
    """Separable space-by-time Gaussian prior ``Γpr = C_s ⊗ C_t``.

    For a parameter field ``X`` of shape ``(Nm, Nt)`` (space-outer, time-inner),
    ``Γpr X = C_s X C_t``: ``C_s`` ``(Nm, Nm)`` correlates the parameters in space, and
    ``C_t`` is the stationary (symmetric Toeplitz) covariance in time with
    ``C_t[s, t] = time_covariance[|s - t|]``, applied by FFT as a circular convolution of
    length ``L >= 2 Nt - 1`` (exact, like the block-Toeplitz products).

    Parameters
    ----------
    space : (Nm, Nm) array, sparse matrix, or LinearOperator
        Symmetric positive definite spatial covariance (NumPy/SciPy on the CPU, CuPy/cupyx on
        a GPU). Multiply by the pointwise variance here.
    time_covariance : (Nt,) array
        Autocovariance at lags ``0 .. Nt-1``; the Toeplitz matrix it defines must be positive
        definite (e.g. ``exp(-lag dt / length)``), checked once by a Cholesky factorisation.

    Raises
    ------
    FFTMatvecTypeError
        Arguments of the wrong type.
    FFTMatvecValueError
        Bad shapes, a non-positive lag-0 value, or a time covariance that is not positive
        definite.

    Notes
    -----
    ``sqrt_matmat`` uses ``S = L_s ⊗ L_t``, the Cholesky factors of ``C_s`` (formed densely:
    ``O(Nm^3)``, once, on first use) and of the ``Nt x Nt`` Toeplitz ``C_t``.
    """

    def __init__(self, space: Any, time_covariance: Array) -> None:
        c = time_covariance
        xp = real_array(c, "time_covariance", kinds="fiu")
        if c.ndim != 1 or c.size < 1:
            raise FFTMatvecValueError(
                f"time_covariance must be a 1-D (Nt,) array, got shape {c.shape}")
        if not float(c[0]) > 0:
            raise FFTMatvecValueError(
                f"time_covariance[0] (the variance) must be > 0, got {float(c[0])}")
        self.xp, self.nt = xp, int(c.size)
        c_host = np.asarray(c.get() if xp is not np else c, dtype=np.float64)
        import scipy.linalg

        try:  # positive definiteness of the Toeplitz matrix, and its factor for sampling
            self._lt = xp.asarray(scipy.linalg.cholesky(scipy.linalg.toeplitz(c_host), lower=True))
        except np.linalg.LinAlgError:
            raise FFTMatvecValueError(
                "time_covariance does not define a positive definite Toeplitz matrix") from None
        L = fft_length(self.nt)
        col = np.zeros(L)
        col[: self.nt] = c_host
        col[L - self.nt + 1:] = c_host[:0:-1]  # circulant embedding: lags -(Nt-1) .. -1
        self._L = L
        self._chat = xp.asarray(np.fft.rfft(col))
        self._space, self._space_kind, self.nm = self._check_space(space, xp)
        self._ls = None

    @staticmethod
    def _check_space(space, xp):
        shape = getattr(space, "shape", None)
        if shape is None or len(shape) != 2 or shape[0] != shape[1]:
            raise FFTMatvecValueError(f"space must be a square (Nm, Nm) matrix or operator, got "
                                      f"shape {shape}")
        if backend.is_cupy_array(space) or isinstance(space, np.ndarray):
            real_array(space, "space", xp, kinds="fiu")
            return xp.asarray(space, dtype=np.float64), "dense", int(shape[0])
        if hasattr(space, "tocsr") or hasattr(space, "matmat") or hasattr(space, "dot"):
            return space, "operator", int(shape[0])
        raise FFTMatvecTypeError(f"space must be an array, a sparse matrix or a LinearOperator, "
                                 f"got {type(space).__name__}")

    def _space_apply(self, X):
        """``C_s`` along axis 1 of ``X`` ``(k, Nm, Nt)``."""
        xp = self.xp
        k, nm, nt = X.shape
        if self._space_kind == "dense":
            return xp.matmul(self._space, X)
        Y = X.transpose(1, 0, 2).reshape(nm, k * nt)
        out = self._space @ Y
        return xp.asarray(out).reshape(nm, k, nt).transpose(1, 0, 2)

    def _time_apply(self, X):
        """``C_t`` along the time axis, by FFT."""
        xp = self.xp
        Xh = xp.fft.rfft(X, n=self._L, axis=-1)
        return xp.fft.irfft(Xh * self._chat, n=self._L, axis=-1)[..., : self.nt]

    def matmat(self, X: Array) -> Array:
        """``Γpr X`` for ``X`` of shape ``(k, Nm, Nt)``."""
        return self._time_apply(self._space_apply(X))

    def _space_factor(self):
        if self._ls is None:
            xp = self.xp
            S = self._space_dense()
            try:
                self._ls = xp.linalg.cholesky(0.5 * (S + S.T))
            except Exception as exc:
                raise FFTMatvecValueError(f"space is not positive definite ({exc})") from None
            if not bool(xp.isfinite(self._ls).all()):
                raise FFTMatvecValueError("space is not positive definite")
        return self._ls

    def _space_dense(self):
        if self._space_kind == "dense":
            return self._space
        return self.xp.asarray(self._space @ self.xp.eye(self.nm))

    def sqrt_matmat(self, Z: Array) -> Array:
        """``(L_s ⊗ L_t) Z`` for white noise ``Z`` of shape ``(k, Nm, Nt)``."""
        xp = self.xp
        return xp.matmul(xp.matmul(self._space_factor(), Z), self._lt.T)

    def diagonal(self, shape: tuple[int, int] | None = None) -> Array:
        """The pointwise prior variance ``diag(C_s) time_covariance[0]``, ``(Nm, Nt)``."""
        xp = self.xp
        ds = xp.diagonal(self._space_dense())
        c0 = float(xp.fft.irfft(self._chat, n=self._L)[0])
        return xp.broadcast_to(ds[:, None] * c0, (self.nm, self.nt)).copy()


class _Prior:
    """A prior with the three methods the algorithms use, on ``(k, Nm, Nt)`` batches."""

    def __init__(self, prior, nm: int, nt: int, xp):
        self.prior, self.nm, self.nt, self.xp = prior, nm, nt, xp
        self._linop = not hasattr(prior, "matmat") or _is_linear_operator(prior)
        self._sqrt = None
        if self._linop:
            shape = getattr(prior, "shape", None)
            if shape != (nm * nt, nm * nt):
                raise FFTMatvecValueError(
                    f"prior as a LinearOperator must have shape ({nm * nt}, {nm * nt}) "
                    f"(Nm*Nt squared), got {shape}")
        for attr in ("nm", "nt"):
            own = getattr(prior, attr, None)
            if isinstance(own, (int, np.integer)) and own != {"nm": nm, "nt": nt}[attr]:
                raise FFTMatvecValueError(f"prior has {attr}={own} but the operator {attr}="
                                          f"{ {'nm': nm, 'nt': nt}[attr] }")

    def matmat(self, X):
        xp = self.xp
        if self._linop:
            k = X.shape[0]
            Y = self.prior.matmat(X.reshape(k, -1).T)
            return xp.ascontiguousarray(xp.asarray(Y).T).reshape(k, self.nm, self.nt)
        Y = self.prior.matmat(X)
        if getattr(Y, "shape", None) != X.shape:
            raise FFTMatvecValueError(f"prior.matmat returned shape {getattr(Y, 'shape', None)} "
                                      f"for an input of shape {X.shape}")
        return Y

    def _dense(self, what: str):
        n = self.nm * self.nt
        if n > _DENSE_SQRT_LIMIT:
            raise FFTMatvecValueError(
                f"{what} of this prior needs a sqrt_matmat (or diagonal) method: it has none, and "
                f"Nm*Nt = {n} is too large (> {_DENSE_SQRT_LIMIT}) to form it densely")
        xp = self.xp
        G = self.matmat(xp.eye(n).reshape(n, self.nm, self.nt)).reshape(n, n)
        return 0.5 * (G + G.T)

    def sqrt_matmat(self, Z):
        if hasattr(self.prior, "sqrt_matmat"):
            return self.prior.sqrt_matmat(Z)
        xp = self.xp
        if self._sqrt is None:
            try:
                self._sqrt = xp.linalg.cholesky(self._dense("sampling"))
            except Exception as exc:
                raise FFTMatvecValueError(f"prior is not positive definite ({exc})") from None
        k = Z.shape[0]
        return (Z.reshape(k, -1) @ self._sqrt.T).reshape(Z.shape)

    def diagonal(self):
        if hasattr(self.prior, "diagonal") and not self._linop:
            return self.xp.asarray(self.prior.diagonal((self.nm, self.nt)))
        xp = self.xp
        return xp.diagonal(self._dense("the pointwise variance")).reshape(self.nm, self.nt).copy()


def _is_linear_operator(obj) -> bool:
    import scipy.sparse.linalg as spla

    if isinstance(obj, spla.LinearOperator):
        return True
    if backend.has_cupy:
        try:
            from cupyx.scipy.sparse.linalg import LinearOperator as CuLinearOperator
        except Exception:  # noqa: BLE001 - cupyx without its sparse module
            return False
        return isinstance(obj, CuLinearOperator)
    return False


def as_prior(prior: Any, nm: int, nt: int, xp: Any = np) -> _Prior:
    """``prior`` as the package's prior on ``(k, Nm, Nt)`` batches.

    Parameters
    ----------
    prior : object with ``matmat``, or LinearOperator
        An SPD covariance: ``matmat(X)`` on ``(k, Nm, Nt)`` arrays (optionally ``sqrt_matmat``
        and ``diagonal``), or a SciPy/cupyx ``LinearOperator`` of shape ``(Nm*Nt, Nm*Nt)``.
    nm, nt : int
        The operator's parameters and time steps.
    xp : module
        The operator's array module.

    Raises
    ------
    FFTMatvecTypeError
        ``prior`` has no ``matmat`` and is no LinearOperator.
    FFTMatvecValueError
        Its shape disagrees with ``(Nm*Nt, Nm*Nt)``.
    """
    if isinstance(prior, _Prior):
        return prior
    if not (hasattr(prior, "matmat") or _is_linear_operator(prior)):
        raise FFTMatvecTypeError(
            "prior must have a matmat(X) method on (k, Nm, Nt) arrays or be a SciPy/cupyx "
            f"LinearOperator of shape (Nm*Nt, Nm*Nt), got {type(prior).__name__}")
    return _Prior(prior, nm, nt, xp)
