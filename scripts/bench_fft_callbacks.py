#!/usr/bin/env python
"""Stages 1+2 and 4+5: the pad kernel then cuFFT, against cuFFT with the padding as a load
callback; cuFFT then the unpad kernel, against cuFFT with the unpadding as a store callback
(NVIDIA). Each pair is timed in the same run, with its floor: the bytes the fused stage must
move (the unpadded vector once, the FFT's complex output once) over the copy bandwidth measured
in that run. Also prints how long cuFFT takes to make each callback plan, and the largest
difference between the fused and the unfused result.

Usage: python scripts/bench_fft_callbacks.py [--sizes 5000x1000,...] [--precisions ddddd,...]

A size may name FFT lengths after it (``5000x1000:2000:2048``); by default it runs at the
smallest fast length ``fft_length(Nt)``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from fftmatvec.gpu.plan import FFT_CALLBACKS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="5000x1000,20000x500,100000x100,100x1000,3x50000",
                    help="rows x Nt[:L...]: rows transformed at once (Nm forward, Nm adjoint), "
                         "samples, FFT lengths")
    ap.add_argument("--precisions", default="ddddd,sssss,ddhdd")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)

    import cupy as cp

    from fftmatvec import fft_length
    from fftmatvec.gpu import callbacks as _fftcb
    from fftmatvec.gpu import KernelEngine
    from fftmatvec.precision import PrecisionConfig

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_matvec import copy_bandwidth, median_time

    # this script compares cuFFT with callbacks against the stages one by one: the row FFT
    # kernels (scripts/bench_row_fft.py) stay out of the fused plans it builds
    ok, why = _fftcb.support()
    if not ok:
        print(f"cuFFT callbacks are not available here: {why}")
        return 1
    bw = copy_bandwidth(cp)
    print(f"# copy bandwidth (read+write): {bw / 1e12:.3f} TB/s; cuFFT {_fftcb._libs().version}")
    hdr = (f"{'rows':>7} {'Nt':>6} {'L':>6} {'prec':>6} | {'pad':>6} {'fft':>6} {'sum':>6} {'fused':>6} "
           f"{'floor':>6} | {'ifft':>6} {'unpad':>6} {'sum':>6} {'fused':>6} {'floor':>6} | "
           f"{'plan s':>6} {'max diff':>8}")
    print("\n## pad + FFT against the FFT with a padding load callback; inverse FFT + unpad against "
          "the inverse FFT with an unpadding store callback (ms; float64 input and output)")
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(3)
    for size in args.sizes.split(","):
        shape, *lengths = size.split(":")
        rows, nt = (int(v) for v in shape.split("x"))
        x = cp.asarray(rng.standard_normal((1, rows, nt)))
        for L, p in ((int(L), p) for L in (lengths or [fft_length(nt)])
                     for p in args.precisions.split(",")):
            if L < 2 * nt - 1:
                raise SystemExit(f"FFT length {L} is below 2*Nt - 1 = {2 * nt - 1}")
            nf = L // 2 + 1
            prec = PrecisionConfig(p)
            eng = KernelEngine(prec, 1, rows, nf, nt, L)  # one output row: Khat stays small
            cb = (FFT_CALLBACKS, FFT_CALLBACKS)  # cuFFT with callbacks, both ways
            t0 = time.perf_counter()
            fwd = eng.ffts.fused_plans(prec, False, 1, np.float64, np.float64, cb)  # rows -> 1 row
            inv = eng.ffts.fused_plans(prec, True, 1, np.float64, np.float64, cb)  # 1 row -> rows
            plan_s = time.perf_counter() - t0
            # forward: pad kernel + cuFFT against the load callback
            padded = eng.pad(x, prec)
            xhat = eng.fft(padded)
            fused_xhat = eng.buffers.xhat_buffer(prec, 1, rows)
            eng.ffts.pad_fft(fwd, x, out=fused_xhat)
            diff = float(cp.abs(fused_xhat - xhat).max() / cp.abs(xhat).max())
            t_pad = median_time(cp, lambda: eng.pad(x, prec, out=padded), args.repeat)
            t_fft = median_time(cp, lambda: eng.fft(padded, out=xhat), args.repeat)
            t_fwd = median_time(cp, lambda: eng.ffts.pad_fft(fwd, x, out=fused_xhat), args.repeat)
            floor_f = (x.nbytes + fused_xhat.nbytes) / bw
            # inverse: cuFFT + unpad kernel against the store callback (the input is overwritten)
            yhat = xhat.astype(prec.complex_dtype("ifft"))
            work = yhat.copy()
            ypad = eng.ifft(work)
            y = eng.unpad(ypad, prec, nt, np.float64)
            fused_y = eng.buffers.y_buffer(prec, 1, rows, np.float64)
            # the fused inverse reads stage 3's output in its own dtype (complex64 where stage
            # 3 computes in float32): the same values, exactly widened
            fused_in = eng.buffers.yhat_buffer(prec, 1, rows)
            fused_in[...] = yhat
            eng.ffts.ifft_unpad(inv, fused_in, out=fused_y)
            diff = max(diff, float(cp.abs(fused_y - y).max() / cp.abs(y).max()))
            t_ifft = median_time(cp, lambda: eng.ifft(work, out=ypad), args.repeat)
            t_unpad = median_time(cp, lambda: eng.unpad(ypad, prec, nt, np.float64, out=y), args.repeat)
            t_inv = median_time(cp, lambda: eng.ffts.ifft_unpad(inv, fused_in, out=fused_y),
                                args.repeat)
            floor_i = (fused_in.nbytes + fused_y.nbytes) / bw
            ms = [v * 1e3 for v in (t_pad, t_fft, t_pad + t_fft, t_fwd, floor_f,
                                    t_ifft, t_unpad, t_ifft + t_unpad, t_inv, floor_i)]
            print(f"{rows:>7} {nt:>6} {L:>6} {p:>6} | " + " ".join(f"{v:6.3f}" for v in ms[:5]) + " | "
                  + " ".join(f"{v:6.3f}" for v in ms[5:]) + f" | {plan_s:6.2f} {diff:8.1e}")
            sys.stdout.flush()
            del eng, padded, xhat, fused_xhat, yhat, work, ypad, y, fused_y, fused_in
            cp.get_default_memory_pool().free_all_blocks()
        del x
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
