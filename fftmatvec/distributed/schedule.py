"""The block pipeline's schedule, and the cost model that chooses its number of chunks.

Both are pure functions of the sizes: no MPI, no device.

The schedule
------------
Rank ``(r, c)``'s kernel block is cut into ``S`` sensor chunks and ``P`` parameter chunks
(block ``(i, j)``: sensor chunk ``i``, parameter chunk ``j``). :func:`schedule` lists, in order,
the steps one rank runs for a product::

    forward   gather x_j (all P started at once, in chunk order)
              for each output chunk i:  for each j:  [wait gather j, FFT x_j]  block (i, j)
                                        inverse FFT + unpad y_i,  reduce-scatter y_i (started)
              wait every reduce-scatter
    adjoint   the mirror: gathers of the sensor chunks d_i, blocks (i, j) transposed
              accumulating into parameter chunk j, reduce-scatter of each complete x_j
    normal    the forward half with an all-reduce of each complete y_i in place of its
              reduce-scatter; the adjoint half takes the y_i from those all-reduces (no gather)

A bracketed step runs at an input chunk's first block only: every chunk's FFT is made once and
every block is read once per half. ``order="input"`` runs input chunk after input chunk (each
input's FFT right before its blocks, every output completing at the last input) instead of
output after output. An output's collective starts as soon as its last block and its inverse
FFT are done, so it moves while the next chunks are computed; the waits come last.

The cost model
--------------
:func:`predict` runs a schedule on three resources: the host issues the steps in order, each
taking it ``host`` seconds (its share of the pipeline's Python and the launches: a step cannot
start before the host has issued it, so small blocks leave the device waiting for the host);
the device computes the steps in order, each taking its bytes at the device's ``bandwidth``
plus ``launch`` seconds; the network moves the collectives one after another, each starting
once its data exists (a reduction after its inverse FFT, a gather at once) and the host has
started it, and taking the :class:`~.emulated.MachineModel`'s time for its bytes; a wait holds
the device until its collective has ended. The product's time is when the device has
finished. Bytes of the steps, for ``k`` right-hand sides, a chunk of ``n`` rows, FFT
length ``L`` and ``F = L // 2 + 1`` frequencies (itemsizes of the stage's precision)::

    FFT            k n (L real_1 + F complex_2)
    block (i, j)   n_i n_j F khat_3 + k (n_i + n_j) F complex_3
    inverse FFT    k n (F complex_4 + L real_4) + k n Nt real_5   (with the unpad)
    collective     the chunk's rows of every rank, k Nt wire bytes a row (stage 1's precision
                   for gathers, stage 5's for reductions)

:func:`choose_chunks` returns the ``(S, P)`` of least predicted time, an axis cut only where
its communicator has more than one rank (sensors along the process row, parameters along the
column): one chunk where communication is negligible (more chunks only add launches), more
where communication is comparable to compute.

One cut serves both directions. An operator holds one chunk-major ``Khat`` (block ``(i, j)``
contiguous), so its forward and its adjoint run on one cut, chosen for the least sum of their
predicted times (:data:`OPERATOR_DIRECTIONS`), each in the order the operator runs it
(:func:`pipeline_order`). The adjoint moves other bytes (it gathers sensor chunks and
reduce-scatters parameter chunks) and its own best cut may differ from the forward's; on the
shipped machine models a cut of its own for each direction would save at most about 1 % of
the sum (docs/emulated_network.md), less than the extra blocks a grid fine enough for both
cuts would cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from ..precision import PrecisionConfig
from .emulated import H100_CLUSTER, MachineModel
from .layout import chunk_pieces

__all__ = ["Step", "schedule", "DIRECTIONS", "ORDERS", "KINDS", "predict", "choose_chunks",
           "pipeline_order", "LAUNCH", "HOST_STEP", "BANDWIDTH", "NETWORK", "MAX_CHUNKS",
           "OPERATOR_DIRECTIONS"]

DIRECTIONS = ("forward", "adjoint", "normal")
ORDERS = ("output", "input")
# what a step does; a collective's kind is where it starts, its "_wait" where it is waited for
KINDS = ("gather", "gather_wait", "fft", "block", "ifft", "reduce", "reduce_wait",
         "allreduce", "allreduce_wait")
COLLECTIVE_KINDS = ("gather", "reduce", "allreduce")

# seconds the device spends on a step besides its bytes (a kernel launch and its tail)
LAUNCH = 5e-6

# seconds the host spends issuing one step of the pipeline (the operator's Python for the step,
# the argument checks and launches of its kernels), by where the operator runs: an operator's
# choice of chunks counts them, so that a cut whose blocks take the device less time than the
# host takes to issue them is not chosen (docs/emulated_network.md)
HOST_STEP = {"cpu": 2e-5, "gpu": 1e-4}

# bytes per second a device streams from its memory, for the compute times of an operator's
# choice of chunks: a CPU socket's DRAM, a data-centre GPU's HBM
BANDWIDTH = {"cpu": 20e9, "gpu": 3e12}

# the network an operator's choice of chunks assumes on a real transport: GPU ranks on the
# GPU cluster model of emulated.py; CPU ranks on MPI over shared memory within a node (latency
# in seconds, bandwidth in bytes per second) and an InfiniBand-class network between nodes
NETWORK = {
    "gpu": H100_CLUSTER,
    "cpu": MachineModel("host", ranks_per_node=64, intra_latency=1e-6, intra_bandwidth=5e9,
                        inter_latency=3e-6, inter_bandwidth=25e9,
                        source="assumed: MPI over a node's shared memory, one 200 Gb/s "
                               "network port a node"),
}

# most chunks per axis an operator's choice of chunks considers (at most its square blocks)
MAX_CHUNKS = 8

# the products whose predicted times, summed, an operator's one cut minimises: its forward and
# its adjoint (the normal operator runs on the same cut)
OPERATOR_DIRECTIONS = ("forward", "adjoint")


@dataclass(frozen=True)
class Step:
    """One step of a schedule.

    ``kind`` is one of :data:`KINDS`; a block step names both chunks (``sensor``, ``param``),
    any other step the one chunk it concerns (the other is None). ``half`` is 0, or 1 for the
    normal operator's second (adjoint) half; ``adjoint`` is True for a transposed block.
    """

    kind: str
    sensor: int | None = None
    param: int | None = None
    half: int = 0
    adjoint: bool = False

    @property
    def chunk(self) -> tuple[str, int]:
        """``("sensor", i)`` or ``("param", j)``: the chunk of a step other than a block."""
        return ("sensor", self.sensor) if self.param is None else ("param", self.param)


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise FFTMatvecTypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise FFTMatvecValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _span(t) -> int:
    return t[1] - t[0]


def _at(axis: str, index: int, kind: str, half: int) -> Step:
    return Step(kind, sensor=index, half=half) if axis == "sensor" else \
        Step(kind, param=index, half=half)


def _half(steps, n_out, n_in, out_axis, in_axis, order, in_wait, out_start, half, adjoint):
    """Append one half: blocks ``out_b += F_ba in_a`` (transposed when ``adjoint``), each input
    waited for (``in_wait``) and transformed at its first block, each output's inverse FFT and
    collective (``out_start``) right after its last block."""
    pairs = ([(b, a) for b in range(n_out) for a in range(n_in)] if order == "output"
             else [(b, a) for a in range(n_in) for b in range(n_out)])
    ready, left = set(), [n_in] * n_out
    for b, a in pairs:
        if a not in ready:
            ready.add(a)
            steps.append(_at(in_axis, a, in_wait, half))
            steps.append(_at(in_axis, a, "fft", half))
        i, j = (a, b) if adjoint else (b, a)
        steps.append(Step("block", sensor=i, param=j, half=half, adjoint=adjoint))
        left[b] -= 1
        if not left[b]:
            steps.append(_at(out_axis, b, "ifft", half))
            steps.append(_at(out_axis, b, out_start, half))


def schedule(sensor_chunks: int, param_chunks: int,
             direction: Literal["forward", "adjoint", "normal"] = "forward",
             order: Literal["output", "input"] = "output") -> list[Step]:
    """The ordered steps of one product on a block cut into ``sensor_chunks x param_chunks``.

    Parameters
    ----------
    sensor_chunks, param_chunks : int
        Chunks of the block's sensors and parameters (``>= 1``).
    direction : {"forward", "adjoint", "normal"}
    order : {"output", "input"}
        Output chunk after output chunk (each output's collective as early as possible), or
        input after input; the normal operator runs both halves in ``order``.

    Returns
    -------
    list of Step
        See the module's notes.

    Raises
    ------
    FFTMatvecTypeError, FFTMatvecValueError
        Chunk counts that are not positive integers; an unknown direction or order.
    """
    ns, np_ = _count(sensor_chunks, "sensor_chunks"), _count(param_chunks, "param_chunks")
    if direction not in DIRECTIONS:
        raise FFTMatvecValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if order not in ORDERS:
        raise FFTMatvecValueError(f"order must be one of {ORDERS}, got {order!r}")
    steps: list[Step] = []
    if direction == "adjoint":
        steps += [Step("gather", sensor=i) for i in range(ns)]
        _half(steps, np_, ns, "param", "sensor", order, "gather_wait", "reduce", 0, True)
        steps += [Step("reduce_wait", param=j) for j in range(np_)]
        return steps
    steps += [Step("gather", param=j) for j in range(np_)]
    if direction == "forward":
        _half(steps, ns, np_, "sensor", "param", order, "gather_wait", "reduce", 0, False)
        steps += [Step("reduce_wait", sensor=i) for i in range(ns)]
        return steps
    _half(steps, ns, np_, "sensor", "param", order, "gather_wait", "allreduce", 0, False)
    _half(steps, np_, ns, "param", "sensor", order, "allreduce_wait", "reduce", 1, True)
    steps += [Step("reduce_wait", param=j, half=1) for j in range(np_)]
    return steps


# ------------------------------------------------------------------------------------------
# The cost model
# ------------------------------------------------------------------------------------------
def _coords(coords, pr: int, pc: int) -> tuple[int, int]:
    r, c = (int(v) for v in coords)
    if not (0 <= r < pr and 0 <= c < pc):
        raise FFTMatvecValueError(f"coords must lie in the {pr}x{pc} grid, got {coords!r}")
    return r, c


def _is_number(value) -> bool:
    """Whether ``value`` is a real number (not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, float, np.number))


def _itemsizes(precision) -> dict:
    p = PrecisionConfig(precision)
    khat = 4 if p.stage_letter("sbgemv") == "h" else p.sbgemv_dtype.itemsize
    return {"real1": p.pad_dtype.itemsize, "complex2": p.complex_dtype("fft").itemsize,
            "khat3": khat, "complex3": p.sbgemv_dtype.itemsize,
            "complex4": p.complex_dtype("ifft").itemsize, "real4": p.real_dtype("ifft").itemsize,
            "real5": p.reduce_dtype.itemsize}


def predict(nd: int, nm: int, nt: int, k: int, precision, grid, network, bandwidth: float,
            sensor_chunks: int, param_chunks: int, direction: str = "forward",
            order: str = "output", coords=(0, 0), launch: float = LAUNCH,
            fft_len: int | None = None, host: float = 0.0) -> float:
    """Predicted seconds of one product of rank ``coords`` (the module's notes).

    Parameters
    ----------
    nd, nm, nt : int
        Global sizes.
    k : int
        Right-hand sides.
    precision : str
        Five precision letters.
    grid : (int, int)
        ``(pr, pc)``.
    network : MachineModel or str
        The collectives' latency-bandwidth model (:mod:`.emulated`).
    bandwidth : float
        The device's memory bandwidth, bytes per second.
    sensor_chunks, param_chunks : int
        The cut; an axis cannot have more chunks than rows (the extra ones are dropped).
    direction, order : str
        As in :func:`schedule`.
    coords : (int, int)
        The rank's ``(r, c)``.
    launch : float
        Seconds a device step costs besides its bytes.
    fft_len : int, optional
        Default: the operator's (:func:`fftmatvec.operator.fft_length`).
    host : float
        Seconds the host takes to issue a step (:data:`HOST_STEP`); 0: the host always ahead.
    """
    from ..operator import fft_length
    from .emulated import machine_model
    from .layout import Layout

    net = machine_model(network)
    pr, pc = (int(v) for v in grid)
    lay = Layout(nd, nm, pr, pc)
    r, c = _coords(coords, pr, pc)
    if not _is_number(bandwidth) or not bandwidth > 0:
        raise FFTMatvecValueError(f"bandwidth must be a positive number, got {bandwidth!r}")
    if not _is_number(host) or not host >= 0:
        raise FFTMatvecValueError(f"host must be a number of seconds >= 0, got {host!r}")
    L = fft_length(nt) if fft_len is None else int(fft_len)
    F = L // 2 + 1
    size = _itemsizes(precision)
    w1, w5 = size["real1"], size["real5"]
    # the chunks of the collectives: parameters over the column's ranks, sensors over the row's
    p_counts = [b - a for a, b in lay.param_ranges_in_col(c)]
    s_counts = [b - a for a, b in lay.obs_ranges_in_row(r)]
    pcut = chunk_pieces(p_counts, _count(param_chunks, "param_chunks"))
    scut = chunk_pieces(s_counts, _count(sensor_chunks, "sensor_chunks"))
    col = [c * pr + q for q in range(pr)]
    row = [q * pr + r for q in range(pc)]
    rows = {"param": [sum(b - a for a, b in ch) for ch in pcut],
            "sensor": [sum(b - a for a, b in ch) for ch in scut]}
    mine = {"param": [ch[r][1] - ch[r][0] for ch in pcut],
            "sensor": [ch[c][1] - ch[c][0] for ch in scut]}
    members = {"param": col, "sensor": row}

    def compute(step: Step) -> float:
        if step.kind == "block":
            ni, nj = rows["sensor"][step.sensor], rows["param"][step.param]
            nbytes = ni * nj * F * size["khat3"] + k * (ni + nj) * F * size["complex3"]
        else:
            n = rows[step.chunk[0]][step.chunk[1]]
            if step.kind == "fft":
                nbytes = k * n * (L * size["real1"] + F * size["complex2"])
            else:  # ifft and unpad
                nbytes = k * n * (F * size["complex4"] + L * size["real4"] + nt * size["real5"])
        return nbytes / bandwidth + launch

    def collective(step: Step) -> float:
        axis, idx = step.chunk
        wire = w1 if step.kind == "gather" else w5
        per = k * nt * wire
        kind = {"gather": "allgather", "reduce": "reduce_scatter",
                "allreduce": "allreduce"}[step.kind]
        return net.time(kind, members[axis], rows[axis][idx] * per, mine[axis][idx] * per)

    t_host, t_dev, t_net, ends = 0.0, 0.0, 0.0, {}
    for step in schedule(len(scut), len(pcut), direction, order):
        if step.kind in COLLECTIVE_KINDS:
            t_host += host
            start = max(t_net, t_host, 0.0 if step.kind == "gather" else t_dev)
            t_net = start + collective(step)
            ends[(step.kind, step.chunk, step.half)] = t_net
        elif step.kind.endswith("_wait"):
            base = step.kind[:-len("_wait")]
            # gathers and all-reduces start in the first half, reductions in their own
            t_dev = max(t_dev, ends[(base, step.chunk, step.half if base == "reduce" else 0)])
        else:
            t_host += host
            t_dev = max(t_dev, t_host) + compute(step)
    return t_dev


def choose_chunks(nd: int, nm: int, nt: int, k: int, precision: str | PrecisionConfig,
                  grid: tuple[int, int], network: MachineModel | str,
                  bandwidth: float,
                  direction: str | tuple[str, ...] = "forward",
                  order: Literal["output", "input"] | None = "output",
                  coords: tuple[int, int] = (0, 0), max_chunks: int = 16, min_chunk: int = 1,
                  launch: float = LAUNCH, host: float = 0.0) -> tuple[int, int]:
    """``(sensor_chunks, param_chunks)`` of least :func:`predict`-ed time, each at most
    ``max_chunks`` and leaving about ``min_chunk`` rows a chunk; an axis whose communicator
    has one rank is not cut. Ties go to fewer blocks. Arguments as for :func:`predict`, but

    direction : str or tuple of str
        One of :data:`DIRECTIONS`, or several: the cut of least summed time over their
        products (an operator's cut serves every direction: :data:`OPERATOR_DIRECTIONS`).
    order : {"output", "input"} or None
        None: each direction in the order an operator runs it (:func:`pipeline_order`).
    """
    max_chunks, min_chunk = _count(max_chunks, "max_chunks"), _count(min_chunk, "min_chunk")
    from .layout import Layout

    directions = (direction,) if isinstance(direction, str) else tuple(direction)
    if not directions or any(d not in DIRECTIONS for d in directions):
        raise FFTMatvecValueError(
            f"direction must be one of {DIRECTIONS} or a tuple of them, got {direction!r}")
    if order is not None and order not in ORDERS:
        raise FFTMatvecValueError(f"order must be one of {ORDERS} or None, got {order!r}")
    pr, pc = (int(v) for v in grid)
    lay = Layout(nd, nm, pr, pc)
    r, c = _coords(coords, pr, pc)
    nd_r, nm_c = _span(lay.rows(r)), _span(lay.cols(c))
    orders = [order or pipeline_order(nd, nm, grid, precision, d, coords) for d in directions]

    def options(n, ranks):
        if ranks == 1:
            return [1]
        return list(range(1, max(1, min(max_chunks, n // min_chunk, n)) + 1))

    best = None
    for s in options(nd_r, pc):
        for p in options(nm_c, pr):
            t = sum(predict(nd, nm, nt, k, precision, grid, network, bandwidth, s, p, d, o,
                            coords, launch, host=host) for d, o in zip(directions, orders))
            key = (t, s * p)
            if best is None or key < best[0]:
                best = (key, (s, p))
    return best[1]


def pipeline_order(nd: int, nm: int, grid: tuple[int, int], precision: str | PrecisionConfig,
                   direction: Literal["forward", "adjoint", "normal"],
                   coords: tuple[int, int] = (0, 0)) -> str:
    """The order an operator runs a product in: the normal operator output chunk after
    output chunk; the forward and the adjoint output after output where rank ``coords``'s
    reduction moves at least as many bytes as its gather (the rows of the other ranks of
    each communicator, in stage 5's and stage 1's precision), else input after input (each
    gather waited for late)."""
    from .layout import Layout

    if direction not in DIRECTIONS:
        raise FFTMatvecValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if direction == "normal":
        return "output"
    pr, pc = (int(v) for v in grid)
    lay = Layout(nd, nm, pr, pc)
    r, c = _coords(coords, pr, pc)
    size = _itemsizes(precision)
    w1, w5 = size["real1"], size["real5"]
    # rows of the other ranks of the column (parameters) and of the row (sensors)
    params = _span(lay.cols(c)) - _span(lay.param_range(r, c))
    obs = _span(lay.rows(r)) - _span(lay.obs_range(r, c))
    if direction == "forward":
        return "output" if obs * w5 >= params * w1 else "input"
    return "output" if params * w5 >= obs * w1 else "input"
