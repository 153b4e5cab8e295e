"""The PyTorch layer :class:`SpectralConv` (this module imports torch: ``fftmatvec.fno``
loads it on first access to ``SpectralConv``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch.nn.modules import module as _nn_module

from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from ._graphs import check_option
from ._modes import kept_modes
from ._torch import _check_method, _compute_dtype, _positive_int, spectral_conv_torch
from ._torch_dft import layer_forward, layer_params, remember_layer_forward

__all__ = ["SpectralConv"]


def _all_modules_hooks():
    """The hooks of every module that ``torch.nn.Module``'s call runs (its module-wide dicts,
    registered into in place), or None where this PyTorch keeps them, a module's own hooks or
    its compiled call elsewhere: then every call takes ``torch.nn.Module``'s own way
    (:meth:`SpectralConv.__call__`)."""
    every = tuple(getattr(_nn_module, name, None) for name in (
        "_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_hooks",
        "_global_forward_pre_hooks"))
    probe = torch.nn.Module()
    if (any(not isinstance(h, dict) for h in every)
            or not hasattr(torch._C, "_get_tracing_state")
            or not all(hasattr(probe, name) for name in (
                "_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                "_backward_hooks", "_compiled_call_impl"))):
        return None
    return every


_ALL_MODULES_HOOKS = _all_modules_hooks()


def _plain_call(layer) -> bool:
    """Whether ``torch.nn.Module``'s call of ``layer`` would go straight to ``forward``: no
    hook on it or on every module, not compiled by ``Module.compile``, not under
    ``torch.jit`` tracing (what its call checks before calling ``forward`` alone)."""
    every = _ALL_MODULES_HOOKS
    return (every is not None and not (every[0] or every[1] or every[2] or every[3])
            and not (layer._forward_pre_hooks or layer._forward_hooks
                     or layer._backward_pre_hooks or layer._backward_hooks)
            and layer._compiled_call_impl is None and not torch._C._get_tracing_state())


class SpectralConv(torch.nn.Module):
    """FNO spectral convolution, neuraloperator's dense ``SpectralConv`` semantics.

    Parameters
    ----------
    in_channels, out_channels : int
        Channels of the input ``(B, Cin, *spatial)`` and the output.
    n_modes : int or sequence of int
        Modes per spatial axis, both signs on all but the last axis, which keeps
        ``n_modes[-1] // 2 + 1`` non-negative frequencies.
    bias : bool, default True
        Learn a real per-channel bias.
    init_std : float or "auto", default "auto"
        Standard deviation of the initial weights; "auto" is ``sqrt(2 / (Cin + Cout))``.
    device, dtype : optional
        Of the parameters; ``dtype`` is the real type (the weight is its complex type).
    method : {"auto", "dft", "fft"}, default "auto"
        The truncated transforms as dense DFT products (GEMMs, no full-size spectrum), or
        full FFTs; "auto" takes "dft" while its flops are at most ``DFT_FLOP_RATIO`` times
        the FFTs'.
    compute_dtype : torch.dtype, optional
        ``torch.bfloat16`` or ``torch.float16``: 16-bit storage with float32 accumulation
        in the GEMMs (the DFT path); default: the input's precision.
    graphs : {"auto", True, False}, default "auto"
        Replay the DFT path's forward and backward GEMM chains as CUDA graphs captured once
        per call signature: "auto" on CUDA tensors up to a size (not under ``torch.jit``
        tracing or inside the caller's own capture), True at any size and
        raising where graphs cannot be used (CPU tensors, the FFT path), False never; a
        failed capture raises. Each graph holds a private memory pool (about the
        chain's working memory for its input size; see ``docs/fno.md``).

    **neuralop_options
        neuraloperator's own ``SpectralConv`` keywords, so that the layer is a ``conv_module``
        of its ``FNO`` and ``FNOBlocks``: ``complex_data``, ``separable``,
        ``resolution_scaling_factor``, ``max_n_modes``, ``fno_block_precision``,
        ``factorization``, ``fft_norm`` at their dense, real-data, same-grid, full-precision
        values (``None``, ``False``, ``"full"``, ``"forward"``, ``max_n_modes`` equal to
        ``n_modes``), and ``rank``, ``implementation``, ``fixed_rank_modes``,
        ``decomposition_kwargs``, which only a factorised weight reads.

    Raises
    ------
    FFTMatvecValueError
        ``graphs`` not one of "auto", True, False; a neuraloperator option this layer does not
        implement (a factorised, separable or complex-data weight, another output grid,
        mixed-precision blocks: ``compute_dtype`` is this layer's).
    """

    def __init__(self, in_channels: int, out_channels: int, n_modes: int | Sequence[int],
                 bias: bool = True, init_std: float | Literal["auto"] = "auto",
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                 method: Literal["auto", "dft", "fft"] = "auto",
                 compute_dtype: torch.dtype | None = None,
                 graphs: bool | Literal["auto"] = "auto", **neuralop_options: Any) -> None:
        super().__init__()
        self.in_channels = _positive_int("in_channels", in_channels)
        self.out_channels = _positive_int("out_channels", out_channels)
        self.modes = kept_modes(n_modes)
        self._n_modes = tuple(int(m) for m in np.ravel(n_modes))
        _check_neuralop_options(self._n_modes, neuralop_options)
        self.method, self.compute_dtype = _check_method(method), compute_dtype
        if compute_dtype is not None:
            _compute_dtype(torch, torch.empty(0), compute_dtype)
        self.graphs = check_option(graphs)
        if init_std == "auto":
            std = (2 / (self.in_channels + self.out_channels)) ** 0.5
        elif isinstance(init_std, (int, float)) and init_std > 0:
            std = float(init_std)
        else:
            raise FFTMatvecValueError(
                f"init_std: expected a positive number or 'auto', got {init_std!r}")
        real = dtype or torch.get_default_dtype()
        if real not in (torch.float32, torch.float64):
            raise FFTMatvecTypeError(
                f"dtype: the parameters are float32 or float64 (the weight complex64 or "
                f"complex128), got {real}; compute_dtype=torch.bfloat16 or torch.float16 "
                f"stores the GEMMs' operands in 16 bits")
        cplx = torch.complex64 if real == torch.float32 else torch.complex128
        # stored modes-major, (M, Cin, Cout) in memory, so that the DFT path reads every
        # mode's (Cin, Cout) matrix in place; the shape is (Cin, Cout, *modes) as usual
        m = int(np.prod(self.modes))
        w = torch.randn((m, in_channels, out_channels), dtype=cplx, device=device) * std
        w = w.permute(1, 2, 0).reshape((in_channels, out_channels) + self.modes)
        self.weight = torch.nn.Parameter(w)
        d = len(self.modes)
        self.bias = (torch.nn.Parameter(std * torch.randn(
            (out_channels,) + (1,) * d, dtype=real, device=device)) if bias else None)
        self._fast = {}  # forwards without gradients kept by input shape (forward)

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        # a forward without gradients like one before, from the layer's memo ahead of
        # torch.nn.Module's call, where that call would only call forward (_plain_call), so that
        # the host's steps before the first launch are fewer; outside torch.compile's tracing,
        # which then sees the module's call as it is
        if (not torch.compiler.is_compiling() and self._fast and len(args) == 1
                and (not kwargs or (len(kwargs) == 1 and "output_shape" in kwargs
                                    and kwargs["output_shape"] is None))
                and _plain_call(self)):
            y = layer_forward(torch, self, args[0])
            if y is not None:
                return y
        return torch.nn.Module.__call__(self, *args, **kwargs)

    def __getstate__(self):  # pickled and deep-copied without the memo (launches, graphs)
        state = super().__getstate__()
        state["_fast"] = {}
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if "_fast" not in self.__dict__:  # pickled before the memo
            self._fast = {}

    def extra_repr(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v, default in (
            ("method", self.method, "auto"), ("compute_dtype", self.compute_dtype, None),
            ("graphs", self.graphs, "auto")) if v != default)
        return (f"{self.in_channels}, {self.out_channels}, n_modes={self.n_modes}, "
                f"bias={self.bias is not None}{extra}")

    @property
    def n_modes(self) -> tuple[int, ...]:
        """The modes per axis as given (both signs on all but the last axis)."""
        return self._n_modes

    @n_modes.setter
    def n_modes(self, n_modes):  # neuraloperator's FNO sets its blocks' modes
        new = tuple(int(m) for m in np.ravel(n_modes))
        if new != self._n_modes:
            raise FFTMatvecValueError(
                f"n_modes: the weight holds the modes {self._n_modes}; changing them to {new} "
                f"(neuraloperator's incremental training) is not supported")

    def forward(self, x: torch.Tensor,
                output_shape: Sequence[int] | None = None) -> torch.Tensor:
        """Apply the layer to ``x`` of shape ``(B, Cin, *spatial)``; ``output_shape``
        (neuraloperator's argument) None or ``spatial``: the output is on the input's grid.

        An input with fewer frequencies on an axis than the layer's modes (fewer points than
        ``n_modes`` on a non-last axis, ``N // 2 + 1`` below ``n_modes[-1] // 2 + 1`` on the
        last) is convolved, as neuraloperator's layer does it, with the part of the weight that
        fits, ``min`` of the two a axis: centred on the axes with both signs (its first
        ``start // 2`` entries left out, ``start`` the count left out), the first ones on the
        last."""
        compiling = torch.compiler.is_compiling()  # (dynamo folds the memo's steps away)
        if not compiling and output_shape is None and self._fast:
            # a forward without gradients like one before: its kept launch or replay
            y = layer_forward(torch, self, x)
            if y is not None:
                return y
        _same_grid(x, output_shape)
        spatial = tuple(x.shape[2:])
        if 0 in spatial:
            raise FFTMatvecValueError(
                f"x: expected a grid with at least one point on every spatial axis, got "
                f"spatial shape {spatial} (input shape {tuple(x.shape)})")
        weight, bias = layer_params(self)
        own, n_modes, modes = weight, self._n_modes, self.modes
        if len(spatial) == len(modes) and (spatial[-1] // 2 + 1 < modes[-1] or any(
                n < m for n, m in zip(spatial[:-1], modes[:-1]))):
            slices, n_modes = _fitting(spatial, modes)
            weight = weight[(slice(None), slice(None)) + slices]
        y = spectral_conv_torch(x, weight, n_modes, bias, method=self.method,
                                compute_dtype=self.compute_dtype, graphs=self.graphs)
        if not compiling and weight is own:
            remember_layer_forward(torch, self, x, n_modes)
        return y

    def transform(self, x: torch.Tensor,
                  output_shape: Sequence[int] | None = None) -> torch.Tensor:
        """neuraloperator's resampling of a skip connection onto the output grid: ``x`` itself,
        the output being on the input's grid."""
        _same_grid(x, output_shape)
        return x

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a neuraloperator checkpoint holds a dense weight as "<prefix>weight.tensor"
        theirs = prefix + "weight.tensor"
        if prefix + "weight" not in state_dict and theirs in state_dict:
            state_dict[prefix + "weight"] = state_dict.pop(theirs)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_neuralop(cls, layer: Any, **kwargs: Any) -> SpectralConv:
        """Copy a dense-weight ``neuralop.layers.spectral_convolution.SpectralConv``.

        A layer whose weight holds more modes than it uses (``max_n_modes`` above its current
        ``n_modes``) is copied as it uses them: the part of the weight its forward slices out,
        on inputs with at least that many modes on each axis. ``kwargs`` (``method``,
        ``compute_dtype``, ``graphs``) go to the constructor.

        Raises
        ------
        FFTMatvecTypeError
            ``layer`` is not a neuraloperator ``SpectralConv``.
        FFTMatvecValueError
            A layer this one does not compute as it does, as the constructor refuses its
            keywords: a separable or complex-data weight, ``fft_norm`` other than
            ``"forward"``, an output on another grid (``resolution_scaling_factor`` other than
            None or 1 on every axis), mixed-precision blocks (``fno_block_precision`` other
            than ``"full"``).
        """
        _check_neuralop_layer(layer)
        w = layer.weight
        w = w if torch.is_tensor(w) else w.to_tensor()
        if getattr(layer, "separable", False) or getattr(layer, "complex_data", False):
            raise FFTMatvecValueError(
                "layer: expected a dense, non-separable, real-data SpectralConv, got "
                f"separable={layer.separable}, complex_data={layer.complex_data}"
            )
        if getattr(layer, "fft_norm", "forward") != "forward":
            raise FFTMatvecValueError(
                f"layer: expected fft_norm='forward', got {layer.fft_norm!r}"
            )
        w = w[(slice(None), slice(None)) + _neuralop_slices(layer, w.shape[2:])]
        n_modes = list(w.shape[2:])
        n_modes[-1] = max(2 * (n_modes[-1] - 1), 1)  # keeps n // 2 + 1 on the last axis
        new = cls(layer.in_channels, layer.out_channels, tuple(n_modes),
                  bias=layer.bias is not None, device=w.device, dtype=w.real.dtype,
                  **kwargs)
        with torch.no_grad():
            new.weight.copy_(w.detach())
            if layer.bias is not None:
                new.bias.copy_(layer.bias.detach())
        return new

    def to_neuralop(self) -> Any:
        """This layer as a neuraloperator ``SpectralConv`` (dense weight, the same modes, weight
        and bias, on the same device): the converse of :meth:`from_neuralop`. Its weight is
        complex64 (neuraloperator's only dtype): a float64 layer's is rounded."""
        try:
            from neuralop.layers.spectral_convolution import SpectralConv as Theirs
        except ImportError as exc:
            raise ImportError("to_neuralop needs the neuraloperator package "
                              "(pip install neuraloperator)") from exc
        w = self.weight.detach()
        layer = Theirs(self.in_channels, self.out_channels, list(self._n_modes),
                       bias=self.bias is not None).to(w.device)
        theirs = layer.weight if torch.is_tensor(layer.weight) else layer.weight.tensor
        if tuple(theirs.shape) != tuple(w.shape):  # n_modes they keep otherwise on the last
            raise FFTMatvecValueError(
                f"to_neuralop: neuraloperator keeps a weight of {tuple(theirs.shape)} for "
                f"n_modes {self._n_modes}, this layer {tuple(w.shape)}")
        with torch.no_grad():
            theirs.copy_(w.to(theirs.dtype))
            if self.bias is not None:
                layer.bias.copy_(self.bias.detach().to(layer.bias.dtype))
        return layer


def _check_neuralop_layer(layer):
    """Raise unless ``layer`` is a neuraloperator ``SpectralConv`` computing what this layer
    computes: on the input's grid and in full precision (the other options are checked where
    the weight is read, in :meth:`SpectralConv.from_neuralop`)."""
    try:
        from neuralop.layers.spectral_convolution import SpectralConv as Theirs
    except ImportError:
        Theirs = None
    if Theirs is None or not isinstance(layer, Theirs):
        raise FFTMatvecTypeError(
            "layer must be a neuraloperator SpectralConv "
            "(neuralop.layers.spectral_convolution.SpectralConv), got "
            f"{type(layer).__module__}.{type(layer).__qualname__}")
    scale = getattr(layer, "resolution_scaling_factor", None)
    if scale is not None and any(float(f) != 1.0 for f in np.ravel(scale)):
        raise FFTMatvecValueError(
            f"layer: resolution_scaling_factor={scale!r} puts the output on another grid; this "
            "layer's output is on the input's grid (resolution_scaling_factor=None)")
    precision = getattr(layer, "fno_block_precision", "full")
    if precision != "full":
        raise FFTMatvecValueError(
            f"layer: fno_block_precision={precision!r} runs the spectral product in half "
            "precision; this layer computes it in the weight's precision "
            "(fno_block_precision='full'; compute_dtype=torch.bfloat16 or torch.float16 gives "
            "16-bit operands with float32 accumulation)")


def _neuralop_slices(layer, extents):
    """The part of a neuraloperator ``SpectralConv``'s weight (mode ``extents``) its forward
    uses for its current ``n_modes`` (with the last axis halved)."""
    used = [int(m) for m in getattr(layer, "n_modes", extents)]
    if len(used) != len(extents):
        raise FFTMatvecValueError(f"layer: n_modes {used} for a weight of modes {tuple(extents)}")
    starts = [int(e) - u for e, u in zip(extents, used)]
    if min(starts) < 0:
        raise FFTMatvecValueError(
            f"layer: uses n_modes {used}, more than its weight's modes {tuple(extents)}")
    return _centred(starts)


def _centred(starts):
    """The slices of a weight that leave out ``starts`` modes an axis, as neuraloperator's
    forward takes them: centred on the axes with both signs, the first ones on the last."""
    both = tuple(slice(st // 2, -st // 2) if st else slice(None) for st in starts[:-1])
    return both + (slice(None, -starts[-1]) if starts[-1] else slice(None),)


def _fitting(spatial, modes):
    """``(slices, n_modes)`` of the part of a weight of mode extents ``modes`` that an input
    grid ``spatial`` holds (:meth:`SpectralConv.forward`)."""
    room = tuple(spatial[:-1]) + (spatial[-1] // 2 + 1,)
    used = tuple(min(r, m) for r, m in zip(room, modes))
    n_modes = used[:-1] + (2 * used[-1] - 1,)  # the last axis keeps n // 2 + 1 of them
    return _centred([m - u for m, u in zip(modes, used)]), n_modes


#: neuraloperator's SpectralConv keywords and the value each must have here; those of
#: _NEUROP_IGNORED may have any (they configure a factorised weight only).
_NEUROP_DEFAULTS = {"complex_data": False, "separable": False, "resolution_scaling_factor": None,
                    "fno_block_precision": "full", "factorization": None, "fft_norm": "forward"}
_NEUROP_IGNORED = ("rank", "implementation", "fixed_rank_modes", "decomposition_kwargs")


def _check_neuralop_options(n_modes, options):
    for key, value in options.items():
        if key == "max_n_modes":
            if value is not None and tuple(int(m) for m in np.ravel(value)) != n_modes:
                raise FFTMatvecValueError(
                    f"max_n_modes: the weight holds exactly n_modes = {n_modes}, got {value!r}")
        elif key in _NEUROP_DEFAULTS:
            want = _NEUROP_DEFAULTS[key]
            if value != want:
                raise FFTMatvecValueError(
                    f"{key}: this layer implements neuraloperator's dense, real-data, same-grid, "
                    f"full-precision SpectralConv ({key}={want!r}), got {value!r}")
        elif key not in _NEUROP_IGNORED:
            raise TypeError(f"SpectralConv got an unexpected keyword argument {key!r}")


def _same_grid(x, output_shape):
    if output_shape is not None and tuple(output_shape) != tuple(x.shape[2:]):
        raise FFTMatvecValueError(
            f"output_shape: the output is on the input's grid {tuple(x.shape[2:])}, got "
            f"{tuple(output_shape)}")


# pickled (torch.save of a whole model) and shown under the name users import it by
SpectralConv.__module__ = "fftmatvec.fno"
