"""The executor of a plan: what one product runs, built once from its
:class:`~fftmatvec.gpu.plan.Plan`, and a call that only runs it.

:func:`~fftmatvec.gpu.planning.make_plan` decides; an :class:`Executor` builds what the plan
names (the FFT plans or row FFT kernels, stage 3's packed launches, the fused adjoint kernel,
the CUDA graph) over the engine that stores ``Khat``, and binds its call to the plan's path
(finufft's ``Plan`` binds its entry points once; mpi4py-fft's ``Transform`` runs its list of
steps). Nothing is chosen at a call: the plan the executor holds (:attr:`Executor.plan`) is
the one that runs, and ``BlockToeplitz.plan`` returns it.

The same class runs the products of the engines without the package's kernels (NumPy, or
CuPy without a code object): their plan's path is ``"cpu"`` or ``"stages"``, and a call runs
the five stages on the engine's leaves. Nothing here imports CuPy at import time.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from .._errors import FFTMatvecTypeError
from ..precision import PrecisionConfig
from .plan import Plan

__all__ = ["Executor", "GRAPHS_PER_EXECUTOR"]

GRAPHS_PER_EXECUTOR = 16  # captured graphs an executor of a weighted product keeps (one a weight)


class Executor:
    """What one product runs, built once from ``plan``.

    Parameters
    ----------
    plan : Plan
        The product's plan (:func:`~fftmatvec.gpu.planning.make_plan`; ``plan.problem`` its
        sizes and dtypes).
    engine : object
        The engine that stores ``Khat`` and runs the stages' leaves: the GPU's
        :class:`~fftmatvec.gpu.engine.KernelEngine` (``name == "kernels"``), or the
        matmul engine of NumPy and of CuPy without the package's kernels.
    replan : callable, optional
        ``replan(why) -> Plan``: the plan of the same product on the device described without
        cuFFT callbacks (:func:`~fftmatvec.gpu.planning.make_plan_without_callbacks`), asked
        once where cuFFT cannot make a callback plan that ``plan`` names; without it, that
        failure is raised. The executor then runs, and :attr:`plan` is, the new plan.

    Notes
    -----
    By the plan's path: ``"fused"`` builds the fused product (:attr:`product`: both transforms
    with stages 1 and 5 inside, stage 3's launches packed, or the fused adjoint kernel);
    ``"graph"`` also captures it, or the five stages over buffers of their own, as a CUDA graph
    (one a weight array for a weighted product, :data:`GRAPHS_PER_EXECUTOR` at most);
    ``"stages"`` packs stage 3's launches (:attr:`stage3`) and a call runs the five stages;
    ``"cpu"`` runs the five stages on the matmul engine.
    """

    def __init__(self, plan: Plan, engine, replan: Callable[[str], Plan] | None = None):
        if not isinstance(plan, Plan):
            raise FFTMatvecTypeError(f"plan must be a Plan, got {type(plan).__name__}")
        if plan.problem is None:
            raise FFTMatvecTypeError("plan must carry its Problem (plan.problem), got None")
        self.engine = engine
        self.product = None  # the fused product (_FusedProduct), where the plan names one
        self.stage3 = None  # stage 3's packed launches (_Stage3) of a product run stage by stage
        self._graphs: OrderedDict | None = None  # weight id -> GraphRunner
        kernels = getattr(engine, "name", None) == "kernels"
        if kernels and plan.fused_ffts:
            from .callbacks import CallbackError

            try:
                self._build(plan)
            except CallbackError as exc:
                if replan is None or plan.mode("fft_callbacks") == "1":
                    raise
                plan = replan(str(exc))
                if not plan.fused_ffts:
                    from .. import _warnings

                    _warnings.warn(f"cuFFT callbacks unavailable for this product, running the "
                                   f"stages one by one: {exc}", RuntimeWarning)
                self._build(plan)
        elif kernels:
            self._build(plan)
        else:
            self._bind(plan)

    def _build(self, plan: Plan) -> None:
        """Build what ``plan`` names on the kernel engine, and bind the call to its path."""
        eng, prec = self.engine, PrecisionConfig(plan.precision)
        problem, adjoint = plan.problem, plan.direction == "adjoint"
        if plan.fused_ffts:
            from .fused import _FusedProduct, _GemvIrfft

            fused = _GemvIrfft(eng, prec, problem.out_dtype) if plan.fused_adjoint else None
            stage3 = None if fused is not None else eng.stage3.pack(
                adjoint, plan.k, eng.ffts.xhat_dtype(prec), eng.ffts.yhat_dtype(prec),
                plan.launches)
            ffts = eng.ffts.fused_plans(prec, adjoint, plan.k, problem.in_dtype, problem.out_dtype,
                                   plan.ffts, plan.fold)
            self.product = _FusedProduct(eng, prec, adjoint, plan.k, problem.out_dtype, ffts,
                                         fused, stage3)
        else:
            self.stage3 = eng.stage3.pack(adjoint, plan.k, prec.complex_dtype("fft"),
                                          prec.complex_dtype("ifft"), plan.launches)
            # the cuFFT plans of stages 2 and 4, made now (the engine's FFT stages hold them
            # by size)
            n_in, n_out = (problem.nd, problem.nm) if adjoint else (problem.nm, problem.nd)
            eng.ffts.fft_plan("r2c", plan.k * n_in, prec.real_dtype("fft"))
            eng.ffts.fft_plan("c2r", plan.k * n_out, prec.complex_dtype("ifft"))
        self._bind(plan)

    def _bind(self, plan: Plan) -> None:
        self.plan = plan
        self.precision = PrecisionConfig(plan.precision)
        self.adjoint = plan.direction == "adjoint"
        self._apply_kw = {} if self.stage3 is None else {"plan": self.stage3}
        if plan.path == "graph":
            self._graphs = OrderedDict()
            self._run = self._replay
        elif self.product is not None:
            self._run = self._fused
        else:
            self._run = self.stages

    def __call__(self, x, weight=None, in_exp=0, out_exp=0):
        """The product of ``x`` ``(k, n_in, Nt)`` (the plan's ``k`` and input dtype), times the
        diagonal ``weight`` ``(n_out, Nt)`` where the plan is weighted: a new array
        ``(k, n_out, Nt)`` in the plan's output dtype. ``in_exp`` / ``out_exp``: powers of
        two of the input's scale and the output's, applied in the casts of stages 1 and 5 (the
        matmul engine only; a GPU operator scales around the product)."""
        return self._run(x, weight, in_exp, out_exp)

    def _fused(self, x, weight=None, in_exp=0, out_exp=0):
        return self.product(x)

    def _replay(self, x, weight=None, in_exp=0, out_exp=0):
        from .graphs import GraphRunner

        key = None if weight is None else id(weight)
        runner = self._graphs.get(key)  # a runner keeps its weight alive: ids stay unique
        if runner is None:
            runner = self._graphs[key] = GraphRunner(self, weight)
            while len(self._graphs) > GRAPHS_PER_EXECUTOR:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        return runner(x)

    def stages(self, x, weight=None, in_exp=0, out_exp=0, bufs=None):
        """The five stages one by one on the engine's leaves, in the plan's precision; stage 3
        runs the plan's launches (:attr:`stage3`) on the kernel engine. ``bufs``: the arrays
        each stage writes (``padded``, ``xhat``, ``xs`` the float16 adjoint's scaled input or
        None, ``yhat``, ``ypad``, ``y``, ``workspace``: a graph's), else new ones."""
        eng, prec = self.engine, self.precision
        problem = self.plan.problem
        get = (lambda name: None) if bufs is None else (lambda name: getattr(bufs, name))
        padded = eng.pad(x, prec, out=get("padded"), **_exponent("scale_exp", in_exp))
        xhat = eng.fft(padded.astype(prec.real_dtype("fft"), copy=False), out=get("xhat"))
        scaled = bufs is not None and bufs.xs is not None
        if scaled:
            xhat = eng.stage3.scale_xhat(xhat, out=bufs.xs)
        yhat = eng.apply(xhat, self.adjoint, prec.complex_dtype("ifft"), out=get("yhat"),
                         workspace=get("workspace"), xhat_scaled=scaled, **self._apply_kw)
        y = eng.ifft(yhat.astype(prec.complex_dtype("ifft"), copy=False), out=get("ypad"))
        return eng.unpad(y, prec, problem.nt, problem.out_dtype, weight=weight, out=get("y"),
                         **_exponent("exponent", out_exp))

    def release(self) -> None:
        """Give the intermediate arrays the fused product holds back to the memory pool."""
        if self.product is not None:
            self.product.release()


def _exponent(name: str, exp) -> dict:
    """``{name: exp}`` where ``exp`` scales (a nonzero power of two, or an array of them), else
    ``{}``: the GPU engine's pad and unpad take no exponent."""
    return {name: exp} if (getattr(exp, "ndim", 0) or exp) else {}
