"""Atomic file writes for the demo's outputs."""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Iterator

__all__ = ["atomic_open"]


@contextlib.contextmanager
def atomic_open(path, mode: str = "w") -> Iterator:
    """Open a temporary file next to ``path``; on success rename it onto ``path``.

    The temporary file is created with ``O_EXCL`` and mode ``0o666`` minus the umask (as a
    plain ``open`` would), in the destination's folder so that ``os.replace`` is atomic. On
    any error it is removed and ``path`` is left untouched.

    Parameters
    ----------
    path : str or os.PathLike
        Final destination.
    mode : {"w", "wb"}
        Text or binary.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".tmp-{name}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
