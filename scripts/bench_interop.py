#!/usr/bin/env python
"""Cost of taking torch tensors instead of NumPy/CuPy arrays, and of the autograd module.

For one operator it times, waited for (device events around each call on a GPU, so the host's
time before the first kernel counts), one product of

- ``native``: a NumPy (CPU) or CuPy (GPU) array, the baseline (``native_T``: its adjoint);
- ``torch``: the same memory as a torch tensor, read and returned through DLPack
  (fftmatvec/_interop.py): what the conversion adds to a call;
- ``autograd``: ``F.as_torch()`` on a tensor that requires grad, forward only;
- ``fwd+bwd``: the same, forward and backward (``F`` then ``F^T``), against
  ``native + native_T``;

in interleaved rounds, and prints the medians over the rounds with each variant's ratio to its
baseline, so that a drift of the device's clock hits all alike.

Usage: python scripts/bench_interop.py [--size 200x100x400] [--precision ddddd]
       [--repeat 50] [--rounds 5] [--device cpu|gpu]
"""

from __future__ import annotations

import argparse

import numpy as np

from bench_check import waited_time  # the same timer: each call waited for


def main() -> None:
    import torch

    import fftmatvec as fm
    from fftmatvec import backend

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="200x100x400", help="NdxNmxNt (default 200x100x400)")
    ap.add_argument("--precision", default="ddddd", help="five letters (default ddddd)")
    ap.add_argument("--repeat", type=int, default=50, help="calls per timing (default 50)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                    help="cpu: NumPy and CPU tensors; gpu: CuPy and CUDA tensors")
    args = ap.parse_args()
    nd, nm, nt = (int(v) for v in args.size.lower().split("x"))
    xp = backend.cupy if args.device == "gpu" else np
    rng = np.random.default_rng(0)
    F = fm.BlockToeplitz(xp.asarray(rng.standard_normal((nd, nm, nt))), args.precision)
    m = xp.asarray(rng.standard_normal((nm, nt)))
    d = xp.asarray(rng.standard_normal((nd, nt)))
    t = torch.from_dlpack(m)  # the same memory
    tg = t.clone().requires_grad_()
    layer = F.as_torch()

    def fwd_bwd():
        tg.grad = None
        layer(tg).sum().backward()

    variants = {
        "native": lambda: F.matvec(m),
        "native_T": lambda: F.rmatvec(d),
        "torch": lambda: F.matvec(t),
        "autograd": lambda: layer(tg),
        "fwd+bwd": fwd_bwd,
    }
    for fn in variants.values():  # warm-up: plans, buffers, graphs
        fn()
    times = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            times[name].append(waited_time(xp, fn, args.repeat))
    med = {k: float(np.median(v)) for k, v in times.items()}
    base = {"native": med["native"], "native_T": med["native_T"], "torch": med["native"],
            "autograd": med["native"], "fwd+bwd": med["native"] + med["native_T"]}
    print(f"F {nd}x{nm}x{nt}, precision {args.precision}, device {args.device}, "
          f"torch {torch.__version__}; median of {args.rounds} rounds of {args.repeat} calls")
    print(f"{'variant':<10} {'time (us)':>12} {'baseline (us)':>14} {'ratio':>7}")
    for name in variants:
        print(f"{name:<10} {med[name] * 1e6:>12.1f} {base[name] * 1e6:>14.1f} "
              f"{med[name] / base[name]:>7.3f}")


if __name__ == "__main__":
    main()
