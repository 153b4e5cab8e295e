#!/usr/bin/env python
"""How fast tiles of Khat stream from memory, by the length of their contiguous runs.

The batch kernels (several right-hand sides, hip_kernels/sbgemm.cuh) give each thread block R
output rows x F frequencies of ``Khat`` (Nd, Nm, Nfp), frequency innermost, and walk the
reduction axis: every step reads R runs of F contiguous frequencies, Nfp elements apart. This
probe reads exactly that pattern, with nothing else in the kernel (16-byte read-only loads,
8 steps in flight per thread, split-K over the reduction), for runs from 32 bytes to 4 KB and
tiles of 4 KB per step, and prints the rate beside a linear read of as many bytes
(``bench_matvec.read_bandwidth``), measured in the same run. Blocks take the row tiles of one frequency tile together (as forward batches
do) or the frequency tiles of one row tile (``--freq-major``; adjoint batches).

Usage: python scripts/probe_khat_runs.py [--shape 100x5000x1024] [--splits 1,4,16] [--json F]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

SOURCE = r"""
// One block: rows [ot R, ot R + R) x words [ft F, ft F + F) of every reduction row in its
// split, as 16-byte loads, U steps issued before any is used.
extern "C" __global__ void __launch_bounds__(256) tile_read(
    const uint4* __restrict__ a, unsigned* __restrict__ sink, long long n_rows, long long n_red,
    long long row_words, int R, int F, int freq_major, long long chunk) {
  constexpr int U = 8;
  const long long n_ot = (n_rows + R - 1) / R, n_ft = row_words / F;
  const long long ot = freq_major ? blockIdx.x / n_ft : blockIdx.x % n_ot;
  const long long ft = freq_major ? blockIdx.x % n_ft : blockIdx.x / n_ot;
  const int q4 = F / 4, per = R * q4;  // 16-byte pieces per step of the block
  const int w = threadIdx.x;
  const long long o = ot * R + w / q4;
  const long long f4 = (ft * F) / 4 + w % q4;
  const bool on = w < per && o < n_rows;
  const long long r0 = (long long)blockIdx.y * chunk;
  const long long r1 = r0 + chunk < n_red ? r0 + chunk : n_red;
  const uint4* p = a + (o * n_red) * (row_words / 4) + f4;
  unsigned acc = 0;
  for (long long r = r0; r < r1; r += U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      v[u] = (on && r + u < r1) ? __ldg(p + (r + u) * (row_words / 4)) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; practically never written
}

"""


def cases(shape, runs, splits):
    """(run bytes, R, F, splits, chunk, grid) of each launch: R rows x F words = 4 KB a step
    (runs that do not divide a row are left out), the reduction split in ``chunk`` rows."""
    n_rows, n_red, row_words = shape
    out = []
    for run in runs:
        F = run // 4
        R = max(1, 1024 // F)
        if F < 4 or F % 4 or F > 1024 or row_words % F:
            continue
        for want in splits:
            chunk = -(-n_red // want)
            grid = (-(-n_rows // R) * (row_words // F), -(-n_red // chunk))
            out.append((run, R, F, grid[1], chunk, grid))
    return out


def words_read(shape, R, F, chunk, grid, freq_major):
    """How many times the tile_read launch reads each 32-bit word (NumPy emulation of its
    indexing), so that a rate counts every byte exactly once."""
    n_rows, n_red, row_words = shape
    hits = np.zeros(shape, dtype=np.int64)
    n_ot, n_ft, q4 = -(-n_rows // R), row_words // F, F // 4
    for bx in range(grid[0]):
        ot, ft = (bx // n_ft, bx % n_ft) if freq_major else (bx % n_ot, bx // n_ot)
        for by in range(grid[1]):
            r0, r1 = by * chunk, min(by * chunk + chunk, n_red)
            for w in range(min(256, R * q4)):
                o, f4 = ot * R + w // q4, ft * F // 4 + w % q4
                if o < n_rows:
                    hits[o, r0:r1, 4 * f4:4 * f4 + 4] += 1
    return hits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="100x5000x1024",
                    help="rows x reduction rows x words per row (Nd x Nm x Nfp of a float16 Khat)")
    ap.add_argument("--runs", default="32,64,128,256,512,1024,4096", help="run lengths in bytes")
    ap.add_argument("--splits", default="1,4,16")
    ap.add_argument("--freq-major", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", help="also write the rates to this file")
    args = ap.parse_args(argv)
    import cupy as cp

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_matvec import median_time, read_bandwidth, write_json

    n_rows, n_red, row_words = (int(v) for v in args.shape.split("x"))
    mod = cp.RawModule(code=SOURCE)
    tile_read = mod.get_function("tile_read")
    a = cp.random.randint(0, 2**31, size=(n_rows, n_red, row_words), dtype=np.int32).view(np.uint32)
    sink = cp.zeros(1, np.uint32)
    nbytes = a.nbytes
    t = nbytes / read_bandwidth(cp, nbytes, args.repeat)  # a linear read of as many bytes
    print(f"# {n_rows} x {n_red} x {row_words} uint32 ({nbytes / 2**30:.2f} GiB); one linear "
          f"read of as many bytes: {nbytes / t / 1e12:.2f} TB/s")
    print(f"{'run B':>6} {'R':>5} {'F':>5} {'splits':>6} {'blocks':>7} | {'TB/s':>5} {'of linear':>9}")
    rows = [{"run_bytes": None, "tbps": nbytes / t / 1e12}]
    runs = [int(v) for v in args.runs.split(",")]
    splits = [int(v) for v in args.splits.split(",")]
    for run, R, F, n_split, chunk, grid in cases((n_rows, n_red, row_words), runs, splits):
        argv_ = (a, sink, np.int64(n_rows), np.int64(n_red), np.int64(row_words), np.int32(R),
                 np.int32(F), np.int32(args.freq_major), np.int64(chunk))
        tt = median_time(cp, lambda: tile_read(grid, (256,), argv_), args.repeat, warmup=2)
        print(f"{run:>6} {R:>5} {F:>5} {n_split:>6} {grid[0] * grid[1]:>7} | "
              f"{nbytes / tt / 1e12:5.2f} {t / tt:9.2f}")
        rows.append({"run_bytes": run, "R": R, "F": F, "splits": n_split,
                     "tbps": nbytes / tt / 1e12, "of_linear": t / tt})
        sys.stdout.flush()
    if args.json:
        write_json(args.json, {"shape": args.shape, "freq_major": args.freq_major, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
