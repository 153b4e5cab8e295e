"""An emulated network: one rank of a virtual ``pr x pc`` grid, its collectives replaced by
communication-shaped work of a machine model's duration.

``DistributedBlockToeplitz(ProcessGrid(comm_of_one_rank), kernel, ..., transport="emulated",
network=FRONTIER, virtual_grid=(R, C))`` runs, on one process, the rank ``(0, 0)`` of an
``R x C`` grid (or ``virtual_coords``): its real kernel block and vector slices, its real local
products, and in place of every collective an :class:`EmulatedTransport` operation that

* copies, on the device, the bytes the collective would move (on a GPU on a communication
  stream of its own, ordered after the compute stream by an event);
* then waits for the rest of the collective's duration under the :class:`MachineModel`
  (on a GPU a kernel of one thread on that stream waits on the device's clock until the
  duration has passed since the stream reached the collective, :class:`DeviceClock`; on the
  CPU a helper thread does the copy and sleeps), so that the product's kernels overlap with
  communication-shaped work as they would on the machine, and the host takes no part in it.

The collectives run one after another, as on one communication stream. What they return
stands in for the data of the other ranks (which do not exist): an all-gather returns this
rank's piece repeated into every rank's place, a reduce-scatter this rank's rows of its own
partial sum, an all-reduce its own partial sum (the other ranks contribute zeros). A product
is therefore the local block's product of those inputs, of the right shapes and dtypes, not
the global one; :meth:`DistributedBlockToeplitz.collect` has no other ranks to gather from and
raises, ``dot`` and ``norm`` sum over the one real rank.

Durations (alpha-beta models)
-----------------------------
A collective over ``p`` ranks moving ``n`` bytes in all (the gathered result, or the buffer
reduced), of which this rank owns ``n_me``, takes (Thakur, Rabenseifner and Gropp 2005;
Chan et al. 2007)::

    all-gather       ring: (p - 1) alpha + (n - n_me) beta
                     tree: ceil(log2 p) alpha + (n - n_me) beta
    reduce-scatter   the same two formulas
    all-reduce       twice the reduce-scatter of the same n with n_me = n / p (reduce-scatter
                     followed by all-gather)

(``n - n_me = (p - 1) n / p`` for equal slices; ``tree`` is recursive doubling / halving).
The device's own summation in a reduction is not counted. ``alpha`` (seconds) and ``beta``
(seconds per byte) are those of the slowest link the collective crosses: within a node when
all its ranks sit on one node (``intra_latency``, ``1 / intra_bandwidth``), else between nodes
(``inter_latency``, ``ranks_per_node / inter_bandwidth``: every rank of a node communicates at
once in a product, so they share the node's injection bandwidth), whichever is slower. Ranks
are placed on nodes in order, ``ranks_per_node`` a node; rank ``(r, c)`` of the grid is rank
``c * pr + r`` (as :class:`~fftmatvec.distributed.ProcessGrid` numbers them), so a process
column is a run of consecutive ranks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .. import backend, kernels
from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from .comm import Pending, _alone
from .layout import check_fit

__all__ = ["MachineModel", "FRONTIER", "H100_CLUSTER", "MODELS", "machine_model",
           "DeviceClock", "EmulatedTransport", "VirtualComm", "VirtualGrid", "COLLECTIVES",
           "ALGORITHMS"]

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
ALGORITHMS = ("ring", "tree")


def _positive(value, name: str, integer: bool = False):
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kinds):
        what = "an integer" if integer else "a number"
        raise FFTMatvecTypeError(f"{name} must be {what}, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise FFTMatvecValueError(f"{name} must be finite and > 0, got {value!r}")


@dataclass(frozen=True)
class MachineModel:
    """Latency and bandwidth of a machine's two network levels.

    Parameters
    ----------
    name : str
    ranks_per_node : int
        GPUs (ranks) of a node.
    intra_latency : float
        Seconds a message takes within a node, before its bytes (``alpha``).
    intra_bandwidth : float
        Bytes per second one rank sends to another of its node, one direction.
    inter_latency : float
        Seconds a message takes between nodes, before its bytes.
    inter_bandwidth : float
        Bytes per second a node injects into the network, one direction, all its network
        interfaces together (shared by its ranks).
    algorithm : {"ring", "tree"}
        The collectives' algorithm (the module's notes give both formulas).
    source : str
        Where the numbers come from (docs/emulated_network.md cites them).
    """

    name: str
    ranks_per_node: int
    intra_latency: float
    intra_bandwidth: float
    inter_latency: float
    inter_bandwidth: float
    algorithm: str = "ring"
    source: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise FFTMatvecTypeError(f"name must be a str, got {type(self.name).__name__}")
        _positive(self.ranks_per_node, "ranks_per_node", integer=True)
        for field in ("intra_latency", "intra_bandwidth", "inter_latency", "inter_bandwidth"):
            _positive(getattr(self, field), field)
        if self.algorithm not in ALGORITHMS:
            raise FFTMatvecValueError(
                f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")

    def link(self, ranks: Iterable[int]) -> tuple[float, float]:
        """``(alpha seconds, beta seconds per byte)`` of a collective over the grid ranks
        ``ranks`` (the slowest level it crosses; see the module's notes)."""
        nodes = {int(q) // self.ranks_per_node for q in ranks}
        intra = (self.intra_latency, 1.0 / self.intra_bandwidth)
        if len(nodes) <= 1:
            return intra
        inter = (self.inter_latency, self.ranks_per_node / self.inter_bandwidth)
        return (max(intra[0], inter[0]), max(intra[1], inter[1]))

    def steps(self, p: int) -> int:
        """Messages one rank sends, one after another, in an all-gather or reduce-scatter of
        ``p`` ranks: ``p - 1`` (ring) or ``ceil(log2 p)`` (tree)."""
        if p <= 1:
            return 0
        return p - 1 if self.algorithm == "ring" else math.ceil(math.log2(p))

    def time(self, collective: str, ranks: Iterable[int], nbytes: float,
             own: float | None = None) -> float:
        """Seconds of ``collective`` over the grid ranks ``ranks`` moving ``nbytes`` in all, of
        which this rank owns ``own`` (default ``nbytes / p``); formulas in the module's notes.

        Raises
        ------
        FFTMatvecValueError
            An unknown collective, negative bytes or ``own`` outside ``[0, nbytes]``.
        """
        if collective not in COLLECTIVES:
            raise FFTMatvecValueError(
                f"collective must be one of {COLLECTIVES}, got {collective!r}")
        ranks = list(ranks)
        p = len(ranks)
        if nbytes < 0:
            raise FFTMatvecValueError(f"nbytes must be >= 0, got {nbytes}")
        if p <= 1:
            return 0.0
        alpha, beta = self.link(ranks)
        if collective == "allreduce":
            return 2.0 * (self.steps(p) * alpha + (nbytes - nbytes / p) * beta)
        own = nbytes / p if own is None else own
        if not 0 <= own <= nbytes:
            raise FFTMatvecValueError(f"own must be within [0, nbytes={nbytes}], got {own}")
        return self.steps(p) * alpha + (nbytes - own) * beta


# The two shipped machine models (ranks a node; latency in seconds and bandwidth in bytes per
# second a rank within a node, a node between nodes). Their published sources are each model's
# `source` and the table of docs/emulated_network.md; the latencies are assumptions.
FRONTIER = MachineModel(
    "frontier", ranks_per_node=8, intra_latency=2e-6, intra_bandwidth=50e9,
    inter_latency=3e-6, inter_bandwidth=4 * 25e9,
    source="OLCF Frontier User Guide (node: 4 MI250X = 8 GCDs, Infinity Fabric GPU-GPU "
           "50-200 GB/s, 4 HPE Slingshot-11 NICs of 25 GB/s)")

H100_CLUSTER = MachineModel(
    "h100", ranks_per_node=8, intra_latency=2e-6, intra_bandwidth=450e9,
    inter_latency=3e-6, inter_bandwidth=8 * 50e9,
    source="NVIDIA DGX H100 User Guide / H100 datasheet (18 NVLink 4 links, 900 GB/s a GPU; "
           "8 ConnectX-7 InfiniBand NDR 400 Gb/s ports a node)")

MODELS = {"frontier": FRONTIER, "h100": H100_CLUSTER}


def machine_model(network) -> MachineModel:
    """``network`` as a :class:`MachineModel`: one, or the name of a shipped one
    (:data:`MODELS`)."""
    if isinstance(network, MachineModel):
        return network
    if isinstance(network, str):
        key = network.strip().lower()
        if key in MODELS:
            return MODELS[key]
        raise FFTMatvecValueError(
            f"network must be a MachineModel or one of {sorted(MODELS)}, got {network!r}")
    raise FFTMatvecTypeError(
        f"network must be a MachineModel or a model's name, got {type(network).__name__}")


# ------------------------------------------------------------------------------------------
# The virtual grid
# ------------------------------------------------------------------------------------------
class VirtualComm:
    """A communicator of the virtual grid: its members (grid ranks, in the communicator's
    order) and this rank's index among them. Only what the transports ask of it."""

    __slots__ = ("members", "rank")

    def __init__(self, members, rank: int):
        self.members, self.rank = tuple(int(q) for q in members), int(rank)

    def Get_size(self) -> int:
        return len(self.members)

    def Get_rank(self) -> int:
        return self.rank

    def __repr__(self) -> str:
        return f"VirtualComm(size={len(self.members)}, rank={self.rank})"


def _pair(value, name: str, what: str) -> tuple[int, int]:
    """``value`` as two ints, or a TypeError naming ``name`` and ``what`` they are."""
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in value)):
        raise FFTMatvecTypeError(f"{name} must be two integers {what}, got {value!r}")
    return int(value[0]), int(value[1])


class VirtualGrid:
    """One rank of a virtual ``rows x cols`` grid, on a real grid of one rank.

    It stands where :class:`~fftmatvec.distributed.ProcessGrid` does in the distributed
    operator: ``shape``, ``coords`` and the row and column communicators are the virtual
    grid's (:class:`VirtualComm`), ``base_comm`` is the real one-rank communicator (the
    operator's error sync points), and the GPU binding is the real grid's.

    Parameters
    ----------
    grid : ProcessGrid
        A resolved grid of one rank.
    virtual_grid : (int, int)
        ``(rows, cols)`` of the grid emulated.
    coords : (int, int), default (0, 0)
        The virtual rank's ``(r, c)``.
    """

    def __init__(self, grid, virtual_grid, coords=(0, 0)):
        if grid.size != 1:
            raise FFTMatvecValueError(
                f"transport='emulated' runs one rank of a virtual grid: the communicator must "
                f"have one rank, got {grid.size}")
        self._real = grid
        self._rows, self._cols = _pair(virtual_grid, "virtual_grid", "(rows, cols)")
        if self._rows < 1 or self._cols < 1:
            raise FFTMatvecValueError(f"virtual_grid must be positive, got {virtual_grid!r}")
        r, c = _pair(coords, "virtual_coords", "(r, c)")
        if not (0 <= r < self._rows and 0 <= c < self._cols):
            raise FFTMatvecValueError(
                f"virtual_coords must lie in the {self._rows}x{self._cols} grid, got {coords!r}")
        self._coords = (int(r), int(c))
        self.comm = grid.comm
        self.size = self._rows * self._cols
        self.rank = self.rank_of(*self._coords)
        pr = self._rows
        self._row = VirtualComm([q * pr + r for q in range(self._cols)], c)
        self._col = VirtualComm([c * pr + q for q in range(pr)], r)

    resolved = True
    replicas = 1  # an emulated grid is one replica group
    replica = 0

    @property
    def group_size(self) -> int:
        """Ranks of the (one) replica: the virtual grid's."""
        return self.size

    @property
    def replica_comm(self):
        """The real communicator (one rank): a single vector's reductions stay on it."""
        return self._real.replica_comm

    @property
    def shape(self) -> tuple[int, int]:
        return (self._rows, self._cols)

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cols(self) -> int:
        return self._cols

    @property
    def coords(self) -> tuple[int, int]:
        return self._coords

    def rank_of(self, r: int, c: int) -> int:
        return c * self._rows + r

    def check(self, nd: int, nm: int) -> "VirtualGrid":
        """Raise when the virtual grid does not fit the sizes; else this grid."""
        check_fit(nd, nm, self._rows, self._cols)
        return self

    @property
    def base_comm(self):
        """The real communicator (one rank)."""
        return self._real.base_comm

    @property
    def row_comm(self) -> VirtualComm:
        return self._row

    @property
    def col_comm(self) -> VirtualComm:
        return self._col

    def device_id(self, device_count: int | None = None) -> int:
        return self._real.device_id(device_count)

    def __repr__(self) -> str:
        return (f"VirtualGrid({self._rows}x{self._cols}, coords={self._coords}, "
                f"on {self._real!r})")


# ------------------------------------------------------------------------------------------
# The transport
# ------------------------------------------------------------------------------------------
def _sleep_until(deadline: float) -> None:
    rest = deadline - time.perf_counter()
    if rest > 0:
        time.sleep(rest)


#: Ticks a second of the device clock on NVIDIA GPUs (``%globaltimer``, nanoseconds).
CUDA_CLOCK_RATE = 1e9
#: Seconds over which the rate of an AMD GPU's clock (``wall_clock64``) is measured.
RATE_INTERVAL = 0.02


class DeviceClock:
    """The device clock of the kernels (``device_clock`` in ``hip_kernels/common.cuh``) on the
    current CuPy device: :meth:`mark` queues a kernel that notes the clock, :meth:`wait` one
    that returns once a time has passed since the last mark, each on a stream, one thread of
    one block. ``rate``: the clock's ticks a second (:data:`CUDA_CLOCK_RATE` on NVIDIA,
    :meth:`measure_rate` on AMD)."""

    def __init__(self, cp):
        self.cp = cp
        # the mark, and a span read back: each written by a kernel before any kernel reads it
        self._slots = cp.empty(2, dtype=cp.uint64)
        self._mark = kernels.get_function("clock_mark")
        self._wait = kernels.get_function("clock_wait")
        self.rate = self.measure_rate() if backend.is_hip() else CUDA_CLOCK_RATE

    def mark(self, stream) -> None:
        """Note the clock when ``stream`` reaches this point."""
        self._mark((1,), (1,), (self._slots,), stream=stream)

    def wait(self, stream, seconds: float) -> None:
        """Hold ``stream`` until ``seconds`` have passed since its last :meth:`mark`."""
        ticks = np.uint64(max(0, round(seconds * self.rate)))
        self._wait((1,), (1,), (self._slots, ticks), stream=stream)

    def measure_rate(self, interval: float = RATE_INTERVAL) -> float:
        """The clock's ticks a second: the ticks between a mark and a read ``interval`` seconds
        of the host's clock later (each launched on an idle stream)."""
        cp = self.cp
        stream = cp.cuda.Stream(non_blocking=True)
        self.mark(stream)
        stream.synchronize()
        t0 = time.perf_counter()
        _sleep_until(t0 + interval)
        elapsed = time.perf_counter() - t0
        kernels.get_function("clock_since")((1,), (1,), (self._slots, self._slots[1:]),
                                            stream=stream)
        stream.synchronize()
        return int(self._slots[1].get()) / elapsed


class EmulatedTransport:
    """Collectives of a virtual grid replaced by a device copy of their bytes and a wait for
    the rest of their :class:`MachineModel` duration (the module's notes).

    The interface is :class:`~fftmatvec.distributed.comm.MPITransport`'s: every collective
    takes its input as ``(n, ...)``, the distributed axis first, in the wire dtype ``dtype``,
    and returns a :class:`~fftmatvec.distributed.comm.Pending`. On a communicator of one rank
    a collective is a copy, at once. :attr:`modelled` sums the durations of the collectives
    started (seconds) and :attr:`log` lists them ``(collective, ranks, bytes, seconds)``.
    """

    name = "emulated"
    staging = "device"

    def __init__(self, xp, network, reason: str = ""):
        self.xp = xp
        self.network = machine_model(network)
        self.reason = reason or f"transport='emulated' on the {self.network.name!r} model"
        self.log: list = []
        self._indices: dict = {}  # (counts, rank) -> the all-gather's rows, on the device
        # on the CPU one helper thread, made on the first collective: the collectives run one
        # after another, as on one stream; on a GPU one stream and its clock
        self._pool = None
        self.stream = None if xp is np else xp.cuda.Stream(non_blocking=True)
        self._clock = None if xp is np else DeviceClock(xp)

    @property
    def modelled(self) -> float:
        """Seconds of all the collectives started, under the model."""
        return float(sum(entry[3] for entry in self.log))

    def progress(self) -> None:
        """Nothing to drive: the emulated collectives move by themselves."""

    def close(self) -> None:
        """On the CPU, wait for the collectives started and end the helper thread (a later
        collective makes another); on a GPU nothing to end."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _start(self, collective, comm, nbytes, own, work):
        """Run ``work()`` (the device copy; returns the result) then wait for the rest of the
        collective's duration, on the helper thread or the communication stream (its clock
        marked when the stream reaches the collective, waited on after the copy)."""
        duration = self.network.time(collective, comm.members, nbytes, own)
        self.log.append((collective, comm.Get_size(), int(nbytes), duration))
        xp = self.xp
        if xp is np:
            def run():
                t0 = time.perf_counter()
                out = work()
                _sleep_until(t0 + duration)
                return out

            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="fftmatvec-emulated")
            fut = self._pool.submit(run)
            return Pending(None, fut.result, (fut,))
        compute = xp.cuda.get_current_stream()
        stream = self.stream
        stream.wait_event(compute.record())
        self._clock.mark(stream)
        with stream:
            out = work()
        self._clock.wait(stream, duration)
        done = stream.record()

        def finish():
            xp.cuda.get_current_stream().wait_event(done)
            return out

        return Pending(None, finish, (work,))  # work's closure keeps the send buffer alive

    def _index(self, counts: tuple, me: int):
        """The rows of this rank's piece that fill each rank's place in an all-gather of
        ``counts``: made once per layout (a copy to a GPU from host memory would wait for the
        stream), then kept."""
        key = (counts, me)
        if key not in self._indices:
            src = np.concatenate([np.arange(n) % max(counts[me], 1) for n in counts])
            self._indices[key] = self.xp.asarray(src.astype(np.intp))
        return self._indices[key]

    def _send(self, a, dtype):
        """``a`` in the wire dtype, contiguous, made where the caller is (the compute stream,
        or the calling thread) as the other transports make their send buffers: a strided or
        cast input is copied there, at its cost there; a contiguous one is read later by the
        collective and must not change until it is waited for (MPI's rule for non-blocking
        calls)."""
        return self.xp.ascontiguousarray(a, dtype=dtype)

    def allgatherv(self, comm, a, counts, dtype) -> Pending:
        """The all-gather of ``counts[q]`` rows from each rank ``q`` of ``comm``: this rank's
        rows ``a`` repeated into every rank's place (a gather copy of the result's bytes)."""
        if comm.Get_size() == 1:
            return _alone(self.xp, a, dtype)
        xp = self.xp
        counts = tuple(int(n) for n in counts)
        me = comm.Get_rank()
        per = int(np.prod(a.shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
        src = self._index(counts, me)
        send = self._send(a, dtype)

        def work():
            if not counts[me]:
                return xp.zeros((sum(counts),) + tuple(send.shape[1:]), dtype=dtype)
            return xp.take(send, src, axis=0)

        return self._start("allgather", comm, sum(counts) * per, counts[me] * per, work)

    def reduce_scatter(self, comm, a, counts, dtype, device: bool = True) -> Pending:
        """The reduce-scatter of ``a`` (``sum(counts)`` rows): this rank's ``counts[me]`` rows
        of ``a`` alone (a copy of the whole buffer, as it is sent). ``device`` is accepted for
        the other transports' signature; results stay on the device."""
        if comm.Get_size() == 1:
            return _alone(self.xp, a, dtype)
        xp = self.xp
        counts = [int(n) for n in counts]
        me = comm.Get_rank()
        lo = sum(counts[:me])
        per = int(np.prod(a.shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
        send = self._send(a, dtype)

        def work():
            return xp.array(send, copy=True)[lo:lo + counts[me]]

        return self._start("reduce_scatter", comm, sum(counts) * per, counts[me] * per, work)

    def allreduce(self, comm, a, dtype) -> Pending:
        """The all-reduce of ``a``: ``a`` itself in the wire dtype (a copy)."""
        if comm.Get_size() == 1:
            return _alone(self.xp, a, dtype)
        xp = self.xp
        nbytes = int(a.size) * np.dtype(dtype).itemsize
        send = self._send(a, dtype)

        def work():
            return xp.array(send, copy=True)

        return self._start("allreduce", comm, nbytes, None, work)
