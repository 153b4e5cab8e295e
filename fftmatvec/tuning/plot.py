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
    rank = {name: i for i, name in enumerate(entry["front"])}
    for name, p in pts.items():
        xy = (p["time"] * 1e3, max(p["error_max"], floor))
        ax.scatter(*xy, s=14, color="0.6")
        if name in rank:  # the front's configurations labelled clearly (staggered), the rest faintly
            ax.annotate(name, xy, xytext=(6, 6 + 12 * (rank[name] % 3)),
                        textcoords="offset points", fontsize=9, color="C0", weight="bold",
                        arrowprops={"arrowstyle": "-", "color": "C0", "lw": 0.5})
        else:
            ax.annotate(name, xy, fontsize=5, color="0.55")
    fr = [pts[n] for n in entry["front"]]
    ax.plot([p["time"] * 1e3 for p in fr], [max(p["error_max"], floor) for p in fr], "o-",
            color="C0", label="Pareto front")
    if "ddddd" in pts:
        d = pts["ddddd"]
        ax.scatter(d["time"] * 1e3, max(d["error_max"], floor), s=80, marker="*", color="C3",
                   label="ddddd (reference)", zorder=5)
    ax.set_yscale("log")
    ax.set_xlabel("median time (ms)")
    ax.set_ylabel(f"relative error vs ddddd (max over inputs; 0 drawn at {floor:g})")
    ax.set_title(f"{entry['op']} nm={entry['nm']} nd={entry['nd']} nt={entry['nt']} "
                 f"nrhs={entry['nrhs']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
