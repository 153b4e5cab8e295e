"""
Conjugate gradients on a process grid
=====================================

:class:`~fftmatvec.DistributedBlockToeplitz` on a :class:`~fftmatvec.ProcessGrid` of the
ranks of an MPI communicator. Here the communicator has one rank, so the script runs without
``mpiexec``; the same lines run unchanged under ``mpiexec -n 4 python plot_distributed_cg.py``,
each rank then holding its block of the kernel and its slices of the vectors.

We solve the Tikhonov-regularised least-squares problem
``(F^T F + alpha I) m = F^T d`` with :func:`fftmatvec.distributed.cg`.
"""

import matplotlib.pyplot as plt
import numpy as np
from mpi4py import MPI

import fftmatvec as fm
from fftmatvec import distributed as dist

nd, nm, nt = 24, 8, 64
rng = np.random.default_rng(0)
lag = np.arange(nt)
# the kernel (Nd, Nm, Nt): sensor i sees parameter j as a pulse, delayed and scaled
delay = rng.integers(0, 6, size=(nd, nm, 1))
K = rng.uniform(0.5, 1.0, size=(nd, nm, 1)) * np.exp(-0.5 * ((lag - delay) / 1.5) ** 2)

grid = fm.ProcessGrid(MPI.COMM_WORLD)
F = fm.DistributedBlockToeplitz(grid, K, precision="ddddd")
print(f"grid {F.grid.shape} on {grid.size} rank(s); this rank owns parameter rows "
      f"{F.local_range('param')} and observation rows {F.local_range('obs')}")

# %%
# Data from a known source, with noise.
t = lag / nt
m_true = np.sin(2 * np.pi * np.outer(np.linspace(0.5, 2.0, nm), t))  # (Nm, Nt)
d_clean = fm.BlockToeplitz(K) @ m_true
sigma = 0.01 * np.abs(d_clean).max()
d_obs = d_clean + sigma * rng.standard_normal(d_clean.shape)

# %%
# Every rank works on its own slices; ``F.normal()`` is ``F^T F``.
alpha = 1e-2


class Regularised:
    """``F^T F + alpha I`` on this rank's slices, with the grid's inner product."""

    def __init__(self, normal, op):
        self.normal, self.op = normal, op

    def matvec(self, v):
        return self.normal.matvec(v) + alpha * v

    def dot(self, a, b):
        return self.op.dot(a, b)


d_local = F.distribute(d_obs, "obs")
b = F.rmatvec(d_local)
A = Regularised(F.normal(), F)
steps = []
m_local, info = dist.cg(A, b, rtol=1e-8, callback=lambda x: steps.append(1))
m_map = F.collect(m_local, "param")
residual = F.norm(b - A.matvec(m_local)) / F.norm(b)
print(f"CG: {len(steps)} iterations, relative residual {residual:.1e}")
print(f"relative error of the estimate: "
      f"{np.linalg.norm(m_map - m_true) / np.linalg.norm(m_true):.3f}")

# %%
# The true source and the estimate for three parameters.
fig, ax = plt.subplots(figsize=(8, 4))
for j, colour in zip((0, nm // 2, nm - 1), ("C0", "C1", "C2")):
    ax.plot(t, m_true[j], color=colour, lw=1, label=f"parameter {j}, true")
    ax.plot(t, m_map[j], "--", color=colour, lw=2, label=f"parameter {j}, estimate")
ax.set_xlabel("time")
ax.legend(fontsize=8, ncol=3)
fig.tight_layout()
