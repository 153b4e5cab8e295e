"""The process grid (``R`` replicas of a ``pr x pc`` grid) and the byte count that chooses it.

:func:`comm_bytes` and :func:`choose_grid` are pure functions of the sizes (unit-tested
without MPI); :mod:`.model` chooses the replicas with them. :class:`ProcessGrid` wraps an
explicit communicator; it never reaches for ``COMM_WORLD``.

Cost model
----------
With the layout of :mod:`.layout`, a forward product moves, on rank ``(r, c)``:

* the all-gather of the parameter slices within process column ``c``: the rank receives the
  ``|cols(c)| - |param(r, c)|`` parameter rows it does not own, ``Nt`` samples each, at stage 1's
  precision (4 bytes for ``s``, 8 for ``d``);
* the reduce-scatter of the partial outputs within process row ``r``: the rank sends (a ring or
  pairwise algorithm) the ``|rows(r)| - |obs(r, c)|`` sensor rows it does not own, at stage 5's
  precision.

The adjoint mirrors it (gather of observations in the row at stage 1's precision, reduce-scatter
of parameters in the column at stage 5's). The normal operator gathers parameters (stage 1),
all-reduces the sensor rows within the row (twice a reduce-scatter's bytes, stage 5) and
reduce-scatters parameters (stage 5). The cost of a grid is the largest of these byte counts
over the ranks (the slowest rank sets the product's time). The default objective is a
forward-adjoint pair, what an iterative solver applies per iteration. Ties are broken by the
largest kernel block (computation balance), then by fewer process rows. Message latency is
not modelled: the grids compared here send the same number of messages per rank within a
factor of two.
"""

from __future__ import annotations

from typing import Literal

from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from .._typing import Comm
from ..precision import PrecisionConfig
from .layout import Layout, block_partition, check_fit

__all__ = ["ProcessGrid", "comm_bytes", "choose_grid", "PRODUCTS"]

PRODUCTS = ("pair", "forward", "adjoint", "normal")


def _stage_bytes(precision) -> tuple[int, int]:
    p = PrecisionConfig(precision)
    return p.pad_dtype.itemsize, p.reduce_dtype.itemsize


def comm_bytes(nd: int, nm: int, nt: int, pr: int, pc: int,
               precision: str | PrecisionConfig = "ddddd") -> dict:
    """Bytes the busiest rank communicates per product on a ``pr x pc`` grid.

    Returns
    -------
    dict with keys ``"forward"``, ``"adjoint"``, ``"normal"``, ``"pair"`` (forward + adjoint),
    each an int: the maximum over ranks of the bytes that rank receives in the gather plus the
    bytes it sends in the reduction (see the module's notes).
    """
    check_fit(nd, nm, pr, pc)
    b1, b5 = _stage_bytes(precision)
    lay = Layout(nd, nm, pr, pc)
    rows = block_partition(nd, pr)
    cols = block_partition(nm, pc)
    worst = dict.fromkeys(PRODUCTS, 0)
    for r in range(pr):
        for c in range(pc):
            pa, pb = lay.param_range(r, c)
            oa, ob = lay.obs_range(r, c)
            p_other = (cols[c][1] - cols[c][0]) - (pb - pa)  # parameter rows not owned
            o_other = (rows[r][1] - rows[r][0]) - (ob - oa)  # sensor rows not owned
            fwd = nt * (b1 * p_other + b5 * o_other)
            adj = nt * (b1 * o_other + b5 * p_other)
            nrm = nt * (b1 * p_other + 2 * b5 * o_other + b5 * p_other)
            for key, val in (("forward", fwd), ("adjoint", adj), ("normal", nrm),
                             ("pair", fwd + adj)):
                worst[key] = max(worst[key], val)
    return worst


def _divisor_pairs(size: int):
    return [(pr, size // pr) for pr in range(1, size + 1) if size % pr == 0]


def choose_grid(size: int, nd: int, nm: int, nt: int, precision: str | PrecisionConfig = "ddddd",
                product: Literal["pair", "forward", "adjoint", "normal"] = "pair"
                ) -> tuple[int, int]:
    """The ``(pr, pc)`` with ``pr * pc == size`` that minimises :func:`comm_bytes` for
    ``product`` among the grids that fit (``pr <= nd``, ``pc <= nm``).

    Raises
    ------
    FFTMatvecValueError
        No factorisation of ``size`` fits the sizes, or a bad ``product``.
    """
    if product not in PRODUCTS:
        raise FFTMatvecValueError(f"product must be one of {PRODUCTS}, got {product!r}")
    if size < 1:
        raise FFTMatvecValueError(f"size must be >= 1, got {size}")
    best = None
    for pr, pc in _divisor_pairs(size):
        if pr > nd or pc > nm:
            continue
        cost = comm_bytes(nd, nm, nt, pr, pc, precision)[product]
        rmax = block_partition(nd, pr)[0]
        cmax = block_partition(nm, pc)[0]
        block = (rmax[1] - rmax[0]) * (cmax[1] - cmax[0])
        key = (cost, block, pr)
        if best is None or key < best[0]:
            best = (key, (pr, pc))
    if best is None:
        raise FFTMatvecValueError(
            f"no process grid of {size} ranks fits the kernel (Nd={nd}, Nm={nm}): every "
            f"factorisation pr x pc = {size} has pr > Nd or pc > Nm; use fewer ranks"
        )
    return best[1]


def _check_extent(value, name: str):
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise FFTMatvecTypeError(f"{name} must be a positive integer or None, got {value!r}")
    value = int(value)
    if value < 1:
        raise FFTMatvecValueError(f"{name} must be a positive integer or None, got {value}")
    return value


class ProcessGrid:
    """``replicas`` groups of ranks, each a ``rows x cols`` grid, of an explicit MPI
    communicator.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; the grid works on a duplicate of it, so its messages never match
        the caller's.
    rows, cols : int, optional
        Shape of each replica's grid. Both: ``replicas * rows * cols`` must equal the
        communicator's size. One: the other is the replica's ranks divided by it. Neither:
        chosen per operator by the cost model (:func:`choose_grid`, and
        :func:`~fftmatvec.distributed.model.choose_layout` for the replicas) from the kernel's
        sizes, the precision of stages 1 and 5, and the batch size.
    replicas : int, optional
        Replica groups ``R``, each holding the whole operator (a whole ``Khat`` over its own
        ``rows x cols`` ranks); a batch's right-hand sides are split across them. None: 1
        where ``rows`` or ``cols`` is given, else the cost model's choice for the batch size
        the operator is built for (1 for one vector).

    Notes
    -----
    Rank ``q`` of the communicator belongs to replica ``g = q // (rows * cols)`` and sits at
    ``(r, c) = (s % rows, s // rows)`` of its grid, ``s = q % (rows * cols)`` (column-major,
    so that the parameter slices follow the rank order, as pylops-mpi's ``DistributedArray``
    expects; the replicas are consecutive blocks of ranks, so that a replica's collectives stay
    within as few nodes as the ranks allow). Construction is collective: every rank checks
    that all ranks passed the same ``rows``, ``cols`` and ``replicas``.
    """

    def __init__(self, comm: Comm, rows: int | None = None, cols: int | None = None,
                 replicas: int | None = None, *, _resolved=None) -> None:
        if not all(hasattr(comm, a) for a in ("Get_size", "Get_rank", "Split", "Dup")):
            raise FFTMatvecTypeError(
                f"comm must be an mpi4py communicator (mpi4py.MPI.Comm), got {type(comm).__name__}"
            )
        self.comm = comm
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        if _resolved is not None:
            self._replicas, self._rows, self._cols, self._comms = _resolved
            return
        err = None
        try:
            rows, cols = _check_extent(rows, "rows"), _check_extent(cols, "cols")
            replicas = _check_extent(replicas, "replicas")
            if replicas is None and (rows is not None or cols is not None):
                replicas = 1
            if replicas is not None and self.size % replicas:
                raise FFTMatvecValueError(
                    f"replicas={replicas} does not divide the communicator's {self.size} ranks")
            group = self.size // replicas if replicas is not None else self.size
            if rows is not None and cols is not None and rows * cols != group:
                raise FFTMatvecValueError(
                    f"{replicas} replica(s) of a {rows}x{cols} grid need "
                    f"{replicas * rows * cols} ranks, the communicator has {self.size}")
            for given, name in ((rows, "rows"), (cols, "cols")):
                if given is not None and group % given:
                    raise FFTMatvecValueError(
                        f"{name}={given} does not divide the {group} ranks of a replica "
                        f"({replicas} replica(s) of {self.size} ranks)")
            if rows is not None and cols is None:
                cols = group // rows
            elif cols is not None and rows is None:
                rows = group // cols
        except Exception as exc:  # raised on every rank alike once checked below
            err = exc
        seen = comm.allgather((rows, cols, replicas, None if err is None else str(err)))
        if len(set(s[:3] for s in seen)) > 1:
            raise FFTMatvecValueError(
                "ProcessGrid: ranks passed different grids: "
                + ", ".join(f"rank {q}: rows={s[0]} cols={s[1]} replicas={s[2]}"
                            for q, s in enumerate(seen)))
        if err is not None:
            raise err
        self._replicas, self._rows, self._cols, self._comms = replicas, rows, cols, None

    # ---- shape -----------------------------------------------------------------------------
    @property
    def resolved(self) -> bool:
        """True once the shape is known (given, or chosen by :meth:`resolve`)."""
        return self._rows is not None and self._replicas is not None

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, cols)`` of each replica's grid."""
        if not self.resolved:
            raise FFTMatvecValueError(
                "this grid chooses its shape per problem; call resolve(nd, nm, nt, precision)")
        return (self._rows, self._cols)

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:
        return self.shape[1]

    @property
    def replicas(self) -> int:
        """Replica groups ``R``."""
        self.shape  # noqa: B018 (raises while unresolved)
        return self._replicas

    @property
    def group_size(self) -> int:
        """Ranks of one replica: ``rows * cols``."""
        pr, pc = self.shape
        return pr * pc

    @property
    def replica(self) -> int:
        """This rank's replica group, ``0 .. replicas - 1``."""
        return self.rank // self.group_size

    @property
    def coords(self) -> tuple[int, int]:
        """This rank's ``(r, c)`` in its replica's grid."""
        pr, _ = self.shape
        s = self.rank % self.group_size
        return (s % pr, s // pr)

    def rank_of(self, r: int, c: int, replica: int = 0) -> int:
        """The communicator's rank at ``(r, c)`` of replica ``replica``."""
        return replica * self.group_size + c * self.shape[0] + r

    def resolve(self, nd: int, nm: int, nt: int, precision: str | PrecisionConfig = "ddddd",
                product: Literal["pair", "forward", "adjoint", "normal"] = "pair",
                batch: int = 1,
                memory: float | None = None) -> ProcessGrid:
        """This grid with its shape fixed: the given one (checked to fit), or the cost model's
        choice for the sizes (``batch`` right-hand sides per product and ``memory`` bytes of
        ``Khat`` per rank choose the replicas where they were not given). Collective (it
        builds the replica, row and column communicators)."""
        if self.resolved:
            check_fit(nd, nm, self._rows, self._cols)
            R, pr, pc = self._replicas, self._rows, self._cols
        elif self._replicas is not None:
            R = self._replicas
            pr, pc = choose_grid(self.size // R, nd, nm, nt, precision, product)
        else:
            from .model import choose_layout

            R, pr, pc = choose_layout(self.size, nd, nm, nt, precision, batch, memory,
                                      product=product)
        if self._comms is not None and (R, pr, pc) == (self._replicas, self._rows, self._cols):
            return self
        base = self.comm.Dup()
        group = pr * pc
        g, s = self.rank // group, self.rank % group
        r, c = s % pr, s // pr
        replica_comm = base.Split(color=g, key=s)  # the ranks of replica g, in grid order
        col_comm = replica_comm.Split(color=c, key=r)  # process column c, ordered by r
        row_comm = replica_comm.Split(color=r, key=c)  # process row r, ordered by c
        return ProcessGrid(self.comm, _resolved=(R, pr, pc, (base, row_comm, col_comm,
                                                             replica_comm)))

    @property
    def base_comm(self) -> Comm:
        """The grid's own duplicate of the communicator (every rank of every replica)."""
        return self._need_comms()[0]

    @property
    def row_comm(self) -> Comm:
        """The ranks of this rank's process row (in its replica), ordered by column."""
        return self._need_comms()[1]

    @property
    def col_comm(self) -> Comm:
        """The ranks of this rank's process column (in its replica), ordered by row."""
        return self._need_comms()[2]

    @property
    def replica_comm(self) -> Comm:
        """The ranks of this rank's replica, in grid order (column-major)."""
        return self._need_comms()[3]

    def _need_comms(self):
        if self._comms is None:
            raise FFTMatvecValueError("call resolve(nd, nm, nt, precision) first")
        return self._comms

    # ---- GPU binding -----------------------------------------------------------------------
    def local_rank(self) -> int:
        """This rank's index among the ranks on its node (the shared-memory split)."""
        from mpi4py import MPI

        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        try:
            return node.Get_rank()
        finally:
            node.Free()

    def device_id(self, device_count: int | None = None) -> int:
        """GPU of this rank: ``local_rank % device_count``, the count being what CuPy sees,
        i.e. after ``CUDA_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` (one visible GPU per
        rank, as ``srun --gpus-per-task=1`` sets, gives device 0). Collective: every rank
        takes part in the node split before a rank without a GPU raises."""
        local = self.local_rank()
        if device_count is None:
            from .. import backend

            if not backend.gpu_available():
                raise FFTMatvecValueError("no GPU is available (CuPy is missing or sees none)")
            device_count = backend.cupy.cuda.runtime.getDeviceCount()
        return local % device_count

    def __repr__(self) -> str:
        shape = f"{self._rows}x{self._cols}" if self.resolved else "auto"
        reps = f", replicas={self._replicas}" if self.resolved and self._replicas > 1 else ""
        return f"ProcessGrid({shape}{reps}, size={self.size}, rank={self.rank})"
