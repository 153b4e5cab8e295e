"""``fftmatvec demo``: a Bayesian linear inverse problem solved end to end.

A time-dependent source in a 2-D advection-diffusion equation is recovered from noisy point
sensor data. The parameter-to-observable map of this linear time-invariant system is block
lower-triangular Toeplitz; its kernel comes from ``min(Nd, Nm)`` marched sparse solves, and the
MAP source from conjugate gradients on ``F^T Gamma^-1 F + R`` applied with
:class:`~fftmatvec.BlockToeplitz`.

Modules: :mod:`.pde` (the model and its time stepper), :mod:`.inverse` (truth, noise, prior,
MAP), :mod:`.plot` (the figure), :mod:`.run` (orchestration and outputs).
"""

from .inverse import MapResult, SmoothnessPrior, noisy_observations, solve_map, true_source
from .pde import AdvectionDiffusion
from .run import DEFAULT_OUT, SIZES, DemoSize, run_demo

__all__ = [
    "AdvectionDiffusion",
    "DEFAULT_OUT",
    "DemoSize",
    "MapResult",
    "SIZES",
    "SmoothnessPrior",
    "noisy_observations",
    "run_demo",
    "solve_map",
    "true_source",
]
