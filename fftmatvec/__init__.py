"""fftmatvec: fast mixed-precision block-triangular Toeplitz matrix-vector products.

The parameter-to-observable map ``F`` of a linear time-invariant system observed over ``Nt``
time steps is block lower-triangular Toeplitz. :class:`BlockToeplitz` applies it and its
adjoint through FFTs in five stages, each in its own precision, on NumPy (CPU) or CuPy
(NVIDIA and AMD GPUs).
"""

import importlib as _importlib
import logging as _logging

from ._errors import (FFTMatvecDistributedError, FFTMatvecError, FFTMatvecFileError,
                      FFTMatvecMemoryError, FFTMatvecTypeError, FFTMatvecValueError)

__version__ = "0.1.0"

# The public names that need NumPy and the rest, imported at their first use (PEP 562), so
# that importing the package is light: the command line installs its Ctrl-C handling before
# the heavy imports. Name -> the module that defines it.
_LAZY = {
    "BlockToeplitz": "operator",
    "NormalOperator": "operator",
    "fft_length": "operator",
    "PrecisionConfig": "precision",
    "STAGES": "precision",
    "DistributedBlockToeplitz": "distributed",
    "ProcessGrid": "distributed",
}


def __getattr__(name: str):
    """A public name of :data:`_LAZY`, or a submodule (``fftmatvec.io``), imported on first
    use."""
    if name in _LAZY:
        value = getattr(_importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:
            return _importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))

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
    "inverse",
    "__version__",
]
