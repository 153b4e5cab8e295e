"""Checks of the arguments the posterior and the solvers share: noise, prior mean, data."""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from .._errors import FFTMatvecTypeError, FFTMatvecValueError

__all__ = ["noise_variances", "real_array", "param_vector", "data_batch"]


def noise_variances(noise, nd: int, nt: int, xp):
    """``noise`` (a scalar or ``(Nd, Nt)`` variances) as a float64 ``(Nd, Nt)`` array on ``xp``."""
    if isinstance(noise, (bool, np.bool_, str, bytes)):
        raise FFTMatvecTypeError(f"noise must be a variance (number) or an ({nd}, {nt}) array, "
                                 f"got {noise!r}")
    if isinstance(noise, (int, float, np.integer, np.floating)):
        v = float(noise)
        if not (math.isfinite(v) and v > 0):
            raise FFTMatvecValueError(f"noise (a variance) must be finite and > 0, got {noise!r}")
        return xp.full((nd, nt), v)
    nxp = backend.get_array_module(noise, name="noise")
    if nxp is not xp:
        raise FFTMatvecTypeError(f"noise must live where the operator does ({xp.__name__}), got a "
                                 f"{nxp.__name__} array")
    if noise.shape != (nd, nt):
        raise FFTMatvecValueError(f"noise must be a scalar or have shape ({nd}, {nt}), got "
                                  f"{noise.shape}")
    if noise.dtype.kind not in "fiu":
        raise FFTMatvecTypeError(f"noise must be real, got dtype {noise.dtype}")
    if not bool(xp.isfinite(noise).all()) or not bool((noise > 0).all()):
        raise FFTMatvecValueError("noise variances must be finite and > 0 everywhere")
    return xp.array(noise, dtype=np.float64, copy=True)


def real_array(x, name: str, xp=None, kinds: str = "f"):
    """``x``'s array module, after checking that ``x`` is an array of ``xp`` (where given) of
    a dtype of ``kinds`` (``"f"``: floating point; ``"fiu"``: any real number) with no NaN or
    Inf."""
    axp = backend.get_array_module(x, name=name)
    if xp is not None and axp is not xp:
        raise FFTMatvecTypeError(f"{name} must live where the operator does ({xp.__name__}), got "
                                 f"a {axp.__name__} array")
    if x.dtype.kind not in kinds:
        what = "real floating point" if kinds == "f" else "real"
        raise FFTMatvecTypeError(f"{name} must be {what}, got dtype {x.dtype}")
    if x.size and not bool(axp.isfinite(x).all()):
        raise FFTMatvecValueError(f"{name} contains NaN or Inf values")
    return axp


def param_vector(m, name: str, nm: int, nt: int, xp):
    """A parameter vector ``(Nm, Nt)`` (or flat ``(Nm*Nt,)``) as float64 ``(Nm, Nt)``."""
    real_array(m, name, xp)
    if m.shape not in ((nm, nt), (nm * nt,)):
        raise FFTMatvecValueError(f"{name} must have shape ({nm}, {nt}) or ({nm * nt},), got "
                                  f"{m.shape}")
    return m.astype(np.float64).reshape(nm, nt)


def data_batch(d, name: str, nd: int, nt: int, xp):
    """``(batch (k, Nd, Nt) float64, batched)`` from ``(Nd, Nt)``, ``(Nd*Nt,)`` or
    ``(k, Nd, Nt)``."""
    real_array(d, name, xp)
    if d.shape in ((nd, nt), (nd * nt,)):
        return d.astype(np.float64).reshape(1, nd, nt), False
    if d.ndim == 3 and d.shape[1:] == (nd, nt) and d.shape[0] > 0:
        return d.astype(np.float64), True
    raise FFTMatvecValueError(f"{name} must have shape ({nd}, {nt}), ({nd * nt},) or (k, {nd}, "
                              f"{nt}), got {d.shape}")
