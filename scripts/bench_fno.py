"""Benchmark the FNO spectral convolution against PyTorch eager and neuraloperator.

For each size of issue 41 (B, C, grid, modes per axis), on the current CUDA/ROCm device:
forward and forward+backward median times (CUDA events, after warm-up) of

* eager: ``rfftn`` -> gather of both signs -> ``einsum`` -> scatter -> ``irfftn``;
* neuraloperator's dense ``SpectralConv`` (when importable);
* ``fftmatvec.fno.SpectralConv``;

and the floor, one read of ``x`` and the weights and one write of ``y`` over the measured
device-to-device copy bandwidth. Times are printed with their ratios to the floor and ours to
the baselines.

Usage: ``python scripts/bench_fno.py [--reps N] [--dtype float32]``
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from fftmatvec.fno import SpectralConv

SIZES = [(32, 64, (64, 64), 16), (32, 64, (128, 128), 16), (16, 64, (256, 256), 32),
         (8, 128, (256, 256), 32), (16, 128, (256, 256), 64), (4, 32, (64, 64, 64), 16),
         (1024, 64, (128,), 64), (64, 64, (4096,), 64), (20, 32, (85, 85), 12)]


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    return float(np.median(ts))


def copy_bandwidth(reps):
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), reps)
    return 2 * src.numel() / t


def eager(x, w, modes, bias):
    d = len(modes)
    dims = tuple(range(-d, 0))
    X = torch.fft.rfftn(x, dim=dims, norm="forward")
    sl = [torch.cat([torch.arange(0, m - m // 2), torch.arange(n - m // 2, n)]).to(x.device)
          for n, m in zip(x.shape[2:-1], modes[:-1])]
    for a, ix in enumerate(sl):
        X = X.index_select(2 + a, ix)
    X = X[..., : modes[-1]]
    letters = "xyz"[:d]
    Y = torch.einsum(f"bi{letters},io{letters}->bo{letters}", X, w)
    out = X.new_zeros((x.shape[0], w.shape[1]) + tuple(x.shape[2:-1]) + (x.shape[-1] // 2 + 1,))
    if d == 1:
        out[..., : modes[-1]] = Y
    else:
        grids = torch.meshgrid(*sl, indexing="ij")
        out[(slice(None), slice(None)) + tuple(grids) + (slice(0, modes[-1]),)] = Y
    return torch.fft.irfftn(out, s=x.shape[2:], dim=dims, norm="forward") + bias


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    try:
        from neuralop.layers.spectral_convolution import SpectralConv as NeuralopConv
    except Exception:  # noqa: BLE001
        NeuralopConv = None
    bw = copy_bandwidth(args.reps)
    print(f"device: {torch.cuda.get_device_name()}, copy bandwidth {bw / 1e9:.0f} GB/s")
    print(f"{'case':>30} {'pass':>8} {'floor us':>9} {'ours/fl':>8} {'eager/ours':>10} "
          f"{'nop/ours':>9}")
    for B, C, grid, m in SIZES:
        n_modes = tuple([m] * len(grid))
        layer = SpectralConv(C, C, n_modes, device="cuda")
        x = torch.randn((B, C) + grid, device="cuda", requires_grad=True)
        w, bias = layer.weight, layer.bias
        floor = (2 * x.numel() * 4 + w.numel() * 8) / bw
        nop = None
        if NeuralopConv is not None:
            nop = NeuralopConv(C, C, n_modes).cuda()
        for name, bwd in (("fwd", False), ("fwd+bwd", True)):
            def run(f):
                def g():
                    y = f()
                    if bwd:
                        y.backward(torch.ones_like(y))
                return g
            with torch.set_grad_enabled(bwd):
                t_ours = timed(run(lambda: layer(x)), args.reps)
                t_eager = timed(run(lambda: eager(x, w, layer.modes, bias)), args.reps)
                t_nop = timed(run(lambda: nop(x)), args.reps) if nop is not None else float("nan")
            fl = floor * (3 if bwd else 1)
            print(f"{str((B, C, grid, m)):>30} {name:>8} {fl * 1e6:9.1f} {t_ours / fl:8.2f} "
                  f"{t_eager / t_ours:10.2f} {t_nop / t_ours:9.2f}")


if __name__ == "__main__":
    main()
