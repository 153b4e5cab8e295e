"""pylops-mpi adapter (optional: ``pip install pylops-mpi``).

``op.as_pylops_mpi()`` returns a ``pylops_mpi.MPILinearOperator`` acting on
``pylops_mpi.DistributedArray`` vectors (``Partition.SCATTER``, flat local arrays), whose
local arrays are exactly this package's local slices: pylops-mpi's ``cg`` and ``cgls`` then
run on the distributed operator. Rank ``q`` of the grid's communicator owns global parameter
rows in rank order, so ``DistributedArray.asarray()`` of a parameter vector is the global
vector; an observation vector's slices follow the grid's row-major order instead, so use
:func:`to_global` (``op.collect``) for those.
"""

from __future__ import annotations

from .._errors import FFTMatvecValueError

__all__ = ["as_pylops_mpi", "distributed_array", "to_global"]


def _pylops_mpi():
    try:
        import pylops_mpi
    except ImportError as exc:  # optional dependency
        raise FFTMatvecValueError(
            "as_pylops_mpi needs pylops-mpi (pip install pylops-mpi)") from exc
    return pylops_mpi


def _local_shapes(op, space: str) -> list:  # one replica: the grid's ranks are every rank
    pr, _ = op.grid.shape
    out = []
    for q in range(op.grid.size):
        a, b = op.layout.owned(space, q % pr, q // pr)
        out.append(((b - a) * op.nt,))
    return out


def distributed_array(op, v_local, space: str = "param"):
    """A ``DistributedArray`` holding this rank's slice ``v_local`` of a ``space`` vector
    (collective: pylops-mpi checks the local shapes)."""
    pm = _pylops_mpi()
    n = op.layout.size(space) * op.nt
    local = v_local.reshape(-1)
    engine = "numpy" if op.xp.__name__ == "numpy" else "cupy"
    return pm.DistributedArray(global_shape=n, base_comm=op.grid.comm,
                               partition=pm.Partition.SCATTER,
                               local_shapes=_local_shapes(op, space), local_array=local,
                               engine=engine, dtype=local.dtype)


def to_global(op, x, space: str = "param"):
    """The global ``(N, Nt)`` vector of a ``DistributedArray`` on every rank."""
    return op.collect(x.local_array.reshape(op.local_shape(space)), space)


def as_pylops_mpi(op):
    """``op`` (a distributed operator or normal operator) as an ``MPILinearOperator``."""
    pm = _pylops_mpi()
    from .operator import DistributedNormalOperator

    if op.grid.replicas > 1:  # the same on every rank: raised on every rank
        raise FFTMatvecValueError(
            f"as_pylops_mpi needs a grid of one replica (pylops-mpi spreads a vector over every "
            f"rank of the communicator), got {op.grid.replicas} replicas; build the operator "
            f"on ProcessGrid(comm, replicas=1) for pylops-mpi")

    space_in = "param"
    space_out = "param" if isinstance(op, DistributedNormalOperator) else "obs"

    class _FFTMatvecMPIOperator(pm.MPILinearOperator):
        def __init__(self):
            super().__init__(shape=op.shape, dtype=op.dtype, base_comm=op.grid.comm)
            self.op = op

        def _matvec(self, x):
            y = op.matvec(x.local_array.reshape(op.local_shape(space_in)))
            return distributed_array(op, y, space_out)

        def _rmatvec(self, x):
            y = op.rmatvec(x.local_array.reshape(op.local_shape(space_out)))
            return distributed_array(op, y, space_in)

    return _FFTMatvecMPIOperator()
