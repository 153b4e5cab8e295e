"""Warnings that point at the caller's line.

A warning raised deep inside the package (the guard, the tuning lookup, a kernel that could
not load) is attributed to the first frame of the stack that lies outside the package and
outside the libraries that call into it on the user's behalf (a SciPy or CuPy solver applying
``aslinearoperator()``, PyLops, pylops-mpi, PyTorch running a layer): the user's own line,
however many layers the call went through, so that the warning says which call caused it.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings

__all__ = ["warn"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Packages whose frames call this one on the user's behalf (a solver applying an adapter, a
# layer's forward called by torch.nn.Module): a warning passes over them to the user's call.
_WRAPPERS = ("scipy", "cupy", "cupyx", "pylops", "pylops_mpi", "torch")


def _skipped_dirs() -> tuple:
    """The package's folder and those of the wrapping packages imported so far (a package
    that is not imported has no frame on the stack)."""
    dirs = [_PACKAGE_DIR]
    for name in _WRAPPERS:
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None)
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return tuple(dirs)


def warn(message: str, category: type = UserWarning) -> None:
    """``warnings.warn(message, category)`` with the ``stacklevel`` of the first caller
    outside the package and the libraries that wrap it."""
    skipped = _skipped_dirs()
    frame = inspect.currentframe()
    level = 1  # 1: this function's frame
    try:
        frame = frame.f_back if frame is not None else None
        while frame is not None:
            level += 1
            path = os.path.abspath(frame.f_code.co_filename)
            if not path.startswith(skipped):
                break
            frame = frame.f_back
    finally:
        del frame  # no reference cycle through the frames
    warnings.warn(message, category, stacklevel=level)
