"""The demo: the PDE pieces, the prior, the MAP solve, and ``fftmatvec demo`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecValueError, backend, io
from fftmatvec.demo import AdvectionDiffusion, SmoothnessPrior, solve_map, true_source
from fftmatvec.demo.pde import (
    advection_diffusion_matrix,
    sensor_nodes,
    source_prolongation,
    vortex_velocity,
)

from conftest import dense_btt, rel_err, to_numpy

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def problem():
    return AdvectionDiffusion(n=16, ns=4, nd=5, nt=12)


# ---- spatial operator, source and sensor maps -------------------------------------------
def test_spatial_operator_is_an_m_matrix():
    L = advection_diffusion_matrix(12, kappa=0.01, speed=1.0, decay=0.1).toarray()
    off = L - np.diag(np.diag(L))
    assert L.shape == (144, 144) and L.dtype == np.float64
    assert (np.diag(L) > 0).all()
    assert (off <= 0).all()
    assert (L.sum(axis=1) >= 0.1 - 1e-12).all()  # row sums >= decay: diagonally dominant


def test_spatial_operator_diffusion_only_is_the_5_point_laplacian():
    n, kappa = 6, 0.3
    L = advection_diffusion_matrix(n, kappa=kappa, speed=0.0).toarray()
    h = 1.0 / (n + 1)
    T = (np.diag(2 * np.ones(n)) - np.diag(np.ones(n - 1), 1) - np.diag(np.ones(n - 1), -1))
    ref = kappa / h**2 * (np.kron(np.eye(n), T) + np.kron(T, np.eye(n)))
    np.testing.assert_allclose(L, ref, rtol=1e-14)
    np.testing.assert_allclose(L, L.T, rtol=1e-14)


def test_upwind_advection_of_a_linear_field_is_exact_inside():
    # For u = x (no diffusion), v.grad u = vx exactly, at nodes away from the boundary.
    n = 10
    L = advection_diffusion_matrix(n, kappa=1e-300, speed=1.0)
    h = 1.0 / (n + 1)
    c = h * np.arange(1, n + 1)
    X, Y = np.meshgrid(c, c)
    vx, _ = vortex_velocity(X, Y)
    got = (L @ X.ravel()).reshape(n, n)
    np.testing.assert_allclose(got[1:-1, 1:-1], vx[1:-1, 1:-1], atol=1e-12)


def test_vortex_is_divergence_free_and_tangential():
    x = np.linspace(0, 1, 41)
    X, Y = np.meshgrid(x, x)
    vx, vy = vortex_velocity(X, Y, speed=2.0)
    div = np.gradient(vx, x, axis=1) + np.gradient(vy, x, axis=0)
    assert np.abs(div[2:-2, 2:-2]).max() < 1e-2
    assert np.abs(vx[:, 0]).max() < 1e-12 and np.abs(vy[0, :]).max() < 1e-12


def test_source_prolongation_and_sensors():
    B = source_prolongation(10, 3)
    assert B.shape == (100, 9)
    np.testing.assert_array_equal(B.sum(axis=1).A.ravel(), 1.0)
    assert (B.sum(axis=0).A.ravel() > 0).all()  # every cell holds nodes
    s = sensor_nodes(10, 30, seed=1)
    assert s.shape == (30,) and len(set(s.tolist())) == 30
    assert s.min() >= 0 and s.max() < 100
    with pytest.raises(FFTMatvecValueError):
        source_prolongation(4, 5)
    with pytest.raises(FFTMatvecValueError):
        sensor_nodes(3, 10)


# ---- the time stepper and its adjoint ----------------------------------------------------
def test_time_stepper_adjoint_dot(problem, rng):
    N = problem.n_state
    u, w = rng.standard_normal(N), rng.standard_normal(N)
    f, g = rng.standard_normal(N), rng.standard_normal(N)
    # step(u, f) = A^{-1}(u + dt f), step_adjoint(w, g) = A^{-T}(w + g):
    # <step(u, f), w + g> = <u + dt f, step_adjoint(w, g)>
    lhs = problem.step(u, f) @ (w + g)
    rhs = (u + problem.dt * f) @ problem.step_adjoint(w, g)
    assert abs(lhs - rhs) <= 1e-13 * abs(lhs)
    np.testing.assert_allclose(problem.A.T @ problem.step_adjoint(w, g), w + g, rtol=1e-12,
                               atol=1e-13 * np.abs(w + g).max())
    np.testing.assert_allclose(problem.A @ problem.step(u, f), u + problem.dt * f, rtol=1e-12)


def test_pde_forward_adjoint_dot(problem, rng):
    m = rng.standard_normal((problem.nm, problem.nt))
    d = rng.standard_normal((problem.nd, problem.nt))
    y, z = problem.forward(m), problem.adjoint(d)
    assert y.shape == (problem.nd, problem.nt) and y.dtype == np.float64
    assert z.shape == (problem.nm, problem.nt) and z.dtype == np.float64
    lhs, rhs = np.vdot(y, d), np.vdot(m, z)
    assert abs(lhs - rhs) <= 1e-13 * abs(lhs)


def test_causality_and_lag_zero(problem):
    # A source at step s only is seen at steps t >= s, starting at s itself (implicit Euler).
    s = 4
    m = np.zeros((problem.nm, problem.nt))
    m[:, s] = 1.0
    d = problem.forward(m)
    assert np.all(d[:, :s] == 0.0)
    assert np.abs(d[:, s]).max() > 0
    K = problem.kernel()
    lag0 = problem.dt * (problem.C @ problem._lu.solve(problem.B.toarray()))
    np.testing.assert_allclose(K[:, :, 0], lag0, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("method", ["adjoint", "forward"])
def test_kernel_matches_time_stepping(problem, rng, method):
    K = problem.kernel(method=method)
    assert K.shape == (problem.nd, problem.nm, problem.nt) and K.dtype == np.float64
    A = dense_btt(K)
    m = rng.standard_normal((problem.nm, problem.nt))
    d = rng.standard_normal((problem.nd, problem.nt))
    assert rel_err(A @ m.ravel(), problem.forward(m).ravel()) < 1e-12
    assert rel_err(A.T @ d.ravel(), problem.adjoint(d).ravel()) < 1e-12


def test_block_toeplitz_matches_time_stepping(problem, rng, xp):
    F = fm.BlockToeplitz(xp.asarray(problem.kernel()))
    m = rng.standard_normal((problem.nm, problem.nt))
    d = rng.standard_normal((problem.nd, problem.nt))
    y, z = F.matvec(xp.asarray(m)), F.rmatvec(xp.asarray(d))
    assert y.dtype == np.float64 and z.dtype == np.float64
    assert rel_err(y, problem.forward(m)) < 1e-12
    assert rel_err(z, problem.adjoint(d)) < 1e-12


@pytest.mark.slow
def test_kernel_with_worker_processes(problem):
    np.testing.assert_array_equal(problem.kernel(workers=2), problem.kernel())


# ---- prior and MAP -----------------------------------------------------------------------
def _neumann(n, h):
    T = np.diag(np.r_[1.0, 2 * np.ones(n - 2), 1.0]) if n > 1 else np.zeros((1, 1))
    if n > 1:
        T -= np.diag(np.ones(n - 1), 1) + np.diag(np.ones(n - 1), -1)
    return T / h**2


def test_prior_matches_explicit_kronecker_sum(xp, rng):
    ns, nt, dt = 3, 5, 0.2
    kw = dict(sigma=0.5, length_space=0.3, length_time=0.4)
    prior = SmoothnessPrior(ns, nt, dt, xp=xp, **kw)
    Ls = _neumann(ns, 1.0 / ns)
    lap = np.kron(Ls, np.eye(ns)) + np.kron(np.eye(ns), Ls)  # 5-point Neumann, index cy*ns+cx
    R = (np.eye(ns * ns * nt) + kw["length_space"] ** 2 * np.kron(lap, np.eye(nt))
         + kw["length_time"] ** 2 * np.kron(np.eye(ns * ns), _neumann(nt, dt))) / kw["sigma"] ** 2
    x = rng.standard_normal((ns * ns, nt))
    y = prior.apply(xp.asarray(x))
    assert y.shape == x.shape and y.dtype == np.float64
    assert rel_err(y.ravel(), R @ x.ravel()) < 1e-12
    assert rel_err(prior.solve(xp.asarray(x)).ravel(), np.linalg.solve(R, x.ravel())) < 1e-12
    flat = prior.apply(xp.asarray(x.ravel()))
    assert flat.shape == (ns * ns * nt,)
    assert np.linalg.eigvalsh(R).min() > 0  # symmetric positive definite by construction


def test_true_source_is_smooth_and_positive():
    c = AdvectionDiffusion(16, 8, 4, 40).source_cell_centres()
    m = true_source(c, 40)
    assert m.shape == (64, 40) and (m >= 0).all() and 0.3 < m.max() < 1.5
    assert np.abs(np.diff(m, axis=1)).max() < 0.2 * m.max()


def test_map_by_cg_matches_dense_solve(problem, rng, xp):
    K = problem.kernel()
    F = fm.BlockToeplitz(xp.asarray(K))
    prior = SmoothnessPrior(problem.ns, problem.nt, problem.dt, sigma=0.3, length_space=0.15,
                            length_time=0.1, xp=xp)
    d = rng.standard_normal((problem.nd, problem.nt))
    sigma = 0.05
    res = solve_map(F, xp.asarray(d), sigma, prior, rtol=1e-11, maxiter=2000)
    assert res.converged and res.iterations > 0
    assert res.m.shape == (problem.nm, problem.nt) and res.m.dtype == np.float64
    n = problem.nm * problem.nt
    R = np.stack([to_numpy(prior.apply(xp.asarray(e))) for e in np.eye(n)], axis=1)
    A = dense_btt(K)
    H = A.T @ A / sigma**2 + R
    ref = np.linalg.solve(H, A.T @ d.ravel() / sigma**2)
    assert rel_err(res.m.ravel(), ref) < 1e-8


# ---- end to end --------------------------------------------------------------------------
def _cli(*args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "fftmatvec.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_demo_tiny_end_to_end(tmp_path):
    out = tmp_path / "out"
    proc = _cli("demo", "--size", "tiny", "--device", "cpu", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "forward rel. error" in proc.stdout and "CG iterations" in proc.stdout
    s = json.loads((out / "summary.json").read_text())
    assert (s["size"], s["device"], s["precision"]) == ("tiny", "cpu", "ddddd")
    nd, nm, nt = s["nd"], s["nm"], s["nt"]
    assert s["operator_rel_error"] < 1e-10
    assert s["adjoint_rel_error"] < 1e-10
    assert s["pde_dot_test_rel_error"] < 1e-12
    assert s["cg_converged"] and 0 < s["cg_iterations"] < 1000
    assert s["reconstruction_rel_error"] < 0.6
    assert 0.2 < s["data_misfit_rms_over_noise"] < 1.5
    assert 0 < s["data_misfit"] < 0.1
    assert s["matvec_seconds"] > 0 and s["pde_solve_pair_seconds"] > 0
    for name in s["files"].values():
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert not [p for p in out.iterdir() if ".tmp-" in p.name or p.name.startswith(".tmp")]
    png = (out / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # The matrix file is the PDE's kernel: it reproduces the saved MAP prediction.
    assert io.matrix_info(out / "matrix.h5").shape == (nd, nm, nt)
    F = fm.BlockToeplitz(io.load_matrix(out / "matrix.h5"))
    m_map = io.load_vector(out / "m_map.h5")
    d_obs = io.load_vector(out / "d_obs.h5")
    assert m_map.shape == (nm, nt) and d_obs.shape == (nd, nt)
    misfit = np.linalg.norm(F.matvec(m_map) - d_obs) / np.linalg.norm(d_obs)
    assert misfit == pytest.approx(s["data_misfit"], rel=1e-8)


@pytest.mark.slow
def test_demo_kernel_worker_processes_from_the_cli(tmp_path):
    out = tmp_path / "out"
    proc = _cli("demo", "--size", "tiny", "--device", "cpu", "--workers", "2", "--quiet",
                "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout == ""
    s = json.loads((out / "summary.json").read_text())
    assert s["kernel_workers"] == 2
    assert s["operator_rel_error"] < 1e-10 and s["adjoint_rel_error"] < 1e-10


def test_demo_reduced_precision(tmp_path):
    from fftmatvec.demo import run_demo

    s = run_demo("tiny", "cpu", "dssdd", tmp_path, quiet=True)
    assert s["precision"] == "dssdd"
    assert s["operator_rel_error"] < 1e-10 and s["adjoint_rel_error"] < 1e-10
    assert 1e-10 < s["operator_rel_error_at_precision"] < 1e-5
    assert 1e-10 < s["adjoint_rel_error_at_precision"] < 1e-5
    assert s["reconstruction_rel_error"] < 0.6


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_demo_tiny_gpu(tmp_path):
    from fftmatvec.demo import run_demo

    s = run_demo("tiny", "gpu", "ddddd", tmp_path, quiet=True)
    assert s["device"] == "gpu"
    assert s["operator_rel_error"] < 1e-10 and s["adjoint_rel_error"] < 1e-10
    assert s["cg_converged"] and s["reconstruction_rel_error"] < 0.6


def test_demo_bad_arguments(tmp_path):
    proc = _cli("demo", "--size", "tiny", "--precision", "dxddd", "--out", str(tmp_path / "o"),
                cwd=tmp_path)
    assert proc.returncode == 2 and "precision" in proc.stderr
    proc = _cli("demo", "--size", "huge", cwd=tmp_path)
    assert proc.returncode == 2
    (tmp_path / "file").write_text("x")
    proc = _cli("demo", "--size", "tiny", "--out", str(tmp_path / "file"), cwd=tmp_path)
    assert proc.returncode == 2 and "folder" in proc.stderr
    if not backend.gpu_available():
        proc = _cli("demo", "--size", "tiny", "--device", "gpu", cwd=tmp_path)
        assert proc.returncode == 2 and "GPU" in proc.stderr
