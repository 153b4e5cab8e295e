"""Sizes checked before they are allocated: a size read from a file, or a ``Khat`` to store, is
compared with the memory available, so that an absurd one fails at once with the bytes it needs
instead of a raw ``MemoryError`` (or minutes of swapping) later.

The check is generous on purpose: it refuses only what cannot fit (more than the memory the
operating system reports available, swap included, or than the process's cgroup limit allows),
never a size that merely is large.
"""

from __future__ import annotations

import os

import numpy as np

from ._errors import FFTMatvecMemoryError

__all__ = ["available_memory", "format_bytes", "require_memory", "check_khat_fits"]


def format_bytes(n: int) -> str:
    """``n`` bytes in words: ``'5.6 GB (5600000000 bytes)'``."""
    n = int(n)
    for unit, scale in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6),
                        ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit} ({n} bytes)"
    return f"{n} bytes"


def _meminfo() -> int | None:
    """MemAvailable + SwapFree from ``/proc/meminfo`` (Linux), bytes."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return None
    try:
        kib = int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB").split()[0])
    except (KeyError, ValueError, IndexError):
        return None
    return kib * 1024


def _cgroup_room() -> int | None:
    """What the process's cgroup (v2) still allows: ``memory.max - memory.current``."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            base = os.path.join("/sys/fs/cgroup", line[3:].lstrip("/"))
            try:
                with open(os.path.join(base, "memory.max"), encoding="ascii") as fh:
                    limit = fh.read().strip()
                with open(os.path.join(base, "memory.current"), encoding="ascii") as fh:
                    current = int(fh.read().strip())
            except (OSError, ValueError):
                return None
            if limit == "max":
                return None
            try:
                return max(0, int(limit) - current)
            except ValueError:
                return None
    return None


def available_memory() -> int | None:
    """Bytes of host memory this process can still get, or ``None`` when unknown.

    ``/proc/meminfo``'s MemAvailable plus free swap where present (Linux), else the physical
    memory (``os.sysconf``); never more than the cgroup's remaining limit."""
    avail = _meminfo()
    if avail is None:
        try:
            avail = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    room = _cgroup_room()
    if room is not None:
        avail = room if avail is None else min(avail, room)
    return avail


def require_memory(nbytes: int, what: str, *, available: int | None = None) -> None:
    """Raise :class:`~fftmatvec._errors.FFTMatvecMemoryError` if ``nbytes`` cannot fit.

    Parameters
    ----------
    nbytes : int
        Bytes about to be allocated.
    what : str
        What they are for, e.g. ``"reading matrix 'K.h5' (Nd=.., Nm=.., Nt=..)"``.
    available : int, optional
        The bytes available (default: :func:`available_memory`, host memory).
    """
    if available is None:
        available = available_memory()
    if available is not None and int(nbytes) > int(available):
        raise FFTMatvecMemoryError(
            f"{what} needs {format_bytes(nbytes)}, more than the {format_bytes(available)} of "
            f"memory available"
        )


def _khat_itemsize(precision) -> int:
    """Bytes per stored ``Khat`` entry for stage 3's letter; the smallest (half) if unknown."""
    letters = getattr(precision, "letters", precision)
    letter = letters.strip().lower()[2:3] if isinstance(letters, str) else ""
    return {"d": 16, "s": 8}.get(letter, 4)


def check_khat_fits(kernel, precision="ddddd", fft_len=None) -> None:
    """Refuse a kernel whose ``Khat`` cannot be stored, before the kernel is read.

    Called first in :class:`~fftmatvec.BlockToeplitz` construction, so that a memory-mapped
    kernel of many GB is not read (finiteness check, fingerprint, FFT) only to fail with a raw
    ``MemoryError``. Uses only the kernel's shape; anything that is not a 3-D array is left
    to the constructor's own checks. NumPy kernels are compared with the host memory available,
    CuPy kernels with their device's total memory.
    """
    shape = getattr(kernel, "shape", None)
    if not isinstance(shape, tuple) or len(shape) != 3:
        return
    try:
        nd, nm, nt = (int(n) for n in shape)
    except (TypeError, ValueError):
        return
    if min(nd, nm, nt) < 1:
        return
    if isinstance(fft_len, (int, np.integer)) and not isinstance(fft_len, bool) and fft_len >= 2 * nt - 1:
        nf = int(fft_len) // 2 + 1
    else:
        nf = nt  # the smallest possible: L >= 2*nt - 1
    nbytes = nd * nm * nf * _khat_itemsize(precision)
    available = None
    if not isinstance(kernel, np.ndarray):
        device = getattr(kernel, "device", None)
        try:
            available = int(device.mem_info[1])  # CuPy: (free, total)
        except Exception:  # noqa: BLE001 - not a CuPy array, or no device query: host memory
            available = None
    require_memory(nbytes, f"the kernel's Khat (Nd={nd}, Nm={nm}, Nf={nf})", available=available)
