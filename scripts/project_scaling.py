#!/usr/bin/env python
"""Projected weak scaling of one distributed product, calibrated on FFTMatvec's published curve.

1. Fit: the machine constants (a collective's latency per step and its bandwidth) of the cost
   model in ``fftmatvec/distributed/model.py`` are fitted to FFTMatvec's weak-scaling curve
   with FFTMatvec's own algorithm (the input broadcast down process columns, the output
   reduced along process rows, nothing overlapped, float64 on the wire, NCCL's ring
   collectives); the fit's residual is printed at each point.
2. Projection: this package's pipeline (all-gathers and reduce-scatters, in chunks that
   overlap with the block products, wires in the precision of stages 1 and 5) on the same
   constants and the same per-GPU problem, each ``p`` on its best grid and chunk count.

Weak-scaling efficiency is ``T(1) / T(p)``, each algorithm against its own one-GPU time.
Everything printed is a projection of a model, not a measurement: the assumptions are listed
in docs/scaling.md.

Usage: python scripts/project_scaling.py [--nd 100] [--nm 5000] [--nt 1000]
       [--compute-ms MS] [--precision dssdd] [--overlap 1.0] [--chunks 1,2,4,8,16]
       [--algorithm log] [--k 1]

``--compute-ms`` is the local product's time of this package on one GPU for the per-GPU
problem in ``--precision`` (measure it with ``scripts/bench_matvec.py`` on the GPU the
projection is for); by default FFTMatvec's one-GPU time scaled by the memory traffic of the
precision against all-``d`` (:func:`~fftmatvec.distributed.model.local_compute_time`).
"""

from __future__ import annotations

import argparse

#: FFTMatvec's published weak-scaling curve (its README's scaling plot, best grid per GPU
#: count): (GPUs, seconds of one product)
CURVE = ((1, 2.39e-3), (64, 3.43e-3), (256, 4.88e-3), (1024, 10.5e-3), (4096, 21.2e-3))

#: per-GPU problem (sensor rows, parameter columns, time steps): FFTMatvec's single-GPU
#: benchmark configuration (its docs, ``-nd 100 -nm 5000 -Nt 1000``)
PER_GPU = (100, 5000, 1000)

#: GPU counts the projection prints
GPUS = (1, 8, 64, 256, 1024, 4096)


def main(argv=None) -> int:
    from fftmatvec.distributed.model import (fit_fftmatvec, fftmatvec_time, grids_of,
                                             local_compute_time, pipeline_time)

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nd", type=int, default=PER_GPU[0], help="sensor rows per GPU")
    ap.add_argument("--nm", type=int, default=PER_GPU[1], help="parameter columns per GPU")
    ap.add_argument("--nt", type=int, default=PER_GPU[2], help="time steps")
    ap.add_argument("--compute-ms", type=float, default=None,
                    help="this package's local product on one GPU, ms (default: scaled "
                         "from FFTMatvec's one-GPU time)")
    ap.add_argument("--precision", default="dssdd")
    ap.add_argument("--overlap", type=float, default=1.0,
                    help="share of what the chunks can hide that the pipeline hides (0-1)")
    ap.add_argument("--chunks", default="1,2,4,8,16", help="chunk counts to choose from")
    ap.add_argument("--algorithm", default="log", choices=("log", "ring"),
                    help="latency term of this package's collectives")
    ap.add_argument("--k", type=int, default=1, help="right-hand sides per product")
    args = ap.parse_args(argv)
    try:
        chunk_counts = sorted({int(c) for c in args.chunks.split(",") if c.strip()})
    except ValueError:
        ap.error(f"--chunks must be comma-separated integers, got {args.chunks!r}")
    if not chunk_counts or min(chunk_counts) < 1:
        ap.error(f"--chunks must be positive integers, got {args.chunks!r}")
    for name in ("nd", "nm", "nt", "k"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not 0.0 <= args.overlap <= 1.0:
        ap.error(f"--overlap must be within [0, 1], got {args.overlap}")
    if args.compute_ms is not None and not args.compute_ms > 0:
        ap.error(f"--compute-ms must be positive, got {args.compute_ms}")
    nd, nm, nt = args.nd, args.nm, args.nt

    # 1. the fit, with FFTMatvec's algorithm
    t1 = CURVE[0][1]
    machine, fits = fit_fftmatvec(CURVE, nd, nm, nt, algorithm="ring")
    print(f"per-GPU problem: Nd={nd} Nm={nm} Nt={nt} (FFTMatvec's single-GPU configuration)")
    print("fit of FFTMatvec's algorithm (broadcast down columns, reduce along rows, no overlap, "
          "float64 wire, ring collectives) to its curve:")
    print(f"  latency   {machine.latency * 1e6:8.3f} us per collective step")
    print(f"  bandwidth {machine.bandwidth / 1e9:8.3f} GB/s per GPU")
    print(f"  {'GPUs':>5} {'grid':>9} {'measured ms':>12} {'model ms':>9} {'residual':>9}")
    measured = dict(CURVE)
    for p, (pr, pc), model, res in fits:
        print(f"  {p:5d} {f'{pr}x{pc}':>9} {measured[p] * 1e3:12.2f} {model * 1e3:9.2f} "
              f"{res * 100:8.1f}%")

    # 2. the projection of this package's pipeline on the same constants
    scale = (local_compute_time(nd, nm, nt, args.k, machine, args.precision)
             / local_compute_time(nd, nm, nt, 1, machine, "ddddd"))
    compute = args.compute_ms * 1e-3 if args.compute_ms is not None else t1 * scale
    source = "given" if args.compute_ms is not None else (
        f"FFTMatvec's {t1 * 1e3:.2f} ms x {scale:.3f}, the memory-traffic ratio of "
        f"{args.precision} (k={args.k}) to ddddd (k=1)")
    print(f"\nprojection: this package, {args.precision}, k={args.k}, local product "
          f"{compute * 1e3:.3f} ms ({source}), overlap {args.overlap:g}, "
          f"{args.algorithm} collectives, chunks from {chunk_counts}")
    print(f"  {'GPUs':>5} | {'FFTMatvec ms':>12} {'eff':>6} | {'grid':>9} {'chunks':>6} "
          f"{'ours ms':>8} {'eff':>6} | {'ours, ring ms':>13} {'eff':>6}")
    rows = []
    for p in GPUS:
        theirs = min(fftmatvec_time(t1, nd, nm, nt, g[0], g[1], machine, "ring")
                     for g in grids_of(p))
        best = {}
        for alg in (args.algorithm, "ring"):
            best[alg] = min((pipeline_time(compute, nd, nm, nt, g[0], g[1], machine,
                                           args.precision, args.overlap, c, alg, args.k), g, c)
                            for g in grids_of(p) for c in chunk_counts)
        t, (pr, pc), c = best[args.algorithm]
        ring = best["ring"][0]
        rows.append((p, theirs, t, ring))
        print(f"  {p:5d} | {theirs * 1e3:12.2f} {t1 / theirs * 100:5.1f}% | {f'{pr}x{pc}':>9} "
              f"{c:6d} {t * 1e3:8.3f} {compute / t * 100:5.1f}% | {ring * 1e3:13.3f} "
              f"{compute / ring * 100:5.1f}%")
    p, _, t, _ = rows[-1]
    print(f"\nprojected weak-scaling efficiency at {p} GPUs: {compute / t * 100:.1f}% "
          f"({args.algorithm} collectives), target 90%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
