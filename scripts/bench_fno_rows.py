"""Benchmark the FNO layer's transforms on kernels: the row FFTs and the planes against GEMMs.

For the rows of each size of scripts/bench_fno.py (B C prod(grid[:-1]) rows of grid[-1]
points, the layer's kept bins of the last axis), on one CUDA device in one run: the median time
of ``torch.matmul`` with the DFT matrix the kernel replaces (IEEE float32, no TF32), and of
:class:`fftmatvec.fno._rows.LastAxis` at 1 to 64 rows per block, forward (``r2c``: rows to
bins) and inverse (``c2r``); and the kernels' best bandwidth (bytes in and out over the best
time). These set ``FNO_ROWS_R2C_MIN`` (fftmatvec/gpu/rules.py) and ``_rows.ROWS_BYTES``.

With ``--plane``, for the sizes of two or three axes instead: the last two axes of every plane
(B C prod(grid[:-2]) planes) on :class:`fftmatvec.fno._rows.Plane`, forward (``r2c``, the
analysis) and inverse (``c2r``, the synthesis), over its threads, rows per step of the last
axis and columns per step of the first (the pass form), and in the warp form where it takes the
plane, against the chain's steps it replaces (the last axis as the planner runs it, then the
GEMM of the first) in the same run. With ``--forms``, the plane kernels' two forms against
each other on a few planes (:data:`FORMS`), and the warp form's r2c with its rows loaded
ahead. With ``--row-forms``, the last axis's kernels of every size in both forms and both
layouts of the spectral side (rows, and modes-major as the split modes take it), the warp form
over its rows per block where it takes the axis, against the GEMMs they replace in
the same layout. With ``--products``, the channel product of every size in three layouts of the
modes: interleaved ``(B, C, 2, M)`` (the permutes and the complex GEMM of
``_dft.mode_product_complex``), split ``(2, M, B, C)`` (the weight split and four real GEMMs of
``_dft.mode_product_split``) and paired ``(M, B, 2C)`` (each row's real parts beside its
imaginary parts: one real GEMM a mode with the weight as the real ``(2C, 2O)`` block matrix, built
in the call), to see what a layout the kernels could write would gain; and the complex
modes-major ``(M, B, C)`` that the paired chain keeps, its product on cuBLAS (``complex``) and on
the package's kernel (``kernel``: ``fftmatvec/fno/_product.py``). With ``--long-rows``, rows
of 1024-16384 points (:data:`LONG_ROWS`) in every form of the last axis's kernels that takes
them (the pass form, the column form), against the GEMM and the
device's copy bandwidth measured in the same run. With ``--fused``, a one-axis layer's forward
in one kernel (``fftmatvec/fno/_fused1d.py``) against the paired chain's three launches it
replaces (the analysis's row kernel, cuBLAS's batched complex GEMM, the synthesis's row kernel,
timed alone and in turn) over batches of :data:`FUSED_LAYERS`, with the floor (``x`` and ``y``
once, the weight once, over a device copy's bandwidth in the same run). With ``--direct``,
the planes' direct form (:class:`fftmatvec.fno._rows.DirectPlane`) on the planes of
:data:`DIRECT_FORMS` (the benchmark's two-axis layers' planes), both directions, against the
FFT forms' warp or pass kernel where they take the plane and the chain's GEMMs of both axes
(the analysis and the synthesis as :class:`fftmatvec.fno._dft.Chain` runs them), with the
floor (the plane read or written once over the copy's bandwidth).

Usage::

    python scripts/bench_fno_rows.py [--reps N] [--plane | --forms | --row-forms | --long-rows |
                                      --products | --fused | --direct]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bench_fno import SIZES
from fftmatvec.fno import _dft, kept_modes
from fftmatvec.fno._rows import (PLANE_AHEAD_ROWS, LastAxis, Plane, plane_supported,
                                 row_warp_supported, supported, warp_supported)

RPB = (1, 2, 4, 8, 16, 32, 64)
PLANE_THREADS = (128, 256)
PLANE_RPB = (4, 8, 16, 32)
PLANE_COLUMNS = (1, 2, 4, 8, 16)


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


def planes(reps, dev):
    """The plane kernels over their threads, rows and columns per step, against the steps of
    the chain (without planes) that they replace."""
    from fftmatvec.fno import _torch_dft
    from fftmatvec.fno._plan import fno_rows

    print(f"{'case':>28} {'kind':>4} {'thr':>4} {'rpb':>4} {'chain':>7} "
          + " ".join(f"{'g' + str(g):>7}" for g in PLANE_COLUMNS) + f" {'best GB/s':>9}")
    for B, C, grid, m in SIZES:
        if len(grid) < 2:
            continue
        modes = kept_modes((m,) * len(grid))
        (n0, n1), (m0, m1) = grid[-2:], modes[-2:]
        P = B * C * int(np.prod(grid[:-2]))
        if not plane_supported(n0, n1, m0, m1, 227 * 1024):
            print(f"{str((B, C, grid, m)):>28} no plane kernel")
            continue
        rows = fno_rows(n1, m1, "float32", dev.index)
        chain = _torch_dft._chain(str(dev), "float32", (n0, n1), (m0, m1), rows, frozenset())
        x = torch.randn(P, 1, n0, n1, device=dev)
        Y = torch.randn(P, 1, 2, m0 * m1, device=dev)
        for kind, inp, step in (("r2c", x, chain.analysis), ("c2r", Y, chain.synthesis)):
            t_chain = timed(lambda: step(inp), reps)
            flat = inp.reshape(P, -1)
            best = float("inf")
            for thr in PLANE_THREADS:
                for r in PLANE_RPB:
                    ts = []
                    for g in PLANE_COLUMNS:
                        t = Plane(kind, n0, n1, m0, m1, np.arange(m0), 1.0, 1.0, dev.index,
                                  rows_per_block=r, columns=g, threads=thr, variant="passes")
                        tt = timed(lambda: t(flat), reps) if (t.rows_per_block, t.columns) \
                            == (min(r, n0), min(g, m1)) else float("nan")
                        ts.append(tt)
                        best = min(best, tt) if tt == tt else best
                    print(f"{str((B, C, grid, m)):>28} {kind:>4} {thr:>4} {r:>4} "
                          f"{t_chain:7.1f} " + " ".join(f"{v:7.1f}" for v in ts), flush=True)
            gbs = 4 * P * (n0 * n1 + 2 * m0 * m1) / best / 1e3
            warp = "no warp form"
            if warp_supported(n0, n1, m0, m1, 227 * 1024):
                t = Plane(kind, n0, n1, m0, m1, np.arange(m0), 1.0, 1.0, dev.index,
                          variant="warp")
                tw = timed(lambda: t(flat), reps)
                gbs_w = 4 * P * (n0 * n1 + 2 * m0 * m1) / tw / 1e3
                warp = f"warp form {tw:.1f} us, {gbs_w:.0f} GB/s"
            print(f"{str((B, C, grid, m)):>28} {kind:>4} best {best:.1f} us, chain "
                  f"{t_chain:.1f} us, {gbs:.0f} GB/s; {warp}", flush=True)


# (planes, n0, n1, m0, m1) for --forms: 2^28 bytes of planes each; the benchmark's planes, those
# that keep an eighth of their first axis, every mode with the Nyquist bin, a non-square plane
FORMS = [(16384, 64, 64, 16, 9), (4096, 128, 128, 16, 9), (1024, 256, 256, 64, 33),
         (1024, 256, 256, 32, 17), (32768, 32, 64, 32, 33), (8192, 64, 128, 20, 65)]


def forms(reps, dev):
    """The plane kernels' two forms against each other, each direction: the median time of a
    launch over 2^28 bytes of planes, and the largest difference of their outputs over the
    largest value (both are tested against NumPy's float64 FFTs in tests/test_fno_plane.py)."""
    rng = np.random.default_rng(5)
    print(f"{'planes':>18} {'modes':>9} {'kind':>4} {'passes':>8} {'warp':>8} {'speed-up':>8} "
          f"{'differ':>8} {'ahead':>8} {'differ':>8}")
    for P, n0, n1, m0, m1 in FORMS:
        bins = rng.permutation(n0)[:m0]
        s1 = rng.uniform(0.5, 2.0, m1)
        for kind in ("r2c", "c2r"):
            ts = {v: Plane(kind, n0, n1, m0, m1, bins, 0.75, s1, dev.index, variant=v,
                           ahead=False) for v in ("passes", "warp")}
            if kind == "r2c" and n1 // 64 in PLANE_AHEAD_ROWS:  # the warp form, rows ahead
                ts["ahead"] = Plane(kind, n0, n1, m0, m1, bins, 0.75, s1, dev.index,
                                    variant="warp", ahead=True)
            x = torch.randn(P, ts["warp"].shape[0], device=dev)
            outs = {v: t(x) for v, t in ts.items()}
            scale = outs["passes"].abs().max()
            differ = {v: float((o - outs["passes"]).abs().max() / scale) for v, o in outs.items()}
            us = {v: timed(lambda t=t: t(x), reps) for v, t in ts.items()}
            ahead = (f"{us['ahead']:8.1f} {differ['ahead']:8.1e}" if "ahead" in us
                     else f"{'':>8} {'':>8}")
            print(f"{P:>7} x {str((n0, n1)):>10} {str((m0, m1)):>9} {kind:>4} "
                  f"{us['passes']:8.1f} {us['warp']:8.1f} {us['passes'] / us['warp']:7.2f}x "
                  f"{differ['warp']:8.1e} {ahead}", flush=True)


#: rows per block of the warp form swept by --row-forms
WARP_RPB = (8, 16, 32, 64)


def row_forms(reps, dev):
    """The last axis's kernels in both forms and both layouts against the GEMMs (the median
    time of a launch, µs), and the largest difference between the forms' outputs over the
    largest value (both are tested against the float64 matrices in tests/test_fno_rows.py)."""
    print(f"{'case':>28} {'kind':>4} {'layout':>6} {'gemm':>7} {'passes':>7} "
          + " ".join(f"{'w' + str(r):>6}" for r in WARP_RPB) + f" {'best GB/s':>9} {'differ':>8}")
    for B, C, grid, m in SIZES:
        L, mm = grid[-1], kept_modes((m,) * len(grid))[-1]
        if not supported(L, mm, 227 * 1024):
            continue
        n_rows = B * C * int(np.prod(grid[:-1]))
        F = torch.as_tensor(_dft.analysis_last(L, mm), dtype=torch.float32, device=dev)
        A = torch.as_tensor(_dft.synthesis_last(L, mm), dtype=torch.float32, device=dev)
        FT = F.T.contiguous()
        x = torch.randn(n_rows, L, device=dev)
        for layout in ("rows", "modes"):
            major = layout == "modes"
            Y = torch.randn((2 * mm, n_rows) if major else (n_rows, 2 * mm), device=dev)
            gemms = {"r2c": (lambda: FT @ x.T) if major else (lambda: x @ F),
                     "c2r": (lambda: Y.T @ A) if major else (lambda: Y @ A)}
            for kind, inp in (("r2c", x), ("c2r", Y)):
                t_gemm = timed(gemms[kind], reps)
                passes = LastAxis(kind, L, mm, np.ones(mm), dev.index, modes_major=major,
                                  variant="passes")
                t_pass = timed(lambda: passes(inp), reps)
                tw = [float("nan")] * len(WARP_RPB)
                differ = float("nan")
                if row_warp_supported(L, mm, 227 * 1024):
                    for i, r in enumerate(WARP_RPB):
                        w = LastAxis(kind, L, mm, np.ones(mm), dev.index, rows_per_block=r,
                                     modes_major=major, variant="warp")
                        tw[i] = timed(lambda w=w: w(inp), reps)
                    want = passes(inp)
                    differ = float((w(inp) - want).abs().max() / want.abs().max())
                best = min([t_pass] + [v for v in tw if v == v])
                gbs = 4 * n_rows * (L + 2 * mm) / best / 1e3
                print(f"{str((B, C, grid, m)):>28} {kind:>4} {layout:>6} {t_gemm:7.1f} "
                      f"{t_pass:7.1f} " + " ".join(f"{v:6.1f}" for v in tw)
                      + f" {gbs:9.0f} {differ:8.1e}", flush=True)


#: (L, m) for --long-rows: 2^26 bytes of rows each; the benchmark's 4096-point axis, shorter
#: and longer rows, a few bins and many, a length whose complex FFT is not 5-smooth (1088)
LONG_ROWS = [(4096, 64), (4096, 16), (4096, 129), (2048, 64), (1024, 64), (1024, 33),
             (8192, 64), (16384, 64), (1088, 40)]


#: rows per block of the column form swept by --long-rows
COLS_RPB = (1, 2, 4, 8)


def copy_bandwidth(dev, reps):
    """GB/s of a 64 MiB device copy (2^27 bytes moved)."""
    buf = torch.empty(2 ** 26 // 4, device=dev)
    return 2 ** 27 / timed(lambda: buf.clone(), reps) / 1e3


def long_rows(reps, dev):
    """Long rows in both forms of the last axis's kernels that take them (passes, columns; the
    column form over its rows per block), rows and paired layouts, against the GEMM (rows layout)
    in the same run: the median time of a launch (µs), the bandwidth of the best form over the
    bytes in and out, the device's copy bandwidth over the same bytes as a fraction, and the
    largest difference of the column form to the float64 matrix over its largest value."""
    copy_gbs = copy_bandwidth(dev, reps)
    print(f"copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'L':>6} {'m':>4} {'rows':>6} {'kind':>4} {'layout':>6} {'gemm':>7} {'passes':>7} "
          f"{'columns':>7} " + " ".join(f"{'c' + str(r):>6}" for r in COLS_RPB)
          + f" {'best GB/s':>9} {'of copy':>7} {'error':>8}")
    for L, m in LONG_ROWS:
        n_rows = 2 ** 24 // L
        x = torch.randn(n_rows, L, device=dev)
        F = _dft.analysis_last(L, m)
        A = _dft.synthesis_last(L, m)
        Ft = torch.as_tensor(F, dtype=torch.float32, device=dev)
        At = torch.as_tensor(A, dtype=torch.float32, device=dev)
        for layout in ("rows", "paired"):
            major = "paired" if layout == "paired" else False
            s = torch.randn(n_rows, 2 * m, device=dev)
            Y = s.reshape(-1, 2, m).permute(2, 0, 1).reshape(m, -1).contiguous() if major else s
            for kind, inp in (("r2c", x), ("c2r", Y)):
                t_gemm = float("nan")
                if not major:
                    t_gemm = timed((lambda: x @ Ft) if kind == "r2c" else (lambda: s @ At), reps)
                us = {}
                for variant in ("passes", "columns"):
                    try:
                        t = LastAxis(kind, L, m, np.ones(m), dev.index, modes_major=major,
                                     variant=variant)
                    except ValueError:  # the form does not take the axis
                        continue
                    us[variant] = timed(lambda t=t: t(inp), reps)
                    if variant == "columns":
                        for r in COLS_RPB:  # its rows per block swept
                            c = LastAxis(kind, L, m, np.ones(m), dev.index, modes_major=major,
                                         variant=variant, rows_per_block=r)
                            if c.rows_per_block == r:
                                us[f"c{r}"] = timed(lambda c=c: c(inp), reps)
                        got = t(inp).double().cpu().numpy()
                        if kind == "r2c":  # scale 1, F's is 1 / L
                            want = x.double().cpu().numpy() @ F * L
                            if major:
                                want = want.reshape(-1, 2, m).transpose(2, 0, 1).reshape(m, -1)
                        else:
                            want = s.double().cpu().numpy() @ A
                        err = np.abs(got - want).max() / np.abs(want).max()
                best = min(us.values(), default=float("nan"))
                gbs = 4 * n_rows * (L + 2 * m) / best / 1e3
                print(f"{L:>6} {m:>4} {n_rows:>6} {kind:>4} {layout:>6} {t_gemm:7.1f} "
                      + " ".join(f"{us.get(v, float('nan')):7.1f}"
                                 for v in ("passes", "columns")) + " "
                      + " ".join(f"{us.get(f'c{r}', float('nan')):6.1f}" for r in COLS_RPB)
                      + f" {gbs:9.0f} {gbs / copy_gbs:7.2f} "
                      + (f"{err:8.1e}" if "columns" in us else f"{'':>8}"), flush=True)


def paired_weight(Wc):
    """The complex weight ``(M, C, O)`` as the real ``(M, 2C, 2O)`` block matrix ``[[Re W,
    Im W], [-Im W, Re W]]``: ``[Re X, Im X] @ it = [Re XW, Im XW]``."""
    M, C, O = Wc.shape
    Wb = torch.empty((M, 2, C, 2, O), dtype=Wc.real.dtype, device=Wc.device)
    Wb[:, 0, :, 0], Wb[:, 0, :, 1] = Wc.real, Wc.imag
    Wb[:, 1, :, 0], Wb[:, 1, :, 1] = -Wc.imag, Wc.real
    return Wb.reshape(M, 2 * C, 2 * O)


def products(reps, dev):
    """The channel product in the three layouts, µs a call (the layout's own weight
    preparation included), and the largest difference of the split and paired products to
    the interleaved one over its largest value."""
    from fftmatvec.fno import _torch_dft
    from fftmatvec.fno._product import ModeProduct, supported

    ops = _torch_dft._ops(torch.float32, dev)
    kernel = ModeProduct(dev.index)
    print(f"{'case':>28} {'M':>6} {'interleaved':>11} {'split':>8} {'paired':>8} "
          f"{'complex':>8} {'kernel':>8} {'differ split, paired, kernel':>30}")
    for B, C, grid, m in SIZES:
        M = int(np.prod(kept_modes((m,) * len(grid))))
        X = torch.randn(B, C, 2, M, device=dev)
        Wc = torch.randn(M, C, C, dtype=torch.complex64, device=dev)
        Xs = X.permute(2, 3, 0, 1).contiguous()                   # (2, M, B, C)
        Xp = X.permute(3, 0, 2, 1).reshape(M, B, 2 * C).contiguous()

        def interleaved():
            return _dft.mode_product_complex(ops, X, Wc)[0]

        def split():
            return _dft.mode_product_split(ops, Xs, _dft.split_weight(ops, Wc))

        def paired():
            return torch.bmm(Xp, paired_weight(Wc))

        Xc = torch.view_as_complex(X.permute(3, 0, 1, 2).contiguous())  # (M, B, C) complex

        def complex_paired():  # the paired modes' product on cuBLAS
            return Xc @ Wc

        def product_kernel():  # on the package's kernel (_product.ModeProduct)
            return kernel(Xc, Wc)

        want = interleaved()                                       # (B, O, 2, M)
        got_s = split().permute(2, 3, 0, 1)
        got_p = paired().reshape(M, B, 2, C).permute(1, 3, 2, 0)
        got_k = (torch.view_as_real(product_kernel()).permute(1, 2, 3, 0)
                 if supported(C, C) else None)
        scale = want.abs().max()
        differ = [float((g - want).abs().max() / scale) if g is not None else float("nan")
                  for g in (got_s, got_p, got_k)]
        us = [timed(f, reps) for f in (interleaved, split, paired, complex_paired)]
        us.append(timed(product_kernel, reps) if supported(C, C) else float("nan"))
        print(f"{str((B, C, grid, m)):>28} {M:6d} {us[0]:11.1f} {us[1]:8.1f} {us[2]:8.1f} "
              f"{us[3]:8.1f} {us[4]:8.1f} {differ[0]:10.1e} {differ[1]:10.1e} "
              f"{differ[2]:10.1e}", flush=True)


#: (C, L, m, batches) of ``--fused``: the benchmark's one-axis layer first
FUSED_LAYERS = [(64, 128, 33, (1024, 512, 128, 64)), (64, 64, 17, (2048, 256)),
                (64, 256, 65, (512, 128)), (128, 128, 33, (512, 128))]
#: (batch rows a block, rows an item, threads) of the kernel timed beside its default for blocks
#: of 8 batch rows (4 batch rows a block: two or three blocks a multiprocessor)
FUSED_VARIANTS = [(8, 4, 704), (8, 4, 544), (8, 8, 640), (8, 8, 544), (8, 8, 352),
                  (4, 4, 256), (4, 4, 320), (4, 4, 384), (4, 4, 512)]


def fused(reps, dev):
    """The one-kernel layer against the chain's three launches, µs a forward."""
    from fftmatvec.fno._fused1d import Layer1d, launch_shape
    from fftmatvec.fno._rows import last_axis_set

    copy_gbs = copy_bandwidth(dev, reps)
    print(f"copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'B':>6} {'C':>4} {'L':>4} {'m':>3} {'NB':>3} {'RB':>2} {'thr':>4} {'r2c':>7} "
          f"{'cgemm':>7} "
          f"{'c2r':>7} {'chain':>7} {'fused':>7} {'chain/fused':>11} {'floor':>7} "
          f"{'floor/fused':>11} {'differ':>8}")
    for C, L, m, batches in FUSED_LAYERS:
        rows = last_axis_set(L, m, dev.index, modes_major="paired")
        layer = Layer1d(L, m, C, rows["F"], rows["A"], dev.index)
        W = torch.randn(m, C, C, dtype=torch.complex64, device=dev) / C
        b = torch.randn(C, device=dev)
        for B in batches:
            x = torch.randn(B, C, L, device=dev)
            H = rows["F"](x.reshape(-1, L))
            Xc = torch.view_as_complex(H.reshape(m, B, C, 2))
            Y = Xc @ W
            Yr = torch.view_as_real(Y).reshape(m, -1)

            def chain():
                Yc = torch.view_as_complex(rows["F"](x.reshape(-1, L)).reshape(m, B, C, 2)) @ W
                Yc.real[0] += b
                return rows["A"](torch.view_as_real(Yc).reshape(m, -1)).reshape(B, C, L)

            want = chain()
            got = layer(x, W, b)
            differ = float((got - want).abs().max() / want.abs().max())
            us = [timed(lambda: rows["F"](x.reshape(-1, L)), reps), timed(lambda: Xc @ W, reps),
                  timed(lambda: rows["A"](Yr), reps), timed(chain, reps),
                  timed(lambda: layer(x, W, b), reps)]
            floor = (2 * x.numel() * 4 + W.numel() * 8) / copy_gbs / 1e3
            nb, rb, _, block, _ = launch_shape(B, L, C, m, layer.smem_limit)
            print(f"{B:6d} {C:4d} {L:4d} {m:3d} {nb:3d} {rb:2d} {block[0]:4d} "
                  + " ".join(f"{u:7.1f}" for u in us)
                  + f" {us[3] / us[4]:11.2f} {floor:7.1f} {floor / us[4]:11.2f} {differ:8.1e}",
                  flush=True)
            if C == 64 and nb == 8:  # the kernel's other shapes: rows an item, threads
                for nb_, rb_, threads in FUSED_VARIANTS:
                    other = Layer1d(L, m, C, rows["F"], rows["A"], dev.index, rb_, threads, nb_)
                    t = timed(lambda: other(x, W, b), reps)
                    d = float((other(x, W, b) - want).abs().max() / want.abs().max())
                    print(f"{'':>17} {nb_:3d} {rb_:2d} {threads:4d} {'':>39} {t:7.1f} "
                          f"{us[3] / t:11.2f} "
                          f"{'':>7} {floor / t:11.2f} {d:8.1e}", flush=True)


#: (planes, n0, n1, m0, m1) of ``--direct``: the planes of the benchmark's layers (20, 32,
#: 85², 12), (32, 64, 64², 16), (32, 64, 128², 16), (4, 32, 64³, 16), and 85² at 16x the batch
DIRECT_FORMS = [(640, 85, 85, 12, 7), (10240, 85, 85, 12, 7), (2048, 64, 64, 16, 9),
                (2048, 128, 128, 16, 9), (8192, 64, 64, 16, 9)]


def direct(reps, dev):
    """The planes' direct form against the FFT forms and the GEMMs, µs a launch."""
    from fftmatvec.fno._rows import plane_set
    from fftmatvec.fno._torch_dft import _ops

    copy_gbs = copy_bandwidth(dev, reps)
    print(f"copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'planes':>18} {'modes':>8} {'kind':>4} {'gemms':>7} {'fft':>7} {'direct':>7} "
          f"{'floor':>7} {'floor/direct':>12} {'differ':>8}")
    for P, n0, n1, m0, m1 in DIRECT_FORMS:
        chain = _dft.Chain(_ops(torch.float32, dev), (n0, n1), (m0, m1))
        fft = None
        if plane_supported(n0, n1, m0, m1, 227 * 1024):
            fft = plane_set((n0, n1), (m0, m1), dev.index)
        ours = plane_set((n0, n1), (m0, m1), dev.index, variant="direct")
        x = torch.randn(1, P, n0, n1, device=dev)
        Y = torch.randn(1, P, 2, m0 * m1, device=dev)
        for kind, name, inp, step in (("r2c", "ana", x, chain.analysis),
                                      ("c2r", "syn", Y, chain.synthesis)):
            flat = inp.reshape(P, -1)
            t_gemm = timed(lambda: step(inp), reps)
            t_fft = timed(lambda: fft[name](flat), reps) if fft else float("nan")
            t_dir = timed(lambda: ours[name](flat), reps)
            want = step(inp).reshape(P, -1)
            differ = float((ours[name](flat) - want).abs().max() / want.abs().max())
            floor = 4 * P * n0 * n1 / copy_gbs / 1e3
            print(f"{P:>7} x {str((n0, n1)):>10} {str((m0, m1)):>8} {kind:>4} {t_gemm:7.1f} "
                  f"{t_fft:7.1f} {t_dir:7.1f} {floor:7.1f} {floor / t_dir:12.2f} "
                  f"{differ:8.1e}", flush=True)


def rows(reps, dev):
    """The last axis's kernels (pass form) over their rows per block against the GEMMs."""
    print(f"{'case':>28} {'kind':>4} {'gemm':>7} " + " ".join(f"rpb{r:>3}" for r in RPB)
          + f" {'best GB/s':>9}")
    for B, C, grid, m in SIZES:
        L, mm = grid[-1], kept_modes((m,) * len(grid))[-1]
        n_rows = B * C * int(np.prod(grid[:-1]))
        x = torch.randn(n_rows, L, device=dev)
        Y = torch.randn(n_rows, 2 * mm, device=dev)
        F = torch.as_tensor(_dft.analysis_last(L, mm), dtype=torch.float32, device=dev)
        A = torch.as_tensor(_dft.synthesis_last(L, mm), dtype=torch.float32, device=dev)
        for kind, inp, M in (("r2c", x, F), ("c2r", Y, A)):
            t_gemm = timed(lambda: inp @ M, reps)
            ts = [float("nan")] * len(RPB)
            if supported(L, mm, 227 * 1024):
                for i, r in enumerate(RPB):
                    t = LastAxis(kind, L, mm, np.ones(mm), dev.index, rows_per_block=r,
                                 variant="passes")
                    ts[i] = timed(lambda: t(inp), reps)
            best = min((v for v in ts if v == v), default=float("nan"))
            gbs = 4 * n_rows * (L + 2 * mm) / best / 1e3
            print(f"{str((B, C, grid, m)):>28} {kind:>4} {t_gemm:7.1f} "
                  + " ".join(f"{v:6.1f}" for v in ts) + f" {gbs:9.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--plane", dest="what", action="store_const", const=planes,
                      help="the plane kernels instead of rows")
    what.add_argument("--forms", dest="what", action="store_const", const=forms,
                      help="the plane kernels' warp form against their pass form")
    what.add_argument("--row-forms", dest="what", action="store_const", const=row_forms,
                      help="the last axis's kernels, both forms and layouts, against the GEMMs")
    what.add_argument("--long-rows", dest="what", action="store_const", const=long_rows,
                      help="long rows in both forms of the last axis's kernels")
    what.add_argument("--products", dest="what", action="store_const", const=products,
                      help="the channel product in three layouts of the modes")
    what.add_argument("--direct", dest="what", action="store_const", const=direct,
                      help="the planes' direct form against the FFT forms and the GEMMs")
    what.add_argument("--fused", dest="what", action="store_const", const=fused,
                      help="a one-axis layer's forward in one kernel against the chain")
    args = ap.parse_args()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    dev = torch.device("cuda", torch.cuda.current_device())
    print(f"device: {torch.cuda.get_device_name(dev)}; times in us")
    (args.what or rows)(args.reps, dev)


if __name__ == "__main__":
    main()
