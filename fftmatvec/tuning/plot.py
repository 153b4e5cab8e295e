"""The plot of one entry: time against error (log axis), the front joined, ``ddddd`` marked."""

from __future__ import annotations

__all__ = ["plot_entry"]


def plot_entry(entry, path) -> None:
    """Write a PNG of ``entry``'s points to ``path`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1e-17
    pts = {p["precision"]: p for p in entry["points"]}
    fig, ax = plt.subplots(figsize=(9, 6))
    for name, p in pts.items():
        ax.scatter(p["time"] * 1e3, max(p["error_max"], floor), s=14, color="0.6")
        ax.annotate(name, (p["time"] * 1e3, max(p["error_max"], floor)), fontsize=6, color="0.4")
    fr = [pts[n] for n in entry["front"]]
    ax.plot([p["time"] * 1e3 for p in fr], [max(p["error_max"], floor) for p in fr], "o-",
            color="C0", label="Pareto front")
    if "ddddd" in pts:
        d = pts["ddddd"]
        ax.scatter(d["time"] * 1e3, max(d["error_max"], floor), s=80, marker="*", color="C3",
                   label="ddddd (reference)", zorder=5)
    ax.set_yscale("log")
    ax.set_xlabel("median time (ms)")
    ax.set_ylabel("relative error vs ddddd (max over inputs)")
    ax.set_title(f"{entry['op']} nm={entry['nm']} nd={entry['nd']} nt={entry['nt']} "
                 f"nrhs={entry['nrhs']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
