"""The planner without a GPU: a plan chosen for an H200's properties, printed, overridden by a
mapping and by FFTMATVEC_PLAN, bad overrides refused, and the old switches gone."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecValueError, kernels
from fftmatvec.gpu import callbacks
from fftmatvec.gpu.engine import KernelEngine
from fftmatvec.gpu.plan import PLAN_KEYS, Plan, parse_overrides
from fftmatvec.gpu.planner import plan_for
from fftmatvec.precision import PrecisionConfig

from conftest import set_plan


def test_parse_overrides_mapping_and_string():
    assert parse_overrides(None) == {}
    assert parse_overrides({"row_fft": 0, "graphs": True, "mma": "AUTO"}) == {
        "row_fft": "0", "graphs": "1", "mma": "auto"}
    assert parse_overrides(" row_fft=0 , graphs=1,") == {"row_fft": "0", "graphs": "1"}
    # the stage-3 shorthand expands to its family keys; an explicit key wins over it
    assert parse_overrides("stage3=mma") == {"mma": "1", "xreg": "0"}
    assert parse_overrides("stage3=gemv,staged=1")["staged"] == "1"
    assert parse_overrides({"stage3": "gemv"}) == {"mma": "0", "xreg": "0", "staged": "0",
                                                  "async": "0"}


@pytest.mark.parametrize("bad,match", [
    ("rowfft=0", "unknown plan key 'rowfft'; the keys are stage3, graphs"),
    ("row_fft=2", "row_fft must be auto, 0 or 1, got '2'"),
    ("row_fft", "'row_fft' is not key=value"),
    ("stage3=tensor", "stage3 must be one of auto, gemv, staged, async, xreg, mma"),
    ({"mma": 2}, "mma must be auto, 0 or 1, got 2"),
    ({1: "0"}, "plan keys are strings"),
    (["row_fft"], "must be a mapping or a 'key=value,...' string"),
])
def test_parse_overrides_refuses(bad, match):
    with pytest.raises(FFTMatvecValueError, match=re.escape(match)):
        parse_overrides(bad)


def test_operator_refuses_a_bad_plan_and_keeps_a_good_one():
    K = np.random.default_rng(0).standard_normal((2, 3, 4))
    with pytest.raises(FFTMatvecValueError, match="plan: unknown plan key 'fused'"):
        fm.BlockToeplitz(K, plan={"fused": 1})
    F = fm.BlockToeplitz(K, plan={"row_fft": 0})
    assert F.plan_overrides == {"row_fft": "0"}
    assert F.with_precision("sssss").plan_overrides == {"row_fft": "0"}


def test_cpu_plan_is_printable():
    F = fm.BlockToeplitz(np.random.default_rng(1).standard_normal((2, 3, 4)), "dsddd")
    p = F.plan(k=4, adjoint=True)
    assert isinstance(p, Plan) and p.path == "cpu" and p.k == 4 and p.direction == "adjoint"
    assert "adjoint, k=4, precision dsddd on CPU" in str(p)
    with pytest.raises(FFTMatvecValueError, match="k must be a positive integer"):
        F.plan(k=0)


H200 = {"multiProcessorCount": 132, "sharedMemPerMultiprocessor": 228 * 1024,
        "sharedMemPerBlockOptin": 227 * 1024, "maxThreadsPerMultiProcessor": 2048,
        "regsPerMultiprocessor": 65536}


def _engine(monkeypatch, nm, nd, nt, prec="ddddd", arch="sm_90", overrides=None):
    """A KernelEngine for an H200 without one: its properties set as the constructor would."""
    from fftmatvec import fft_length
    from fftmatvec.gpu.rules import _STORE_SUFFIX, PAD
    from fftmatvec.gpu.engine import khat_layout

    monkeypatch.setattr(kernels, "has_mma_kernels", lambda: arch >= "sm_80")
    monkeypatch.setattr(callbacks, "support", lambda: (True, ""))
    eng = object.__new__(KernelEngine)
    prec = PrecisionConfig(prec)
    L = fft_length(nt)
    eng.prec, eng.nd, eng.nm, eng.nt, eng.fft_len, eng.nf = prec, nd, nm, nt, L, L // 2 + 1
    eng.store = _STORE_SUFFIX[prec.letters[2]]
    eng.compute = np.dtype(np.complex128 if prec.letters[2] == "d" else np.complex64)
    eng.nfp = -(-eng.nf // PAD[eng.store]) * PAD[eng.store]
    eng.khat_block, eng.khat_blocks, eng.khat_shift = khat_layout(eng.store, eng.nfp)
    eng.data = np.zeros(1, dtype={"c128": np.complex128, "c64": np.complex64,
                                  "c32h": np.uint32}[eng.store])
    eng.scale = None if eng.store != "c32h" else np.zeros(1, np.float32)
    eng._nbytes = eng.data.itemsize * nd * nm * eng.nf
    eng.num_sms = H200["multiProcessorCount"]
    eng.smem_per_sm, eng.smem_per_block = H200["sharedMemPerMultiprocessor"], H200["sharedMemPerBlockOptin"]
    eng.threads_per_sm, eng.regs_per_sm = H200["maxThreadsPerMultiProcessor"], H200["regsPerMultiprocessor"]
    eng.arch = arch
    eng._plans, eng._row_ffts, eng._num_regs = {}, {}, {}
    eng._callbacks, eng._sm80 = None, None
    eng.blocks_per_sm, eng.staged_threads_per_sm = 8, None
    eng.pipe_waves = eng.pipe_splits = eng.pipe_freq_major = eng.async_waves = None
    eng.overrides, eng.tuned = parse_overrides(overrides), {}
    return eng


def test_h200_plan_of_a_large_product(monkeypatch):
    """(5000, 100, 1000) on an H200: the fused product, the forward FFT of 5000 rows on the row
    FFT kernels, the inverse of 100 rows (too few blocks for them) on cuFFT with callbacks, no
    graph; k = 16 on the tensor cores; printed in words."""
    set_plan(monkeypatch, "row_fft", None)
    eng = _engine(monkeypatch, 5000, 100, 1000)
    p = plan_for(eng, "ddddd", False, 1, np.float64, np.float64)
    assert p.path == "fused" and p.ffts == ("row FFT kernel", "cuFFT with callbacks")
    assert len(p.stage3) == 1 and not p.overrides
    text = str(p)
    assert text.startswith("forward, k=1, precision ddddd on sm_90: fused product")
    assert "stage 3: " in text
    p16 = plan_for(eng, "ddddd", True, 16, np.float64, np.float64)
    assert all(line.startswith("tensor cores, 16 right-hand sides") for line in p16.stage3)


def test_h200_small_product_replays_a_graph_when_it_runs_stage_by_stage(monkeypatch):
    eng = _engine(monkeypatch, 50, 4, 10)
    fused = plan_for(eng, "ddddd", False, 1, np.float64, np.float64)
    assert fused.path == "fused"  # the fused product beats a replay by default
    weighted = plan_for(eng, "ddddd", False, 1, np.float64, np.float64, weighted=True)
    assert weighted.path == "graph"
    assert weighted.ffts == ("pad kernel, then cuFFT", "cuFFT, then unpad kernel")


def test_plan_overridden_by_mapping_and_environment(monkeypatch):
    set_plan(monkeypatch, "row_fft", None)
    base = plan_for(_engine(monkeypatch, 5000, 100, 1000), "ddddd", False, 1, np.float64,
                    np.float64)
    assert base.ffts == ("row FFT kernel", "cuFFT with callbacks")
    by_map = plan_for(_engine(monkeypatch, 5000, 100, 1000, overrides={"row_fft": 0}),
                      "ddddd", False, 1, np.float64, np.float64)
    assert by_map.ffts == ("cuFFT with callbacks", "cuFFT with callbacks")
    assert by_map.overrides == (("row_fft", "0", "plan="),)
    set_plan(monkeypatch, "row_fft", "0")
    set_plan(monkeypatch, "graphs", "1")
    by_env = plan_for(_engine(monkeypatch, 5000, 100, 1000), "ddddd", False, 1, np.float64,
                      np.float64)
    assert by_env.path == "graph" and by_env.ffts[0] == "cuFFT with callbacks"
    assert ("graphs", "1", "FFTMATVEC_PLAN") in by_env.overrides
    assert "overrides: " in str(by_env)
    # the operator's mapping wins over the environment
    both = plan_for(_engine(monkeypatch, 5000, 100, 1000, overrides={"row_fft": "1"}),
                    "ddddd", False, 1, np.float64, np.float64)
    assert both.ffts == ("row FFT kernel", "row FFT kernel")
    # stage 3 forced onto the tensor cores for one vector
    set_plan(monkeypatch, "row_fft", None)
    set_plan(monkeypatch, "graphs", None)
    mma = plan_for(_engine(monkeypatch, 5000, 100, 1000, overrides={"stage3": "mma"}),
                   "ddddd", False, 1, np.float64, np.float64)
    assert mma.stage3[0].startswith("tensor cores, 1 right-hand side")
    gemv = plan_for(_engine(monkeypatch, 5000, 100, 1000, overrides={"stage3": "gemv"}),
                    "ddddd", False, 1, np.float64, np.float64)
    assert gemv.stage3[0].startswith("GEMV, 1 right-hand side")


def test_bad_environment_override_is_refused(monkeypatch):
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=mma,row_ffts=0")
    with pytest.raises(FFTMatvecValueError,
                       match="FFTMATVEC_PLAN: unknown plan key 'row_ffts'"):
        plan_for(_engine(monkeypatch, 50, 4, 10), "ddddd", False, 1, np.float64, np.float64)


def test_forced_kernel_that_cannot_serve_says_why(monkeypatch):
    eng = _engine(monkeypatch, 50, 4, 10, arch="sm_75", overrides={"mma": 1})
    with pytest.raises(FFTMatvecValueError, match="mma=1, but this device has no tensor-core"):
        plan_for(eng, "ddddd", False, 16, np.float64, np.float64)


OLD_SWITCHES = ("FFTMATVEC_FFT_CALLBACKS", "FFTMATVEC_ROW_FFT", "FFTMATVEC_FUSED_ADJOINT",
                "FFTMATVEC_CUDA_GRAPHS", "FFTMATVEC_ASYNC", "FFTMATVEC_XREG", "FFTMATVEC_STAGED",
                "FFTMATVEC_DMMA_C64", "FFTMATVEC_DISABLE_GPU")


def test_old_switch_names_are_gone():
    """Only FFTMATVEC_KERNELS and FFTMATVEC_PLAN remain as run-time switches of the GPU path
    (FFTMATVEC_MMA survives only as the kernels' compile-time define)."""
    root = Path(fm.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        for name in OLD_SWITCHES:
            assert name not in text, f"{name} in {path.relative_to(root)}"
        for m in re.finditer(r"environ[^\n]*FFTMATVEC_MMA", text):
            raise AssertionError(f"FFTMATVEC_MMA read from the environment in {path}")
    assert set(PLAN_KEYS) == {"graphs", "fft_callbacks", "row_fft", "fused_adjoint", "mma",
                              "xreg", "staged", "async", "dmma_c64", "scale_pass",
                              "fno_rows", "fno_plane", "fno_split", "fno_warp", "fno_paired",
                              "fno_product", "fno_fused", "fno_fast", "fno_ends",
                              "fno_direct"}
