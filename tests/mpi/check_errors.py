"""Run under mpiexec -n N (N >= 2): a failure on one rank becomes an exception on every rank.

With the argument ``uncaught`` the last rank passes a bad vector and nobody catches the
error: every rank must raise, so the run ends with a nonzero status instead of hanging
(``uncaught distribute``: the bad vector is the global one given to ``distribute``, as in the
README's example).
Otherwise prints "OK <n> <cases>" on rank 0. With the argument ``gpu`` the operators and
vectors are CuPy ones (the ranks sharing or splitting the visible GPUs), and NCCL asked for on
ranks sharing a GPU must fail on every rank; without CuPy or a GPU it prints "SKIP <reason>".
"""

import os
import sys
import tempfile
import traceback

import numpy as np
from mpi4py import MPI

from fftmatvec import DistributedBlockToeplitz, FFTMatvecValueError, ProcessGrid, backend, io
from fftmatvec.distributed import FFTMatvecDistributedError

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
last = size - 1
cases = 0
K = np.random.default_rng(0).standard_normal((5, 7, 4))
GPU = "gpu" in sys.argv[1:]
if GPU and backend.gpu_available():
    import cupy

    dev, host = cupy.asarray, cupy.asnumpy
else:
    dev = host = np.asarray
DEVICE = "gpu" if GPU else "cpu"


def expect(fn, what, ranks=(last,), exc=FFTMatvecDistributedError, words=()):
    """``fn()`` must raise ``exc`` on this rank, naming the failing ranks and ``words``."""
    global cases
    try:
        fn()
    except exc as e:
        msg = str(e)
        if exc is FFTMatvecDistributedError:
            assert e.ranks == list(ranks), (what, e.ranks, msg)
            for q in ranks:
                assert f"rank {q}" in msg, (what, msg)
        for w in words:
            assert w in msg, (what, w, msg)
    else:
        raise AssertionError(f"rank {rank}: {what}: no error raised")
    comm.Barrier()  # every rank got here: nobody hangs
    cases += 1


def main():
    op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K))
    m = op.distribute(dev(np.ones((7, 4))), "param")
    good = host(op.collect(op.matvec(m), "obs"))

    bad = dev(np.ones((m.shape[0] + 1, 4))) if rank == last else m
    expect(lambda: op.matvec(bad), "wrong shape", words=("must have shape",))
    nan = m.copy()
    if rank == last:
        nan.reshape(-1)[0] = np.nan
    expect(lambda: op.matvec(nan), "NaN input", words=("NaN",))
    # the same where the ranks agree on the magnitude after the product (as on a GPU)
    op._measure_first = False
    expect(lambda: op.matvec(nan), "NaN input, magnitude agreed after", words=("NaN",))
    expect(lambda: op.normal().matvec(nan), "NaN input to the normal operator, after",
           words=("NaN",))
    assert np.array_equal(host(op.collect(op.matvec(m), "obs")), good)
    op._measure_first = True
    # every method all ranks call raises on every rank: distribute, collect, dot, norm
    glob = dev(np.ones((7, 3) if rank == last else (7, 4)))
    expect(lambda: op.distribute(glob, "param"), "distribute's wrong shape",
           words=("must have shape",))
    expect(lambda: op.distribute(dev(np.ones((7, 4))), "sensor" if rank == last else "param"),
           "distribute's bad space", words=("space must be",))
    expect(lambda: op.distribute([[1.0] * 4] * 7 if rank == last else dev(np.ones((7, 4)))),
           "distribute's list", words=("v",))
    expect(lambda: op.collect(m, "sensor" if rank == last else "param"), "collect's bad space",
           words=("space must be",))
    short = m[:-1] if rank == last and m.shape[0] else m
    other = m[:, :-1] if rank == last else m
    expect(lambda: op.dot(m, other), "dot of different shapes", words=("dot",))
    expect(lambda: op.norm(short[:, :-1] if rank == last else m), "norm of a wrong slice",
           words=("norm",))
    # distributed CG: a non-square operator everywhere, a bad rtol on one rank
    from fftmatvec.distributed import cg

    expect(lambda: cg(op, m), "cg of a non-square operator", exc=FFTMatvecDistributedError,
           ranks=list(range(size)), words=("must be square",))
    expect(lambda: cg(op.normal(), m, rtol="1e-5" if rank == last else 1e-5),
           "cg's rtol on one rank", words=("rtol must be a real number",))
    # settings that differ across ranks would stop (or start) the ranks apart
    for kw in ({"rtol": 1e-3 if rank == last else 1e-6}, {"maxiter": 2 if rank == last else 3},
               {"x0": m if rank == last else None}):
        expect(lambda: cg(op.normal(), m, **kw), f"cg's {next(iter(kw))} differing", ranks=[],
               words=("different rtol, maxiter or x0",))
    M = dev(np.ones((3 if rank == last else 2,) + op.local_shape("param")))
    expect(lambda: op.matmat(M), "batch sizes", ranks=[], words=("different sizes",))
    expect(lambda: op.normal(-1.0 if rank == last else 1.0), "bad weight", words=("weight",))
    # the weight as this rank's slice on one rank, the global one on the others: their
    # row's gather of the slices would wait for ranks that never join it
    a, b = op.local_range("obs")
    w_all = np.ones((5, 4))
    expect(lambda: op.normal(dev(w_all[a:b] if rank == last else w_all)), "mixed weights",
           ranks=[], exc=FFTMatvecDistributedError, words=("weight", "every rank"))

    def kern(rs, cs):
        block = K[rs, cs]
        return block[:, :, :-1] if rank == last else block
    expect(lambda: DistributedBlockToeplitz(ProcessGrid(comm), kern, shape=K.shape,
                                            device=DEVICE),
           "callable's wrong block", words=("callable returned",))
    other = dev(K + (1.0 if rank == last else 0.0))
    expect(lambda: DistributedBlockToeplitz(ProcessGrid(comm), other), "different kernels",
           ranks=[], words=("different kernels",))
    tmp = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)
    path = os.path.join(tmp, "k.h5")
    if rank == 0:
        io.save_matrix(path, K)
    comm.Barrier()
    missing = path if rank != last else os.path.join(tmp, "missing.h5")
    expect(lambda: DistributedBlockToeplitz(ProcessGrid(comm), missing, device=DEVICE),
           "missing file")
    # a grid that does not fit: the same clear error on every rank, before any block is read
    expect(lambda: DistributedBlockToeplitz(ProcessGrid(comm, size, 1),
                                            dev(np.ones((size - 1, 3, 4)))),
           "grid too tall", exc=FFTMatvecValueError, words=("does not fit",))
    expect(lambda: ProcessGrid(comm, size if rank == last else None, None), "different grids",
           exc=FFTMatvecValueError, words=("different grids",))
    expect(lambda: DistributedBlockToeplitz(ProcessGrid(comm), dev(K),
                                            transport="mpi" if rank == last else None),
           "different transports", ranks=[], words=("different kernels or settings",))
    check_replicas()
    if GPU:
        check_nccl_on_a_shared_gpu()
    # a failure in the middle of a product (after its collectives started)
    op2 = DistributedBlockToeplitz(ProcessGrid(comm), dev(K))
    if rank == last:
        def boom(*args):
            raise RuntimeError("boom in the local product")
        op2._stage3 = boom
    Ml = dev(np.ones((3,) + op2.local_shape("param")))
    expect(lambda: op2.matmat(Ml), "mid-product failure", words=("boom",))
    expect(lambda: op2.normal().matmat(Ml), "mid-normal failure", words=("boom",))
    # the block pipeline: a failure in one block's product on one rank, the other blocks and
    # ranks going on (the rank's collectives get zeros), then the same product without it
    op3 = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), chunks=3, min_chunk=1)
    m3 = op3.distribute(dev(np.ones((7, 4))), "param")
    good3 = host(op3.collect(op3.matmat(m3[None]), "obs"))
    if rank == last:
        bad_block, stage3 = (op3.blocks[0] - 1, op3.blocks[1] - 1), op3._stage3

        def one_block_fails(xhat, yhat, i, j, adjoint, beta):
            if (i, j) == bad_block:
                raise RuntimeError("boom in one block")
            return stage3(xhat, yhat, i, j, adjoint, beta)
        op3._stage3 = one_block_fails
    for what, run in (("forward", lambda: op3.matmat(m3[None])),
                      ("adjoint", lambda: op3.rmatvec(op3.distribute(dev(np.ones((5, 4))), "obs"))),
                      ("normal", lambda: op3.normal(2.0).matvec(m3))):
        expect(run, f"one block's failure, {what}", words=("boom in one block",))
    if rank == last:
        del op3._stage3
    assert np.array_equal(host(op3.collect(op3.matmat(m3[None]), "obs")), good3)
    if not GPU:
        check_helper_thread_failure()
    # the operator still works after the errors
    again = host(op.collect(op.matvec(m), "obs"))
    assert np.array_equal(again, good)
    comm.Barrier()
    if rank == 0:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        print(f"OK {size} {cases}")


def check_helper_thread_failure():
    """The helper thread (host-staged MPI's on a GPU, forced on NumPy buffers): on the last
    rank waiting for a collective's data fails; the collective is posted with zeros, so the
    other ranks' complete, and every rank raises (no hang). The thread then goes on."""
    from fftmatvec import BlockToeplitz
    from fftmatvec.distributed.comm import MPITransport

    class Failing:
        def synchronize(self):
            raise RuntimeError("boom while staging")

    class Staging(MPITransport):
        """Sends staged as copies, whose event fails on the last rank while ``fail``."""

        fail = True

        def _send(self, a, dtype):
            send = np.array(a, dtype=dtype, order="C", copy=True)
            return send, Failing() if rank == last and self.fail else None, ()

        def _zeros(self, send):
            return lambda: send.fill(0)

    for rows, cols in ((1, size), (size, 1), (None, None)):
        op = DistributedBlockToeplitz(ProcessGrid(comm, rows, cols), dev(K), chunks=2,
                                      min_chunk=1)
        op.transport = Staging(np, helper=True)
        m = op.distribute(np.ones((7, 4)), "param")
        d = op.distribute(np.ones((5, 4)), "obs")
        for what, run in (("forward", lambda: op.matvec(m)), ("adjoint", lambda: op.rmatvec(d)),
                          ("normal", lambda: op.normal(2.0).matmat(m[None]))):
            expect(run, f"helper thread's failure, {what} on {op.grid.shape}",
                   words=("boom while staging",))
        assert op.transport.in_flight == 0
        op.transport.fail = False
        y = op.collect(op.matvec(m), "obs")
        want = BlockToeplitz(K).matvec(np.ones((7, 4)))
        assert np.abs(y - want).max() <= 1e-12 * np.abs(want).max(), "after the failure"
        op.close()


def check_replicas():
    """Replica groups: every error on one rank, in one replica, reaches every rank of every
    replica."""
    expect(lambda: ProcessGrid(comm, replicas=size + 1), "replicas not dividing the ranks",
           exc=FFTMatvecValueError, words=("does not divide",))
    expect(lambda: ProcessGrid(comm, 1, 1, replicas=size - 1 if rank == last else size),
           "different replicas", exc=FFTMatvecValueError, words=("different grids",))
    op = DistributedBlockToeplitz(ProcessGrid(comm, 1, 1, replicas=size), dev(K))
    assert op.grid.replicas == size and op.grid.replica == rank
    M = op.distribute(dev(np.ones((2 * size + 1, 7, 4))), "param")
    # a wrong slice on the last rank only (its replica alone): every replica raises
    bad = M[:, :, :-1] if rank == last else M
    expect(lambda: op.matmat(bad), "replica's wrong slice", words=("must have shape",))
    if size >= 4:  # two ranks of one replica passing different batch sizes
        op2 = DistributedBlockToeplitz(ProcessGrid(comm, 1, size // 2, replicas=2), dev(K))
        M2 = op2.distribute(dev(np.ones((5, 7, 4))), "param")
        other = M2[:-1] if rank == last else M2
        expect(lambda: op2.matmat(other), "batch sizes in a replica", ranks=[],
               words=("different sizes", "in replica 1"))
    empty = dev(np.ones((0,) + op.local_shape("param")))
    expect(lambda: op.matmat(empty), "every replica's batch empty", exc=FFTMatvecValueError,
           words=("at least one vector",))
    expect(lambda: op.collect(M[:, :-1] if rank == last else M, "param"),
           "collect of a wrong share", words=("v_local",))
    # a failure in one replica's product, after the other replicas started theirs
    if rank == last:
        def boom(*args):
            raise RuntimeError("boom in one replica")
        op._stage3 = boom
    expect(lambda: op.matmat(M), "one replica's failure", words=("boom in one replica",))
    if rank == last:
        del op._stage3
    assert op.matmat(M).shape == M.shape[:1] + op.local_shape("obs")
    try:
        import pylops_mpi  # noqa: F401
    except ImportError:
        return
    expect(lambda: op.as_pylops_mpi(), "pylops-mpi with replicas", exc=FFTMatvecValueError,
           words=("one replica",))


def check_nccl_on_a_shared_gpu():
    """transport='nccl' where two ranks share a GPU: a clear error on every rank, raised
    before any NCCL communicator is made (NCCL itself would fail with ncclInvalidUsage)."""
    import socket

    from fftmatvec.distributed.comm import shared_device

    d = cupy.cuda.Device()
    keys = comm.allgather((socket.gethostname(), cupy.cuda.runtime.deviceGetPCIBusId(d.id)))
    if not shared_device(keys):
        return
    expect(lambda: DistributedBlockToeplitz(ProcessGrid(comm), dev(K), transport="nccl"),
           "NCCL on a shared GPU", ranks=list(range(size)), words=("transport='nccl'",))


def whole_traceback(kind, value, tb):
    """``sys.excepthook`` that writes the traceback in one write: mpiexec joins the ranks'
    stderr, and a traceback printed in pieces interleaves with the other rank's mid-line."""
    os.write(2, "".join(traceback.format_exception(kind, value, tb)).encode())


def uncaught(where):
    op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K))
    if where == "distribute":  # the last rank's global vector has the wrong shape
        m = op.distribute(dev(np.ones((7, 3) if rank == last else (7, 4))), "param")
        print("not reached", flush=True)
    m = op.distribute(dev(np.ones((7, 4))), "param")
    if rank == last:
        m = m[:, :-1]
    op.matvec(m)  # raises on every rank: the run must end
    print("not reached", flush=True)


if __name__ == "__main__":
    if GPU and not backend.gpu_available():
        if rank == 0:
            print("SKIP no GPU (CuPy missing or no device)")
    elif "uncaught" in sys.argv[1:]:
        sys.excepthook = whole_traceback
        uncaught("distribute" if "distribute" in sys.argv[1:] else "matvec")
    else:
        main()
