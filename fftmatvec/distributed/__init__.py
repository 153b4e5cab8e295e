"""Products distributed over ``R`` replicas of a ``pr x pc`` process grid (mpi4py; NCCL for
GPU operators).

:class:`ProcessGrid` arranges the ranks of an explicit communicator; rank ``(r, c)`` of a
:class:`DistributedBlockToeplitz` holds the kernel block of its sensor rows and parameter
columns, and a slice of each vector; replica groups split a batch's right-hand sides.
:mod:`.model` is the cost model that chooses the layout and projects the scaling. :func:`cg` runs conjugate gradients on distributed
vectors with the same lines as on a single process; :meth:`DistributedBlockToeplitz.as_pylops_mpi`
plugs the operator into pylops-mpi's solvers. mpi4py is imported only when used.
"""

from .._errors import FFTMatvecDistributedError
from .grid import ProcessGrid, choose_grid, comm_bytes
from .layout import Layout, block_partition
from .model import Machine, choose_layout
from .operator import DistributedBlockToeplitz, DistributedNormalOperator
from .solvers import cg

__all__ = [
    "ProcessGrid",
    "DistributedBlockToeplitz",
    "DistributedNormalOperator",
    "FFTMatvecDistributedError",
    "Layout",
    "block_partition",
    "choose_grid",
    "choose_layout",
    "Machine",
    "comm_bytes",
    "cg",
]
