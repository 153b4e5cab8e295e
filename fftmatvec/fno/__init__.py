"""FNO spectral convolution: :func:`spectral_conv` (NumPy, CuPy) and :class:`SpectralConv`.

The semantics are those of neuraloperator's ``SpectralConv`` with dense weights. PyTorch is an
optional dependency, imported the first time :class:`SpectralConv` is used.
"""

from ._dft import DFT_FLOP_RATIO, choose_method
from ._graphs import clear_graphs
from ._modes import kept_modes
from ._reference import spectral_conv
from ._torch import SpectralConv, spectral_conv_torch

__all__ = ["DFT_FLOP_RATIO", "SpectralConv", "choose_method", "clear_graphs", "kept_modes",
           "spectral_conv", "spectral_conv_torch"]
