"""Reference FNO spectral convolution on NumPy or CuPy arrays, with its adjoint pieces.

Forward, for ``x`` of shape ``(B, Cin, *spatial)`` (``Nt`` spatial points in all):

* ``X = gather(rfftn(x) / Nt)``, the kept modes (``fft_norm="forward"``);
* ``Y[b, o, k] = sum_i X[b, i, k] W[i, o, k]``;
* ``y = Re(sum_k c_k Y_k exp(+2 pi i k.n / N))`` plus the bias, with ``c_k`` 1 on the DC and
  Nyquist columns of the last axis and 2 elsewhere: the inverse over the other axes first, the
  imaginary part of the DC and Nyquist columns dropped, then the real inverse on the last axis,
  which is neuraloperator's result.

Backward, for the gradient ``g`` of ``y``: ``gY = Nt c . gather(rfftn(g) / Nt)``,
``gX = gY conj(W)^T`` per mode, ``gW = sum_b conj(X) gY`` and ``gx = synth(gX / c) / Nt``: the
same transforms and product with the conjugate weights and the transposed gather/scatter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

import functools

from .. import backend
from .._typing import Array
from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from . import _dft
from ._modes import check_bias, check_shapes, hermitian_weights, kept_modes, mode_indices

METHODS = ("auto", "dft", "fft")


def _xp(a):
    return backend.get_array_module(a, name="x")


def analysis(x, modes, output=False):
    """The kept modes ``gather(rfftn(x) / Nt)``, shape ``(B, C, *modes)``."""
    xp = _xp(x)
    d = len(modes)
    axes = tuple(range(-d, 0))
    spec = xp.fft.rfftn(x, axes=axes, norm="forward")
    for a, ix in zip(range(2, 2 + d), mode_indices(x.shape[2:], modes, output)):
        spec = xp.take(spec, xp.asarray(ix), axis=a)
    return spec


def synthesis(spec, spatial, output=True):
    """``Re(sum_k c_k S_k exp(+i k.n))`` on the grid ``spatial``, unnormalised."""
    xp = _xp(spec)
    d = len(spatial)
    modes = spec.shape[2:]
    full = xp.zeros(spec.shape[:2] + tuple(spatial[:-1]) + (modes[-1],), dtype=spec.dtype)
    idx = mode_indices(spatial, modes, output)
    sl = np.ix_(*([np.arange(s) for s in spec.shape[:2]] + idx))
    full[tuple(xp.asarray(i) for i in sl)] = spec
    if d > 1:
        full = xp.fft.ifftn(full, axes=tuple(range(2, 1 + d)), norm="forward")
    c = xp.asarray(hermitian_weights(spatial[-1], modes[-1]), dtype=full.real.dtype)
    phase = xp.exp(2j * np.pi * xp.outer(xp.arange(modes[-1]), xp.arange(spatial[-1]))
                   / spatial[-1]).astype(full.dtype)
    return xp.real(xp.einsum("...k,kn->...n", full * c, phase))


def resolve_method(method, batch, cin, cout, spatial, modes) -> str:
    """``"dft"`` or ``"fft"`` for ``method``; ``"auto"`` asks :func:`_dft.choose_method`."""
    if method not in METHODS:
        raise FFTMatvecValueError(f"method: expected one of {METHODS}, got {method!r}")
    if method == "auto":
        return _dft.choose_method(batch, cin, cout, tuple(spatial), tuple(modes))
    return method


def _xp_ops(xp, dtype):
    cplx = np.result_type(dtype, np.complex64)
    return _dft.Ops(view=lambda a, axes: a.transpose(axes),
                    matrix=lambda m: xp.asarray(m, dtype=dtype),
                    empty=lambda shape: xp.empty(shape, dtype=dtype),
                    sub=lambda out, a, b: xp.subtract(a, b, out=out),
                    add=lambda out, a, b: xp.add(a, b, out=out),
                    neg=lambda out, a: xp.negative(a, out=out),
                    as_complex=lambda a: a.view(cplx)[..., 0],
                    as_real=lambda a: xp.ascontiguousarray(a).view(dtype).reshape(
                        a.shape + (2,)),
                    conj_t=lambda a: a.conj().swapaxes(-1, -2),
                    matmul=lambda a, b, out: xp.matmul(a, b, out=out))


@functools.lru_cache(maxsize=64)
def _xp_chain(module_name, device, dtype, spatial, modes, rows=frozenset(), plane=frozenset(),
              layout="interleaved", variant="auto", product=False, fused=False, channels=None):
    xp = backend.cupy if module_name == "cupy" else np
    return _dft.make_chain(_xp_ops(xp, np.dtype(dtype)), spatial, modes, device, rows, plane,
                           layout, variant, product, fused, channels)


def _dft_conv(xp, x, weight, modes, bias):
    real = x.dtype  # float32 or float64 (spectral_conv: _real_dtype)
    if xp is np:
        name, device = "numpy", -1
    else:
        name, device = "cupy", int(backend.cupy.cuda.runtime.getDevice())
    from ._plan import fno_chain

    spatial = tuple(x.shape[2:])
    choice = fno_chain(x.shape[0], x.shape[1], weight.shape[1], spatial, modes, real, device,
                       kernels=name == "cupy" and real == np.float32)
    chain = _xp_chain(name, device, real.str, spatial, tuple(modes), *choice,
                      channels=x.shape[1] if choice[5] else None)
    ops = _xp_ops(xp, real)
    w = xp.asarray(weight)
    C, O = w.shape[:2]
    cplx = np.complex64 if real == np.float32 else np.complex128
    wmm = xp.ascontiguousarray(w.reshape(C, O, -1).transpose(2, 0, 1), dtype=cplx)
    b = None if bias is None else xp.asarray(bias, dtype=real).reshape(-1)
    if chain.fused is not None and chain.fused.takes(x, wmm, b):  # one kernel
        return chain.fused.run(x, wmm, b)
    y, _ = _dft.forward(ops, chain, x, wmm, b)
    return y


def spectral_conv(x: Array, weight: Array, n_modes: int | Sequence[int], bias: Array | None = None,
                  method: Literal["auto", "dft", "fft"] = "auto") -> Array:
    """FNO spectral convolution of ``x`` with per-mode complex channel weights.

    Parameters
    ----------
    x : numpy.ndarray or cupy.ndarray
        Real input, shape ``(B, Cin, *spatial)`` with 1 to 3 spatial axes of any size;
        float32 or float64 (float16 is computed in float32). ``B`` may be 0.
    weight : array
        Complex, shape ``(Cin, Cout, m_1, ..., m_{d-1}, n_modes[-1] // 2 + 1)``; index ``j``
        of a non-last axis holds frequency ``j - m // 2`` (neuraloperator's order).
    n_modes : int or sequence of int
        Modes per axis as neuraloperator counts them (both signs on all but the last axis).
    bias : array, optional
        Real, ``Cout`` values (any shape of that size), added to every point.
    method : {"auto", "dft", "fft"}
        ``"dft"``: the truncated transforms as dense DFT products (real GEMMs, no full-size
        spectrum); ``"fft"``: full FFTs, then the kept modes (the reference path); ``"auto"``:
        ``"dft"`` while its flops are at most ``DFT_FLOP_RATIO`` times the FFTs'.

    Returns
    -------
    array
        Real, shape ``(B, Cout, *spatial)``, in ``x``'s precision.

    Raises
    ------
    FFTMatvecTypeError
        ``x`` not real floating, ``weight`` not floating, ``n_modes`` not integers.
    FFTMatvecValueError
        Shapes that do not match ``n_modes``, more modes than an axis holds, an unknown
        ``method``.
    """
    xp = _xp(x)
    modes = kept_modes(n_modes)
    check_shapes(x.shape, weight.shape, modes)
    if bias is not None:
        bias = xp.asarray(bias)
        check_bias(bias.shape, bias.dtype, weight.shape[1])
    real = _real_dtype(x, weight)
    method = resolve_method(method, x.shape[0], x.shape[1], weight.shape[1], x.shape[2:], modes)
    if x.shape[0] == 0:  # an empty batch (the FFT libraries refuse one)
        return xp.zeros((0, weight.shape[1]) + tuple(x.shape[2:]), dtype=x.dtype)
    xc = x.astype(real, copy=False)
    if method == "dft":
        return _dft_conv(xp, xc, weight, modes, bias).astype(x.dtype, copy=False)
    X = analysis(xc, modes)
    Y = xp.einsum("bi...,io...->bo...", X, weight.astype(X.dtype, copy=False))
    y = synthesis(Y, x.shape[2:])
    if bias is not None:
        y = y + xp.asarray(bias, dtype=y.dtype).reshape((1, -1) + (1,) * len(modes))
    return y.astype(x.dtype, copy=False)


def _real_dtype(x, weight) -> np.dtype:
    """The precision ``x`` is computed in: its own, float32 for float16; raises unless ``x`` is
    real floating and ``weight`` complex (or real) floating."""
    if x.dtype.kind != "f":
        raise FFTMatvecTypeError(
            f"x: expected a real floating array (float16, float32 or float64), got {x.dtype}"
        )
    if weight.dtype.kind not in "fc":
        raise FFTMatvecTypeError(
            f"weight: expected a complex (or real) floating array, got {weight.dtype}")
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
