"""The distributed operator: its pure parts in-process, its products under mpiexec.

The MPI checks live in tests/mpi/ and run as one ``mpiexec -n N`` per rank count, each under
a timeout so that a hang fails the test; they compare with the single-process operator.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fftmatvec import (FFTMatvecDistributedError, FFTMatvecTypeError, FFTMatvecValueError,
                       backend)
from fftmatvec.distributed import Layout, block_partition, choose_grid, comm_bytes
from fftmatvec.distributed.layout import check_fit

ROOT = Path(__file__).resolve().parents[1]
MPI_DIR = Path(__file__).resolve().parent / "mpi"
TIMEOUT = 180


# ---- pure functions ----------------------------------------------------------------------
@pytest.mark.parametrize("n, parts", [(7, 2), (7, 4), (5, 5), (3, 4), (0, 2), (10, 3)])
def test_block_partition(n, parts):
    p = block_partition(n, parts)
    assert len(p) == parts and p[0][0] == 0 and p[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(p, p[1:]))  # contiguous
    sizes = [b - a for a, b in p]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("counts, chunks, minimum", [
    ([4, 3], 2, 1), ([3, 3, 3, 2], 3, 1), ([1, 1, 0, 0], 7, 1), ([2, 1], 7, 1), ([0, 5], 3, 1),
    ([13], 4, 1), ([40, 39], 4, 16), ([7, 7], 4, 16), ([6], 1, 1), ([0], 3, 1)])
def test_chunk_pieces(counts, chunks, minimum):
    from fftmatvec.distributed.layout import chunk_pieces

    out = chunk_pieces(counts, chunks, minimum)
    n = max(1, min(chunks, sum(counts) // minimum))  # the chunks before the empty ones go
    assert len(out) == (min(n, max(counts)) if max(counts) else 1)
    for q, c in enumerate(counts):
        pieces = [ch[q] for ch in out]
        # rank q's pieces cover its slice in order, each its share of the n chunks
        assert pieces[0][0] == 0 and pieces[-1][1] == c if c else all(a == b for a, b in pieces)
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert pieces == block_partition(c, n)[:len(out)]
    assert all(any(b > a for a, b in ch) for ch in out) or sum(counts) == 0
    if sum(counts) >= minimum:  # about `minimum` rows a chunk at least
        assert sum(sum(b - a for a, b in ch) for ch in out) / len(out) >= minimum


def test_chunk_pieces_by_hand():
    from fftmatvec.distributed.layout import chunk_pieces

    # two ranks own 4 and 3 rows: chunk 0 is rows 0:2 of both, chunk 1 rows 2:4 and 2:3
    assert chunk_pieces([4, 3], 2) == [[(0, 2), (0, 2)], [(2, 4), (2, 3)]]
    # more chunks than rows: the chunks empty on every rank go, one rank's pieces are empty
    assert chunk_pieces([2, 1], 7) == [[(0, 1), (0, 1)], [(1, 2), (1, 1)]]
    assert chunk_pieces([40, 39], 4, 16) == [[(0, 10), (0, 10)], [(10, 20), (10, 20)],
                                             [(20, 30), (20, 30)], [(30, 40), (30, 39)]]
    assert chunk_pieces([7, 7], 4, 16) == [[(0, 7), (0, 7)]]  # 14 rows: one chunk
    with pytest.raises(FFTMatvecValueError, match="chunks and minimum"):
        chunk_pieces([3], 0)


@pytest.mark.parametrize("nd, nm, pr, pc", [(5, 7, 2, 2), (5, 7, 1, 4), (6, 4, 4, 1),
                                            (3, 3, 3, 3), (9, 2, 2, 2)])
def test_layout_owns_each_entry_once(nd, nm, pr, pc):
    lay = Layout(nd, nm, pr, pc)
    for space, n in (("param", nm), ("obs", nd)):
        owned = sorted(lay.owned(space, r, c) for r in range(pr) for c in range(pc))
        covered = [i for a, b in owned for i in range(a, b)]
        assert covered == list(range(n)), space
    for r in range(pr):
        for c in range(pc):
            a, b = lay.param_range(r, c)
            assert lay.cols(c)[0] <= a <= b <= lay.cols(c)[1]  # inside its column's slice
            a, b = lay.obs_range(r, c)
            assert lay.rows(r)[0] <= a <= b <= lay.rows(r)[1]  # inside its row's slice
            assert lay.rows(r)[1] > lay.rows(r)[0] and lay.cols(c)[1] > lay.cols(c)[0]


def test_grid_that_does_not_fit():
    with pytest.raises(FFTMatvecValueError, match="4 process rows need at least 4 sensors"):
        check_fit(3, 10, 4, 1)
    with pytest.raises(FFTMatvecValueError, match="process columns"):
        Layout(10, 2, 1, 3)
    with pytest.raises(FFTMatvecValueError, match="no process grid of 7 ranks"):
        choose_grid(7, 3, 5, 10)


def test_comm_bytes_by_hand():
    # 1x2 grid, Nd=3, Nm=4, Nt=10, all d: no gather (one row); the reduce-scatter of rank
    # (0, c) sends the 3 - |obs(0, c)| sensor rows it does not own: rank 1 owns 1, sends 2.
    b = comm_bytes(3, 4, 10, 1, 2, "ddddd")
    assert b["forward"] == 2 * 10 * 8
    assert b["adjoint"] == 2 * 10 * 8
    assert b["pair"] == 4 * 10 * 8
    # 2x1: the gather receives the parameters not owned: 4 - 2 = 2 rows
    assert comm_bytes(3, 4, 10, 2, 1)["forward"] == 2 * 10 * 8
    # single precision at stages 1 and 5 halves every byte count
    for key, val in comm_bytes(30, 50, 7, 2, 2, "ddddd").items():
        assert comm_bytes(30, 50, 7, 2, 2, "sddds")[key] * 2 == val
    # stage 1 only: the normal operator's gather halves, its reductions do not
    d, s = comm_bytes(30, 50, 7, 2, 2), comm_bytes(30, 50, 7, 2, 2, "sdddd")
    assert s["normal"] < d["normal"] and s["normal"] > d["normal"] // 2
    assert comm_bytes(1, 1, 5, 1, 1)["pair"] == 0


def test_choose_grid():
    # few sensors, many parameters: split the parameters (the sensor rows are cheap to reduce)
    assert choose_grid(4, 100, 5000, 1000) == (1, 4)
    assert choose_grid(4, 5000, 100, 1000) == (4, 1)
    # square: a square grid moves the fewest bytes
    assert choose_grid(16, 4096, 4096, 100) == (4, 4)
    # a grid must fit: with 3 parameters, 4 columns are impossible
    assert choose_grid(4, 100, 3, 10)[1] <= 3
    assert choose_grid(1, 1, 1, 1) == (1, 1)
    for size in (1, 2, 4, 6, 8):
        pr, pc = choose_grid(size, 37, 53, 11, "sddds")
        assert pr * pc == size
        best = min(comm_bytes(37, 53, 11, r, size // r, "sddds")["pair"]
                   for r in range(1, size + 1) if size % r == 0)
        assert comm_bytes(37, 53, 11, pr, pc, "sddds")["pair"] == best
    with pytest.raises(FFTMatvecValueError, match="product"):
        choose_grid(2, 3, 3, 3, product="both")


def test_shared_device():
    from fftmatvec.distributed.comm import shared_device

    assert shared_device([("a", "0000:01:00.0"), ("a", "0000:02:00.0"), ("b", "0000:01:00.0")]) == ""
    assert shared_device([("a", "0000:01:00.0")]) == ""
    assert shared_device([("a", "x"), ("a", "y"), ("a", "x"), ("a", "y")]) == \
        "ranks 0 and 2 share GPU x on a"


def test_cpu_transport_is_mpi():
    import numpy as np

    from fftmatvec.distributed.comm import make_transport

    t = make_transport(np, None)
    assert (t.name, t.staging) == ("mpi", "host") and "CPU" in t.reason
    with pytest.raises(FFTMatvecValueError, match="needs a GPU operator"):
        make_transport(np, "nccl")
    with pytest.raises(FFTMatvecValueError, match="transport must be"):
        make_transport(np, "gloo")


class _Request:
    """An MPI request that completes at its ``n``-th test."""

    def __init__(self, n):
        self.n, self.tests = n, 0

    def Test(self):
        self.tests += 1
        return self.tests >= self.n

    def Wait(self):
        self.tests = max(self.tests, self.n)


class _Event:
    """A device event that has passed after ``n`` queries."""

    def __init__(self, n):
        self.n, self.queries, self.waited = n, 0, False

    @property
    def done(self):
        self.queries += 1
        return self.queries > self.n

    def synchronize(self):
        self.waited = True


def test_waiting_for_the_device_drives_the_collectives_in_flight():
    """A send that waits for the device tests the collectives in flight meanwhile (MPI moves
    them only inside its calls); with none in flight it waits without spinning."""
    import numpy as np

    from fftmatvec.distributed.comm import MPITransport

    t = MPITransport(np)
    reqs = [_Request(3), _Request(50)]
    pend = [t._pending(lambda r=r: r, lambda: "got", ()) for r in reqs]
    assert t.in_flight == 2
    ev = _Event(10)
    t.until(ev)
    assert not ev.waited and ev.queries == 11
    assert reqs[0].tests == 3  # tested until it completed, then forgotten
    assert reqs[1].tests == 10 and t.in_flight == 1
    assert pend[1].wait() == "got" and t.in_flight == 0
    ev = _Event(10)
    t.until(ev)  # nothing in flight: one plain wait
    assert ev.waited and ev.queries == 1
    # waited-for collectives are forgotten as new ones start (nothing accumulates)
    for _ in range(5):
        t._pending(lambda: _Request(1), lambda: None, ()).wait()
    assert len(t._inflight) == 1


def test_a_gpu_collective_starts_in_order_once_its_data_is_on_the_host():
    """On a GPU the host does not wait for the device to start a collective: it is queued
    behind its event and started once that event and every earlier one have passed, in the
    order queued (the ranks must start a communicator's collectives in one order); waiting for
    a later one starts the earlier ones first."""
    from fftmatvec.distributed.comm import MPITransport

    t = MPITransport(object(), gpu_aware=True)  # a device array module: nothing is staged
    started = []

    def start(i, n):
        def go():
            started.append(i)
            return _Request(n)
        return go

    slow, fast = _Event(5), _Event(0)  # queried at each queueing and progress
    p0 = t._pending(start(0, 3), lambda: "a", (), slow)
    p1 = t._pending(start(1, 1), lambda: "b", (), fast)  # ready, but queued behind p0
    assert started == [] and t.in_flight == 2
    for _ in range(3):
        t.progress()
    assert started == []
    t.progress()
    assert started == [0, 1]
    assert p1.wait() == "b" and p0.wait() == "a" and t.in_flight == 0
    # a wait for a collective not yet started starts those before it first
    started.clear()
    q0 = t._pending(start(0, 2), lambda: "c", (), _Event(3))
    q1 = t._pending(start(1, 5), lambda: "d", (), _Event(0))
    assert q1.wait() == "d" and started == [0, 1]
    assert q0.test() and q0.wait() == "c"


def test_the_collective_thread_keeps_the_order_and_returns_the_results():
    """The helper thread posts the collectives in the order submitted, each once its data is
    ready (a slow first one holds the later ones back: MPI requires one order on every
    rank), waits for each request and returns its result through the future."""
    import time

    from fftmatvec.distributed.comm import CollectiveThread

    worker, log = CollectiveThread(), []

    def ready(i, seconds):
        def go():
            time.sleep(seconds)
            log.append(("ready", i))
        return go

    def start(i, n):
        def go():
            log.append(("start", i))
            return _Request(n)
        return go

    futs = [worker.submit(ready(i, s), start(i, n), lambda i=i: f"result {i}")
            for i, (s, n) in enumerate([(0.2, 3), (0.0, 1), (0.05, 2), (0.0, 1)])]
    assert [f.result(timeout=10) for f in futs] == [f"result {i}" for i in range(4)]
    assert log == [(w, i) for i in range(4) for w in ("ready", "start")]
    assert worker.pending == 0 and worker.drain() is None
    worker.close()


def test_the_collective_thread_posts_a_failed_collective_and_raises_after_it():
    """A failure while waiting for the data: the send buffer is zeroed and the collective
    posted all the same (the other ranks' collectives complete), then the failure is raised
    to the caller; the collectives after it run as usual. A failing post is raised too."""
    from fftmatvec.distributed.comm import CollectiveThread

    worker, log = CollectiveThread(), []

    def broken():
        raise RuntimeError("the device copy failed")

    def refused():
        raise ValueError("MPI refused it")

    f0 = worker.submit(broken, lambda: log.append("posted 0") or _Request(1),
                       lambda: "never", spoil=lambda: log.append("zeroed 0"))
    f1 = worker.submit(lambda: None, refused, lambda: "never")
    f2 = worker.submit(lambda: None, lambda: log.append("posted 2"), lambda: "fine")
    with pytest.raises(RuntimeError, match="the device copy failed"):
        f0.result(timeout=10)
    with pytest.raises(ValueError, match="MPI refused it"):
        f1.result(timeout=10)
    assert f2.result(timeout=10) == "fine"
    assert log == ["zeroed 0", "posted 0", "posted 2"]
    f3 = worker.submit(broken, lambda: None, lambda: None)
    assert isinstance(worker.drain(), RuntimeError) and worker.pending == 0 and f3.done()
    worker.close()


def test_the_collective_thread_starts_lazily_and_closes_cleanly():
    """No thread before the first collective; close() waits for the pending ones and ends
    the thread; a later collective makes another."""
    import threading
    import time

    from fftmatvec.distributed.comm import CollectiveThread

    def threads():
        return [t for t in threading.enumerate() if t.name.startswith("fftmatvec-test")]

    worker = CollectiveThread(name="fftmatvec-test")
    assert threads() == []
    done = []
    fut = worker.submit(lambda: time.sleep(0.1), lambda: None, lambda: done.append(1))
    assert len(threads()) == 1
    worker.close()
    assert fut.done() and done == [1] and threads() == []
    assert worker.submit(lambda: None, lambda: None, lambda: "again").result(timeout=10) == \
        "again"
    worker.close()
    assert threads() == []


def test_a_transport_with_the_helper_thread_hands_its_collectives_over():
    """``MPITransport(helper=True)``: a collective goes to the helper thread (nothing to
    drive on the calling thread), which waits for its event first; ``wait()`` gives its
    result, and a failure to wait for the event reaches the caller after the collective,
    its send buffer zeroed."""
    import numpy as np

    from fftmatvec.distributed.comm import MPITransport

    class Failing:
        def synchronize(self):
            raise RuntimeError("no event")

    t = MPITransport(np, helper=True)
    assert t.helper and not MPITransport(np).helper
    ev, req, send = _Event(0), _Request(2), np.ones(3)
    pend = t._pending(lambda: req, lambda: "got", (), ev)
    assert pend.wait() == "got" and ev.waited and req.tests >= 2 and t.in_flight == 0
    bad = t._pending(lambda: _Request(1), lambda: "never", (), Failing(),
                     lambda: send.fill(0))
    with pytest.raises(RuntimeError, match="no event"):
        bad.wait()
    assert not send.any() and isinstance(t.drain(), RuntimeError) and t.drain() is None
    t.close()


def test_process_grid_needs_a_communicator():
    from fftmatvec import ProcessGrid

    with pytest.raises(FFTMatvecTypeError, match="mpi4py communicator"):
        ProcessGrid(None)


def test_choose_layout():
    from fftmatvec.distributed import Machine, choose_layout

    # one vector: one replica, the byte-count grid
    assert choose_layout(8, 100, 5000, 100) == (1,) + choose_grid(8, 100, 5000, 100)
    assert choose_layout(4, 5, 7, 6, batch=1) == (1,) + choose_grid(4, 5, 7, 6)
    # a large batch of a small kernel: every rank a replica (nothing to communicate)
    assert choose_layout(4, 5, 7, 6, batch=64) == (4, 1, 1)
    # no more replicas than vectors, and R divides the ranks
    for size, batch in ((8, 3), (6, 4), (12, 5)):
        R, pr, pc = choose_layout(size, 16, 16, 50, batch=batch)
        assert R <= batch and R * pr * pc == size
    # memory: each replica holds a whole Khat; a bound below one rank's share of it for
    # R = 4 keeps fewer replicas
    free = choose_layout(4, 64, 64, 100, batch=64)
    assert free[0] == 4
    khat_r4 = 64 * 64 * 101 * 16  # one rank holds all of Khat (complex128, Nf = Nt + 1)
    assert choose_layout(4, 64, 64, 100, batch=64, memory=khat_r4 // 2)[0] < 4
    # a slow network makes replicas pay off sooner, a fast one later
    slow, fast = Machine(bandwidth=1e8), Machine(bandwidth=1e13, latency=0.0)
    assert choose_layout(4, 64, 64, 100, batch=4, machine=slow)[0] == 4
    assert choose_layout(4, 64, 64, 100, batch=4, machine=fast)[0] == 1
    with pytest.raises(FFTMatvecValueError, match="batch"):
        choose_layout(4, 5, 7, 6, batch=0)


def test_process_grid_checks_its_replicas():
    """The checks a grid makes before any product (a communicator of one rank: in-process)."""
    MPI = pytest.importorskip("mpi4py.MPI")
    from fftmatvec import ProcessGrid

    with pytest.raises(FFTMatvecValueError, match="replicas=2 does not divide"):
        ProcessGrid(MPI.COMM_SELF, replicas=2)
    with pytest.raises(FFTMatvecTypeError, match="replicas must be a positive integer"):
        ProcessGrid(MPI.COMM_SELF, replicas=1.5)
    with pytest.raises(FFTMatvecValueError, match="replicas must be a positive integer"):
        ProcessGrid(MPI.COMM_SELF, replicas=0)
    g = ProcessGrid(MPI.COMM_SELF, replicas=1).resolve(3, 4, 5)
    assert (g.replicas, g.shape, g.replica, g.coords, g.group_size) == (1, (1, 1), 0, (0, 0), 1)
    assert ProcessGrid(MPI.COMM_SELF).resolve(3, 4, 5, batch=8).replicas == 1  # one rank


# ---- under mpiexec -----------------------------------------------------------------------
def _mpiexec():
    exe = shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec is not on PATH")
    pytest.importorskip("mpi4py")
    return exe


def _run(n, script, *args, timeout=TIMEOUT):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")  # MPICH: yield when oversubscribed
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")  # Open MPI: allow n > cores
    cmd = [_mpiexec(), "-n", str(n), sys.executable, str(MPI_DIR / script), *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=str(ROOT))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not end within {timeout} s (a hang): "
                    f"{(exc.stderr or b'')[-2000:]!r}")


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_products_agree_with_single_process(n):
    res = _run(n, "check_products.py")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    assert res.stdout.split()[:2] == ["OK", str(n)], res.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3, 4])
def test_errors_reach_every_rank(n):
    res = _run(n, "check_errors.py")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    assert res.stdout.split()[:2] == ["OK", str(n)], res.stdout


@pytest.mark.mpi
def test_uncaught_error_ends_the_run():
    res = _run(2, "check_errors.py", "uncaught", timeout=60)
    assert res.returncode != 0
    assert "not reached" not in res.stdout
    # both ranks raised, each naming the failing rank and the cause
    assert res.stderr.count("FFTMatvecDistributedError: matvec failed on 1 of 2 rank(s): "
                            "rank 1") == 2, res.stderr[-3000:]
    assert "must have shape" in res.stderr


@pytest.mark.mpi
def test_uncaught_distribute_error_ends_the_run():
    """``distribute`` of a global vector of the wrong shape on one rank, uncaught (the README's
    lines): every rank raises, so the run ends instead of the other ranks waiting."""
    res = _run(2, "check_errors.py", "uncaught", "distribute", timeout=60)
    assert res.returncode != 0
    assert "not reached" not in res.stdout
    assert res.stderr.count("FFTMatvecDistributedError: distribute failed on 1 of 2 rank(s): "
                            "rank 1") == 2, res.stderr[-3000:]
    assert "must have shape" in res.stderr


@pytest.mark.mpi
def test_cli_matvec_with_a_grid(tmp_path):
    import numpy as np

    from fftmatvec import BlockToeplitz, io

    exe = _mpiexec()
    rng = np.random.default_rng(5)
    K, d = rng.standard_normal((5, 3, 4)), rng.standard_normal((5, 4))
    io.save_matrix(tmp_path / "k.h5", K)
    io.save_vector(tmp_path / "d.h5", d, "obs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    cmd = [exe, "-n", "2", sys.executable, "-m", "fftmatvec", "matvec", "k.h5", "d.h5", "z.h5",
           "--adjoint", "--grid", "2x1", "--repeat", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("grid       2x1") == 1  # printed by rank 0 only
    z = io.load_vector(tmp_path / "z.h5", space="param")
    ref = BlockToeplitz(K).rmatvec(d)
    assert np.abs(z - ref).max() <= 1e-12 * np.abs(ref).max()


@pytest.mark.mpi
def test_cli_matvec_with_a_grid_refuses_an_output_over_an_input(tmp_path):
    """The distributed command refuses what the serial one refuses, with its message, before
    any work and on every rank: the files stay as they were."""
    import numpy as np

    from fftmatvec import io

    exe = _mpiexec()
    rng = np.random.default_rng(7)
    K = rng.standard_normal((3, 2, 5))
    io.save_matrix(tmp_path / "K.h5", K)
    io.save_matrix(tmp_path / "D", K, layout="fftmatvec")
    io.save_vector(tmp_path / "m.h5", rng.standard_normal((2, 5)))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    cases = [("K.h5", "m.h5", "K.h5"), ("K.h5", "m.h5", "m.h5"),
             ("D", "m.h5", "D/binary/adj/vec_000001.h5"), ("D", "m.h5", "D/notes.h5")]
    for matrix, inp, out in cases:
        args = [sys.executable, "-m", "fftmatvec", "matvec", matrix, inp, out, "--repeat", "1"]
        serial = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env,
                                cwd=tmp_path)
        assert serial.returncode == 2, serial.stderr
        message = serial.stderr.strip()
        assert "OUTPUT" in message and len(message.splitlines()) == 1, message
        for launch in ([exe, "-n", "2"] + args, args + ["--grid", "1x1"]):
            res = subprocess.run(launch, capture_output=True, text=True, timeout=120, env=env,
                                 cwd=tmp_path)
            lines = res.stderr.strip().splitlines()
            assert res.returncode == 2, (launch, res.stdout, res.stderr[-3000:])
            assert "Traceback" not in res.stderr and "matrix " not in res.stdout, res.stderr
            # every rank says what the serial command says
            assert lines == [message] * (2 if launch[0] == exe else 1), (launch, res.stderr)
    assert {p: p.read_bytes() for p in before} == before
    assert not (tmp_path / "D" / "notes.h5").exists()


def _gpu_or_skip():
    from fftmatvec import backend

    if not backend.gpu_available():
        pytest.skip("no GPU (CuPy missing or no device)")


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("transport", ["gpu", "nccl"])
def test_products_with_ranks_sharing_the_gpu(n, transport):
    """CuPy operators, the ranks sharing the visible GPU(s): the automatic transport (MPI,
    host-staged unless the MPI library is GPU-aware, where ranks share a GPU), or NCCL (which
    needs a GPU per rank)."""
    _gpu_or_skip()
    if transport == "nccl":
        from fftmatvec import backend

        if backend.cupy.cuda.runtime.getDeviceCount() < n:
            pytest.skip(f"NCCL needs a GPU per rank: {n} ranks")
    res = _run(n, "check_products.py", transport)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    assert res.stdout.split()[:2] == ["OK", str(n)], res.stdout


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_errors_with_ranks_sharing_the_gpu(n):
    """The error checks on CuPy operators; NCCL asked for on a shared GPU fails on every rank."""
    _gpu_or_skip()
    res = _run(n, "check_errors.py", "gpu")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    assert res.stdout.split()[:2] == ["OK", str(n)], res.stdout


# ---- conjugate gradients (the same lines serve one process and a grid) ---------------------
def _spd_problem(rng):
    from fftmatvec import BlockToeplitz

    K = rng.standard_normal((6, 4, 5))
    F = BlockToeplitz(K)
    m = rng.standard_normal((4, 5))
    return F, F.normal(), F.normal().matvec(m)


def test_cg_follows_scipys_info_convention(rng):
    """``info`` 0 once converged (the residual within rtol), else the iterations run, with a
    warning that points at the caller's line."""
    import warnings

    import numpy as np

    from fftmatvec.distributed import cg

    _, N, b = _spd_problem(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, info = cg(N, b, rtol=1e-10, maxiter=500)
    assert info == 0 and isinstance(info, int)
    assert np.linalg.norm(N.matvec(x) - b) <= 1e-8 * np.linalg.norm(b)
    with pytest.warns(RuntimeWarning, match="did not converge") as caught:
        x2, info2 = cg(N, b, rtol=1e-10, maxiter=2)
    assert info2 == 2
    assert caught[0].filename == __file__
    assert np.linalg.norm(N.matvec(x2) - b) > 1e-10 * np.linalg.norm(b)
    # integer-valued tolerances of any integer type are numbers like any other
    _, info3 = cg(N, b, rtol=np.int64(1), maxiter=5)
    assert info3 == 0


def test_cg_refuses_bad_arguments(rng):
    import numpy as np

    from fftmatvec.distributed import cg

    F, N, b = _spd_problem(rng)
    with pytest.raises(FFTMatvecValueError, match=r"A must be square.*\(30, 20\)"):
        cg(F, rng.standard_normal((4, 5)))
    with pytest.raises(FFTMatvecTypeError, match="rtol must be a real number.*'1e-5'"):
        cg(N, b, rtol="1e-5")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(FFTMatvecValueError, match="rtol must be"):
            cg(N, b, rtol=bad)
    with pytest.raises(FFTMatvecTypeError, match="rtol"):
        cg(N, b, rtol=True)
    with pytest.raises(FFTMatvecTypeError, match="maxiter must be"):
        cg(N, b, maxiter=2.5)
    with pytest.raises(FFTMatvecValueError, match="maxiter must be"):
        cg(N, b, maxiter=-1)
    with pytest.raises(FFTMatvecTypeError, match="A must have a matvec"):
        cg(np.eye(20), b)
    with pytest.raises(FFTMatvecTypeError, match="callback must be callable"):
        cg(N, b, callback=3)


# ---- the cost model (distributed/model.py) and the projection built on it -----------------
def test_collective_times_by_hand():
    from fftmatvec.distributed.model import Machine, collective_time

    m = Machine(latency=1e-6, bandwidth=1e3)
    # a ring broadcast over 4 ranks: 3 steps, the whole 1000 bytes through every rank
    assert collective_time("bcast", 1000, 4, m) == pytest.approx(3e-6 + 1.0)
    assert collective_time("reduce", 1000, 4, m, "log") == pytest.approx(2e-6 + 1.0)
    # an all-gather by recursive doubling over 8 ranks: 3 steps, 7/8 of the bytes
    assert collective_time("allgather", 800, 8, m, "log") == pytest.approx(3e-6 + 0.7)
    assert collective_time("reduce_scatter", 800, 8, m) == pytest.approx(7e-6 + 0.7)
    assert collective_time("allreduce", 800, 8, m) == pytest.approx(2 * (7e-6 + 0.7))
    assert collective_time("allgather", 800, 5, m, "log") == pytest.approx(3e-6 + 0.64)
    assert collective_time("bcast", 10**9, 1, m) == 0.0  # one rank: nothing moves
    with pytest.raises(FFTMatvecValueError, match="kind"):
        collective_time("scatter", 1, 2, m)
    with pytest.raises(FFTMatvecValueError, match="algorithm"):
        collective_time("bcast", 1, 2, m, "tree")
    with pytest.raises(FFTMatvecValueError, match="latency"):
        Machine(latency=-1.0)


def test_product_times_by_hand():
    from fftmatvec.distributed.model import (Machine, collective_time, fftmatvec_time,
                                             local_compute_time, pipeline_time)

    m = Machine(latency=2e-6, bandwidth=1e9, mem_bandwidth=1e12)
    c = 1e-3
    assert fftmatvec_time(c, 10, 20, 30, 1, 1, m) == c
    # FFTMatvec: broadcast of 20 x 30 float64 down 2 ranks, reduce of 10 x 30 along 4
    want = c + collective_time("bcast", 8 * 20 * 30, 2, m) + collective_time(
        "reduce", 8 * 10 * 30, 4, m)
    assert fftmatvec_time(c, 10, 20, 30, 2, 4, m) == pytest.approx(want)
    # the pipeline in one chunk: compute then communicate (nothing hidden)
    comm = (collective_time("allgather", 8 * 20 * 30, 2, m, "log")
            + collective_time("reduce_scatter", 8 * 10 * 30, 4, m, "log"))
    assert pipeline_time(c, 10, 20, 30, 2, 4, m, chunks=1) == pytest.approx(c + comm)
    # four chunks, full overlap: max + min / 4, with four collectives' latency each
    comm4 = comm + 3 * (collective_time("allgather", 0, 2, m, "log")
                        + collective_time("reduce_scatter", 0, 4, m, "log"))
    assert pipeline_time(c, 10, 20, 30, 2, 4, m, chunks=4) == pytest.approx(
        max(c, comm4) + min(c, comm4) / 4)
    assert pipeline_time(c, 10, 20, 30, 2, 4, m, overlap=0.0, chunks=4) == pytest.approx(
        c + comm4)
    # float32 at stages 1 and 5 halves the wire's bytes; the latency stays
    lat = collective_time("allgather", 0, 2, m, "log") + collective_time(
        "reduce_scatter", 0, 4, m, "log")
    assert pipeline_time(0.0, 10, 20, 30, 2, 4, m, "sddds", chunks=1) == pytest.approx(
        lat + (comm - lat) / 2)
    # the local product: Khat once (16 bytes an entry in d, 8 in s), each vector's spectra
    nf = 31
    assert local_compute_time(10, 20, 30, 1, m) == pytest.approx(
        (10 * 20 * nf * 16 + 30 * nf * 32) / 1e12)
    assert local_compute_time(10, 20, 30, 2, m, "dssdd") == pytest.approx(
        (10 * 20 * nf * 8 + 2 * 30 * nf * 32) / 1e12)
    with pytest.raises(FFTMatvecValueError, match="overlap"):
        pipeline_time(c, 1, 1, 1, 1, 1, m, overlap=1.5)


def test_fit_recovers_known_constants():
    """A curve made by the model itself with known constants: the fit gives them back, its
    grids the best ones, its residuals zero."""
    from fftmatvec.distributed.model import Machine, fftmatvec_time, fit_fftmatvec, grids_of

    true = Machine(latency=3e-6, bandwidth=2e9)
    nd, nm, nt, c = 100, 5000, 1000, 2e-3
    curve = [(1, c)] + [(p, min(fftmatvec_time(c, nd, nm, nt, g[0], g[1], true)
                                for g in grids_of(p))) for p in (8, 64, 512, 4096)]
    machine, fits = fit_fftmatvec(curve, nd, nm, nt)
    assert machine.latency == pytest.approx(3e-6, rel=1e-6)
    assert machine.bandwidth == pytest.approx(2e9, rel=1e-6)
    for p, grid, model, residual in fits:
        assert abs(residual) < 1e-9 and grid == (1, p)
    with pytest.raises(FFTMatvecValueError, match="p = 1"):
        fit_fftmatvec(curve[1:], nd, nm, nt)


def test_projection_script_prints_the_fit_and_the_projection(capsys):
    import runpy

    mod = runpy.run_path(str(ROOT / "scripts" / "project_scaling.py"), run_name="project")
    assert mod["main"](["--compute-ms", "2.0", "--chunks", "1,4"]) == 0
    out = capsys.readouterr().out
    for p, _ in mod["CURVE"]:  # the fit's residual at every point of the curve
        assert any(line.split()[:1] == [str(p)] and line.rstrip().endswith("%")
                   for line in out.splitlines()), (p, out)
    assert "latency" in out and "bandwidth" in out
    assert "projected weak-scaling efficiency at 4096 GPUs" in out
    with pytest.raises(SystemExit):
        mod["main"](["--overlap", "2"])


def test_distributed_rtol_numpy_scalars(rng):
    """The distributed operator takes ``rtol`` as any real number, as the serial one does."""
    import warnings

    import numpy as np
    from mpi4py import MPI

    from fftmatvec import DistributedBlockToeplitz, ProcessGrid

    K = rng.standard_normal((3, 4, 5))
    grid = ProcessGrid(MPI.COMM_SELF, rows=1, cols=1)
    with warnings.catch_warnings():  # the a-priori model's warning, once per process
        warnings.simplefilter("ignore")
        F = DistributedBlockToeplitz(grid, K, precision="auto", rtol=np.int64(1))
    assert F.precision
    with pytest.raises(FFTMatvecDistributedError, match="rtol must be a real number"):
        DistributedBlockToeplitz(grid, K, precision="auto", rtol="1e-5")


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_nccl_transport_runs_its_calls_on_one_gpu(rng):
    """NCCL's calls (broadcasts, reduces, an all-reduce) on a communicator of one rank, made to
    go through NCCL; then the block pipeline's products through them, cut into 2 x 3 blocks on
    the one rank, against the single-process operator (all-d, 1e-12) and the dense product."""
    from mpi4py import MPI

    from conftest import dense_btt
    from fftmatvec import BlockToeplitz, DistributedBlockToeplitz, ProcessGrid
    from fftmatvec.distributed.comm import NCCLTransport

    cp = backend.cupy
    comm = MPI.COMM_SELF
    t = NCCLTransport(cp, reason="one rank through NCCL", alone=False)
    a = cp.asarray(rng.standard_normal((5, 3, 4)))
    for got in (t.allgatherv(comm, a, [5], np.float64).wait(),
                t.reduce_scatter(comm, a, [5], np.float64).wait(),
                t.allreduce(comm, a, np.float64).wait()):
        assert got.shape == a.shape and got.dtype == np.float64
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(a))
    nd, nm, nt = 7, 9, 6
    K = rng.standard_normal((nd, nm, nt))
    op = DistributedBlockToeplitz(ProcessGrid(comm), cp.asarray(K), chunks=(2, 3), min_chunk=1,
                                  transport="nccl")
    assert op.transport.name == "nccl" and op.blocks == (2, 3)
    op.transport = t  # every collective through NCCL
    ref, F = BlockToeplitz(K), dense_btt(K)
    M, D = rng.standard_normal((3, nm, nt)), rng.standard_normal((2, nd, nt))
    Y = cp.asnumpy(op.matmat(cp.asarray(M)))
    assert Y.dtype == np.float64 and Y.shape == (3, nd, nt)
    assert np.abs(Y - ref.matmat(M)).max() <= 1e-12 * np.abs(Y).max()
    dense = (M.reshape(3, -1) @ F.T).reshape(Y.shape)
    assert np.abs(Y - dense).max() <= 1e-12 * np.abs(dense).max()
    Z = cp.asnumpy(op.rmatmat(cp.asarray(D)))
    assert np.abs(Z - ref.rmatmat(D)).max() <= 1e-12 * np.abs(Z).max()
    N = cp.asnumpy(op.normal(2.0).matmat(cp.asarray(M)))
    assert np.abs(N - ref.normal(2.0).matmat(M)).max() <= 1e-12 * np.abs(N).max()
