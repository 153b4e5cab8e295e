"""The sweep: median time and relative error against ``ddddd`` of each configuration."""

from __future__ import annotations

import platform
import statistics
import time

import numpy as np

from .. import __version__, backend
from .._errors import FFTMatvecValueError
from ..operator import BlockToeplitz
from ..precision import PrecisionConfig
from .pareto import pareto_front

__all__ = ["all_precisions", "device_info", "sweep_shape", "user_block", "estimate_seconds"]


def all_precisions() -> list[str]:
    """The 48 configurations: stage 3 in d, s or h, the other four in d or s."""
    return PrecisionConfig.all_strings("dsh")


def device_info(xp) -> dict:
    """The device keys of a table for the current device of ``xp``."""
    if xp is np:
        return {"vendor": "cpu", "arch": "cpu", "name": platform.processor() or platform.machine(),
                "driver": "none", "runtime": "numpy " + np.__version__, "cupy": "none",
                "fftmatvec": __version__}
    cp = xp
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    hip = bool(getattr(cp.cuda.runtime, "is_hip", False))
    if hip:
        arch = props.get("gcnArchName", b"gfx").decode().split(":")[0]
    else:
        arch = f"sm_{props['major']}{props['minor']}"
    return {"vendor": "amd" if hip else "nvidia", "arch": arch, "name": props["name"].decode(),
            "driver": str(cp.cuda.runtime.driverGetVersion()),
            "runtime": str(cp.cuda.runtime.runtimeGetVersion()), "cupy": cp.__version__,
            "fftmatvec": __version__}


def _sync(xp):
    if xp is not np:
        xp.cuda.Device().synchronize()


def _apply(F, op, X):
    if op == "matvec":
        return F.matmat(X)
    if op == "rmatvec":
        return F.rmatmat(X)
    return F.normal().matmat(X)


def _time(fn, xp, repeat):
    fn()
    _sync(xp)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(xp)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def estimate_seconds(shapes, ops, nrhs, precisions, repeat, inputs, seconds_per_flop=1e-10):
    """A rough duration of the sweep: each product ~ ``nd*nm*nf*k`` multiply-adds."""
    total = 0.0
    for nm, nd, nt in shapes:
        for k in nrhs:
            work = nd * nm * (nt + 1) * k * seconds_per_flop
            for op in ops:
                f = 2 if op == "normal" else 1
                total += f * work * len(precisions) * (repeat + 1 + inputs)
    return total


def user_block(u, op, shape, nrhs):
    """The first ``nrhs`` of the user's input vectors ``u`` for ``op`` on ``shape``.

    Parameters
    ----------
    u : (n, nt) or (k, n, nt) array, or flat of ``k*n*nt``
        NumPy or CuPy; ``n`` is ``nd`` for ``rmatvec``, else ``nm``.
    op : {"matvec", "rmatvec", "normal"}
    shape : (nm, nd, nt)
    nrhs : int

    Returns
    -------
    (nrhs, n, nt) array

    Raises
    ------
    FFTMatvecValueError
        ``u`` does not hold ``nrhs`` vectors of shape ``(n, nt)``.
    """
    nm, nd, nt = shape
    n = nd if op == "rmatvec" else nm
    shp = tuple(u.shape)
    if u.ndim == 1 and u.size % (n * nt) == 0:
        have = u.size // (n * nt)
    elif u.ndim in (2, 3) and shp[-2:] == (n, nt):
        have = 1 if u.ndim == 2 else shp[0]
    else:
        have = 0
    if have < nrhs:
        raise FFTMatvecValueError(
            f"expected {nrhs} vector(s) of shape ({n}, {nt}) for {op} on (nm, nd, nt) = "
            f"{tuple(shape)} (an array ({n}, {nt}), (k, {n}, {nt}) or flat), got an array of "
            f"shape {shp}")
    return u.reshape(-1, n, nt)[:nrhs]


def sweep_shape(kernel, op, nrhs, precisions, repeat, inputs, rng=None, user_inputs=None,
                progress=None):
    """Measure every configuration of ``precisions`` on one shape and op.

    Operators are built once per precision, sharing ``Khat`` when stage 3's letter matches; the
    ``ddddd`` reference is computed once per input.

    Returns
    -------
    dict
        A table entry without its plan: ``op``, the shape, ``points`` and ``front``.
    """
    xp = backend.get_array_module(kernel, name="kernel")
    nd, nm, nt = kernel.shape
    n_in = nd if op == "rmatvec" else nm
    rng = rng or np.random.default_rng(0)
    if user_inputs is not None:
        xs = [xp.asarray(user_block(u, op, (nm, nd, nt), nrhs)) for u in user_inputs]
    else:
        xs = [xp.asarray(rng.standard_normal((nrhs, n_in, nt))) for _ in range(inputs)]
    ref_op = BlockToeplitz(kernel, "ddddd")
    refs = [_apply(ref_op, op, x) for x in xs]
    ref_norms = [float(xp.linalg.norm(r)) for r in refs]
    shared = {"d": ref_op}
    points = []
    for p in precisions:
        base = shared.get(p[2])
        F = base.with_precision(p) if base is not None else BlockToeplitz(kernel, p)
        shared.setdefault(p[2], F)
        errs = [float(xp.linalg.norm(_apply(F, op, x) - r)) / max(n, 1e-300)
                for x, r, n in zip(xs, refs, ref_norms)]
        t = _time(lambda: _apply(F, op, xs[0]), xp, repeat)
        points.append({"precision": p, "time": float(t),
                       "error_median": float(statistics.median(errs)), "error_max": float(max(errs))})
        if progress is not None:
            progress.update(1)
    front = [points[i]["precision"] for i in pareto_front(points)]
    return {"op": op, "nm": int(nm), "nd": int(nd), "nt": int(nt), "nrhs": int(nrhs),
            "inputs": len(xs), "repeat": int(repeat), "points": points, "front": front}
