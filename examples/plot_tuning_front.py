"""
A tuning front: time against error
==================================

``precision="auto"`` chooses, for a tolerance, the fastest precision of a tuning table measured
by ``fftmatvec tune``. The table keeps, per shape, the time and the relative error against
``ddddd`` of each five-letter precision, and their Pareto front: the precisions no other one
beats in both time and error. This is a tiny sweep of the same kind on the CPU (a GPU's front
is what matters for speed; see the user guide's tuning page).
"""

import numpy as np
import matplotlib.pyplot as plt

from fftmatvec.tuning.sweep import sweep_shape

rng = np.random.default_rng(0)
K = rng.standard_normal((8, 64, 128))   # (Nd, Nm, Nt)
precisions = ["ddddd", "sdddd", "ddsdd", "sssdd", "sssss", "ddhdd", "sshss"]
entry = sweep_shape(K, "matvec", nrhs=1, precisions=precisions, repeat=5, inputs=2, rng=rng)
for p in entry["points"]:
    mark = "front" if p["precision"] in entry["front"] else ""
    print(f"{p['precision']}  {p['time'] * 1e3:7.3f} ms  error {p['error_max']:.1e}  {mark}")

# %%
# The front joined; ``ddddd`` is the reference, with an error of zero drawn at 1e-17.
pts = {p["precision"]: p for p in entry["points"]}
fig, ax = plt.subplots(figsize=(8, 5))
for name, p in pts.items():
    xy = (p["time"] * 1e3, max(p["error_max"], 1e-17))
    ax.scatter(*xy, color="C0" if name in entry["front"] else "0.6")
    ax.annotate(name, xy, xytext=(5, 5), textcoords="offset points", fontsize=9)
front = [pts[name] for name in entry["front"]]
ax.plot([p["time"] * 1e3 for p in front], [max(p["error_max"], 1e-17) for p in front], "-",
        color="C0", label="Pareto front")
ax.set_yscale("log")
ax.set_xlabel("median time of one product (ms)")
ax.set_ylabel("relative error against ddddd")
ax.legend()
fig.tight_layout()
