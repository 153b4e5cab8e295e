"""fftmatvec: fast mixed-precision block-triangular Toeplitz matrix-vector products.

The parameter-to-observable map ``F`` of a linear time-invariant system observed over ``Nt``
time steps is block lower-triangular Toeplitz. :class:`BlockToeplitz` applies it and its
adjoint through FFTs in five stages, each in its own precision, on NumPy (CPU) or CuPy
(NVIDIA and AMD GPUs).
"""

from ._errors import (FFTMatvecDistributedError, FFTMatvecError, FFTMatvecFileError,
                      FFTMatvecMemoryError, FFTMatvecTypeError, FFTMatvecValueError)
from .operator import BlockToeplitz, NormalOperator, fft_length
from .precision import STAGES, PrecisionConfig
from .distributed import DistributedBlockToeplitz, ProcessGrid
from . import inverse

__version__ = "0.1.0"

__all__ = [
    "BlockToeplitz",
    "NormalOperator",
    "ProcessGrid",
    "DistributedBlockToeplitz",
    "PrecisionConfig",
    "STAGES",
    "FFTMatvecError",
    "FFTMatvecTypeError",
    "FFTMatvecValueError",
    "FFTMatvecFileError",
    "FFTMatvecMemoryError",
    "FFTMatvecDistributedError",
    "fft_length",
    "inverse",
    "__version__",
]
