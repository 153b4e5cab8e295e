#!/usr/bin/env python
"""Cost of the input check (``check_finite``) and of the power-of-two input scaling.

For each precision and direction it times one product with ``check_finite=True`` and with
``check_finite=False``, waited for (device events around each call: the host's time before the
first kernel counts) and queued back to back (the device's time per product), and prints their
ratio. For precisions with a reduced stage it also times, check off, the product with the
scaling switched off (``unscaled``: what the products cost before it) and with the scale as
element-wise device passes around every product (``ondevice``: ``FFTMATVEC_PLAN="scale_pass=1"``;
by default a product runs on the input as given, waits for the reduction's value only, and runs
again scaled only for an input far from 1), both as ratios to ``nocheck``, and, check on, the
product with the scaling switched off (``checkonly``: the product before the scaling with the
input check alone), as the ratio ``check / checkonly``: what the scaling costs beyond the
check, which shares its reduction. The variants are timed in interleaved rounds
and the medians over the rounds are printed, so a drift of the device's clock hits all alike.

Usage: python scripts/bench_check.py [--size 5000x100x1000] [--precisions ddddd,dssdd,ddhdd]
       [--repeat 50] [--rounds 5] [--device gpu|cpu]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def waited_time(xp, fn, repeat: int) -> float:
    """Median seconds of ``fn()``, each call waited for (device events on a GPU)."""
    if xp is np:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))
    xp.cuda.Device().synchronize()
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(xp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))


def queued_time(xp, fn, repeat: int) -> float:
    """Mean seconds of ``fn()`` over ``repeat`` calls queued back to back, waited for once."""
    if xp is np:
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - t0) / repeat
    xp.cuda.Device().synchronize()
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return xp.cuda.get_elapsed_time(start, stop) * 1e-3 / repeat


def variants(F, v, adjoint: bool) -> dict:
    """name -> a call of one product."""
    f = F.rmatvec if adjoint else F.matvec

    def unscaled():
        F._scaled = False
        try:
            return f(v, check_finite=False)
        finally:
            F._scaled = True

    def checkonly():
        F._scaled = False
        try:
            return f(v)
        finally:
            F._scaled = True

    def ondevice():
        os.environ["FFTMATVEC_PLAN"] = "scale_pass=1"
        try:
            return f(v, check_finite=False)
        finally:
            del os.environ["FFTMATVEC_PLAN"]

    out = {"check": lambda: f(v), "nocheck": lambda: f(v, check_finite=False)}
    if F._scaled:
        out["unscaled"] = unscaled
        out["checkonly"] = checkonly
        out["ondevice"] = ondevice
    return out


def measure(xp, F, v, adjoint: bool, repeat: int, rounds: int) -> dict:
    """name -> {"waited": s, "queued": s}, medians over interleaved rounds."""
    calls = variants(F, v, adjoint)
    for fn in calls.values():  # warm-up: plans, kernels, remembered one-vector paths
        for _ in range(5):
            fn()
    got = {name: {"waited": [], "queued": []} for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            got[name]["waited"].append(waited_time(xp, fn, repeat))
            got[name]["queued"].append(queued_time(xp, fn, repeat))
    return {name: {k: float(np.median(t)) for k, t in d.items()} for name, d in got.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--size", default="5000x100x1000", help="Nm x Nd x Nt")
    ap.add_argument("--precisions", default="ddddd,dssdd,ddhdd")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    args = ap.parse_args(argv)
    os.environ.pop("FFTMATVEC_PLAN", None)
    if args.device == "gpu":
        import cupy as xp
    else:
        xp = np
    import fftmatvec as fm

    nm, nd, nt = (int(n) for n in args.size.lower().split("x"))
    rng = np.random.default_rng(0)
    K = xp.asarray(rng.standard_normal((nd, nm, nt)))
    m = xp.asarray(rng.standard_normal((nm, nt)))
    d = xp.asarray(rng.standard_normal((nd, nt)))
    print(f"(Nm, Nd, Nt) = ({nm}, {nd}, {nt}), {args.device}, repeat {args.repeat} x "
          f"{args.rounds} rounds; times in ms, ratios against check_finite=False")
    print(f"{'prec':>6} {'dir':>4} | {'mode':>6} | {'check':>8} {'nocheck':>8} {'ratio':>6} | "
          f"{'unscaled':>8} {'ratio':>6} | {'ondevice':>8} {'ratio':>6} | {'checkonly':>9} "
          f"{'check/':>6}")
    for p in args.precisions.split(","):
        F = fm.BlockToeplitz(K, p)
        for adjoint, v in ((False, m), (True, d)):
            r = measure(xp, F, v, adjoint, args.repeat, args.rounds)
            for mode in ("waited", "queued"):
                c, n = r["check"][mode], r["nocheck"][mode]
                line = (f"{p:>6} {'adj' if adjoint else 'fwd':>4} | {mode:>6} | {c * 1e3:8.3f} "
                        f"{n * 1e3:8.3f} {c / n:6.3f} |")
                for extra in ("unscaled", "ondevice"):
                    if extra in r:
                        u = r[extra][mode]
                        line += f" {u * 1e3:8.3f} {u / n:6.3f} |"
                if "checkonly" in r:
                    u = r["checkonly"][mode]
                    line += f" {u * 1e3:9.3f} {c / u:6.3f}"
                print(line)
        del F
        if xp is not np:
            xp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
