"""The plan of a GPU product as a pure function: :func:`make_plan` of a :class:`Problem` (the
product), a :class:`DeviceInfo` (the device, read once), :class:`~fftmatvec.gpu.rules.Rules`
(the thresholds of its architecture) and :class:`Overrides` (the user's, resolved once) gives
the :class:`~fftmatvec.gpu.plan.Plan`: no globals, no environment, no engine. The choices are
the :class:`~fftmatvec.gpu.planner.Planner`'s, over the stage-3 launch builders
(:class:`~fftmatvec.gpu.launches.LaunchBuilders`); both ask the device description, never
the device."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .. import backend
from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from ..precision import PrecisionConfig
from .overrides import Overrides
from .plan import FFT_CALLBACKS, FFT_IN_FUSED_ADJOINT, FFT_PAD, FFT_ROW, FFT_UNPAD, Plan
from .planner import Planner
from .rules import _REAL_SUFFIX, Rules
from .launches import LaunchBuilders

__all__ = ["Problem", "DeviceInfo", "Overrides", "KernelCode", "PlanningView", "make_plan",
           "make_plan_without_callbacks", "stage3_launches", "device_info"]


@dataclass(frozen=True)
class Problem:
    """One product to plan: ``nd`` sensors, ``nm`` parameters, ``nt`` time steps, FFT length
    ``fft_len``, ``k`` right-hand sides, the direction, the precision string, the input and
    output dtypes, and whether the output is weighted (a weight kind other than none)."""

    nd: int
    nm: int
    nt: int
    fft_len: int
    k: int = 1
    adjoint: bool = False
    precision: str = "ddddd"
    in_dtype: np.dtype = np.dtype(np.float64)
    out_dtype: np.dtype = np.dtype(np.float64)
    weighted: bool = False

    def __post_init__(self):
        for name in ("nd", "nm", "nt", "fft_len", "k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise FFTMatvecValueError(f"Problem: {name} must be a positive integer, got "
                                          f"{value!r}")
            object.__setattr__(self, name, int(value))
        object.__setattr__(self, "precision", PrecisionConfig(self.precision).letters)
        object.__setattr__(self, "in_dtype", np.dtype(self.in_dtype))
        object.__setattr__(self, "out_dtype", np.dtype(self.out_dtype))
        object.__setattr__(self, "adjoint", bool(self.adjoint))
        object.__setattr__(self, "weighted", bool(self.weighted))

    @property
    def nf(self) -> int:
        """Frequencies of the real FFT of length ``fft_len``."""
        return self.fft_len // 2 + 1


class KernelCode:
    """What the device's code object holds, as the plan asks it: :meth:`has` (an entry point)
    and :meth:`num_regs` (its registers per thread). This one asks the loaded code object
    (:mod:`fftmatvec.kernels`) and remembers each answer; :class:`KnownCode` is a fixed
    description."""

    def __init__(self):
        self._has: dict = {}
        self._regs: dict = {}

    def has(self, name: str) -> bool:
        """Whether the code object has the entry point ``name``."""
        from .. import kernels

        hit = self._has.get(name)
        if hit is None:
            hit = self._has[name] = bool(kernels.has_function(name))
        return hit

    def num_regs(self, name: str) -> int:
        """Registers per thread of kernel ``name`` (0: unknown or no such kernel)."""
        from .. import kernels

        hit = self._regs.get(name)
        if hit is None:
            try:
                hit = int(kernels.get_function(name).attributes["num_regs"])
            except (RuntimeError, KeyError, AttributeError):  # KernelLoadError is a RuntimeError
                hit = 0  # no such kernel, or no such attribute on this platform
            self._regs[name] = hit
        return hit


@dataclass(frozen=True)
class KnownCode:
    """A code object described without loading one: ``functions`` the entry points it has
    (None: every one the build defines for the architecture), ``regs`` registers per thread
    by kernel name (those left out: unknown)."""

    functions: frozenset | None = None
    regs: Mapping = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return self.functions is None or name in self.functions

    def num_regs(self, name: str) -> int:
        return int(self.regs.get(name, 0))


@dataclass(frozen=True)
class DeviceInfo:
    """A GPU as the plan needs it, read once per device (:func:`device_info`) or described
    (:meth:`from_properties`: tests, plans of a device not present). ``vendor``: ``"nvidia"``
    or ``"amd"``; ``arch``: ``sm_90``, ``gfx90a``; ``multiprocessors``; shared memory per
    multiprocessor and per block, threads and registers per multiprocessor; ``callbacks``:
    (whether cuFFT's callbacks work here, why not); ``mma_kernels``: whether the code object
    holds the kernels built for NVIDIA sm_80 and newer only (tensor cores, cp.async, input in
    registers); ``code``: the code object (:class:`KernelCode`, :class:`KnownCode`)."""

    name: str
    vendor: str
    arch: str
    multiprocessors: int
    smem_per_sm: int
    smem_per_block: int
    threads_per_sm: int
    regs_per_sm: int
    callbacks: tuple
    mma_kernels: bool
    code: object = field(default_factory=KnownCode, compare=False)

    @classmethod
    def from_properties(cls, props: Mapping, arch: str, *, name: str = "", callbacks=None,
                        mma_kernels: bool | None = None, code=None) -> "DeviceInfo":
        """The description of a device with CuPy's ``props`` (``getDeviceProperties``) and
        architecture ``arch``: AMD where ``arch`` starts with ``gfx``. By default cuFFT's
        callbacks work on NVIDIA and not on AMD, the sm_80 kernels exist from sm_80 on
        NVIDIA, and the code object holds every kernel of the build."""
        from ..kernels import mma_options

        amd = str(arch).startswith("gfx")
        per_sm, per_block = backend.shared_memory_limits(dict(props))
        if callbacks is None:
            callbacks = ((False, "hipFFT: callbacks not used on ROCm") if amd
                         else (True, "cuFFT LTO callbacks"))
        if mma_kernels is None:
            mma_kernels = not amd and bool(mma_options(arch))
        return cls(name=name or str(arch), vendor="amd" if amd else "nvidia", arch=str(arch),
                   multiprocessors=int(props.get("multiProcessorCount", 108)),
                   smem_per_sm=per_sm, smem_per_block=per_block,
                   threads_per_sm=int(props.get("maxThreadsPerMultiProcessor", 0)) or 2048,
                   regs_per_sm=int(props.get("regsPerMultiprocessor", 0)) or 65536,
                   callbacks=tuple(callbacks), mma_kernels=bool(mma_kernels),
                   code=KnownCode() if code is None else code)


@functools.lru_cache(maxsize=None)
def device_info(device_id: int | None = None) -> DeviceInfo:
    """The :class:`DeviceInfo` of GPU ``device_id`` (default: the current one), read from CuPy
    and the code object once per device."""
    from .. import kernels
    from . import callbacks as _fftcb

    if not backend.gpu_available():
        raise FFTMatvecTypeError("no GPU is available (CuPy is missing or sees no device)")
    cp = backend.cupy
    dev = cp.cuda.Device(device_id) if device_id is not None else cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props.get("name", b"")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    with dev:
        callbacks, mma = _fftcb.support(), kernels.has_mma_kernels()
        info = DeviceInfo.from_properties(props, backend.device_arch(dev.id), name=name,
                                          callbacks=callbacks, mma_kernels=mma,
                                          code=KernelCode())
    return info


class PlanningView:
    """The planning of a problem on a described device under rules and overrides, as parts of
    its own: :attr:`planner` (:class:`~fftmatvec.gpu.planner.Planner`, what :func:`make_plan`
    asks) and :attr:`builders` (:class:`~fftmatvec.gpu.launches.LaunchBuilders`, the stage-3
    launch builders a tuning sweep calls with rules of its own, e.g.
    ``rules.with_table({"gemv_blocks_per_sm": 4})``). Nothing is compiled, allocated or
    launched."""

    def __init__(self, problem: Problem, device: DeviceInfo, rules: Rules,
                 overrides: Overrides):
        self.problem, self.device, self.rules, self.overrides = problem, device, rules, overrides
        self.builders = LaunchBuilders(problem, device, rules, overrides)
        self.planner = Planner(problem, device, rules, overrides, self.builders)


class _Shape:
    """The shape and dtype of an input, for the rules that look at its size."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


def make_plan(problem: Problem, device: DeviceInfo, rules: Rules,
              overrides: Overrides | None = None) -> Plan:
    """The :class:`~fftmatvec.gpu.plan.Plan` of ``problem`` on ``device`` under ``rules`` and
    ``overrides``: which path (graph, fused, stage by stage), which FFTs, stage 3's launches
    (kernel, tile, grid, split-K), whether the inverse FFT adds stage 3's partial sums, the
    split-K workspace. A pure function of its arguments.

    Raises
    ------
    FFTMatvecValueError
        Where an override forces a kernel that cannot serve the product (the message says why).
    """
    if not isinstance(problem, Problem):
        raise FFTMatvecTypeError(f"problem must be a Problem, got {type(problem).__name__}")
    if not isinstance(device, DeviceInfo):
        raise FFTMatvecTypeError(f"device must be a DeviceInfo, got {type(device).__name__}")
    if not isinstance(rules, Rules):
        raise FFTMatvecTypeError(f"rules must be a Rules, got {type(rules).__name__}")
    overrides = Overrides() if overrides is None else overrides
    if not isinstance(overrides, Overrides):
        raise FFTMatvecTypeError(f"overrides must be an Overrides, got "
                                 f"{type(overrides).__name__}")
    view = PlanningView(problem, device, rules, overrides).planner
    prec, adjoint, k = view.prec, problem.adjoint, problem.k
    in_dtype, out_dtype = problem.in_dtype, problem.out_dtype
    n_in, n_out = (view.nd, view.nm) if adjoint else (view.nm, view.nd)
    own, cb = view.row_ffts(prec), view.callbacks()[0]
    fused = (not problem.weighted and in_dtype in _REAL_SUFFIX and out_dtype in _REAL_SUFFIX
             and (own or cb))
    fused_adj, fold = False, 0
    if fused:
        fused_adj = view.fused_adjoint_takes(prec, adjoint, k, out_dtype)
        row_fwd = own and view.row_fft_pays(k * n_in, prec.real_dtype("fft"))
        fwd = FFT_ROW if row_fwd else FFT_CALLBACKS
        if fused_adj:
            inv = FFT_IN_FUSED_ADJOINT
            launches = []
        else:
            row_inv = own and view.row_fft_pays(k * n_out, prec.real_dtype("ifft"))
            inv = FFT_ROW if row_inv else FFT_CALLBACKS
            fold = 0 if row_inv else view.fold_splits(prec, adjoint, k)
            launches = view._plan(adjoint, k, view.xhat_dtype(prec), view.yhat_dtype(prec))
        ffts = (fwd, inv)
    else:
        ffts = (FFT_PAD, FFT_UNPAD)
        launches = view._plan(adjoint, k, prec.complex_dtype("fft"), prec.complex_dtype("ifft"))
    graph = view.replays(_Shape((k, n_in, view.nt), in_dtype), fused)
    path = "graph" if graph else "fused" if fused else "stages"
    work = max([la.splits * la.kb * n_out * view.nf * view.compute.itemsize
                for la in launches if la.splits > 1] or [0])
    return Plan("adjoint" if adjoint else "forward", k, prec.letters, path, ffts,
                tuple(launches), fused_adj, fold, device.arch, overrides.items, work, problem)


def stage3_launches(problem: Problem, device: DeviceInfo, rules: Rules,
                    overrides: Overrides | None, in_dtype, out_dtype) -> tuple:
    """Stage 3's launches (:class:`~fftmatvec.gpu.stage3._Launch`) of ``problem`` on
    ``device`` for an input of ``in_dtype`` and an output of ``out_dtype`` (complex): the
    choice :func:`make_plan` makes for those dtypes, for stage 3 run on its own (benchmarks,
    tuning sweeps, the building blocks). A pure function of its arguments."""
    overrides = Overrides() if overrides is None else overrides
    view = PlanningView(problem, device, rules, overrides).planner
    return tuple(view._plan(problem.adjoint, problem.k, np.dtype(in_dtype), np.dtype(out_dtype)))


def make_plan_without_callbacks(problem: Problem, device: DeviceInfo, rules: Rules,
                                overrides: Overrides | None, why: str) -> Plan:
    """The plan of ``problem`` where cuFFT could not make a plan with callbacks that ``plan``
    named (``why``): :func:`make_plan` on ``device`` described without callbacks, so the
    product takes the row FFT kernels where they serve it, else runs stage by stage."""
    import dataclasses

    return make_plan(problem, dataclasses.replace(device, callbacks=(False, str(why))), rules,
                     overrides)
