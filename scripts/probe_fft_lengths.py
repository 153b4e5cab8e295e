#!/usr/bin/env python
"""Probe: how fast the device's FFT library runs the transforms of stages 2 and 4 at each
candidate length ``L >= 2*Nt - 1``.

The operator may pad time to any ``L`` at least ``2*Nt - 1``. The smallest 5-smooth length is
the usual choice, but the FFT library may run another one (a power of two, say) in fewer passes
over memory. For every size and candidate length this prints the time of the four plain
transforms (real to complex and back, double and single), each against its floor (its input
and output once, over the copy bandwidth measured in the same run), and what a longer ``L``
costs stage 3 (``Nf`` grows with it).

Usage: python scripts/probe_fft_lengths.py [--sizes 5000x1000,...] [--span 1.3] [--json F]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import copy_bandwidth, median_time, write_json  # noqa: E402


def smooth_lengths(lo: int, hi: int, primes=(2, 3, 5, 7)) -> list[int]:
    """The integers in ``[lo, hi]`` with no prime factor outside ``primes``."""
    out = []
    for n in range(max(lo, 1), hi + 1):
        f = n
        for p in primes:
            while f % p == 0:
                f //= p
        if f == 1:
            out.append(n)
    return out


def candidates(nt: int, span: float) -> list[int]:
    """7-smooth lengths from ``2*Nt - 1`` up to ``span`` times it, and the next power of two."""
    lo = 2 * nt - 1
    lengths = set(smooth_lengths(lo, int(lo * span)))
    lengths.add(1 << (lo - 1).bit_length())
    return sorted(lengths)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sizes", default="5000x1000,100x1000,20000x500,50x500,100000x100,10x100",
                    help="rows x Nt: rows transformed at once, samples per row")
    ap.add_argument("--span", type=float, default=1.3,
                    help="longest candidate, as a multiple of 2*Nt - 1")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    import cupy as cp
    from cupy.cuda import cufft

    bw = copy_bandwidth(cp)
    print(f"# copy bandwidth (read+write): {bw / 1e12:.3f} TB/s")
    kinds = (("D2Z", cufft.CUFFT_D2Z, np.float64, np.complex128, cufft.CUFFT_FORWARD),
             ("Z2D", cufft.CUFFT_Z2D, np.complex128, np.float64, cufft.CUFFT_INVERSE),
             ("R2C", cufft.CUFFT_R2C, np.float32, np.complex64, cufft.CUFFT_FORWARD),
             ("C2R", cufft.CUFFT_C2R, np.complex64, np.float32, cufft.CUFFT_INVERSE))
    hdr = (f"{'rows':>7} {'Nt':>6} {'L':>6} {'Nf+':>5} | "
           + " ".join(f"{k[0] + ' us':>8} {'frac':>5}" for k in kinds))
    print("\n## plain transforms (out of place), µs and fraction of the floor; Nf+: stored "
          "frequencies over those of the smallest length")
    print(hdr)
    print("-" * len(hdr))
    results = []
    rng = np.random.default_rng(5)
    for size in args.sizes.split(","):
        rows, nt = (int(v) for v in size.split("x"))
        lengths = candidates(nt, args.span)
        nf0 = lengths[0] // 2 + 1
        for L in lengths:
            nf = L // 2 + 1
            row = dict(rows=rows, nt=nt, L=L, nf=nf)
            line = f"{rows:>7} {nt:>6} {L:>6} {nf / nf0:5.3f} |"
            for name, typ, din, dout, direction in kinds:
                n_in = L if np.dtype(din).kind == "f" else nf
                n_out = nf if np.dtype(din).kind == "f" else L
                a = cp.asarray(rng.standard_normal((rows, n_in))).astype(din)
                b = cp.empty((rows, n_out), dtype=dout)
                plan = cufft.Plan1d(L, typ, rows)
                t = median_time(cp, lambda: plan.fft(a, b, direction), args.repeat)
                floor = (a.nbytes + b.nbytes) / bw
                row[name] = t
                row[name + "_floor"] = floor
                line += f" {t * 1e6:8.1f} {floor / t:5.2f}"
                del a, b, plan
            print(line)
            sys.stdout.flush()
            results.append(row)
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        write_json(args.json, dict(bandwidth=bw, lengths=results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
