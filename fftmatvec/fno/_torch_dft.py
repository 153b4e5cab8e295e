"""The DFT-product path of the PyTorch layer: an autograd Function over the GEMM chain.

Every GEMM of the forward and the backward runs inside :func:`gemm_precision`: float32 products
in IEEE float32 (no TF32, whatever the process-wide setting), 16-bit products with float32
accumulation and no reduced-precision split-K reduction. The settings are process-wide in
PyTorch, so they are set around the layer's GEMMs and restored after them.
"""

from __future__ import annotations

import contextlib
import functools

from . import _dft

_SIXTEEN = ("bfloat16", "float16")


def _torch():
    import torch

    return torch


@contextlib.contextmanager
def gemm_precision(dtype):
    """IEEE float32 matmuls, and float32 reductions for 16-bit ones, restored on exit."""
    torch = _torch()
    mm = torch.backends.cuda.matmul
    old = mm.fp32_precision
    flag = {torch.bfloat16: "allow_bf16_reduced_precision_reduction",
            torch.float16: "allow_fp16_reduced_precision_reduction"}.get(dtype)
    old_flag = getattr(mm, flag) if flag else None
    mm.fp32_precision = "ieee"
    if flag:
        setattr(mm, flag, False)
    try:
        yield
    finally:
        mm.fp32_precision = old
        if flag:
            setattr(mm, flag, old_flag)


def _ops(dtype, device):
    torch = _torch()
    return _dft.Ops(perm=lambda a, axes: a.permute(axes).contiguous(),
                    cat=lambda arrays, axis: torch.cat(arrays, dim=axis),
                    matrix=lambda m: torch.as_tensor(m, dtype=dtype, device=device))


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
            cout = weight.shape[1]
            with gemm_precision(cdtype):
                wblk = _dft.weight_blocks(ops, weight.real.to(cdtype), weight.imag.to(cdtype))
                b = None if bias is None else bias.reshape(-1).to(cdtype)
                y, Xp = _dft.forward(ops, chain, x.to(cdtype), wblk, b, cout)
            ctx.save_for_backward(Xp, wblk)
            ctx.chain, ctx.cdtype = chain, cdtype
            ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
            ctx.bias_shape = None if bias is None else (tuple(bias.shape), bias.dtype)
            return y.to(x.dtype)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, g):
            Xp, wblk = ctx.saved_tensors
            chain, cdtype = ctx.chain, ctx.cdtype
            ops = _ops(cdtype, g.device)
            cin, cout = wblk.shape[1] // 2, wblk.shape[2] // 2
            gx = gw = gb = None
            with gemm_precision(cdtype):
                gY = chain.synthesis_adjoint(g.to(cdtype).contiguous())
                gYp = _dft.to_modes_major(ops, gY)
                if ctx.needs_input_grad[0]:
                    gX = _dft.from_modes_major(ops, gYp @ wblk.mT, cin)
                    gx = chain.analysis_adjoint(gX).to(ctx.x_dtype)
                if ctx.needs_input_grad[1]:
                    gr, gi = _dft.block_grad(Xp.mT @ gYp, cin, cout)
                    real = ctx.w_dtype.to_real()
                    gw = torch.complex(gr.to(real), gi.to(real)).permute(1, 2, 0)
                    gw = gw.reshape((cin, cout) + chain.modes).to(ctx.w_dtype)
                if ctx.needs_input_grad[2]:
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
