"""fftmatvec: fast mixed-precision block-triangular Toeplitz matrix-vector products.

The parameter-to-observable map ``F`` of a linear time-invariant system observed over ``Nt``
time steps is block lower-triangular Toeplitz. :class:`BlockToeplitz` applies it and its
adjoint through FFTs in five stages, each in its own precision, on NumPy (CPU) or CuPy
(NVIDIA and AMD GPUs).
"""

import logging as _logging

from ._errors import (FFTMatvecDistributedError, FFTMatvecError, FFTMatvecFileError,
                      FFTMatvecMemoryError, FFTMatvecTypeError, FFTMatvecValueError)
from .operator import BlockToeplitz, NormalOperator, fft_length
from .precision import STAGES, PrecisionConfig
from .distributed import DistributedBlockToeplitz, ProcessGrid

__version__ = "0.1.0"

# The package logs through the "fftmatvec" logger; an application's logging configuration (or
# the command's -v) decides where its records go.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

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
    "__version__",
]
