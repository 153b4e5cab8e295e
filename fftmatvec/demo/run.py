"""Orchestration of ``fftmatvec demo``: model, kernel, checks, timings, MAP solve, outputs.

:func:`run_demo` runs these steps, printing one line per step (and progress bars for the long
ones when the terminal shows them):

1. build the advection-diffusion model and factorise its time stepper;
2. compute the kernel with ``min(Nd, Nm)`` marched solves (:meth:`AdvectionDiffusion.kernel`);
3. set up :class:`~fftmatvec.BlockToeplitz` on the chosen device, in float64 (``ddddd``) and in
   the requested precision;
4. check the block-Toeplitz operator against direct time stepping of the PDE, forward and
   adjoint, for a random source and a random observation vector, and time that PDE
   forward + adjoint solve pair;
5. time one block-Toeplitz forward, adjoint and Gauss-Newton (``F^T W F``) product;
6. make noisy synthetic data of a known source (by time stepping the PDE) and compute the MAP
   source by prior-preconditioned CG;
7. uncertainty (:mod:`fftmatvec.inverse`): form and factor the data-space Hessian offline,
   answer the observation online (:meth:`~fftmatvec.inverse.DataSpacePosterior.mean`), compare
   with the MAP of :func:`~fftmatvec.inverse.map_cg` in float64 and in mixed precision (their
   ``Khat`` bytes), time the online mean of a new observation against the CG solve, and compute
   the posterior standard deviation at the figure's times;
8. write the figure, ``summary.json``, the matrix (native HDF5) and the vectors.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from .. import __version__, backend, inverse, io
from .._errors import FFTMatvecValueError
from ..operator import BlockToeplitz
from ..precision import PrecisionConfig
from ._files import atomic_open
from .inverse import SmoothnessPrior, noisy_observations, solve_map, true_source
from .plot import panel_times
from .pde import AdvectionDiffusion

__all__ = ["DemoSize", "SIZES", "DEFAULT_OUT", "run_demo", "resolve_device"]

DEFAULT_OUT = "fftmatvec-demo-out"


@dataclass(frozen=True)
class DemoSize:
    """One problem size of the demo.

    Attributes
    ----------
    n : int
        Fine grid nodes per side (state dimension ``n*n``).
    ns : int
        Source cells per side (``Nm = ns*ns``).
    nd : int
        Sensors.
    nt : int
        Time steps.
    note : str
        What the size is for.
    """

    n: int
    ns: int
    nd: int
    nt: int
    note: str = ""

    @property
    def nm(self) -> int:
        return self.ns * self.ns


SIZES = {
    "tiny": DemoSize(32, 8, 25, 48, "a few seconds; used by the tests"),
    "small": DemoSize(64, 16, 24, 56, "the default, with the data-space posterior (H_d of "
                      "order 1344); under a minute on a 2-core CPU"),
    "medium": DemoSize(128, 32, 96, 400, "a few minutes on a 2-core CPU; fast on a GPU node"),
    "large": DemoSize(128, 48, 144, 800, "one GPU and its node's cores; Khat about 4 GiB"),
}

# Model, data and prior settings shared by every size.
_NOISE_LEVEL = 0.02  # noise standard deviation relative to the RMS of the noise-free data
_PRIOR = dict(sigma=0.3, length_space=0.15, length_time=0.1)
_PARALLEL_SOLVES = 2e8  # (solves x state size) above which the kernel uses worker processes
_POSTERIOR_MAX = 12000  # largest Nd*Nt whose data-space Hessian the demo forms and factors
_MAP_RTOL = 1e-9  # relative error bound of the CG MAP estimates compared with the data-space one


def resolve_device(device: str) -> str:
    """Map ``"auto" | "cpu" | "gpu"`` to ``"cpu"`` or ``"gpu"``.

    Raises
    ------
    FFTMatvecValueError
        Unknown name, or ``"gpu"`` without a usable GPU.
    """
    if device not in ("auto", "cpu", "gpu"):
        raise FFTMatvecValueError(f"device must be 'auto', 'cpu' or 'gpu', got {device!r}")
    if device == "auto":
        return "gpu" if backend.gpu_available() else "cpu"
    if device == "gpu" and not backend.gpu_available():
        raise FFTMatvecValueError(
            "device 'gpu' was asked for, but no GPU is usable (CuPy is missing or sees no "
            "device); install fftmatvec[cuda12] or [cuda13], or use --device cpu"
        )
    return device


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects Slurm/cgroup CPU binding
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class _Reporter:
    """Step lines on stdout; tqdm progress bars on stderr when it is a terminal."""

    def __init__(self, total_steps: int, quiet: bool = False):
        self.total, self.step_no, self.quiet = total_steps, 0, quiet
        self._t0 = time.perf_counter()

    def step(self, text: str) -> None:
        self.step_no += 1
        self.say(f"[{self.step_no}/{self.total}] {text}")

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def bar(self, total, unit: str, desc: str):
        from tqdm.auto import tqdm

        return tqdm(total=total, unit=unit, desc=desc, leave=False, dynamic_ncols=True,
                    disable=True if self.quiet else None, file=sys.stderr)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0


def _sync(xp) -> None:
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def _median_seconds(fn, xp, *, min_repeats: int = 5, max_repeats: int = 50,
                    budget: float = 1.0) -> float:
    """Median wall time of ``fn()`` after one warm-up call: device events on a GPU,
    ``perf_counter`` on the CPU; repeats until ``budget`` seconds or ``max_repeats``."""
    fn()
    _sync(xp)
    times: list[float] = []
    spent = 0.0
    while len(times) < min_repeats or (spent < budget and len(times) < max_repeats):
        if xp is np:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
        else:
            start, stop = xp.cuda.Event(), xp.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            dt = xp.cuda.get_elapsed_time(start, stop) / 1e3
        times.append(dt)
        spent += dt
    return float(statistics.median(times))


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _to_host(a) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else backend.cupy.asnumpy(a)


def _write_json(path: str, obj: dict) -> None:
    """Write JSON atomically: a temporary file in the same folder, then ``os.replace``."""
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, indent=2)
        fh.write("\n")


def run_demo(size: str = "small", device: str = "auto", precision: str = "ddddd",
             out: str = DEFAULT_OUT, *, seed: int = 0, rtol: float = 1e-6, maxiter: int = 1000,
             workers: int | None = None, quiet: bool = False) -> dict:
    """Solve the advection-diffusion source inversion end to end and write the outputs.

    Parameters
    ----------
    size : {"tiny", "small", "medium", "large"}
        Problem size (see :data:`SIZES`).
    device : {"auto", "cpu", "gpu"}
        Where the block-Toeplitz operator and CG run; ``"auto"`` picks the GPU when
        :func:`fftmatvec.backend.gpu_available`. The PDE itself is always solved on the CPU
        (SciPy's SuperLU).
    precision : str
        Five-letter precision of the operator used in the MAP solve. The consistency check
        reports the all-double (``ddddd``) error in any case, and this precision's as well.
    out : str or os.PathLike
        Output folder, created if missing; existing demo files in it are replaced.
    seed : int
        Seed of the random check vectors and of the observation noise.
    rtol : float
        CG's relative residual tolerance.
    maxiter : int
        CG's iteration cap.
    workers : int, optional
        Processes for the kernel computation; default: all available cores for the larger
        sizes, one for the small ones.
    quiet : bool
        Print nothing.

    Returns
    -------
    dict
        The summary written to ``summary.json``.

    Raises
    ------
    FFTMatvecValueError
        Unknown size or device, ``"gpu"`` without a GPU, bad precision, or an output path that
        is not a folder.
    """
    if size not in SIZES:
        raise FFTMatvecValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    prec = PrecisionConfig(precision)
    dev = resolve_device(device)
    xp = backend.cupy if dev == "gpu" else np
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise FFTMatvecValueError(f"out must be a folder, but {out!r} is a file")
    os.makedirs(out, exist_ok=True)
    cfg = SIZES[size]
    rep = _Reporter(8, quiet)
    rng = np.random.default_rng(seed)
    rep.say(f"fftmatvec demo: size={size}, device={dev}, precision={prec}, out={out}")

    # 1. Model ---------------------------------------------------------------------------
    rep.step(f"advection-diffusion on a {cfg.n}x{cfg.n} grid, {cfg.ns}x{cfg.ns} source cells, "
             f"{cfg.nd} sensors, {cfg.nt} backward-Euler steps; sparse LU of the stepper")
    t0 = time.perf_counter()
    problem = AdvectionDiffusion(cfg.n, cfg.ns, cfg.nd, cfg.nt)
    setup_seconds = time.perf_counter() - t0

    # 2. Kernel --------------------------------------------------------------------------
    method = problem.kernel_method()
    ncols = cfg.nd if method == "adjoint" else cfg.nm
    total_solves = ncols * cfg.nt
    if workers is None:
        workers = _cpu_count() if total_solves * problem.n_state > _PARALLEL_SOLVES else 1
    rep.step(f"kernel (Nd, Nm, Nt) = ({cfg.nd}, {cfg.nm}, {cfg.nt}) from {ncols} "
             f"{method} solves marched over {cfg.nt} steps"
             + (f", {workers} processes" if workers > 1 else ""))
    t0 = time.perf_counter()
    with rep.bar(total_solves, "solve", "kernel") as bar:
        K = problem.kernel(progress=bar.update, method=method, workers=workers)
    kernel_seconds = time.perf_counter() - t0
    rep.say(f"      {kernel_seconds:.2f} s")

    # 3. Operators -----------------------------------------------------------------------
    rep.step(f"block-Toeplitz operator on the {dev.upper()}")
    t0 = time.perf_counter()
    K_dev = xp.asarray(K)
    F64 = BlockToeplitz(K_dev, "ddddd")
    F = F64 if prec.letters == "ddddd" else F64.with_precision(prec)
    _sync(xp)
    operator_setup_seconds = time.perf_counter() - t0
    rep.say(f"      {F!r}, Khat {F.khat_nbytes / 2**20:.1f} MiB, engine {F.engine}, "
            f"{operator_setup_seconds:.2f} s")

    # 4. Check against direct time stepping ----------------------------------------------
    rep.step("check: block-Toeplitz operator vs direct time stepping, forward and adjoint")
    m_rand = rng.standard_normal((cfg.nm, cfg.nt))
    d_rand = rng.standard_normal((cfg.nd, cfg.nt))
    with rep.bar(2 * cfg.nt, "step", "PDE forward+adjoint") as bar:
        t0 = time.perf_counter()
        y_pde = problem.forward(m_rand, progress=bar.update)
        t1 = time.perf_counter()
        z_pde = problem.adjoint(d_rand, progress=bar.update)
        t2 = time.perf_counter()
    pde_forward_seconds, pde_adjoint_seconds = t1 - t0, t2 - t1
    m_dev, d_dev = xp.asarray(m_rand), xp.asarray(d_rand)
    errors = {}
    for name, op in (("ddddd", F64), (str(prec), F)):
        errors[name] = (_rel(_to_host(op.matvec(m_dev)), y_pde),
                        _rel(_to_host(op.rmatvec(d_dev)), z_pde))
    op_err, adj_err = errors["ddddd"]
    op_err_p, adj_err_p = errors[str(prec)]
    dot_pde = abs(float(np.vdot(y_pde, d_rand)) - float(np.vdot(m_rand, z_pde))) / abs(
        float(np.vdot(y_pde, d_rand)))
    rep.say(f"      forward rel. error {op_err:.2e}, adjoint rel. error {adj_err:.2e} (ddddd)"
            + (f"; {op_err_p:.2e}, {adj_err_p:.2e} ({prec})" if str(prec) != "ddddd" else ""))
    rep.say(f"      PDE forward+adjoint solve pair {pde_forward_seconds + pde_adjoint_seconds:.3f} s"
            f" ({2 * cfg.nt} sparse LU solves), dot test of the PDE pair {dot_pde:.1e}")

    # 5. Timings of the block-Toeplitz products ------------------------------------------
    rep.step(f"timing block-Toeplitz products ({prec})")
    normal_unit = F.normal(1.0)
    matvec_seconds = _median_seconds(lambda: F.matvec(m_dev), xp)
    rmatvec_seconds = _median_seconds(lambda: F.rmatvec(d_dev), xp)
    normal_seconds = _median_seconds(lambda: normal_unit.matvec(m_dev), xp)
    pair_seconds = pde_forward_seconds + pde_adjoint_seconds
    speedup = pair_seconds / normal_seconds
    rep.say(f"      F m {matvec_seconds * 1e3:.3f} ms, F^T d {rmatvec_seconds * 1e3:.3f} ms, "
            f"F^T F m {normal_seconds * 1e3:.3f} ms: {speedup:.0f}x faster than the PDE pair")

    # 6. Inverse problem -----------------------------------------------------------------
    rep.step(f"MAP source: synthetic truth, {_NOISE_LEVEL:.0%} noise, prior-preconditioned CG on "
             "F^T F/s^2 + R")
    m_true = true_source(problem.source_cell_centres(), cfg.nt, problem.t_final)
    d_clean = problem.forward(m_true)  # data from the PDE itself, not from the operator
    d_obs, sigma = noisy_observations(d_clean, _NOISE_LEVEL, rng)
    prior = SmoothnessPrior(cfg.ns, cfg.nt, problem.dt, xp=xp, **_PRIOR)
    with rep.bar(None, "it", "CG") as bar:
        result = solve_map(F, xp.asarray(d_obs), sigma, prior, rtol=rtol, maxiter=maxiter,
                           callback=lambda: bar.update(1))
    m_map = _to_host(result.m)
    d_pred = _to_host(F64.matvec(result.m))
    reconstruction_rel_error = _rel(m_map, m_true)
    residual = d_pred - d_obs
    data_misfit = float(np.linalg.norm(residual) / np.linalg.norm(d_obs))
    misfit_noise = float(np.sqrt(np.mean(residual**2)) / sigma)
    rep.say(f"      {result.iterations} CG iterations"
            f" ({'converged' if result.converged else 'NOT converged'}, {result.seconds:.2f} s);"
            f" reconstruction rel. error {reconstruction_rel_error:.3f}; data misfit"
            f" {data_misfit:.4f} (RMS residual / noise = {misfit_noise:.2f})")

    # 7. Uncertainty: the data-space posterior against CG ------------------------------------
    rep.step("posterior: data-space Hessian F G F^T + s^2 I formed and factored offline; online "
             "mean of a new observation against CG")
    if cfg.nd * cfg.nt > _POSTERIOR_MAX:
        posterior = {"skipped": f"H_d of order Nd*Nt = {cfg.nd * cfg.nt} is above the demo's "
                                f"{_POSTERIOR_MAX}"}
        std_map = None
        rep.say(f"      skipped: {posterior['skipped']}")
    else:
        posterior = _posterior(F64, prior, sigma, xp.asarray(d_obs), problem, m_true, rng, rep)
        std_map = posterior.pop("std_at_times")
        _say_posterior(rep, cfg, posterior)

    # 8. Outputs -------------------------------------------------------------------------
    rep.step(f"writing outputs to {out}")
    files = {
        "figure": "demo.png",
        "summary": "summary.json",
        "matrix": "matrix.h5",
        "m_true": "m_true.h5",
        "m_map": "m_map.h5",
        "d_obs": "d_obs.h5",
    }
    paths = {k: os.path.join(out, v) for k, v in files.items()}
    io.save_matrix(paths["matrix"], K, layout="native")
    io.save_vector(paths["m_true"], m_true, space="param")
    io.save_vector(paths["m_map"], m_map, space="param")
    io.save_vector(paths["d_obs"], d_obs, space="obs")
    from .plot import plot_demo

    plot_demo(paths["figure"], problem, m_true, m_map, d_obs, d_pred, d_clean,
              std=std_map, timings=None if std_map is None else {
                  "online mean()": posterior["mean_seconds"],
                  "CG, float64": posterior["cg_seconds"],
                  "CG, mixed": posterior["cg_mixed_seconds"]},
              title=(f"fftmatvec demo ({size}): {cfg.nd} sensors, {cfg.nm} source cells x "
                     f"{cfg.nt} steps; {result.iterations} CG iterations, reconstruction error "
                     f"{reconstruction_rel_error:.2f}"))

    summary = {
        "size": size,
        "device": dev,
        "precision": str(prec),
        "nd": cfg.nd,
        "nm": cfg.nm,
        "nt": cfg.nt,
        "operator_rel_error": op_err,
        "adjoint_rel_error": adj_err,
        "operator_rel_error_at_precision": op_err_p,
        "adjoint_rel_error_at_precision": adj_err_p,
        "pde_dot_test_rel_error": dot_pde,
        "cg_iterations": result.iterations,
        "cg_converged": result.converged,
        "cg_rtol": rtol,
        "cg_seconds": result.seconds,
        "reconstruction_rel_error": reconstruction_rel_error,
        "data_misfit": data_misfit,
        "data_misfit_rms_over_noise": misfit_noise,
        "noise_level": _NOISE_LEVEL,
        "noise_std": sigma,
        "matvec_seconds": matvec_seconds,
        "rmatvec_seconds": rmatvec_seconds,
        "normal_matvec_seconds": normal_seconds,
        "pde_solve_pair_seconds": pair_seconds,
        "pde_device": "cpu (SciPy SuperLU, serial)",
        "pde_forward_seconds": pde_forward_seconds,
        "pde_adjoint_seconds": pde_adjoint_seconds,
        "speedup_normal_vs_pde_pair": speedup,
        "kernel_seconds": kernel_seconds,
        "kernel_method": method,
        "kernel_solves": total_solves,
        "kernel_workers": workers,
        "model_setup_seconds": setup_seconds,
        "operator_setup_seconds": operator_setup_seconds,
        "khat_bytes": F.khat_nbytes,
        "engine": F.engine,
        "model": {
            **asdict(cfg),
            "state_size": problem.n_state,
            "dt": problem.dt,
            "t_final": problem.t_final,
            "kappa": problem.kappa,
            "speed": problem.speed,
            "decay": problem.decay,
            "time_stepping": "backward Euler; K[:, :, l] = dt C A^-(l+1) B",
        },
        "prior": dict(_PRIOR),
        "posterior": posterior,
        "files": files,
        "versions": {"fftmatvec": __version__, "python": platform.python_version(),
                     "numpy": np.__version__},
        "gpu": backend.device_description().get("gpu") if dev == "gpu" else None,
    }
    summary["total_seconds"] = rep.elapsed
    _write_json(paths["summary"], summary)
    rep.say(f"done in {rep.elapsed:.1f} s: " + ", ".join(files.values()))
    return summary


def _posterior(F, prior, sigma, d_obs, problem, m_true, rng, rep) -> dict:
    """Step 7: the data-space posterior of the demo problem, and CG on the same problem.

    Returns the summary's ``posterior`` record, plus ``std_at_times``: the posterior standard
    deviation ``(Nm, 3)`` at :func:`~fftmatvec.demo.plot.panel_times` (a NumPy array)."""
    xp = F.xp
    noise = sigma**2
    t0 = time.perf_counter()
    post = inverse.DataSpacePosterior(F, prior, noise)
    post.factor(progress=None if not rep.quiet else False)
    _sync(xp)
    factor_seconds = time.perf_counter() - t0
    m_ds = post.mean(d_obs)
    # a new observation: another source drawn from the prior, observed through F, plus noise
    m_new = prior.sample(rng)
    d_new = F.matvec(m_new) + sigma * xp.asarray(rng.standard_normal(d_obs.shape))
    mean_seconds = _median_seconds(lambda: post.mean(d_new), xp)
    t0 = time.perf_counter()
    m_cg, info = inverse.map_cg(F, prior, noise, d_obs, precision="ddddd", rtol=_MAP_RTOL)
    _sync(xp)
    cg_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # "no tuning table": the a-priori model chooses, as said
        warnings.filterwarnings("ignore", message="no tuning table")
        m_mx, info_mx = inverse.map_cg(F, prior, noise, d_obs, precision="auto", rtol=_MAP_RTOL)
    _sync(xp)
    cg_mixed_seconds = time.perf_counter() - t0
    times = panel_times(problem.nt)
    t0 = time.perf_counter()
    var = post.variance(times=times, progress=None if not rep.quiet else False)
    variance_seconds = time.perf_counter() - t0
    std = _to_host(xp.sqrt(xp.maximum(var, 0.0)))
    m_host = _to_host(m_ds)
    inside = np.abs(m_host[:, times] - m_true[:, times]) <= 2 * std
    return {
        "n_data": post.n_data,
        "factor_seconds": factor_seconds,
        "factor_batch": post.factor_info["batch"],
        "factor_khat_bytes": post.factor_info["khat_bytes_read"],
        "mean_seconds": mean_seconds,
        "cg_seconds": cg_seconds,
        "cg_iterations": info.iterations,
        "cg_converged": info.converged,
        "cg_khat_bytes": info.khat_bytes,
        "cg_mixed_seconds": cg_mixed_seconds,
        "cg_mixed_iterations": info_mx.iterations,
        "cg_mixed_converged": info_mx.converged,
        "cg_mixed_products": info_mx.products,
        "cg_mixed_khat_bytes": info_mx.khat_bytes,
        "cg_mixed_raised": info_mx.raised,
        "cg_rtol": _MAP_RTOL,
        "mean_speedup_vs_cg": cg_seconds / mean_seconds,
        "map_rel_diff_cg": _rel(m_host, _to_host(m_cg)),
        "map_rel_diff_cg_mixed": _rel(m_host, _to_host(m_mx)),
        "variance_seconds": variance_seconds,
        "std_times": times,
        "std_mean_at_times": [float(v) for v in std.mean(axis=0)],
        "truth_within_2std_fraction": float(inside.mean()),
        "std_at_times": std,
    }

def _say_posterior(rep, cfg, post) -> None:
    """Step 7's result line."""
    rep.say(f"      H_d of order {cfg.nd * cfg.nt}: formed and factored in "
            f"{post['factor_seconds']:.2f} s; online mean {post['mean_seconds'] * 1e3:.2f} ms vs "
            f"CG {post['cg_seconds']:.2f} s ({post['mean_speedup_vs_cg']:.0f}x); data-space vs "
            f"CG MAP {post['map_rel_diff_cg']:.1e} (float64), {post['map_rel_diff_cg_mixed']:.1e}"
            f" (mixed: {post['cg_mixed_khat_bytes'] / post['cg_khat_bytes']:.2f} of float64 "
            f"CG's Khat bytes)")
