"""Shared fixtures: one test body runs on NumPy and, when a GPU is present, on CuPy."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fftmatvec import backend


def _xp_params():
    params = [pytest.param(np, id="numpy")]
    marks = [pytest.mark.gpu]
    if not backend.gpu_available():
        marks.append(pytest.mark.skip(reason="no GPU (CuPy missing or no device)"))
    params.append(pytest.param(backend.cupy, id="cupy", marks=marks))
    return params


@pytest.fixture(params=_xp_params())
def xp(request):
    """The array module under test: ``numpy``, or ``cupy`` on a GPU machine."""
    return request.param


@pytest.fixture
def rng(request):
    """A fresh generator per test, seeded from the test's name so failures reproduce."""
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def to_numpy(a):
    if isinstance(a, np.ndarray):
        return a
    return backend.cupy.asnumpy(a)


def dense_btt(kernel) -> np.ndarray:
    """The float64 dense block lower-triangular Toeplitz matrix ``(Nd*Nt, Nm*Nt)`` of ``kernel``.

    Rows and columns are space-outer, time-inner: ``F[i*Nt + t, j*Nt + s] = K[i, j, t - s]``
    for ``t >= s``, zero otherwise.
    """
    K = np.asarray(to_numpy(kernel), dtype=np.float64)
    nd, nm, nt = K.shape
    t = np.arange(nt)
    lag = t[:, None] - t[None, :]  # (t, s)
    causal = lag >= 0
    blocks = np.where(causal[None, None], K[:, :, np.clip(lag, 0, None)], 0.0)  # (nd, nm, nt, nt)
    return blocks.transpose(0, 2, 1, 3).reshape(nd * nt, nm * nt)


def poisoned(cp, shape, dtype):
    """A device array of NaNs: an output buffer whose unwritten entries a test can see."""
    a = cp.empty(shape, dtype=dtype)
    a.fill(np.nan)
    return a


def rel_err(y, y_ref) -> float:
    y = np.asarray(to_numpy(y), dtype=np.float64)
    y_ref = np.asarray(y_ref, dtype=np.float64)
    return float(np.linalg.norm(y - y_ref) / np.linalg.norm(y_ref))


def load_script(name: str):
    """The module of ``scripts/<name>.py`` (the scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class EnvOverrides:
    """The plan overrides of a stand-in engine in a host test: those of FFTMATVEC_PLAN as it
    is at each look-up (the tests change it with :func:`set_plan` between calls); a real
    engine's are resolved once, by its operator."""

    def get(self, key: str) -> str:
        from fftmatvec.gpu import ENV, Overrides

        return Overrides.resolve(env=os.environ.get(ENV)).get(key)


def planning_view(F, adjoint: bool = False, k: int = 1, device=None, **rules):
    """The planning of a product of the GPU operator ``F`` (a
    :class:`~fftmatvec.gpu.planning.PlanningView`: its ``planner``, the choices, and its
    ``builders``, the stage-3 launch builders) on its engine's device (or ``device``), with
    ``rules`` in place of the device's (split-K targets) and ``F``'s overrides."""
    from fftmatvec.gpu import PlanningView, Problem

    eng = F._engine
    problem = Problem(F.nd, F.nm, F.nt, F.fft_len, k, adjoint, F.precision.letters)
    return PlanningView(problem, device or eng.device, eng.rules.with_table(rules),
                        F._overrides)


def set_plan(monkeypatch, key: str, value) -> None:
    """Set (or, with ``value`` None, remove) one key of ``FFTMATVEC_PLAN`` for a test, keeping
    the others."""
    from fftmatvec.gpu.plan import ENV

    items = dict(item.split("=", 1) for item in os.environ.get(ENV, "").split(",") if "=" in item)
    if value is None:
        items.pop(key, None)
    else:
        items[key] = value
    if items:
        monkeypatch.setenv(ENV, ",".join(f"{k}={v}" for k, v in items.items()))
    else:
        monkeypatch.delenv(ENV, raising=False)


@pytest.fixture(autouse=True)
def _builtin_fno_rules(monkeypatch):
    """The FNO layers take the built-in rules in every test (a tuning table in the user's cache
    or shipped with the package would change their choices); the tests of the tables point
    ``FFTMATVEC_FNO_TUNING_PATH`` at their own."""
    monkeypatch.setenv("FFTMATVEC_FNO_TUNING_PATH", "none")
