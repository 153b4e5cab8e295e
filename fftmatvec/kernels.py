"""Loading the GPU kernels: prebuilt code objects first, run-time compilation otherwise.

The kernels are written once in CUDA C++ (``hip_kernels/``). The build compiles them ahead of
time into code objects installed in ``fftmatvec/_kernels/``: ``fftmatvec_kernels.sm_90.cubin``
for NVIDIA, ``fftmatvec_kernels.gfx90a.hsaco`` for AMD (after hipify). At run time the code
object matching the current device is loaded — CUDA ``sm_XY``; on ROCm the ``gcnArchName``,
never the compute capability, which collides between AMD architectures. With no matching code
object the installed source is compiled through CuPy (NVRTC on NVIDIA, hiprtc with the hipified
source on ROCm), on first use and never at import, one section of entry points at a time: the
section holding the kernel asked for (``section_of``), so that a first product compiles the few
families it runs and not all of them. CuPy caches each compiled section on disk.

A prebuilt code object is loaded only when the build's manifest (``_kernels/manifest.json``) lists
it and records the hash of the very sources this package holds (``sources_sha256``): one built
from other sources (a source checkout whose kernels changed after its code objects were built)
would run kernels whose arguments may no longer be those the Python side passes. Such an object
is passed over with a warning, and the sources are compiled instead.

Set ``FFTMATVEC_KERNELS=jit`` to skip the prebuilt code objects, ``=prebuilt`` to refuse JIT.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import threading
from pathlib import Path

import numpy as np

from . import _warnings, backend
from ._errors import FFTMatvecError

__all__ = ["available", "get_function", "has_function", "has_mma_kernels", "section_of",
           "PackedLaunch", "describe", "kernel_source", "MODULE_NAME"]

MODULE_NAME = "fftmatvec_kernels"
_PKG_DIR = Path(__file__).resolve().parent
_CODE_DIR = _PKG_DIR / "_kernels"
_lock = threading.Lock()
# (device id, section) -> (RawModule, how it was obtained); section None: the prebuilt code object
_modules: dict[tuple[int, str | None], tuple[object, str]] = {}
_functions: dict[tuple[int, str], object] = {}
_shared_mem: dict[tuple[int, str], int] = {}  # dynamic shared memory opted in, per function


class KernelLoadError(FFTMatvecError, RuntimeError):
    """The GPU kernels could not be loaded or compiled."""


def source_dir() -> Path:
    """Directory of the CUDA sources: installed copy, or the source checkout's ``hip_kernels``."""
    for cand in (_PKG_DIR / "hip_kernels", _PKG_DIR.parent / "hip_kernels"):
        if (cand / f"{MODULE_NAME}.cu").is_file():
            return cand
    raise KernelLoadError(
        f"the kernel sources ({MODULE_NAME}.cu) are neither installed in {_PKG_DIR / 'hip_kernels'} "
        f"nor next to the package; reinstall fftmatvec"
    )


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def kernel_source() -> str:
    """The kernel translation unit with its local ``#include "..."`` files inlined (once each)."""
    root = source_dir()
    seen: set[str] = set()

    def expand(name: str) -> str:
        if name in seen:
            return ""
        seen.add(name)
        text = (root / name).read_text()
        text = text.replace("#pragma once", "")
        return _INCLUDE.sub(lambda m: expand(m.group(1)), text)

    return expand(f"{MODULE_NAME}.cu")


def sources_sha256(root: Path | None = None) -> str:
    """The hash of the kernel sources that the build records in its manifest: SHA-256 of the
    lines ``"<name> <SHA-256 of the file>"`` of every ``*.cu`` and ``*.cuh`` file, by name
    (``CMakeLists.txt`` computes the same)."""
    root = source_dir() if root is None else root
    files = sorted((p for p in root.iterdir() if p.suffix in (".cu", ".cuh")), key=lambda p: p.name)
    lines = "".join(f"{p.name} {hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def _stale_reason(path: Path) -> str | None:
    """Why the code object ``path`` may not match the kernel sources of this package, or None
    when the manifest lists it with the hash of these sources."""
    manifest = build_manifest()
    if manifest is None:
        return f"{_CODE_DIR} has no readable manifest.json to say which sources it was built from"
    if path.name not in {o.get("file") for o in manifest.get("code_objects") or []}:
        return f"{_CODE_DIR / 'manifest.json'} does not list it"
    try:
        current = sources_sha256()
    except (KernelLoadError, OSError):
        return None  # no sources to compare with (nor to compile): the object is all there is
    built = manifest.get("sources_sha256")
    if built != current:
        return (f"it was built from other kernel sources than those in {source_dir()} "
                f"(manifest sources_sha256 {str(built)[:12]}, sources {current[:12]})")
    return None


_passed_over: set[Path] = set()  # stale code objects already warned about


def available() -> bool:
    """True when a GPU is present; the kernels then load or compile on first use."""
    return backend.gpu_available()


def _code_object_path(arch: str) -> Path | None:
    """The code object for ``arch``: an exact match; on CUDA else the newest cubin of the same
    major version and a lower minor one (``sm_80`` code runs on ``sm_86``), never across majors.
    AMD code objects only run on the architecture they were built for."""
    if backend.is_hip():
        p = _CODE_DIR / f"{MODULE_NAME}.{arch}.hsaco"
        return p if p.is_file() else None
    cc = int(arch.removeprefix("sm_"))
    for minor in range(cc % 10, -1, -1):
        p = _CODE_DIR / f"{MODULE_NAME}.sm_{cc // 10}{minor}.cubin"
        if p.is_file():
            return p
    return None


_SECTION_DEFINE = re.compile(r"^#define FFTMATVEC_SECTION_(\w+) (\d+)$", re.M)
_STAGE3_FAMILIES = {"sbgemv": "GEMV", "sbgemvs": "GEMV", "sbgemva": "ASYNC", "sbgemmp": "MMA",
                    "sbgemvx": "XREG"}


def section_of(name: str) -> str:
    """The section of the kernel source that defines the entry point ``name`` (its
    ``FFTMATVEC_SECTION_*`` in ``fftmatvec_kernels.cu``), read off the name: the row FFTs by
    FFT precision and complex type, the fused adjoints by storage, input and FFT precision,
    the stage-3 families by storage, and the small stage-1/5 kernels and the emulated
    network's clock together."""
    parts = name.split("_")
    if name.startswith(("pad_", "unpad_", "scale_rows_", "reduce_", "amax_", "clock_")):
        return "MISC"
    if name.startswith("rfft_pad_") and len(parts) >= 7:  # rfft_pad_<in>_<s1>_<F>_<C>_r<M>
        return f"ROWFFT_{parts[4]}_{parts[5]}".upper()
    if name.startswith("irfft_unpad_") and len(parts) >= 7:  # irfft_unpad_<C>_<F>_<s5>_<out>_r<M>
        return f"ROWFFT_{parts[3]}_{parts[2]}".upper()
    if name.startswith(("fno_rfft_f32_", "fno_irfft_f32_", "fno_rfft_cols_f32",
                        "fno_irfft_cols_f32", "fno_plane_rfft_f32_",
                        "fno_plane_irfft_f32_", "fno_plane_rdft_f32", "fno_plane_irdft_f32",
                        "fno_modes_cgemm_f32_",
                        "fno_layer1d_f32_")):
        # the FNO's float32 rows and planes, its paired modes' product, its one-kernel layer
        return "ROWFFT_F32_C64"
    if name.startswith("sbgemv_irfft_") and len(parts) >= 6:  # sbgemv_irfft_<S>_<C>_<F>_...
        return f"FUSED_{parts[2]}_{parts[3]}_{parts[4]}".upper()
    if parts[0] in _STAGE3_FAMILIES and len(parts) >= 2:  # <family>_<storage>_...
        return f"{_STAGE3_FAMILIES[parts[0]]}_{parts[1]}".upper()
    raise KernelLoadError(f"no GPU kernel is named {name!r}")


def _jit_source() -> tuple[str, str, tuple[str, ...], dict[str, str]]:
    """(source, compiler, options, section numbers by name) of a run-time compile for the
    current device."""
    return _jit_source_for(backend.device_arch(), backend.is_hip())


@functools.lru_cache(maxsize=None)
def _jit_source_for(arch: str, hip: bool) -> tuple[str, str, tuple[str, ...], dict[str, str]]:
    """:func:`_jit_source` for ``arch``, read (and on ROCm translated) once, not per section."""
    if hip:
        translated = source_dir() / f"{MODULE_NAME}.hip"  # made by the build
        if translated.is_file():
            src = translated.read_text()
        else:
            from ._hipify import hipify

            src = hipify(kernel_source(), add_runtime_header=False)
        compiler, options = f"hiprtc for {arch}", ("-std=c++17",)
    else:
        src = kernel_source()
        compiler, options = f"NVRTC for {arch}", ("-std=c++17",) + mma_options(arch)
    return src, compiler, options, dict(_SECTION_DEFINE.findall(src))


def _code_object() -> Path | None:
    """The prebuilt code object the current device loads, or None where kernels are compiled
    at run time (``FFTMATVEC_KERNELS``)."""
    mode = os.environ.get("FFTMATVEC_KERNELS", "auto").lower()
    if mode not in ("auto", "jit", "prebuilt"):
        raise KernelLoadError(f"FFTMATVEC_KERNELS must be auto, jit or prebuilt, got {mode!r}")
    arch = backend.device_arch()
    path = None if mode == "jit" else _code_object_path(arch)
    if path is None and mode == "prebuilt":
        raise KernelLoadError(
            f"no prebuilt code object for {arch} in {_CODE_DIR} and FFTMATVEC_KERNELS=prebuilt"
        )
    why = None if path is None else _stale_reason(path)
    if why is not None:
        if mode == "prebuilt":
            raise KernelLoadError(f"the prebuilt code object {path.name} is not loaded: {why}; "
                                  f"rebuild it (docs/building.md) or unset FFTMATVEC_KERNELS")
        if path not in _passed_over:
            _passed_over.add(path)
            _warnings.warn(f"fftmatvec: the prebuilt code object {path.name} is not loaded: "
                           f"{why}. The kernel sources are compiled on first use instead; "
                           f"rebuild the code objects (docs/building.md) to load them again.",
                           RuntimeWarning)
        return None
    return path


def _load_module(name: str):
    """The module holding the entry point ``name`` on the current device: the prebuilt code
    object, or the run-time compile of the section that defines ``name``; loaded once."""
    cp = backend.cupy
    dev = cp.cuda.Device().id
    with _lock:
        if (dev, None) in _modules:
            return _modules[dev, None][0]
        path = _code_object()
        if path is not None:
            module = cp.RawModule(path=str(path))
            _modules[dev, None] = (module, f"prebuilt {path.name}")
            return module
        section = section_of(name)
        if (dev, section) in _modules:
            return _modules[dev, section][0]
        src, compiler, options, numbers = _jit_source()
        number = numbers.get(section)
        if number is None:
            raise KernelLoadError(f"the kernel source has no section {section} (for {name!r})")
        module = cp.RawModule(code=src, options=options + (f"-DFFTMATVEC_SECTION={number}",))
        _modules[dev, section] = (module, f"JIT {compiler}")
        return module


def has_mma_kernels() -> bool:
    """Whether the current device's kernels include those built for NVIDIA sm_80 and newer only
    (``FFTMATVEC_MMA``: the tensor-core and cp.async kernels), known without compiling: from the
    architecture of the prebuilt code object, or of the device where kernels are compiled."""
    if backend.is_hip():
        return False
    path = _code_object()
    arch = path.name.split(".")[-2] if path is not None else backend.device_arch()
    return bool(mma_options(arch))


def mma_options(arch: str) -> tuple[str, ...]:
    """Compiler options for ``arch``: the tensor-core and cp.async kernels (``sbgemmp_*``,
    ``sbgemva_*``) exist on NVIDIA sm_80 and newer only."""
    cc = arch.removeprefix("sm_")
    return ("-DFFTMATVEC_MMA",) if cc.isdigit() and int(cc) >= 80 else ()


def has_function(name: str) -> bool:
    """Whether the current device's code object has the entry point ``name``. A code object
    that cannot be loaded at all is an error, not a missing name."""
    try:
        section_of(name)
    except KernelLoadError:
        return False
    _load_module(name)
    try:
        get_function(name)
    except KernelLoadError:
        return False
    return True


def get_function(name: str, shared_mem: int = 0):
    """The kernel ``name`` (an ``extern "C"`` entry point) on the current device, memoized;
    ``shared_mem`` bytes of dynamic shared memory, the largest a launch of it will ask for,
    are opted in once on CUDA (the default limit is 48 KB), checked against a block's LDS on
    ROCm."""
    cp = backend.cupy
    key = (cp.cuda.Device().id, name)
    fn = _functions.get(key)
    if fn is None:
        module = _load_module(name)
        try:
            fn = module.get_function(name)
        except Exception as exc:  # compile errors surface here for JIT modules
            raise KernelLoadError(f"cannot load GPU kernel {name!r}: {exc}") from exc
        _functions[key] = fn
    if shared_mem > _shared_mem.get(key, 0):
        if backend.is_hip():
            _check_hip_shared_mem(cp, name, shared_mem)
        else:
            _allow_shared_mem(cp, fn, shared_mem)
        _shared_mem[key] = shared_mem
    return fn


def _check_hip_shared_mem(cp, name: str, nbytes: int) -> None:
    """On ROCm nothing is opted into: a block may use a compute unit's whole LDS without it
    (``sharedMemPerBlock``, 64 KB on gfx90a and gfx942), and HIP ignores the carveout hint.
    CuPy's ROCm builds, moreover, answer every function-attribute call with an error (their
    ``cuFuncSetAttribute`` is a stub returning hipErrorUnknown), which would fail every kernel
    with dynamic shared memory there. A launch asking for more than a block may use is refused
    here, by name, rather than at launch."""
    limit = backend.shared_memory_limits(
        cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id))[1]
    if nbytes > limit:
        raise KernelLoadError(f"GPU kernel {name!r} asks for {nbytes} bytes of shared memory; "
                              f"this device allows {limit} per block")


_CTYPES = {np.dtype(np.int64): ctypes.c_int64, np.dtype(np.int32): ctypes.c_int32,
           np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.float32): ctypes.c_float,
           np.dtype(np.float64): ctypes.c_double}


class PackedLaunch:
    """One kernel launch whose grid, block, shared memory and arguments are packed once, for a
    launch repeated with only some pointers changing (stage 3 of a product, every call).

    ``args`` are the kernel's arguments in order: a NumPy scalar (int64, int32, uint64, float32
    or float64), a device array (its pointer, fixed), or ``None`` for a pointer given at each
    call. A call writes those pointers into the packed argument block (one ctypes array, set
    in one slice assignment) and hands it to the driver, the launch's other arguments bound
    beforehand, where converting the arguments at every call takes many times that host time
    (and with a short stage before it, the device waits for them; docs/benchmarks.md).
    """

    __slots__ = ("_fn", "_ptr", "_dims", "_shared_mem", "_values", "_ptrs", "_n", "_params",
                 "_addr", "_go", "_lock")

    def __init__(self, fn, grid, block, shared_mem: int, args):
        cp = backend.cupy
        self._fn = fn  # keeps the module loaded
        self._ptr = getattr(fn, "kernel", fn).ptr  # a RawKernel's function, or a bare Function
        self._dims = (tuple(grid) + (1, 1))[:3] + (tuple(block) + (1, 1))[:3]
        self._shared_mem = int(shared_mem)
        self._n = sum(a is None for a in args)
        # the pointers given at each call, side by side (the packed block points into them)
        self._ptrs = (ctypes.c_uint64 * max(self._n, 1))()
        base, slot, values, addresses = ctypes.addressof(self._ptrs), 0, [], []
        for a in args:
            if a is None:
                addresses.append(base + 8 * slot)
                slot += 1
                continue
            if isinstance(a, cp.ndarray):
                v = ctypes.c_uint64(a.data.ptr)
            elif isinstance(a, np.generic) and a.dtype in _CTYPES:  # its width is explicit
                v = _CTYPES[a.dtype](a.item())
            else:
                raise TypeError(f"a packed kernel argument must be a device array, None or a "
                                f"NumPy scalar of {sorted(str(d) for d in _CTYPES)}, got "
                                f"{type(a).__name__}")
            values.append(v)
            addresses.append(ctypes.addressof(v))
        self._values = values  # the packed block points into these: keep them alive
        self._params = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self._addr = ctypes.addressof(self._params)
        # the driver call with all but the stream and the packed block bound
        self._go = functools.partial(cp.cuda.driver.launchKernel, self._ptr, *self._dims,
                                     self._shared_mem)
        self._lock = threading.Lock()

    def __call__(self, stream_ptr: int, *ptrs: int) -> None:
        """Launch on the stream ``stream_ptr``, with ``ptrs`` in the ``None`` slots, in order."""
        if len(ptrs) != self._n:
            raise TypeError(f"this launch takes {self._n} pointers, got {len(ptrs)}")
        with self._lock:  # the driver copies the arguments at launch: set and launch together
            if ptrs:
                self._ptrs[:] = ptrs
            self._go(stream_ptr, self._addr, 0)


def set_carveout(fn, nbytes: int) -> None:
    """Ask for a shared-memory carveout of ``fn`` (from :func:`get_function`) that holds
    ``nbytes`` for one block, rather than the most: the rest of the multiprocessor's memory
    stays L1 cache. CUDA only (HIP has no carveout)."""
    if backend.is_hip():
        return
    per_sm = backend.shared_memory_limits()[0]
    _carveout(backend.cupy, fn, min(100, -(-100 * int(nbytes) // per_sm)))


def _carveout(cp, fn, percent: int) -> None:
    """The preferred shared-memory carveout of ``fn``, in percent of the multiprocessor's."""
    if hasattr(type(fn), "max_dynamic_shared_size_bytes"):  # cupy.RawKernel
        fn.preferred_shared_memory_carveout = percent
    else:  # a bare cupy.cuda.Function
        drv = cp.cuda.driver
        drv.funcSetAttribute(fn.ptr, drv.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                             percent)


def _allow_shared_mem(cp, fn, nbytes: int) -> None:
    """Let ``fn`` use ``nbytes`` of dynamic shared memory, and ask for the largest shared-memory
    carveout, so that the blocks the shared memory allows are resident at once (the driver's
    default carveout can halve them)."""
    if hasattr(type(fn), "max_dynamic_shared_size_bytes"):  # cupy.RawKernel
        fn.max_dynamic_shared_size_bytes = nbytes
    else:  # a bare cupy.cuda.Function
        drv = cp.cuda.driver
        drv.funcSetAttribute(fn.ptr, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
    _carveout(cp, fn, 100)


def prebuilt_code_objects() -> list[str]:
    if not _CODE_DIR.is_dir():
        return []
    return sorted(p.name for p in _CODE_DIR.iterdir() if p.suffix in (".cubin", ".hsaco", ".fatbin"))


def build_manifest() -> dict | None:
    """The build's record of the code objects and compilers (``_kernels/manifest.json``)."""
    import json

    path = _CODE_DIR / "manifest.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def describe() -> dict:
    """Where kernels come from on this machine (for ``fftmatvec info``)."""
    info: dict = {"prebuilt": ", ".join(prebuilt_code_objects()) or "none"}
    manifest = build_manifest()
    if manifest:
        for vendor in ("cuda", "hip"):
            entry = manifest.get(vendor) or {}
            if entry:
                info[f"built_{vendor}"] = (
                    f"{entry.get('status', '?')} with {entry.get('compiler') or 'no compiler'} "
                    f"{entry.get('version') or ''}".strip()
                )
    try:
        info["sources"] = str(source_dir())
    except KernelLoadError:
        info["sources"] = "missing"
    if not backend.gpu_available():
        info["current_device"] = "no GPU: CPU path (NumPy/SciPy)"
        return info
    arch = backend.device_arch()
    dev = backend.cupy.cuda.Device().id
    loaded = {section: how for (d, section), (_, how) in _modules.items() if d == dev}
    if None in loaded:
        info["current_device"] = loaded[None]
    elif loaded:
        info["current_device"] = (f"{next(iter(loaded.values()))}, by section; compiled so far: "
                                  f"{', '.join(sorted(loaded))}")
    else:
        try:
            path = _code_object()
        except KernelLoadError as exc:
            info["current_device"] = f"{arch}: {exc}"
            return info
        info["current_device"] = (
            f"{arch}: will load prebuilt {path.name}" if path else
            f"{arch}: will JIT-compile ({'hiprtc' if backend.is_hip() else 'NVRTC'}) on first use, "
            f"the section of the kernels a product runs"
        )
    return info
