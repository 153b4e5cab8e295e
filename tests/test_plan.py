"""The planner without a GPU: make_plan for the properties of an H100, H200, A100, MI250X and
MI300X, printed, overridden by a mapping, by FFTMATVEC_PLAN (read once, when an operator is
built) and by a table of rules, bad overrides refused, and the old switches gone."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecValueError, backend
from fftmatvec.gpu.plan import PLAN_KEYS, Plan, parse_overrides
from fftmatvec.gpu.planning import DeviceInfo, Overrides, PlanningView, Problem, make_plan
from fftmatvec.gpu.rules import rules_for

from conftest import rel_err


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


# CuPy's device properties of the GPUs the plans are checked for, and their architectures
_NVIDIA_H = {"multiProcessorCount": 132, "sharedMemPerMultiprocessor": 228 * 1024,
             "sharedMemPerBlockOptin": 227 * 1024, "maxThreadsPerMultiProcessor": 2048,
             "regsPerMultiprocessor": 65536}
DEVICES = {
    "H100": (_NVIDIA_H, "sm_90"),
    "H200": (_NVIDIA_H, "sm_90"),
    "A100": ({"multiProcessorCount": 108, "sharedMemPerMultiprocessor": 164 * 1024,
              "sharedMemPerBlockOptin": 163 * 1024, "maxThreadsPerMultiProcessor": 2048,
              "regsPerMultiprocessor": 65536}, "sm_80"),
    "MI250X": ({"multiProcessorCount": 110, "maxSharedMemoryPerMultiProcessor": 64 * 1024,
                "sharedMemPerBlock": 64 * 1024, "maxThreadsPerMultiProcessor": 2048,
                "regsPerMultiprocessor": 131072, "gcnArchName": b"gfx90a:sramecc+:xnack-"},
               "gfx90a"),
    "MI300X": ({"multiProcessorCount": 304, "maxSharedMemoryPerMultiProcessor": 64 * 1024,
                "sharedMemPerBlock": 64 * 1024, "maxThreadsPerMultiProcessor": 2048,
                "regsPerMultiprocessor": 131072, "gcnArchName": b"gfx942:sramecc+:xnack-"},
               "gfx942"),
}
AMD = ("MI250X", "MI300X")


def _device(name: str = "H200", **kw) -> DeviceInfo:
    props, arch = DEVICES[name]
    return DeviceInfo.from_properties(props, kw.pop("arch", arch), name=name, **kw)


def _plan(nm, nd, nt, prec="ddddd", adjoint=False, k=1, device="H200", overrides=None,
          weighted=False, rules=None, **kw) -> Plan:
    dev = device if isinstance(device, DeviceInfo) else _device(device)
    problem = Problem(nd, nm, nt, fm.fft_length(nt), k, adjoint, prec, weighted=weighted)
    return make_plan(problem, dev, rules or rules_for(dev.arch),
                     overrides if isinstance(overrides, Overrides)
                     else Overrides.resolve(overrides))


def test_h200_plan_of_a_large_product():
    """(5000, 100, 1000) on an H200: the fused product, the forward FFT of 5000 rows on the row
    FFT kernels, the inverse of 100 rows (too few blocks for them) on cuFFT with callbacks, no
    graph; k = 16 on the tensor cores; printed in words, derived from the typed launches."""
    p = _plan(5000, 100, 1000)
    assert p.path == "fused" and not p.graph
    assert p.ffts == ("row FFT kernel", "cuFFT with callbacks")
    assert len(p.launches) == 1 and not p.overrides
    la = p.launches[0]
    assert la.kb == 1 and la.splits >= 1 and la.grid[1] == la.splits
    assert p.stage3 == (la.describe(),)
    if la.splits > 1 and not p.fold:
        assert p.workspace_bytes == la.splits * 100 * (fm.fft_length(1000) // 2 + 1) * 16
    text = str(p)
    assert text.startswith("forward, k=1, precision ddddd on sm_90: fused product")
    assert "stage 3: " in text
    p16 = _plan(5000, 100, 1000, adjoint=True, k=16)
    assert all(la.mma and la.kb == 16 for la in p16.launches)
    assert all(line.startswith("tensor cores, 16 right-hand sides") for line in p16.stage3)


def test_h200_small_product_replays_a_graph_when_it_runs_stage_by_stage():
    fused = _plan(50, 4, 10)
    assert fused.path == "fused"  # the fused product beats a replay by default
    weighted = _plan(50, 4, 10, weighted=True)
    assert weighted.path == "graph" and weighted.graph
    assert weighted.ffts == ("pad kernel, then cuFFT", "cuFFT, then unpad kernel")


def test_make_plan_is_pure(monkeypatch):
    """The same arguments give the same plan whatever the environment says."""
    before = _plan(5000, 100, 1000, k=16)
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=gemv,row_fft=0,graphs=1")
    assert _plan(5000, 100, 1000, k=16) == before
    with pytest.raises(fm.FFTMatvecTypeError, match="device must be a DeviceInfo, got dict"):
        make_plan(Problem(4, 50, 10, 20), DEVICES["H200"][0], rules_for("sm_90"))
    with pytest.raises(FFTMatvecValueError, match="Problem: k must be a positive integer, got 0"):
        Problem(4, 50, 10, 20, k=0)


def test_plan_overridden_by_mapping_and_environment():
    base = _plan(5000, 100, 1000)
    assert base.ffts == ("row FFT kernel", "cuFFT with callbacks")
    by_map = _plan(5000, 100, 1000, overrides={"row_fft": 0})
    assert by_map.ffts == ("cuFFT with callbacks", "cuFFT with callbacks")
    assert by_map.overrides == (("row_fft", "0", "plan="),)
    by_env = _plan(5000, 100, 1000, overrides=Overrides.resolve(env="row_fft=0,graphs=1"))
    assert by_env.path == "graph" and by_env.ffts[0] == "cuFFT with callbacks"
    assert ("graphs", "1", "FFTMATVEC_PLAN") in by_env.overrides
    assert "overrides: " in str(by_env)
    # the operator's mapping wins over the environment, which wins over the tuning table
    both = Overrides.resolve({"row_fft": "1"}, "row_fft=0,graphs=0", {"graphs": "1", "mma": "0"})
    assert both.items == (("graphs", "0", "FFTMATVEC_PLAN"), ("row_fft", "1", "plan="),
                          ("mma", "0", "tuning table"))
    assert _plan(5000, 100, 1000, overrides=both).ffts == ("row FFT kernel", "row FFT kernel")
    # stage 3 forced onto the tensor cores for one vector
    mma = _plan(5000, 100, 1000, overrides={"stage3": "mma"})
    assert mma.stage3[0].startswith("tensor cores, 1 right-hand side")
    gemv = _plan(5000, 100, 1000, overrides={"stage3": "gemv"})
    assert gemv.stage3[0].startswith("GEMV, 1 right-hand side")


def test_rules_from_a_table_change_the_plan():
    """A tuning table's rules replace the architecture's: tensor cores only from 32 right-hand
    sides leaves a batch of 16 on the GEMV kernels; an unknown rule is refused by name."""
    rules = rules_for("sm_90")
    assert rules.mma_min_kb[("c128", False)] == 4 and rules.dmma_c64
    assert not rules_for("sm_80").dmma_c64
    table = rules.with_table({"mma_min_kb": {**rules.mma_min_kb, ("c128", False): 32}})
    assert _plan(5000, 100, 1000, k=16).launches[0].mma
    launches = _plan(5000, 100, 1000, k=16, rules=table).launches
    assert launches and not any(la.mma for la in launches)
    with pytest.raises(FFTMatvecValueError, match="unknown rules 'mma_min'"):
        rules.with_table({"mma_min": 3})


@pytest.mark.parametrize("name", AMD)
def test_amd_devices_never_get_nvidia_only_paths(name):
    """On AMD: no tensor-core, cp.async or input-in-registers kernels, no cuFFT callbacks, no
    graph replay by default, at any shape, precision, direction and batch; forcing the tensor
    cores says why it cannot."""
    dev = _device(name)
    assert dev.vendor == "amd" and not dev.mma_kernels and not dev.callbacks[0]
    assert dev.smem_per_block == 64 * 1024
    for (nm, nd, nt), prec, adjoint, k in itertools.product(
            [(5000, 100, 1000), (50, 4, 10), (20000, 8, 200), (300, 30, 64)],
            ["ddddd", "sssss", "dsddd", "ddhdd"], (False, True), (1, 4, 16, 21)):
        p = _plan(nm, nd, nt, prec, adjoint, k, device=dev)
        names = [la.name for la in p.launches]
        assert not any(n.startswith(("sbgemmp_", "sbgemva_", "sbgemvx_")) for n in names), names
        assert not any(la.mma or la.xreg_rows for la in p.launches)
        assert "cuFFT with callbacks" not in p.ffts and p.path != "graph"
        assert p.fused_adjoint or sum(la.kb for la in p.launches) == k
    with pytest.raises(FFTMatvecValueError, match="mma=1, but this device has no tensor-core"):
        _plan(5000, 100, 1000, k=16, device=dev, overrides={"mma": 1})


@pytest.mark.parametrize("name", ["H100", "H200", "A100"])
def test_nvidia_devices_take_the_tensor_cores_for_batches(name):
    """On NVIDIA sm_80 and newer a batch of 16 runs on the tensor cores; complex64 storage on
    FP64 tensor cores on sm_90 only."""
    p = _plan(5000, 100, 1000, "sssss", k=16, device=name)
    assert all(la.mma for la in p.launches)
    assert ("c64dmma" in p.launches[0].name) == (DEVICES[name][1] == "sm_90")


def test_bad_environment_override_is_refused(monkeypatch):
    with pytest.raises(FFTMatvecValueError,
                       match="FFTMATVEC_PLAN: unknown plan key 'row_ffts'"):
        Overrides.resolve(env="stage3=mma,row_ffts=0")
    # read when the operator is built
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=mma,row_ffts=0")
    with pytest.raises(FFTMatvecValueError,
                       match="FFTMATVEC_PLAN: unknown plan key 'row_ffts'"):
        fm.BlockToeplitz(np.random.default_rng(2).standard_normal((2, 3, 4)))


def test_forced_kernel_that_cannot_serve_says_why():
    with pytest.raises(FFTMatvecValueError, match="mma=1, but this device has no tensor-core"):
        _plan(50, 4, 10, k=16, device=_device("H200", arch="sm_75"), overrides={"mma": 1})


def _engine(nm, nd, nt, prec="ddddd", device="H200"):
    """The planner of a product described without a GPU (a PlanningView's), the plan overrides
    read from the environment as it is now."""
    dev = _device(device)
    problem = Problem(nd, nm, nt, fm.fft_length(nt), 1, False, prec)
    return PlanningView(problem, dev, rules_for(dev.arch),
                        Overrides.resolve(env=os.environ.get("FFTMATVEC_PLAN"))).planner


def test_environment_changed_after_construction_changes_nothing(monkeypatch):
    """The stale-cache defect: FFTMATVEC_PLAN set after a shape's first product made the
    engine build later products on the old stage-3 launches while a fresh plan reported new
    ones. Read once, when the planner's overrides are resolved, the change reaches neither the
    launches, cached or made afresh, nor the plan (tests/test_executor.py: nor what runs)."""
    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    eng = _engine(5000, 100, 1000)
    first = eng._plan(False, 16, np.complex128, np.complex128)
    assert first[0].mma
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=gemv")
    assert eng._plan(False, 16, np.complex128, np.complex128) == first  # cached
    eng._plans.clear()
    assert eng._plan(False, 16, np.complex128, np.complex128) == first  # made afresh
    problem = Problem(100, 5000, 1000, fm.fft_length(1000), 16)
    assert make_plan(problem, eng.device, eng.rules, eng.resolved).launches == tuple(first)


def test_operator_reads_the_environment_once(monkeypatch):
    """An operator's plan keeps the overrides of its construction; a new operator takes the
    environment as it is then; a derived one (with_precision) keeps its parent's."""
    K = np.random.default_rng(3).standard_normal((2, 3, 4))
    monkeypatch.setenv("FFTMATVEC_PLAN", "row_fft=0")
    F = fm.BlockToeplitz(K)
    assert F.plan().overrides == (("row_fft", "0", "FFTMATVEC_PLAN"),)
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=mma")
    assert F.plan().overrides == (("row_fft", "0", "FFTMATVEC_PLAN"),)
    assert F.with_precision("sssss").plan().overrides == (("row_fft", "0", "FFTMATVEC_PLAN"),)
    assert fm.BlockToeplitz(K).plan().overrides == (("mma", "1", "FFTMATVEC_PLAN"),
                                                   ("xreg", "0", "FFTMATVEC_PLAN"))


@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_gpu_plan_is_what_runs(monkeypatch):
    """On a GPU: F.plan() is the Plan whose launches its executor runs, before and after the
    environment changes."""
    import cupy as cp

    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    rng = np.random.default_rng(4)
    F = fm.BlockToeplitz(cp.asarray(rng.standard_normal((6, 40, 16))))
    x = cp.asarray(rng.standard_normal((16, 40, 16)))
    y0 = F.matmat(x)
    p = F.plan(16)
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=gemv,graphs=1,row_fft=0")
    y1 = F.matmat(x)
    assert F.plan(16) is p
    executor = F._executors[(False, 16, F.dtype, False, "ddddd")]
    assert executor.plan is p
    packed = executor.stage3 if executor.product is None else executor.product.stage3
    assert packed.plan == p.launches  # the launches packed are the plan's
    assert rel_err(y1, cp.asnumpy(y0)) < 1e-12


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
