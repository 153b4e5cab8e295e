"""The cost model of one distributed product: machine constants, the collectives' times, the
time of a product on a layout, and the choice of replicas with the process grid.

Pure functions of the sizes and a :class:`Machine` (unit-tested without MPI);
:meth:`ProcessGrid.resolve <fftmatvec.distributed.ProcessGrid.resolve>` uses
:func:`choose_layout`, and ``scripts/project_scaling.py`` fits the constants to a published
weak-scaling curve and projects with them.

Collectives
-----------
A collective over ``p`` ranks that moves ``n`` bytes in all (the bytes gathered, or the bytes
of the vector reduced) takes a latency term and a bandwidth term, each rank sending and
receiving at ``bandwidth`` bytes per second:

* ``"ring"`` (a pipelined chain or ring, as NCCL's ring broadcast, reduce and reduce-scatter):
  ``(p - 1) * latency + n * share / bandwidth``;
* ``"log"`` (recursive doubling or halving, MPI's all-gather and reduce-scatter of short
  pieces): ``ceil(log2 p) * latency + n * share / bandwidth``,

with ``share = 1`` for a broadcast or reduce (the whole vector passes every rank) and
``(p - 1) / p`` for an all-gather or reduce-scatter (each rank sends or receives all but its
own piece). An all-reduce is a reduce-scatter and an all-gather.

A product
---------
``compute`` (the local block's product, seconds) plus its collectives: FFTMatvec's algorithm
broadcasts the input down the process column and reduces the output along the process row,
nothing overlapped, float64 on the wire (:func:`fftmatvec_time`); ours all-gathers the input
slices in the process column and reduce-scatters the output in the process row, in ``chunks``
pieces each, the wires sized by the precision of stages 1 and 5, and the block pipeline hides
the share ``overlap`` of what ``chunks`` pieces can hide of the shorter of compute and
communication (:func:`pipeline_time`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .._errors import FFTMatvecValueError
from ..precision import PrecisionConfig

__all__ = ["Machine", "collective_time", "fftmatvec_time", "pipeline_time", "khat_entry_bytes",
           "local_compute_time", "choose_layout", "fit_fftmatvec", "grids_of", "ALGORITHMS"]

#: latency terms of a collective over p ranks (see the module's notes)
ALGORITHMS = ("ring", "log")

#: stage 3's bytes per stored Khat entry, by its precision letter: complex128, complex64,
#: float16 complex (the scales per block are not counted)
_KHAT_BYTES = {"d": 16, "s": 8, "h": 4}


@dataclass(frozen=True)
class Machine:
    """Constants of the cost model.

    Parameters
    ----------
    latency : float
        Seconds per step of a collective (one message's start-up on the network path).
    bandwidth : float
        Bytes per second one GPU sends (and receives) in a collective.
    mem_bandwidth : float
        Bytes per second a GPU reads and writes its own memory (the local product is bound
        by reading ``Khat``).

    Notes
    -----
    The defaults are orders of magnitude of a GPU cluster (a network link of tens of GB/s,
    a few microseconds a message, high-bandwidth memory), for choosing a layout; a projection
    takes fitted constants (:func:`fit_fftmatvec`).
    """

    latency: float = 5.0e-6
    bandwidth: float = 25.0e9
    mem_bandwidth: float = 2.0e12

    def __post_init__(self):
        for name in ("latency", "bandwidth", "mem_bandwidth"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise FFTMatvecValueError(f"Machine.{name} must be a finite number >= 0, "
                                          f"got {value!r}")
        if self.bandwidth <= 0 or self.mem_bandwidth <= 0:
            raise FFTMatvecValueError("Machine.bandwidth and mem_bandwidth must be positive")


def _steps(p: int, algorithm: str) -> int:
    if algorithm == "ring":
        return p - 1
    if algorithm == "log":
        return math.ceil(math.log2(p))
    raise FFTMatvecValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")


def collective_time(kind: str, nbytes: float, p: int, machine: Machine,
                    algorithm: str = "ring") -> float:
    """Seconds of one collective (see the module's notes): ``kind`` one of ``"bcast"``,
    ``"reduce"`` (the whole ``nbytes`` pass every rank), ``"allgather"``,
    ``"reduce_scatter"`` (each rank all but its ``1/p``), ``"allreduce"`` (both); 0 on one
    rank."""
    if p < 1:
        raise FFTMatvecValueError(f"p must be >= 1, got {p}")
    if nbytes < 0:
        raise FFTMatvecValueError(f"nbytes must be >= 0, got {nbytes}")
    if p == 1:
        return 0.0
    steps = _steps(p, algorithm)
    if kind in ("bcast", "reduce"):
        share = 1.0
    elif kind in ("allgather", "reduce_scatter"):
        share = (p - 1) / p
    elif kind == "allreduce":
        return 2 * collective_time("reduce_scatter", nbytes, p, machine, algorithm)
    else:
        raise FFTMatvecValueError(
            "kind must be 'bcast', 'reduce', 'allgather', 'reduce_scatter' or 'allreduce', "
            f"got {kind!r}")
    return steps * machine.latency + nbytes * share / machine.bandwidth


def fftmatvec_time(compute: float, nd_loc: int, nm_loc: int, nt: int, pr: int, pc: int,
                   machine: Machine, algorithm: str = "ring") -> float:
    """Seconds of one forward product with FFTMatvec's algorithm on a ``pr x pc`` grid, each
    rank holding ``nd_loc x nm_loc`` blocks of ``Nt`` lags: the input slice (``nm_loc * Nt``
    float64) broadcast down the process column, ``compute``, the partial output
    (``nd_loc * Nt`` float64) reduced along the process row; nothing overlapped."""
    return (compute + collective_time("bcast", 8 * nm_loc * nt, pr, machine, algorithm)
            + collective_time("reduce", 8 * nd_loc * nt, pc, machine, algorithm))


def pipeline_time(compute: float, nd_loc: int, nm_loc: int, nt: int, pr: int, pc: int,
                  machine: Machine, precision="ddddd", overlap: float = 1.0, chunks: int = 4,
                  algorithm: str = "log", k: int = 1) -> float:
    """Seconds of one forward product of ``k`` vectors with this package's block pipeline.

    The all-gather of the column's ``nm_loc`` input rows (stage 1's precision) and the
    reduce-scatter of the row's ``nd_loc`` output rows (stage 5's) run as ``chunks``
    collectives each (their latency paid ``chunks`` times). With ``C`` chunks the first
    chunk's gather and the last chunk's reduction have nothing to overlap with, so a pipeline
    hides at most ``(C - 1) / C`` of the shorter of ``compute`` and the communication ``comm``;
    ``overlap`` (0 to 1) is the share of that it achieves::

        time = compute + comm - overlap * (C - 1) / C * min(compute, comm)

    (``overlap = 1``: ``max(compute, comm) + min(compute, comm) / C``, a two-stage pipeline;
    one chunk: compute then communicate).
    """
    if not 0.0 <= overlap <= 1.0:
        raise FFTMatvecValueError(f"overlap must be within [0, 1], got {overlap!r}")
    if chunks < 1 or k < 1:
        raise FFTMatvecValueError(f"chunks and k must be >= 1, got {chunks}, {k}")
    p = PrecisionConfig(precision)
    b1, b5 = p.pad_dtype.itemsize, p.reduce_dtype.itemsize
    gather = chunks * collective_time("allgather", k * b1 * nm_loc * nt / chunks, pr, machine,
                                      algorithm)
    reduce = chunks * collective_time("reduce_scatter", k * b5 * nd_loc * nt / chunks, pc,
                                      machine, algorithm)
    comm = gather + reduce
    return compute + comm - overlap * (chunks - 1) / chunks * min(compute, comm)


def khat_entry_bytes(precision) -> int:
    """Bytes of one stored ``Khat`` entry for ``precision`` (stage 3's letter)."""
    return _KHAT_BYTES[PrecisionConfig(precision).letters[2]]


def local_compute_time(nd_loc: int, nm_loc: int, nt: int, k: int, machine: Machine,
                       precision="ddddd") -> float:
    """A local block's product of ``k`` vectors as bound by memory traffic: its ``Khat``
    (``nd_loc * nm_loc * Nf`` entries at stage 3's precision, ``Nf = Nt + 1``) read once,
    and each vector's spectra (``(nd_loc + nm_loc) * Nf`` complex128, written and read)."""
    nf = nt + 1
    khat = nd_loc * nm_loc * nf * khat_entry_bytes(precision)
    vectors = k * (nd_loc + nm_loc) * nf * 16 * 2
    return (khat + vectors) / machine.mem_bandwidth


def choose_layout(size: int, nd: int, nm: int, nt: int, precision: str | PrecisionConfig = "ddddd",
                  batch: int = 1,
                  memory: float | None = None, machine: Machine | None = None,
                  product: Literal["pair", "forward", "adjoint", "normal"] = "pair"
                  ) -> tuple[int, int, int]:
    """``(replicas, pr, pc)`` for ``size`` ranks and a batch of ``batch`` right-hand sides.

    Every ``R`` dividing ``size`` with ``R <= batch`` is a candidate, its ``pr x pc`` grid of
    ``size // R`` ranks the one :func:`~fftmatvec.distributed.choose_grid` picks; a candidate
    whose ``Khat`` per rank (each replica holds a whole one) exceeds ``memory`` bytes is left
    out. The busiest replica computes ``ceil(batch / R)`` vectors: its time is
    :func:`local_compute_time` plus its collectives (:func:`comm_bytes
    <fftmatvec.distributed.comm_bytes>` of ``product`` per vector at ``machine.bandwidth``,
    ``log`` latency), not overlapped. The fastest wins; ties go to fewer replicas. One vector
    (``batch=1``) always gives one replica. Where no candidate fits ``memory``, the one with
    the least ``Khat`` per rank (one replica).

    Raises
    ------
    FFTMatvecValueError
        ``size`` or ``batch`` below 1, no grid of ``size`` ranks fits the sizes.
    """
    from .grid import choose_grid, comm_bytes
    from .layout import block_partition

    if size < 1 or batch < 1:
        raise FFTMatvecValueError(f"size and batch must be >= 1, got {size}, {batch}")
    machine = machine or Machine()
    best, fallback = None, None
    for R in range(1, min(size, batch) + 1):
        if size % R:
            continue
        try:
            pr, pc = choose_grid(size // R, nd, nm, nt, precision, product)
        except FFTMatvecValueError:
            continue  # too many ranks a replica for the sizes
        rows = block_partition(nd, pr)[0]
        cols = block_partition(nm, pc)[0]
        nd_loc, nm_loc = rows[1] - rows[0], cols[1] - cols[0]
        khat = nd_loc * nm_loc * (nt + 1) * khat_entry_bytes(precision)
        k_r = -(-batch // R)
        comm = comm_bytes(nd, nm, nt, pr, pc, precision)[product] * k_r / machine.bandwidth
        steps = (math.ceil(math.log2(pr)) if pr > 1 else 0) + (math.ceil(math.log2(pc))
                                                                 if pc > 1 else 0)
        halves = 1 if product in ("forward", "adjoint") else 2  # products per objective
        t = halves * (local_compute_time(nd_loc, nm_loc, nt, k_r, machine, precision)
                      + steps * machine.latency) + comm
        if fallback is None:
            fallback = (R, pr, pc)
        if memory is not None and khat > memory:
            continue
        if best is None or t < best[0]:
            best = (t, (R, pr, pc))
    if best is not None:
        return best[1]
    if fallback is None:
        raise FFTMatvecValueError(
            f"no layout of {size} ranks fits the kernel (Nd={nd}, Nm={nm}); use fewer ranks")
    return fallback


def grids_of(p: int) -> list[tuple[int, int]]:
    """Every ``(pr, pc)`` with ``pr * pc == p``."""
    return [(r, p // r) for r in range(1, p + 1) if p % r == 0]


def fit_fftmatvec(points, nd_loc: int, nm_loc: int, nt: int, compute: float | None = None,
                  algorithm: str = "ring", mem_bandwidth: float = Machine.mem_bandwidth):
    """Machine constants fitted to a weak-scaling curve of FFTMatvec's algorithm.

    Parameters
    ----------
    points : sequence of (p, seconds)
        The curve: the time of one product on ``p`` GPUs, each holding ``nd_loc x nm_loc``
        blocks of ``Nt`` lags, on the best grid for that ``p``.
    compute : float, optional
        The local product's seconds; default the time at ``p = 1`` (no communication there).
    algorithm : {"ring", "log"}
        The latency term of FFTMatvec's broadcast and reduce (NCCL's are rings).

    Returns
    -------
    machine : Machine
        ``latency`` and ``bandwidth`` minimising the sum of squared relative residuals
        ``(model - measured) / measured`` (both >= 0), ``mem_bandwidth`` as given.
    fits : list of (p, (pr, pc), model seconds, relative residual)
        Each point's best grid under the fitted constants (the fit alternates between the
        grids and the constants until the grids no longer change) and its residual.
    """
    import numpy as np
    from scipy.optimize import nnls

    points = [(int(p), float(t)) for p, t in points]
    if compute is None:
        ones = [t for p, t in points if p == 1]
        if not ones:
            raise FFTMatvecValueError("compute is needed when the curve has no point at p = 1")
        compute = ones[0]
    grids = {p: (1, p) for p, _ in points}
    machine = Machine(mem_bandwidth=mem_bandwidth)
    for _ in range(10):
        rows, rhs = [], []
        for p, t in points:
            if p == 1:
                continue
            pr, pc = grids[p]
            steps = ((_steps(pr, algorithm) if pr > 1 else 0)
                     + (_steps(pc, algorithm) if pc > 1 else 0))
            nbytes = (8 * nm_loc * nt if pr > 1 else 0) + (8 * nd_loc * nt if pc > 1 else 0)
            rows.append([steps / t, nbytes / t])  # relative: each row divided by its time
            rhs.append((t - compute) / t)
        if not rows:
            raise FFTMatvecValueError("the curve needs a point with p > 1 to fit the network")
        (latency, inv_bw), _ = nnls(np.array(rows), np.array(rhs))
        # a curve whose bytes cost nothing fits an unbounded bandwidth: the largest float
        bandwidth = 1.0 / inv_bw if inv_bw > 0 else float(np.finfo(float).max)
        machine = Machine(latency=float(latency), bandwidth=float(bandwidth),
                          mem_bandwidth=mem_bandwidth)
        new = {p: min(grids_of(p), key=lambda g: fftmatvec_time(
            compute, nd_loc, nm_loc, nt, g[0], g[1], machine, algorithm)) for p, _ in points}
        if new == grids:
            break
        grids = new
    fits = []
    for p, t in points:
        pr, pc = grids[p]
        model = fftmatvec_time(compute, nd_loc, nm_loc, nt, pr, pc, machine, algorithm)
        fits.append((p, (pr, pc), model, (model - t) / t))
    return machine, fits
