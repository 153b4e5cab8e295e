"""Array-module selection and device description.

This is the one place where optional GPU imports are detected. The rest of the package writes
its algorithms once against ``xp`` (NumPy or CuPy) and asks this module which one an array
belongs to.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np

from ._errors import FFTMatvecTypeError

__all__ = [
    "cupy",
    "has_cupy",
    "gpu_available",
    "get_array_module",
    "is_cupy_array",
    "device_description",
]


def _import_cupy():
    try:
        import cupy  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA/ROCm installation
        return None
    return cupy


cupy = _import_cupy()
has_cupy = cupy is not None


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    """True when CuPy imports and sees at least one device."""
    if cupy is None:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def is_cupy_array(a: Any) -> bool:
    return cupy is not None and isinstance(a, cupy.ndarray)


def get_array_module(a: Any, *, name: str = "array") -> ModuleType:
    """Return ``numpy`` or ``cupy`` for ``a``.

    Raises
    ------
    FFTMatvecTypeError
        If ``a`` is neither a NumPy nor a CuPy array.
    """
    if isinstance(a, np.ndarray):
        return np
    if is_cupy_array(a):
        return cupy
    raise FFTMatvecTypeError(
        f"{name} must be a numpy.ndarray or cupy.ndarray, got {type(a).__module__}.{type(a).__name__}"
    )


def is_hip() -> bool:
    """True when CuPy was built for ROCm (AMD GPUs)."""
    return cupy is not None and bool(getattr(cupy.cuda.runtime, "is_hip", False))


@functools.lru_cache(maxsize=None)
def device_arch(device_id: int | None = None) -> str:
    """Architecture name of a GPU: ``sm_90`` on NVIDIA, the ``gcnArchName`` (``gfx90a``) on AMD.

    On ROCm the compute capability reported through the CUDA-compatible API collides between
    architectures, so the ``gcnArchName`` property is used instead.
    """
    if not gpu_available():
        raise FFTMatvecTypeError("no GPU is available (CuPy is missing or sees no device)")
    dev = cupy.cuda.Device(device_id) if device_id is not None else cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    if is_hip():
        arch = props.get("gcnArchName", b"")
        if isinstance(arch, bytes):
            arch = arch.decode()
        return arch.split(":")[0]  # drop feature flags such as ':sramecc+:xnack-'
    return f"sm_{dev.compute_capability}"


def shared_memory_limits(props: dict | None = None) -> tuple[int, int]:
    """(bytes of shared memory per multiprocessor, bytes one block may use) from CuPy's device
    properties ``props`` (by default the current device's).

    CUDA reports ``sharedMemPerMultiprocessor`` and ``sharedMemPerBlockOptin`` (228 and 227 KB
    on sm_90). CuPy's ROCm build reports neither: there a compute unit's LDS is
    ``maxSharedMemoryPerMultiProcessor`` and a block may use ``sharedMemPerBlock`` (64 KB each
    on gfx90a and gfx942; a block cannot opt into more). Taking the CUDA defaults there would
    let the row FFT kernels take lengths whose blocks the device cannot launch (float64
    L > 4094). Properties with neither get sm_90's values (228 and 227 KB)."""
    if props is None:
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    hip = "gcnArchName" in props or "maxSharedMemoryPerMultiProcessor" in props
    per_sm = props.get("sharedMemPerMultiprocessor") or props.get(
        "maxSharedMemoryPerMultiProcessor")
    per_block = props.get("sharedMemPerBlockOptin") or (
        props.get("sharedMemPerBlock") if hip else None)
    return int(per_sm or 228 * 1024), int(per_block or 227 * 1024)


def device_description() -> dict:
    """A plain dictionary describing the GPU seen by CuPy, or ``{"gpu": None}``."""
    if not gpu_available():
        return {"gpu": None}
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props.get("name", b"")
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    return {
        "gpu": name,
        "vendor": "AMD" if is_hip() else "NVIDIA",
        "arch": device_arch(dev.id),
        "memory_gib": round(props.get("totalGlobalMem", 0) / 2**30, 1),
        "multiprocessors": props.get("multiProcessorCount"),
        "warp_size": props.get("warpSize"),
        "shared_memory_kib": "{} per multiprocessor, {} per block".format(
            *(n // 1024 for n in shared_memory_limits(props))),
    }
