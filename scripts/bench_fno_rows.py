"""Benchmark the FNO layer's last-axis transforms: the row FFT kernels against the DFT GEMMs.

For the rows of each size of scripts/bench_fno.py (B C prod(grid[:-1]) rows of grid[-1]
points, the layer's kept bins of the last axis), on one CUDA device in one run: the median time
of ``torch.matmul`` with the DFT matrix the kernel replaces (IEEE float32, no TF32), and of
:class:`fftmatvec.fno._rows.LastAxis` at 1 to 64 rows per block, forward (``r2c``: rows to
bins) and inverse (``c2r``); and the kernels' best bandwidth (bytes in and out over the best
time). These set ``FNO_ROWS_R2C_MIN`` (fftmatvec/gpu/rules.py) and ``_rows.ROWS_BYTES``.

Usage::

    python scripts/bench_fno_rows.py [--reps N]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bench_fno import SIZES
from fftmatvec.fno import _dft, kept_modes
from fftmatvec.fno._rows import LastAxis, supported

RPB = (1, 2, 4, 8, 16, 32, 64)


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e3  # us


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    dev = torch.device("cuda", torch.cuda.current_device())
    print(f"device: {torch.cuda.get_device_name(dev)}; times in us")
    print(f"{'case':>28} {'kind':>4} {'gemm':>7} " + " ".join(f"rpb{r:>3}" for r in RPB)
          + f" {'best GB/s':>9}")
    for B, C, grid, m in SIZES:
        L, mm = grid[-1], kept_modes((m,) * len(grid))[-1]
        rows = B * C * int(np.prod(grid[:-1]))
        x = torch.randn(rows, L, device=dev)
        Y = torch.randn(rows, 2 * mm, device=dev)
        F = torch.as_tensor(_dft.analysis_last(L, mm), dtype=torch.float32, device=dev)
        A = torch.as_tensor(_dft.synthesis_last(L, mm), dtype=torch.float32, device=dev)
        for kind, inp, M in (("r2c", x, F), ("c2r", Y, A)):
            t_gemm = timed(lambda: inp @ M, args.reps)
            ts = [float("nan")] * len(RPB)
            if supported(L, mm, 227 * 1024):
                for i, r in enumerate(RPB):
                    t = LastAxis(kind, L, mm, np.ones(mm), dev.index, rows_per_block=r)
                    ts[i] = timed(lambda: t(inp), args.reps)
            best = min((v for v in ts if v == v), default=float("nan"))
            gbs = 4 * rows * (L + 2 * mm) / best / 1e3
            print(f"{str((B, C, grid, m)):>28} {kind:>4} {t_gemm:7.1f} "
                  + " ".join(f"{v:6.1f}" for v in ts) + f" {gbs:9.0f}", flush=True)


if __name__ == "__main__":
    main()
