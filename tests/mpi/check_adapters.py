"""Run under mpiexec -n N: the pylops-mpi adapter runs the checks of ``op.matvec``.

A complex, NaN-holding or masked slice passed through ``op.as_pylops_mpi()`` (on every rank or
on the last one only) raises on every rank, as ``op.matvec`` does; a good one gives the
product of the serial operator. Prints "OK <n> <cases>" on rank 0, or "SKIP <reason>" where
pylops-mpi is not installed.
"""

import numpy as np
from mpi4py import MPI

from fftmatvec import BlockToeplitz, DistributedBlockToeplitz, ProcessGrid
from fftmatvec.distributed import FFTMatvecDistributedError

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
last = size - 1
cases = 0
K = np.random.default_rng(0).standard_normal((5, 7, 4))


def expect(fn, what, ranks, words=()):
    """``fn()`` must raise :class:`FFTMatvecDistributedError` on this rank, naming ``ranks``
    as the failing ones and ``words``."""
    global cases
    try:
        fn()
    except FFTMatvecDistributedError as e:
        assert e.ranks == list(ranks), (what, e.ranks, str(e))
        for w in words:
            assert w in str(e), (what, w, str(e))
    else:
        raise AssertionError(f"rank {rank}: {what}: no error raised")
    comm.Barrier()  # every rank got here: nobody hangs
    cases += 1


def main(pm):
    from fftmatvec.distributed.pylops import distributed_array, to_global

    op = DistributedBlockToeplitz(ProcessGrid(comm), K)
    A = op.as_pylops_mpi()
    m_global = np.random.default_rng(1).standard_normal((7, 4))
    m = op.distribute(m_global, "param")
    n = 7 * 4

    def darray(local, dtype):
        return pm.DistributedArray(global_shape=n, base_comm=comm,
                                   partition=pm.Partition.SCATTER,
                                   local_shapes=comm.allgather((local.size,)),
                                   local_array=local.reshape(-1), dtype=dtype)

    # complex on every rank: refused, not reduced to its real part
    z = darray(m.astype(np.complex128) + 1j, np.complex128)
    expect(lambda: A.matvec(z), "complex input", ranks=range(size), words=("complex",))
    # NaN on the last rank only: an error on every rank
    bad = m.copy()
    if rank == last:
        bad.reshape(-1)[0] = np.nan
    expect(lambda: A.matvec(distributed_array(op, bad)), "NaN input", ranks=[last],
           words=("NaN",))
    # a masked slice, and a complex one, on the last rank only, through op.matvec itself
    masked = np.ma.array(m, mask=False) if rank == last else m
    expect(lambda: op.matvec(masked), "masked input", ranks=[last], words=("masked array",))
    cplx = m + 1j if rank == last else m
    expect(lambda: op.matvec(cplx), "complex slice", ranks=[last], words=("complex",))
    # and a good vector still gives the serial product
    y = to_global(op, A.matvec(distributed_array(op, m)), "obs")
    ref = BlockToeplitz(K) @ m_global
    assert np.abs(y - ref).max() <= 1e-12 * np.abs(ref).max()
    comm.Barrier()
    if rank == 0:
        print(f"OK {size} {cases}")


if __name__ == "__main__":
    try:
        import pylops_mpi
    except ImportError:
        if rank == 0:
            print("SKIP pylops-mpi is not installed")
    else:
        main(pylops_mpi)
