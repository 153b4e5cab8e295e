"""Stages 1 and 5 inside cuFFT's transforms (LTO callbacks), against the float64 dense product
and against the stages run one by one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import set_plan

import fftmatvec as fm
from fftmatvec import backend
from fftmatvec.gpu import callbacks as _fftcb
from fftmatvec.gpu import rowfft as _rowfft
from fftmatvec.gpu import KhatStore, Planner
from fftmatvec.gpu.ffts import FFTStages
from fftmatvec.gpu.plan import FFT_CALLBACKS, FFT_IN_FUSED_ADJOINT, FFT_PAD, FFT_ROW, FFT_UNPAD
from fftmatvec.precision import PrecisionConfig

from conftest import dense_btt, rel_err, to_numpy

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")


# ---- host side (no GPU needed) --------------------------------------------------------------
def test_mapped_library_finds_what_is_loaded():
    path = _fftcb._mapped_library("libc")
    if path is None:  # a libc linked under another name
        pytest.skip("no libc.so* mapped")
    assert "libc.so" in path
    assert _fftcb._mapped_library("libfftmatvec_no_such_library") is None


def test_support_says_why_not(monkeypatch):
    ok, why = _fftcb.support()
    if not backend.gpu_available():
        assert (ok, why) == (False, "no GPU")
    else:
        assert isinstance(ok, bool) and why


def test_ctype():
    assert _fftcb.ctype(np.float64) == "double" and _fftcb.ctype(np.float32) == "float"
    with pytest.raises(KeyError):
        _fftcb.ctype(np.complex64)


def _host_engine(monkeypatch, ok=True, fail=None):
    """A kernel engine's FFT stages on the host (no GPU): sizes, and cuFFT plans recorded
    instead of made."""
    calls = []

    def get_plan(kind, L, batch, double, load=None, store=None, store_info=None):
        if fail is not None:
            raise _fftcb.CallbackError(fail)
        calls.append((kind, L, batch, double, load, store))
        if store_info is not None:
            calls.append(("store_info", store_info))
        return f"{kind} plan"

    monkeypatch.setattr(_fftcb, "get_plan", get_plan)
    # no planner methods: the plans are built from the kinds given, nothing is chosen
    store = SimpleNamespace(xp=np, nd=3, nm=5, nf=11, fft_len=20, nfp=12, scale=None,
                            compute=np.dtype(np.complex64))
    store.scales_input = lambda adjoint: KhatStore.scales_input(store, adjoint)
    device = SimpleNamespace(multiprocessors=132, smem_per_block=227 * 1024)
    return FFTStages(store, device, nt=10), calls


CB = (FFT_CALLBACKS, FFT_CALLBACKS)


def test_fused_plans_name_the_right_callbacks(monkeypatch):
    """Each plan gets the callbacks, sizes and types of its product."""
    engine, calls = _host_engine(monkeypatch)
    prec = PrecisionConfig("sdhds")  # stage 1 float32, FFTs float64, stage 3 h, stage 5 float32
    plans = engine.fused_plans(prec, False, 2, np.float64, np.float32, CB)
    assert plans == ("r2c plan", "c2r plan", False, 0) and not plans.xhat_scaled
    sizes = {"FMV_L": "20ULL", "FMV_NT": "10ULL"}
    assert calls == [
        ("r2c", 20, 2 * 5, True,
         ("FMV_PAD_LOAD", {**sizes, "FMV_TIN": "double", "FMV_TMID": "float", "FMV_TFFT": "double"}),
         ("FMV_XHAT_STORE", {})),  # stage 3 computes in float32: complex64 out of the FFT
        ("c2r", 20, 2 * 3, True, ("FMV_YHAT_LOAD", {}),  # stage 3's complex64 sums, widened
         ("FMV_UNPAD_STORE", {**sizes, "FMV_TOUT": "float", "FMV_TMID": "float", "FMV_TFFT": "double"})),
    ]
    # the adjoint transforms Nd rows forward and Nm back; float32 FFTs need no complex64 store
    calls.clear()
    engine.fused_plans(PrecisionConfig("sssss"), True, 1, np.float32, np.float32, CB)
    (_, _, b1, d1, _, store1), (_, _, b2, d2, load2, _) = calls
    assert (b1, b2, d1, d2, store1, load2) == (3, 5, False, False, None, None)
    # d stage 3 computes in complex128: no store callback, no widening load either
    calls.clear()
    engine.compute = np.dtype(np.complex128)
    engine.fused_plans(PrecisionConfig("ddddd"), False, 1, np.float64, np.float64, CB)
    assert calls[0][5] is None and calls[1][4] is None


def test_fused_plans_scale_float16_adjoints(monkeypatch):
    """With float16 storage the adjoint's forward FFT writes its output times the row scales
    (read from the engine's scale array), in either FFT precision; the forward product keeps
    the plain complex64 store."""
    engine, calls = _host_engine(monkeypatch)
    engine.khat_store.scale = "the scales"
    sizes = {"FMV_NF": "11ULL", "FMV_ND": "3ULL", "FMV_NFP": "12ULL"}
    for prec, cplx, double in (("ddhdd", "double2", True), ("sshss", "float2", False)):
        calls.clear()
        plans = engine.fused_plans(PrecisionConfig(prec), True, 2, np.float64,
                                         np.float64, CB)
        assert plans.xhat_scaled
        (kind, _, batch, dbl, _, store), info, (kind2, _, batch2, _, _, _) = calls
        assert (kind, batch, dbl, kind2, batch2) == ("r2c", 2 * 3, double, "c2r", 2 * 5)
        assert store == ("FMV_XHAT_SCALE_STORE", {**sizes, "FMV_TFFTC": cplx})
        assert info == ("store_info", "the scales")
    calls.clear()
    plans = engine.fused_plans(PrecisionConfig("ddhdd"), False, 2, np.float64,
                                     np.float64, CB)
    assert not plans.xhat_scaled and calls[0][5] == ("FMV_XHAT_STORE", {})


def test_fused_plans_add_the_splits_in_the_inverse_load(monkeypatch):
    """Where the plan's fold says so, the inverse cuFFT plan loads stage 3's partial sums and
    adds them (in stage 3's compute type, rounded to the type of its sums, widened to the
    FFT's), the splits k n_out Nf elements apart; the row FFT kernels never do (an error), nor
    a product with no inverse plan."""
    engine, calls = _host_engine(monkeypatch)
    plans = engine.fused_plans(PrecisionConfig("ddhdd"), False, 2, np.float64,
                                     np.float64, CB, fold=6)
    assert plans.split_sum == 6
    assert calls[-1][4] == ("FMV_SPLIT_LOAD", {
        "FMV_SPLITS": "6", "FMV_SPLIT_STRIDE": f"{2 * 3 * 11}ULL", "FMV_TPART": "float2",
        "FMV_TYHAT": "float2", "FMV_TFFTC": "double2"})
    engine.compute = np.dtype(np.complex128)  # d stage 3, float32 inverse FFT
    plans = engine.fused_plans(PrecisionConfig("dddsd"), True, 1, np.float64,
                                     np.float64, CB, fold=6)
    assert plans.split_sum == 6
    assert calls[-1][:3] == ("c2r", 20, 5) and calls[-1][4] == ("FMV_SPLIT_LOAD", {
        "FMV_SPLITS": "6", "FMV_SPLIT_STRIDE": f"{5 * 11}ULL", "FMV_TPART": "double2",
        "FMV_TYHAT": "float2", "FMV_TFFTC": "float2"})
    monkeypatch.setattr(_rowfft, "RowFFT", lambda kind, *a, **kw: f"{kind} kernel")
    for ffts in ((FFT_CALLBACKS, FFT_IN_FUSED_ADJOINT), (FFT_ROW, FFT_ROW)):
        with pytest.raises(ValueError, match="only an inverse cuFFT plan with callbacks adds"):
            engine.fused_plans(PrecisionConfig("ddddd"), True, 1, np.float64,
                                     np.float64, ffts, fold=6)
    assert engine.fused_plans(PrecisionConfig("ddddd"), False, 1, np.float64,
                                    np.float64, (FFT_ROW, FFT_ROW)) == ("r2c kernel",
                                                                        "c2r kernel", False, 0)


def test_ifft_unpad_checks_what_it_reads():
    """The stages-4+5 step refuses an input smaller than what its plan reads: the spectra, or
    the partial sums of every split where the plan adds them, and names which."""
    from fftmatvec.gpu import FusedPlans

    engine = SimpleNamespace(nf=11, compute=np.dtype(np.complex64))
    ran = []
    out = SimpleNamespace(shape=(2, 3, 10), data=SimpleNamespace(ptr=2))

    def arr(nbytes):
        return SimpleNamespace(nbytes=nbytes, dtype=np.dtype(np.complex64),
                               data=SimpleNamespace(ptr=1))

    for splits, need, what in ((6, 6 * 2 * 3 * 11 * 8, "partial sums of 6 splits"),
                               (0, 2 * 3 * 11 * 8, "the spectra")):
        plans = FusedPlans("fwd", lambda i, o: ran.append((i, o)), False, splits)
        with pytest.raises(ValueError, match=what):
            FFTStages.ifft_unpad(engine, plans, arr(need - 1), out)
        assert ran == []
        assert FFTStages.ifft_unpad(engine, plans, arr(need), out) is out
        assert ran == [(1, 2)]
        ran.clear()


def test_fold_splits_takes_one_launch_of_few_splits(monkeypatch):
    """The splits the inverse adds: a stage 3 of one launch with 2 to FOLD_MAX_SPLITS
    splits; none for one split, more, or several launches."""
    from fftmatvec import gpu as _gpu

    def engine(*splits, rules=_gpu.rules_for("sm_90")):
        plan = [SimpleNamespace(splits=s) for s in splits]
        return SimpleNamespace(_plan=lambda *a: plan, rules=rules,
                               xhat_dtype=lambda prec: None, yhat_dtype=lambda prec: None)

    prec = PrecisionConfig("ddddd")
    top = _gpu.FOLD_MAX_SPLITS
    assert [Planner.fold_splits(engine(s), prec, False, 1) for s in (1, 2, top, top + 1)] \
        == [0, 2, top, 0]
    assert Planner.fold_splits(engine(4, 4), prec, False, 3) == 0
    off = _gpu.rules_for("sm_90").with_table({"fold_max_splits": 0})
    assert Planner.fold_splits(engine(2, rules=off), prec, False, 1) == 0


def test_fused_plans_refuse_the_stages_kinds(monkeypatch):
    """The transforms of a product run stage by stage are not a fused product's: an error,
    and cuFFT is not asked."""
    engine, calls = _host_engine(monkeypatch)
    prec = PrecisionConfig("ddddd")
    for ffts in ((FFT_PAD, FFT_UNPAD), (FFT_IN_FUSED_ADJOINT, FFT_CALLBACKS)):
        with pytest.raises(ValueError, match="row FFT kernels or cuFFT with callbacks"):
            engine.fused_plans(prec, False, 1, np.float64, np.float64, ffts)
    assert calls == []


def test_fused_plans_on_row_fft_kernels(monkeypatch):
    """Where the plan names the row FFT kernels, the plans are those, with each stage's
    precisions and the float16 adjoint's scales, and cuFFT is not asked (no callbacks needed)."""
    engine, calls = _host_engine(monkeypatch, ok=False)
    made = []
    ROW = (FFT_ROW, FFT_ROW)

    def row_fft(kind, L, nt, rows, in_dtype, mid_dtype, fft_dtype, out_dtype, scale=None,
                nd=1, nfp=0, **kw):
        made.append((kind, L, nt, rows, np.dtype(in_dtype).name, np.dtype(mid_dtype).name,
                     np.dtype(fft_dtype).name, np.dtype(out_dtype).name, scale, nd, nfp))
        return f"{kind} kernel"

    monkeypatch.setattr(_rowfft, "RowFFT", row_fft)
    plans = engine.fused_plans(PrecisionConfig("sdhds"), False, 2, np.float64,
                                     np.float32, ROW)
    assert plans == ("r2c kernel", "c2r kernel", False, 0)
    assert made == [("r2c", 20, 10, 2 * 5, "float64", "float32", "float64", "complex64", None, 3, 12),
                    ("c2r", 20, 10, 2 * 3, "complex64", "float32", "float64", "float32", None, 1, 0)]
    made.clear()
    engine.khat_store.scale = "the scales"
    plans = engine.fused_plans(PrecisionConfig("ddhdd"), True, 1, np.float32,
                                     np.float64, ROW)
    assert plans.xhat_scaled
    assert made[0] == ("r2c", 20, 10, 3, "float32", "float64", "float64", "complex64",
                       "the scales", 3, 12)
    assert made[1][:8] == ("c2r", 20, 10, 5, "complex64", "float64", "float64", "float64")
    made.clear()
    engine.compute = np.dtype(np.complex128)
    engine.fused_plans(PrecisionConfig("ddddd"), False, 1, np.float64, np.float64,
                             ROW)
    assert made[0][7] == "complex128" and made[1][4] == "complex128"
    made.clear()  # stages 3-5 as one kernel: no inverse transform
    plans = engine.fused_plans(PrecisionConfig("ddddd"), True, 1, np.float64,
                                     np.float64, (FFT_ROW, FFT_IN_FUSED_ADJOINT))
    assert plans.inv is None and [m[0] for m in made] == ["r2c"]
    assert calls == []


def test_fused_plans_mix_kernels_and_callbacks(monkeypatch):
    """A plan may name the row FFT kernels for one transform and cuFFT with callbacks for the
    other (make_plan: a transform of too few rows to fill the device); only that one is asked
    of cuFFT. A callback plan cuFFT cannot make raises (the executor plans again)."""
    engine, calls = _host_engine(monkeypatch)
    monkeypatch.setattr(_rowfft, "RowFFT", lambda kind, *a, **kw: f"{kind} kernel")
    prec = PrecisionConfig("ddddd")
    plans = engine.fused_plans(prec, False, 2, np.float64, np.float64,
                                     (FFT_ROW, FFT_CALLBACKS))
    assert plans == ("r2c kernel", "c2r plan", False, 0)
    assert [c[0] for c in calls] == ["c2r"]
    engine, calls = _host_engine(monkeypatch, fail="link failed")
    with pytest.raises(_fftcb.CallbackError, match="link failed"):
        engine.fused_plans(prec, False, 2, np.float64, np.float64, CB)


CALLBACKS = Path(__file__).resolve().parents[1] / "hip_kernels" / "fft_callbacks.cu"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
@pytest.mark.parametrize("which,types", [
    ("FMV_PAD_LOAD", {"FMV_TIN": "float", "FMV_TMID": "double", "FMV_TFFT": "double"}),
    ("FMV_PAD_LOAD", {"FMV_TIN": "double", "FMV_TMID": "float", "FMV_TFFT": "float"}),
    ("FMV_XHAT_STORE", {}),
    ("FMV_XHAT_SCALE_STORE", {"FMV_NF": "1001ULL", "FMV_ND": "7ULL", "FMV_NFP": "1008ULL",
                              "FMV_TFFTC": "double2"}),
    ("FMV_XHAT_SCALE_STORE", {"FMV_NF": "1001ULL", "FMV_ND": "7ULL", "FMV_NFP": "1008ULL",
                              "FMV_TFFTC": "float2"}),
    ("FMV_YHAT_LOAD", {}),
    ("FMV_SPLIT_LOAD", {"FMV_SPLITS": "6", "FMV_SPLIT_STRIDE": "100100ULL", "FMV_TPART": "float2",
                        "FMV_TYHAT": "float2", "FMV_TFFTC": "double2"}),
    ("FMV_SPLIT_LOAD", {"FMV_SPLITS": "2", "FMV_SPLIT_STRIDE": "7007ULL", "FMV_TPART": "double2",
                        "FMV_TYHAT": "float2", "FMV_TFFTC": "float2"}),
    ("FMV_UNPAD_STORE", {"FMV_TOUT": "float", "FMV_TMID": "float", "FMV_TFFT": "double"}),
])
def test_callbacks_compile_to_lto_ir(tmp_path, which, types):
    """Every callback compiles on its own to LTO-IR, as cuFFT takes it (nvcc here; NVRTC with
    the same options at run time)."""
    defines = {which: 1, "FMV_L": "2000ULL", "FMV_NT": "1000ULL", **types}
    out = tmp_path / "cb.fatbin"
    cmd = ["nvcc", "-arch=sm_90", "-rdc=true", "-dlto", "-fatbin", "-std=c++17", "-x", "cu",
           *(f"-D{k}={v}" for k, v in defines.items()), str(CALLBACKS), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 0


# ---- on the GPU ---------------------------------------------------------------------------
def _needs_callbacks():
    if backend.is_hip():
        pytest.skip("cuFFT callbacks are NVIDIA only")
    ok, why = _fftcb.support()
    if not ok:
        pytest.skip(why)


def _op(rng, shape, precision, dtype=np.float64):
    cp = backend.cupy
    K = rng.standard_normal(shape)
    return K, fm.BlockToeplitz(cp.asarray(K), precision, dtype=dtype)


def _rand(rng, *shape, dtype=np.float64):
    return backend.cupy.asarray(rng.standard_normal(shape).astype(dtype))


TOL = {"ddddd": 1e-12, "sssss": 1e-5, "ddhdd": 2e-3, "dsdsd": 1e-5, "sdhds": 2e-3, "ddsdd": 1e-5,
       "sshss": 2e-3}
CASES = [("ddddd", np.float64), ("ddddd", np.float32), ("sssss", np.float32),
         ("ddhdd", np.float64), ("dsdsd", np.float64), ("sdhds", np.float32),
         ("ddsdd", np.float64), ("sshss", np.float32)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("callbacks", ["0", "1"])
@pytest.mark.parametrize("graphs", ["0", "1"])
@pytest.mark.parametrize("precision,dtype", CASES, ids=lambda c: str(getattr(c, "__name__", c)))
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 11), (7, 2, 30)],
                         ids=lambda s: "x".join(map(str, s)))
def test_fused_matches_dense(monkeypatch, rng, callbacks, graphs, precision, dtype, shape):
    """Products with stages 1 and 5 inside the FFTs and without, replayed as a graph or not,
    against the float64 dense matrix; inputs are left as they were, outputs come in the
    interface dtype."""
    if callbacks == "1":
        _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", callbacks)
    set_plan(monkeypatch, "graphs", graphs)
    K, F = _op(rng, shape, precision, dtype)
    A = dense_btt(K)
    nd, nm, nt = shape
    for k in (1, 17):
        m = _rand(rng, k, nm, nt, dtype=dtype)
        d = _rand(rng, k, nd, nt, dtype=dtype)
        m0, d0 = m.copy(), d.copy()
        Y, Z = F.matmat(m), F.rmatmat(d)
        assert Y.shape == (k, nd, nt) and Y.dtype == dtype and Y.flags.c_contiguous
        assert Z.shape == (k, nm, nt) and Z.dtype == dtype and Z.flags.c_contiguous
        assert bool((m == m0).all()) and bool((d == d0).all())
        tol = max(TOL[precision], 2e-6 if dtype == np.float32 else 0.0)
        mm, dd = to_numpy(m).astype(np.float64), to_numpy(d).astype(np.float64)
        for b in (0, k - 1):
            assert rel_err(Y[b].ravel(), A @ mm[b].ravel()) < tol
            assert rel_err(Z[b].ravel(), A.T @ dd[b].ravel()) < tol


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ddddd", "sssss", "ddhdd"])
def test_fused_agrees_with_stages_one_by_one(monkeypatch, rng, precision):
    """The fused product and the unfused one differ only by the FFTs' own rounding."""
    _needs_callbacks()
    set_plan(monkeypatch, "graphs", "0")
    shape = (9, 40, 64)
    K = rng.standard_normal(shape)
    m = _rand(rng, shape[1], shape[2])
    d = _rand(rng, shape[0], shape[2])
    out = {}
    for mode in ("0", "1"):
        set_plan(monkeypatch, "fft_callbacks", mode)
        F = fm.BlockToeplitz(backend.cupy.asarray(K), precision)
        assert F.plan().ffts[0] != FFT_CALLBACKS or mode == "1"  # =0: never cuFFT callbacks
        assert (mode == "0") is (F.plan().mode("fft_callbacks") == "0")
        out[mode] = (F.matvec(m), F.rmatvec(d))
    tol = {"ddddd": 1e-13, "sssss": 1e-6, "ddhdd": 1e-6}[precision]
    assert rel_err(out["1"][0], to_numpy(out["0"][0])) < tol
    assert rel_err(out["1"][1], to_numpy(out["0"][1])) < tol


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ddddd", "ddhdd", "sssss"])
def test_fused_long_time_axis(monkeypatch, rng, precision):
    """A time axis long enough that cuFFT splits each transform into several passes (and may
    use its output buffer as scratch): against the NumPy float64 operator."""
    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", "0")
    shape = (2, 3, 40000)
    K = rng.standard_normal(shape)
    ref = fm.BlockToeplitz(K, "ddddd")
    F = fm.BlockToeplitz(backend.cupy.asarray(K), precision)
    m = rng.standard_normal((shape[1], shape[2]))
    d = rng.standard_normal((shape[0], shape[2]))
    tol = {"ddddd": 1e-11, "sssss": 2e-4, "ddhdd": 3e-3}[precision]
    assert rel_err(F.matvec(backend.cupy.asarray(m)), ref.matvec(m)) < tol
    assert rel_err(F.rmatvec(backend.cupy.asarray(d)), ref.rmatvec(d)) < tol


@gpu
@pytest.mark.gpu
def test_weighted_products_run_unfused(monkeypatch, rng):
    """A weighted normal operator keeps the unpad kernel (its weight changes per call)."""
    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", "0")
    shape = (3, 4, 10)
    K, F = _op(rng, shape, "ddddd")
    assert F.plan().fused_ffts
    w = abs(_rand(rng, shape[0], shape[2]))  # a noise precision: >= 0
    weighted = F._executor(False, 1, np.dtype(np.float64), True)
    assert weighted.plan.ffts == (FFT_PAD, FFT_UNPAD) and weighted.product is None
    A = dense_btt(K)
    m = _rand(rng, shape[1], shape[2])
    got = F.normal(w).matvec(m)
    want = A.T @ (to_numpy(w).ravel() * (A @ to_numpy(m).ravel()))
    assert rel_err(got.ravel(), want) < 1e-12


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ddddd", "ddhdd"])
def test_fused_product_made_once_any_stream_any_layout(monkeypatch, rng, precision):
    """The fused product is made once per shape and reused; it runs on the current stream
    (not the one it was made on) and takes inputs that are not C-contiguous."""
    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", "0")
    cp = backend.cupy
    shape = (5, 8, 30)
    K, F = _op(rng, shape, precision)
    eng = F._engine
    A = dense_btt(K)
    tol = TOL[precision]
    for adjoint, n_in, M in ((False, shape[1], A), (True, shape[0], A.T)):
        wide = _rand(rng, 3, n_in, 2 * shape[2])
        x = wide[..., 1::2]  # (3, n_in, Nt), not C-contiguous
        assert not x.flags.c_contiguous
        first = F._executor(adjoint, 3, np.dtype(np.float64), False).product
        assert first is not None
        y0 = F._apply(x, adjoint)
        assert F._executor(adjoint, 3, np.dtype(np.float64), False).product is first
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            y1 = F._apply(x, adjoint)
        stream.synchronize()
        xs = to_numpy(x)
        for b in range(3):
            assert rel_err(y0[b].ravel(), M @ xs[b].ravel()) < tol
        assert bool((y1 == y0).all())


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("fold", [0, 10**6])
@pytest.mark.parametrize("graphs", ["0", "1"])
@pytest.mark.parametrize("precision", ["ddddd", "ddhdd", "sssss", "dsdsd"])
def test_fused_product_with_split_k(monkeypatch, rng, fold, graphs, precision):
    """Few outputs and a long reduction: stage 3 splits its reduction, and the partials are
    summed between the FFTs or, for one launch of stage 3 (FOLD_MAX_SPLITS), by the inverse
    FFT's load. Against the float64 dense matrix, as one product and as a graph, with one and
    several right-hand sides."""
    from fftmatvec import gpu as _gpu

    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", graphs)
    monkeypatch.setattr(_gpu.rules, "FOLD_MAX_SPLITS", fold)  # read as the engine is built
    cp = backend.cupy
    for shape, adjoint in (((3, 3000, 40), False), ((2900, 4, 40), True)):
        K, F = _op(rng, shape, precision)
        eng = F._engine
        n_in = shape[0] if adjoint else shape[1]
        product = F._executor(adjoint, 1, np.dtype(np.float64), False).product
        assert product.work_bytes > 0, product.stage3.plan  # split-K
        splits = product.stage3.plan[0].splits
        assert product.split_sum == (splits if fold and len(product.stage3.plan) == 1 else 0)
        if not adjoint:
            assert (product.split_sum > 1) == (fold > 0)  # the case this test is for
        M = dense_btt(K).T if adjoint else dense_btt(K)
        for k in (1, 3):
            x = _rand(rng, k, n_in, shape[2])
            y = F.rmatmat(x) if adjoint else F.matmat(x)
            xs = to_numpy(x)
            for b in range(k):
                assert rel_err(y[b].ravel(), M @ xs[b].ravel()) < TOL[precision]
        del F
        cp.get_default_memory_pool().free_all_blocks()


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ddddd", "ddhdd", "sssss", "dddsd"])
@pytest.mark.parametrize("nt", [10, 1000, 40000])  # L = 20, 2000, 80000: cuFFT in several passes
@pytest.mark.parametrize("splits", [2, 7, 16, 37])
def test_split_load_adds_the_partials(rng, precision, nt, splits):
    """The inverse plan that loads stage 3's partial sums against the plain inverse plan fed
    their sum in split order (made on the host in stage 3's compute type), over fresh random
    partials, into outputs poisoned with NaN."""
    _needs_callbacks()
    cp = backend.cupy
    nd, nm = 3, 4
    _, F = _op(rng, (nd, nm, nt), precision)
    eng, prec = F._engine, F.precision
    nf, rows = eng.nf, nd  # a forward product: the inverse transforms Nd rows
    parts = (rng.standard_normal((splits, rows, nf))
             + 1j * rng.standard_normal((splits, rows, nf))).astype(eng.compute)
    total = np.zeros((rows, nf), dtype=eng.compute)
    for p in parts:  # in split order, from zero
        total += p
    total = total.astype(eng.ffts.yhat_dtype(prec))
    _, folded = eng.ffts._callback_plans(prec, False, 1, np.float64, np.float64, False, True,
                                         splits)
    _, plain = eng.ffts._callback_plans(prec, False, 1, np.float64, np.float64, False, True)
    room = eng.buffers.yhat_nbytes(prec, 1, rows)  # a complex-to-real input may be overwritten
    out = []
    for plan, data in ((folded, parts), (plain, total)):
        src = cp.cuda.alloc(max(data.nbytes, room))
        src.copy_from_host(data.ctypes.data, data.nbytes)
        y = eng.buffers.y_buffer(prec, 1, rows, np.float64)
        y.fill(np.nan)
        plan(src.ptr, y.data.ptr)
        out.append(to_numpy(y))
    assert np.isfinite(out[0]).all()
    tol = 1e-13 if prec.real_dtype("ifft") == np.float64 else 1e-6
    assert rel_err(out[0], out[1]) < tol


@gpu
@pytest.mark.gpu
def test_folded_product_in_steps(monkeypatch, rng):
    """A product whose inverse adds the splits, queued step by step as the benchmark and the
    probes do: the forward FFT, stage 3's partial sums (queue_stage3 says where), and the
    inverse over them, through ifft_unpad and through the plan; both equal the product."""
    from fftmatvec import gpu as _gpu

    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", "0")
    monkeypatch.setattr(_gpu.rules, "FOLD_MAX_SPLITS", 10**6)  # read as the engine is built
    cp = backend.cupy
    K, F = _op(rng, (3, 3000, 40), "ddddd")
    eng, prec = F._engine, F.precision
    product = F._executor(False, 1, np.dtype(np.float64), False).product
    assert product.split_sum > 1
    plans = product.plans
    assert plans.split_sum == product.split_sum == F.plan().fold
    m = _rand(rng, 1, 3000, 40)
    want = to_numpy(F.matmat(m))
    xb = eng.buffers.xhat_buffer(prec, 1, 3000)
    yh = eng.buffers.yhat_buffer(prec, 1, 3)
    work = cp.zeros(-(-eng.buffers.inverse_input_nbytes(prec, plans, 3) // 16), dtype=np.complex128)
    assert work.nbytes >= product.work_bytes - 16
    stream = cp.cuda.get_current_stream().ptr
    for through in ("ifft_unpad", "plan"):
        eng.ffts.pad_fft(plans, m, out=xb)
        src = product.queue_stage3(stream, xb.data.ptr, yh.data.ptr, work.data.ptr)
        assert src == work.data.ptr
        y = eng.buffers.y_buffer(prec, 1, 3, np.float64)
        y.fill(np.nan)
        if through == "plan":
            plans.inv(src, y.data.ptr, stream)
        else:
            eng.ffts.ifft_unpad(plans, work, out=y)
        assert rel_err(y, want) < 1e-14
    with pytest.raises(ValueError, match="partial sums"):
        eng.ffts.ifft_unpad(plans, yh, out=eng.buffers.y_buffer(prec, 1, 3, np.float64))


def _poison_held(product):
    """NaN into every intermediate array a fused product holds: a call that read a value it
    did not write would show it."""
    cp = backend.cupy
    for mem in product._held.values():
        for m in mem:
            cp.ndarray((m.mem.size // 4,), np.float32, memptr=m).fill(np.nan)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ddddd", "ddhdd", "sssss"])
def test_one_vector_shortcut(monkeypatch, rng, precision):
    """After the general path has served a vector of a shape and dtype through a fused product,
    matvec / rmatvec go to that product directly. Every call is checked against the dense
    matrix; the held intermediate arrays are poisoned between calls; a strided input, a new
    shape or dtype, and a changed path switch each go back to the general path."""
    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", None)
    cp = backend.cupy
    for shape in ((5, 8, 30), (3, 3000, 40)):  # the second splits its forward reduction
        K, F = _op(rng, shape, precision)
        A = dense_btt(K)
        general = []
        apply = F._apply
        monkeypatch.setattr(F, "_apply", lambda x, adjoint, weight=None, amax=None: (
            general.append(adjoint), apply(x, adjoint, weight, amax))[1])
        for adjoint, n_in, M in ((False, shape[1], A), (True, shape[0], A.T)):
            fn = F.rmatvec if adjoint else F.matvec
            calls = len(general)

            def check(v, through_general):
                nonlocal calls
                y = fn(v)
                assert rel_err(to_numpy(y).ravel(), M @ to_numpy(v).astype(np.float64).ravel()) \
                    < TOL[precision]
                assert len(general) == calls + through_general
                calls = len(general)
                return y

            y = check(_rand(rng, n_in, shape[2]), 1)  # the general path, which records
            assert y.shape == (M.shape[0] // shape[2], shape[2])
            product, y_shape = F._one_paths[(adjoint, (n_in, shape[2]), np.dtype(np.float64))]
            assert product is not None and y_shape == y.shape and product.holds
            for _ in range(3):
                _poison_held(product)
                check(_rand(rng, n_in, shape[2]), 0)
            y = check(_rand(rng, n_in * shape[2]), 1)  # flat: a new shape
            assert y.shape == (M.shape[0],)
            check(_rand(rng, n_in * shape[2]), 0)
            check(_rand(rng, n_in, 2 * shape[2])[:, ::2], 1)  # strided: general, every time
            check(_rand(rng, n_in, 2 * shape[2])[:, ::2], 1)
            check(_rand(rng, n_in, shape[2], dtype=np.float32), 1)  # a new dtype
            check(_rand(rng, n_in, shape[2], dtype=np.float32), 0)
            # the plan is read once, when F was built: a switch changed since changes nothing
            set_plan(monkeypatch, "graphs", "1")
            check(_rand(rng, n_in, shape[2]), 0)
            assert all(e._graphs is None for e in F._executors.values())
            set_plan(monkeypatch, "graphs", None)
            check(_rand(rng, n_in, shape[2]), 0)
            assert product._held
            F.release_buffers()  # the next product makes them again
            assert not product._held and not product._held_ptrs
            check(_rand(rng, n_in, shape[2]), 0)
            assert product._held
        del F
        cp.get_default_memory_pool().free_all_blocks()


@gpu
@pytest.mark.gpu
def test_held_buffers_across_streams_and_threads(monkeypatch, rng):
    """Products from several threads at once, on one shared stream, on a stream each, and on
    the per-thread default stream (one handle, a stream per thread), all through the arrays a
    fused product holds: each result matches the CPU operator."""
    import threading

    from fftmatvec import gpu as _gpu

    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", "0")
    cp = backend.cupy
    assert _gpu.rules._PER_THREAD_STREAM == cp.cuda.runtime.streamPerThread
    shape = (6, 2000, 50)
    K, F = _op(rng, shape, "ddddd")
    Fc = fm.BlockToeplitz(K)
    dev = cp.cuda.Device().id
    shared = cp.cuda.Stream(non_blocking=True)
    ptds = getattr(cp.cuda.Stream, "ptds", None)
    kinds = ["shared", "own"] + (["ptds"] if ptds is not None else [])
    for kind in kinds:
        n_threads, n_calls = 4, 12
        inputs = [[rng.standard_normal((shape[1], shape[2])) for _ in range(n_calls)]
                  for _ in range(n_threads)]
        outputs = [[None] * n_calls for _ in range(n_threads)]
        errors = []

        def work(t):
            try:
                with cp.cuda.Device(dev):
                    stream = {"shared": shared, "own": cp.cuda.Stream(non_blocking=True),
                              "ptds": ptds}[kind]
                    with stream:
                        xs = [cp.asarray(v) for v in inputs[t]]
                        stream.synchronize()
                        for i, x in enumerate(xs):
                            outputs[t][i] = F.matvec(x)
                        stream.synchronize()
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        product = F._executor(False, 1, np.dtype(np.float64), False).product
        assert product.holds and product._held
        for t in range(n_threads):
            for i in range(n_calls):
                assert rel_err(to_numpy(outputs[t][i]), Fc.matvec(inputs[t][i])) < 1e-12, (kind, t, i)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ddddd", "ddhdd"])
def test_fused_product_without_held_buffers(monkeypatch, rng, precision):
    """A product whose intermediate arrays are too large to hold takes them from the pool at
    every call: the same products, against the dense matrix, with nothing held."""
    from fftmatvec import gpu as _gpu

    _needs_callbacks()
    set_plan(monkeypatch, "fft_callbacks", "1")
    set_plan(monkeypatch, "graphs", "0")
    monkeypatch.setattr(_gpu.fused, "HOLD_MAX_BYTES", 0)
    monkeypatch.setattr(_gpu.fused, "HOLD_KHAT_FRACTION", 2**62)
    for shape in ((5, 8, 30), (3, 3000, 40)):
        K, F = _op(rng, shape, precision)
        A = dense_btt(K)
        for adjoint, n_in, M in ((False, shape[1], A), (True, shape[0], A.T)):
            for k in (1, 1, 3):
                x = _rand(rng, k, n_in, shape[2])
                y = F.rmatmat(x) if adjoint else F.matmat(x)
                v = _rand(rng, n_in, shape[2])
                z = F.rmatvec(v) if adjoint else F.matvec(v)
                for b in range(k):
                    assert rel_err(y[b].ravel(), M @ to_numpy(x[b]).ravel()) < TOL[precision]
                assert rel_err(z.ravel(), M @ to_numpy(v).ravel()) < TOL[precision]
            product = F._executor(adjoint, 1, np.dtype(np.float64), False).product
            assert not product.holds and not product._held


def test_fused_plans_without_the_inverse(monkeypatch):
    """Stages 3-5 as one kernel (FFT_IN_FUSED_ADJOINT): the forward plan only, no inverse
    made, on the row FFT kernels or through cuFFT."""
    engine, calls = _host_engine(monkeypatch)
    prec = PrecisionConfig("ddddd")
    plans = engine.fused_plans(prec, True, 1, np.float64, np.float64,
                                     (FFT_CALLBACKS, FFT_IN_FUSED_ADJOINT))
    assert plans.fwd == "r2c plan" and plans.inv is None
    assert [c[0] for c in calls] == ["r2c"]
    full = engine.fused_plans(prec, True, 1, np.float64, np.float64, CB)
    assert full.inv == "c2r plan"
    engine, calls = _host_engine(monkeypatch, ok=False)
    monkeypatch.setattr(_rowfft, "RowFFT", lambda kind, *a, **kw: f"{kind} kernel")
    plans = engine.fused_plans(prec, True, 1, np.float64, np.float64,
                                     (FFT_ROW, FFT_IN_FUSED_ADJOINT))
    assert plans == ("r2c kernel", None, False, 0) and calls == []
