#!/usr/bin/env python
"""Stages 1+2 and 4+5 as the package's own FFT kernels (``hip_kernels/rowfft.cuh``) against
cuFFT with the padding and unpadding as callbacks, the operator's two ways to run them. Each
pair is timed in the same run, on the plans a fused product makes
(``FFTStages.fused_plans`` of row FFT kernels and of cuFFT with callbacks), with its floor: the
bytes the fused stage must move (the unpadded real rows once, the complex rows once, in the
dtypes the product uses) over the copy bandwidth measured in that run. Also prints the largest
difference between the two results, relative to the largest value.

Usage: python scripts/bench_row_fft.py [--sizes 5000x1000,...] [--precisions ddddd,...]
       [--sweep] [--radices] [--json F]

``--sweep`` also times each kernel at several rows per block and block sizes (the defaults'
tuning: ``_rowfft.ROWS_BYTES``, ``_rowfft.THREADS``); ``--radices`` at every factorisation of
its length into passes (``_rowfft.factorisations``; the default: ``_rowfft.MAX_RADIX``);
``--carveouts`` at several preferred shared-memory carveouts (percent of the unified L1 and
shared memory; -1 the driver's default), two passes in opposite orders, the faster kept.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from fftmatvec.gpu.plan import FFT_CALLBACKS, FFT_ROW


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="5000x1000,20000x500,100000x100,1000x1000,80000x1000",
                    help="rows x Nt: rows transformed at once (Nm of a product, times k)")
    ap.add_argument("--precisions", default="ddddd,ddhdd,sssss")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--sweep", action="store_true", help="time other rows per block and blocks")
    ap.add_argument("--radices", action="store_true",
                    help="time every factorisation of the length into passes (FAMILIES)")
    ap.add_argument("--threads", default="32,64,128",
                    help="block sizes of the sweep (at most _rowfft.MAX_THREADS)")
    ap.add_argument("--carveouts", default=None,
                    help="time each kernel at these preferred carveouts, e.g. -1,50,100")
    ap.add_argument("--json", default=None, help="also write every timing to this file")
    args = ap.parse_args(argv)

    import cupy as cp

    from fftmatvec import fft_length
    from fftmatvec.gpu import callbacks as _fftcb, rowfft as _rowfft
    from fftmatvec.gpu import KernelEngine
    from fftmatvec.precision import PrecisionConfig

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_matvec import copy_bandwidth, median_time, write_json

    callbacks, why = _fftcb.support()
    bw = copy_bandwidth(cp)
    print(f"# copy bandwidth (read+write): {bw / 1e12:.3f} TB/s; cuFFT callbacks: "
          f"{'yes' if callbacks else why}")
    hdr = (f"{'rows':>7} {'Nt':>6} {'L':>6} {'prec':>6} {'dir':>4} | {'floor':>7} | {'cuFFT+cb':>8} "
           f"{'ratio':>5} | {'kernel':>7} {'ratio':>5} | {'speedup':>7} {'max diff':>8}")
    print("\n## the row FFT kernels against cuFFT with callbacks (us; float64 input and output)")
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(5)
    results = []
    for size in args.sizes.split(","):
        rows, nt = (int(v) for v in size.split("x"))
        L = fft_length(nt)
        x = cp.asarray(rng.standard_normal((1, rows, nt)))
        for p in args.precisions.split(","):
            prec = PrecisionConfig(p)
            eng = KernelEngine(prec, 1, rows, L // 2 + 1, nt, L)  # one output row
            plans = {}
            for mode in ("0", "1"):
                if mode == "0" and not callbacks:
                    continue
                # the forward plan of a forward product (rows -> xhat), the inverse plan of
                # an adjoint (yhat -> rows): row FFT kernels (mode 1) or cuFFT with callbacks
                kinds = (FFT_ROW, FFT_ROW) if mode == "1" else (FFT_CALLBACKS, FFT_CALLBACKS)
                ffts = eng.ffts
                plans[mode] = (ffts.fused_plans(prec, False, 1, np.float64, np.float64, kinds).fwd,
                               ffts.fused_plans(prec, True, 1, np.float64, np.float64, kinds).inv)
            xhat = {m: eng.buffers.xhat_buffer(prec, 1, rows) for m in plans}
            yhat = eng.buffers.yhat_buffer(prec, 1, rows)
            y = {m: eng.buffers.y_buffer(prec, 1, rows, np.float64) for m in plans}
            for d, (src, dst, floor) in (
                    ("fwd", (lambda m: x, lambda m: xhat[m],
                             (x.nbytes + xhat["1"].nbytes) / bw)),
                    ("inv", (lambda m: yhat, lambda m: y[m],
                             (yhat.nbytes + y["1"].nbytes) / bw))):
                i = 0 if d == "fwd" else 1
                t = {}
                for m, pl in plans.items():
                    plan = pl[i]
                    if d == "inv":  # cuFFT may overwrite a complex-to-real input
                        yhat[...] = cp.asarray(rng.standard_normal(yhat.shape)
                                               + 1j * rng.standard_normal(yhat.shape))
                    plan(src(m).data.ptr, dst(m).data.ptr)
                    t[m] = median_time(cp, lambda: plan(src(m).data.ptr, dst(m).data.ptr),
                                       args.repeat)
                diff = float("nan")
                if "0" in plans:
                    if d == "inv":  # both once more on the same input
                        keep = yhat.copy()
                        plans["1"][1](yhat.data.ptr, y["1"].data.ptr)
                        yhat[...] = keep
                        plans["0"][1](yhat.data.ptr, y["0"].data.ptr)
                    a, b = dst("0"), dst("1")
                    diff = float(cp.abs(a - b).max() / cp.abs(a).max())
                tc = t.get("0", float("nan"))
                print(f"{rows:>7} {nt:>6} {L:>6} {p:>6} {d:>4} | {floor * 1e6:7.1f} | "
                      f"{tc * 1e6:8.1f} {floor / tc:5.2f} | {t['1'] * 1e6:7.1f} "
                      f"{floor / t['1']:5.2f} | {tc / t['1']:6.2f}x {diff:8.1e}")
                results.append({"rows": rows, "nt": nt, "L": L, "precision": p, "dir": d,
                                "floor_s": floor, "cufft_s": tc, "kernel_s": t["1"],
                                "max_diff": diff})
                if args.sweep:
                    rpbs = sorted({max(1, e // _rowfft.complex_length(L))
                                   for e in (256, 512, 1024, 2048, 4096)})
                    cells = []
                    base = plans["1"][i]
                    for rpb in rpbs:
                        for threads in (int(v) for v in args.threads.split(",")):
                            plan = base.variant(rows_per_block=rpb, threads=threads)
                            ts = median_time(cp, lambda: plan(src("1").data.ptr,
                                                              dst("1").data.ptr),
                                             args.repeat)
                            cells.append((ts, plan.rows_per_block, threads))
                            results.append({"rows": rows, "nt": nt, "L": L, "precision": p,
                                            "dir": d, "rows_per_block": plan.rows_per_block,
                                            "threads": threads, "kernel_s": ts})
                    cells.sort()
                    print("      sweep (us / rows per block / threads): " + "  ".join(
                        f"{c[0] * 1e6:.1f}/{c[1]}/{c[2]}" for c in cells[:6]))
                if args.carveouts:
                    base = plans["1"][i]
                    values = [int(v) for v in args.carveouts.split(",")]
                    best = {}
                    for order in (values, values[::-1]):
                        for v in order:
                            _set_carveout(cp, base, v)
                            ts = median_time(cp, lambda: base(src("1").data.ptr,
                                                              dst("1").data.ptr), args.repeat)
                            best[v] = min(best.get(v, ts), ts)
                    _set_carveout(cp, base, 100)  # the package's setting
                    for v, ts in best.items():
                        results.append({"rows": rows, "nt": nt, "L": L, "precision": p,
                                        "dir": d, "carveout": v, "kernel_s": ts})
                    print("      carveouts (us): " + "  ".join(
                        f"{v}: {best[v] * 1e6:.1f}" for v in values))
                if args.radices:
                    base = plans["1"][i]
                    cells = []
                    for rads in _rowfft.factorisations(_rowfft.complex_length(L)):
                        plan = base.variant(rads=rads)
                        ts = median_time(cp, lambda: plan(src("1").data.ptr,
                                                          dst("1").data.ptr), args.repeat)
                        cells.append((ts, rads, plan.family))
                        results.append({"rows": rows, "nt": nt, "L": L, "precision": p,
                                        "dir": d, "radices": rads, "kernel_s": ts})
                    cells.sort()
                    print(f"      radices (us; default {base.radices}): " + "  ".join(
                        f"{c[0] * 1e6:.1f}/{'.'.join(map(str, c[1]))}" for c in cells))
                sys.stdout.flush()
            del eng, xhat, yhat, y, plans
            cp.get_default_memory_pool().free_all_blocks()

    if args.json:
        write_json(args.json, results)
    return 0


def _set_carveout(cp, plan, percent: int) -> None:
    """The preferred shared-memory carveout of a row FFT plan's kernel (-1: the driver's)."""
    fn = plan._launch._fn
    drv = cp.cuda.driver
    drv.funcSetAttribute(getattr(fn, "kernel", fn).ptr,
                         drv.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent)


if __name__ == "__main__":
    raise SystemExit(main())
