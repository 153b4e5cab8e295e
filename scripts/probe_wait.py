#!/usr/bin/env python
"""Where a waited-for product loses time against products queued back to back (a probe).

Each step of the three-step product (forward FFT, stage 3, inverse FFT) is timed with events
between the steps, in three modes:

- ``sync``: each product waited for before the next is queued (as a caller that needs the
  result does, and as ``bench_matvec.py`` times it);
- ``b2b``: all products queued back to back, one wait at the end;
- ``spin``: each product queued behind a kernel that spins for ``--spin-us``, then waited for:
  the host has queued the whole product before the device reaches it, and the device was busy
  just before it.

``sync - spin`` is then the host's time before the first kernel; ``spin - b2b`` what the
device loses after being idle. The host time of one call (``host``) is measured on an idle
device.

Usage: python scripts/probe_wait.py [--sizes 5000x100x1000,...] [--precisions ddddd,ddhdd]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import back_to_back_time, median_time  # noqa: E402
from probe_overlap import _parts  # noqa: E402

_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) { }
}
"""


def steps(cp, parts, adjoint: bool, mode: str, repeat: int, spin=None):
    """Median µs of (first step, stage 3, last step, whole) over ``repeat`` products."""
    p, s = parts["p"], cp.cuda.get_current_stream()
    xh, yh, y = (parts[k].data.ptr for k in ("xh", "yh", "y"))
    wk, x = parts["work"].ptr, parts["x"].data.ptr
    evs = [[cp.cuda.Event() for _ in range(4)] for _ in range(repeat)]

    def one(e):
        e[0].record()
        p.plans.fwd(x, xh, s.ptr)
        e[1].record()
        sums = p.queue_stage3(s.ptr, xh, yh, wk)  # work: partial sums the inverse adds
        e[2].record()
        p.plans.inv(sums, y, s.ptr)
        e[3].record()

    for _ in range(5):
        one(evs[0])
    s.synchronize()
    for e in evs:
        if mode == "spin":
            spin()
        one(e)
        if mode != "b2b":
            e[3].synchronize()
    s.synchronize()
    t = np.array([[cp.cuda.get_elapsed_time(e[i], e[i + 1]) for i in range(3)]
                  + [cp.cuda.get_elapsed_time(e[0], e[3])] for e in evs]) * 1e3
    return np.median(t[1:], axis=0)


def host_pieces(cp, F, v, parts, adjoint: bool, spin, n: int = 200) -> dict:
    """Median host µs of each piece of a one-vector call, queued behind a long spin kernel so
    that no call waits for the device."""
    from fftmatvec import _gpu

    p, s = parts["p"], cp.cuda.get_current_stream()
    xh, yh, y = (parts[k].data.ptr for k in ("xh", "yh", "y"))
    wk, x = parts["work"].ptr, parts["x"].data.ptr
    hit = F._one_paths[(adjoint, v.shape, v.dtype)]
    product, y_shape = hit[0], hit[1]
    alloc = cp.cuda.alloc
    pieces = {
        "call": (lambda: F.rmatvec(v)) if adjoint else (lambda: F.matvec(v)),
        "product": lambda: product(v, y_shape, contiguous=True),
        "fwd": lambda: p.plans.fwd(x, xh, s.ptr),
        "stage3": lambda: p.queue_stage3(s.ptr, xh, yh, wk),
        "inv": lambda: p.plans.inv(wk if p.split_sum else yh, y, s.ptr),
        "switches": _gpu.path_switches,
        "getDevice": cp.cuda.runtime.getDevice,
        "flags+dev": lambda: (v.flags.c_contiguous, v.data.device_id),
        "stream": lambda: cp.cuda.get_current_stream().ptr,
        "y alloc": lambda: cp.ndarray(y_shape, F.dtype, memptr=alloc(product.y_bytes)),
    }
    out = {}
    for name, fn in pieces.items():
        spin()
        t = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn()
            t.append(time.perf_counter_ns() - t0)
        s.synchronize()
        out[name] = float(np.median(t)) * 1e-3
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000x100x1000,1000x100x1000")
    ap.add_argument("--precisions", default="ddddd,sssss,ddhdd")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--spin-us", type=float, default=300.0)
    ap.add_argument("--host", action="store_true", help="only the host time of each piece")
    args = ap.parse_args(argv)
    import cupy as cp

    import fftmatvec as fm

    rng = np.random.default_rng(7)
    clock = cp.cuda.Device().attributes["ClockRate"] * 1e3  # Hz
    spin_fn = cp.RawKernel(_SPIN, "spin")
    cycles = np.int64(args.spin_us * 1e-6 * clock)

    def spin():
        spin_fn((1,), (1,), (cycles,))

    print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, spin {args.spin_us} us")
    print("    Nm   Nd    Nt   prec dir  mode  |  step1  stage3  step3   whole | product: "
          "sync     b2b    host")
    for size in args.sizes.split(","):
        nm, nd, nt = (int(v) for v in size.split("x"))
        K = cp.asarray(rng.standard_normal((nd, nm, nt)))
        for prec in args.precisions.split(","):
            F = fm.BlockToeplitz(K, prec)
            for adjoint in (False, True):
                n_in = nd if adjoint else nm
                v = cp.asarray(rng.standard_normal((n_in, nt)))
                fn = (lambda: F.rmatvec(v)) if adjoint else (lambda: F.matvec(v))
                fn()
                try:
                    parts = _parts(cp, F, adjoint)
                except LookupError:
                    print(f"{nm:6d} {nd:4d} {nt:5d}  {prec} {'adj' if adjoint else 'fwd'}: "
                          f"no three-step product")
                    continue
                parts["x"] = cp.ascontiguousarray(v[None])
                if args.host:
                    long = np.int64(200e-3 * clock)
                    h = host_pieces(cp, F, v, parts, adjoint, lambda: spin_fn((1,), (1,), (long,)))
                    print(f"{nm:6d} {nd:4d} {nt:5d}  {prec} {'adj' if adjoint else 'fwd'} host us: "
                          + "  ".join(f"{k} {t:.1f}" for k, t in h.items()), flush=True)
                    del parts
                    continue
                whole_sync = median_time(cp, fn, args.repeat) * 1e6
                whole_b2b = back_to_back_time(cp, fn, args.repeat) * 1e6
                host = []
                for _ in range(args.repeat):
                    cp.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    fn()
                    host.append(time.perf_counter() - t0)
                cp.cuda.Device().synchronize()
                host_us = float(np.median(host)) * 1e6
                for i, mode in enumerate(("sync", "b2b", "spin")):
                    r = steps(cp, parts, adjoint, mode, args.repeat, spin)
                    tail = (f" | {whole_sync:12.1f} {whole_b2b:7.1f} {host_us:7.1f}" if i == 0
                            else "")
                    print(f"{nm:6d} {nd:4d} {nt:5d}  {prec} {'adj' if adjoint else 'fwd'} "
                          f"{mode:5s} | {r[0]:6.1f} {r[1]:7.1f} {r[2]:6.1f} {r[3]:7.1f}{tail}",
                          flush=True)
                del parts
            del F
        del K
        cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
