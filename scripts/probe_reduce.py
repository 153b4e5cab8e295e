#!/usr/bin/env python
"""The split-K sum's two kernels against each other (a probe of the rule in
``KernelEngine.split_sum``).

``reduce_*`` gives each output lanes of threads that share its splits; ``reduce_serial_*`` one
thread that adds them in order. Part 1 sweeps outputs and splits, complex128 and complex64,
each kernel alone (mean of 200 launches queued back to back), and checks the results: the
serial sum must equal NumPy's sum in split order to the last bit. Part 2 times the one-vector
forwards' stage 3 (its first launch, then each sum; ``--k 16``: batches) on the benchmark's
sizes, interleaved, best of 3 means of 50, and marks the engine's pick with ``*``.

Usage: python scripts/probe_reduce.py [--sizes 1000x100x1000,...] [--k 1,16] [--skip-sweep]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import back_to_back_time  # noqa: E402

SWEEP_N = (510, 16_500, 33_792, 100_100, 200_200, 400_400)
SWEEP_S = (2, 3, 4, 6, 8, 11, 16, 17, 24, 32)
SIZES = "1000x100x1000,1500x100x1000,5000x100x1000,20000x50x500,1000x40x1000,100000x10x100"


def mean_time(cp, fn, n: int) -> float:
    """µs per call of ``fn`` over ``n`` calls queued back to back."""
    return back_to_back_time(cp, fn, n) * 1e6


def sweep(cp, fm, rng, sweep_n=SWEEP_N, sweep_s=SWEEP_S) -> int:
    from fftmatvec import kernels

    bad = 0
    print("compute        n   S |  lanes us  serial us  lanes/serial | engine  serial exact")
    for prec, dtype in (("ddddd", np.complex128), ("sssss", np.complex64)):
        eng = fm.BlockToeplitz(cp.asarray(rng.standard_normal((2, 3, 4))), prec)._engine
        s = cp.cuda.get_current_stream().ptr
        for n in sweep_n:
            for S in sweep_s:
                part = rng.standard_normal((S, n)) + 1j * rng.standard_normal((S, n))
                part = part.astype(dtype)
                ref = part[0].copy()
                for p in part[1:]:
                    ref = ref + p  # in order, in the compute dtype
                dpart = cp.asarray(part)
                t, exact = {}, None
                for serial in (False, True):
                    fn, grid, block, args = eng.split_sum(n, S, dtype, serial=serial)
                    launch = kernels.PackedLaunch(fn, grid, block, 0, (None, None) + args)
                    y = cp.full(n, np.nan, dtype=dtype)
                    t[serial] = mean_time(cp, lambda: launch(s, dpart.data.ptr, y.data.ptr), 200)
                    got = cp.asnumpy(y)
                    if serial:
                        exact = bool(np.array_equal(got, ref))
                        bad += not exact
                    else:
                        tol = 1e-12 if dtype == np.complex128 else 1e-4
                        ok = np.allclose(got, ref, rtol=tol, atol=tol * S)
                        bad += not ok
                pick = "serial" if len(eng.split_sum(n, S, dtype)[2]) == 1 else "lanes"
                print(f"{np.dtype(dtype).name:10s} {n:7d} {S:3d} | {t[False]:8.2f} "
                      f"{t[True]:10.2f} {t[False] / t[True]:13.2f} | {pick:6s}  {exact}",
                      flush=True)
                del dpart
    return bad


def products(cp, fm, rng, sizes: str, k: int = 1) -> None:
    from fftmatvec import kernels

    print(f"\nforward stage 3, k = {k}: its first launch, then each sum")
    print("    Nm   Nd    Nt   prec splits       n |   GEMV us  +lanes us  +serial us")
    for size in sizes.split(","):
        nm, nd, nt = (int(v) for v in size.split("x"))
        K = cp.asarray(rng.standard_normal((nd, nm, nt)))
        for prec in ("ddddd", "sssss", "ddhdd"):
            F = fm.BlockToeplitz(K, prec)
            eng = F._engine
            st = eng.stage3(False, k, eng.xhat_dtype(F.precision), eng.yhat_dtype(F.precision))
            (main, red, _, _), la = st.steps[0], st.plan[0]
            if red is None:
                print(f"{nm:6d} {nd:4d} {nt:5d}  {prec}: one split")
                continue
            n = la.kb * nd * eng.nf
            xh = eng.xhat_buffer(F.precision, k, nm)
            xh[...] = cp.asarray(rng.standard_normal(xh.shape))
            yh = eng.yhat_buffer(F.precision, k, nd)
            wk = cp.cuda.alloc(st.workspace_bytes)
            s = cp.cuda.get_current_stream().ptr
            sums = {}
            for serial in (False, True):
                fn, grid, block, args = eng.split_sum(n, la.splits, yh.dtype, serial=serial)
                sums[serial] = kernels.PackedLaunch(fn, grid, block, 0, (None, None) + args)
            runs = {"gemv": lambda: main(s, xh.data.ptr, wk.ptr)}
            for serial, red_launch in sums.items():
                runs[serial] = (lambda r=red_launch: (main(s, xh.data.ptr, wk.ptr),
                                                      r(s, wk.ptr, yh.data.ptr)))
            best = {k: float("inf") for k in runs}
            for _ in range(3):
                for name, fn in runs.items():
                    best[name] = min(best[name], mean_time(cp, fn, 50))
            pick = "serial" if len(eng.split_sum(n, la.splits, yh.dtype)[2]) == 1 else "lanes"
            mark = {False: "*" if pick == "lanes" else " ", True: "*" if pick == "serial" else " "}
            print(f"{nm:6d} {nd:4d} {nt:5d}  {prec} {la.splits:6d} {n:7d} | {best['gemv']:9.1f} "
                  f"{best[False]:9.1f}{mark[False]} {best[True]:10.1f}{mark[True]}", flush=True)
            del F, xh, yh, wk
        del K
        cp.get_default_memory_pool().free_all_blocks()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--sweep-n", default=",".join(map(str, SWEEP_N)), help="outputs, a list")
    ap.add_argument("--sweep-s", default=",".join(map(str, SWEEP_S)), help="splits, a list")
    ap.add_argument("--k", default="1", help="right-hand sides of part 2, a list: 1,16")
    args = ap.parse_args(argv)
    import cupy as cp

    import fftmatvec as fm

    rng = np.random.default_rng(3)
    ints = lambda text: tuple(int(v) for v in text.split(","))  # noqa: E731
    bad = 0 if args.skip_sweep else sweep(cp, fm, rng, ints(args.sweep_n), ints(args.sweep_s))
    for k in ints(args.k):
        products(cp, fm, rng, args.sizes, k)
    if bad:
        print(f"{bad} sums did not match")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
