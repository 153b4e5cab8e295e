"""Run under mpiexec -n N: the distributed operator against the single-process one.

Every grid of N ranks that fits (and the automatic one), with sizes not divisible by the
grid, the three kernel arguments, one vector and batches, overlap on and off, the normal
operator with each kind of weight, a float32-wire precision, dot/norm, distributed CG
against serial CG, and pylops-mpi's CG when it is installed. Prints "OK <n> <cases>" on rank 0;
any failure raises (and so ends the run with a nonzero status).

Arguments: none, CPU operators (NumPy); ``gpu``, CuPy operators with the automatic transport
(ranks sharing a GPU must get MPI, host-staged unless the MPI library is GPU-aware); ``nccl``,
CuPy operators on NCCL (a GPU per rank). Without CuPy or a GPU, ``gpu`` and ``nccl`` print
"SKIP <reason>" on rank 0 and end with status 0.
"""

import os
import sys
import tempfile
import time
import warnings

import numpy as np
from mpi4py import MPI

from fftmatvec import BlockToeplitz, DistributedBlockToeplitz, ProcessGrid, backend, io
from fftmatvec.distributed import block_partition, cg
from fftmatvec.distributed.comm import MPITransport, shared_device

comm = MPI.COMM_WORLD
# "gpu": CuPy operators (ranks share or split the visible GPUs), the automatic transport;
# "nccl": CuPy operators on NCCL
GPU = "gpu" in sys.argv[1:] or "nccl" in sys.argv[1:]
TRANSPORT = "nccl" if "nccl" in sys.argv[1:] else None
if GPU and backend.gpu_available():
    import cupy

    dev, host = cupy.asarray, cupy.asnumpy
else:
    dev = host = np.asarray
DEVICE = "gpu" if GPU else "cpu"
size, rank = comm.Get_size(), comm.Get_rank()
TOL = 1e-12

cases = 0


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def close(a, b, what, tol=TOL):
    global cases
    e = rel(a, b)
    if not e <= tol:
        raise AssertionError(f"rank {rank}: {what}: relative error {e:.3e} > {tol:g}")
    cases += 1


def grids(n):
    out = [(r, n // r) for r in range(1, n + 1) if n % r == 0]
    return out + [(None, None)]


def fresh(seed, *shape):
    # the same random numbers on every rank
    return np.random.default_rng(seed).standard_normal(shape)


def device_key():
    import socket

    d = cupy.cuda.Device()
    return (socket.gethostname(), cupy.cuda.runtime.deviceGetPCIBusId(d.id))


def check_transport(op):
    """The transport the operator got: MPI on the CPU; on ranks sharing a GPU, MPI (NCCL
    refuses them) with the reason naming the ranks; NCCL where asked for."""
    global cases
    t = op.transport
    if not GPU:
        assert t.name == "mpi" and t.staging == "host", (t.name, t.staging)
    elif TRANSPORT == "nccl":
        assert t.name == "nccl", t.name
    elif shared_device(comm.allgather(device_key())):
        assert t.name == "mpi" and "share GPU" in t.reason, (t.name, t.reason)
    if GPU and t.name == "mpi":  # host-staged: the helper thread where MPI's level allows it
        want = t.staging == "host" and MPI.Query_thread() >= MPI.THREAD_SERIALIZED
        assert t.helper == want, (t.staging, t.helper, MPI.Query_thread(), t.reason)
    cases += 1


def check_operator(op, ref, seed, tol=TOL):
    check_transport(op)
    nd, nm, nt = ref.nd, ref.nm, ref.nt
    m, d = fresh(seed, nm, nt), fresh(seed + 1, nd, nt)
    M, D = fresh(seed + 2, 5, nm, nt), fresh(seed + 3, 3, nd, nt)
    tag = f"{op.grid.rows}x{op.grid.cols} {op.precision} overlap={op.overlap}"
    y = op.matvec(op.distribute(dev(m), "param"))
    assert y.shape == op.local_shape("obs") and y.dtype == op.dtype, (y.shape, y.dtype)
    close(host(op.collect(y, "obs")), ref.matvec(m), f"forward {tag}", tol)
    yf = op.matvec(op.distribute(dev(m.reshape(-1)), "param"))  # flat slices
    assert yf.ndim == 1
    close(host(op.collect(yf, "obs")), ref.matvec(m).reshape(-1), f"forward flat {tag}", tol)
    z = op.rmatvec(op.distribute(dev(d), "obs"))
    assert z.shape == op.local_shape("param") and z.dtype == op.dtype
    close(host(op.collect(z, "param")), ref.rmatvec(d), f"adjoint {tag}", tol)
    Y = op.matmat(op.distribute(dev(M), "param"))
    assert Y.shape == (5,) + op.local_shape("obs")
    close(host(op.collect(Y, "obs")), ref.matmat(M), f"matmat {tag}", tol)
    Z = op.rmatmat(op.distribute(dev(D), "obs"))
    close(host(op.collect(Z, "param")), ref.rmatmat(D), f"rmatmat {tag}", tol)
    # adjoint (dot) test with the global inner products
    lhs = op.dot(op.distribute(dev(d), "obs"), y)
    rhs = op.dot(z, op.distribute(dev(m), "param"))
    close(lhs, rhs, f"dot test {tag}", 1e-10 if tol <= TOL else 10 * tol)
    close(op.norm(y), np.linalg.norm(ref.matvec(m)), f"norm {tag}", tol)
    # the normal operator, each kind of weight
    w = np.abs(fresh(seed + 4, nd, nt)) + 0.5
    a, b = op.local_range("obs")
    for weight, wref in ((None, None), (2.5, 2.5), (dev(w), w), (dev(w[a:b]), w)):
        nrm = op.normal(weight)
        got = host(op.collect(nrm.matmat(op.distribute(dev(M), "param")), "param"))
        close(got, ref.normal(wref).matmat(M), f"normal {tag}", 1e2 * tol if tol > TOL else tol)
        got1 = host(op.collect(nrm.matvec(op.distribute(dev(m), "param")), "param"))
        close(got1, ref.normal(wref).matvec(m), f"normal one {tag}",
              1e2 * tol if tol > TOL else tol)


def check_blocks(op, K, ref, seed, chunks, tol=TOL):
    """The block pipeline: the blocks it cut (at most ``chunks`` a cut axis and ``n //
    min_chunk`` for ``n`` rows, no more than the largest slice, none on an axis whose
    communicator has one rank), their Khat together that of the whole block, and the
    products (one vector, batches, both directions, the normal operator) against ``ref``."""
    pr, pc = op.grid.shape
    pair = isinstance(chunks, tuple)  # (sensor, param) chunks: both axes cut, whatever the grid
    cs, cp = chunks if pair else (chunks, chunks)

    def most(counts, n, cut):
        return min(max(counts), max(1, min(n, sum(counts) // op.min_chunk))) if cut else 1

    want = (most(op._obs_counts, cs, pc > 1 or pair), most(op._param_counts, cp, pr > 1 or pair))
    assert op.blocks == want, (op.grid.shape, chunks, op.blocks, want)
    (r0, r1), (c0, c1) = op.rows, op.cols
    local = op.local_operator  # built from the blocks' kernels where the block is cut
    assert op.khat_nbytes == local.khat_nbytes, (op.khat_nbytes, local.khat_nbytes)
    nd, nm, nt = ref.nd, ref.nm, ref.nt
    m, d = fresh(seed, nm, nt), fresh(seed + 1, nd, nt)
    M, D = fresh(seed + 2, 3, nm, nt), fresh(seed + 3, 2, nd, nt)
    close(host(local.matvec(dev(m[c0:c1]))),
          BlockToeplitz(K[r0:r1, c0:c1], op.precision.letters).matvec(m[c0:c1]),
          "local operator of the blocks", tol)
    tag = f"{pr}x{pc} blocks={op.blocks} chunks={chunks} {op.precision}"
    y = op.matvec(op.distribute(dev(m), "param"))
    assert y.shape == op.local_shape("obs") and y.dtype == op.dtype, (y.shape, y.dtype)
    close(host(op.collect(y, "obs")), ref.matvec(m), f"forward {tag}", tol)
    z = op.rmatvec(op.distribute(dev(d), "obs"))
    assert z.shape == op.local_shape("param") and z.dtype == op.dtype
    close(host(op.collect(z, "param")), ref.rmatvec(d), f"adjoint {tag}", tol)
    Y = op.matmat(op.distribute(dev(M), "param"))
    close(host(op.collect(Y, "obs")), ref.matmat(M), f"matmat {tag}", tol)
    Z = op.rmatmat(op.distribute(dev(D), "obs"))
    close(host(op.collect(Z, "param")), ref.rmatmat(D), f"rmatmat {tag}", tol)
    lhs = op.dot(op.distribute(dev(d), "obs"), y)
    close(lhs, op.dot(z, op.distribute(dev(m), "param")), f"dot test {tag}",
          1e-10 if tol <= TOL else 10 * tol)
    w = np.abs(fresh(seed + 4, nd, nt)) + 0.5
    nrm = op.normal(dev(w))
    ntol = 1e2 * tol if tol > TOL else tol
    close(host(op.collect(nrm.matmat(op.distribute(dev(M), "param")), "param")),
          ref.normal(w).matmat(M), f"normal {tag}", ntol)
    close(host(op.collect(nrm.matvec(op.distribute(dev(m), "param")), "param")),
          ref.normal(w).matvec(m), f"normal one {tag}", ntol)


def check_block_pipeline():
    """Uneven chunks, ranks whose slice is smaller than the number of chunks (one row, or
    none: (9, 2) on 4 x 1 gives param slices 1, 1, 0, 0), every grid, chunks 1, 2, 3, 7, and
    the pair (3, 2) that cuts both axes on any grid (on one rank too)."""
    for nd, nm, nt in ((11, 13, 5), (9, 2, 5), (2, 9, 5)):
        K = fresh(nd * nm, nd, nm, nt)
        ref = BlockToeplitz(K)
        for rows, cols in grids(size)[:-1]:
            if rows > nd or cols > nm:
                continue
            g = ProcessGrid(comm, rows, cols)
            for chunks in (1, 2, 3, 7, (3, 2)):
                op = DistributedBlockToeplitz(g, dev(K), chunks=chunks, min_chunk=1,
                                              transport=TRANSPORT)
                check_blocks(op, K, ref, seed=len(str(chunks)), chunks=chunks)
    # a float32 wire, and a min_chunk that bounds the chunks (13 // 4: at most 3 an axis)
    K = fresh(5, 13, 13, 6)
    for prec, tol in (("sddds", 2e-5), ("ddddd", TOL)):
        op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), prec, chunks=7, min_chunk=4,
                                      transport=TRANSPORT)
        assert max(op.blocks) <= 3, op.blocks
        check_blocks(op, K, BlockToeplitz(K, prec), seed=6, chunks=7, tol=tol)


def check_columns_in_different_units():
    """`h` with parameter columns 1e12 apart and inputs balancing them: every grid, the block
    pipeline cut or not, against the float64 product (each block stores its own columns'
    scales, so its products do not share the chunk's input spectrum)."""
    col = np.array([1.0, 1e-12, 1.0, 1e-12, 1e-6, 1.0, 1e-3])
    K = fresh(41, 6, col.size, 9) * col[None, :, None]
    ref = BlockToeplitz(K)
    m = fresh(42, col.size, 9) / col[:, None]
    d = fresh(43, 6, 9)
    for rows, cols in grids(size):
        for chunks in (1, 3):
            op = DistributedBlockToeplitz(ProcessGrid(comm, rows, cols), dev(K), "ddhdd",
                                          chunks=chunks, min_chunk=1, transport=TRANSPORT)
            tag = f"columns 1e12 apart {op.grid.shape} blocks={op.blocks}"
            y = host(op.collect(op.matvec(op.distribute(dev(m), "param")), "obs"))
            close(y, ref.matvec(m), f"forward {tag}", 2e-3)
            z = host(op.collect(op.rmatvec(op.distribute(dev(d), "obs")), "param"))
            close(z / col[:, None], ref.rmatvec(d) / col[:, None], f"adjoint {tag}", 2e-3)


def check_automatic_chunks():
    """The cost model's cut (no ``chunks``), on sizes where the ranks' own best cuts differ
    (their blocks differ by a row): every rank takes the same, so the collectives of a row and
    of a column match, and the products agree with the single-process operator."""
    for nd, nm, nt in ((50, 255, 32), (99, 400, 32)):
        K = fresh(nd + nm, nd, nm, nt)
        ref = BlockToeplitz(K)
        M = fresh(nd, 8, nm, nt)
        for rows, cols in grids(size)[:-1]:
            op = DistributedBlockToeplitz(ProcessGrid(comm, rows, cols), dev(K), batch=8,
                                          min_chunk=1, transport=TRANSPORT)
            seen = comm.allgather(op.blocks)
            assert len(set(seen)) == 1, seen
            tag = f"automatic chunks {op.grid.shape} blocks={op.blocks}"
            Y = op.matmat(op.distribute(dev(M), "param"))
            close(host(op.collect(Y, "obs")), ref.matmat(M), f"matmat {tag}")
            N = op.normal(2.0).matmat(op.distribute(dev(M), "param"))
            close(host(op.collect(N, "param")), ref.normal(2.0).matmat(M), f"normal {tag}")


def check_inputs_far_from_one():
    """Inputs far outside float32's range in a reduced precision: the input chunks of a half
    share one power of two (agreed across the ranks before the first arrives), the normal
    operator's second half one from its bound; against the single-process operator, every
    grid, the block pipeline cut or not."""
    nd, nm, nt = 7, 9, 6
    K = fresh(81, nd, nm, nt)
    for prec, tol in (("sssss", 2e-5), ("ddddd", TOL)):
        ref = BlockToeplitz(K, prec)
        scale = 2.0 ** (140 if prec == "sssss" else 900)
        m, d = fresh(82, 3, nm, nt) * scale, fresh(83, 2, nd, nt) / scale
        w = np.abs(fresh(84, nd, nt)) + 0.5
        for (rows, cols), chunks, first in ((g, c, f) for g in grids(size)[:-1]
                                            for c in (1, 3) for f in (True, False)):
            op = DistributedBlockToeplitz(ProcessGrid(comm, rows, cols), dev(K), prec,
                                          chunks=chunks, min_chunk=1, transport=TRANSPORT)
            # the magnitude agreed before the product (CPU), or after it and the product run
            # again, scaled, where it lies outside the window (GPU)
            op._measure_first = first
            tag = (f"inputs far from one {prec} {op.grid.shape} blocks={op.blocks} "
                   f"measured {'first' if first else 'after'}")
            with np.errstate(over="ignore", invalid="ignore"):  # the unscaled run's overflow
                y = host(op.collect(op.matmat(op.distribute(dev(m), "param")), "obs"))
                z = host(op.collect(op.rmatmat(op.distribute(dev(d), "obs")), "param"))
                n = op.normal(dev(w)).matmat(op.distribute(dev(m), "param"))
            close(y, ref.matmat(m), f"forward {tag}", tol)
            close(z, ref.rmatmat(d), f"adjoint {tag}", tol)
            close(host(op.collect(n, "param")), ref.normal(w).matmat(m), f"normal {tag}",
                  1e2 * tol if tol > TOL else tol)
            # inputs inside the window: one product each, never run again
            runs = []
            run = op._run
            op._run = lambda *a, **kw: runs.append(1) or run(*a, **kw)
            y = host(op.collect(op.matmat(op.distribute(dev(m / scale), "param")), "obs"))
            close(y, ref.matmat(m / scale), f"forward in the window {tag}", tol)
            assert len(runs) == 1, runs
            del op._run


class _Later:
    """A stand-in for a device event that passes ``seconds`` from now."""

    def __init__(self, seconds):
        self.at = time.perf_counter() + seconds

    @property
    def done(self):
        return time.perf_counter() >= self.at

    def synchronize(self):
        time.sleep(max(0.0, self.at - time.perf_counter()))


def check_progress():
    """While a send waits for the device, the collectives in flight move: a large all-gather
    started before the wait has completed when the wait ends, without a Wait."""
    global cases
    t = MPITransport(np)
    n = 1 << 19
    a = np.full((n, 4), float(rank))  # 16 MiB a rank: far past any eager limit
    pend = t.allgatherv(comm, a, [n] * size, np.float64)
    # waits of a second, up to 30 (ranks sharing few cores under load move slowly), no Wait
    for _ in range(30):
        t.until(_Later(1.0))
        if t.in_flight == 0:
            break
    assert t.in_flight == 0, "the all-gather did not progress during 30 waits of a second"
    got = pend.wait()
    assert got.shape == (size * n, 4) and np.array_equal(got[::n, 0], np.arange(size))
    cases += 1


def check_helper_thread():
    """The collectives handed to the helper thread (host-staged MPI's on a GPU; forced here
    on NumPy buffers): every grid and cut agrees with the single-process operator in both
    directions, batches and the normal operator, and closing the operator ends the thread."""
    import threading

    global cases
    nd, nm, nt = 9, 11, 6
    K = fresh(31, nd, nm, nt)
    ref = BlockToeplitz(K)
    for rows, cols in grids(size):
        g = ProcessGrid(comm, rows, cols)
        for chunks in (1, 3, (2, 3)):
            op = DistributedBlockToeplitz(g, dev(K), chunks=chunks, min_chunk=1)
            op.transport = MPITransport(np, helper=True, reason="the helper thread, forced")
            check_blocks(op, K, ref, seed=40, chunks=chunks)
            assert op.transport.helper and op.transport.in_flight == 0
            op.close()
    left = [t.name for t in threading.enumerate() if t.name.startswith("fftmatvec-mpi")]
    assert not left, left
    cases += 1


def layouts(n):
    """Every ``(replicas, rows, cols)`` with ``replicas * rows * cols == n``."""
    return [(R, r, n // R // r) for R in range(1, n + 1) if n % R == 0
            for r in range(1, n // R + 1) if (n // R) % r == 0]


def check_replicas():
    """Every layout of R replicas of a pr x pc grid: one vector (held by every replica) and
    batches split across the replicas, sizes not divisible by R and smaller than R (replicas
    with no vector), both directions, the normal operator, dot and norm of batches, collect
    the converse of distribute; all against the single-process operator in all-d."""
    global cases
    nd, nm, nt = 5, 7, 6
    K = fresh(57, nd, nm, nt)
    ref = BlockToeplitz(K)
    w = np.abs(fresh(58, nd, nt)) + 0.5
    for R, rows, cols in layouts(size):
        g = ProcessGrid(comm, rows, cols, replicas=R)
        for chunks in (1, 2, 3):
            op = DistributedBlockToeplitz(g, dev(K), chunks=chunks, min_chunk=1,
                                          transport=TRANSPORT)
            assert (op.grid.replicas, op.grid.shape) == (R, (rows, cols)), op.grid
            assert op.grid.replica == rank // (rows * cols)
            tag = f"{R} x {rows}x{cols} chunks={chunks}"
            m, d = fresh(60, nm, nt), fresh(61, nd, nt)
            y = op.matvec(op.distribute(dev(m), "param"))
            assert y.shape == op.local_shape("obs") and y.dtype == op.dtype
            close(host(op.collect(y, "obs")), ref.matvec(m), f"forward {tag}")
            z = op.rmatvec(op.distribute(dev(d), "obs"))
            close(host(op.collect(z, "param")), ref.rmatvec(d), f"adjoint {tag}")
            for k in sorted({1, max(R - 1, 1), R + 1, 2 * R + 1}):
                M, D = fresh(62 + k, k, nm, nt), fresh(63 + k, k, nd, nt)
                Ml = op.distribute(dev(M), "param")
                k0, k1 = block_partition(k, R)[op.grid.replica]
                assert Ml.shape == (k1 - k0,) + op.local_shape("param"), (Ml.shape, k, R)
                assert np.array_equal(host(op.collect(Ml, "param")), M)  # distribute's converse
                Y = op.matmat(Ml)
                assert Y.shape == (k1 - k0,) + op.local_shape("obs") and Y.dtype == op.dtype
                close(host(op.collect(Y, "obs")), ref.matmat(M), f"matmat k={k} {tag}")
                Z = op.rmatmat(op.distribute(dev(D), "obs"))
                close(host(op.collect(Z, "param")), ref.rmatmat(D), f"rmatmat k={k} {tag}")
                N = op.normal(dev(w)).matmat(Ml)
                close(host(op.collect(N, "param")), ref.normal(w).matmat(M),
                      f"normal k={k} {tag}")
                # dot of batches: the sum over their vectors, every replica its share
                lhs = op.dot(op.distribute(dev(D), "obs"), op.matmat(Ml))
                close(lhs, float(np.vdot(D, ref.matmat(M))), f"dot of batches k={k} {tag}", 1e-10)
            close(op.norm(y), np.linalg.norm(ref.matvec(m)), f"norm {tag}")
            # distributed CG on single vectors: every replica solves the same system
            b = ref.normal(w).matvec(fresh(64, nm, nt))
            x, info = cg(op.normal(dev(w)), op.distribute(dev(b), "param"), rtol=1e-9,
                         maxiter=500)
            assert info == 0, info
            x_ser, _ = cg(ref.normal(w), b, rtol=1e-9, maxiter=500)
            close(host(op.collect(x, "param")), x_ser, f"cg {tag}", 1e-6)
            cases += 1
    # the automatic layout: one vector gives one replica; the cost model's choice for a batch
    op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), transport=TRANSPORT)
    assert op.grid.replicas == 1, op.grid
    op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), transport=TRANSPORT, batch=64)
    from fftmatvec.distributed import choose_layout

    want = choose_layout(size, nd, nm, nt, "ddddd", 64)
    assert (op.grid.replicas,) + op.grid.shape == want, (op.grid, want)
    M = fresh(70, 64, nm, nt)
    close(host(op.collect(op.matmat(op.distribute(dev(M), "param")), "obs")), ref.matmat(M),
          f"matmat of the automatic layout {want}")


def main():
    global cases
    if GPU and not backend.gpu_available():
        if rank == 0:
            print("SKIP no GPU (CuPy missing or no device)")
        return
    if size > 1 and not GPU:
        check_progress()
        check_helper_thread()
    check_block_pipeline()
    check_columns_in_different_units()
    check_inputs_far_from_one()
    check_automatic_chunks()
    check_replicas()
    tmp = comm.bcast(tempfile.mkdtemp() if rank == 0 else None)
    for nd, nm, nt in ((5, 7, 6), (6, 4, 9)):
        K = fresh(10 * nd + nm, nd, nm, nt)
        path = os.path.join(tmp, f"k{nd}{nm}.h5")
        if rank == 0:
            io.save_matrix(path, K)
        comm.Barrier()
        ref = BlockToeplitz(K)
        for rows, cols in grids(size):
            if rows is not None and (rows > nd or cols > nm):
                continue  # the test of a grid that does not fit is in check_errors.py
            g = ProcessGrid(comm, rows, cols)
            op = DistributedBlockToeplitz(g, dev(K), chunks=2, transport=TRANSPORT)
            check_operator(op, ref, seed=nd)
        # the automatic grid: the other kernel arguments, and compute-then-communicate
        g = ProcessGrid(comm)
        for i, kern in enumerate((path, lambda rs, cs: K[rs, cs])):
            shape = K.shape if callable(kern) else None
            check_operator(DistributedBlockToeplitz(g, kern, shape=shape, device=DEVICE,
                                                    transport=TRANSPORT), ref, seed=nd + i + 1)
        check_operator(DistributedBlockToeplitz(g, dev(K), overlap=False, transport=TRANSPORT),
                       ref, seed=nd + 3)
        # float32 on the wire (stages 1 and 5 's'): against the serial operator in that precision
        for prec in ("sddds",) if nd == 5 else ("ddssd",):
            op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), prec, transport=TRANSPORT)
            check_operator(op, BlockToeplitz(K, prec), seed=3, tol=2e-5)
        # a kernel far outside [2**-32, 2**32): the local products scale by powers of two
        # as the single-process one does (its stored Khat is scaled; the outputs undo it)
        big = K * 2.0**40
        op = DistributedBlockToeplitz(ProcessGrid(comm), dev(big), "sddds", transport=TRANSPORT)
        check_operator(op, BlockToeplitz(big, "sddds"), seed=5, tol=2e-5)
        # precision="auto": one choice on rank 0 for every rank (here the error model: no
        # table for a CPU), its products those of the single-process operator in that precision
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), "auto", rtol=1e-3,
                                          transport=TRANSPORT)
        letters = comm.allgather(op.precision.letters)
        assert len(set(letters)) == 1 and letters[0] != "ddddd", letters
        # the CPU has no table; a GPU with a shipped table (tuning/) takes its entry
        assert op.precision_source == "model" or (GPU and ".yaml:" in op.precision_source), \
            op.precision_source
        check_operator(op, BlockToeplitz(K, letters[0]), seed=4, tol=1e-5)
        # CG: the same lines on the grid and on one process
        op = DistributedBlockToeplitz(ProcessGrid(comm), dev(K), transport=TRANSPORT)
        w = np.abs(fresh(7, nd, nt)) + 0.5
        m_true = fresh(8, nm, nt)
        b = ref.normal(w).matvec(m_true)
        steps = {"ser": 0, "dis": 0}

        def count(key):
            def step(x):
                steps[key] += 1
            return step
        with warnings.catch_warnings():  # 6 iterations do not reach rtol=1e-30: a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            x_ser, info_ser = cg(ref.normal(w), b, rtol=1e-30, maxiter=6, callback=count("ser"))
            x_dis, info_dis = cg(op.normal(dev(w)), op.distribute(dev(b), "param"), rtol=1e-30,
                                 maxiter=6, callback=count("dis"))
        close(host(op.collect(x_dis, "param")), x_ser, "distributed CG vs serial", 1e-10)
        assert info_dis == info_ser == 6 and steps == {"ser": 6, "dis": 6}, (info_dis, steps)
        # converged: info 0 on every rank, and the residual within rtol
        x_c, info_c = cg(op.normal(dev(w)), op.distribute(dev(b), "param"), rtol=1e-6,
                         maxiter=500)
        assert comm.allgather(info_c) == [0] * size, info_c
        res = op.normal(dev(w)).matvec(x_c) - op.distribute(dev(b), "param")
        assert op.norm(res) <= 1e-6 * np.linalg.norm(b)
        # without maxiter: every rank stops at the same iteration (the global size), as the
        # serial solve does, though the ranks' slices differ in size
        steps.update(ser=0, dis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _, full_ser = cg(ref.normal(w), b, rtol=1e-30, callback=count("ser"))
            _, full_dis = cg(op.normal(dev(w)), op.distribute(dev(b), "param"), rtol=1e-30,
                             callback=count("dis"))
        assert full_dis == full_ser and steps["ser"] == steps["dis"], (full_dis, steps)
        assert len(set(comm.allgather(steps["dis"]))) == 1
        cases += 1
        try:
            import pylops_mpi
        except ImportError:
            pylops_mpi = None
        if pylops_mpi is not None and not GPU:
            from fftmatvec.distributed.pylops import distributed_array, to_global

            A = op.normal(dev(w)).as_pylops_mpi()
            bd = distributed_array(op, op.distribute(dev(b), "param"))
            x0 = distributed_array(op, np.zeros(op.local_shape("param")))
            xp_, *_ = pylops_mpi.cg(A, bd, x0=x0, niter=6, tol=0.0)
            close(to_global(op, xp_), x_ser, "pylops-mpi cg vs serial CG", 1e-10)
            F = op.as_pylops_mpi()
            md = distributed_array(op, op.distribute(dev(fresh(9, nm, nt)), "param"))
            yd = F.matvec(md)
            close(to_global(op, yd, "obs"), ref.matvec(fresh(9, nm, nt)), "pylops-mpi matvec")
            close(np.asarray(md.asarray()).reshape(nm, nt), fresh(9, nm, nt),
                  "pylops-mpi param order")
    comm.Barrier()
    if rank == 0:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        print(f"OK {size} {cases}")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
