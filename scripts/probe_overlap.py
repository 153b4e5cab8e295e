#!/usr/bin/env python
"""Whether the FFT of many rows pays to overlap with stage 3 (a design probe; not the package's
path).

A one-vector product runs the forward FFT, stage 3 and the inverse FFT one after the other.
Where one side has many rows (Nm = 5000 forward: a 5000-row FFT before stage 3; adjoint: a
5000-row inverse FFT after it), the row FFT is latency-bound while stage 3 streams ``Khat``, so
the two could share the device. This probe cuts ``K``'s Nm axis into chunks, builds one
operator per chunk, and runs:

- forward: the first chunk's FFT, then each chunk's stage 3 on one stream while the next
  chunks' FFTs run on a second stream; the partial sums added, one inverse FFT;
- adjoint: each chunk's stage 3 in turn on one stream, each chunk's inverse FFT on a second
  stream as soon as its stage 3 is done. (Each chunk's operator has its own float16 scales, so
  each runs its own FFT of the Nd input rows; the time of those extra FFTs is printed, to be
  taken off.)

with the second stream at the greatest priority (``hi``) and at the default one (``same``),
against the whole operator's product (``full``), each the best of 3 medians of synchronised
calls. Results are checked against the whole product (``err``, relative to its largest value).

Usage: python scripts/probe_overlap.py [--sizes 5000x100x1000,...] [--precisions ddhdd,...]
       [--chunks 0.5,0.5:0.3,0.7]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_matvec import median_time  # noqa: E402

GREATEST_PRIORITY = -5  # CUDA's greatest stream priority on current NVIDIA GPUs; it clamps


def chunk_cuts(nm: int, fractions) -> list[int]:
    """Row offsets [0, ..., nm] cutting Nm into chunks of about the given shares (which sum to
    1); every chunk keeps at least one row."""
    fractions = [float(f) for f in fractions]
    if not fractions or min(fractions) <= 0 or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"chunk shares must be positive and sum to 1, got {fractions}")
    if len(fractions) > nm:
        raise ValueError(f"{len(fractions)} chunks of {nm} rows")
    cuts = [0]
    for i, f in enumerate(np.cumsum(fractions)[:-1]):
        lo, hi = cuts[-1] + 1, nm - (len(fractions) - 1 - i)
        cuts.append(min(max(int(round(nm * f)), lo), hi))
    return cuts + [nm]


def _parts(cp, op, adjoint: bool) -> dict:
    """The operator's three-step product (forward FFT, stage 3, inverse FFT) and its buffers."""
    eng, prec = op._engine, op.precision
    product = eng.fused_product(prec, adjoint, 1, np.float64, op.dtype)
    if product is None or product.fused is not None:
        raise LookupError("this size takes no three-step product")
    n_in, n_out = (eng.nd, eng.nm) if adjoint else (eng.nm, eng.nd)
    return dict(p=product, xh=eng.xhat_buffer(prec, 1, n_in), yh=eng.yhat_buffer(prec, 1, n_out),
                work=cp.cuda.alloc(max(1, product.work_bytes)),
                y=eng.y_buffer(prec, 1, n_out, op.dtype))


def probe(cp, fm, nm, nd, nt, prec, fractions, rng, repeat: int) -> dict:
    K = cp.asarray(rng.standard_normal((nd, nm, nt)))
    m = cp.asarray(rng.standard_normal((nm, nt)))
    d = cp.asarray(rng.standard_normal((nd, nt)))
    F = fm.BlockToeplitz(K, prec)
    cuts = chunk_cuts(nm, fractions)
    ops = [fm.BlockToeplitz(cp.ascontiguousarray(K[:, a:b]), prec) for a, b in zip(cuts, cuts[1:])]
    fw, ad = [_parts(cp, G, False) for G in ops], [_parts(cp, G, True) for G in ops]
    ms = [cp.ascontiguousarray(m[a:b]) for a, b in zip(cuts, cuts[1:])]
    y = fw[0]["y"]  # the room the inverse plan may take (KernelEngine.y_nbytes), not just Nd x Nt
    s1 = cp.cuda.Stream(non_blocking=True)
    second = {"hi": cp.cuda.Stream(non_blocking=True, priority=GREATEST_PRIORITY),
              "same": cp.cuda.Stream(non_blocking=True)}
    evs = [cp.cuda.Event(disable_timing=True) for _ in ops]
    done = cp.cuda.Event(disable_timing=True)

    def forward(s2):
        cur = cp.cuda.get_current_stream()
        done.record(cur)
        s1.wait_event(done)
        for i, (q, x) in enumerate(zip(fw, ms)):
            st = s1 if i == 0 else s2
            if i == 1:
                s2.wait_event(evs[0])
            q["p"].plans.fwd(x.data.ptr, q["xh"].data.ptr, st.ptr)
            evs[i].record(st)
        for i, q in enumerate(fw):
            if i > 0:
                s1.wait_event(evs[i])
            q["p"].stage3(s1.ptr, q["xh"].data.ptr, q["yh"].data.ptr, q["work"].ptr)
        with s1:
            acc = fw[0]["yh"]
            for q in fw[1:]:
                acc += q["yh"]
        fw[0]["p"].plans.inv(acc.data.ptr, y.data.ptr, s1.ptr)
        done.record(s1)
        cur.wait_event(done)

    def adjoint(s2):
        cur = cp.cuda.get_current_stream()
        done.record(cur)
        s1.wait_event(done)
        for q in ad:
            q["p"].plans.fwd(d.data.ptr, q["xh"].data.ptr, s1.ptr)
        for i, q in enumerate(ad):
            q["p"].stage3(s1.ptr, q["xh"].data.ptr, q["yh"].data.ptr, q["work"].ptr)
            evs[i].record(s1)
            s2.wait_event(evs[i])
            q["p"].plans.inv(q["yh"].data.ptr, q["y"].data.ptr, s2.ptr)
        done.record(s2)
        cur.wait_event(done)

    def input_ffts():
        s = cp.cuda.get_current_stream().ptr
        for q in ad:
            q["p"].plans.fwd(d.data.ptr, q["xh"].data.ptr, s)

    ref_f, ref_a = F.matvec(m), F.rmatvec(d)
    forward(second["hi"])
    adjoint(second["hi"])
    cp.cuda.Device().synchronize()
    err_f = float(cp.abs(y[0] - ref_f).max() / cp.abs(ref_f).max())
    ya = cp.concatenate([q["y"][0] for q in ad])
    err_a = float(cp.abs(ya - ref_a).max() / cp.abs(ref_a).max())
    timers = {"fwd full": lambda: F.matvec(m), "fwd hi": lambda: forward(second["hi"]),
              "fwd same": lambda: forward(second["same"]), "adj full": lambda: F.rmatvec(d),
              "adj hi": lambda: adjoint(second["hi"]), "adj same": lambda: adjoint(second["same"]),
              "input ffts": input_ffts}
    t = {name: float("inf") for name in timers}
    for _ in range(3):
        for name, fn in timers.items():
            t[name] = min(t[name], median_time(cp, fn, repeat))
    t["extra input ffts"] = t.pop("input ffts") * (len(ops) - 1) / len(ops)
    return dict(nm=nm, nd=nd, nt=nt, precision=prec, chunks=list(fractions), cuts=cuts,
                err_fwd=err_f, err_adj=err_a, seconds=t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sizes", default="5000x100x1000,20000x50x500,1000x100x1000")
    ap.add_argument("--precisions", default="ddhdd,ddddd,sssss")
    ap.add_argument("--chunks", default="0.5,0.5:0.3,0.7:0.25,0.25,0.5",
                    help="chunk shares of Nm, one set per colon")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    chunk_sets = [[float(v) for v in c.split(",")] for c in args.chunks.split(":")]
    import cupy as cp

    import fftmatvec as fm
    from fftmatvec import _gpu

    # the chunks' stage-3 sums are added before one inverse FFT, which must then take sums,
    # not partial sums to add on its load
    _gpu.FOLD_MAX_SPLITS = 0
    rng = np.random.default_rng(3)
    print(f"{'Nm':>6} {'Nd':>4} {'Nt':>5} {'prec':>6} {'chunks':>16} | "
          f"{'fwd full':>8} {'hi':>7} {'same':>7} | {'adj full':>8} {'hi':>7} {'same':>7} "
          f"{'extra':>6} | ms")
    for size in args.sizes.split(","):
        nm, nd, nt = (int(v) for v in size.split("x"))
        for prec in args.precisions.split(","):
            for fractions in chunk_sets:
                try:
                    r = probe(cp, fm, nm, nd, nt, prec, fractions, rng, args.repeat)
                except LookupError as e:
                    print(f"{nm:>6} {nd:>4} {nt:>5} {prec:>6}: {e}")
                    continue
                s = {k: v * 1e3 for k, v in r["seconds"].items()}
                print(f"{nm:>6} {nd:>4} {nt:>5} {prec:>6} {str(tuple(fractions)):>16} | "
                      f"{s['fwd full']:8.4f} {s['fwd hi']:7.4f} {s['fwd same']:7.4f} | "
                      f"{s['adj full']:8.4f} {s['adj hi']:7.4f} {s['adj same']:7.4f} "
                      f"{s['extra input ffts']:6.4f} | err {r['err_fwd']:.0e} / "
                      f"{r['err_adj']:.0e}", flush=True)
                cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
