"""The DFT-product path of the PyTorch layer: an autograd Function over the GEMM chain.

Every GEMM of the forward and the backward runs inside :func:`gemm_precision`: float32 products
in IEEE float32 (no TF32, whatever the process-wide setting), 16-bit products with float32
accumulation and no reduced-precision split-K reduction, and autocast off inside. The settings are process-wide in
PyTorch, so they are set around the layer's GEMMs and restored after them.
"""

from __future__ import annotations

import contextlib
import functools

from . import _dft

def _torch():
    import torch

    return torch


@contextlib.contextmanager
def gemm_precision(dtype, device_type="cuda"):
    """IEEE float32 matmuls, and float32 reductions for 16-bit ones, restored on exit; autocast
    off (the precision is the layer's ``compute_dtype``, not the autocast region's). Only what
    differs is set, and autocast is entered only where it is on: each step is several
    microseconds of host time, which small layers on a GPU wait for."""
    torch = _torch()
    mm = torch.backends.cuda.matmul
    old = mm.fp32_precision
    flag = {torch.bfloat16: "allow_bf16_reduced_precision_reduction",
            torch.float16: "allow_fp16_reduced_precision_reduction"}.get(dtype)
    old_flag = getattr(mm, flag) if flag else False
    if old != "ieee":
        mm.fp32_precision = "ieee"
    if old_flag:
        setattr(mm, flag, False)
    try:
        if torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type, enabled=False):
                yield
        else:
            yield
    finally:
        if old != "ieee":
            mm.fp32_precision = old
        if old_flag:
            setattr(mm, flag, old_flag)


def _ops(dtype, device):
    torch = _torch()
    return _dft.Ops(view=lambda a, axes: a.permute(axes),
                    matrix=lambda m: torch.as_tensor(m, dtype=dtype, device=device),
                    empty=lambda shape: torch.empty(shape, dtype=dtype, device=device),
                    sub=lambda out, a, b: torch.sub(a, b, out=out),
                    add=lambda out, a, b: torch.add(a, b, out=out),
                    neg=lambda out, a: torch.neg(a, out=out))


def weight_view(weight, cdtype):
    """The complex weight ``(Cin, Cout, *modes)`` as real ``(M, Cin, 2 Cout)`` in ``cdtype``:
    a view when the weight is stored modes-major and already in the right precision."""
    torch = _torch()
    C, O = weight.shape[:2]
    wmm = weight.reshape(C, O, -1).permute(2, 0, 1)
    if cdtype in (torch.float32, torch.float64):
        wv = torch.view_as_real(wmm.to(cdtype.to_complex()))
    else:
        wv = torch.view_as_real(wmm).to(cdtype)
    return wv.reshape(wmm.shape[0], C, 2 * O)


def modes_major_complex(gwv, shape, dtype):
    """``dL/dW`` from its real view ``(M, Cin, 2 Cout)``, laid out as the modes-major weight."""
    torch = _torch()
    M, C, O2 = gwv.shape
    g = torch.view_as_complex(gwv.to(dtype.to_real()).reshape(M, C, O2 // 2, 2).contiguous())
    return g.permute(1, 2, 0).reshape(shape)


@functools.lru_cache(maxsize=64)
def _chain(device, dtype_name, spatial, modes):
    torch = _torch()
    return _dft.Chain(_ops(getattr(torch, dtype_name), torch.device(device)), spatial, modes)


def chain_for(x, dtype, modes):
    """The cached DFT matrices for ``x``'s grid and device in ``dtype``."""
    name = str(dtype).rsplit(".", 1)[-1]
    return _chain(str(x.device), name, tuple(x.shape[2:]), tuple(modes))


def _function():
    torch = _torch()

    class _DftSpectralConvFn(torch.autograd.Function):
        """``y = S(X W) + b`` with ``X = A x``; backward ``A^T((S^T g) W^T)``, ``X^T S^T g``."""

        @staticmethod
        def forward(ctx, x, weight, bias, modes, cdtype):
            chain = chain_for(x, cdtype, modes)
            ops = _ops(cdtype, x.device)
            with gemm_precision(cdtype, x.device.type):
                wv = weight_view(weight, cdtype)
                b = None if bias is None else bias.reshape(-1).to(cdtype)
                y, Xs = _dft.forward(ops, chain, x.to(cdtype), wv, b)
            ctx.save_for_backward(Xs, wv)
            ctx.chain, ctx.cdtype = chain, cdtype
            ctx.x_dtype, ctx.w_dtype, ctx.w_shape = x.dtype, weight.dtype, tuple(weight.shape)
            ctx.bias_shape = None if bias is None else (tuple(bias.shape), bias.dtype)
            return y.to(x.dtype)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, g):
            Xs, wv = ctx.saved_tensors
            chain, cdtype = ctx.chain, ctx.cdtype
            ops = _ops(cdtype, g.device)
            need_x, need_w, need_b = ctx.needs_input_grad[:3]
            gx = gw = gb = None
            with gemm_precision(cdtype, g.device.type):
                gY = chain.synthesis_adjoint(g.to(cdtype).contiguous())
                if need_x or need_w:
                    gXs, gwv = _dft.mode_product_adjoint(ops, gY, Xs, wv, need_x, need_w)
                    if need_x:
                        gX = _dft.from_modes_major(ops, gXs)
                        gx = chain.analysis_adjoint(gX).to(ctx.x_dtype)
                    if need_w:
                        gw = modes_major_complex(gwv, ctx.w_shape, ctx.w_dtype)
                if need_b:
                    shape, dtype = ctx.bias_shape
                    if chain.bias_mode is not None:
                        gb = gY[:, :, 0, chain.bias_mode].sum(0)
                    else:
                        gb = g.sum(dim=(0,) + tuple(range(2, g.dim())))
                    gb = gb.to(dtype).reshape(shape)
            return gx, gw, gb, None, None

    return _DftSpectralConvFn


_FN = None


def dft_spectral_conv(x, weight, bias, modes, cdtype):
    """Apply the DFT-product autograd Function (shapes checked by the caller)."""
    global _FN
    if _FN is None:
        _FN = _function()
    return _FN.apply(x, weight, bias, tuple(modes), cdtype)
