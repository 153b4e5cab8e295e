#!/usr/bin/env python
"""Benchmark of the GPU matvec against the memory floor and a plain CuPy pipeline.

For each size (Nm, Nd, Nt) and precision it prints, forward and adjoint: the median time of
one product (device events, after warm-up), the floor (bytes of ``Khat`` in its stored
precision + input and output vectors, over the device-to-device copy bandwidth measured in
this run), the ratio floor/time, the best ratio the FFT stages leave (``bound``: the floor over
the FFTs' time as the product runs them, timed alone, plus stage 3's bytes at the read-only
bandwidth measured in this run), and the same for a plain CuPy pipeline
(``rfft`` -> ``matmul`` -> ``irfft``, its adjoint through ``Khat^H`` formed per call) timed in
the same run. Then batches (k=16 right-hand sides against k=1 and against ``cupy.matmul`` on
the same batched product, and ``bound``: the per-right-hand-side ratio at which the batch's
bytes, ``Khat`` plus k input and output vectors at the read-only bandwidth, would take as long
as k times the measured k=1 product) and small problems (time per matvec and kernel launches).
It ends with the run checked against the targets of the GPU kernel layer (``target_summary``).

Usage: python scripts/bench_matvec.py [--sizes all|small|...] [--repeat N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from fftmatvec.gpu.planning import Overrides, Problem, make_plan, stage3_launches

SIZES = [(1000, 100, 1000), (5000, 100, 1000), (20000, 50, 500), (100000, 10, 100)]
SMALL = [(289, 15, 10), (1000, 20, 100)]
PRECISIONS = ["ddddd", "sssss", "ddhdd"]


def write_json(path: str, results) -> None:
    """``results`` as JSON at ``path``, written to a temporary name first and renamed, so an
    interrupted run leaves no half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1, default=str)
    os.replace(tmp, path)


def median_time(cp, fn, repeat: int, warmup: int = 10) -> float:
    """Median seconds of ``fn()`` measured with CUDA events around each call."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))


def back_to_back_time(cp, fn, repeat: int, warmup: int = 5) -> float:
    """Mean seconds of ``fn()`` over ``repeat`` calls queued back to back and synchronised once
    at the end: the device's time per product, with the host's time before each first kernel
    hidden behind the previous product (``median_time`` counts it)."""
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e-3 / repeat


def stage3_input(F, x, adjoint: bool):
    """(x, scaled): stage 3's input as the one-vector product of ``F`` gives it from its forward
    FFT. A float16 adjoint's input carries the row scales where its forward FFT applies them
    (a fused product's plan: the row FFT kernels, or cuFFT's store callback); ``scaled`` is
    then True, to pass as ``xhat_scaled``."""
    eng = F._engine
    scaled = eng.khat_store.scales_input(adjoint) and F.plan(1, adjoint).fused_ffts
    return (eng.stage3.scale_xhat(x) if scaled else x), scaled


def copy_bandwidth(cp, nbytes: int = 4 * 2**30, repeat: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written)."""
    a = cp.empty(nbytes // 8, dtype=np.float64)
    a[:] = 1.0
    b = cp.empty_like(a)
    t = median_time(cp, lambda: cp.copyto(b, a), repeat)
    del a, b
    return 2 * nbytes / t


# Each thread reads 16-byte elements (four in flight) and sums their real parts: a compiler that
# narrows the loads to 8 bytes still moves every byte, since memory is read in 32-byte sectors.
_READ_KERNEL = r"""
extern "C" __global__ void read_all(const double2* __restrict__ a, long long n, double* out) {
  double s = 0.0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const double2 v0 = a[i], v1 = a[i + stride], v2 = a[i + 2 * stride], v3 = a[i + 3 * stride];
    s += (v0.x + v1.x) + (v2.x + v3.x);
  }
  for (; i < n; i += stride) s += a[i].x;
  out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def read_bandwidth(cp, nbytes: int = 4 * 2**30, repeat: int = 20) -> float:
    """Bytes/s a kernel that only reads reaches (each thread sums its share of a large array and
    writes one value): what stage 3, which reads Khat and writes little, could reach at best."""
    a = cp.empty(nbytes // 16, dtype=np.complex128)
    a[:] = 1.0
    fn = cp.RawKernel(_READ_KERNEL, "read_all")
    blocks = cp.cuda.Device().attributes["MultiProcessorCount"] * 8
    out = cp.empty(blocks * 256, dtype=np.float64)
    t = median_time(cp, lambda: fn((blocks,), (256,), (a, np.int64(a.size), out)), repeat)
    del a, out
    return nbytes / t


def fft_stage_times(cp, F, x, adjoint: bool, repeat: int):
    """(seconds of stages 1+2, of stages 4+5, bytes stage 3 must move) for one product as the
    operator runs it: the FFTs with pad and unpad inside (the row FFT kernels or cuFFT
    callbacks) where it fuses them (an inverse that adds stage 3's split-K partial sums as it
    loads them reads those), else the four stages one by one; stage 3's bytes are Khat, its
    input and its output."""
    eng = F._engine
    k, _, _ = x.shape
    plan = F._executor(adjoint, k, x.dtype, False).plan
    if plan.fused_adjoint:  # stages 3-5 as one kernel: the inverse its plan apart would take
        overrides = Overrides.resolve({**F._overrides.mapping(), "fused_adjoint": "0"})
        plan = make_plan(plan.problem, eng.device, eng.rules, overrides)
    plans = None
    if plan.fused_ffts:
        plans = eng.ffts.fused_plans(F.precision, adjoint, k, x.dtype, F.dtype, plan.ffts,
                                     plan.fold)
    if plans is not None:
        n_in, n_out = (F.nd, F.nm) if adjoint else (F.nm, F.nd)
        xb = eng.buffers.xhat_buffer(F.precision, k, n_in)
        xhat = eng.ffts.pad_fft(plans, x, out=xb)
        yhat = eng.buffers.yhat_buffer(F.precision, k, n_out)
        eng.apply(xhat, adjoint, yhat.dtype, out=yhat, xhat_scaled=plans.xhat_scaled,
                  plan=plan.launches)
        yb = eng.buffers.y_buffer(F.precision, k, n_out, F.dtype)
        scratch = yhat  # the inverse overwrites it: its time does not depend on the values
        if plans.split_sum:  # the inverse loads stage 3's partial sums and adds them
            nbytes = eng.buffers.inverse_input_nbytes(F.precision, plans, k * n_out)
            scratch = cp.zeros(-(-nbytes // 16), dtype=np.complex128)
        t_in = median_time(cp, lambda: eng.ffts.pad_fft(plans, x, out=xb), repeat)
        t_out = median_time(cp, lambda: eng.ffts.ifft_unpad(plans, scratch, out=yb), repeat)
    else:
        xhat = F.fft(F.broadcast_and_pad(x))
        yhat = F.sbgemv(xhat, adjoint)
        t_in = median_time(cp, lambda: F.fft(F.broadcast_and_pad(x)), repeat)
        t_out = median_time(cp, lambda: F.unpad_and_reduce(F.ifft(yhat)), repeat)
    return t_in, t_out, F.khat_nbytes + xhat.nbytes + yhat.nbytes


class PlainCupy:
    """The plain pipeline a CuPy user writes: rfft -> matmul -> irfft, Khat as (Nf, Nd, Nm)."""

    def __init__(self, cp, K, nt, L, cdtype):
        self.cp, self.nt, self.L = cp, nt, L
        rdtype = np.float64 if cdtype == np.complex128 else np.float32
        self.rdtype = rdtype
        self.khat = cp.ascontiguousarray(
            cp.fft.rfft(K.astype(rdtype), n=L, axis=-1).transpose(2, 0, 1)
        ).astype(cdtype)

    def matvec(self, m):
        cp = self.cp
        mh = cp.fft.rfft(m.astype(self.rdtype), n=self.L, axis=-1)  # (Nm, Nf)
        dh = cp.matmul(self.khat, mh.T[:, :, None])[:, :, 0]  # (Nf, Nd)
        return cp.fft.irfft(dh.T, n=self.L, axis=-1)[:, : self.nt]

    def rmatvec(self, d):
        cp = self.cp
        dh = cp.fft.rfft(d.astype(self.rdtype), n=self.L, axis=-1)
        kh_h = self.khat.conj().transpose(0, 2, 1)  # Khat^H, materialised by matmul
        mh = cp.matmul(kh_h, dh.T[:, :, None])[:, :, 0]
        return cp.fft.irfft(mh.T, n=self.L, axis=-1)[:, : self.nt]


class PylopsMDC:
    """PyLops ``MDC`` with the kernel's spectrum, the operator inverse-problem users pick instead.

    ``MDC(G, nt=L, nv=1, twosided=False, prescaled=True)`` with ``G = rfft(K, n=L)`` as
    ``(Nf, Nd, Nm)`` is the circular convolution of length ``L``; zero-padding the input to ``L``
    and keeping the first ``Nt`` outputs gives the same forward and adjoint as ``BlockToeplitz``.
    ``xp`` is NumPy or CuPy (PyLops follows the array module of ``G``).
    """

    def __init__(self, xp, K, nt, L, cdtype):
        from pylops.waveeqprocessing import MDC

        self.xp, self.nt, self.L = xp, nt, L
        self.nd, self.nm = K.shape[0], K.shape[1]
        rdtype = np.float64 if cdtype == np.complex128 else np.float32
        self.rdtype = rdtype
        G = xp.ascontiguousarray(xp.fft.rfft(K.astype(rdtype), n=L, axis=-1).transpose(2, 0, 1))
        self.op = MDC(G.astype(cdtype), nt=L, nv=1, twosided=False, prescaled=True)

    def _pad(self, v):
        x = self.xp.zeros((self.L, v.shape[0]), dtype=self.rdtype)
        x[: self.nt] = v.T
        return x.ravel()

    def matvec(self, m):
        return self.op.matvec(self._pad(m)).reshape(self.L, self.nd)[: self.nt].T

    def rmatvec(self, d):
        return self.op.rmatvec(self._pad(d)).reshape(self.L, self.nm)[: self.nt].T


def have_pylops() -> bool:
    try:
        import pylops  # noqa: F401
    except ImportError:
        return False
    return True


def table_header(title: str, columns: str) -> None:
    """Print a table's title and header; every table starts with the size (Nm, Nd, Nt)."""
    hdr = f"{'Nm':>7} {'Nd':>4} {'Nt':>5} {columns}"
    print(f"\n## {title}")
    print(hdr)
    print("-" * len(hdr))


def count_launches(cp, fn) -> int | None:
    """Kernel nodes in a CUDA graph captured from one call of ``fn``, a product of an operator
    built with plan ``graphs=0`` (its own graph replay off: the default's kernels, at the sizes
    it fuses), or None if unsupported."""
    try:
        from cuda.bindings import runtime as rt
    except Exception:
        return None
    s = cp.cuda.Stream(non_blocking=True)
    try:
        with s:
            (err,) = rt.cudaStreamBeginCapture(
                s.ptr, rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
            )
            if err != rt.cudaError_t.cudaSuccess:
                return None
            fn()
            err, graph = rt.cudaStreamEndCapture(s.ptr)
        if err != rt.cudaError_t.cudaSuccess:
            return None
        err, _, n = rt.cudaGraphGetNodes(graph, 0)
        err, nodes, n = rt.cudaGraphGetNodes(graph, n)
        kinds = [rt.cudaGraphNodeGetType(nd)[1] for nd in nodes]
        rt.cudaGraphDestroy(graph)
        return sum(1 for k in kinds if k == rt.cudaGraphNodeType.cudaGraphNodeTypeKernel)
    except Exception as exc:  # pragma: no cover - diagnostics only
        print(f"  (launch count unavailable: {exc})", file=sys.stderr)
        return None


def stage_table(cp, fm, sizes, precs, bw, rng, repeat, results) -> None:
    """Time each of the five stages alone, and the whole product: stage by stage, with stages 1
    and 5 inside the FFTs (the row FFT kernels or cuFFT callbacks, where available), and as
    one graph."""
    table_header("stages (ms): each stage timed alone; whole product stage by stage, with pad and unpad "
                 "fused into the FFTs ('fused'), and as one graph",
                 f"{'prec':>6} {'dir':>4} | {'pad':>6} {'fft':>6} {'sbgemv':>6} {'ifft':>6} {'unpad':>6} "
                 f"{'sum':>6} | {'stages':>6} {'fused':>6} {'graph':>6} | {'floor':>6}")
    results["stages"] = []
    for nm, nd, nt in sizes:
        K = cp.asarray(rng.standard_normal((nd, nm, nt)))
        for p in precs:
            F = fm.BlockToeplitz(K, p)
            floor = (F.khat_nbytes + (nm + nd) * nt * 8) / bw
            for adjoint in (False, True):
                n_in = nd if adjoint else nm
                x = cp.asarray(rng.standard_normal((1, n_in, nt)))
                padded = F.broadcast_and_pad(x)
                xhat = F.fft(padded)
                yhat = F.sbgemv(xhat, adjoint)
                ypad = F.ifft(yhat.copy())
                t = [median_time(cp, lambda: F.broadcast_and_pad(x), repeat),
                     median_time(cp, lambda: F.fft(padded), repeat),
                     median_time(cp, lambda: F.sbgemv(xhat, adjoint), repeat),
                     median_time(cp, lambda: F.ifft(yhat), repeat),
                     median_time(cp, lambda: F.unpad_and_reduce(ypad), repeat)]
                whole = {}
                for name, graphs, fused in (("stages", "0", "0"), ("fused", "0", "auto"),
                                            ("graph", "1", "auto")):
                    # the plan is read once, when an operator is built: one for each
                    Fp = fm.BlockToeplitz(K, p, plan={"graphs": graphs, "fft_callbacks": fused,
                                                     "row_fft": fused})
                    whole[name] = median_time(cp, lambda: Fp._apply(x, adjoint), repeat)
                    del Fp
                if not F.plan(1, adjoint).fused_ffts:
                    whole["fused"] = float("nan")  # nothing fuses here: 'fused' ran stage by stage
                d = "adj" if adjoint else "fwd"
                print(f"{nm:>7} {nd:>4} {nt:>5} {p:>6} {d:>4} | " + " ".join(f"{v * 1e3:6.3f}" for v in t)
                      + f" {sum(t) * 1e3:6.3f} | {whole['stages'] * 1e3:6.3f} {whole['fused'] * 1e3:6.3f} "
                      f"{whole['graph'] * 1e3:6.3f} | {floor * 1e3:6.3f}")
                results["stages"].append(dict(nm=nm, nd=nd, nt=nt, precision=p, direction=d, stages=t,
                                              stage_by_stage=whole["stages"], fused=whole["fused"],
                                              graph=whole["graph"], floor=floor))
                sys.stdout.flush()
            del F
        del K
        cp.get_default_memory_pool().free_all_blocks()


TARGET_RATIO = 0.90        # single vector: floor / time, forward and adjoint
TARGET_H_SPEEDUP = 3.3     # ddhdd against ddddd on (5000, 100, 1000)
TARGET_PER_RHS = 0.10      # batches: time per right-hand side over the k = 1 time


def target_summary(results) -> list[str]:
    """Lines that check a run's numbers against the GPU kernel layer's targets: every single
    product at TARGET_RATIO of the floor (and, where it falls short, whether the FFT stages'
    bound leaves room for it), ddhdd TARGET_H_SPEEDUP times faster than ddddd on (5000, 100,
    1000), and batches at TARGET_PER_RHS per right-hand side and no slower than cuBLAS."""
    lines = []
    mv = results.get("matvec", [])
    if mv:
        short = [r for r in mv if r["floor"] / r["seconds"] < TARGET_RATIO]
        lines.append(f"single vector at >= {TARGET_RATIO:.2f} of the floor: "
                     f"{len(mv) - len(short)} of {len(mv)}")
        for r in short:
            bound = r.get("bound")
            why = "" if bound is None else (f"; bound {bound:.2f}" + (
                ", below the target: the FFT stages leave no room" if bound < TARGET_RATIO else ""))
            lines.append(f"  short: ({r['nm']}, {r['nd']}, {r['nt']}) {r['precision']} {r['direction']} "
                         f"{r['floor'] / r['seconds']:.2f}{why}")
        rows = {(r["nm"], r["nd"], r["nt"], r["precision"], r["direction"]): r for r in mv}
        for d in ("fwd", "adj"):
            key = (5000, 100, 1000)
            dd, hh = rows.get(key + ("ddddd", d)), rows.get(key + ("ddhdd", d))
            if dd is not None and hh is not None:
                x = dd["seconds"] / hh["seconds"]
                ok = "met" if x >= TARGET_H_SPEEDUP else "short"
                line = (f"ddhdd against ddddd on (5000, 100, 1000) {d}: {x:.2f}x "
                        f"(target {TARGET_H_SPEEDUP}x): {ok}")
                if dd.get("bound") and hh.get("bound"):
                    # each product at its bound: the FFTs as timed, stage 3 at the read-only rate
                    at_d, at_h = dd["floor"] / dd["bound"], hh["floor"] / hh["bound"]
                    line += (f"; at their bounds {at_d / at_h:.2f}x (ddddd at "
                             f"{at_d / dd['seconds']:.2f} of its bound's speed, ddhdd at "
                             f"{at_h / hh['seconds']:.2f})")
                if dd.get("b2b_seconds") and hh.get("b2b_seconds"):
                    # the device's own time: products queued back to back, no host in between
                    line += (f"; back to back {dd['b2b_seconds'] / hh['b2b_seconds']:.2f}x "
                             f"({dd['b2b_seconds'] * 1e3:.3f} / {hh['b2b_seconds'] * 1e3:.3f} ms)")
                lines.append(line)
    bt = results.get("batches", [])
    if bt:
        per = [r for r in bt if r["tk"] / r["k"] / r["t1"] > TARGET_PER_RHS]
        slow = [r for r in bt if r["tk"] > r["matmul_tk"]]
        lines.append(f"batches at <= {TARGET_PER_RHS:.2f} per right-hand side: "
                     f"{len(bt) - len(per)} of {len(bt)}; no slower than cuBLAS: "
                     f"{len(bt) - len(slow)} of {len(bt)}")
        for r in per:
            bound = r.get("bound")
            why = "" if bound is None else (f"; bound {bound:.3f}" + (
                ", above the target: the batch's bytes leave no room" if bound > TARGET_PER_RHS
                else ""))
            lines.append(f"  per right-hand side: ({r['nm']}, {r['nd']}, {r['nt']}) "
                         f"{r['precision'][2]} {r['direction']} {r['tk'] / r['k'] / r['t1']:.3f}{why}")
        for r in slow:
            lines.append(f"  slower than cuBLAS: ({r['nm']}, {r['nd']}, {r['nt']}) {r['precision'][2]} "
                         f"{r['direction']} {r['tk'] / r['matmul_tk']:.2f}x")
    return lines


def _plan_setting(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--against``: one plan override (fftmatvec.gpu.plan, docs/gpu.md)."""
    from fftmatvec import FFTMatvecError
    from fftmatvec.gpu.plan import parse_overrides

    try:
        (key, value), = parse_overrides(text, "--against").items()
    except (FFTMatvecError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"expected one plan KEY=VALUE, got {text!r}: {exc}")
    return key, value


def interleaved(time_own, time_other, rounds: int = 3) -> tuple[float, float]:
    """(best, best) of ``rounds`` alternating calls of two timers (each a median): a product
    timed in separate runs moves between them."""
    own, other = [], []
    for _ in range(rounds):
        own.append(time_own())
        other.append(time_other())
    return min(own), min(other)


def plan_with(F, setting, adjoint, k, in_dtype, out_dtype):
    """Stage 3's launches of a product of ``F`` made with the switch ``setting`` (NAME, VALUE)
    in place of the operator's overrides (:func:`fftmatvec.gpu.planning.stage3_launches`);
    the operator is left as it was."""
    eng = F._engine
    problem = Problem(F.nd, F.nm, F.nt, F.fft_len, k, adjoint, F.precision.letters)
    return stage3_launches(problem, eng.device, eng.rules, Overrides.resolve(dict([setting])),
                           in_dtype, out_dtype)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sizes", default="all", help="all, or a list like 1000x100x1000,... (Nm x Nd x Nt)")
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--batch-sizes", type=int, default=4, metavar="N",
                    help="the batch table takes the first N of --sizes (default 4)")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--skip-single", action="store_true")
    ap.add_argument("--skip-batches", action="store_true")
    ap.add_argument("--skip-small", action="store_true")
    ap.add_argument("--stages", action="store_true", help="also time each stage and graph on/off")
    ap.add_argument("--against", metavar="NAME=VALUE", type=_plan_setting,
                    help="also time each single-vector product and each batch's stage 3 with "
                         "this plan override set (e.g. fused_adjoint=0), "
                         "interleaved with the default in the same run, best of 3 medians each")
    ap.add_argument("--json", help="write all numbers to this file")
    args = ap.parse_args(argv)

    import cupy as cp

    import fftmatvec as fm
    from fftmatvec import backend, kernels

    sizes = SIZES if args.sizes == "all" else [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    precs = args.precisions.split(",")
    dev = backend.device_description()
    bw = copy_bandwidth(cp)
    bw_read = read_bandwidth(cp)
    print(f"# device: {dev['gpu']} ({dev['arch']}), CuPy {cp.__version__}, fftmatvec {fm.__version__}")
    print(f"# kernels: {kernels.describe().get('current_device')}")
    print(f"# copy bandwidth (read+write): {bw / 1e12:.3f} TB/s; read-only: {bw_read / 1e12:.3f} TB/s")
    rng = np.random.default_rng(1234)
    results = {"device": dev, "copy_bandwidth": bw, "read_bandwidth": bw_read, "matvec": [],
               "batches": [], "small": []}

    single = [] if args.skip_single else sizes
    if single:
        table_header("single vector: ratio = floor / time (1.0 = bandwidth limit); 'bound' = the best "
                     "ratio the FFT stages allow: floor / (the FFTs as the product runs them, timed "
                     "alone + stage 3's bytes at the read-only bandwidth)",
                     f"{'prec':>6} {'dir':>4} | {'time ms':>8} {'floor ms':>8} {'ratio':>6} {'bound':>6} | "
                     f"{'plain ms':>8} {'ratio':>6} | {'adj/fwd':>7} | {'MDC ms':>8} {'x ours':>6}")
    for nm, nd, nt in single:
        K = cp.asarray(rng.standard_normal((nd, nm, nt)))
        m = cp.asarray(rng.standard_normal((nm, nt)))
        d = cp.asarray(rng.standard_normal((nd, nt)))
        for p in precs:
            F = fm.BlockToeplitz(K, p)
            vec_bytes = (nm + nd) * nt * 8
            floor = (F.khat_nbytes + vec_bytes) / bw
            tf = median_time(cp, lambda: F.matvec(m), args.repeat)
            ta = median_time(cp, lambda: F.rmatvec(d), args.repeat)
            b2b = {"fwd": back_to_back_time(cp, lambda: F.matvec(m), args.repeat),
                   "adj": back_to_back_time(cp, lambda: F.rmatvec(d), args.repeat)}
            against = {}  # direction -> (default, with the switch): interleaved, best of 3
            if args.against:
                name, value = args.against
                Fa = fm.BlockToeplitz(K, p, plan={name: value})  # the plan is read once, here
                for direction, fn, fa in (("fwd", lambda: F.matvec(m), lambda: Fa.matvec(m)),
                                          ("adj", lambda: F.rmatvec(d), lambda: Fa.rmatvec(d))):
                    against[direction] = interleaved(lambda: median_time(cp, fn, args.repeat),
                                                     lambda: median_time(cp, fa, args.repeat))
                del Fa
            plain = {}
            if not args.no_baseline and p in ("ddddd", "sssss"):
                P = PlainCupy(cp, K, nt, F.fft_len, np.complex128 if p == "ddddd" else np.complex64)
                pfloor = (P.khat.nbytes + vec_bytes) / bw
                plain = {
                    "fwd": median_time(cp, lambda: P.matvec(m), args.repeat),
                    "adj": median_time(cp, lambda: P.rmatvec(d), max(3, args.repeat // 4)),
                    "floor": pfloor,
                }
                del P
            mdc = {}
            if not args.no_baseline and have_pylops() and p in ("ddddd", "sssss"):
                M = PylopsMDC(cp, K, nt, F.fft_len, np.complex128 if p == "ddddd" else np.complex64)
                for direction, fn, ref in (("fwd", M.matvec, F.matvec), ("adj", M.rmatvec, F.rmatvec)):
                    v = m if direction == "fwd" else d
                    err = float(cp.linalg.norm(fn(v) - ref(v)) / cp.linalg.norm(ref(v)))
                    if err > (1e-10 if p == "ddddd" else 1e-4):
                        raise RuntimeError(f"PyLops MDC disagrees with the product: {direction} {err:.1e}")
                    mdc[direction] = median_time(cp, lambda: fn(v), args.repeat)
                del M
            bounds = {}
            for direction, vec in (("fwd", m), ("adj", d)):
                t_in, t_out, nbytes3 = fft_stage_times(cp, F, vec[None], direction == "adj",
                                                       args.repeat)
                bounds[direction] = floor / (t_in + t_out + nbytes3 / bw_read)
            for direction, t in (("fwd", tf), ("adj", ta)):
                pt = plain.get(direction)
                ptxt = f"{pt * 1e3:8.3f} {plain['floor'] / pt:6.2f}" if pt else f"{'-':>8} {'-':>6}"
                adjfwd = f"{ta / tf:7.2f}" if direction == "adj" else " " * 7
                mt = mdc.get(direction)
                mtxt = f"{mt * 1e3:8.3f} {mt / t:6.2f}" if mt else f"{'-':>8} {'-':>6}"
                print(f"{nm:>7} {nd:>4} {nt:>5} {p:>6} {direction:>4} | {t * 1e3:8.3f} {floor * 1e3:8.3f} "
                      f"{floor / t:6.2f} {bounds[direction]:6.2f} | {ptxt} | {adjfwd} | {mtxt}")
                row = dict(nm=nm, nd=nd, nt=nt, precision=p, direction=direction,
                           seconds=t, b2b_seconds=b2b[direction], floor=floor,
                           bound=bounds[direction], plain_seconds=pt,
                           plain_floor=plain.get("floor"), pylops_mdc_seconds=mt)
                if direction in against:
                    own, other = against[direction]
                    row.update(against="=".join(args.against), interleaved_seconds=own,
                               against_seconds=other)
                results["matvec"].append(row)
            for direction, (own, other) in against.items():
                print(f"{'':>26} {direction:>4} |  {own * 1e3:.3f} ms interleaved with "
                      f"{'='.join(args.against)}: {other * 1e3:.3f} ms ({other / own:.2f}x)")
            sys.stdout.flush()
            del F
        del K
        cp.get_default_memory_pool().free_all_blocks()

    if args.stages:
        stage_table(cp, fm, sizes, precs, bw, rng, args.repeat, results)

    if not args.skip_batches:
        k = args.batch
        table_header(f"batches: k={k} right-hand sides; per-RHS time relative to k=1 (target <= 0.10), "
                     f"against cupy.matmul (cuBLAS) on the same batched product",
                     f"{'store':>5} {'dir':>4} | {'k=1 ms':>8} {'k ms':>8} {'per-RHS':>7} {'bound':>6} | "
                     f"{'matmul1':>8} {'matmulk':>8} {'per-RHS':>7} | {'ours/cuBLAS':>11}")
        for nm, nd, nt in sizes[: args.batch_sizes]:
            K = cp.asarray(rng.standard_normal((nd, nm, nt)))
            for p in precs:
                F = fm.BlockToeplitz(K, p)
                eng = F._engine
                cdt = np.complex128 if p[2] == "d" else np.complex64
                for adjoint in (False, True):
                    n_in, n_out = (nd, nm) if adjoint else (nm, nd)
                    x1 = (cp.asarray(rng.standard_normal((1, n_in, F.nf))) + 0j).astype(cdt)
                    xk = (cp.asarray(rng.standard_normal((k, n_in, F.nf))) + 0j).astype(cdt)
                    x1, scaled = stage3_input(F, x1, adjoint)
                    xk, _ = stage3_input(F, xk, adjoint)
                    t1 = median_time(cp, lambda: eng.apply(x1, adjoint, cdt, xhat_scaled=scaled),
                                     args.repeat)
                    tk = median_time(cp, lambda: eng.apply(xk, adjoint, cdt, xhat_scaled=scaled),
                                     args.repeat)
                    # cuBLAS on the same product, Khat as (Nf, Nd, Nm) in complex64 for s and h
                    kh = cp.random.standard_normal((F.nf, nd, nm), dtype=np.float32).astype(cdt)
                    kh += 1j * cp.random.standard_normal((F.nf, nd, nm), dtype=np.float32)
                    A = kh.conj().transpose(0, 2, 1) if adjoint else kh
                    X1 = cp.asarray(rng.standard_normal((F.nf, n_in, 1))).astype(cdt)
                    Xk = cp.asarray(rng.standard_normal((F.nf, n_in, k))).astype(cdt)
                    if adjoint:
                        A = cp.ascontiguousarray(A)  # give cuBLAS its best case: Khat^H stored
                    # the batch's fewest bytes (Khat once, the k vectors in and out) at the
                    # read-only bandwidth, per right-hand side, against the k=1 product
                    kbytes = F.khat_nbytes + k * F.nf * (n_in * xk.itemsize
                                                         + n_out * np.dtype(cdt).itemsize)
                    bound = kbytes / bw_read / k / t1
                    m1 = median_time(cp, lambda: cp.matmul(A, X1), args.repeat)
                    mk = median_time(cp, lambda: cp.matmul(A, Xk), args.repeat)
                    del kh, A
                    dname = "adj" if adjoint else "fwd"
                    print(f"{nm:>7} {nd:>4} {nt:>5} {p[2]:>5} {dname:>4} | {t1 * 1e3:8.3f} {tk * 1e3:8.3f} "
                          f"{tk / k / t1:7.3f} {bound:6.3f} | {m1 * 1e3:8.3f} {mk * 1e3:8.3f} {mk / k / m1:7.3f} | "
                          f"{tk / mk:11.2f}")
                    row = dict(nm=nm, nd=nd, nt=nt, precision=p, direction=dname, k=k, t1=t1,
                               tk=tk, matmul_t1=m1, matmul_tk=mk, bound=bound)
                    if args.against:  # the k-vector stage 3 on the switch's plan, interleaved
                        plan = plan_with(F, args.against, adjoint, k, xk.dtype, cdt)
                        packed = eng.stage3.pack(adjoint, k, xk.dtype, cdt, plan)  # packed once
                        own, other = interleaved(
                            lambda: median_time(cp, lambda: eng.apply(
                                xk, adjoint, cdt, xhat_scaled=scaled), args.repeat),
                            lambda: median_time(cp, lambda: eng.apply(
                                xk, adjoint, cdt, xhat_scaled=scaled, plan=packed),
                                args.repeat))
                        row.update(against="=".join(args.against), interleaved_seconds=own,
                                   against_seconds=other,
                                   against_kernels=[la.name for la in plan])
                        print(f"{'':>26} {dname:>4} |  {own * 1e3:.3f} ms interleaved with "
                              f"{'='.join(args.against)}: {other * 1e3:.3f} ms "
                              f"({other / own:.2f}x; {plan[0].name})")
                    results["batches"].append(row)
                    sys.stdout.flush()
                del F
            del K
            cp.get_default_memory_pool().free_all_blocks()

    if not args.skip_small:
        table_header("small problems: time per matvec (launch latency dominates): the operator as it "
                     "runs by default (NVIDIA: the fused product), and replaying its stages as one CUDA "
                     "graph (graphs=1); 'launches' counts the kernels of one default product",
                     f"{'prec':>6} {'dir':>4} | {'default us':>10} {'graph us':>8} {'launches':>8} | "
                     f"{'plain us':>8}")
        for nm, nd, nt in SMALL:
            K = cp.asarray(rng.standard_normal((nd, nm, nt)))
            m = cp.asarray(rng.standard_normal((nm, nt)))
            d = cp.asarray(rng.standard_normal((nd, nt)))
            for p in ("ddddd", "sssss"):
                F = fm.BlockToeplitz(K, p)
                # the plan is read once, when an operator is built: one replaying a graph, one
                # without (its kernels are counted)
                Fg = fm.BlockToeplitz(K, p, plan={"graphs": 1})
                Fs = fm.BlockToeplitz(K, p, plan={"graphs": 0})
                P = PlainCupy(cp, K, nt, F.fft_len, np.complex128 if p == "ddddd" else np.complex64)
                for dname, fn, gfn, sfn, pfn in (
                        ("fwd", lambda: F.matvec(m), lambda: Fg.matvec(m), lambda: Fs.matvec(m),
                         lambda: P.matvec(m)),
                        ("adj", lambda: F.rmatvec(d), lambda: Fg.rmatvec(d),
                         lambda: Fs.rmatvec(d), lambda: P.rmatvec(d))):
                    t = median_time(cp, fn, 200, warmup=10)
                    tg = median_time(cp, gfn, 200, warmup=10)
                    pt = median_time(cp, pfn, 200, warmup=10)
                    n = count_launches(cp, sfn)
                    print(f"{nm:>7} {nd:>4} {nt:>5} {p:>6} {dname:>4} | {t * 1e6:10.1f} {tg * 1e6:8.1f} "
                          f"{str(n):>8} | {pt * 1e6:8.1f}")
                    results["small"].append(dict(nm=nm, nd=nd, nt=nt, precision=p, direction=dname,
                                                 seconds=t, graph_seconds=tg, launches=n,
                                                 plain_seconds=pt))
    summary = target_summary(results)
    if summary:
        print("\n## targets")
        print("\n".join(summary))
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
