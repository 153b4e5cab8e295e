"""The demo's figure: true and MAP sources at a few times, the posterior standard deviation
there, the online mean's time against CG's, and sensor traces.

The figure is drawn on a bare :class:`matplotlib.figure.Figure` and rendered by Agg: no display
is needed and no global pyplot state is changed. The file is written atomically.
"""

from __future__ import annotations

import numpy as np

from ._files import atomic_open

__all__ = ["plot_demo", "panel_times"]


def panel_times(nt: int) -> list[int]:
    """The time steps of the figure's source panels: 20 %, 45 % and 70 % of the window."""
    return [int(round(f * (nt - 1))) for f in (0.2, 0.45, 0.7)]


def plot_demo(path, problem, m_true, m_map, d_obs, d_pred, d_clean, *, std=None, timings=None,
              title: str = "") -> None:
    """Write the demo figure to ``path`` (PNG).

    Parameters
    ----------
    path : str or os.PathLike
        Destination; written to a temporary name in the same folder, then renamed.
    problem : fftmatvec.demo.pde.AdvectionDiffusion
        The model (grid sizes, sensors, time step).
    m_true, m_map : (Nm, Nt) NumPy arrays
        True and reconstructed sources.
    d_obs, d_pred, d_clean : (Nd, Nt) NumPy arrays
        Noisy observations, predictions of the MAP source, noise-free data of the truth.
    std : (Nm, 3) NumPy array, optional
        Posterior standard deviation at :func:`panel_times`: a row of panels.
    timings : dict, optional
        Label -> seconds (the online mean and the CG solves): a bar chart beside them.
    title : str
        Figure title.
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend state is touched

    from .pde import vortex_velocity

    ns, nt, dt = problem.ns, problem.nt, problem.dt
    times = panel_times(nt)
    t_axis = (np.arange(nt) + 1) * dt
    vmax = float(max(np.abs(m_true).max(), np.abs(m_map).max(), 1e-300))

    extra = std is not None
    fig = Figure(figsize=(13, 12.8 if extra else 9.5), layout="constrained")
    grid = fig.add_gridspec(4 if extra else 3, 4,
                            height_ratios=[1, 1, 1, 0.9] if extra else [1, 1, 0.9])
    img = None
    for row, (field, label) in enumerate(((m_true, "true source"), (m_map, "MAP source"))):
        for col, t in enumerate(times):
            ax = fig.add_subplot(grid[row, col])
            img = ax.imshow(field[:, t].reshape(ns, ns), origin="lower", extent=(0, 1, 0, 1),
                            cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
            ax.set_title(f"{label}, t = {t_axis[t]:.2f}", fontsize=10)
            ax.set_xticks([0, 0.5, 1])
            ax.set_yticks([0, 0.5, 1])
            sx, sy = problem.sensor_xy().T
            ax.plot(sx, sy, "k.", ms=2.5)
    fig.colorbar(img, ax=[fig.axes[i] for i in range(len(times) * 2)], shrink=0.8,
                 label="source strength")

    # Domain: flow, sensors, and the sensors whose traces are shown.
    ax = fig.add_subplot(grid[0, 3])
    g = np.linspace(0, 1, 40)
    X, Y = np.meshgrid(g, g)
    vx, vy = vortex_velocity(X, Y, problem.speed)
    ax.streamplot(X, Y, vx, vy, density=0.8, color="0.7", linewidth=0.7)
    xy = problem.sensor_xy()
    ax.plot(xy[:, 0], xy[:, 1], "k.", ms=5, label="sensors")
    shown = _spread_sensors(xy, np.abs(d_clean).max(axis=1), 3)
    colors = ("C0", "C1", "C2")
    for c, i in zip(colors, shown):
        ax.plot(*xy[i], "o", mfc="none", mec=c, ms=11, mew=2)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_title(f"flow and {problem.nd} sensors", fontsize=10)

    # Total source strength over time.
    ax = fig.add_subplot(grid[1, 3])
    ax.plot(t_axis, m_true.sum(axis=0) / m_true.shape[0], "k-", label="true")
    ax.plot(t_axis, m_map.sum(axis=0) / m_map.shape[0], "C3--", label="MAP")
    ax.set_xlabel("time")
    ax.set_title("mean source over the domain", fontsize=10)
    ax.legend(fontsize=8)

    # Sensor traces: observed (noisy), predicted by the MAP source, noise-free truth.
    if extra:
        _uncertainty_row(fig, grid, problem, std, times, t_axis, timings)
    bottom = grid[-1, :].subgridspec(1, len(shown))
    for k, (c, i) in enumerate(zip(colors, shown)):
        ax = fig.add_subplot(bottom[0, k])
        ax.plot(t_axis, d_obs[i], ".", color=c, ms=2.5, alpha=0.6, label="observed")
        ax.plot(t_axis, d_pred[i], "-", color="k", lw=1.2, label="predicted (MAP)")
        ax.plot(t_axis, d_clean[i], ":", color="0.4", lw=1.0, label="noise-free")
        ax.set_xlabel("time")
        ax.set_title(f"sensor {i} at ({xy[i, 0]:.2f}, {xy[i, 1]:.2f})", fontsize=10)
        if k == 0:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)

    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)  # Agg renders PNG


def _uncertainty_row(fig, grid, problem, std, times, t_axis, timings) -> None:
    """Row 3: posterior standard deviation at ``times``; the timings as a bar chart."""
    ns = problem.ns
    smax = float(max(std.max(), 1e-300))
    img = None
    axes = []
    for col, t in enumerate(times):
        ax = fig.add_subplot(grid[2, col])
        img = ax.imshow(std[:, col].reshape(ns, ns), origin="lower", extent=(0, 1, 0, 1),
                        cmap="viridis", vmin=0, vmax=smax, interpolation="nearest")
        ax.set_title(f"posterior std, t = {t_axis[t]:.2f}", fontsize=10)
        ax.set_xticks([0, 0.5, 1])
        ax.set_yticks([0, 0.5, 1])
        sx, sy = problem.sensor_xy().T
        ax.plot(sx, sy, "w.", ms=2.5)
        axes.append(ax)
    fig.colorbar(img, ax=axes, shrink=0.8, label="standard deviation")
    if timings:
        ax = fig.add_subplot(grid[2, 3])
        labels, secs = list(timings), [timings[k] for k in timings]
        ax.barh(labels, secs, color=["C2"] + ["C0"] * (len(secs) - 1))
        ax.set_xscale("log")
        ax.set_xlabel("seconds (log)")
        for i, v in enumerate(secs):
            ax.text(v, i, f" {v * 1e3:.3g} ms" if v < 1 else f" {v:.3g} s", va="center",
                    fontsize=8)
        ax.set_title("MAP of a new observation", fontsize=10)


def _spread_sensors(xy, signal, k: int, min_dist: float = 0.3) -> list[int]:
    """Up to ``k`` sensors with the strongest signal, at least ``min_dist`` apart when possible."""
    order = [int(i) for i in np.argsort(-signal)]
    chosen: list[int] = []
    for i in order:
        if all(np.hypot(*(xy[i] - xy[j])) >= min_dist for j in chosen):
            chosen.append(i)
        if len(chosen) == k:
            return chosen
    return (chosen + [i for i in order if i not in chosen])[:k]
