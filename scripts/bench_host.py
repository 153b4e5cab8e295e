#!/usr/bin/env python
"""Host time on a product's critical path: each product timed three ways.

- synchronised: CUDA events around one call, the device idle before it (as
  ``scripts/bench_matvec.py`` times products); the host's work before the first kernel, and
  any gap it leaves between kernels, count;
- back to back: many calls queued, then one synchronisation (the host runs ahead, so this is
  the device's own time per product);
- host: wall time of one call on an idle device, until the call returns (its launches queued).

Synchronised minus back to back is what the host costs a product that waits for its result,
as the products of an iterative solver do.

Usage: python scripts/bench_host.py [--sizes 5000x100x1000,...] [--precisions ddhdd,ddddd]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import back_to_back_time, median_time, write_json  # noqa: E402


def host_times(cp, fn, repeat: int) -> tuple[float, float, float]:
    """(synchronised, back to back, host) seconds of ``fn()``: medians of ``repeat`` calls,
    except back to back, the mean of ``repeat`` queued calls."""
    synced = median_time(cp, fn, repeat)
    b2b = back_to_back_time(cp, fn, repeat, warmup=5)
    host = []
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        h0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - h0)
    cp.cuda.Device().synchronize()
    return synced, b2b, float(np.median(host))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sizes", default="5000x100x1000,1000x100x1000",
                    help="a list like 5000x100x1000,... (Nm x Nd x Nt)")
    ap.add_argument("--precisions", default="ddhdd,ddddd")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--json", help="write the numbers to this file")
    args = ap.parse_args(argv)

    import cupy as cp

    import fftmatvec as fm

    rng = np.random.default_rng(4)
    hdr = (f"{'Nm':>7} {'Nd':>4} {'Nt':>5} {'prec':>6} {'dir':>4} | {'sync ms':>8} {'b2b ms':>8} "
           f"{'gap us':>7} | {'host us':>7}")
    print("## one product (F.matvec / F.rmatvec): synchronised, back to back, their difference, "
          "and the host's time per call")
    print(hdr)
    print("-" * len(hdr))
    results = []
    for size in args.sizes.split(","):
        nm, nd, nt = (int(v) for v in size.split("x"))
        K = cp.asarray(rng.standard_normal((nd, nm, nt)))
        m = cp.asarray(rng.standard_normal((nm, nt)))
        d = cp.asarray(rng.standard_normal((nd, nt)))
        for p in args.precisions.split(","):
            F = fm.BlockToeplitz(K, p)
            for direction, fn in (("fwd", lambda: F.matvec(m)), ("adj", lambda: F.rmatvec(d))):
                synced, b2b, host = host_times(cp, fn, args.repeat)
                print(f"{nm:>7} {nd:>4} {nt:>5} {p:>6} {direction:>4} | {synced * 1e3:8.3f} "
                      f"{b2b * 1e3:8.3f} {(synced - b2b) * 1e6:7.1f} | {host * 1e6:7.1f}")
                sys.stdout.flush()
                results.append(dict(nm=nm, nd=nd, nt=nt, precision=p, direction=direction,
                                    synchronised=synced, back_to_back=b2b, host=host))
            del F
        del K
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
