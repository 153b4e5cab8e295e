"""Safe writes: temporaries that carry their writer, space checked and reserved first, every
failure one :class:`~fftmatvec._errors.FFTMatvecFileError` naming the path.

Every file the package writes goes through a temporary next to its destination, named
``.<name>.tmp-<pid>-<random>.<host>`` (``old`` instead of ``tmp`` for a file set aside while a
matrix directory is replaced). The name says which process wrote it, so that

* a later write to the same destination removes the temporaries of writers that are dead (same
  host, ``os.kill(pid, 0)`` fails): what SIGKILL, a crash or a node failure left behind;
* the command line's SIGTERM/SIGINT handler (:func:`remove_live`) removes this process's own.

Before an HDF5 file is written, the bytes it needs (with a margin) are compared with the free
space of its filesystem (``shutil.disk_usage``) and then reserved with ``fallocate`` where the
filesystem supports it, so that HDF5 itself never meets a full disk: h5py 3.16 turns that into
an error at close and then a segmentation fault at the next garbage collection. HDF5 truncates
the file to its real size when it closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import secrets
import shutil
import socket
from pathlib import Path
from typing import Iterable, Iterator

import h5py

from ._errors import FFTMatvecFileError
from ._memory import format_bytes

__all__ = ["tmp_name", "remove_live", "remove_stale", "check_space", "h5_create", "atomic_file",
           "write_error", "check_not_inside", "critical", "defer"]

_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname().split(".")[0]) or "host"
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<tag>tmp|old)-(?P<pid>\d+)-[0-9a-f]{12}\.(?P<host>\w+)$")
_MARGIN = 64 << 10  # bytes added to every space estimate (HDF5 metadata), plus 1 %

# This process's temporaries: path -> is a directory. The signal handler removes them.
_LIVE: dict[str, bool] = {}
# Depth of critical sections (renames of a matrix directory's files): a signal waits for them.
_state = {"critical": 0, "pending": None}


# ------------------------------------------------------------------------------------------
# Temporaries
# ------------------------------------------------------------------------------------------
def tmp_name(path: str, tag: str = "tmp") -> str:
    """A temporary name next to ``path`` carrying this process's pid and host."""
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.{tag}-{os.getpid()}-{secrets.token_hex(6)}.{_HOST}")


def register(path: str, is_dir: bool = False) -> None:
    _LIVE[path] = is_dir


def unregister(path: str) -> None:
    _LIVE.pop(path, None)


def _remove(path: str, is_dir: bool) -> bool:
    try:
        if is_dir and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return False


def remove_live() -> list[str]:
    """Remove every temporary this process is writing (the signal handler calls this)."""
    removed = []
    for path, is_dir in list(_LIVE.items()):
        if _remove(path, is_dir):
            removed.append(path)
        _LIVE.pop(path, None)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's process, or unknown: keep its files
    return True


def remove_stale(folder: str, names: Iterable[str] | None = None) -> list[str]:
    """Remove temporaries in ``folder`` left by dead writers of this host.

    Parameters
    ----------
    folder : str
    names : iterable of str, optional
        Only temporaries of these destination names (default: any name).
    """
    wanted = None if names is None else set(names)
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP_RE.match(entry.name)
        if m is None or m["host"] != _HOST or (wanted is not None and m["name"] not in wanted):
            continue
        if _pid_alive(int(m["pid"])):
            continue
        if _remove(entry.path, entry.is_dir(follow_symlinks=False)):
            removed.append(entry.path)
    return removed


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """A section a SIGTERM/SIGINT must not cut (renames that swap a matrix's files): the
    command line's handler notes the signal and acts when the section ends."""
    _state["critical"] += 1
    try:
        yield
    finally:
        _state["critical"] -= 1
    if _state["critical"] == 0 and _state["pending"] is not None:
        handler, signum = _state["pending"]
        _state["pending"] = None
        handler(signum, None)


def defer(handler, signum: int) -> bool:
    """For a signal handler: ``True`` (and the signal kept for later) inside :func:`critical`."""
    if _state["critical"] > 0:
        _state["pending"] = (handler, signum)
        return True
    return False


# ------------------------------------------------------------------------------------------
# Errors and space
# ------------------------------------------------------------------------------------------
_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large for the file system",
    errno.ENOENT: "its folder does not exist",
    errno.EIO: "input/output error",
}


def write_error(path: str, exc: BaseException) -> FFTMatvecFileError:
    """``exc`` (an ``OSError`` or h5py's ``RuntimeError``) as an error naming ``path``."""
    code = getattr(exc, "errno", None)
    if code is None:  # h5py puts the errno in its text: "... errno = 28, error message = ..."
        m = re.search(r"errno = (\d+)", str(exc))
        code = int(m.group(1)) if m else None
    reason = _REASONS.get(code) if code is not None else None
    if reason is None:
        reason = os.strerror(code) if code else (str(exc).split("(")[0].strip() or type(exc).__name__)
    return FFTMatvecFileError(path, f"cannot write {path!r}: {reason}")


def space_needed(nbytes: int) -> int:
    return int(nbytes) + int(nbytes) // 100 + _MARGIN


def check_space(path: str, nbytes: int) -> None:
    """Refuse to write ``nbytes`` (plus the margin) where the filesystem has less free, or
    where it is read-only or the folder not writable."""
    parent = os.path.dirname(os.path.abspath(path))
    with contextlib.suppress(OSError, AttributeError):
        if os.statvfs(parent).f_flag & os.ST_RDONLY:
            raise write_error(path, OSError(errno.EROFS, "read-only"))
    if not os.access(parent, os.W_OK):
        raise write_error(path, OSError(errno.EACCES, "permission denied"))
    try:
        free = shutil.disk_usage(parent).free
    except OSError:
        return  # no statvfs here: the write itself reports
    need = space_needed(nbytes)
    if need > free:
        raise FFTMatvecFileError(
            path,
            f"cannot write {path!r}: it needs {format_bytes(need)} and the file system has "
            f"{format_bytes(free)} free",
        )


_FALLOCATE = []


def _libc_fallocate():
    """Linux ``fallocate(2)`` (no emulation, unlike ``posix_fallocate``), or ``None``."""
    if not _FALLOCATE:
        fn = None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fn = libc.fallocate64 if hasattr(libc, "fallocate64") else libc.fallocate
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _FALLOCATE.append(fn)
    return _FALLOCATE[0]


def reserve(path: str, nbytes: int) -> None:
    """Allocate ``nbytes`` of disk to the file ``path`` where the filesystem can; ``OSError``
    (ENOSPC, EDQUOT) if it has not that much."""
    fn = _libc_fallocate()
    if fn is None or nbytes <= 0:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        if fn(fd, 0, 0, int(nbytes)) != 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise OSError(code, os.strerror(code), path)
            # EOPNOTSUPP and the like: no reservation, the free-space check stands alone
    finally:
        os.close(fd)


@contextlib.contextmanager
def h5_create(tmp: str, nbytes: int) -> Iterator[h5py.File]:
    """A new HDF5 file at ``tmp``, with ``nbytes`` (plus the margin) reserved first.

    The caller registers ``tmp`` (:func:`register`) or the temporary folder holding it."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.close(fd)
    with h5py.File(tmp, "w"):
        pass
    reserve(tmp, space_needed(nbytes))
    with h5py.File(tmp, "r+") as f:
        yield f


@contextlib.contextmanager
def atomic_file(path: str, nbytes: int) -> Iterator[str]:
    """Yield a temporary name next to ``path``; on success fsync it and rename it onto ``path``.

    Before: the temporaries of dead writers to ``path`` are removed and the free space is
    checked for ``nbytes``. On any failure the temporary is removed and ``path`` left as it
    was; an ``OSError`` or h5py ``RuntimeError`` becomes an ``FFTMatvecFileError`` naming
    ``path``.
    """
    folder = os.path.dirname(os.path.abspath(path))
    remove_stale(folder, [os.path.basename(os.path.abspath(path))])
    check_space(path, nbytes)
    tmp = tmp_name(path)
    register(tmp)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            if os.path.lexists(tmp):
                os.remove(tmp)
        if isinstance(exc, (OSError, RuntimeError)) and not isinstance(exc, FFTMatvecFileError):
            raise write_error(path, exc) from None
        raise
    finally:
        unregister(tmp)


# ------------------------------------------------------------------------------------------
# Outputs over inputs
# ------------------------------------------------------------------------------------------
def _same(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_not_inside(output, inputs: dict, what: str = "output") -> None:
    """Refuse an ``output`` that is, or lies inside, one of ``inputs`` (resolved paths:
    symbolic links followed; hard links of one file caught by ``samefile``).

    Parameters
    ----------
    output : str or os.PathLike
    inputs : dict
        Label (e.g. ``"MATRIX"``) -> path.
    what : str
        The output's label in the message.

    Raises
    ------
    FFTMatvecFileError
        ``output`` or one of ``inputs`` is empty (an empty path would resolve to the current
        folder), or ``output`` is or lies inside one of ``inputs``.
    """
    for label, path in ((what, output), *inputs.items()):
        if path is not None and not os.fspath(path):
            raise FFTMatvecFileError("", f"{label} must not be empty: expected a file or "
                                         f"folder path, got ''")
    out = Path(output).resolve()
    for label, path in inputs.items():
        if path is None:
            continue
        inp = Path(path).resolve()
        if _same(out, inp):
            raise FFTMatvecFileError(
                os.fspath(output), f"{what} {os.fspath(output)!r} is the same path as the {label} "
                                   f"{os.fspath(path)!r}: "
                                   f"writing it would destroy the input; choose another path")
        if inp in out.parents:
            raise FFTMatvecFileError(
                os.fspath(output), f"{what} {os.fspath(output)!r} lies inside the {label} "
                                   f"{os.fspath(path)!r}: writing it could damage the input; "
                                   f"choose a path outside it")
