"""Bayesian linear inverse problems on the block-Toeplitz operator.

``d = F m + e`` with a Gaussian prior ``m ~ N(m_pr, Γpr)`` and Gaussian noise
``e ~ N(0, Γnoise)`` (diagonal). Two ways to the posterior:

* :class:`DataSpacePosterior`: form and factor the data-space Hessian
  ``H_d = F Γpr F^T + Γnoise`` once (offline), then answer each observation with a triangular
  solve pair and one adjoint product (online): the mean, the pointwise variance, covariance
  products and samples;
* :func:`map_cg`: the MAP point by prior-preconditioned CG in parameter space, in mixed
  precision with float64 iterative refinement, for problems whose ``H_d`` is too large.

Priors: :class:`DiagonalPrior`, the separable space-by-time :class:`SeparablePrior`, or any
SPD operator (:func:`as_prior`).

Modules: :mod:`.priors`, :mod:`.posterior`, :mod:`.cg`; :mod:`._maps` adapts the single-process
and the distributed operator to global batches.
"""

from .cg import MapInfo, map_cg
from .posterior import DataSpacePosterior
from .priors import DiagonalPrior, SeparablePrior, as_prior

__all__ = ["DataSpacePosterior", "DiagonalPrior", "MapInfo", "SeparablePrior", "as_prior",
           "map_cg"]
