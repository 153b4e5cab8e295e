"""FNO spectral convolution: :func:`spectral_conv` (NumPy, CuPy) and :class:`SpectralConv`.

The semantics are those of neuraloperator's ``SpectralConv`` with dense weights. PyTorch is an
optional dependency, imported when :class:`SpectralConv` is first looked up (``from
fftmatvec.fno import SpectralConv``) or :func:`spectral_conv_torch` first called.
"""

from ._dft import DFT_FLOP_RATIO, choose_method
from ._graphs import clear_graphs
from ._modes import kept_modes
from ._reference import spectral_conv
from ._torch import spectral_conv_torch
from ._tuning import reload_tables, tune

__all__ = ["DFT_FLOP_RATIO", "SpectralConv", "choose_method", "clear_graphs", "kept_modes",
           "reload_tables", "spectral_conv", "spectral_conv_torch", "tune"]


def __getattr__(name):
    if name == "SpectralConv":  # a torch.nn.Module: its module imports torch
        from ._torch import _torch

        _torch()  # a clear error where PyTorch is not installed
        from ._layer import SpectralConv

        return SpectralConv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"SpectralConv"})
