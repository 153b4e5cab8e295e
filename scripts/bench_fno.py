"""Benchmark the FNO spectral convolution against PyTorch eager and neuraloperator.

For each size of issue 41 (B, C, grid, modes per axis; Cin = Cout = C), in one run on one device,
forward and forward+backward median times (the implementations timed in turn, ``--rounds``
times, so that a drift of the host or the device reaches them all alike) of

* eager: ``rfftn`` -> gather of both frequency signs -> ``einsum`` -> scatter -> ``irfftn``;
* neuraloperator's dense ``SpectralConv`` (when importable);
* ``fftmatvec.fno.SpectralConv`` with ``method="dft"`` (the truncated transforms as dense DFT
  GEMMs, the last two axes on the plane kernels and the last axis on the row FFT kernels
  where the planner takes them; on a GPU its
  chains replayed as CUDA graphs where ``graphs="auto"`` says so, the default), the same with
  ``graphs=False`` (``dft-nograph``: the chains launched op by op) and ``graphs=True``
  (``dft-graph``, on a GPU: replayed at every size), the same with every axis as GEMMs
  (``dft-gemm``: plan ``fno_rows=0,fno_plane=0``) and with the last two axes not on the
  plane kernels (``dft-noplane``: plan ``fno_plane=0``), on one-axis layers with the modes
  interleaved and permuted around the channel product (``dft-nosplit``: plan ``fno_split=0``)
  or split (``dft-split``: ``fno_split=1``), with the inverse transforms of the axis on the row
  kernels too (``dft-rows``: ``fno_rows=1``), with the modes permuted where the row kernels
  would pair them (``dft-nopaired``: ``fno_paired=0``), with the paired modes' forward
  product on cuBLAS rather than the package's kernel (``dft-noproduct``: ``fno_product=0``)
  and on the package's kernel whatever the batch (``dft-product``: ``fno_product=1``),
  one-axis layers' forwards on the paired chain rather than the one-kernel layer
  (``dft-nofused``: ``fno_fused=0``),
  with the planes in their direct form (``dft-direct``: ``fno_plane=1,fno_direct=1``, where it
  takes them) and never in it (``dft-nodirect``: ``fno_direct=0``),
  with every call on the full path rather than its graph replayed at once or its plan taken
  (``dft-nofast``: ``fno_fast=0``; the other plans' columns take the fast paths under their
  own plan's signatures), and the split modes with every kernel in
  its warp form (``dft-split-warp``); on a GPU the kernels in their pass form (``dft-passes``: ``fno_warp=0``)
  and their warp form (``dft-warp``: ``fno_warp=1``, where they have one),
  on layers whose graphs hold their whole chains, the graphs with the ends outside
  (``dft-ends``: ``fno_ends=1``, no copy of ``x`` in or of ``y`` out), on layers whose
  graphs may hold only the middles, the whole chains (``dft-whole``: ``fno_ends=0``), and
  ``method="fft"`` (full FFTs), and the method ``"auto"`` picks;
* with ``--tuned``: the layer as users get it, every choice left to it, reading the FNO tuning
  tables (``tuned``; the other columns take the built-in rules: the tables are off for them);
* with ``--sixteen bfloat16`` (or ``float16``): ours, DFT path, 16-bit input and storage;

and the floor: the bytes that must move over the bandwidth of a large device-to-device copy
timed in the same run. Forward: one read of ``x`` and the weights, one write of ``y``.
Forward+backward: that, plus one read of ``dL/dy`` and the weights and one write of ``dL/dx``
and ``dL/dW``. Forward times run under ``torch.no_grad()``; forward+backward ones time
``y = layer(x); y.backward(g)`` with ``x`` requiring its gradient, every gradient set to None
before (as ``zero_grad`` does: no call adds into the last one's).

Printed per case and pass: the floor, every time, ``eager / dft`` and ``nop / dft`` (speed-ups
of the DFT path), ``floor / dft`` (the fraction of the floor the DFT path reaches) and the
relative difference of the DFT path's output to the FFT path's.

With ``--profile``, instead of the table: for each case, the GPU kernels of the DFT path's
forward and forward+backward (``torch.profiler``, ``--reps`` calls), each kernel's device time a
call, the sum, the wall time a call, and the host's calls by their own CPU time (operators and
CUDA runtime calls), to see where a layer's time goes. With ``--host``, the
DFT path's time a call synchronised, back to back and on the host (``host_case``): what the host
costs a layer whose caller waits. ``--cases`` picks cases of the list by their index (from 0).

Usage::

    python scripts/bench_fno.py [--reps N] [--rounds R] [--json FILE] [--sixteen bfloat16]
        [--cases 0,6] [--impls dft-split,dft-warp]
    python scripts/bench_fno.py --profile --cases 1,6 [--graphs 0]
    python scripts/bench_fno.py --host --cases 0,6,8
    python scripts/bench_fno.py --tuned            # with the tables of fftmatvec tune-fno
    python scripts/bench_fno.py --device cpu --small      # a quick local check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from fftmatvec import FFTMatvecValueError
from fftmatvec.fno import SpectralConv, _graphs, _tuning
from fftmatvec.fno._dft import choose_method
from fftmatvec.gpu.plan import ENV

SIZES = [(32, 64, (64, 64), 16), (32, 64, (128, 128), 16), (16, 64, (256, 256), 32),
         (8, 128, (256, 256), 32), (16, 128, (256, 256), 64), (4, 32, (64, 64, 64), 16),
         (1024, 64, (128,), 64), (64, 64, (4096,), 64), (20, 32, (85, 85), 12)]
SMALL = [(4, 8, (32, 32), 8), (16, 8, (128,), 32), (2, 4, (16, 16, 16), 8), (2, 8, (21, 21), 6)]


def make_timer(device, samples=False):
    """``timed(fn, reps)``: the median time of ``reps`` calls of ``fn`` after three warm-up
    calls, or with ``samples`` the list of the ``reps`` times."""
    cuda = device.type == "cuda"

    def timed(fn, reps):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            if cuda:
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                ts.append(a.elapsed_time(b) * 1e-3)
            else:
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
        return ts if samples else float(statistics.median(ts))

    return timed


def copy_bandwidth(device, timed, reps, nbytes):
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src), reps)


def make_eager(x_shape, w, modes, bias):
    """rfftn -> gather of both signs -> einsum -> scatter into zeros -> irfftn."""
    d = len(modes)
    dims = tuple(range(-d, 0))
    spatial = x_shape[2:]
    dev = w.device
    idx = [torch.cat([torch.arange(0, m - m // 2), torch.arange(n - m // 2, n)]).to(dev)
           for n, m in zip(spatial[:-1], modes[:-1])]
    grids = tuple(torch.meshgrid(*idx, indexing="ij")) if d > 1 else ()
    letters = "xyz"[:d]
    spec = f"bi{letters},io{letters}->bo{letters}"
    full = (x_shape[0], w.shape[1]) + tuple(spatial[:-1]) + (spatial[-1] // 2 + 1,)

    def eager(x):
        X = torch.fft.rfftn(x, dim=dims, norm="forward")
        for a, ix in enumerate(idx):
            X = X.index_select(2 + a, ix)
        Y = torch.einsum(spec, X[..., : modes[-1]], w)
        out = X.new_zeros(full)
        out[(slice(None), slice(None)) + grids + (slice(0, modes[-1]),)] = Y
        return torch.fft.irfftn(out, s=spatial, dim=dims, norm="forward") + bias

    return eager


def _planned(layer, plan):
    """``layer`` under ``FFTMATVEC_PLAN=plan``: the plan is read when the forward picks its
    chain (the backward runs the chain its forward took)."""

    def run(x):
        old = os.environ.get(ENV)
        os.environ[ENV] = plan
        try:
            return layer(x)
        finally:
            if old is None:
                os.environ.pop(ENV)
            else:
                os.environ[ENV] = old

    return run


def _with_tables(layer, tables):
    """``layer`` reading the FNO tuning tables ``tables`` (the raw value of
    ``FFTMATVEC_FNO_TUNING_PATH`` at the start, None where unset) during the call."""

    def run(x):
        old = os.environ[_tuning.ENV]
        if tables is None:
            os.environ.pop(_tuning.ENV)
        else:
            os.environ[_tuning.ENV] = tables
        try:
            return layer(x)
        finally:
            os.environ[_tuning.ENV] = old

    return run


def bench_case(B, C, grid, m, device, timed, bw, reps, sixteen, nop_cls, rounds=4, only=None,
               tables=False):
    n_modes = tuple([m] * len(grid))
    dft = SpectralConv(C, C, n_modes, device=device, method="dft")
    fft = SpectralConv(C, C, n_modes, device=device, method="fft")
    nograph = SpectralConv(C, C, n_modes, device=device, method="dft", graphs=False)
    graph = SpectralConv(C, C, n_modes, device=device, method="dft", graphs=True)
    tuned = SpectralConv(C, C, n_modes, device=device)
    with torch.no_grad():
        for other in (fft, nograph, graph, tuned):
            other.weight.copy_(dft.weight)
            other.bias.copy_(dft.bias)
    modes = dft.modes
    eager_fn = make_eager((B, C) + grid, dft.weight, modes, dft.bias)
    impls = {"eager": eager_fn, "dft": dft, "dft-nograph": nograph, "fft": fft,
             **({"dft-graph": graph} if device.type == "cuda" else {}),
             "dft-gemm": _planned(dft, "fno_rows=0,fno_plane=0"),
             "dft-noplane": _planned(dft, "fno_plane=0")}
    if len(grid) == 1:  # the one-axis layers' modes interleaved, or split (no permutes)
        impls["dft-nosplit"] = _planned(dft, "fno_split=0")
        impls["dft-split"] = _planned(dft, "fno_split=1")
        if device.type == "cuda":  # every transform of the axis on the row kernels
            impls["dft-rows"] = _planned(dft, "fno_rows=1")
            # a forward without gradients on the paired chain, not the one-kernel layer
            impls["dft-nofused"] = _planned(dft, "fno_fused=0")
    if device.type == "cuda" and len(grid) <= 2:
        # the modes permuted around the complex GEMM, not paired by the row or plane kernels
        impls["dft-nopaired"] = _planned(dft, "fno_paired=0")
        # the paired modes' forward product on cuBLAS, not the package's kernel
        impls["dft-noproduct"] = _planned(dft, "fno_product=0")
        impls["dft-product"] = _planned(dft, "fno_product=1")
    if device.type == "cuda" and len(grid) >= 2:
        # the planes' direct form (sums over the points) where it takes the plane, and not
        impls["dft-direct"] = _planned(dft, "fno_plane=1,fno_direct=1")
        impls["dft-nodirect"] = _planned(dft, "fno_direct=0")
    if device.type == "cuda":  # every call on the full path: no fast path
        impls["dft-nofast"] = _planned(dft, "fno_fast=0")
    if device.type == "cuda":  # the kernels in their pass form, in their warp form
        impls["dft-passes"] = _planned(dft, "fno_warp=0")
        impls["dft-warp"] = _planned(dft, "fno_warp=1")
        if len(grid) == 1:  # all of it: split, every transform on the warp form
            impls["dft-split-warp"] = _planned(dft, "fno_split=1,fno_rows=1,fno_warp=1")
    if device.type == "cuda" and not (_graphs.ends_outside((B, C) + grid, 4, C)
                                      and _graphs.ends_outside((B, C) + grid, 4, C, False)):
        impls["dft-ends"] = _planned(dft, "fno_ends=1")
    if device.type == "cuda" and _graphs.ends_outside((B, C) + grid, 4, C, False):
        # the whole chains in the graphs, x copied in and y cloned out
        impls["dft-whole"] = _planned(dft, "fno_ends=0")
    if tables is not False:
        impls["tuned"] = _with_tables(tuned, tables)
    x = torch.randn((B, C) + grid, device=device)
    for name in [k for k in impls if k.startswith("dft-")]:
        try:  # a plan that cannot serve this layer (no warp form for it): no column
            with torch.no_grad():
                impls[name](x)
        except FFTMatvecValueError:
            del impls[name]
    if nop_cls is not None:
        impls["nop"] = nop_cls(C, C, n_modes).to(device)
    if only is not None:  # eager and dft always: the ratios are theirs
        impls = {k: v for k, v in impls.items()
                 if k in only or k in ("eager", "dft", "tuned")}
    if sixteen is not None:
        s16 = SpectralConv(C, C, n_modes, device=device, method="dft",
                           compute_dtype=getattr(torch, sixteen))
        with torch.no_grad():
            s16.weight.copy_(dft.weight)
            s16.bias.copy_(dft.bias)
        impls[sixteen] = s16
    with torch.no_grad():
        y_dft, y_fft = dft(x), fft(x)
        diff = float((y_dft - y_fft).abs().max() / y_fft.abs().max())
        diff16 = None
        if sixteen is not None:
            y16 = impls[sixteen](x.to(getattr(torch, sixteen))).float()
            diff16 = float((y16 - y_fft).abs().max() / y_fft.abs().max())
    g = torch.randn_like(y_dft)
    w_bytes = dft.weight.numel() * 8
    fwd_bytes = 4 * (x.numel() + y_dft.numel()) + w_bytes
    floors = {"fwd": fwd_bytes / bw, "fwd+bwd": (2 * fwd_bytes + w_bytes) / bw}
    owned = {name: list(f.parameters()) if isinstance(f, torch.nn.Module)
             else list(tuned.parameters()) if name == "tuned"
             else [dft.weight, dft.bias] for name, f in impls.items()}
    rows = []
    for pss in ("fwd", "fwd+bwd"):
        runs = {}
        for name, f in impls.items():
            xin = x.to(getattr(torch, sixteen)) if name == sixteen else x
            gin = g.to(xin.dtype)
            if pss == "fwd":
                def run(f=f, xin=xin):
                    with torch.no_grad():
                        f(xin)
            else:
                xg = xin.detach().requires_grad_(True)
                params = [xg] + owned[name]

                def run(f=f, xg=xg, gin=gin, params=params):
                    for p in params:  # as zero_grad(set_to_none=True): no accumulation
                        p.grad = None
                    f(xg).backward(gin)
            runs[name] = run
        # the implementations in turn, ``rounds`` times: each sees the host and the device in
        # the same state as the others (a small layer's time is the host's, which drifts)
        samples = {name: [] for name in runs}
        for _ in range(rounds):
            for name, run in runs.items():
                samples[name] += timed(run, max(1, reps // rounds))
        times = {name: float(statistics.median(ts)) for name, ts in samples.items()}
        rows.append({"case": [B, C, list(grid), m], "pass": pss, "floor_s": floors[pss],
                     "times_s": times, "auto": choose_method(B, C, C, grid, modes),
                     "dft_vs_fft": diff, "sixteen_vs_fft": diff16})
    return rows


def _layer_calls(B, C, grid, m, device, graphs):
    """The DFT path's forward (under ``no_grad``) and forward+backward on fresh random data of
    one case, as two callables."""
    layer = SpectralConv(C, C, tuple([m] * len(grid)), device=device, method="dft",
                         graphs=graphs)
    x = torch.randn((B, C) + grid, device=device)
    xg = x.detach().requires_grad_(True)
    g = torch.randn_like(x)

    def fwd():
        with torch.no_grad():
            layer(x)

    def fwd_bwd():
        for p in (xg,) + tuple(layer.parameters()):
            p.grad = None
        layer(xg).backward(g)

    return fwd, fwd_bwd


def profile_case(B, C, grid, m, device, reps, graphs, top=12):
    """Print the GPU kernels of the DFT path's forward and forward+backward on one case, and
    the host's calls that take the most of its own time (self CPU time: PyTorch's operators
    and the CUDA runtime calls, e.g. ``cudaLaunchKernel``, ``cudaGraphLaunch``)."""
    from torch.profiler import ProfilerActivity, profile

    fwd, fwd_bwd = _layer_calls(B, C, grid, m, device, "auto" if graphs else False)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities):  # the profiler's own start-up, not timed
        fwd()
    for pss, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with profile(activities=activities) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize(device)
        wall = (time.perf_counter() - t0) / reps * 1e6
        kernels = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = kernels.setdefault(e.name, [0.0, 0])
                k[0] += e.time_range.elapsed_us()
                k[1] += 1
        total = sum(v[0] for v in kernels.values()) / reps
        print(f"{str((B, C, grid, m)):>30} {pss:>7}: GPU {total:8.1f} us a call, wall "
              f"{wall:8.1f} us a call (profiled), graphs={'auto' if graphs else 'off'}")
        for name, (t, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"{'':>12}{t / reps:8.1f} us {n / reps:5.1f}x  {name[:90]}")
        host = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:top]
        print(f"{'':>12}host, self CPU time a call (profiled):")
        for a in host:
            print(f"{'':>12}{a.self_cpu_time_total / reps:8.1f} us {a.count / reps:5.1f}x  "
                  f"{a.key[:90]}")


def host_case(B, C, grid, m, device, reps):
    """Print the DFT path's time a call three ways: synchronised (the device idle before each
    call, as the table times it), back to back (calls queued, one synchronisation: the device's
    own time), and the host's (wall time until the call returns, its launches queued)."""
    fwd, fwd_bwd = _layer_calls(B, C, grid, m, device, "auto")
    timed = make_timer(device)
    for pss, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        synced = timed(fn, reps)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize(device)
        b2b = (time.perf_counter() - t0) / reps
        host = []
        for _ in range(reps):
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
        print(f"{str((B, C, grid, m)):>30} {pss:>7}: synchronised {synced * 1e6:8.1f} us, back "
              f"to back {b2b * 1e6:8.1f} us, host {statistics.median(host) * 1e6:8.1f} us")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4,
                    help="time the implementations in turn this many times, reps / rounds "
                         "calls each (the median over all)")
    ap.add_argument("--json", metavar="FILE", help="write every row to FILE")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="small sizes, for a quick CPU check")
    ap.add_argument("--sixteen", choices=["bfloat16", "float16"],
                    help="also time the DFT path with 16-bit input and storage")
    ap.add_argument("--cases", help="indices of the cases to run, comma-separated")
    ap.add_argument("--impls", help="the implementations to time (comma-separated column "
                    "names; eager and dft always)")
    ap.add_argument("--profile", action="store_true",
                    help="print the DFT path's GPU kernels per case instead of the table")
    ap.add_argument("--host", action="store_true",
                    help="print the DFT path's synchronised, back-to-back and host times a call")
    ap.add_argument("--tuned", action="store_true",
                    help="also time the layer as users get it, with the FNO tuning tables "
                         "(fftmatvec tune-fno); the other columns take the built-in rules")
    ap.add_argument("--graphs", type=int, choices=[0, 1], default=1,
                    help="with --profile: replay CUDA graphs where 'auto' does (1) or not (0)")
    args = ap.parse_args()
    tables = os.environ.get(_tuning.ENV) if args.tuned else False
    os.environ[_tuning.ENV] = "none"  # the built-in rules, but in the tuned column
    device = torch.device(args.device)
    sizes = SMALL if args.small else SIZES
    if args.cases:
        sizes = [sizes[int(i)] for i in args.cases.split(",")]
    if args.profile or args.host:
        if device.type != "cuda":
            raise SystemExit("--profile and --host time the GPU: they need a CUDA device")
        for B, C, grid, m in sizes:
            if args.profile:
                profile_case(B, C, grid, m, device, args.reps, args.graphs)
            else:
                host_case(B, C, grid, m, device, args.reps)
        return
    try:
        from neuralop.layers.spectral_convolution import SpectralConv as NeuralopConv
    except Exception:  # noqa: BLE001 - any import failure: run without it
        NeuralopConv = None
    timed = make_timer(device)
    bw = copy_bandwidth(device, timed, args.reps, 1 << (24 if args.small else 30))
    sampled = make_timer(device, samples=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}, copy bandwidth {bw / 1e9:.0f} GB/s, torch {torch.__version__}")
    extra = [args.sixteen] if args.sixteen else []
    cols = ["eager", "nop", "fft", "dft-gemm", "dft-noplane", "dft-nosplit", "dft-split",
            "dft-rows", "dft-nopaired", "dft-noproduct", "dft-product", "dft-nofused",
            "dft-direct", "dft-nodirect", "dft-nofast", "dft-passes", "dft-warp",
            "dft-split-warp", "dft-nograph", "dft-graph", "dft-ends", "dft-whole", "dft"] + extra
    cols += ["tuned"] if args.tuned else []
    print(f"{'case':>30} {'pass':>7} {'auto':>4} {'floor us':>9} "
          + " ".join(f"{c + ' us':>{max(10, len(c) + 3)}}" for c in cols)
          + f" {'eager/dft':>9} {'nop/dft':>8} {'floor/dft':>9} {'dft-fft':>8}"
          + (f" {'eager/tuned':>11}" if args.tuned else ""))
    rows = []
    for B, C, grid, m in sizes:
        only = None if not args.impls else set(args.impls.split(","))
        for r in bench_case(B, C, grid, m, device, sampled, bw, args.reps, args.sixteen,
                            NeuralopConv, args.rounds, only, tables):
            rows.append(r)
            t = r["times_s"]
            us = " ".join(f"{t.get(c, float('nan')) * 1e6:{max(10, len(c) + 3)}.1f}"
                          for c in cols)
            print(f"{str((B, C, grid, m)):>30} {r['pass']:>7} {r['auto']:>4} "
                  f"{r['floor_s'] * 1e6:9.1f} {us} {t['eager'] / t['dft']:9.2f} "
                  f"{t.get('nop', float('nan')) / t['dft']:8.2f} "
                  f"{r['floor_s'] / t['dft']:9.1%} {r['dft_vs_fft']:8.1e}"
                  + (f" {t['eager'] / t['tuned']:11.2f}" if args.tuned else ""))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": name, "bandwidth_Bps": bw, "torch": torch.__version__,
                       "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
