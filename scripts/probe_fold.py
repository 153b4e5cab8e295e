#!/usr/bin/env python
"""The split-K sum in the inverse FFT's load against its own kernel (a probe of
``FOLD_MAX_SPLITS`` in ``fftmatvec/_gpu.py``).

A fused one-vector product whose stage 3 splits its reduction either sums the splits with a
kernel of their own before the inverse FFT, or hands the inverse FFT (a cuFFT plan with
callbacks) the partial sums, which its load callback adds. For each size, precision and
direction this times the product both ways on one operator, interleaved, best of 3 medians
of ``--repeat`` products waited for and of as many queued back to back, and compares the two
outputs and each against the float64 NumPy operator.

Usage: python scripts/probe_fold.py [--sizes 1000x100x1000,...] [--precs ddddd,sssss,ddhdd]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import back_to_back_time, interleaved, median_time  # noqa: E402

SIZES = ("289x15x10,1000x20x100,1000x100x1000,1500x100x1000,5000x100x1000,20000x50x500,"
         "2000x50x500,1000x40x1000,100000x10x100")


def rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=SIZES, help="NmxNdxNt,... (default: %(default)s)")
    ap.add_argument("--precs", default="ddddd,sssss,ddhdd")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--check-nm", type=int, default=5000,
                    help="compare with the NumPy operator up to this Nm (default %(default)s)")
    args = ap.parse_args(argv)

    import cupy as cp

    import fftmatvec as fm
    from fftmatvec import _gpu

    default = _gpu.FOLD_MAX_SPLITS
    rng = np.random.default_rng(7)
    print(f"FOLD_MAX_SPLITS = {default}; times in µs: waited for (sync), queued back to back "
          f"(b2b); 'sum' = the split-K sum kernel, 'fold' = the sum in the inverse FFT's load")
    print(f"{'Nm':>7} {'Nd':>4} {'Nt':>5} {'prec':>6} {'dir':>4} {'splits':>6} | "
          f"{'sync sum':>9} {'fold':>9} {'saved':>6} | {'b2b sum':>9} {'fold':>9} {'saved':>6} | "
          f"{'fold/sum':>8} {'vs f64':>8}")
    bad = 0
    for text in args.sizes.split(","):
        nm, nd, nt = (int(v) for v in text.split("x"))
        K = rng.standard_normal((nd, nm, nt))
        ref = fm.BlockToeplitz(K, "ddddd") if nm <= args.check_nm else None
        for prec in args.precs.split(","):
            F = fm.BlockToeplitz(cp.asarray(K), prec)
            eng = F._engine
            for adjoint in (False, True):
                n_in = nd if adjoint else nm
                x = cp.asarray(rng.standard_normal((n_in, nt)))
                run = (lambda: F.rmatvec(x)) if adjoint else (lambda: F.matvec(x))

                def mode(fold: int):
                    _gpu.FOLD_MAX_SPLITS = fold
                    eng._products.clear()  # made again with the setting
                    F._one_paths.clear()
                    run()  # the general path once, then the one-vector shortcut

                def sync(fold):
                    mode(fold)
                    return median_time(cp, run, args.repeat)

                def b2b(fold):
                    mode(fold)
                    return back_to_back_time(cp, run, args.repeat)

                mode(default)
                product = eng.fused_product(F.precision, adjoint, 1, x.dtype, F.dtype)
                splits = 0 if product is None else product.split_sum
                if not splits:
                    _gpu.FOLD_MAX_SPLITS = default
                    continue  # nothing to compare: this product sums no splits in its FFT
                y_fold = cp.asnumpy(run())
                mode(0)
                y_sum = cp.asnumpy(run())
                sf, ss = interleaved(lambda: sync(default), lambda: sync(0))
                bf, bs = interleaved(lambda: b2b(default), lambda: b2b(0))
                _gpu.FOLD_MAX_SPLITS = default
                diff = rel(y_fold, y_sum)
                vs = "-"
                if ref is not None:
                    want = ref.rmatvec(cp.asnumpy(x)) if adjoint else ref.matvec(cp.asnumpy(x))
                    err_fold, err_sum = rel(y_fold, want), rel(y_sum, want)
                    vs = f"{err_fold:8.1e}"
                    if err_fold > 2 * err_sum + 1e-15:
                        bad += 1
                        vs += " !"
                print(f"{nm:>7} {nd:>4} {nt:>5} {prec:>6} {'adj' if adjoint else 'fwd':>4} "
                      f"{splits:>6} | {ss * 1e6:9.1f} {sf * 1e6:9.1f} {(ss - sf) * 1e6:6.1f} | "
                      f"{bs * 1e6:9.1f} {bf * 1e6:9.1f} {(bs - bf) * 1e6:6.1f} | {diff:8.1e} "
                      f"{vs:>8}", flush=True)
            del F, eng
            cp.get_default_memory_pool().free_all_blocks()
    if bad:
        print(f"{bad} products less accurate with the fold than with the sum kernel")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
