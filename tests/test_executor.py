"""The plan is what runs: an operator keeps one executor per product, ``F.plan()`` is the plan
that executor runs, and an executor builds what its plan names and nothing else.

On the CPU the kernel engine's leaves are stood in for by a recording engine that computes
with the matmul engine and records what it is asked to build and run, over plans that
:func:`~fftmatvec.gpu.planning.make_plan` makes for a described H200."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import dense_btt, rel_err, set_plan

import fftmatvec as fm
from fftmatvec import backend
from fftmatvec._errors import FFTMatvecTypeError
from fftmatvec._matmul import MatmulEngine
from fftmatvec.gpu import callbacks as _fftcb
from fftmatvec.gpu.executor import Executor
from fftmatvec.gpu.fused import FusedBuffers
from fftmatvec.gpu.plan import FFT_CALLBACKS, FFT_PAD, FFT_ROW, FFT_UNPAD, Plan
from fftmatvec.gpu.planning import (DeviceInfo, Overrides, Problem, make_plan,
                                    make_plan_without_callbacks)
from fftmatvec.gpu.rules import rules_for

H200 = DeviceInfo.from_properties(
    {"multiProcessorCount": 132, "sharedMemPerMultiprocessor": 228 * 1024,
     "sharedMemPerBlockOptin": 227 * 1024, "maxThreadsPerMultiProcessor": 2048,
     "regsPerMultiprocessor": 65536}, "sm_90", name="H200")
RULES = rules_for("sm_90")
# stage by stage on the described H200: no fused product, no graph (the recording engine
# computes the stages with the matmul engine)
STAGES = {"row_fft": 0, "fft_callbacks": 0, "graphs": 0}


class _Recording(MatmulEngine):
    """The kernel engine's seam, on the CPU: ``name`` "kernels", the described H200 and its
    rules, and the parts an executor builds from (``stage3``, ``ffts``, ``buffers``,
    ``khat_store``); stage 3's packed launches and the FFT plans recorded as they are built,
    and the launches each stage 3 runs, computed by the matmul engine. No planner method: an
    executor that asked one would fail."""

    name = "kernels"

    def __init__(self, *args):
        super().__init__(*args)
        self.device, self.rules = H200, RULES
        self.compute = np.dtype(np.complex128 if self.prec.letters[2] == "d" else np.complex64)
        self.built, self.ran, self.fft_plans = [], [], []
        self.stage3 = SimpleNamespace(pack=self._pack)
        self.ffts = SimpleNamespace(fft_plan=self._fft_plan, fused_plans=self._fused_plans,
                                    xhat_dtype=self._xhat_dtype, yhat_dtype=self._xhat_dtype)
        # the fused product's sizes, as the kernel engine computes them
        self.buffers = FusedBuffers(np, self.nf, self.nt, self.fft_len, self.compute)
        self.khat_store = SimpleNamespace(scales_input=lambda adjoint: False)

    def _pack(self, adjoint, k, in_dtype, out_dtype, plan=None):
        self.built.append(("stage3", adjoint, k, np.dtype(in_dtype), np.dtype(out_dtype),
                           None if plan is None else tuple(plan)))
        return SimpleNamespace(plan=None if plan is None else tuple(plan), workspace_bytes=0,
                               partials_launch=lambda: "the partial sums' launch")

    def apply(self, xhat, adjoint, out_dtype, out=None, workspace=None, plan=None,
              xhat_scaled=False):
        self.ran.append(plan)
        return super().apply(xhat, adjoint, out_dtype, out=out, workspace=workspace,
                             xhat_scaled=xhat_scaled)

    def _fft_plan(self, kind, batch, dtype):
        self.fft_plans.append((kind, batch, np.dtype(dtype)))

    def _fused_plans(self, prec, adjoint, k, in_dtype, out_dtype, ffts, fold=0):
        self.built.append(("ffts", ffts, fold))
        return SimpleNamespace(fwd="fwd", inv="inv", xhat_scaled=False, split_sum=fold)

    def _xhat_dtype(self, prec):
        return np.dtype(np.complex128 if prec.letters[2] == "d" else np.complex64)


@pytest.fixture
def recording(monkeypatch):
    """Operators built while this is active store Khat in a :class:`_Recording` engine."""
    monkeypatch.setattr(fm.BlockToeplitz, "_make_engine", lambda self: _Recording(
        np, self.precision, self.nd, self.nm, self.nf, self.nt, self.fft_len))


def test_cpu_plan_is_the_executors(rng):
    """On the CPU F.plan(k, adjoint) is the plan of the executor the products of k right-hand
    sides run, made once, before or after the first product; the products are right."""
    K = rng.standard_normal((3, 4, 6))
    F = fm.BlockToeplitz(K)
    A = dense_btt(K)
    for adjoint, n_in, M in ((False, 4, A), (True, 3, A.T)):
        p = F.plan(2, adjoint)
        executor = F._executors[(adjoint, 2, F.dtype, False, "ddddd")]
        assert executor.plan is p and p.path == "cpu"
        assert p.problem == Problem(3, 4, 6, F.fft_len, 2, adjoint, "ddddd")
        x = rng.standard_normal((2, n_in, 6))
        y = F.rmatmat(x) if adjoint else F.matmat(x)
        assert y.dtype == np.float64
        for b in range(2):
            assert rel_err(y[b].ravel(), M @ x[b].ravel()) < 1e-13
        assert F._executors[(adjoint, 2, F.dtype, False, "ddddd")] is executor
        assert F.plan(2, adjoint) is p


def test_gpu_plan_is_what_runs(recording, rng):
    """With the kernel engine's seam: F.plan(k) comes from make_plan on the engine's device,
    rules and the operator's overrides, and the executor packs exactly its launches once;
    every product's stage 3 runs those (not the engine's own choice)."""
    K = rng.standard_normal((6, 40, 16))
    F = fm.BlockToeplitz(K, plan=STAGES)
    eng = F._engine
    p = F.plan(16)
    assert p.path == "stages" and p.ffts == (FFT_PAD, FFT_UNPAD) and p.launches
    want = make_plan(Problem(6, 40, 16, F.fft_len, 16), H200, RULES,
                     Overrides.resolve(STAGES))
    assert p == want and p.launches == want.launches
    executor = F._executors[(False, 16, F.dtype, False, "ddddd")]
    assert executor.plan is p and executor.product is None
    assert eng.built == [("stage3", False, 16, np.dtype(np.complex128),
                          np.dtype(np.complex128), p.launches)]
    assert eng.fft_plans == [("r2c", 16 * 40, np.dtype(np.float64)),  # stages 2 and 4's cuFFT
                             ("c2r", 16 * 6, np.dtype(np.complex128))]
    x = rng.standard_normal((16, 40, 16))
    y = F.matmat(x)
    A = dense_btt(K)
    assert max(rel_err(y[b].ravel(), A @ x[b].ravel()) for b in range(16)) < 1e-13
    assert eng.ran == [executor.stage3] and executor.stage3.plan == p.launches
    assert len(eng.built) == 1 and len(eng.fft_plans) == 2  # nothing built again


def test_environment_set_after_a_first_product_changes_nothing(recording, monkeypatch, rng):
    """The stale-cache defect: an override put in FFTMATVEC_PLAN after a shape's first product
    changes neither the plan nor what runs (the environment is read once, at construction);
    an operator built afterwards takes it."""
    set_plan(monkeypatch, "stage3", None)
    K = rng.standard_normal((6, 40, 16))
    F = fm.BlockToeplitz(K, plan=STAGES)
    x = rng.standard_normal((16, 40, 16))
    y0 = F.matmat(x)
    p = F.plan(16)
    assert all(la.mma for la in p.launches)  # batches of 16 on the tensor cores
    built = list(F._engine.built)
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=gemv,graphs=1")
    y1 = F.matmat(x)
    assert F.plan(16) is p and F._engine.built == built
    assert F._engine.ran[-1].plan == p.launches
    assert np.array_equal(y0, y1)
    G = fm.BlockToeplitz(K, plan=STAGES)
    assert not any(la.mma for la in G.plan(16).launches)
    assert ("mma", "0", "FFTMATVEC_PLAN") in G.plan(16).overrides


def test_executor_builds_the_fused_product_its_plan_names():
    """A fused plan: stage 3's launches packed for the FFTs' dtypes and the transforms of the
    kinds and fold the plan names, made into one product; the call runs it."""
    problem = Problem(100, 5000, 1000, fm.fft_length(1000))
    plan = make_plan(problem, H200, RULES)
    assert plan.path == "fused" and plan.ffts == (FFT_ROW, FFT_CALLBACKS)
    eng = _Recording(np, fm.PrecisionConfig("ddddd"), 100, 5000, problem.nf, 1000,
                     problem.fft_len)
    executor = Executor(plan, eng)
    assert executor.plan is plan and executor.stage3 is None
    assert eng.built == [("stage3", False, 1, np.dtype(np.complex128),
                          np.dtype(np.complex128), plan.launches),
                         ("ffts", plan.ffts, plan.fold)]
    assert executor.product.stage3.plan == plan.launches
    assert executor.product.plans.fwd == "fwd" and executor.product.split_sum == plan.fold


def test_executor_plans_again_where_cufft_has_no_callback_plan(monkeypatch):
    """A callback plan cuFFT cannot make: the executor asks its replan once and runs (and
    holds) the plan made for the device without callbacks, with a warning where that runs
    stage by stage; with fft_callbacks=1 the error."""
    problem = Problem(100, 5000, 1000, fm.fft_length(1000))
    eng = _Recording(np, fm.PrecisionConfig("ddddd"), 100, 5000, problem.nf, 1000,
                     problem.fft_len)

    def fail(*args, **kwargs):
        raise _fftcb.CallbackError("link failed")

    eng.ffts.fused_plans = fail
    asked = []

    def replan(why, overrides=None):
        asked.append(why)
        return make_plan_without_callbacks(problem, H200, RULES, overrides, why)

    plan = make_plan(problem, H200, RULES, Overrides.resolve({"row_fft": 0}))
    with pytest.warns(RuntimeWarning, match="link failed"):
        executor = Executor(plan, eng, replan=lambda why: replan(why, Overrides.resolve(
            {"row_fft": 0})))
    assert asked == ["link failed"] and executor.plan is not plan
    assert executor.plan.ffts == (FFT_PAD, FFT_UNPAD) and executor.product is None
    assert executor.stage3.plan == executor.plan.launches
    forced = make_plan(problem, H200, RULES, Overrides.resolve({"fft_callbacks": 1}))
    with pytest.raises(_fftcb.CallbackError, match="link failed"):
        Executor(forced, eng, replan=replan)
    assert asked == ["link failed"]
    with pytest.raises(_fftcb.CallbackError, match="link failed"):
        Executor(plan, eng)  # no replan: the failure is the caller's


def test_executor_of_a_graph_plan_captures_at_its_first_call():
    """A graph plan builds its product's parts at construction and captures nothing until a
    call (a weighted product: one graph a weight)."""
    problem = Problem(4, 50, 10, fm.fft_length(10), weighted=True)
    plan = make_plan(problem, H200, RULES)
    assert plan.path == "graph" and plan.ffts == (FFT_PAD, FFT_UNPAD)
    eng = _Recording(np, fm.PrecisionConfig("ddddd"), 4, 50, problem.nf, 10, problem.fft_len)
    executor = Executor(plan, eng)
    assert executor.stage3.plan == plan.launches and not executor._graphs


def test_executor_refuses_what_is_not_a_plan():
    eng = _Recording(np, fm.PrecisionConfig("ddddd"), 2, 3, 5, 4, 8)
    with pytest.raises(FFTMatvecTypeError, match="plan must be a Plan, got dict"):
        Executor({}, eng)
    with pytest.raises(FFTMatvecTypeError, match="plan must carry its Problem"):
        Executor(Plan("forward", 1, "ddddd", "cpu"), eng)


def test_precision_switch_drops_the_executors(rng):
    """The guard's switch to a more accurate precision replaces the executors with those of
    the new precision: F.plan() is then the new precision's, and is what runs."""
    K = rng.standard_normal((3, 4, 6))
    F = fm.BlockToeplitz(K, "ddhdd", check_every=1)
    assert F.plan().precision == "ddhdd"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = F.matvec(rng.standard_normal((4, 6)))
    assert F.precision.letters == "ddddd" and y.dtype == np.float64
    assert all(key[-1] == "ddddd" for key in F._executors)
    p = F.plan()
    assert p.precision == "ddddd" and F._executors[(False, 1, F.dtype, False, "ddddd")].plan is p


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
@pytest.mark.parametrize("k,adjoint", [(1, False), (1, True), (16, False), (16, True)])
def test_gpu_launches_run_are_the_plans(monkeypatch, rng, k, adjoint):
    """On a GPU: the stage-3 launches packed in the executor (fused product or stages) are the
    plan's, before and after the environment changes, and the product is right."""
    import cupy as cp

    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    K = rng.standard_normal((6, 40, 16))
    F = fm.BlockToeplitz(cp.asarray(K))
    n_in = 6 if adjoint else 40
    x = cp.asarray(rng.standard_normal((k, n_in, 16)))
    run = F.rmatmat if adjoint else F.matmat
    y0 = run(x)
    p = F.plan(k, adjoint)
    executor = F._executors[(adjoint, k, F.dtype, False, "ddddd")]
    assert executor.plan is p
    monkeypatch.setenv("FFTMATVEC_PLAN", "stage3=gemv,graphs=1,row_fft=0")
    y1 = run(x)
    assert F.plan(k, adjoint) is p
    packed = executor.stage3 if executor.product is None else executor.product.stage3
    if p.fused_adjoint:
        assert packed is None and not p.launches
    else:
        assert packed.plan == p.launches
    M = dense_btt(K).T if adjoint else dense_btt(K)
    xs = cp.asnumpy(x)
    for b in range(k):
        assert rel_err(y0[b].ravel(), M @ xs[b].ravel()) < 1e-12
    assert rel_err(y1, cp.asnumpy(y0)) < 1e-12


def _gpu_imports():
    """{module: the gpu modules it imports at import time} for fftmatvec/gpu (imports inside
    functions and under TYPE_CHECKING left out)."""
    import ast
    from pathlib import Path

    root = Path(fm.__file__).parent / "gpu"
    names = {p.stem for p in root.glob("*.py")}
    graph = {}
    for path in root.glob("*.py"):
        deps = set()
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
        graph[path.stem] = deps & names - {path.stem}
    return graph


def test_gpu_package_has_no_import_cycle_and_small_modules():
    """fftmatvec/gpu: no module over 600 lines, and its modules import one another without a
    cycle (a topological order exists); gpu/ does not import the FNO layer."""
    import ast
    from pathlib import Path

    root = Path(fm.__file__).parent / "gpu"
    for path in root.glob("*.py"):
        text = path.read_text()
        assert len(text.splitlines()) <= 600, path.name
        for node in ast.walk(ast.parse(text)):  # anywhere, functions included
            if isinstance(node, ast.ImportFrom):
                assert not (node.level == 2 and (node.module or "").startswith("fno")), path.name
                assert not (node.module or "").startswith("fftmatvec.fno"), path.name
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("fftmatvec.fno") for a in node.names)
    graph = _gpu_imports()
    done, order = set(), []
    while len(done) < len(graph):
        ready = [m for m, deps in graph.items() if m not in done and deps <= done]
        assert ready, f"an import cycle among {sorted(set(graph) - done)}"
        done.update(ready)
        order += ready
    assert order.index("plan") < order.index("planning") < order.index("engine")


def test_gpu_classes_are_composed_not_mixed_in():
    """No class of fftmatvec/gpu takes a base class of fftmatvec/gpu (the engine and the
    planning are objects holding their parts, not mixins sharing one ``self``), except a true
    specialisation named here."""
    import importlib
    import inspect
    import pkgutil

    import fftmatvec.gpu as gpu

    allowed: set = set()  # ("module.Class", "module.Base") of a true specialisation: none
    found = []
    for info in pkgutil.iter_modules(gpu.__path__):
        module = importlib.import_module(f"{gpu.__name__}.{info.name}")
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for base in cls.__mro__[1:]:
                if base.__module__.startswith(gpu.__name__ + "."):
                    pair = (f"{info.name}.{name}",
                            f"{base.__module__.rsplit('.', 1)[1]}.{base.__qualname__}")
                    if pair not in allowed:
                        found.append(pair)
    assert not found, f"classes of fftmatvec/gpu with a base class of fftmatvec/gpu: {found}"


def test_split_k_sum_is_the_plans(monkeypatch):
    """Which kernel adds a launch's split-K partials (one thread an output, or lanes) is part
    of the plan (``_Launch.serial_sum``, the rule of launches.serial_sum), and packing a launch
    takes that kernel, not a choice of its own."""
    from fftmatvec import kernels
    from fftmatvec.gpu.stage3 import Stage3Runner
    from fftmatvec.gpu.launches import serial_sum

    seen = {True: 0, False: 0}
    for nm, nd, nt, adjoint in ((5000, 3, 100, False), (20, 3000, 40, True),
                                (100000, 10, 100, False), (1000, 100, 1000, False),
                                (5000, 100, 1000, False)):
        problem = Problem(nd, nm, nt, fm.fft_length(nt), 1, adjoint)
        for la in make_plan(problem, H200, RULES).launches:
            n_out = nm if adjoint else nd
            want = la.splits > 1 and serial_sum(RULES, 132, la.kb * n_out * problem.nf,
                                                la.splits)
            assert la.serial_sum is want
            if la.splits > 1:
                seen[want] += 1
    assert seen[True] and seen[False]  # both kernels are planned somewhere
    got = []
    monkeypatch.setattr(kernels, "get_function",
                        lambda name, shared_mem=0: got.append(name) or name)
    problem = Problem(3, 5000, 100, fm.fft_length(100))
    (la,) = make_plan(problem, H200, RULES).launches
    assert la.splits > 1
    eng = SimpleNamespace(nf=problem.nf, rules=RULES, num_sms=132,
                          compute=np.dtype(np.complex128), _args={},
                          khat_store=SimpleNamespace(nfp=problem.nf + 3,
                                                     strides=lambda adjoint: (8, 8, 3, 8)))
    eng.split_sum = lambda *a, **kw: Stage3Runner.split_sum(eng, *a, **kw)
    for serial in (True, False):  # the launch's word, whatever the rule says
        import dataclasses

        one = dataclasses.replace(la, serial_sum=serial)
        _, _, (fn, _, _, _) = Stage3Runner._launch_args(eng, one, False, 3, 5000, np.complex128)
        assert fn.startswith("reduce_serial_" if serial else "reduce_c128")
