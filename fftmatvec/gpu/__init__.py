"""The GPU path (CuPy on NVIDIA and AMD): the planning function, the engine and its parts.

Modules, one concern each:

* :mod:`~fftmatvec.gpu.planning`: :func:`make_plan`, the plan of a product as a pure function
  of the problem (:class:`Problem`), the device (:class:`DeviceInfo`), the rules
  (:class:`Rules`) and the overrides (:class:`Overrides`);
* :mod:`~fftmatvec.gpu.plan`: the :class:`Plan` of a product and the plan keys;
  :mod:`~fftmatvec.gpu.overrides`: an operator's overrides, resolved once
  (``BlockToeplitz(..., plan=...)``, ``FFTMATVEC_PLAN``);
* :mod:`~fftmatvec.gpu.executor`: the :class:`Executor` that builds what a plan names and
  runs it;
* :mod:`~fftmatvec.gpu.planner`: every choice a product makes, from
  :mod:`~fftmatvec.gpu.rules`, the measured rules (docs/gpu.md);
* :mod:`~fftmatvec.gpu.khat`: ``Khat`` in the kernels' layout (:class:`KhatStore`);
  :mod:`~fftmatvec.gpu.engine`: the engine, a ``KhatStore`` and its parts (stage 3, the FFT
  stages, the fused products' buffers); it chooses nothing;
* :mod:`~fftmatvec.gpu.launches`: the stage-3 launch builders and their default tiles
  (:class:`LaunchBuilders`, which the :class:`Planner` asks);
  :mod:`~fftmatvec.gpu.stage3`: stage 3 run, its launches packed (:class:`Stage3Runner`);
  :mod:`~fftmatvec.gpu.blocks`: stage 3 of one block of ``Khat``;
* :mod:`~fftmatvec.gpu.ffts`, :mod:`~fftmatvec.gpu.callbacks`, :mod:`~fftmatvec.gpu.rowfft`:
  the FFT stages (cuFFT/hipFFT, cuFFT callbacks, the package's row FFT kernels);
* :mod:`~fftmatvec.gpu.fused`: fused products and their buffers (:class:`FusedBuffers`);
  :mod:`~fftmatvec.gpu.graphs`: CUDA graphs.

Nothing here imports CuPy at import time.
"""

from __future__ import annotations

from . import (callbacks, engine, executor, ffts, fused, graphs, khat, launches, overrides,
               plan, planner, planning, rowfft, rules, stage3)
from .engine import KernelEngine
from .khat import KhatStore, khat_layout
from .executor import Executor
from .ffts import FFTStages, FusedPlans
from .fused import FusedBuffers
from .stage3 import Stage3Runner
from .overrides import Overrides
from .plan import ENV, PLAN_KEYS, STAGE3_CHOICES, Plan, parse_overrides
from .planner import Planner, batch_kernels, fused_adjoint_line, row_fft_line
from .planning import (DeviceInfo, KernelCode, KnownCode, PlanningView, Problem, device_info,
                       make_plan, make_plan_without_callbacks, stage3_launches)
from .rules import *  # noqa: F403  (the tile catalogues and thresholds: rules.__all__)
from .rules import __all__ as _rules_all
from .launches import (LaunchBuilders, async_chunks, pipe_max_splits, pipe_split_count,
                       pipe_split_time)

__all__ = ["callbacks", "engine", "executor", "ffts", "fused", "graphs", "khat", "launches",
           "overrides",
           "plan",
           "planner", "planning", "rowfft", "rules", "stage3", "KernelEngine", "KhatStore",
           "khat_layout",
           "Executor", "FFTStages", "FusedBuffers", "FusedPlans", "Stage3Runner", "ENV",
           "PLAN_KEYS", "STAGE3_CHOICES", "Plan",
           "parse_overrides", "Planner", "batch_kernels", "fused_adjoint_line", "row_fft_line",
           "DeviceInfo", "KernelCode", "KnownCode", "Overrides", "PlanningView", "Problem",
           "device_info", "make_plan", "make_plan_without_callbacks", "stage3_launches",
           "LaunchBuilders", "async_chunks", "pipe_max_splits", "pipe_split_count",
           "pipe_split_time", *_rules_all]
