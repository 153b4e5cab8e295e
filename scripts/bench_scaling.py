#!/usr/bin/env python
"""Distributed products: overlapped against compute-then-communicate, strong and weak scaling.

Run under MPI, e.g. ``mpiexec -n 4 python scripts/bench_scaling.py`` (CPU) or, ranks sharing
or owning GPUs, ``mpiexec -n 4 python scripts/bench_scaling.py --device gpu``. For each number
of ranks p = 1, 2, 4, ... up to the communicator's size (the first p ranks), it times:

- ``overlap``: the block pipeline (``overlap=True``): the local kernel block cut into blocks of
  sensors and parameters aligned with the collectives' slices, each input chunk's FFT once,
  stage 3 of each block into its output chunk's spectrum, each output chunk's inverse FFT once
  and its gather or reduction moving while later blocks are computed (``blocks`` gives the
  sensor x parameter chunks, the cost model's choice unless ``--chunks`` forces them;
  fftmatvec/distributed/operator.py);
- ``ctc``: the same product on the whole block, compute then communicate (``overlap=False``);
- ``compute``: the local product of this rank's whole block alone, on the same batch;
- ``comm``: the collectives alone, on buffers of the product's sizes.

``ratio`` is overlap / ctc (below 1: overlap helps; the goal is <= 0.8 where compute and comm
are of similar size) and ``hidden`` the share of the shorter of compute and comm that the
overlap hid: (compute + comm - overlap) / min(compute, comm). Strong scaling keeps the problem
fixed; weak scaling (``--weak``) grows Nm with p. Times are medians over ranks' maxima.
``helper`` says whether the MPI transport posted its collectives from its helper thread
(host-staged MPI on a GPU, where MPI's thread level allows it); ``--no-helper`` turns it off,
so that two runs show what the thread changes.

``--replicas R`` times instead one batch of ``--k`` vectors through ``matmat`` on all the
ranks, one replica against ``R`` replica groups (``ratio`` below 1: the replicas help).

With ``--emulate MODEL --grid RxC [--grid RxC ...]`` it runs on one process instead: for each
virtual grid, the rank ``(0, 0)`` of an ``R x C`` grid with ``transport="emulated"`` (its real
local block product, every collective replaced by a device copy of its bytes and a wait for the
rest of the machine model's time; fftmatvec/distributed/emulated.py), MODEL ``frontier`` or
``h100`` (or ``free``: a network of no cost, so that ``ratio`` is the chunks' own cost).
``comm`` is then the model's time of one compute-then-communicate product's collectives, and
``model`` the ratio the cost model predicts for these blocks (fftmatvec/distributed/schedule.py,
at the device bandwidth ``--bandwidth`` GB/s, measured by a copy where not given); ``choice`` is
the cost model's own sensor x parameter chunks and its predicted ratio. Strong scaling keeps
Nd x Nm; ``--weak`` keeps the local block (Nd x R by Nm x C).

The emulated runs print, for each ``--k`` (e.g. ``--k 1,8``) and grid, ``ratio`` (overlapped
/ ctc) and ``share``, the modelled communication's share of the ctc product (comm / ctc): the
target is ``ratio <= 0.8`` wherever ``share >= 1/3``.

``--chunk-cost SxP`` (repeatable) runs on one process with nothing to communicate: the
pipelined product forced into S sensor x P parameter chunks (``chunks=(S, P)`` on a grid of one
rank: every chunk's own FFT, blocks and inverse FFT, collectives of one rank) against the
whole-block product, for each ``--k``; ``ratio`` is the chunks' own cost (target: within 5 %).

``--chunks``: ``auto`` (default: the cost model's choice, as an operator makes it), ``N`` (at
most N chunks on each axis whose communicator has more than one rank) or ``SxP`` (exactly that
cut, on any grid).

Ranks sharing one GPU under CUDA MPS, host-staged MPI (the ranks' kernels then run concurrently,
as on GPUs of their own; NCCL refuses ranks sharing a device, so the automatic transport is MPI)::

    nvidia-cuda-mps-control -d                       # as root, once
    export FFTMATVEC_GPU_AWARE_MPI=0                 # host-staged MPI
    mpiexec -n 2 python scripts/bench_scaling.py --device gpu --nd 64 --nm 2048 --nt 1024 --k 1,8
    mpiexec -n 4 python scripts/bench_scaling.py --device gpu --nd 64 --nm 2048 --nt 1024 --k 1,8
    echo quit | nvidia-cuda-mps-control              # as root, at the end

The NCCL transport's calls on one GPU: ``pytest -m gpu tests/test_distributed.py -k nccl``.

Usage: mpiexec -n 4 python scripts/bench_scaling.py [--nd 64] [--nm 512] [--nt 256] [--k 8]
       [--chunks auto] [--min-chunk 16] [--precision ddddd] [--mode forward|adjoint|normal]
       [--weak] [--repeat 5] [--replicas R]
       python scripts/bench_scaling.py --emulate h100 --grid 2x2 --grid 8x8 --k 1,8 \
           [--device gpu] ...
       python scripts/bench_scaling.py --chunk-cost 2x2 --chunk-cost 4x4 --k 1,8 [--device gpu]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _timed(comm, fn, repeat: int, sync) -> float:
    """Median over repeats of the slowest rank's wall time of ``fn()``."""
    fn()  # warm-up
    sync()
    times = []
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(comm.allreduce(time.perf_counter() - t0, op=_max()))
    return float(np.median(times))


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _array_module(device):
    """``(xp, sync)``: NumPy or CuPy, and a wait for the device."""
    xp = np
    if device == "gpu":
        import cupy as xp  # noqa: F811
    sync = (lambda: xp.cuda.Device().synchronize()) if xp is not np else (lambda: None)
    return xp, sync


def _pair(comm, grid, nd, nm, nt, k, precision, mode, device, repeat, chunks, min_chunk,
          helper=True, **transport):
    """The operators overlapped and compute-then-communicate on ``grid`` (each rank makes only
    its block of a random kernel), a random local input, and three times: overlapped,
    compute-then-communicate and the local product alone (the ctc operator's whole block).
    ``helper=False``: an MPI transport without its helper thread (host-staged MPI then driven
    from the calling thread). ``transport``: further arguments of the operators (the emulated
    network's)."""
    from fftmatvec import DistributedBlockToeplitz
    from fftmatvec.distributed.comm import MPITransport

    xp, sync = _array_module(device)
    rng = np.random.default_rng(1)

    def kernel(rs, cs):  # each rank makes only its block
        r = np.random.default_rng([rs.start, cs.start])
        return r.standard_normal((rs.stop - rs.start, cs.stop - cs.start, nt)) / np.sqrt(nm)

    ops = {ov: DistributedBlockToeplitz(grid, kernel, precision, shape=(nd, nm, nt),
                                        device=device, overlap=ov, chunks=chunks,
                                        min_chunk=min_chunk, **transport)
           for ov in (True, False)}
    for o in ops.values():
        if not helper and o.transport.name == "mpi" and o.transport.helper:
            o.close()
            o.transport = MPITransport(xp, reason=o.transport.reason, helper=False)
    space = "obs" if mode == "adjoint" else "param"
    X = xp.asarray(rng.standard_normal((k,) + ops[True].local_shape(space)))
    prods = {ov: {"forward": o.matmat, "adjoint": o.rmatmat,
                  "normal": o.normal().matmat}[mode] for ov, o in ops.items()}
    t_ov = _timed(comm, lambda: prods[True](X, check_finite=False), repeat, sync)
    t_ctc = _timed(comm, lambda: prods[False](X, check_finite=False), repeat, sync)
    loc = ops[False].local_operator
    n_in = loc.nd if mode == "adjoint" else loc.nm
    Xg = xp.asarray(rng.standard_normal((k, n_in, nt)))
    local = {"forward": lambda: loc.matmat(Xg), "adjoint": lambda: loc.rmatmat(Xg),
             "normal": lambda: loc.rmatmat(loc.matmat(Xg))}[mode]
    t_comp = _timed(comm, local, repeat, sync)
    return ops, prods, X, (t_ov, t_ctc, t_comp)


def bench(comm, nd, nm, nt, k, precision, mode, device, repeat, chunks, min_chunk,
          helper=True):
    from fftmatvec import ProcessGrid

    xp, sync = _array_module(device)
    ops, _, _, (t_ov, t_ctc, t_comp) = _pair(comm, ProcessGrid(comm), nd, nm, nt, k, precision,
                                             mode, device, repeat, chunks, min_chunk, helper)
    op, loc = ops[True], ops[False].local_operator
    space = "obs" if mode == "adjoint" else "param"
    # the collectives alone, on the sizes of the product
    t, (w1, w5) = op.transport, op._wire
    g = op.grid
    nd_r, nm_c = loc.nd, loc.nm
    a_in = xp.zeros((op.local_shape(space)[0], k, nt))
    a_out = xp.zeros(((nm_c if mode != "forward" else nd_r), k, nt))
    a_mid = xp.zeros((nd_r, k, nt))

    def comm_only():
        if mode == "forward":
            t.allgatherv(g.col_comm, a_in, op._param_counts, w1).wait()
            t.reduce_scatter(g.row_comm, a_out, op._obs_counts, w5).wait()
        elif mode == "adjoint":
            t.allgatherv(g.row_comm, a_in, op._obs_counts, w1).wait()
            t.reduce_scatter(g.col_comm, a_out, op._param_counts, w5).wait()
        else:
            t.allgatherv(g.col_comm, a_in, op._param_counts, w1).wait()
            t.allreduce(g.row_comm, a_mid, w5).wait()
            t.reduce_scatter(g.col_comm, a_out, op._param_counts, w5).wait()

    t_comm = _timed(comm, comm_only, repeat, sync)
    hidden = (t_comp + t_comm - t_ov) / max(min(t_comp, t_comm), 1e-12)
    return dict(grid=f"{g.rows}x{g.cols}", blocks="x".join(map(str, op.blocks)), overlap=t_ov,
                ctc=t_ctc, compute=t_comp, comm=t_comm, ratio=t_ov / t_ctc, hidden=hidden,
                helper="on" if getattr(t, "helper", False) else "off")


def bench_replicas(comm, nd, nm, nt, k, precision, device, repeat, replicas):
    """One batch of ``k`` right-hand sides through ``matmat`` on every rank of ``comm``: one
    replica (the whole grid shares every vector) against ``replicas`` replica groups (each its
    share of the batch on its own grid, a whole ``Khat`` per group)."""
    from fftmatvec import DistributedBlockToeplitz, ProcessGrid

    xp, sync = _array_module(device)

    def kernel(rs, cs):  # each rank makes only its block
        r = np.random.default_rng([rs.start, cs.start])
        return r.standard_normal((rs.stop - rs.start, cs.stop - cs.start, nt)) / np.sqrt(nm)

    M = np.random.default_rng(2).standard_normal((k, nm, nt))
    out = {}
    for R in (1, replicas):
        op = DistributedBlockToeplitz(ProcessGrid(comm, replicas=R), kernel, precision,
                                      shape=(nd, nm, nt), device=device)
        X = xp.asarray(op.distribute(M, "param"))
        g = op.grid
        out[R] = (f"{R}x{g.rows}x{g.cols}",
                  _timed(comm, lambda: op.matmat(X, check_finite=False), repeat, sync))
    return out


def bench_chunk_cost(cut, nd, nm, nt, k, precision, mode, device, repeat, min_chunk):
    """One process, nothing to communicate: the pipelined product forced into ``cut`` = (S, P)
    chunks against the whole-block product (the same operator's code, one chunk)."""
    from mpi4py import MPI

    from fftmatvec import ProcessGrid

    comm = MPI.COMM_SELF
    ops, _, _, (t_ov, t_ctc, t_comp) = _pair(comm, ProcessGrid(comm), nd, nm, nt, k, precision,
                                             mode, device, repeat, tuple(cut), min_chunk)
    return dict(blocks="x".join(map(str, ops[True].blocks)), pipelined=t_ov, whole=t_ctc,
                local=t_comp, ratio=t_ov / t_ctc)


def main_chunk_cost(args) -> int:
    print(f"# the pipeline's own cost: one process, nothing to communicate; {args.mode}, "
          f"Nd={args.nd} Nm={args.nm} Nt={args.nt} precision={args.precision} "
          f"device={args.device}; times in ms (median of {args.repeat}); whole: the same "
          f"operator unchunked; local: BlockToeplitz alone")
    print(f"{'k':>4} {'blocks':>6} | {'pipelined':>9} {'whole':>9} {'local':>9} | {'ratio':>6}")
    for k in args.k:
        for cut in args.chunk_cost:
            r = bench_chunk_cost(cut, args.nd, args.nm, args.nt, k, args.precision, args.mode,
                                 args.device, args.repeat, args.min_chunk)
            print(f"{k:>4} {r['blocks']:>6} | {r['pipelined'] * 1e3:>9.3f} "
                  f"{r['whole'] * 1e3:>9.3f} {r['local'] * 1e3:>9.3f} | {r['ratio']:>6.3f}",
                  flush=True)
    return 0


def _ks(text: str) -> list[int]:
    try:
        ks = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k is N or N,M,... (e.g. 1,8), got {text!r}") \
            from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--k needs positive counts, got {text!r}")
    return ks


def _chunks_arg(text: str):
    """``auto`` (None: the cost model's), ``N`` or ``SxP``."""
    if text.strip().lower() == "auto":
        return None
    if "x" in text.lower():
        return _grid(text)
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--chunks is auto, N or SxP, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--chunks must be positive, got {text!r}")
    return n


def _grid(text: str) -> tuple[int, int]:
    try:
        rows, cols = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a grid is RxC (e.g. 8x8), got {text!r}") from None
    if rows < 1 or cols < 1:
        raise argparse.ArgumentTypeError(f"a grid needs positive extents, got {text!r}")
    return rows, cols


def _bandwidth(xp, sync) -> float:
    """Bytes per second of a device copy (read and write) of 256 MiB (16 MiB on the CPU)."""
    n = (256 if xp is not np else 16) * 2 ** 20 // 8
    a, b = xp.ones(n), xp.empty(n)
    b[...] = a
    sync()
    t0 = time.perf_counter()
    for _ in range(5):
        b[...] = a
    sync()
    return 5 * 2 * a.nbytes / (time.perf_counter() - t0)


def bench_emulated(network, shape, nd, nm, nt, k, precision, mode, device, repeat, chunks,
                   min_chunk, bandwidth):
    """One virtual grid ``shape``: overlapped and compute-then-communicate products of its rank
    (0, 0), the local product alone, the modelled communication, the cost model's ratio."""
    from mpi4py import MPI

    from fftmatvec import ProcessGrid
    from fftmatvec.distributed.schedule import HOST_STEP, MAX_CHUNKS, choose_chunks, predict

    _, sync = _array_module(device)
    comm = MPI.COMM_SELF
    ops, prods, X, (t_ov, t_ctc, t_comp) = _pair(
        comm, ProcessGrid(comm), nd, nm, nt, k, precision, mode, device, repeat, chunks,
        min_chunk, transport="emulated", network=network, virtual_grid=shape)
    op = ops[True]
    log = ops[False].transport.log  # the model's time of one ctc product's collectives
    del log[:]
    prods[False](X, check_finite=False)
    sync()
    t_comm = sum(e[3] for e in log)
    s, p = op.blocks
    args = (nd, nm, nt, k, precision, shape, network, bandwidth)
    host = HOST_STEP["cpu" if device == "cpu" else "gpu"]
    whole = predict(*args, 1, 1, mode, host=host)
    model = predict(*args, s, p, mode, host=host) / whole
    best = choose_chunks(*args, mode, min_chunk=min_chunk, max_chunks=MAX_CHUNKS, host=host)
    best_ratio = predict(*args, *best, mode, host=host) / whole
    # less than a microsecond communicated (one rank, the free network): nothing to hide
    hidden = ((t_comp + t_comm - t_ov) / min(t_comp, t_comm) if t_comm > 1e-6
              else float("nan"))
    return dict(grid=f"{shape[0]}x{shape[1]}", blocks=f"{s}x{p}", overlap=t_ov, ctc=t_ctc,
                compute=t_comp, comm=t_comm, ratio=t_ov / t_ctc, share=t_comm / t_ctc,
                hidden=hidden, model=model, choice=f"{best[0]}x{best[1]}",
                choice_ratio=best_ratio)


def main_emulated(args) -> int:
    from fftmatvec.distributed.emulated import MachineModel, machine_model

    # "free": a network of no cost, so that the pipeline's chunks cost only themselves (and
    # the emulated collectives' device copies)
    network = (MachineModel("free", 1, 1e-12, 1e18, 1e-12, 1e18) if args.emulate == "free"
               else machine_model(args.emulate))
    xp, sync = _array_module(args.device)
    bandwidth = args.bandwidth * 1e9 if args.bandwidth else _bandwidth(xp, sync)
    kind = "weak (block fixed)" if args.weak else "strong"
    chunks = "auto" if args.chunks is None else args.chunks
    print(f"# emulated network {network.name!r}, one rank (0, 0) of each grid; {kind} scaling, "
          f"{args.mode}, Nd={args.nd} Nm={args.nm} Nt={args.nt} precision={args.precision} "
          f"device={args.device} chunks={chunks} min_chunk={args.min_chunk} "
          f"bandwidth={bandwidth / 1e9:.0f} GB/s; times in ms (median of {args.repeat}); "
          f"comm: the model's, of one ctc product; share: comm / ctc")
    print(f"{'k':>4} {'grid':>7} {'blocks':>6} {'Nd':>7} {'Nm':>8} | {'overlap':>9} "
          f"{'ctc':>9} {'compute':>9} {'comm':>9} | {'ratio':>6} {'share':>6} {'hidden':>6} "
          f"{'model':>6} | {'choice':>6} {'model':>6}")
    for k in args.k:
        for rows, cols in args.grid:
            nd, nm = (args.nd * rows, args.nm * cols) if args.weak else (args.nd, args.nm)
            r = bench_emulated(network, (rows, cols), nd, nm, args.nt, k, args.precision,
                               args.mode, args.device, args.repeat, args.chunks,
                               args.min_chunk, bandwidth)
            print(f"{k:>4} {r['grid']:>7} {r['blocks']:>6} {nd:>7} {nm:>8} | "
                  f"{r['overlap'] * 1e3:>9.3f} {r['ctc'] * 1e3:>9.3f} "
                  f"{r['compute'] * 1e3:>9.3f} {r['comm'] * 1e3:>9.3f} | {r['ratio']:>6.2f} "
                  f"{r['share']:>6.2f} {r['hidden']:>6.2f} {r['model']:>6.2f} | "
                  f"{r['choice']:>6} {r['choice_ratio']:>6.2f}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--nd", type=int, default=64)
    ap.add_argument("--nm", type=int, default=512)
    ap.add_argument("--nt", type=int, default=256)
    ap.add_argument("--k", type=_ks, default=[8],
                    help="right-hand sides per product; several: comma-separated (1,8)")
    ap.add_argument("--chunks", type=_chunks_arg, default=None,
                    help="the block pipeline's chunks: auto (the cost model's, default), N "
                         "(most N on each axis with more than one rank) or SxP (exactly)")
    ap.add_argument("--min-chunk", type=int, default=16,
                    help="fewest rows (sensors or parameters) of a chunk, on average")
    ap.add_argument("--precision", default="ddddd")
    ap.add_argument("--mode", choices=("forward", "adjoint", "normal"), default="forward")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--weak", action="store_true", help="grow Nm with the number of ranks")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=None,
                    help="instead: a batch of --k vectors on every rank, one replica against "
                         "this many replica groups")
    ap.add_argument("--emulate", metavar="MODEL", choices=("frontier", "h100", "free"),
                    help="one process: rank (0, 0) of each --grid on this machine model "
                         "(free: a network of no cost, the chunks' own cost)")
    ap.add_argument("--grid", type=_grid, action="append", metavar="RxC",
                    help="a virtual grid of --emulate (repeat for several)")
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="device bandwidth in GB/s for the cost model (default: measured)")
    ap.add_argument("--no-helper", action="store_true",
                    help="host-staged MPI without its helper thread (the collectives driven "
                         "from the calling thread), to compare with the default")
    ap.add_argument("--chunk-cost", type=_grid, action="append", metavar="SxP",
                    help="one process, nothing to communicate: the pipeline forced into SxP "
                         "chunks against the whole-block product (repeat for several)")
    args = ap.parse_args(argv)
    if args.chunk_cost:
        if args.emulate or args.grid:
            ap.error("--chunk-cost runs alone (no --emulate, no --grid)")
        return main_chunk_cost(args)
    if args.emulate:
        if not args.grid:
            ap.error("--emulate needs at least one --grid RxC")
        return main_emulated(args)
    if args.grid:
        ap.error("--grid goes with --emulate")

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if args.replicas is not None:
        if args.replicas < 1 or world.size % args.replicas:
            ap.error(f"--replicas must divide the {world.size} ranks, got {args.replicas}")
        for k in args.k:
            r = bench_replicas(world, args.nd, args.nm, args.nt, k, args.precision,
                               args.device, args.repeat, args.replicas)
            if world.rank == 0:
                (lay1, t1), (lay_r, t_r) = r[1], r[args.replicas]
                print(f"# matmat of k={k}, Nd={args.nd} Nm={args.nm} Nt={args.nt} "
                      f"precision={args.precision} device={args.device} on {world.size} "
                      f"ranks; ms (slowest rank, median of {args.repeat}); layout replicas x "
                      f"rows x cols")
                print(f"{'layout':>10} {'ms':>9} | {'layout':>10} {'ms':>9} | {'ratio':>6}")
                print(f"{lay1:>10} {t1 * 1e3:9.3f} | {lay_r:>10} {t_r * 1e3:9.3f} | "
                      f"{t_r / t1:6.2f}")
        return 0
    sizes = [p for p in (2 ** i for i in range(16)) if p <= world.size]
    if world.rank == 0:
        kind = "weak (Nm x p)" if args.weak else "strong"
        chunks = "auto" if args.chunks is None else args.chunks
        print(f"# {kind} scaling, {args.mode}, Nd={args.nd} Nm={args.nm} Nt={args.nt} "
              f"precision={args.precision} device={args.device} chunks={chunks} "
              f"min_chunk={args.min_chunk}; times in ms (slowest rank, median of "
              f"{args.repeat})")
        print(f"{'k':>4} {'p':>4} {'grid':>6} {'blocks':>6} {'Nm':>7} | {'overlap':>9} "
              f"{'ctc':>9} {'compute':>9} {'comm':>9} | {'ratio':>6} {'hidden':>6} "
              f"{'helper':>6}")
    for k in args.k:
        for p in sizes:
            sub = world.Split(0 if world.rank < p else MPI.UNDEFINED, world.rank)
            if sub != MPI.COMM_NULL:
                nm = args.nm * (p if args.weak else 1)
                r = bench(sub, args.nd, nm, args.nt, k, args.precision, args.mode,
                          args.device, args.repeat, args.chunks, args.min_chunk,
                          not args.no_helper)
                if sub.rank == 0:
                    print(f"{k:>4} {p:>4} {r['grid']:>6} {r['blocks']:>6} {nm:>7} | "
                          f"{r['overlap'] * 1e3:>9.3f} "
                          f"{r['ctc'] * 1e3:>9.3f} {r['compute'] * 1e3:>9.3f} "
                          f"{r['comm'] * 1e3:>9.3f} | {r['ratio']:>6.2f} {r['hidden']:>6.2f} "
                          f"{r['helper']:>6}", flush=True)
                sub.Free()
            world.Barrier()
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
