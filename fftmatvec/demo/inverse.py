"""The Bayesian linear inverse problem: synthetic truth, noisy data, smoothness prior, MAP by CG.

With Gaussian noise ``d = F m + e``, ``e ~ N(0, sigma^2 I)``, and a Gaussian prior of precision
``R``, the maximum a posteriori (MAP) source solves the Gauss-Newton system

.. math::

    (F^T \\Gamma^{-1} F + R)\\, m = F^T \\Gamma^{-1} d, \\qquad \\Gamma = \\sigma^2 I,

which conjugate gradients solve with one block-Toeplitz forward and one adjoint product per
iteration (``F.normal(1/sigma**2)``), preconditioned by the prior (``R^{-1}``): the
prior-preconditioned Hessian is the identity plus a compact (fast-decaying) data term, so the
iteration count depends on how informative the data are, not on the grid.

Everything here is written once against ``xp`` (NumPy or CuPy), so the solve runs where the
operator lives.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass

import numpy as np

from .. import backend
from .._errors import FFTMatvecValueError

__all__ = [
    "SmoothnessPrior",
    "MapResult",
    "true_source",
    "noisy_observations",
    "solve_map",
]


def _neumann_laplacian_eig(n: int, h: float):
    """Eigen-decomposition of the 1-D Neumann Laplacian ``-D_xx`` on ``n`` cells of width ``h``.

    Returns ``(Q, lam)``: orthonormal eigenvectors as the columns of ``Q`` ``(n, n)`` and their
    eigenvalues ``lam`` ``(n,)``, ``lam >= 0`` (``lam[0] = 0``, the constant).
    """
    T = np.zeros((n, n))
    if n > 1:
        i = np.arange(n - 1)
        T[i, i + 1] = T[i + 1, i] = -1.0
        T[np.arange(n), np.arange(n)] = 2.0
        T[0, 0] = T[-1, -1] = 1.0
    lam, Q = np.linalg.eigh(T / h**2)
    return Q, np.maximum(lam, 0.0)


def _mode_product(xp, X, Q, axis: int):
    """Contract axis ``axis`` of ``X`` with the first axis of ``Q``: ``sum_i X[..i..] Q[i, a]``."""
    return xp.moveaxis(xp.tensordot(X, Q, axes=([axis], [0])), -1, axis)


class SmoothnessPrior:
    """Gaussian smoothness prior on a source that is piecewise constant in space and time.

    The precision operator is

    .. math::

        R = \\sigma_m^{-2} \\left( I + \\ell_s^2 (-\\Delta_s) \\otimes I_t
            + \\ell_t^2\\, I_s \\otimes (-\\partial_{tt}) \\right),

    with ``-Delta_s`` the 5-point Neumann Laplacian on the ``ns x ns`` source cells (spacing
    ``1/ns``) and ``-d_tt`` the 1-D Neumann Laplacian on the ``Nt`` steps (spacing ``dt``): a
    Laplacian applied at every time step, a temporal one at every cell, and a mass term that
    makes ``R`` symmetric positive definite. ``R`` is a Kronecker sum of 1-D operators, so it
    is applied and inverted exactly in their eigenbases (three small dense transforms), on NumPy
    or CuPy.

    Parameters
    ----------
    ns : int
        Source cells per side (``Nm = ns*ns``, flat index ``cy*ns + cx``).
    nt : int
        Time steps.
    dt : float
        Time step.
    sigma : float
        Pointwise prior standard deviation scale ``sigma_m``.
    length_space, length_time : float
        Correlation lengths ``l_s`` (space units) and ``l_t`` (time units).
    xp : module, default numpy
        ``numpy`` or ``cupy``: where vectors live.

    Attributes
    ----------
    shape : (int, int)
        ``(Nm*Nt, Nm*Nt)``.
    """

    def __init__(self, ns: int, nt: int, dt: float, *, sigma: float, length_space: float,
                 length_time: float, xp=np):
        if ns < 1 or nt < 1:
            raise FFTMatvecValueError(f"ns and nt must be >= 1, got ns={ns}, nt={nt}")
        if not (sigma > 0 and length_space >= 0 and length_time >= 0 and dt > 0):
            raise FFTMatvecValueError(
                "sigma and dt must be > 0 and the lengths >= 0, got "
                f"sigma={sigma}, length_space={length_space}, length_time={length_time}, dt={dt}"
            )
        self.ns, self.nt, self.xp = ns, nt, xp
        Qs, lam_s = _neumann_laplacian_eig(ns, 1.0 / ns)
        Qt, lam_t = _neumann_laplacian_eig(nt, dt)
        eig = (
            1.0
            + length_space**2 * (lam_s[:, None, None] + lam_s[None, :, None])
            + length_time**2 * lam_t[None, None, :]
        ) / sigma**2  # (ns, ns, nt): eigenvalues of R, all >= 1/sigma^2
        self._Qs, self._Qt = xp.asarray(Qs), xp.asarray(Qt)
        self._eig = xp.asarray(eig)

    @property
    def shape(self) -> tuple[int, int]:
        n = self.ns * self.ns * self.nt
        return (n, n)

    def _transform(self, X, inverse: bool):
        """The three 1-D transforms along the last three axes ``(ns, ns, Nt)`` of ``X``
        (``sum_i X[..i..] Q[i, a]`` on each), as batched matrix products."""
        xp = self.xp
        Qs, Qt = (self._Qs.T, self._Qt.T) if inverse else (self._Qs, self._Qt)
        shape = X.shape
        ns, nt = self.ns, self.nt
        Y = X.reshape(-1, ns, ns * nt)
        Y = xp.matmul(Qs.T, Y).reshape(-1, ns, ns, nt)  # first space axis
        Y = xp.matmul(Qs.T, Y)  # second space axis, every (batch, first-axis) slice
        return xp.matmul(Y, Qt).reshape(shape)  # time

    def _spectral(self, x, scale):
        shape = x.shape
        X = x.reshape(self.ns, self.ns, self.nt)
        Z = self._transform(X, inverse=False) * scale
        return self._transform(Z, inverse=True).reshape(shape)

    def apply(self, x):
        """``R x``.

        Parameters
        ----------
        x : (Nm, Nt) or (Nm*Nt,) array
            On this prior's array module.

        Returns
        -------
        array of the shape of ``x``
        """
        return self._spectral(x, self._eig)

    def solve(self, x):
        """``R^{-1} x`` (the prior covariance applied to ``x``); shapes as :meth:`apply`."""
        return self._spectral(x, 1.0 / self._eig)

    def matmat(self, X):
        """``R^{-1} X``, the prior covariance on a batch ``X`` ``(k, Nm, Nt)``: the prior of
        :mod:`fftmatvec.inverse` (its ``matmat`` protocol)."""
        k = X.shape[0]
        Z = self._transform(X.reshape(k, self.ns, self.ns, self.nt), inverse=False) / self._eig
        return self._transform(Z, inverse=True).reshape(X.shape)

    def sqrt_matmat(self, Z):
        """``R^{-1/2} Z`` for white noise ``Z`` ``(k, Nm, Nt)``: ``S`` with ``S S^T = R^{-1}``."""
        k = Z.shape[0]
        Y = self._transform(Z.reshape(k, self.ns, self.ns, self.nt), inverse=False)
        return self._transform(Y / self.xp.sqrt(self._eig), inverse=True).reshape(Z.shape)

    def diagonal(self, shape=None):
        """The pointwise prior variance ``diag(R^{-1})``, ``(Nm, Nt)``."""
        xp = self.xp
        Qs2, Qt2 = self._Qs**2, self._Qt**2
        d = _mode_product(xp, _mode_product(xp, _mode_product(xp, 1.0 / self._eig, Qs2.T, 0),
                                            Qs2.T, 1), Qt2.T, 2)
        return d.reshape(self.ns * self.ns, self.nt)

    def sample(self, rng) -> np.ndarray:
        """A draw ``R^{-1/2} z`` from the prior, ``(Nm, Nt)`` on this prior's array module."""
        xp = self.xp
        z = xp.asarray(rng.standard_normal((self.ns, self.ns, self.nt)))
        X = self._transform(z, inverse=True) / xp.sqrt(self._eig)  # white in the eigenbasis
        return self._transform(X, inverse=False).reshape(self.ns * self.ns, self.nt)


def true_source(centres, nt: int, t_final: float = 1.0) -> np.ndarray:
    """A smooth synthetic source: three Gaussian plumes that switch on and off smoothly.

    Parameters
    ----------
    centres : (Nm, 2) array
        Coordinates ``(x, y)`` of the source cells.
    nt : int
        Time steps; the value at step ``t`` is taken at time ``(t + 1) * t_final / nt``.
    t_final : float
        Length of the time window.

    Returns
    -------
    (Nm, Nt) float64 array
        Non-negative, peak about 1.
    """
    centres = np.asarray(centres, dtype=float)
    t = (np.arange(nt) + 1.0) / nt  # time as a fraction of the window
    plumes = (  # (x, y, width, amplitude, onset time, pulse width, drift x, drift y)
        (0.30, 0.30, 0.09, 1.0, 0.25, 0.12, 0.15, 0.00),
        (0.68, 0.62, 0.11, 0.8, 0.55, 0.15, -0.10, 0.05),
        (0.35, 0.72, 0.07, 0.6, 0.40, 0.30, 0.00, -0.10),
    )
    m = np.zeros((centres.shape[0], nt))
    for x0, y0, w, a, tau, s, vx, vy in plumes:
        cx = x0 + vx * (t - tau)  # the plume drifts slowly while it is on
        cy = y0 + vy * (t - tau)
        r2 = (centres[:, :1] - cx[None]) ** 2 + (centres[:, 1:] - cy[None]) ** 2
        m += a * np.exp(-r2 / (2 * w**2)) * np.exp(-((t - tau) ** 2) / (2 * s**2))[None]
    return m


def noisy_observations(d_clean, noise_level: float, rng):
    """Add white Gaussian noise of standard deviation ``noise_level * RMS(d_clean)``.

    Parameters
    ----------
    d_clean : (Nd, Nt) array
    noise_level : float
        Relative noise level, ``> 0``.
    rng : numpy.random.Generator

    Returns
    -------
    d_obs : (Nd, Nt) array
        Same array module as ``d_clean``.
    sigma : float
        The noise standard deviation.
    """
    if not noise_level > 0:
        raise FFTMatvecValueError(f"noise_level must be > 0, got {noise_level}")
    xp = backend.get_array_module(d_clean, name="d_clean")
    sigma = float(noise_level * xp.sqrt(xp.mean(d_clean**2)))
    noise = xp.asarray(rng.standard_normal(d_clean.shape))
    return d_clean + sigma * noise, sigma


@dataclass
class MapResult:
    """Outcome of :func:`solve_map`.

    Attributes
    ----------
    m : (Nm, Nt) array
        The MAP source, on the operator's array module.
    iterations : int
        CG iterations (each one ``F`` and one ``F^T`` product and one prior solve).
    converged : bool
        Whether CG reached the tolerance within ``maxiter``.
    seconds : float
        Wall time of the solve.
    """

    m: object
    iterations: int
    converged: bool
    seconds: float


def _cg_function(xp):
    if xp is np:
        from scipy.sparse.linalg import LinearOperator, cg
    else:
        from cupyx.scipy.sparse.linalg import LinearOperator, cg
    return LinearOperator, cg


def solve_map(F, d_obs, sigma: float, prior: SmoothnessPrior, *, rtol: float = 1e-8,
              maxiter: int = 500, callback=None) -> MapResult:
    """MAP source by prior-preconditioned CG on ``(F^T F / sigma^2 + R) m = F^T d / sigma^2``.

    Parameters
    ----------
    F : BlockToeplitz
        The parameter-to-observable map (any precision), NumPy or CuPy.
    d_obs : (Nd, Nt) array
        Observations, on ``F``'s array module.
    sigma : float
        Noise standard deviation (``Gamma = sigma^2 I``).
    prior : SmoothnessPrior
        Prior precision ``R`` on ``F``'s array module.
    rtol : float, default 1e-8
        Relative residual tolerance of CG.
    maxiter : int, default 500
        Iteration cap.
    callback : callable, optional
        Called with no argument after every iteration (progress).

    Returns
    -------
    MapResult

    Notes
    -----
    ``scipy.sparse.linalg.cg`` on the CPU, ``cupyx.scipy.sparse.linalg.cg`` on the GPU; the
    Hessian is a ``LinearOperator`` whose matvec is one ``F.normal(1/sigma**2)`` product plus
    one prior application, and the preconditioner is ``R^{-1}``.
    """
    xp = F.xp
    if not sigma > 0:
        raise FFTMatvecValueError(f"sigma must be > 0, got {sigma}")
    LinearOperator, cg = _cg_function(xp)
    weight = 1.0 / sigma**2
    normal = F.normal(weight)  # F^T Gamma^-1 F, applied with two block-Toeplitz products
    n = F.nm * F.nt

    def hessian(v):
        v1 = v.reshape(-1)
        return (normal.matvec(v1) + prior.apply(v1)).reshape(v.shape)

    def precond(v):
        return prior.solve(v.reshape(-1)).reshape(v.shape)

    H = LinearOperator((n, n), matvec=hessian, dtype=np.float64)
    M = LinearOperator((n, n), matvec=precond, dtype=np.float64)
    b = weight * F.rmatvec(d_obs).reshape(-1)
    iterations = 0

    def count(_xk):
        nonlocal iterations
        iterations += 1
        if callback is not None:
            callback()

    params = inspect.signature(cg).parameters
    tol_kw = {"rtol": rtol} if "rtol" in params else {"tol": rtol}
    if "atol" in params:
        tol_kw["atol"] = 0.0
    start = time.perf_counter()
    x, info = cg(H, b, x0=xp.zeros_like(b), maxiter=maxiter, M=M, callback=count, **tol_kw)
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()
    seconds = time.perf_counter() - start
    return MapResult(m=x.reshape(F.nm, F.nt), iterations=iterations, converged=int(info) == 0,
                     seconds=seconds)
