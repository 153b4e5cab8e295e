"""MAP estimate in parameter space: prior-preconditioned CG in mixed precision.

The MAP point ``m = m_pr + x`` solves the Gauss-Newton system

.. math::

    H x = b, \\qquad H = F^T Γ_{noise}^{-1} F + Γ_{pr}^{-1}, \\qquad
    b = F^T Γ_{noise}^{-1} (d - F m_{pr}).

Conjugate gradients preconditioned by ``Γpr`` need ``Γpr`` only, never its inverse: the
search direction ``p`` is a combination of ``Γpr r`` (``r`` the residuals), so ``Γpr^{-1} p``
is the same combination of the ``r`` and is carried along, and so is ``Γpr^{-1} x``.

Mixed precision with iterative refinement: the outer loop computes the true residual
``r = b - H x`` with float64 (``ddddd``) products; an inner CG solves ``H δ = r`` to a modest
tolerance with products in a reduced precision; ``x += δ``. Refinement converges while the
inner products' relative error ``eps`` times the condition number of the prior-preconditioned
Hessian stays below one. The inner CG estimates that condition number from its own
coefficients (the Lanczos tridiagonal matrix), and the outer loop watches the contraction of
the true residual: where ``eps * cond >= 1``, or a refinement gains less than a factor 2, the
precision is raised (next front point, up to ``ddddd``). Convergence is only ever declared on
the float64 residual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from .._typing import Array
from ..distributed.operator import DistributedBlockToeplitz
from ..operator import BlockToeplitz, _resolve_precision
from ..precision import PrecisionConfig
from ._checks import data_batch, noise_variances, param_vector
from ._maps import Maps
from .priors import as_prior

__all__ = ["MapInfo", "map_cg"]

# Relative errors the reduced inner products are chosen for with precision="auto", from the
# cheapest: the tuning tables' (or the a-priori model's) fastest configuration within each.
_AUTO_RTOLS = (1e-5,)
# The inner solve's tolerance (relative to its right-hand side) in a reduced precision is this
# many times the products' relative error, and at least the outer target needs.
_INNER_FACTOR = 100.0
# A refinement that reduces the float64 residual by less than this factor counts as stagnating.
_STAGNATION = 0.5
# Inner iterations between two condition-number estimates.
_COND_EVERY = 5


@dataclass
class MapInfo:
    """What :func:`map_cg` did.

    Attributes
    ----------
    converged : bool
        The float64 error bound (:attr:`error_bounds`) reached ``rtol``.
    iterations : int
        Inner CG iterations, all precisions together.
    refinements : int
        Outer steps (float64 residuals computed after the first).
    products : dict
        Precision -> products of ``F`` or ``F^T`` (one per vector each) in that precision.
    khat_bytes : int
        ``Khat`` bytes read by all products (each product reads its precision's ``Khat`` once).
    residuals : list of float
        Float64 relative residual ``|r|_Γpr / |b|_Γpr`` after each outer step (the first is 1).
    error_bounds : list of float
        After each outer step, ``|r|_Γpr / |x|_Γpr^-1``: a bound on the relative error of
        ``x = m - m_pr`` in the norm ``|v|_Γpr^-1 = sqrt(v^T Γpr^-1 v)`` (the
        prior-preconditioned Hessian's eigenvalues are at least 1).
    precisions : list of str
        Precision of each refinement's inner solve.
    cond_estimates : list of float
        The inner solves' estimates of the prior-preconditioned Hessian's condition number.
    raised : list of str
        Why the precision was raised, once per raise.
    stopped : str
        Why the refinement stopped short of ``rtol`` (empty when converged or when
        ``maxiter`` or ``max_refinements`` ran out).
    """

    converged: bool = False
    iterations: int = 0
    refinements: int = 0
    products: dict = field(default_factory=dict)
    khat_bytes: int = 0
    residuals: list = field(default_factory=list)
    error_bounds: list = field(default_factory=list)
    precisions: list = field(default_factory=list)
    cond_estimates: list = field(default_factory=list)
    raised: list = field(default_factory=list)
    stopped: str = ""


def _eps(letters: str, nm: int) -> float:
    """The a-priori relative error of one product in ``letters``."""
    from ..tuning.select import model_error

    return model_error(letters, nm)


def _cond_estimate(alphas, betas) -> float:
    """Condition number of the Lanczos tridiagonal matrix of CG's coefficients."""
    from scipy.linalg import eigvalsh_tridiagonal

    a = np.asarray(alphas)
    b = np.asarray(betas[: len(a) - 1])
    diag = 1.0 / a
    diag[1:] += b / a[:-1]
    off = np.sqrt(b) / a[:-1]
    lam = eigvalsh_tridiagonal(diag, off)
    return float(lam[-1] / lam[0]) if lam[0] > 0 else math.inf


class _System:
    """``H`` and its pieces on one array module; counts the products per precision."""

    def __init__(self, maps64, prior, weight, nm, nt):
        self.maps64, self.prior, self.weight = maps64, prior, weight
        self.nm, self.nt = nm, nt
        self.levels: dict = {}

    def maps(self, letters):
        if letters not in self.levels:
            self.levels[letters] = self.maps64.with_precision(letters)
        return self.levels[letters]

    def misfit(self, maps, X):
        """``F^T W F X`` in ``maps``' precision."""
        return maps.adjoint(self.weight * maps.forward(X))


def _inner(system, letters, r, tol, maxit, info):
    """PCG on ``H δ = r`` with products in ``letters``: ``(δ, Γpr^{-1} δ, stalled)``.

    ``stalled``: the estimated condition number times the products' error reached one."""
    xp = system.maps64.xp
    maps = system.maps(letters)
    eps = _eps(letters, system.nm)
    dot = lambda a, b: float(xp.vdot(a.ravel(), b.ravel()))  # noqa: E731
    delta, psi = xp.zeros_like(r), xp.zeros_like(r)
    res = r.copy()
    z = system.prior.matmat(res)
    p, q = z.copy(), res.copy()  # q = Γpr^{-1} p
    rz = dot(res, z)
    rz0 = rz
    alphas, betas = [], []
    it, stalled = 0, False
    while it < maxit:
        Ap = system.misfit(maps, p) + q
        pAp = dot(p, Ap)
        if not pAp > 0:  # lost positive definiteness in this precision
            stalled = True
            break
        alpha = rz / pAp
        delta += alpha * p
        psi += alpha * q
        res -= alpha * Ap
        z = system.prior.matmat(res)
        rz_new = dot(res, z)
        it += 1
        alphas.append(alpha)
        if rz_new <= tol * tol * rz0:
            break
        beta = rz_new / rz
        betas.append(beta)
        p = z + beta * p
        q = res + beta * q
        rz = rz_new
        if letters != "ddddd" and it % _COND_EVERY == 0:
            cond = _cond_estimate(alphas, betas)
            if eps * cond >= 1.0:
                info.cond_estimates.append(cond)
                stalled = True
                break
    if len(alphas) > 1 and not stalled:
        info.cond_estimates.append(_cond_estimate(alphas, betas))
    info.iterations += it
    return delta, psi, stalled


def map_cg(F: BlockToeplitz | DistributedBlockToeplitz, prior: Any, noise: float | Array,
           d_obs: Array, *, rtol: float = 1e-8,
           precision: str | PrecisionConfig = "auto", prior_mean: Array | None = None,
           maxiter: int = 2000, max_refinements: int = 30) -> tuple[Array, MapInfo]:
    """The MAP estimate by prior-preconditioned CG, in mixed precision with refinement.

    Parameters
    ----------
    F : BlockToeplitz or DistributedBlockToeplitz
        The parameter-to-observable map. Its own precision is not used: the float64
        residuals run in ``ddddd`` (a grid operator must be ``ddddd`` itself).
    prior : object with ``matmat``, or LinearOperator
        The prior covariance ``Γpr`` (see :func:`~fftmatvec.inverse.priors.as_prior`).
    noise : float or (Nd, Nt) array
        Noise variances.
    d_obs : (Nd, Nt) array
        Observations (global, on every rank of a grid).
    rtol : float, default 1e-8
        Relative error of ``x = m - m_pr`` in the prior's norm, guaranteed by the float64
        residual: stops when ``|b - H x|_Γpr <= rtol |x|_Γpr^-1``, where
        ``|v|_Γpr = sqrt(v^T Γpr v)``; the prior-preconditioned Hessian's eigenvalues are at
        least 1, so the error in ``|.|_Γpr^-1`` is at most ``|b - H x|_Γpr``.
    precision : str, default "auto"
        The inner products' precision: ``"auto"`` starts from the fastest configuration the
        tuning tables (or the a-priori model) allow for a relative error of 1e-5 and raises
        it as needed; a five-letter string starts there; ``"ddddd"`` is plain float64 CG. On
        a grid only the operator's own precision (``ddddd``) runs.
    prior_mean : (Nm, Nt) array, optional
        ``m_pr``; zero by default.
    maxiter : int, default 2000
        Inner iterations in all, all precisions together.
    max_refinements : int, default 30
        Outer steps at most.

    Returns
    -------
    m : (Nm, Nt) float64 array
        The MAP estimate (the best float64 iterate when not converged).
    info : MapInfo

    Raises
    ------
    FFTMatvecTypeError, FFTMatvecValueError
        Bad arguments (as :class:`~fftmatvec.inverse.DataSpacePosterior`), ``rtol`` not in
        (0, 1), a grid operator not in ``ddddd``.

    Notes
    -----
    Each inner iteration is one forward and one adjoint product in the inner precision and
    one prior application; each refinement one float64 forward and adjoint product.
    """
    maps = Maps(F)
    xp, nm, nt = maps.xp, F.nm, F.nt
    G, weight, D, m_pr, ladder = maps.agree("map_cg", lambda: _check(
        maps, prior, noise, d_obs, rtol, precision, prior_mean, maxiter, max_refinements))
    if maps.distributed:
        maps64 = maps
    else:
        maps64 = maps.with_precision("ddddd")
    system = _System(maps64, G, weight, nm, nt)
    system.levels["ddddd"] = maps64
    info = MapInfo()
    dot = lambda a, b: float(xp.vdot(a.ravel(), b.ravel()))  # noqa: E731

    R = D if m_pr is None else D - maps64.forward(m_pr[None])
    b = maps64.adjoint(weight * R)
    x, y = xp.zeros_like(b), xp.zeros_like(b)  # y = Γpr^{-1} x
    r = b
    rn0 = math.sqrt(max(dot(r, G.matmat(r)), 0.0))
    rn = rn0
    info.residuals.append(1.0)
    level = 0
    if rn0 == 0.0:
        info.converged = True
    flat = 0  # refinements in float64 that gained less than the stagnation factor
    xn = 0.0  # |x|_Γpr^-1 = sqrt(<x, Γpr^-1 x>)
    while not info.converged and info.refinements < max_refinements and info.iterations < maxiter:
        letters = ladder[level]
        # what this step must reach, relative to r: |r|_Γpr <= rtol |x|, with |x| taken as
        # |b|_Γpr before the first step (a later step aims lower where |x| is smaller)
        target = 0.5 * rtol * (xn if xn > 0 else rn0) / rn
        tol = (target if letters == "ddddd"
               else min(0.5, max(target, _INNER_FACTOR * _eps(letters, nm))))
        delta, psi, stalled = _inner(system, letters, r, tol, maxiter - info.iterations, info)
        info.precisions.append(letters)
        if stalled and level + 1 < len(ladder):
            cond = info.cond_estimates[-1] if info.cond_estimates else math.inf
            info.raised.append(f"{letters} -> {ladder[level + 1]}: eps * cond >= 1 "
                               f"(cond ~ {cond:.3g})")
            level += 1
        x_new, y_new = x + delta, y + psi
        r_new = b - system.misfit(maps64, x_new) - y_new
        rn_new = math.sqrt(max(dot(r_new, G.matmat(r_new)), 0.0))
        info.refinements += 1
        if rn_new < rn:  # never keep a step that made the float64 residual worse
            x, y, r = x_new, y_new, r_new
            contraction, rn = rn_new / rn, rn_new
            xn = math.sqrt(max(dot(x, y), 0.0))
        else:
            contraction = math.inf
        info.residuals.append(rn / rn0)
        info.error_bounds.append(rn / xn if xn > 0 else math.inf)
        if rn <= rtol * xn:
            info.converged = True
        elif contraction > _STAGNATION and not stalled and level + 1 < len(ladder):
            info.raised.append(f"{letters} -> {ladder[level + 1]}: the float64 residual fell by "
                               f"only {1 / contraction if contraction < math.inf else 0:.3g}x")
            level += 1
        elif contraction > _STAGNATION and level + 1 == len(ladder):
            flat += 1
            if flat == 2:  # float64 itself stagnates: the answer is as good as it gets
                info.stopped = "the float64 residual stagnated (ill-conditioned for rtol)"
                break
    for letters, lm in system.levels.items():
        if lm.bytes_read:
            info.products[letters] = lm.bytes_read // lm.khat_nbytes
            info.khat_bytes += lm.bytes_read
    m = x if m_pr is None else x + m_pr
    return m[0], info


def _ladder(maps, precision, xp, nm, nd, nt) -> list:
    """The precisions the inner solves may use, cheapest first, ending in ``ddddd``."""
    if maps.distributed:
        if maps.precision != "ddddd":
            raise FFTMatvecValueError(
                f"map_cg's residuals run in float64: build the DistributedBlockToeplitz in "
                f"'ddddd', got {maps.precision!r}")
        return ["ddddd"]
    if isinstance(precision, str) and precision.strip().lower() == "auto":
        out = []
        for tol in _AUTO_RTOLS:
            letters, _, _, _ = _resolve_precision(xp, "auto", tol, nm, nd, nt)
            out.append(PrecisionConfig(letters).letters)
    else:
        out = [PrecisionConfig(precision).letters]
    out.append("ddddd")
    return list(dict.fromkeys(out))


def _check(maps, prior, noise, d_obs, rtol, precision, prior_mean, maxiter, max_refinements):
    """The arguments of :func:`map_cg`, checked: ``(prior, 1 / noise, D, m_pr, ladder)``."""
    xp, nd, nm, nt = maps.xp, maps.nd, maps.nm, maps.nt
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float, np.floating)):
        raise FFTMatvecTypeError(f"rtol must be a number, got {type(rtol).__name__}")
    if not 0 < rtol < 1:
        raise FFTMatvecValueError(f"rtol must be in (0, 1), got {rtol!r}")
    for name, v in (("maxiter", maxiter), ("max_refinements", max_refinements)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FFTMatvecValueError(f"{name} must be a positive integer, got {v!r}")
    G = as_prior(prior, nm, nt, xp)
    weight = 1.0 / noise_variances(noise, nd, nt, xp)
    D, batched = data_batch(d_obs, "d_obs", nd, nt, xp)
    if batched and D.shape[0] != 1:
        raise FFTMatvecValueError(f"d_obs must be one observation vector ({nd}, {nt}), got "
                                  f"shape {d_obs.shape}")
    m_pr = None if prior_mean is None else param_vector(prior_mean, "prior_mean", nm, nt, xp)
    return G, weight, D, m_pr, _ladder(maps, precision, xp, nm, nd, nt)
