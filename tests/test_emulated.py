"""The emulated network: its machine models' durations, its transport's timing, and one rank
of a virtual grid against the dense product of that rank's block.

The emulated collectives bring this rank's own data in place of the other ranks' (an all-gather
repeats this rank's piece into every rank's place, a reduce-scatter keeps this rank's rows of its
own partial sum), so the oracle is the dense float64 product of the local kernel block on that
repeated input, restricted to the rows this rank owns.
"""

import threading
import time

import numpy as np
import pytest

from conftest import dense_btt, rel_err
from fftmatvec import (FFTMatvecDistributedError, FFTMatvecTypeError, FFTMatvecValueError,
                       backend)
from fftmatvec.distributed.emulated import (FRONTIER, H100_CLUSTER, EmulatedTransport,
                                            MachineModel, VirtualComm, machine_model)
from fftmatvec.distributed.layout import Layout

pytest.importorskip("mpi4py")

# a slow network whose durations a test can measure: 1 ms a message, 1 MB/s within a node
SLOW = MachineModel("slow", ranks_per_node=4, intra_latency=1e-3, intra_bandwidth=1e6,
                    inter_latency=2e-3, inter_bandwidth=4e6 / 2)


# ---- the machine models --------------------------------------------------------------------
def test_durations_match_the_formulas():
    m = SLOW
    intra = (1e-3, 1e-6)  # alpha, beta within a node
    inter = (2e-3, 4 / 2e6)  # between nodes: the node's bandwidth shared by its 4 ranks
    assert m.link([0, 1, 2, 3]) == intra and m.link([4, 7]) == intra
    assert m.link([0, 4]) == inter and m.link([3, 4, 5]) == inter
    # ring all-gather of 4 ranks within a node, 4000 bytes of which 1000 are this rank's
    assert m.time("allgather", [0, 1, 2, 3], 4000, 1000) == pytest.approx(3e-3 + 3000e-6)
    # equal slices by default: own = n / p
    assert m.time("reduce_scatter", [0, 1, 2, 3], 4000) == pytest.approx(3e-3 + 3000e-6)
    # across nodes: the slower level's alpha and beta
    assert m.time("allgather", [0, 4, 8], 3000, 1000) == pytest.approx(2 * 2e-3 + 2000 * 2e-6)
    # unequal slices: the bytes this rank does not own
    assert m.time("reduce_scatter", [0, 1], 3000, 2000) == pytest.approx(1e-3 + 1000e-6)
    # all-reduce: reduce-scatter then all-gather
    assert m.time("allreduce", [0, 1, 2, 3], 4000) == pytest.approx(2 * (3e-3 + 3000e-6))
    # one rank: nothing moves
    assert m.time("allgather", [5], 10 ** 9) == 0.0
    tree = MachineModel("t", 4, 1e-3, 1e6, 2e-3, 2e6, algorithm="tree")
    assert tree.time("allgather", range(4), 4000) == pytest.approx(2e-3 + 3000e-6)
    assert tree.time("reduce_scatter", range(4, 7), 3000) == pytest.approx(2e-3 + 2000e-6)
    assert [tree.steps(p) for p in (1, 2, 3, 4, 5, 8)] == [0, 1, 2, 2, 3, 3]
    assert [m.steps(p) for p in (1, 2, 5)] == [0, 1, 4]


def test_shipped_models():
    assert machine_model("frontier") is FRONTIER and machine_model("H100") is H100_CLUSTER
    assert machine_model(SLOW) is SLOW
    for m in (FRONTIER, H100_CLUSTER):
        assert m.ranks_per_node == 8 and m.source
    assert FRONTIER.inter_bandwidth == 4 * 25e9 and H100_CLUSTER.inter_bandwidth == 8 * 50e9
    # within a node faster than a rank's share of the node's network
    for m in (FRONTIER, H100_CLUSTER):
        assert m.intra_bandwidth > m.inter_bandwidth / m.ranks_per_node
    # 1 GB all-gathered over 2 nodes vs within one: the network's share is slower
    assert FRONTIER.time("allgather", [0, 8], 1e9) > FRONTIER.time("allgather", [0, 1], 1e9)


def test_model_errors():
    with pytest.raises(FFTMatvecValueError, match="intra_bandwidth must be finite and > 0"):
        MachineModel("x", 8, 1e-6, 0.0, 1e-6, 1e9)
    with pytest.raises(FFTMatvecTypeError, match="ranks_per_node must be an integer"):
        MachineModel("x", 8.0, 1e-6, 1e9, 1e-6, 1e9)
    with pytest.raises(FFTMatvecValueError, match="algorithm must be one of"):
        MachineModel("x", 8, 1e-6, 1e9, 1e-6, 1e9, algorithm="star")
    with pytest.raises(FFTMatvecValueError, match="collective must be one of"):
        SLOW.time("alltoall", [0, 1], 10)
    with pytest.raises(FFTMatvecValueError, match="own must be within"):
        SLOW.time("allgather", [0, 1], 10, 11)
    with pytest.raises(FFTMatvecValueError, match="network must be a MachineModel or one of"):
        machine_model("summit")
    with pytest.raises(FFTMatvecTypeError, match="network must be a MachineModel"):
        machine_model(3)
    with pytest.raises(Exception):  # frozen
        SLOW.intra_latency = 0.0


# ---- the transport on the CPU ----------------------------------------------------------------
def test_collective_waits_its_duration_and_returns_copies(rng):
    t = EmulatedTransport(np, SLOW)
    comm = VirtualComm([0, 1, 2], 1)  # one node: 1 ms a message, 1 us a byte
    a = rng.standard_normal((2, 3, 5))  # 2 rows of this rank, 15 float64 a row
    t0 = time.perf_counter()
    got = t.allgatherv(comm, a, [3, 2, 2], np.float32).wait()
    elapsed = time.perf_counter() - t0
    want = SLOW.time("allgather", [0, 1, 2], 7 * 15 * 4, 2 * 15 * 4)
    assert t.log == [("allgather", 3, 7 * 15 * 4, want)] and t.modelled == want
    assert elapsed >= want
    # this rank's rows repeated into each rank's place, in the wire dtype
    assert got.dtype == np.float32 and got.shape == (7, 3, 5)
    np.testing.assert_array_equal(got, a[[0, 1, 0, 0, 1, 0, 1]].astype(np.float32))
    # reduce-scatter: this rank's rows of its own buffer
    b = rng.standard_normal((7, 4))
    got = t.reduce_scatter(comm, b, [3, 2, 2], np.float64).wait()
    np.testing.assert_array_equal(got, b[3:5])
    assert got.base is None or not np.shares_memory(got, b)
    got = t.allreduce(comm, b, np.float32).wait()
    np.testing.assert_array_equal(got, b.astype(np.float32))
    assert [e[0] for e in t.log] == ["allgather", "reduce_scatter", "allreduce"]
    # a strided input is made contiguous when the collective starts, by the caller (as the
    # other transports make their send buffers): its memory is free once the call returns,
    # even while the collective waits behind another
    first = t.allgatherv(comm, a, [3, 2, 2], np.float64)  # ~5 ms on the helper thread
    c = rng.standard_normal((4, 7))
    pend = t.reduce_scatter(comm, c.T, [3, 2, 2], np.float64)
    want = c.T[3:5].copy()
    c[...] = np.nan
    np.testing.assert_array_equal(pend.wait(), want)
    first.wait()
    del t.log[3:]
    # one rank: a copy, no modelled time
    one = VirtualComm([0], 0)
    np.testing.assert_array_equal(t.allgatherv(one, a, [2], np.float64).wait(), a)
    assert len(t.log) == 3
    # close waits for the collectives started and ends the helper thread; a later one makes
    # another
    def helpers():  # (other transports of the session may keep threads of their own)
        return sum(th.name.startswith("fftmatvec-emulated") for th in threading.enumerate())

    pend = t.allreduce(comm, b, np.float64)
    running = helpers()
    t.close()
    np.testing.assert_array_equal(pend.wait(), b)
    assert helpers() == running - 1
    np.testing.assert_array_equal(t.allreduce(comm, b, np.float64).wait(), b)
    t.close()


def test_communication_overlaps_compute_on_a_thread(rng):
    """A collective of 0.3 s started, then 0.3 s of the caller's work: both together take
    about 0.3 s, not 0.6 (the copy and the wait run on the helper thread)."""
    slow = MachineModel("s", 8, 1e-6, 1e6, 1e-6, 8e6)  # 1 us a byte within a node
    t = EmulatedTransport(np, slow)
    comm = VirtualComm([0, 1], 0)
    a = rng.standard_normal((37500, 1))  # the other rank's 37500 float64: 0.3 s
    duration = slow.time("allgather", [0, 1], 2 * a.nbytes, a.nbytes)
    assert duration == pytest.approx(0.3, rel=1e-3)
    t0 = time.perf_counter()
    pend = t.allgatherv(comm, a, [37500, 37500], np.float64)
    time.sleep(0.3)  # the caller's work, meanwhile
    pend.wait()
    elapsed = time.perf_counter() - t0
    assert 0.3 <= elapsed < 0.5
    # two collectives run one after another (one communication stream): twice as long
    t0 = time.perf_counter()
    p1 = t.allgatherv(comm, a, [37500, 37500], np.float64)
    p2 = t.allgatherv(comm, a, [37500, 37500], np.float64)
    p2.wait()
    p1.wait()
    assert time.perf_counter() - t0 >= 2 * duration


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_gpu_collective_runs_on_its_stream(rng):
    """On a GPU the host neither waits for a collective's modelled time when it starts it nor
    when it takes its result: the compute stream waits, on an event."""
    cp = backend.cupy
    slow = MachineModel("s", 8, 1e-6, 1e6, 1e-6, 8e6)  # 1 us a byte within a node
    t = EmulatedTransport(cp, slow)
    comm = VirtualComm([0, 1], 1)
    a = cp.asarray(rng.standard_normal((37500, 2)))  # 0.6 s for the other rank's rows
    duration = slow.time("allgather", [0, 1], 2 * a.nbytes, a.nbytes)
    t.allgatherv(comm, a[:1], [1, 1], np.float64).wait()  # the layout's index, made once
    cp.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    out = t.allgatherv(comm, a, [37500, 37500], np.float64).wait()
    host = time.perf_counter() - t0
    y = out * 2.0  # queued on the compute stream behind the collective
    cp.cuda.get_current_stream().synchronize()
    elapsed = time.perf_counter() - t0
    assert host < duration / 2 <= elapsed and elapsed >= duration
    np.testing.assert_array_equal(cp.asnumpy(y), 2.0 * np.concatenate([a.get(), a.get()]))


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_device_clock_waits_on_the_stream():
    """The device clock's rate as measured is its rate (nanoseconds on NVIDIA), and a wait of
    0.5 s queued after a mark holds its stream that long while the host goes on."""
    from fftmatvec.distributed.emulated import CUDA_CLOCK_RATE, DeviceClock

    cp = backend.cupy
    clock = DeviceClock(cp)
    rate = clock.measure_rate()
    if backend.is_hip():
        assert rate > 0 and clock.rate > 0
    else:
        assert clock.rate == CUDA_CLOCK_RATE
        assert rate == pytest.approx(CUDA_CLOCK_RATE, rel=0.02), rate
    stream = cp.cuda.Stream(non_blocking=True)
    flag = cp.full(4, cp.nan)
    with stream:
        flag[...] = 1.0  # the fill kernel made before the timed part
    stream.synchronize()
    flag[...] = cp.nan
    cp.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    clock.mark(stream)
    clock.wait(stream, 0.5)
    with stream:
        flag[...] = 1.0  # behind the wait
    host = time.perf_counter() - t0
    assert host < 0.25, host  # the host did not wait
    assert not stream.done
    stream.synchronize()
    elapsed = time.perf_counter() - t0
    assert 0.5 <= elapsed < 1.0, elapsed
    assert bool((flag == 1.0).all())


# ---- one rank of a virtual grid ---------------------------------------------------------------
def _operator(xp, K, **kw):
    from mpi4py import MPI

    from fftmatvec import DistributedBlockToeplitz, ProcessGrid

    return DistributedBlockToeplitz(ProcessGrid(MPI.COMM_SELF), xp.asarray(K),
                                    transport="emulated", **kw)


@pytest.mark.parametrize("shape, vgrid, coords, chunks", [
    ((12, 24, 8), (3, 4), (0, 0), 1),
    ((12, 24, 8), (3, 4), (0, 0), 3),
    ((20, 30, 6), (2, 5), (1, 3), 2),
    ((16, 16, 5), (1, 4), (0, 2), 4),
])
def test_one_rank_of_a_virtual_grid(xp, rng, shape, vgrid, coords, chunks):
    nd, nm, nt = shape
    pr, pc = vgrid
    r, c = coords
    K = rng.standard_normal(shape)
    op = _operator(xp, K, network="frontier", virtual_grid=vgrid, virtual_coords=coords,
                   overlap=chunks > 1, chunks=chunks, min_chunk=1)
    assert op.grid.shape == vgrid and op.coords == coords and op.transport.name == "emulated"
    lay = Layout(nd, nm, pr, pc)
    (ra, rb), (ca, cb) = lay.rows(r), lay.cols(c)
    assert (op.rows, op.cols) == ((ra, rb), (ca, cb))
    F = dense_btt(K[ra:rb, ca:cb])
    # the gathered input: every rank's piece of each chunk is this rank's piece of it
    pa, pb = lay.param_range(r, c)
    oa, ob = lay.obs_range(r, c)
    k = 3
    m = rng.standard_normal((k, pb - pa, nt))
    d = rng.standard_normal((k, ob - oa, nt))

    def spread(x, counts, me, chunk_count):
        from fftmatvec.distributed.layout import chunk_pieces

        parts = []
        for ch in chunk_pieces(counts, chunk_count, 1):
            a, b = ch[me]
            for q, (qa, qb) in enumerate(ch):
                idx = np.arange(qb - qa) % max(b - a, 1)
                parts.append(x[:, a:b][:, idx] if b > a else np.zeros((k, qb - qa, nt)))
        return parts

    def block_order(counts, chunk_count):
        """Rows of the local block in the order the pipeline lays each chunk (rank-major)."""
        from fftmatvec.distributed.layout import chunk_pieces

        offs = np.concatenate([[0], np.cumsum(counts)])
        return np.concatenate([np.arange(offs[q] + a, offs[q] + b)
                               for ch in chunk_pieces(counts, chunk_count, 1)
                               for q, (a, b) in enumerate(ch)]).astype(int)

    p_counts = [b - a for a, b in lay.param_ranges_in_col(c)]
    o_counts = [b - a for a, b in lay.obs_ranges_in_row(r)]
    sp, ss = op.blocks[1], op.blocks[0]
    # forward: x_local (block columns) from the repeated pieces, then this rank's rows
    x_local = np.empty((k, cb - ca, nt))
    x_local[:, block_order(p_counts, sp)] = np.concatenate(spread(m, p_counts, r, sp), axis=1)
    y_local = (F @ x_local.reshape(k, -1).T).T.reshape(k, rb - ra, nt)
    own_o = slice(sum(o_counts[:c]), sum(o_counts[:c + 1]))
    got = op.matmat(xp.asarray(m))
    assert got.dtype == np.float64 and got.shape == (k, ob - oa, nt)
    assert rel_err(got, y_local[:, own_o]) < 1e-12
    # adjoint: the mirror
    d_local = np.empty((k, rb - ra, nt))
    d_local[:, block_order(o_counts, ss)] = np.concatenate(spread(d, o_counts, c, ss), axis=1)
    x_adj = (F.T @ d_local.reshape(k, -1).T).T.reshape(k, cb - ca, nt)
    own_p = slice(sum(p_counts[:r]), sum(p_counts[:r + 1]))
    got = op.rmatmat(xp.asarray(d))
    assert got.dtype == np.float64 and got.shape == (k, pb - pa, nt)
    assert rel_err(got, x_adj[:, own_p]) < 1e-12
    # normal: the all-reduce keeps this rank's partial sum, F^T F of the gathered input
    x_nrm = (F.T @ (F @ x_local.reshape(k, -1).T)).T.reshape(k, cb - ca, nt)
    got = op.normal().matmat(xp.asarray(m))
    assert got.dtype == np.float64 and got.shape == (k, pb - pa, nt)
    assert rel_err(got, x_nrm[:, own_p]) < 1e-12


def test_product_takes_at_least_its_modelled_communication(rng):
    """Each collective of a product waits its modelled time, one after another: the product
    takes at least their sum; the log holds the bytes of the product's collectives."""
    nd, nm, nt, k = 8, 32, 16, 2
    K = rng.standard_normal((nd, nm, nt))
    slow = MachineModel("s", 2, 1e-3, 2e7, 1e-3, 2e7)  # 1 ms a message, 50 ns a byte
    op = _operator(np, K, network=slow, virtual_grid=(4, 2), overlap=True, chunks=2,
                   min_chunk=1)
    m = rng.standard_normal((k,) + op.local_shape("param"))
    op.transport.log.clear()
    t0 = time.perf_counter()
    op.matmat(m)
    elapsed = time.perf_counter() - t0
    log = op.transport.log
    gathers = [e for e in log if e[0] == "allgather"]
    reduces = [e for e in log if e[0] == "reduce_scatter"]
    assert len(gathers) == op.blocks[1] and len(reduces) == op.blocks[0]
    # the column's 4 ranks gather the block's 16 parameters, the row's 2 reduce its 2 sensors
    assert sum(e[2] for e in gathers) == 16 * k * nt * 8 and all(e[1] == 4 for e in gathers)
    assert sum(e[2] for e in reduces) == 2 * k * nt * 8 and all(e[1] == 2 for e in reduces)
    assert elapsed >= op.transport.modelled > 0
    # the column (ranks 0-3) spans two nodes of 2 ranks, the row (ranks 0 and 4) too
    assert op.grid.col_comm.members == (0, 1, 2, 3) and op.grid.row_comm.members == (0, 4)


def test_emulation_errors(rng):
    K = rng.standard_normal((4, 8, 3))
    with pytest.raises(FFTMatvecDistributedError, match="needs virtual_grid"):
        _operator(np, K, network="h100")
    with pytest.raises(FFTMatvecDistributedError, match="network must be a MachineModel"):
        _operator(np, K, network="summit", virtual_grid=(2, 2))
    with pytest.raises(FFTMatvecValueError, match="does not fit the kernel"):
        _operator(np, K, network="h100", virtual_grid=(5, 2))
    with pytest.raises(FFTMatvecValueError, match="virtual_coords must lie in"):
        _operator(np, K, network="h100", virtual_grid=(2, 2), virtual_coords=(2, 0))
    with pytest.raises(FFTMatvecTypeError, match="virtual_grid must be two integers"):
        _operator(np, K, network="h100", virtual_grid=4)
    from mpi4py import MPI

    from fftmatvec import DistributedBlockToeplitz, ProcessGrid

    op = _operator(np, K, network="h100", virtual_grid=(2, 2))
    with pytest.raises(FFTMatvecValueError, match="no other ranks to gather from"):
        op.collect(op.distribute(rng.standard_normal((8, 3))))
    with pytest.raises(FFTMatvecDistributedError, match="go with transport='emulated'"):
        DistributedBlockToeplitz(ProcessGrid(MPI.COMM_SELF), K, network="h100")


def test_bench_scaling_emulate_runs(capsys):
    """scripts/bench_scaling.py --emulate prints a row per k and virtual grid, with the
    modelled communication and its share (a smoke run on the CPU; its timings are not
    checked)."""
    from conftest import load_script

    bench = load_script("bench_scaling")
    assert bench.main(["--emulate", "frontier", "--grid", "1x1", "--grid", "2x3", "--nd", "6",
                       "--nm", "12", "--nt", "8", "--k", "1,2", "--repeat", "1", "--chunks", "2",
                       "--min-chunk", "1", "--bandwidth", "10", "--mode", "normal"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if not line.startswith("#")][1:]
    assert [(r[0], r[1]) for r in rows] == [("1", "1x1"), ("1", "2x3"), ("2", "1x1"),
                                            ("2", "2x3")]
    assert rows[0][2] == "1x1" and rows[1][2] == "1x2"  # one sensor a rank of the row
    assert float(rows[1][9]) > 0 and 0 < float(rows[1][12]) < 1  # comm, and its share
    with pytest.raises(SystemExit):
        bench.main(["--emulate", "frontier"])  # no grid


def test_bench_scaling_chunk_cost_runs(capsys):
    """scripts/bench_scaling.py --chunk-cost times the pipeline forced into chunks on one
    process against the whole block: a row per k and cut, the blocks as asked."""
    from conftest import load_script

    bench = load_script("bench_scaling")
    assert bench.main(["--chunk-cost", "2x3", "--chunk-cost", "1x1", "--nd", "6", "--nm", "12",
                       "--nt", "8", "--k", "1,3", "--repeat", "1", "--min-chunk", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if not line.startswith("#")][1:]
    assert [(r[0], r[1]) for r in rows] == [("1", "2x3"), ("1", "1x1"), ("3", "2x3"),
                                            ("3", "1x1")]
    assert all(float(r[-1]) > 0 for r in rows)
    with pytest.raises(SystemExit):
        bench.main(["--chunk-cost", "2x2", "--emulate", "h100", "--grid", "2x2"])
