"""The block pipeline's schedule and the cost model that chooses its chunks (pure functions)."""

import pytest

from fftmatvec import FFTMatvecTypeError, FFTMatvecValueError
from fftmatvec.distributed.emulated import MachineModel
from fftmatvec.distributed.schedule import (DIRECTIONS, LAUNCH, OPERATOR_DIRECTIONS, ORDERS,
                                            Step, choose_chunks, pipeline_order, predict,
                                            schedule)

# for each direction: the halves as (input axis, output axis, the input's collective waited
# for, the output's collective, blocks transposed)
HALVES = {
    "forward": [("param", "sensor", "gather", "reduce", False)],
    "adjoint": [("sensor", "param", "gather", "reduce", True)],
    "normal": [("param", "sensor", "gather", "allreduce", False),
               ("sensor", "param", "allreduce", "reduce", True)],
}


def check(steps, ns, np_, direction, order):
    """Every invariant of a schedule; returns nothing, asserts."""
    n = {"sensor": ns, "param": np_}
    pos = {}
    for q, s in enumerate(steps):
        key = (s.kind, s.sensor, s.param, s.half)
        assert key not in pos, f"step {s} repeated"
        pos[key] = q

    def at(kind, axis, idx, half):
        return pos[(kind, idx, None, half) if axis == "sensor" else (kind, None, idx, half)]

    halves = HALVES[direction]
    kinds = [s.kind for s in steps]
    for half, (ax_in, ax_out, wait_in, start_out, adjoint) in enumerate(halves):
        blocks = [s for s in steps if s.kind == "block" and s.half == half]
        # every block exactly once per half, transposed in the adjoint halves
        assert sorted((s.sensor, s.param) for s in blocks) == \
            [(i, j) for i in range(ns) for j in range(np_)]
        assert all(s.adjoint == adjoint for s in blocks)
        idx_in = (lambda s: s.param) if ax_in == "param" else (lambda s: s.sensor)
        idx_out = (lambda s: s.sensor) if ax_out == "sensor" else (lambda s: s.param)
        for a in range(n[ax_in]):
            # each input chunk: waited for once, its FFT once, after the wait and before its
            # first block; its collective started before the wait
            mine = [pos[(s.kind, s.sensor, s.param, s.half)] for s in blocks if idx_in(s) == a]
            fft = at("fft", ax_in, a, half)
            wait = at(wait_in + "_wait", ax_in, a, half)
            started = at(wait_in, ax_in, a, 0)
            assert started < wait < fft < min(mine)
        for b in range(n[ax_out]):
            # each output chunk: its inverse FFT right after its last block, its collective
            # right after that, waited for at the end (or by the next half)
            mine = [pos[(s.kind, s.sensor, s.param, s.half)] for s in blocks if idx_out(s) == b]
            ifft = at("ifft", ax_out, b, half)
            assert ifft == max(mine) + 1
            coll = at(start_out, ax_out, b, half)
            assert coll == ifft + 1
            wait_half = half + 1 if start_out == "allreduce" else half
            assert at(start_out + "_wait", ax_out, b, wait_half) > coll
        # output order: output b's collective starts before any block of output b + 1
        if order == "output":
            for b in range(n[ax_out] - 1):
                later = [pos[(s.kind, s.sensor, s.param, s.half)] for s in blocks
                         if idx_out(s) == b + 1]
                assert at(start_out, ax_out, b, half) < min(later)
    # FFTs: one per input chunk per half, none other; inverse FFTs one per output chunk
    assert kinds.count("fft") == sum(n[h[0]] for h in halves)
    assert kinds.count("ifft") == sum(n[h[1]] for h in halves)
    # collectives: a gather per input chunk of the first half, never in the second half
    assert kinds.count("gather") == n[halves[0][0]]
    assert all(s.half == 0 for s in steps if s.kind == "gather")
    assert kinds.count("reduce") == n[halves[-1][1]]
    # the waits for the last reductions come last, after every block
    last_block = max(q for q, s in enumerate(steps) if s.kind == "block")
    assert all(pos[(s.kind, s.sensor, s.param, s.half)] > last_block
               for s in steps if s.kind == "reduce_wait")
    assert kinds[-n[halves[-1][1]]:] == ["reduce_wait"] * n[halves[-1][1]]


def test_forward_by_hand():
    got = [(s.kind, s.sensor, s.param) for s in schedule(2, 2, "forward")]
    assert got == [
        ("gather", None, 0), ("gather", None, 1),
        ("gather_wait", None, 0), ("fft", None, 0), ("block", 0, 0),
        ("gather_wait", None, 1), ("fft", None, 1), ("block", 0, 1),
        ("ifft", 0, None), ("reduce", 0, None),
        ("block", 1, 0), ("block", 1, 1), ("ifft", 1, None), ("reduce", 1, None),
        ("reduce_wait", 0, None), ("reduce_wait", 1, None)]
    # input after input: every output completes at the last input
    got = [(s.kind, s.sensor, s.param) for s in schedule(2, 2, "forward", "input")]
    assert got[2:9] == [("gather_wait", None, 0), ("fft", None, 0), ("block", 0, 0),
                        ("block", 1, 0), ("gather_wait", None, 1), ("fft", None, 1),
                        ("block", 0, 1)]
    assert got[9:11] == [("ifft", 0, None), ("reduce", 0, None)]


def test_one_chunk_is_compute_then_communicate():
    assert [s.kind for s in schedule(1, 1, "forward")] == \
        ["gather", "gather_wait", "fft", "block", "ifft", "reduce", "reduce_wait"]
    assert [(s.kind, s.half) for s in schedule(1, 1, "normal")] == [
        ("gather", 0), ("gather_wait", 0), ("fft", 0), ("block", 0), ("ifft", 0),
        ("allreduce", 0), ("allreduce_wait", 1), ("fft", 1), ("block", 1), ("ifft", 1),
        ("reduce", 1), ("reduce_wait", 1)]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("order", ORDERS)
def test_invariants_on_random_sizes(rng, direction, order):
    for _ in range(25):
        ns, np_ = (int(v) for v in rng.integers(1, 9, size=2))
        check(schedule(ns, np_, direction, order), ns, np_, direction, order)


def test_the_checker_catches_a_repeated_fft():
    steps = schedule(2, 3, "forward")
    q = next(q for q, s in enumerate(steps) if s.kind == "block" and s.sensor == 1)
    bad = steps[:q] + [Step("fft", param=0)] + steps[q:]  # chunk 0's FFT again
    with pytest.raises(AssertionError):
        check(bad, 2, 3, "forward", "output")
    late = [s for s in steps if s.kind != "reduce"] + [Step("reduce", sensor=0),
                                                       Step("reduce", sensor=1)]
    with pytest.raises(AssertionError):
        check(late, 2, 3, "forward", "output")


def test_schedule_errors():
    with pytest.raises(FFTMatvecValueError, match="sensor_chunks must be >= 1"):
        schedule(0, 1)
    with pytest.raises(FFTMatvecTypeError, match="param_chunks must be an integer"):
        schedule(1, 2.0)
    with pytest.raises(FFTMatvecTypeError, match="sensor_chunks must be an integer"):
        schedule(True, 2)
    with pytest.raises(FFTMatvecValueError, match="direction must be one of"):
        schedule(1, 1, "inverse")
    with pytest.raises(FFTMatvecValueError, match="order must be one of"):
        schedule(1, 1, "forward", "random")


# ---- the cost model ------------------------------------------------------------------------
FAST = MachineModel("fast", 8, 1e-12, 1e18, 1e-12, 1e18)  # communication free
BW = 1e12  # device bytes per second


def test_predict_one_chunk_by_hand():
    """One chunk: the gather, the five stages' bytes at the device's bandwidth, the reduction."""
    nd, nm, nt, k = 8, 16, 10, 2
    net = MachineModel("n", 8, 1e-5, 1e9, 2e-5, 8e9)
    L, F = 32, 17  # an FFT length of at least 2 Nt - 1, and its frequencies
    # a 2 x 2 grid: the block is 4 sensors x 8 parameters; the column gathers 8 parameters
    # (4 its own), the row reduces 4 sensors (2 its own)
    comm = (net.time("allgather", [0, 1], 8 * k * nt * 8, 4 * k * nt * 8)
            + net.time("reduce_scatter", [0, 2], 4 * k * nt * 8, 2 * k * nt * 8))
    compute = (k * 8 * (L * 8 + F * 16) + 4 * 8 * F * 16 + k * (4 + 8) * F * 16
               + k * 4 * (F * 16 + L * 8 + nt * 8)) / BW + 3 * LAUNCH  # FFT, block, inverse FFT
    got = predict(nd, nm, nt, k, "ddddd", (2, 2), net, BW, 1, 1, fft_len=L)
    assert got == pytest.approx(compute + comm, rel=1e-12)
    # chunks cannot predict less than the compute alone
    assert predict(nd, nm, nt, k, "ddddd", (2, 2), net, BW, 2, 2, fft_len=L) > compute


def test_choose_chunks_behaves():
    nd, nm, nt, k = 64, 4096, 256, 8
    # free communication: one chunk (more would only add launches)
    assert choose_chunks(nd, nm, nt, k, "ddddd", (4, 4), FAST, BW) == (1, 1)
    # one rank: nothing to cut
    assert choose_chunks(nd, nm, nt, k, "ddddd", (1, 1), "h100", BW) == (1, 1)
    # communication of the order of the compute: chunks, and a shorter predicted product
    slow = MachineModel("slow", 8, 1e-6, 64e9, 1e-6, 512e9)
    grid = (4, 4)
    s, p = choose_chunks(nd, nm, nt, k, "ddddd", grid, slow, BW)
    assert s * p > 1
    one = predict(nd, nm, nt, k, "ddddd", grid, slow, BW, 1, 1)
    best = predict(nd, nm, nt, k, "ddddd", grid, slow, BW, s, p)
    free = predict(nd, nm, nt, k, "ddddd", grid, FAST, BW, 1, 1)
    comm = one - free
    assert free / 2 < comm < 2 * free  # comparable
    assert best < 0.8 * one
    # a 1 x P grid cuts only sensors, P x 1 only parameters
    assert choose_chunks(nd, nm, nt, k, "ddddd", (1, 8), slow, BW)[1] == 1
    assert choose_chunks(nd, nm, nt, k, "ddddd", (8, 1), slow, BW)[0] == 1
    # at most max_chunks, about min_chunk rows a chunk
    s, p = choose_chunks(nd, nm, nt, k, "ddddd", grid, slow, BW, max_chunks=3, min_chunk=4)
    assert s <= 3 and p <= 3 and s <= (nd // 4) // 4


def test_predict_counts_the_hosts_time():
    """A host that takes ``h`` seconds a step: one chunk by hand (the device waits for the
    host before each step); a cut whose blocks take the device less than ``h`` predicted
    host-bound (a step's host time each), and not chosen where one chunk is faster."""
    nd, nm, nt, k, h = 8, 16, 10, 2, 1e-3
    L = 32
    # five steps (the gather's start, FFT, block, inverse FFT, the reduction's start), each
    # issued h after the one before: the device waits for the host before each step (which
    # takes it microseconds) and the product ends with the reduction started at 5 h, of no
    # time on the free network
    got = predict(nd, nm, nt, k, "ddddd", (1, 1), FAST, BW, 1, 1, fft_len=L, host=h)
    assert got == pytest.approx(5 * h, rel=1e-9)
    # 2 x 2 chunks on a 2 x 2 grid, free network: 2 FFTs, 4 blocks, 2 inverse FFTs and the
    # 4 collectives' starts each take the host h: the device ends after the last step's issue
    two = predict(nd, nm, nt, k, "ddddd", (2, 2), FAST, BW, 2, 2, fft_len=L, host=h)
    assert two >= 12 * h
    # the host's time cannot make a product faster, and without it the old prediction
    for cut in ((1, 1), (2, 2), (4, 2)):
        base = predict(64, 4096, 256, 8, "ddddd", (4, 4), "h100", BW, *cut)
        assert predict(64, 4096, 256, 8, "ddddd", (4, 4), "h100", BW, *cut, host=0.0) == base
        assert predict(64, 4096, 256, 8, "ddddd", (4, 4), "h100", BW, *cut, host=h) >= base
    # a slow network of the order of the compute: chunks without the host's time, one chunk
    # where each step costs the host more than the whole product's compute
    slow = MachineModel("slow", 8, 1e-6, 64e9, 1e-6, 512e9)
    assert choose_chunks(64, 4096, 256, 8, "ddddd", (4, 4), slow, BW) != (1, 1)
    assert choose_chunks(64, 4096, 256, 8, "ddddd", (4, 4), slow, BW, host=1.0) == (1, 1)
    with pytest.raises(FFTMatvecValueError, match="host must be a number of seconds"):
        predict(nd, nm, nt, k, "ddddd", (1, 1), FAST, BW, 1, 1, host=-1.0)


def test_pipeline_order_by_hand():
    """Output after output where the reduction moves at least the gather's bytes, else input
    after input; the normal operator always output after output."""
    # 2 x 2, 8 x 8: rank (0, 0) gathers the 2 parameters of its column's other rank and
    # reduces the 2 sensors of its row's other rank
    assert pipeline_order(8, 8, (2, 2), "ddddd", "forward") == "output"
    assert pipeline_order(8, 8, (2, 2), "ddddd", "adjoint") == "output"
    # a float64 gather (stage 1) against a float32 reduction (stage 5): the gather's bytes
    # are more, so input after input
    assert pipeline_order(8, 8, (2, 2), "dddds", "forward") == "input"
    assert pipeline_order(8, 8, (2, 2), "dddds", "adjoint") == "input"
    # 1 x 4: the forward gathers nothing (one rank a column), the adjoint reduces nothing
    assert pipeline_order(8, 8, (1, 4), "ddddd", "forward") == "output"
    assert pipeline_order(8, 8, (1, 4), "ddddd", "adjoint") == "input"
    assert pipeline_order(8, 8, (4, 1), "ddddd", "forward") == "input"
    assert pipeline_order(8, 8, (4, 1), "ddddd", "adjoint") == "output"
    assert pipeline_order(8, 8, (4, 1), "ddddd", "normal") == "output"
    with pytest.raises(FFTMatvecValueError, match="direction must be one of"):
        pipeline_order(8, 8, (2, 2), "ddddd", "sideways")
    with pytest.raises(FFTMatvecValueError, match="coords must lie in the 2x2 grid"):
        pipeline_order(8, 8, (2, 2), "ddddd", "forward", coords=(2, 0))


def _options(n, ranks, max_chunks, min_chunk):
    return [1] if ranks == 1 else list(range(1, min(max_chunks, n // min_chunk, n) + 1))


@pytest.mark.parametrize("grid, k", [((2, 2), 4), ((4, 2), 4), ((2, 4), 8), ((1, 4), 8),
                                     ((4, 1), 4), ((8, 2), 8), ((4, 4), 1)])
def test_one_cut_for_both_directions(grid, k):
    """An operator's cut: the least summed predicted time of its forward and its adjoint, each
    in the order the operator runs it, found by trying every cut; never slower in that sum
    than the forward's own cut or the adjoint's."""
    nd, nm, nt, mc = 64, 256, 32, 8
    slow = MachineModel("slow", 8, 1e-6, 1e8, 1e-6, 8e8)
    args = (nd, nm, nt, k, "ddddd", grid, slow, 20e9)  # a CPU socket's bytes per second
    order = {d: pipeline_order(nd, nm, grid, "ddddd", d) for d in DIRECTIONS}

    def total(cut):
        return sum(predict(*args, *cut, d, order[d]) for d in OPERATOR_DIRECTIONS)

    cuts = [(s, p) for s in _options(nd // grid[0], grid[1], mc, 1)
            for p in _options(nm // grid[1], grid[0], mc, 1)]
    want = min(cuts, key=lambda c: (total(c), c[0] * c[1]))
    got = choose_chunks(*args, OPERATOR_DIRECTIONS, order=None, max_chunks=mc)
    assert got == want
    own = {d: choose_chunks(*args, d, order=None, max_chunks=mc) for d in OPERATOR_DIRECTIONS}
    assert all(total(got) <= total(c) for c in own.values())
    # one direction alone, in its own order, is the same as a tuple of one
    assert own["adjoint"] == choose_chunks(*args, ("adjoint",), order=None, max_chunks=mc)


def test_the_directions_own_cuts_differ_and_the_joint_one_is_better():
    """Where the forward's and the adjoint's best cuts differ, the cut the forward alone
    would choose costs the pair more than the joint cut (the adjoint moves other bytes)."""
    nd, nm, nt, k, grid = 64, 256, 32, 4, (1, 4)
    slow = MachineModel("slow", 8, 1e-6, 1e8, 1e-6, 8e8)
    args = (nd, nm, nt, k, "ddddd", grid, slow, 20e9)  # a CPU socket's bytes per second
    fwd = choose_chunks(*args, "forward", order=None, max_chunks=8)
    adj = choose_chunks(*args, "adjoint", order=None, max_chunks=8)
    joint = choose_chunks(*args, OPERATOR_DIRECTIONS, order=None, max_chunks=8)
    assert fwd != adj

    def total(cut):
        return sum(predict(*args, *cut, d, pipeline_order(nd, nm, grid, "ddddd", d))
                   for d in OPERATOR_DIRECTIONS)

    assert total(joint) < total(fwd) and total(joint) <= total(adj)


def test_cost_model_errors():
    with pytest.raises(FFTMatvecValueError, match="bandwidth must be a positive number"):
        predict(8, 8, 4, 1, "ddddd", (2, 2), "h100", 0.0, 1, 1)
    with pytest.raises(FFTMatvecValueError, match="coords must lie in the 2x2 grid"):
        predict(8, 8, 4, 1, "ddddd", (2, 2), "h100", 1e12, 1, 1, coords=(0, 2))
    with pytest.raises(FFTMatvecValueError, match="coords must lie in the 2x2 grid"):
        choose_chunks(8, 8, 4, 1, "ddddd", (2, 2), "h100", 1e12, coords=(2, 0))
    with pytest.raises(FFTMatvecValueError, match="max_chunks must be >= 1"):
        choose_chunks(8, 8, 4, 1, "ddddd", (2, 2), "h100", 1e12, max_chunks=0)
    with pytest.raises(FFTMatvecValueError, match="does not fit the kernel"):
        choose_chunks(8, 8, 4, 1, "ddddd", (9, 1), "h100", 1e12)
    for bad in ((), ("forward", "sideways"), "sideways"):
        with pytest.raises(FFTMatvecValueError, match="direction must be one of"):
            choose_chunks(8, 8, 4, 1, "ddddd", (2, 2), "h100", 1e12, bad)
    with pytest.raises(FFTMatvecValueError, match="order must be one of"):
        choose_chunks(8, 8, 4, 1, "ddddd", (2, 2), "h100", 1e12, order="sideways")


# ---- the operator runs the schedule --------------------------------------------------------
def _emulated(K, vgrid, **kw):
    from mpi4py import MPI

    from fftmatvec import DistributedBlockToeplitz, ProcessGrid

    return DistributedBlockToeplitz(ProcessGrid(MPI.COMM_SELF), K, transport="emulated",
                                    network=kw.pop("network", "h100"), virtual_grid=vgrid,
                                    min_chunk=1, **kw)


def _record(op):
    """Log, in order, what the operator's pipeline runs: its building blocks (each pad + FFT
    with its input's rows, each stage-3 block with its chunks, transposition and beta, each
    inverse FFT with its output's rows) and the collectives it starts."""
    log = []
    pad_fft, stage3, ifft_unpad = op._pad_fft, op._stage3, op._ifft_unpad
    t = op.transport

    def on_pad(x, exp):
        log.append(("fft", x.shape[1]))
        return pad_fft(x, exp)

    def on_stage3(xhat, yhat, i, j, adjoint, beta):
        log.append(("block", i, j, adjoint, beta))
        return stage3(xhat, yhat, i, j, adjoint, beta)

    def on_ifft(yhat, exp):
        log.append(("ifft", yhat.shape[1]))
        return ifft_unpad(yhat, exp)

    op._pad_fft, op._stage3, op._ifft_unpad = on_pad, on_stage3, on_ifft
    for name, kind in (("allgatherv", "gather"), ("reduce_scatter", "reduce"),
                       ("allreduce", "allreduce")):
        def start(*args, _run=getattr(t, name), _kind=kind, **kw):
            log.append((_kind,))
            return _run(*args, **kw)
        setattr(t, name, start)
    return log


def _expected(op, direction):
    """The steps :func:`schedule` gives for the operator's cut, in the log's form."""
    order = pipeline_order(op.nd, op.nm, op.grid.shape, op.precision, direction, op.coords)
    ns, np_ = op.blocks
    rows = {"sensor": [b - a for a, b in (ch.span for ch in op._scut)],
            "param": [b - a for a, b in (ch.span for ch in op._pcut)]}
    out, seen = [], set()
    for s in schedule(ns, np_, direction, order):
        if s.kind in ("gather", "reduce", "allreduce"):
            out.append((s.kind,))
        elif s.kind in ("fft", "ifft"):
            axis, idx = s.chunk
            out.append((s.kind, rows[axis][idx]))
        elif s.kind == "block":
            o = (s.half, s.param if s.adjoint else s.sensor)
            out.append(("block", s.sensor, s.param, s.adjoint, int(o in seen)))
            seen.add(o)
    return out


@pytest.mark.parametrize("vgrid, chunks", [((2, 2), 2), ((2, 3), 3), ((3, 2), 4), ((1, 4), 3),
                                           ((4, 1), 3), ((2, 2), 1)])
def test_the_operator_runs_the_schedule(rng, vgrid, chunks):
    """Forward, adjoint and normal products of one rank of a virtual grid run exactly the
    schedule's steps: every input chunk's pad + FFT once, every block once (beta 0 at its
    output's first block, 1 after), every output's inverse FFT once right after its last
    block, and its collective right after that."""
    nd, nm, nt = 13, 14, 6
    K = rng.standard_normal((nd, nm, nt))
    op = _emulated(K, vgrid, chunks=chunks)
    log = _record(op)
    m = rng.standard_normal((3,) + op.local_shape("param"))
    d = rng.standard_normal((2,) + op.local_shape("obs"))
    runs = {"forward": lambda: op.matmat(m), "adjoint": lambda: op.rmatmat(d),
            "normal": lambda: op.normal(2.0).matvec(m[0])}
    for direction, run in runs.items():
        log.clear()
        run()
        assert log == _expected(op, direction), direction


def test_the_operator_takes_the_cost_models_chunks(rng):
    """Without ``chunks`` the operator cuts its block as :func:`choose_chunks` chooses for
    its batch on its (here emulated) network, one cut for its forward and its adjoint (here
    other than the forward's own, on two of the grids); without overlap, or on one rank, not
    at all."""
    from fftmatvec.distributed.schedule import BANDWIDTH, HOST_STEP, MAX_CHUNKS

    nd, nm, nt = 64, 256, 32
    K = rng.standard_normal((nd, nm, nt))
    slow = MachineModel("slow", 8, 1e-6, 1e8, 1e-6, 8e8)  # 100 MB/s a rank
    differ = 0
    for vgrid, batch in (((2, 2), 1), ((4, 2), 8), ((2, 4), 8)):
        op = _emulated(K, vgrid, network=slow, batch=batch)
        args = (nd, nm, nt, batch, "ddddd", vgrid, slow, BANDWIDTH["cpu"])
        want = choose_chunks(*args, OPERATOR_DIRECTIONS, order=None, max_chunks=MAX_CHUNKS,
                             min_chunk=1, host=HOST_STEP["cpu"])
        assert op.blocks == want, (vgrid, batch, op.blocks, want)
        assert op.blocks != (1, 1)  # this network is slow enough to cut
        differ += want != choose_chunks(*args, "forward", order=None, max_chunks=MAX_CHUNKS,
                                        min_chunk=1, host=HOST_STEP["cpu"])
        assert _emulated(K, vgrid, network=slow, batch=batch, overlap=False).blocks == (1, 1)
    assert differ == 2
    assert _emulated(K, (2, 2), network=FAST).blocks == (1, 1)  # free communication


def test_compare_cuts_script_orders_the_options(capsys):
    """scripts/compare_cuts.py: for every case its own cuts predict no more than the joint
    cut, and the joint cut no more than the forward's cut for both (each the least of what
    it minimises over); it prints a row a case and its summary."""
    import runpy
    from pathlib import Path

    mod = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "compare_cuts.py"),
                         run_name="compare")
    slow = MachineModel("slow", 8, 1e-6, 1e8, 1e-6, 8e8)
    for grid, k in (((1, 4), 4), ((4, 2), 4), ((2, 2), 1)):
        r = mod["compare"](64, 256, 32, k, "ddddd", grid, slow, 20e9, 1)
        assert r["own"] <= r["joint_t"] * (1 + 1e-12) and r["joint_t"] <= r["fwd_cut"]
        assert r["joint_t"] <= r["one"] and r["normal_own"] <= r["normal"]
    capsys.readouterr()
    assert mod["main"](["--model", "h100", "--k", "8", "--precision", "dssdd",
                        "--grid", "8x1"]) == 0
    out = capsys.readouterr().out
    assert out.count("| h100 |") == 2 and "at most" in out
