"""The plan of a GPU product: what it runs, and the overrides that change it.

Every choice the GPU path makes for one product (shape, precision, right-hand sides,
direction, device) is a method of :class:`fftmatvec.gpu.planner.Planner`, from the measured
rules (:mod:`fftmatvec.gpu.rules`, docs/gpu.md). :func:`fftmatvec.gpu.planning.make_plan`
gathers those choices into a :class:`Plan`, small, immutable and printable:
``F.plan(k=1, adjoint=False)``.

The rules can be overridden, key by key, for comparisons, debugging and tuning:

* per operator, ``BlockToeplitz(..., plan={"row_fft": 0, "stage3": "mma"})``;
* per process, ``FFTMATVEC_PLAN="stage3=mma,row_fft=0"`` (read once, when an operator is
  built: a later change of the environment does not touch an existing operator);
* by a tuning table's entry (docs/tuning.md).

The operator's mapping wins over the environment, the environment over the tuning table.
An unknown key or value is an error that names it and the allowed ones.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from .._errors import FFTMatvecValueError

__all__ = ["PLAN_KEYS", "STAGE3_CHOICES", "Plan", "parse_overrides", "ENV", "FFT_ROW", "FFT_CALLBACKS", "FFT_IN_FUSED_ADJOINT", "FFT_PAD",
           "FFT_UNPAD"]

ENV = "FFTMATVEC_PLAN"

# the kinds of transform a plan names (Plan.ffts): stages 1+2 and 4+5 of a fused product ...
FFT_ROW = "row FFT kernel"  # the package's row FFT kernels (fftmatvec.gpu.rowfft)
FFT_CALLBACKS = "cuFFT with callbacks"  # a cuFFT plan with load and store callbacks
FFT_IN_FUSED_ADJOINT = "in the fused adjoint kernel"  # stages 4+5 inside stages 3-5's kernel
# ... and of a product run stage by stage
FFT_PAD = "pad kernel, then cuFFT"
FFT_UNPAD = "cuFFT, then unpad kernel"

# key -> what "1" forces ("0" forbids it, "auto" leaves it to the rules)
PLAN_KEYS = {
    "graphs": "replay the whole product as one CUDA graph",
    "fft_callbacks": "stages 1+2 and 4+5 as cuFFT plans with load and store callbacks",
    "row_fft": "stages 1+2 and 4+5 as the package's own row FFT kernels",
    "fused_adjoint": "stages 3-5 of a one-vector adjoint as one kernel",
    "mma": "stage 3 on the tensor-core kernels, every launch",
    "xreg": "adjoint stage 3 with the input in registers, every launch",
    "staged": "one-vector stage 3 on the staged kernel",
    "async": "one-vector stage 3 on the cp.async kernel",
    "dmma_c64": "complex64 batches on FP64 tensor cores",
    "scale_pass": "scale every input of a reduced precision by an element-wise device pass",
    "fno_rows": "the FNO layer's last-axis transforms as row FFT kernels, not DFT GEMMs",
    "fno_plane": "the FNO layer's last two axes as one FFT kernel a plane, not DFT GEMMs",
    "fno_split": "a one-axis FNO layer's modes modes-major and split, not permuted",
    "fno_paired": "an FNO layer's modes modes-major in complex pairs, written and read by the "
                  "row or plane kernels, not permuted",
    "fno_product": "the paired modes' forward channel product on the package's kernel for "
                   "small batches, not cuBLAS",
    "fno_fused": "a one-axis FNO layer's forward without gradients as one kernel (the "
                 "transforms and the channel product), not the paired chain's three launches",
    "fno_warp": "the FNO layer's row and plane kernels in their warp form, not their pass form",
    "fno_fast": "an FNO call whose signature replayed a graph before replays it at once "
                "(a forward without gradients) or takes its plan (a training call), without "
                "the call's checks and planning",
    "fno_direct": "the FNO layer's plane kernels in their direct form (truncated DFTs as "
                  "register-tiled sums, any plane size, at most 16 bins of the last axis)",
    "fno_ends": "the FNO layer's CUDA graphs hold its chains' middles, the first and last steps "
                "outside (no copy of the input in or of the output out)",
}
_VALUES = ("auto", "0", "1")
# the stage-3 family in one key: shorthand for the family keys above
STAGE3_CHOICES = {
    "auto": {},
    "gemv": {"mma": "0", "xreg": "0", "staged": "0", "async": "0"},
    "staged": {"mma": "0", "xreg": "0", "staged": "1", "async": "0"},
    "async": {"mma": "0", "xreg": "0", "async": "1"},
    "xreg": {"xreg": "1"},
    "mma": {"mma": "1", "xreg": "0"},
}
_WORDS = {True: "1", False: "0", 1: "1", 0: "0"}


def _value(key: str, value: Any, source: str) -> str:
    if isinstance(value, (bool, int)) and value in _WORDS:
        return _WORDS[value]
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text == "":
        text = "auto"
    if text not in _VALUES:
        raise FFTMatvecValueError(f"{source}: {key} must be auto, 0 or 1, got {value!r}")
    return text


def parse_overrides(overrides: Mapping | str | None, source: str = "plan") -> dict:
    """``{key: "auto"|"0"|"1"}`` from a mapping or a ``"key=value,key=value"`` string; the
    ``stage3`` shorthand expands to its family keys (an explicit key wins over it)."""
    if overrides is None:
        return {}
    if isinstance(overrides, str):
        pairs = []
        for item in overrides.split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep:
                raise FFTMatvecValueError(f"{source}: {item!r} is not key=value")
            pairs.append((key.strip().lower(), value))
    elif isinstance(overrides, Mapping):
        pairs = list(overrides.items())
    else:
        raise FFTMatvecValueError(
            f"{source} must be a mapping or a 'key=value,...' string, got {type(overrides).__name__}")
    out: dict = {}
    family: dict = {}
    for key, value in pairs:
        if not isinstance(key, str):
            raise FFTMatvecValueError(f"{source}: plan keys are strings, got {key!r}")
        if key == "stage3":
            choice = str(value).strip().lower()
            if choice not in STAGE3_CHOICES:
                raise FFTMatvecValueError(f"{source}: stage3 must be one of "
                                          f"{', '.join(STAGE3_CHOICES)}, got {value!r}")
            family = dict(STAGE3_CHOICES[choice])
        elif key in PLAN_KEYS:
            out[key] = _value(key, value, source)
        else:
            raise FFTMatvecValueError(f"{source}: unknown plan key {key!r}; the keys are stage3, "
                                      + ", ".join(PLAN_KEYS))
    return {**family, **out}


def _env_reader(name: str = ENV, environ=os.environ):
    """A function of no arguments giving the value of ``name`` in ``environ`` (None where
    unset), read at each call. Kept for the FNO layer alone (fftmatvec.fno), until it reads
    its settings once."""
    return functools.partial(environ.get, name)


def plan_key():
    """The raw value of FFTMATVEC_PLAN (None where unset), read at the call. Kept for the FNO
    layer alone, which reads it per call until it reads it once; nothing in this package
    uses it."""
    return os.environ.get(ENV)


@functools.lru_cache(maxsize=32)
def _parsed(raw) -> dict:
    """The overrides of one value of FFTMATVEC_PLAN (parsed once per distinct value)."""
    return parse_overrides(raw, ENV)


def mode(owner, key: str) -> str:
    """``"auto"``, ``"0"`` or ``"1"`` for plan key ``key``: ``owner``'s overrides resolved once
    (``owner.resolved``) where it has them, else its own (``owner.overrides``), then
    ``FFTMATVEC_PLAN`` as it is at the call, then its tuning table's plan (``owner.tuned``).
    Kept for the FNO layer alone (fftmatvec.fno); the GPU path reads the
    :class:`~fftmatvec.gpu.overrides.Overrides` of an operator, resolved at its construction."""
    resolved = getattr(owner, "resolved", None)
    if resolved is not None:
        return resolved.get(key)
    own = getattr(owner, "overrides", None)
    if own and key in own:
        return own[key]
    env = _parsed(plan_key())
    if key in env:
        return env[key]
    tuned = getattr(owner, "tuned", None)
    if tuned and key in tuned:
        return tuned[key]
    return "auto"


def unavailable(key: str, value: str, what: str, why: str | None) -> bool:
    """Whether a kernel that plan ``key`` chooses cannot serve a product (``why`` says why,
    None where it can); an error that says why where the plan forces it (``value`` "1")."""
    if why is not None and value == "1":
        raise FFTMatvecValueError(f"plan {key}=1, but {what}: {why}")
    return why is not None


@dataclass(frozen=True)
class Plan:
    """What one product runs on the GPU (or the CPU), in words.

    ``problem``: the :class:`~fftmatvec.gpu.planning.Problem` it plans (sizes, dtypes,
    weight). ``path``: ``"graph"`` (the product replayed as one CUDA graph), ``"fused"`` (stages 1 and
    5 inside the FFTs, stage 3 packed: three launches or two), ``"stages"`` (the five stages
    one by one) or ``"cpu"``. ``ffts``: (forward, inverse) transforms (:data:`FFT_ROW`, :data:`FFT_CALLBACKS`,
    :data:`FFT_IN_FUSED_ADJOINT`; :data:`FFT_PAD`, :data:`FFT_UNPAD` stage by stage). ``launches``: stage 3's
    launches in order (:class:`~fftmatvec.gpu.stage3._Launch`: kernel, right-hand sides, grid,
    block, split-K), and :attr:`stage3` the same in words. ``fold``: stage 3's splits that the
    inverse FFT adds as it loads them (0: none). ``workspace_bytes``: stage 3's split-K
    workspace. ``overrides``: the plan keys in effect that are not ``auto``, and where they
    came from. :func:`fftmatvec.gpu.planning.make_plan` makes it."""

    direction: str
    k: int
    precision: str
    path: str
    ffts: tuple = ()
    launches: tuple = ()
    fused_adjoint: bool = False
    fold: int = 0
    device: str = ""
    overrides: tuple = field(default=())
    workspace_bytes: int = 0
    problem: Any = None

    @property
    def fused_ffts(self) -> bool:
        """Whether stages 1 and 5 run inside the FFTs (a fused product, replayed or not)."""
        return bool(self.ffts) and self.ffts[0] in (FFT_ROW, FFT_CALLBACKS)

    def mode(self, key: str) -> str:
        """``"auto"``, ``"0"`` or ``"1"``: the plan key ``key`` in effect for this plan."""
        return next((v for k, v, _ in self.overrides if k == key), "auto")

    @property
    def stage3(self) -> tuple:
        """Stage 3's launches in words, one line a launch."""
        return tuple(launch.describe() for launch in self.launches)

    @property
    def graph(self) -> bool:
        """Whether the product is replayed as one CUDA graph."""
        return self.path == "graph"

    def __str__(self) -> str:
        lines = [f"{self.direction}, k={self.k}, precision {self.precision} on {self.device}: "
                 + {"graph": "one CUDA graph replay of the product below",
                    "fused": "fused product (stages 1 and 5 inside the FFTs)",
                    "stages": "five stages one by one",
                    "cpu": "five stages on the CPU (NumPy/SciPy)"}[self.path]]
        if self.ffts:
            lines.append(f"  stages 1+2: {self.ffts[0]}")
            lines.append(f"  stages 4+5: {self.ffts[1]}")
        if self.fused_adjoint:
            lines.append("  stages 3-5: one kernel (fused adjoint)")
        for i, launch in enumerate(self.stage3):
            lines.append(f"  stage 3{'' if len(self.stage3) == 1 else f' [{i}]'}: {launch}")
        if self.fold:
            lines.append(f"  split-K: the inverse FFT adds stage 3's {self.fold} partial sums")
        if self.overrides:
            lines.append("  overrides: " + ", ".join(f"{k}={v} ({src})"
                                                     for k, v, src in self.overrides))
        return "\n".join(lines)


def candidate_overrides(op, k: int = 1, adjoint: bool = False):
    """The plans worth timing for a product of ``op`` with ``k`` right-hand sides (the tune
    command stores the fastest): the built-in rules first (``{}``), then one choice set aside
    at a time. An alternative the device cannot run raises when it is timed; the caller skips
    it."""
    yield {}
    yield {"row_fft": "0"}
    yield {"row_fft": "1"}
    if k == 1:
        yield {"graphs": "1"}
        for family in ("gemv", "staged", "async"):
            yield {"stage3": family}
        if adjoint:
            yield {"fused_adjoint": "0"}
    else:
        yield {"mma": "0"}
        yield {"mma": "1"}
    if adjoint:
        yield {"xreg": "0"}
        yield {"xreg": "1"}
