"""Atomic file writes for the demo's outputs."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

from .. import _writes
from .._errors import FFTMatvecFileError

__all__ = ["atomic_open"]


@contextlib.contextmanager
def atomic_open(path, mode: str = "w") -> Iterator:
    """Open a temporary file next to ``path``; on success rename it onto ``path``.

    The temporary file (named as every temporary of the package: ``.<name>.tmp-<pid>-...``,
    removed by the command line's SIGTERM/SIGINT handler, and by a later write to ``path`` if
    its writer died) is created with ``O_EXCL`` and mode ``0o666`` minus the umask (as a plain
    ``open`` would), in the destination's folder so that ``os.replace`` is atomic. On any
    error it is removed and ``path`` is left untouched; an ``OSError`` (a full disk, a
    read-only folder) becomes an :class:`~fftmatvec._errors.FFTMatvecFileError` naming
    ``path``.

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
    _writes.remove_stale(folder, [name])
    tmp = _writes.tmp_name(path)
    _writes.register(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, FFTMatvecFileError):
            raise _writes.write_error(path, exc) from None
        raise
    finally:
        _writes.unregister(tmp)
