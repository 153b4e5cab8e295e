"""The GPU path (CuPy on NVIDIA and AMD): the engine and its planner.

Modules, one concern each:

* :mod:`~fftmatvec.gpu.plan`: the :class:`Plan` of a product and the plan overrides
  (``BlockToeplitz(..., plan=...)``, ``FFTMATVEC_PLAN``);
* :mod:`~fftmatvec.gpu.planning`: :func:`make_plan`, the plan of a product as a pure function
  of the problem, the device, the rules and the overrides;
* :mod:`~fftmatvec.gpu.planner`: every choice a product makes, from
  :mod:`~fftmatvec.gpu.rules`, the measured rules (docs/gpu.md);
* :mod:`~fftmatvec.gpu.engine`: ``Khat`` in the kernels' layout and the engine class;
* :mod:`~fftmatvec.gpu.stage3`: the stage-3 launches;
* :mod:`~fftmatvec.gpu.ffts`, :mod:`~fftmatvec.gpu.callbacks`, :mod:`~fftmatvec.gpu.rowfft`:
  the FFT stages (cuFFT/hipFFT, cuFFT callbacks, the package's row FFT kernels);
* :mod:`~fftmatvec.gpu.fused`: fused products; :mod:`~fftmatvec.gpu.graphs`: CUDA graphs.

Nothing here imports CuPy at import time.
"""

from __future__ import annotations

from . import callbacks, rowfft, rules  # noqa: F401
from .engine import KernelEngine, khat_layout  # noqa: F401
from .ffts import FusedPlans  # noqa: F401
from .fused import _FusedProduct, _GemvIrfft  # noqa: F401
from .graphs import _GraphRunner  # noqa: F401
from .plan import (ENV, PLAN_KEYS, STAGE3_CHOICES, Plan, env_overrides, mode,  # noqa: F401
                   parse_overrides, plan_key)
from .planner import Planner, batch_kernels, fused_adjoint_line, row_fft_line  # noqa: F401
from .planning import (DeviceInfo, KernelCode, KnownCode, Overrides, Problem,  # noqa: F401
                       device_info, make_plan)
from .rules import Rules, rules_for  # noqa: F401
from .rules import *  # noqa: F401,F403
from .rules import (_BATCH_SIZES, _CPLX_SUFFIX, _ELEM_BYTES, _MMA_ROWS, _ONE_BLOCK_SHIFT,  # noqa: F401
                    _PER_THREAD_STREAM, _REAL_SUFFIX, _STAGED_J, _STORE_SUFFIX)
from .stage3 import (_Launch, _Stage3, _fill_splits, _split_k, async_chunks,  # noqa: F401
                     pipe_max_splits, pipe_split_count, pipe_split_time)
