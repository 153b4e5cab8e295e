"""PyTorch functional form: :func:`spectral_conv_torch` and its autograd function (torch imported
lazily); the layer on it is in :mod:`._layer`."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from .._typing import Array
from . import _tuning
from ._graphs import check_option
from ._modes import check_bias, check_shapes, hermitian_weights, kept_modes, mode_indices
from ._reference import METHODS, resolve_method
from ._torch_dft import (dft_spectral_conv, fast_forward, fast_key, fast_training, full_call,
                         grad_wanted)


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without torch
        raise FFTMatvecTypeError("SpectralConv: expected PyTorch installed, got none") from None
    return torch


def _index(torch, spatial, modes, device, output):
    return [torch.as_tensor(i, device=device) for i in mode_indices(spatial, modes, output)]


def _analysis(torch, x, modes, output=False):
    d = len(modes)
    spec = torch.fft.rfftn(x, dim=tuple(range(-d, 0)), norm="forward")
    for a, ix in zip(range(2, 2 + d), _index(torch, x.shape[2:], modes, x.device, output)):
        spec = torch.index_select(spec, a, ix)
    return spec


def _synthesis(torch, spec, spatial, output=True):
    """The modes ``spec`` on the grid ``spatial`` (their bins on the non-last axes, then the
    Hermitian real inverse on the last), out of place: each non-last axis is widened by a
    gather from the modes and one zero (no in-place scatter), so that autograd, forward-mode
    AD and ``vmap`` all go through it."""
    d = len(spatial)
    modes = spec.shape[2:]
    full = spec
    for a, (n, ix) in enumerate(zip(spatial[:-1], mode_indices(spatial, modes, output)), 2):
        m = full.shape[a]
        where = np.full(n, m)  # bin -> its mode, or the zero appended at m
        where[ix] = np.arange(m)
        zero = full.new_zeros(full.shape[:a] + (1,) + full.shape[a + 1:])
        full = torch.index_select(torch.cat([full, zero], dim=a), a,
                                  torch.as_tensor(where, device=spec.device))
    if d > 1:
        full = torch.fft.ifftn(full, dim=tuple(range(2, 1 + d)), norm="forward")
    c = torch.as_tensor(hermitian_weights(spatial[-1], modes[-1]), device=spec.device,
                        dtype=full.real.dtype)
    k = torch.arange(modes[-1], device=spec.device, dtype=full.real.dtype)
    n = torch.arange(spatial[-1], device=spec.device, dtype=full.real.dtype)
    phase = torch.exp(torch.complex(torch.zeros((), dtype=k.dtype, device=k.device),
                                    2 * math.pi * torch.outer(k, n) / spatial[-1]))
    return torch.einsum("...k,kn->...n", full * c, phase.to(full.dtype)).real


def reference_forward(torch, x, weight, modes, bias=None):
    """``spectral_conv(x, weight) + bias`` as a chain of torch operations (the FFT path's
    reference), in float32 for 16-bit inputs and in ``x``'s precision otherwise: what
    ``torch.func`` transforms (``grad``, ``vmap``, ``jvp``, ``jacrev``, ``functional_call``)
    differentiate, and the chain :func:`reference_grads` differentiates twice."""
    xr = x if x.dtype in (torch.float32, torch.float64) else x.float()
    X = _analysis(torch, xr, modes)
    y = _synthesis(torch, torch.einsum("bi...,io...->bo...", X, weight.to(X.dtype)),
                   tuple(x.shape[2:]))
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * len(modes)).to(y.dtype)
    return y


def reference_grads(torch, x, weight, modes, g, needs, bias_meta=None):
    """The gradients ``(dL/dx, dL/dW, dL/db)`` of ``y = spectral_conv(x, W) + b`` for the
    output gradient ``g``, as functions of ``x``, ``W`` and ``g`` that autograd differentiates
    again: what a backward under ``create_graph=True`` returns (second derivatives, as for a
    physics-informed loss on ``dy/dx``). Autograd's of the reference chain of torch operations,
    in float32 for 16-bit inputs and in ``x``'s precision otherwise; ``needs``: which of ``x``,
    ``W``, ``b`` want one; ``bias_meta``: the bias's ``(shape, dtype)``."""
    wanted = [t for t, n in zip((x, weight), needs[:2]) if n]
    gx = gw = gb = None
    if wanted:
        with torch.enable_grad():
            y = reference_forward(torch, x, weight, modes)
            grads = iter(torch.autograd.grad(y, wanted, g.to(y.dtype), create_graph=True))
        gx = next(grads) if needs[0] else None
        gw = next(grads) if needs[1] else None
    if len(needs) > 2 and needs[2]:
        shape, dtype = bias_meta
        gb = g.sum(dim=(0,) + tuple(range(2, g.dim()))).reshape(shape).to(dtype)
    return gx, gw, gb


def _function():
    torch = _torch()

    class _SpectralConvFn(torch.autograd.Function):
        """``y = synth(gather(F x) W)``; backward: the same with ``conj(W)^T``."""

        @staticmethod
        def forward(ctx, x, weight, modes):
            X = _analysis(torch, x, modes)
            Y = torch.einsum("bi...,io...->bo...", X, weight.to(X.dtype))
            ctx.save_for_backward(X, weight, x)
            ctx.spatial = tuple(x.shape[2:])
            ctx.modes = modes
            return _synthesis(torch, Y, ctx.spatial).to(x.dtype)

        @staticmethod
        def backward(ctx, g):
            X, weight, x = ctx.saved_tensors
            spatial, modes = ctx.spatial, ctx.modes
            if torch.is_grad_enabled():  # create_graph=True: gradients to differentiate again
                return reference_grads(torch, x, weight, modes, g, ctx.needs_input_grad[:2])
            nt = float(np.prod(spatial))
            c = torch.as_tensor(hermitian_weights(spatial[-1], modes[-1]), device=g.device,
                                dtype=g.dtype)
            gY = _analysis(torch, g, modes, output=True) * (nt * c)
            gx = gw = None
            if ctx.needs_input_grad[0]:
                gX = torch.einsum("bo...,io...->bi...", gY, weight.conj().to(gY.dtype))
                gx = _synthesis(torch, gX / c, spatial, output=False) / nt
            if ctx.needs_input_grad[1]:
                gw = torch.einsum("bi...,bo...->io...", X.conj(), gY).to(weight.dtype)
            return gx, gw, None

    return _SpectralConvFn


_FN = None


@functools.lru_cache(maxsize=256)
def _checked_modes(x_shape, w_shape, n_modes, bias_meta):
    return _check_call(x_shape, w_shape, n_modes, bias_meta)


def _check_call(x_shape, w_shape, n_modes, bias_meta):
    modes = kept_modes(n_modes)
    check_shapes(tuple(x_shape), tuple(w_shape), modes)
    if bias_meta is not None:
        check_bias(*bias_meta, w_shape[1])
    return modes


def _modes_of(x_shape, w_shape, n_modes, bias=None):
    """The weight's mode extents for ``n_modes``, the shapes (and the bias's) checked against
    them: once per distinct call (hashable ``n_modes``), as every call of a layer would repeat
    it."""
    bias_meta = None if bias is None else (tuple(bias.shape), bias.dtype)
    try:
        return _checked_modes(x_shape, w_shape, n_modes, bias_meta)
    except TypeError:  # unhashable n_modes (a list), or a bad one: checked, and raised, anew
        return _check_call(x_shape, w_shape, n_modes, bias_meta)


def _positive_int(name, value) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise FFTMatvecTypeError(f"{name}: expected a positive int, got {value!r}") from None
    if n < 1:
        raise FFTMatvecValueError(f"{name}: expected a positive int, got {n}")
    return n


def _check_method(method):
    if method not in METHODS:
        raise FFTMatvecValueError(f"method: expected one of {METHODS}, got {method!r}")
    return method


_REAL = ("float32", "float64")
_SIXTEEN = ("bfloat16", "float16")


def _compute_dtype(torch, x, compute_dtype):
    cd = x.dtype if compute_dtype is None else compute_dtype
    name = str(cd).rsplit(".", 1)[-1]
    if not isinstance(cd, torch.dtype) or name not in _REAL + _SIXTEEN:
        raise FFTMatvecTypeError(
            f"compute_dtype: expected None, torch.float32, torch.float64, torch.bfloat16 or "
            f"torch.float16 (x's dtype {x.dtype} when None), got {cd}"
        )
    return cd, name in _SIXTEEN


def spectral_conv_torch(x: Array, weight: Array, n_modes: int | Sequence[int],
                        bias: Array | None = None, method: Literal["auto", "dft", "fft"] = "auto",
                        compute_dtype: Any = None,
                        graphs: bool | Literal["auto"] = "auto") -> Array:
    """:func:`spectral_conv` on torch tensors, differentiable in ``x``, ``weight`` and ``bias``.

    Under ``torch.compile`` the call is one opaque step of the compiled model (a graph break,
    ``torch.compiler.disable``): dynamo does not trace the layer's host-side planning, and the
    call runs as it does eagerly, CUDA graphs included.

    ``method`` as for :func:`spectral_conv`; ``compute_dtype`` (default: ``x``'s) is the
    precision of the GEMMs: ``torch.bfloat16`` or ``torch.float16`` store ``x``, the weights,
    the DFT matrices and the intermediates in 16 bits and accumulate in float32 (the DFT path
    only); the output has ``x``'s dtype.

    ``graphs`` (the DFT path): ``"auto"`` replays the forward and backward GEMM chains as CUDA
    graphs captured once per call signature, on CUDA tensors, outside ``torch.compile`` tracing
    and outside the caller's own capture (which then captures the eager chain), for inputs and
    outputs of at most ``_graphs.AUTO_MAX_BYTES`` (``AUTO_MAX_BYTES_TRAINING`` where gradients
    are wanted); a capture that fails raises :class:`~fftmatvec.FFTMatvecError`. ``True``: at
    any size, and raises where graphs cannot be used (CPU tensors, the FFT path). ``False``:
    the eager chain. See ``docs/fno.md`` for the memory a graph holds.

    Raises
    ------
    FFTMatvecValueError
        ``graphs`` not one of ``"auto"``, ``True``, ``False``; ``graphs=True`` on CPU tensors or
        the FFT path.
    """
    torch = _torch()
    if torch.compiler.is_compiling():
        return _opaque(torch)(x, weight, n_modes, bias, method, compute_dtype, graphs)
    # a forward without gradients whose signature replayed a graph: that replay, at once; a
    # call with gradients wanted whose signature was planned: the Function with that plan
    key = fast_key(torch, x, weight, n_modes, bias, method, compute_dtype, graphs) if (
        torch.is_tensor(x) and torch.is_tensor(weight)) else None
    if key is not None:
        y = (fast_forward if key[-1] is None else fast_training)(torch, key, x, weight, bias)
        if y is not None:
            return y
    return full_call(key, _spectral_conv_torch, torch, x, weight, n_modes, bias, method,
                     compute_dtype, graphs)


_OPAQUE = None


def _opaque(torch):
    """:func:`_spectral_conv_torch` behind ``torch.compiler.disable``, made once."""
    global _OPAQUE
    if _OPAQUE is None:
        _OPAQUE = torch.compiler.disable(lambda *args: _spectral_conv_torch(torch, *args))
    return _OPAQUE


def _spectral_conv_torch(torch, x, weight, n_modes, bias, method, compute_dtype, graphs):
    graphs = check_option(graphs)
    if not (torch.is_tensor(x) and torch.is_tensor(weight)):
        raise FFTMatvecTypeError(
            f"x, weight: expected torch tensors, got {type(x).__name__}, {type(weight).__name__}"
        )
    modes = _modes_of(x.shape, weight.shape, n_modes, bias)
    if not x.is_floating_point():
        raise FFTMatvecTypeError(
            f"x: expected a real floating tensor (float32, float64, bfloat16 or float16), "
            f"got {x.dtype}"
        )
    if not weight.is_complex():
        raise FFTMatvecTypeError(f"weight: expected a complex tensor, got {weight.dtype}")
    cd, sixteen = _compute_dtype(torch, x, compute_dtype)
    tuned = _tuned(torch, x, weight, bias, modes, cd)
    # the layer's FNO tuning table entry, where the caller's own choices leave it room
    if tuned is not None and method in ("auto", tuned.method) and not (
            graphs is True and tuned.method == "fft"):
        method = tuned.method
        graphs = tuned.graphs if graphs == "auto" else graphs
        tuned = tuned.plan
    else:
        tuned = ()
    if method == "auto" and sixteen:
        method = "dft"
    method = resolve_method(method, x.shape[0], x.shape[1], weight.shape[1], x.shape[2:], modes)
    if x.shape[0] == 0:  # an empty batch (the FFT libraries refuse one): an empty output
        return _empty_batch(torch, x, weight, bias)
    if (torch._C._are_functorch_transforms_active()  # torch.func, or forward-mode AD:
            or torch.autograd.forward_ad._current_level >= 0):  # the chain of torch ops
        return reference_forward(torch, x, weight, modes, bias).to(x.dtype)
    if method == "dft":
        return dft_spectral_conv(x, weight, bias, modes, cd, graphs, tuned)
    if graphs is True:
        raise FFTMatvecValueError(
            "graphs=True: CUDA graphs replay the DFT path, got method='fft' "
            "(take method='dft', or graphs='auto' or False)"
        )
    if sixteen:
        raise FFTMatvecValueError(
            f"compute_dtype: the fft path computes in float32 or float64, got {cd} "
            "(take method='dft' for 16-bit storage)"
        )
    global _FN
    if _FN is None:
        _FN = _function()
    y = _FN.apply(x, weight, modes)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * len(modes))
    return y


def _tuned(torch, x, weight, bias, modes, cd):
    """The :class:`._tuning.Choice` of the FNO tuning tables for this call, or None."""
    grad = grad_wanted(torch, x, weight, bias)
    B, C = x.shape[:2]
    return _tuning.lookup(x.device, B, C, weight.shape[1], tuple(x.shape[2:]), modes,
                          _NAMES[x.dtype], _NAMES[cd], grad)


class _Names(dict):
    """``torch.float32`` -> ``"float32"``, computed once a dtype."""

    def __missing__(self, dtype):
        self[dtype] = name = str(dtype).rsplit(".", 1)[-1]
        return name


_NAMES = _Names()


def _empty_batch(torch, x, weight, bias):
    """The output of an empty batch, ``(0, Cout, *spatial)``, still a function of ``x``,
    ``weight`` and ``bias`` for autograd: their gradients, sums over no sample, are zero."""
    y = x.new_zeros((0, weight.shape[1]) + tuple(x.shape[2:]))
    ties = [t for t in (x, weight, bias) if t is not None and t.requires_grad]
    if ties:
        y = y + sum(t.sum().real.to(y.dtype) for t in ties) * 0
    return y
