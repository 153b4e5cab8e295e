#!/usr/bin/env python
"""Sweep the stage-3 kernels' tile shapes (RT rows x V frequencies per thread, block shape,
split-K target; for one right-hand side also the staged kernel's RT, V and TY and the cp.async
kernel's (RT, TY, J, NS) and split-K target; for several the
tensor-core kernel's tiles (MT, V, WR, WF, KS, NS) and split-K target, and for adjoints over
at most 12 sensors the input-in-registers kernel's frequencies and rows per block) and print the
fastest per case, as a fraction of the floor. Used to set the defaults in fftmatvec/gpu/rules.py.

Every launch of a case is made first, then timed in two passes, the second in the reverse
order, keeping its faster time: in one pass the first launches of a sweep ran slower than the
same launches later in it, which favoured whatever came last.

Usage: python scripts/tune_sbgemv.py [--sizes 5000x100x1000,...]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000x100x1000,5000x100x1000,20000x50x500,100000x10x100")
    ap.add_argument("--stores", default="d,s,h")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--k", type=int, default=1, help="right-hand sides (1, or 16 for the batched tiles)")
    ap.add_argument("--blocks-per-sm", default="8,16,32")
    ap.add_argument("--unstaged", default="all", choices=["all", "default", "wide"],
                    help="sweep every unstaged tile, time only its default, or sweep only the "
                         "one-vector tiles of several frequency groups")
    ap.add_argument("--no-staged", action="store_true", help="leave out the staged kernel's sweep")
    ap.add_argument("--pipe-splits", default="",
                    help="split-K counts to time the default tensor-core tile at (k > 1), e.g. "
                         "1,2,3,4,6,8,12,17,24,33,48; then fit PIPE_SPLIT_MODEL to them")
    ap.add_argument("--json", help="also write every timing to this file")
    args = ap.parse_args(argv)
    import cupy as cp

    import fftmatvec as fm
    from fftmatvec.gpu import (ASYNC_TILES, PIPE_TILES, STAGED_TILES, TILES, WIDE_TILES,
                                XREG_MAX_ND, XREG_TILES, pipe_max_splits)
    from fftmatvec.gpu.planning import Overrides, PlanningView, Problem, stage3_launches

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_matvec import copy_bandwidth, median_time, stage3_input, write_json

    bw = copy_bandwidth(cp)
    print(f"# copy bandwidth {bw / 1e12:.3f} TB/s")
    rng = np.random.default_rng(7)
    record = []
    points = []  # the default tensor-core tile at each split-K count of --pipe-splits
    split_points = []  # ... of the case being timed: (its index in cands, the point less its time)
    for size in args.sizes.split(","):
        nm, nd, nt = (int(v) for v in size.split("x"))
        K = cp.asarray(rng.standard_normal((nd, nm, nt)))
        for st in args.stores.split(","):
            F = fm.BlockToeplitz(K, f"dd{st}dd")
            eng = F._engine
            for adjoint in (False, True):
                n_in, n_out, n_red = (nd, nm, nd) if adjoint else (nm, nd, nm)
                k = args.k
                x = cp.asarray(rng.standard_normal((k, n_in, F.nf)) + 1j * rng.standard_normal((k, n_in, F.nf)))
                # the input as the product's forward FFT gives it (complex64 for s and h, where
                # stage 3 computes in float32), the output in complex128 (stage 4's dtype)
                x, scaled = stage3_input(F, x.astype(eng.ffts.xhat_dtype(F.precision)), adjoint)

                def time_plan(plan):
                    return median_time(cp, lambda: eng.apply(x, adjoint, np.complex128, plan=plan,
                                                             xhat_scaled=scaled), args.repeat)

                floor = (F.khat_nbytes + k * F.nf * (n_in * x.itemsize + n_out * 16)) / bw
                cands = []  # (description, plan): all made first, then timed (time_both_ways)
                problem = Problem(nd, nm, nt, F.fft_len, k, adjoint, F.precision.letters)

                def view(**rules):
                    """The planning of this product (its planner and launch builders) with these
                    rules in place of the device's (the split-K targets a candidate sets)."""
                    return PlanningView(problem, eng.device, eng.rules.with_table(rules),
                                        F._overrides)

                base = view()
                default = list(stage3_launches(problem, eng.device, eng.rules, F._overrides,
                                               x.dtype, np.complex128))
                unstaged = list(stage3_launches(  # the GEMV kernel
                    problem, eng.device, eng.rules, Overrides.resolve({"stage3": "gemv"}),
                    x.dtype, np.complex128))
                cands += [("unstaged default", unstaged), ("default", default)]
                if k == 1:  # the default tile of one frequency group (default block), as a reference
                    rt, v = base.builders._tile(k, n_out, adjoint)
                    la = base.builders._launch_gemv(k, n_out, n_red, x.dtype, np.complex128,
                                                    tile=(rt, v, None, None))
                    cands.append(("one-group default", [la]))
                # the GEMV tiles: RT x V (x W groups, one right-hand side) per thread
                tiles = [(rt, v, 1) for rt, kb, v in TILES[eng.store]
                         if kb == k and args.unstaged == "all"]
                if k == 1 and args.unstaged in ("all", "wide"):
                    tiles += WIDE_TILES[eng.store]
                for rt, v, w in tiles:
                    for bx, ty in ((32, 4), (64, 2), (64, 4), (128, 1), (32, 8), (64, 1)):
                        for bps in (int(b) for b in args.blocks_per_sm.split(",")):
                            la = view(gemv_blocks_per_sm=bps).builders._launch_gemv(
                                k, n_out, n_red, x.dtype, np.complex128, tile=(rt, v, bx, ty, w))
                            cands.append((f"rt={rt} v={v} w={w} bx={bx} ty={ty} bps={bps}", [la]))
                if k == 1 and base.planner._sm80_kernels():
                    # the cp.async kernel: (RT, TY, J, NS) and its split-K target
                    for tile in ASYNC_TILES[eng.store]:
                        for waves in (1, 2, 4, 8):
                            la = view(async_waves=waves).builders._launch_async(
                                n_out, n_red, x.dtype, np.complex128, tile=tile, adjoint=adjoint)
                            cands.append((f"async tile={tile} waves={waves}", [la]))
                if k == 1 and not args.no_staged:  # the staged kernel: (RT, V, TY), split-K target
                    for rt, v in STAGED_TILES[eng.store]:
                        for ty in (4, 8, 16):
                            for tps in (1024, 2048):
                                la = view(staged_threads_per_sm=tps).builders._launch_staged(
                                    n_out, n_red, x.dtype, np.complex128, tile=(rt, v, ty))
                                cands.append((f"staged rt={rt} v={v} ty={ty} threads/SM={tps}", [la]))
                if k > 1 and base.planner._mma_min_kb() is not None:  # the tensor-core kernel
                    for tile in PIPE_TILES[base.builders.pipe_store]:
                        for waves in (1, 2, 4, 8):
                            la = view(pipe_waves=waves).builders._launch_pipe(
                                k, n_out, n_red, x.dtype, np.complex128, tile=tile, adjoint=adjoint)
                            cands.append((f"mma tile={tile} waves={waves}", [la]))
                    tile, few_waves = base.builders._pipe_tile(n_out, n_red, adjoint)
                    launches = {}  # the default tile at each split-K count
                    # (the few-row tile splits by rounds, not by the model: no points to fit)
                    for want in (int(v) for v in args.pipe_splits.split(",") if v and few_waves is None):
                        la = view(pipe_splits=want).builders._launch_pipe(
                            k, n_out, n_red, x.dtype, np.complex128, adjoint=adjoint)
                        launches.setdefault(la.splits, la)
                    for sp, la in launches.items():
                        cands.append((f"mma default splits={sp}", [la]))
                        split_points.append((len(cands) - 1, {
                            "case": (size, st, adjoint), "store": base.builders.pipe_store, "adjoint": adjoint,
                            "splits": la.splits,
                            "chunk": la.red_chunk, "base": la.grid[0], "resident": la.resident,
                            "partial_bytes": k * n_out * F.nf * eng.compute.itemsize,
                            "n_red": n_red, "step": tile[4],
                            "max_splits": pipe_max_splits(n_red, tile),
                            "model_choice": default[0].splits if default[0].mma else None}))
                    if default[0].mma:  # the default launch with the other block order
                        la = view(pipe_freq_major=not default[0].freq_major).builders._launch_pipe(
                            k, n_out, n_red, x.dtype, np.complex128, adjoint=adjoint)
                        cands.append((f"mma default order={'frequency' if la.freq_major else 'row'}-major",
                                      [la]))
                if (adjoint and 1 < k <= 16 and eng.nd <= XREG_MAX_ND and base.planner._sm80_kernels()
                        and eng.store in XREG_TILES):  # the input-in-registers kernel
                    for fw in XREG_TILES[eng.store]:
                        for per_block in (4, 8, 16, 32, 64, 128):
                            la = base.builders._launch_xreg(k, x.dtype, np.complex128, fw=fw, rows=per_block)
                            cands.append((f"xreg fw={fw} rows={la.xreg_rows}", [la]))
                timed = time_both_ways([plan for _, plan in cands], time_plan)
                rows = sorted(((t, desc, plan[0]) for t, (desc, plan) in zip(timed, cands)),
                              key=lambda r: r[0])
                times = {desc: t for t, desc, _ in rows}
                points += [{**p, "ms": timed[i] * 1e3} for i, p in split_points]
                split_points.clear()
                d = "adj" if adjoint else "fwd"
                print(f"{nm}x{nd}x{nt} k={k} {st} {d}: default {times['default'] * 1e3:.3f} ms "
                      f"({floor / times['default']:.2f} of floor), GEMV default "
                      f"{times['unstaged default'] * 1e3:.3f} ms ({floor / times['unstaged default']:.2f})")
                shown = rows[:4]
                for family in ("async", "staged", "mma", "xreg", "one-group"):  # the best of each, if not shown
                    best = next((r for r in rows if r[1].startswith(family)), None)
                    if best is not None and best not in shown:
                        shown.append(best)
                for t, desc, la in shown:
                    print(f"    {t * 1e3:.3f} ms  {floor / t:.2f}  {desc}  splits={la.splits} grid={la.grid}")
                record += [{"size": size, "k": k, "store": st, "dir": d, "kernel": desc, "ms": t * 1e3,
                            "of_floor": floor / t, "splits": la.splits} for t, desc, la in rows]
                sys.stdout.flush()
            del F, eng
        del K
        cp.get_default_memory_pool().free_all_blocks()
    fits = fit_split_model(points)
    if args.json:
        write_json(args.json, {"copy_bandwidth": bw, "rows": record, "split_points": points,
                               "split_model": {f"{st} {'adj' if adj else 'fwd'}": m
                                               for (st, adj), m in fits.items()}})
    return 0


def time_both_ways(plans, time_plan) -> list:
    """Each plan's time, the faster of two passes over them: in order, then in reverse."""
    best = [None] * len(plans)
    for order in (range(len(plans)), reversed(range(len(plans)))):
        for i in order:
            t = time_plan(plans[i])
            best[i] = t if best[i] is None else min(best[i], t)
    return best


def fit_split_model(points) -> dict:
    """Fit PIPE_SPLIT_MODEL's (a, w, b) per (storage, adjoint), and the constant the choice
    does not depend on, to the timed split-K counts (non-negative least squares, relative
    errors), print them with each case's measured best count, the fitted model's choice and
    the engine's, and return (a, w, b)."""
    from scipy.optimize import nnls

    from fftmatvec.gpu import PIPE_MAX_SPLIT_ROWS, pipe_split_count, pipe_split_time

    fits = {}
    for key in sorted({(p["store"], p["adjoint"]) for p in points}):
        pts = [p for p in points if (p["store"], p["adjoint"]) == key]
        rows, rhs = [], []
        for p in pts:
            waves = -(-p["base"] * p["splits"] // p["resident"])
            feats = [waves * p["chunk"], waves,
                     p["splits"] * p["partial_bytes"] / 1e6 if p["splits"] > 1 else 0.0, 1.0]
            us = p["ms"] * 1e3
            rows.append([f / us for f in feats])  # relative errors: every case weighs the same
            rhs.append(1.0)
        coef, _ = nnls(np.array(rows), np.array(rhs))
        model, const = tuple(float(c) for c in coef[:3]), float(coef[3])
        fits[key] = model
        print(f"# split model {key[0]} {'adj' if key[1] else 'fwd'}: a = {model[0]:.4f} us/row, "
              f"w = {model[1]:.2f} us/round, b = {model[2]:.3f} us/MB, constant {const:.1f} us")
        for case in sorted({p["case"] for p in pts}, key=str):
            cp_ = [p for p in pts if p["case"] == case]
            best = min(cp_, key=lambda p: p["ms"])
            p0 = cp_[0]
            mine = pipe_split_count(p0["base"], p0["resident"], p0["n_red"], p0["step"],
                                    p0["max_splits"], p0["partial_bytes"], model,
                                    PIPE_MAX_SPLIT_ROWS.get(key[0]))
            errs = [abs((pipe_split_time(p["splits"], p["chunk"], p["base"], p["resident"],
                                         p["partial_bytes"], model) + const) / 1e3 / p["ms"] - 1)
                    for p in cp_]
            print(f"    {case[0]} {case[1]}: measured best {best['splits']} splits "
                  f"({best['ms']:.3f} ms), the engine's choice {p0['model_choice'] or 'GEMV'}, "
                  f"the fitted model's {mine}; model error up to {max(errs) * 100:.1f} %")
    return fits


if __name__ == "__main__":
    sys.exit(main())
