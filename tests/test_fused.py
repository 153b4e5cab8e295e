"""Stages 3-5 of a one-vector adjoint as one kernel (``hip_kernels/fused.cuh``): the engine's
rule on the host, and on the GPU the kernel against the float64 dense product and against the
stages apart."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import EnvOverrides, set_plan

import fftmatvec as fm
from fftmatvec import gpu as _gpu, backend, kernels
from fftmatvec._errors import FFTMatvecValueError
from fftmatvec.gpu import Planner
from fftmatvec.precision import PrecisionConfig

from conftest import dense_btt, rel_err, to_numpy

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
KERNELS = Path(__file__).parents[1] / "hip_kernels"


# ---- host side (no GPU needed) --------------------------------------------------------------
def _engine(monkeypatch, store="c128", nd=10, nf=101, row_ffts=True, nm=100000):
    """A planner's host side, with the kernel's launch object recorded instead of made."""
    made = []
    monkeypatch.setattr(kernels, "has_function", lambda name: True)
    monkeypatch.setattr(_gpu.fused._GemvIrfft, "__init__",
                        lambda self, eng, prec, out_dtype: made.append((prec, out_dtype)))
    eng = SimpleNamespace(resolved=EnvOverrides(), rules=_gpu.rules_for("sm_90"), has_kernel=lambda n: kernels.has_function(n),
                          store=store, nd=nd, nm=nm, nf=nf, fft_len=2 * nf - 2, num_sms=132,
                          compute=np.dtype(np.complex128 if store == "c128" else np.complex64),
                          row_ffts=lambda prec: row_ffts)
    eng.xhat_dtype = lambda prec: Planner.xhat_dtype(eng, prec)
    return eng, made


@pytest.mark.parametrize("change,expect", [
    ({}, True),
    ({"adjoint": False}, False), ({"k": 2}, False), ({"store": "c64"}, True),
    ({"store": "c32h"}, False), ({"nd": _gpu.FUSED_MAX_ND + 1}, False),
    ({"nd": _gpu.FUSED_MAX_ND}, True), ({"nd": 1}, True),
    ({"nf": _gpu.FUSED_THREADS + 1}, False), ({"nf": _gpu.FUSED_THREADS}, True),
    ({"row_ffts": False}, False),
    # complex128: any number of blocks
    ({"nm": 1}, True), ({"nm": 21110}, True),
    # complex64, 20 rows of L = 200 in float32 a block: 16 blocks per multiprocessor from 42240
    ({"store": "c64", "nm": 42240}, True), ({"store": "c64", "nm": 42220}, False),
])
def test_fused_adjoint_rule(monkeypatch, change, expect):
    """By default: one-vector adjoints with complex128 or complex64 storage, at most FUSED_MAX_ND sensors
    and FUSED_THREADS frequencies, whose inverse transform the row FFT kernels take, with
    FUSED_MIN_BLOCKS_PER_SM blocks per multiprocessor for their storage."""
    set_plan(monkeypatch, "fused_adjoint", None)
    adjoint, k = change.pop("adjoint", True), change.pop("k", 1)
    eng, made = _engine(monkeypatch, **change)
    prec = PrecisionConfig("sssss" if eng.store == "c64" else "ddddd")
    assert Planner.fused_adjoint_takes(eng, prec, adjoint, k, np.float64) is expect
    assert not made  # the rule builds nothing: an executor builds what its plan names


def test_fused_adjoint_switch(monkeypatch):
    """=0 never; =1 also with few blocks, and an error that names the reason where the kernel
    cannot take the product; anything else is an error."""
    prec = PrecisionConfig("ddddd")
    set_plan(monkeypatch, "fused_adjoint", "0")
    eng, made = _engine(monkeypatch)
    assert Planner.fused_adjoint_takes(eng, prec, True, 1, np.float64) is False
    set_plan(monkeypatch, "fused_adjoint", "1")
    eng, made = _engine(monkeypatch, store="c64", nm=100)
    assert Planner.fused_adjoint_takes(eng, PrecisionConfig("sssss"), True, 1, np.float64) is True
    assert Planner.fused_adjoint_takes(eng, prec, False, 1, np.float64) is False  # forward: never
    for change, why in (({"store": "c32h"}, "c32h storage"), ({"nd": 13}, "Nd = 13 sensors"),
                        ({"nf": 129}, "Nf = 129 frequencies"),
                        ({"row_ffts": False}, "row FFT kernels do not take length")):
        eng, _ = _engine(monkeypatch, **change)
        with pytest.raises(FFTMatvecValueError, match=why):
            Planner.fused_adjoint_takes(eng, prec, True, 1, np.float64)
    with pytest.raises(FFTMatvecValueError, match="3 right-hand sides"):
        Planner.fused_adjoint_takes(_engine(monkeypatch)[0], prec, True, 3, np.float64)
    monkeypatch.setattr(kernels, "has_function", lambda name: False)
    eng.store, eng.nd, eng.nf, eng.row_ffts = "c128", 10, 101, lambda p: True
    with pytest.raises(FFTMatvecValueError, match="no sbgemv_irfft_c128_c128_f64_f64_f64_n10"):
        Planner.fused_adjoint_takes(eng, prec, True, 1, np.float64)
    set_plan(monkeypatch, "fused_adjoint", "yes")
    with pytest.raises(FFTMatvecValueError, match="fused_adjoint must be auto, 0 or 1"):
        Planner.fused_adjoint_takes(eng, prec, True, 1, np.float64)


@pytest.mark.parametrize("prec,out,nd,name", [
    ("ddddd", np.float64, 10, "sbgemv_irfft_c128_c128_f64_f64_f64_n10"),
    ("dsdsd", np.float64, 1, "sbgemv_irfft_c128_c64_f32_f64_f64_n4"),
    ("dddds", np.float32, 11, "sbgemv_irfft_c128_c128_f64_f32_f32_n12"),
    ("ddddd", np.float32, 5, "sbgemv_irfft_c128_c128_f64_f64_f32_n8"),
    ("sssss", np.float64, 10, "sbgemv_irfft_c64_c64_f32_f32_f64_n10"),
    ("ddsdd", np.float32, 3, "sbgemv_irfft_c64_c64_f64_f64_f32_n4"),
])
def test_fused_kernel_names(prec, out, nd, name):
    """Input: the forward FFT's output; then the inverse FFT's, stage 5's and the output's
    precisions, and the smallest sensor count compiled that holds Nd. Each name is one the
    kernel source defines."""
    p = PrecisionConfig(prec)
    store = "c128" if p.letters[2] == "d" else "c64"
    xhat = np.dtype(np.complex64 if "s" in (p.letters[1], p.letters[2]) else np.complex128)
    assert _gpu.fused._GemvIrfft.kernel_name(store, xhat, p, out, nd) == name
    with pytest.raises(ValueError, match="at most 12 sensors"):
        _gpu.fused._GemvIrfft.kernel_name(store, xhat, p, out, 13)
    source = (KERNELS / "fftmatvec_kernels.cu").read_text()
    store, cin, fft, mid, tout, tile = name.split("_")[2:]
    assert f"FFTMATVEC_SBGEMV_IRFFT(NAME, {tile[1:]}, STORE" in source
    store_type = {"c128": "StoreC128", "c64": "StoreC64"}[store]
    cin_type = "double2" if cin == "c128" else "float2"
    assert f"FFTMATVEC_SBGEMV_IRFFT_IO({store}, {store_type}, {cin}, {cin_type}, {fft}," in source
    assert f"S##_##C##_##F##_{mid}_{tout}," in source


def test_fused_bounds_match_the_kernels():
    """The host's limits are the kernels' template and launch bound."""
    source = (KERNELS / "fftmatvec_kernels.cu").read_text()
    for nd in _gpu.FUSED_ND:
        assert f"FFTMATVEC_SBGEMV_IRFFT(NAME, {nd}, STORE" in source
    for store in _gpu.FUSED_STORES:
        assert f"FFTMATVEC_SBGEMV_IRFFT_IO({store}, " in source
    assert len(re.findall(r"FFTMATVEC_SBGEMV_IRFFT\(NAME, \d+,", source)) == len(_gpu.FUSED_ND)
    assert f"#define FUSED_MAX_THREADS {_gpu.FUSED_THREADS}\n" in (KERNELS / "fused.cuh").read_text()


# ---- on the GPU -----------------------------------------------------------------------------
TOL = {"ddddd": 1e-12, "dsdsd": 1e-5, "dddds": 1e-6, "sssss": 1e-5, "ddsdd": 1e-5}


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("precision,dtype", [("ddddd", np.float64), ("dsdsd", np.float64),
                                             ("dddds", np.float32), ("ddddd", np.float32),
                                             ("sssss", np.float64), ("ddsdd", np.float32)],
                         ids=lambda c: str(getattr(c, "__name__", c)))
@pytest.mark.parametrize("shape", [(1, 1, 1), (12, 37, 11), (5, 301, 7), (10, 1000, 100),
                                   (3, 57, 60), (7, 2, 64), (4, 50, 20), (9, 40, 30)],
                         ids=lambda s: "x".join(map(str, s)))
def test_fused_adjoint_matches_dense(monkeypatch, rng, precision, dtype, shape):
    """The fused adjoint (forced on) against the float64 dense matrix, and against the stages
    apart; every output written (poisoned first), the input left as it was. The shapes take
    one sensor and twelve, rows that fill no block, an odd FFT length (Nt = 7: L = 15), one
    frequency (128 row lanes of one thread), 8 and 13 (16 and 9 lanes), 65 and 101, and
    every compiled sensor count (4, 8, 10, 12) full and not."""
    cp = backend.cupy
    set_plan(monkeypatch, "fused_adjoint", "1")
    K = rng.standard_normal(shape)
    F = fm.BlockToeplitz(cp.asarray(K), precision, dtype=dtype)
    nd, nm, nt = shape
    eng = F._engine
    product = F._executor(True, 1, np.dtype(dtype), False).product
    assert product is not None and product.fused is not None and product.stage3 is None
    assert product.fused.smem <= _gpu.FUSED_MAX_SMEM
    assert max(product.fused.radices, default=2) <= _gpu.FUSED_MAX_RADIX
    d = cp.asarray(rng.standard_normal((nd, nt)).astype(dtype))
    d0 = d.copy()
    z = F.rmatvec(d)
    assert z.shape == (nm, nt) and z.dtype == dtype and bool((d == d0).all())
    tol = max(TOL[precision], 2e-6 if dtype == np.float32 else 0.0)
    ref = dense_btt(K).T @ to_numpy(d).astype(np.float64).ravel()
    assert rel_err(z.ravel(), ref) < tol

    # the kernel alone, into a poisoned output, from the forward FFT's output
    xhat = cp.empty((1, nd, eng.nf), dtype=eng.ffts.xhat_dtype(F.precision))
    stream = cp.cuda.get_current_stream().ptr
    product.plans.fwd(cp.ascontiguousarray(d[None]).data.ptr, xhat.data.ptr, stream)
    y = cp.full((1, nm, nt), np.nan, dtype=dtype)
    product.fused(xhat.data.ptr, y.data.ptr, stream)
    assert not bool(cp.isnan(y).any())
    assert rel_err(y.ravel(), ref) < tol

    # the stages apart: the same sums, rounded apart (the plan is read when an operator is
    # built)
    G = fm.BlockToeplitz(cp.asarray(K), precision, dtype=dtype, plan={"fused_adjoint": 0})
    apart = G.rmatvec(d)
    assert G._executor(True, 1, np.dtype(dtype), False).product.fused is None
    assert rel_err(z.ravel(), to_numpy(apart).ravel()) < tol


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("graphs", ["0", "1"])
def test_fused_adjoint_by_default(monkeypatch, rng, graphs):
    """Where the rule takes it by default (on an H200's 132 multiprocessors, both), also
    replayed as a graph; complex64 storage too, and a float16 product, which keeps the stages
    apart."""
    cp = backend.cupy
    set_plan(monkeypatch, "fused_adjoint", None)
    set_plan(monkeypatch, "graphs", graphs)
    shape = (6, 120000, 40)  # L = 80: 4800 blocks of 25 rows in float64, 2353 of 51 in float32
    K = cp.asarray(rng.standard_normal(shape))
    for precision in ("ddddd", "sssss", "ddhdd"):
        F = fm.BlockToeplitz(K, precision)
        eng = F._engine
        product = F._executor(True, 1, np.dtype(np.float64), False).product
        rows = _gpu.rowfft.default_rows_per_block(eng.fft_len, F.precision.real_dtype("ifft"))
        fills = (-(-shape[1] // rows)
                 >= _gpu.FUSED_MIN_BLOCKS_PER_SM.get(eng.store, 0) * eng.num_sms)
        assert (product.fused is not None) is (precision != "ddhdd" and fills)
        d = cp.asarray(rng.standard_normal((shape[0], shape[2])))
        z = F.rmatvec(d)
        # the plan is read when an operator is built
        apart = fm.BlockToeplitz(K, precision, plan={"fused_adjoint": 0}).rmatvec(d)
        assert rel_err(z.ravel(), to_numpy(apart).ravel()) < (1e-12 if precision == "ddddd" else 1e-6)
        del F
    cp.get_default_memory_pool().free_all_blocks()


def test_fused_product_takes_the_kernel_or_the_inverse():
    """A fused product takes an inverse plan and stage 3's launches, or stages 3-5 as one
    kernel: never both, never neither."""
    eng = SimpleNamespace(nd=10, nm=100000,
                          khat_store=SimpleNamespace(scales_input=lambda adjoint: False))
    prec = PrecisionConfig("ddddd")
    with pytest.raises(ValueError, match="an inverse plan, or stages 3-5 as one kernel"):
        _gpu.fused._FusedProduct(eng, prec, True, 1, np.float64, _gpu.FusedPlans("fwd", None), None)
    with pytest.raises(ValueError, match="stage 3's launches, or stages 3-5 as one kernel"):
        _gpu.fused._FusedProduct(eng, prec, True, 1, np.float64, _gpu.FusedPlans("fwd", "inv"),
                                 None, None)
