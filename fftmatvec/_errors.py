"""The package's exception hierarchy.

Every error raised on bad user input derives from :class:`FFTMatvecError`, so callers can
catch everything the package raises on purpose with one ``except`` clause, while a wrong dtype
or array type stays a :class:`TypeError` and a bad value or shape a :class:`ValueError`.
"""

from __future__ import annotations

__all__ = ["FFTMatvecError", "FFTMatvecTypeError", "FFTMatvecValueError", "FFTMatvecMemoryError",
           "FFTMatvecFileError", "FFTMatvecDistributedError"]


class FFTMatvecError(Exception):
    """Base class of every error the package raises on bad input."""


class FFTMatvecTypeError(FFTMatvecError, TypeError):
    """A wrong dtype or array type (e.g. a NumPy vector given to a CuPy operator)."""


class FFTMatvecValueError(FFTMatvecError, ValueError):
    """A bad value or shape."""


class FFTMatvecMemoryError(FFTMatvecError, MemoryError):
    """An array the input asks for (a size read from a file, a ``Khat`` to store) cannot fit in
    the memory available; raised before anything is allocated or read, with the bytes needed."""


class FFTMatvecFileError(FFTMatvecValueError):
    """A matrix or vector file (or directory) is missing, malformed or inconsistent, or cannot
    be written (no space, read-only, an output over an input).

    Attributes
    ----------
    path : str
        The file or directory at fault.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class FFTMatvecDistributedError(FFTMatvecError):
    """A failure on one or more ranks of a distributed operation, raised on every rank.

    Attributes
    ----------
    errors : dict
        Rank (in the operator's communicator) -> ``"ExceptionType: message"`` of each rank
        that failed.
    """

    def __init__(self, message: str, errors: dict | None = None) -> None:
        super().__init__(message)
        self.errors = dict(errors or {})

    @property
    def ranks(self) -> list:
        """The ranks that failed, in increasing order."""
        return sorted(self.errors)
