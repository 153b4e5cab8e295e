"""PyTorch adapter (optional: ``pip install torch``): ``F.as_torch()``.

:class:`TorchOperator` applies an operator to torch tensors inside a differentiable model:
its forward is ``F x`` and its backward ``F^T g`` (the product of the adjoint with the
output's gradient), through a ``torch.autograd.Function`` whose backward is itself
differentiable (a second derivative goes through ``F`` again); ``torch.compile`` leaves it
out of its graphs and calls it as it is (the products run outside PyTorch). The tensors are
read and written without a copy through DLPack (fftmatvec/_interop.py): CPU tensors through
NumPy, GPU tensors through CuPy on PyTorch's current stream. Gradients with respect to the
kernel are not computed: the operator is a fixed linear map.
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # optional dependency
    raise ImportError("F.as_torch() needs PyTorch: pip install torch") from exc

from ._errors import FFTMatvecTypeError
from .operator import _OperatorBase

__all__ = ["TorchOperator", "apply"]


def _product(op, x):
    """``op`` applied to the tensor ``x`` (one vector, flat or ``(n, Nt)``, or a batch
    ``(k, n, Nt)``), a tensor of the operator's dtype on ``x``'s device."""
    return op.matmat(x) if x.ndim == 3 else op.matvec(x)


class _Apply(torch.autograd.Function):
    """``y = op x``; backward ``op^T g`` (again through this function, so twice
    differentiable), in ``x``'s dtype."""

    @staticmethod
    def forward(ctx, x, op):
        ctx.op, ctx.x_dtype = op, x.dtype
        return _product(op, x.detach())

    @staticmethod
    def backward(ctx, g):
        if not ctx.needs_input_grad[0]:
            return None, None
        gx = _Apply.apply(g, ctx.op.T)
        return gx.to(ctx.x_dtype), None


@torch.compiler.disable  # torch.compile runs it as it is, between its compiled graphs
def apply(op: _OperatorBase, x: torch.Tensor) -> torch.Tensor:
    """``op @ x`` for a torch tensor ``x``, recorded by autograd (gradient ``op.T @ g``).

    Parameters
    ----------
    op : BlockToeplitz, its adjoint ``F.T``, or a NormalOperator
    x : (n_in, Nt), (n_in*Nt,) or (k, n_in, Nt) torch.Tensor
        Real, on the operator's device (the CPU for a NumPy operator, its GPU for a CuPy one).

    Returns
    -------
    torch.Tensor
        ``(n_out, Nt)``, ``(n_out*Nt,)`` or ``(k, n_out, Nt)``, in the operator's dtype, on
        ``x``'s device.

    Raises
    ------
    FFTMatvecTypeError
        ``x`` is not a torch tensor; the operator's own checks otherwise (shape, dtype, device).
    """
    if not isinstance(x, torch.Tensor):
        raise FFTMatvecTypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    return _Apply.apply(x, op)


class TorchOperator(torch.nn.Module):
    """An fftmatvec operator as a differentiable ``torch.nn.Module`` (no parameters).

    Parameters
    ----------
    op : BlockToeplitz, its adjoint ``F.T``, or a NormalOperator
        Shared, not copied.

    Examples
    --------
    >>> layer = F.as_torch()                      # doctest: +SKIP
    >>> loss = (layer(m) - d).square().sum()      # doctest: +SKIP
    >>> loss.backward()                           # m.grad == 2 F^T (F m - d)
    """

    def __init__(self, op: _OperatorBase) -> None:
        if not isinstance(op, _OperatorBase):
            raise FFTMatvecTypeError(
                f"op must be a BlockToeplitz (or its adjoint or normal operator), got "
                f"{type(op).__name__}")
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``op @ x`` (see :func:`apply`)."""
        return apply(self.op, x)

    @property
    def T(self) -> TorchOperator:
        """The adjoint as a module."""
        return TorchOperator(self.op.T)

    def extra_repr(self) -> str:
        return repr(self.op)
