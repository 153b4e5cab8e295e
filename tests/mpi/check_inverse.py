"""Run under mpiexec -n N: fftmatvec.inverse on a DistributedBlockToeplitz against dense float64.

Every grid of N ranks: the data-space posterior (mean, pointwise variance, covariance products,
save/load), map_cg, and a bad input on one rank refused on every rank. Prints "OK <n> <cases>"
on rank 0; any failure raises (and so ends the run with a nonzero status).
"""

import os
import sys
import tempfile

import numpy as np
import scipy.sparse.linalg as spla
from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from conftest import dense_btt  # noqa: E402

from fftmatvec import (DistributedBlockToeplitz, FFTMatvecDistributedError,  # noqa: E402
                       ProcessGrid, inverse)

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
cases = 0


def close(a, b, what, tol):
    global cases
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    e = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    if not e <= tol:
        raise AssertionError(f"rank {rank}: {what}: relative error {e:.3e} > {tol:g}")
    cases += 1


rng = np.random.default_rng(7)  # the same problem on every rank
nd, nm, nt = 5, 6, 7
K = rng.standard_normal((nd, nm, nt))
A = rng.standard_normal((nm * nt, nm * nt))
G = A @ A.T / (nm * nt) + 0.1 * np.eye(nm * nt)
noise = rng.uniform(0.5, 1.5, (nd, nt))
m_pr = rng.standard_normal((nm, nt))
d = rng.standard_normal((nd, nt))
X = rng.standard_normal((2, nm, nt))
Fd = dense_btt(K)
H = Fd @ G @ Fd.T + np.diag(noise.ravel())
mean = m_pr.ravel() + G @ Fd.T @ np.linalg.solve(H, d.ravel() - Fd @ m_pr.ravel())
cov = G - G @ Fd.T @ np.linalg.solve(H, Fd @ G)
prior = spla.aslinearoperator(G)
folder = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)

# every layout: R replica groups (each a whole operator; the batches of H_d's columns split
# across them) of rows x cols grids
layouts = [(R, rows, size // R // rows) for R in range(1, size + 1) if size % R == 0
           for rows in range(1, size // R + 1) if (size // R) % rows == 0]
for R, rows, cols in layouts:
    F = DistributedBlockToeplitz(ProcessGrid(comm, rows, cols, replicas=R), K)
    assert F.grid.replicas == R
    post = inverse.DataSpacePosterior(F, prior, noise, prior_mean=m_pr, batch=4,
                                      chunks=1 + rows % 2).factor()
    close(post.mean(d), mean, f"mean {R}x{F.grid.shape}", 1e-10)
    close(post.variance(), np.diag(cov), f"variance {F.grid.shape}", 1e-10)
    close(post.variance(times=[0, 6]), np.diag(cov).reshape(nm, nt)[:, [0, 6]],
          f"variance at two times {F.grid.shape}", 1e-10)
    close(post.covariance_matmat(X), (cov @ X.reshape(2, -1).T).T, "covariance_matmat", 1e-10)
    path = os.path.join(folder, "post.h5")
    post.save(path, overwrite=True)
    back = inverse.DataSpacePosterior.load(path, F, prior, noise)
    close(back.mean(d), mean, "mean after load", 1e-10)
    m, info = inverse.map_cg(F, prior, noise, d, prior_mean=m_pr, rtol=1e-10)
    if not info.converged:
        raise AssertionError(f"rank {rank}: map_cg did not converge: {info}")
    close(m, mean, f"map_cg {F.grid.shape}", 1e-8)
    # a bad observation vector on the last rank only: every rank raises, none hangs
    bad = d if rank != size - 1 else np.ones((nd, nt + 1))
    for call in (lambda: post.mean(bad), lambda: inverse.map_cg(F, prior, noise, bad)):
        try:
            call()
        except FFTMatvecDistributedError as exc:
            assert exc.ranks == [size - 1], exc.ranks
            cases += 1
        else:
            raise AssertionError(f"rank {rank}: a bad d_obs on rank {size - 1} was not refused")

# a grid operator runs in its own precision: another one is refused on every rank
try:
    inverse.DataSpacePosterior(F, prior, noise, precision="sssss")
except FFTMatvecDistributedError as exc:
    assert exc.ranks == list(range(size)) and "precision" in str(exc), exc
    cases += 1
else:
    raise AssertionError(f"rank {rank}: precision='sssss' on a grid was not refused")

comm.Barrier()
if rank == 0:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    print("OK", size, cases)
