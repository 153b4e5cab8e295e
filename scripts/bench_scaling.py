#!/usr/bin/env python
"""Distributed products: overlapped against compute-then-communicate, strong and weak scaling.

Run under MPI, e.g. ``mpiexec -n 4 python scripts/bench_scaling.py`` (CPU) or, ranks sharing
or owning GPUs, ``mpiexec -n 4 python scripts/bench_scaling.py --device gpu``. For each number
of ranks p = 1, 2, 4, ... up to the communicator's size (the first p ranks), it times:

- ``overlap``: the block pipeline (``overlap=True``): the local kernel block cut into blocks of
  sensors and parameters aligned with the collectives' slices, one product per block on the
  whole batch, each chunk's non-blocking gather or reduction moving while other blocks are
  computed (``blocks`` gives the sensor x parameter chunks; fftmatvec/distributed/operator.py);
- ``ctc``: the same product on the whole block, compute then communicate (``overlap=False``);
- ``compute``: the local product of this rank's whole block alone, on the same batch;
- ``comm``: the collectives alone, on buffers of the product's sizes.

``ratio`` is overlap / ctc (below 1: overlap helps; the goal is <= 0.8 where compute and comm
are of similar size) and ``hidden`` the share of the shorter of compute and comm that the
overlap hid: (compute + comm - overlap) / min(compute, comm). Strong scaling keeps the problem
fixed; weak scaling (``--weak``) grows Nm with p. Times are medians over ranks' maxima.

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

Usage: mpiexec -n 4 python scripts/bench_scaling.py [--nd 64] [--nm 512] [--nt 256] [--k 8]
       [--chunks 4] [--min-chunk 16] [--precision ddddd] [--mode forward|adjoint|normal]
       [--weak] [--repeat 5] [--replicas R]
       python scripts/bench_scaling.py --emulate h100 --grid 2x2 --grid 8x8 [--device gpu] ...
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
          **transport):
    """The operators overlapped and compute-then-communicate on ``grid`` (each rank makes only
    its block of a random kernel), a random local input, and three times: overlapped,
    compute-then-communicate and the local product alone (the ctc operator's whole block).
    ``transport``: further arguments of the operators (the emulated network's)."""
    from fftmatvec import DistributedBlockToeplitz

    xp, sync = _array_module(device)
    rng = np.random.default_rng(1)

    def kernel(rs, cs):  # each rank makes only its block
        r = np.random.default_rng([rs.start, cs.start])
        return r.standard_normal((rs.stop - rs.start, cs.stop - cs.start, nt)) / np.sqrt(nm)

    ops = {ov: DistributedBlockToeplitz(grid, kernel, precision, shape=(nd, nm, nt),
                                        device=device, overlap=ov, chunks=chunks,
                                        min_chunk=min_chunk, **transport)
           for ov in (True, False)}
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


def bench(comm, nd, nm, nt, k, precision, mode, device, repeat, chunks, min_chunk):
    from fftmatvec import ProcessGrid

    xp, sync = _array_module(device)
    ops, _, _, (t_ov, t_ctc, t_comp) = _pair(comm, ProcessGrid(comm), nd, nm, nt, k, precision,
                                             mode, device, repeat, chunks, min_chunk)
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
                ctc=t_ctc, compute=t_comp, comm=t_comm, ratio=t_ov / t_ctc, hidden=hidden)


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
    from fftmatvec.distributed.schedule import choose_chunks, predict

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
    whole = predict(*args, 1, 1, mode)
    model = predict(*args, s, p, mode) / whole
    best = choose_chunks(*args, mode, min_chunk=min_chunk)
    best_ratio = predict(*args, *best, mode) / whole
    # less than a microsecond communicated (one rank, the free network): nothing to hide
    hidden = ((t_comp + t_comm - t_ov) / min(t_comp, t_comm) if t_comm > 1e-6
              else float("nan"))
    return dict(grid=f"{shape[0]}x{shape[1]}", blocks=f"{s}x{p}", overlap=t_ov, ctc=t_ctc,
                compute=t_comp, comm=t_comm, ratio=t_ov / t_ctc, hidden=hidden, model=model,
                choice=f"{best[0]}x{best[1]}", choice_ratio=best_ratio)


def main_emulated(args) -> int:
    from fftmatvec.distributed.emulated import MachineModel, machine_model

    # "free": a network of no cost, so that the pipeline's chunks cost only themselves (and
    # the emulated collectives' device copies)
    network = (MachineModel("free", 1, 1e-12, 1e18, 1e-12, 1e18) if args.emulate == "free"
               else machine_model(args.emulate))
    xp, sync = _array_module(args.device)
    bandwidth = args.bandwidth * 1e9 if args.bandwidth else _bandwidth(xp, sync)
    kind = "weak (block fixed)" if args.weak else "strong"
    print(f"# emulated network {network.name!r}, one rank (0, 0) of each grid; {kind} scaling, "
          f"{args.mode}, Nd={args.nd} Nm={args.nm} Nt={args.nt} k={args.k} "
          f"precision={args.precision} device={args.device} chunks={args.chunks} "
          f"min_chunk={args.min_chunk} bandwidth={bandwidth / 1e9:.0f} GB/s; times in ms "
          f"(median of {args.repeat}); comm: the model's, of one ctc product")
    print(f"{'grid':>7} {'blocks':>6} {'Nd':>7} {'Nm':>8} | {'overlap':>9} {'ctc':>9} "
          f"{'compute':>9} {'comm':>9} | {'ratio':>6} {'hidden':>6} {'model':>6} | "
          f"{'choice':>6} {'model':>6}")
    for rows, cols in args.grid:
        nd, nm = (args.nd * rows, args.nm * cols) if args.weak else (args.nd, args.nm)
        r = bench_emulated(network, (rows, cols), nd, nm, args.nt, args.k, args.precision,
                           args.mode, args.device, args.repeat, args.chunks, args.min_chunk,
                           bandwidth)
        print(f"{r['grid']:>7} {r['blocks']:>6} {nd:>7} {nm:>8} | {r['overlap'] * 1e3:>9.3f} "
              f"{r['ctc'] * 1e3:>9.3f} {r['compute'] * 1e3:>9.3f} {r['comm'] * 1e3:>9.3f} | "
              f"{r['ratio']:>6.2f} {r['hidden']:>6.2f} {r['model']:>6.2f} | "
              f"{r['choice']:>6} {r['choice_ratio']:>6.2f}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--nd", type=int, default=64)
    ap.add_argument("--nm", type=int, default=512)
    ap.add_argument("--nt", type=int, default=256)
    ap.add_argument("--k", type=int, default=8, help="right-hand sides per product")
    ap.add_argument("--chunks", type=int, default=4,
                    help="most chunks per axis (sensors, parameters) of the block pipeline")
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
    args = ap.parse_args(argv)
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
        r = bench_replicas(world, args.nd, args.nm, args.nt, args.k, args.precision,
                           args.device, args.repeat, args.replicas)
        if world.rank == 0:
            (lay1, t1), (lay_r, t_r) = r[1], r[args.replicas]
            print(f"# matmat of k={args.k}, Nd={args.nd} Nm={args.nm} Nt={args.nt} "
                  f"precision={args.precision} device={args.device} on {world.size} ranks; "
                  f"ms (slowest rank, median of {args.repeat}); layout replicas x rows x cols")
            print(f"{'layout':>10} {'ms':>9} | {'layout':>10} {'ms':>9} | {'ratio':>6}")
            print(f"{lay1:>10} {t1 * 1e3:9.3f} | {lay_r:>10} {t_r * 1e3:9.3f} | "
                  f"{t_r / t1:6.2f}")
        return 0
    sizes = [p for p in (2 ** i for i in range(16)) if p <= world.size]
    if world.rank == 0:
        kind = "weak (Nm x p)" if args.weak else "strong"
        print(f"# {kind} scaling, {args.mode}, Nd={args.nd} Nm={args.nm} Nt={args.nt} "
              f"k={args.k} precision={args.precision} device={args.device} "
              f"chunks={args.chunks} min_chunk={args.min_chunk}; times in ms (slowest rank, "
              f"median of {args.repeat})")
        print(f"{'p':>4} {'grid':>6} {'blocks':>6} {'Nm':>7} | {'overlap':>9} {'ctc':>9} "
              f"{'compute':>9} {'comm':>9} | {'ratio':>6} {'hidden':>6}")
    for p in sizes:
        sub = world.Split(0 if world.rank < p else MPI.UNDEFINED, world.rank)
        if sub != MPI.COMM_NULL:
            nm = args.nm * (p if args.weak else 1)
            r = bench(sub, args.nd, nm, args.nt, args.k, args.precision, args.mode,
                      args.device, args.repeat, args.chunks, args.min_chunk)
            if sub.rank == 0:
                print(f"{p:>4} {r['grid']:>6} {r['blocks']:>6} {nm:>7} | "
                      f"{r['overlap'] * 1e3:>9.3f} "
                      f"{r['ctc'] * 1e3:>9.3f} {r['compute'] * 1e3:>9.3f} "
                      f"{r['comm'] * 1e3:>9.3f} | {r['ratio']:>6.2f} {r['hidden']:>6.2f}",
                      flush=True)
            sub.Free()
        world.Barrier()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
