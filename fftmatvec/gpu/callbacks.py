"""Stages 1 and 5 fused into cuFFT through LTO callbacks (NVIDIA, cuFFT 11.3 and newer).

The padded time series of stage 1 is never written: the forward real-to-complex FFT loads the
unpadded input through a callback that returns zeros past ``Nt`` (and rounds to stage 1's
precision on the way). The inverse complex-to-real FFT stores only the first ``Nt`` samples
of each row, in the interface dtype, through a store callback. When stage 3 computes in
float32 and the FFT runs in float64, a second callback writes the forward FFT's output in
complex64 (stage 3 rounds it so anyway). For an adjoint with float16 storage, that callback
(in either FFT precision) also multiplies each value by the scale of its row of ``Khat``, so
that stage 3 reads no scales. A product whose stage 3 splits its reduction a few times hands
the inverse FFT the partial sums, which its load callback adds. The callbacks are in
``hip_kernels/fft_callbacks.cu``; NVRTC compiles them to LTO-IR, and cuFFT links them into its
kernels when a plan is made.

CuPy does not expose ``cufftXtSetJITCallback`` (it must be called between ``cufftCreate`` and
the plan), so the few cuFFT and NVRTC entry points needed are called through ``ctypes`` on the
very libraries CuPy has loaded. Anything missing (ROCm, an older cuFFT, a failed link) makes
:func:`support` say why, and the caller keeps the separate pad and unpad kernels.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import OrderedDict

import numpy as np

from .. import backend
from .._errors import FFTMatvecError

__all__ = ["support", "CallbackPlan", "get_plan"]

_CTYPE = {
    np.dtype(np.float64): "double",
    np.dtype(np.float32): "float",
}
_lock = threading.Lock()
_state: dict = {}  # "libs" -> (_Libs or None, reason)


class CallbackError(FFTMatvecError, RuntimeError):
    """A cuFFT callback plan could not be made."""


def _mapped_library(stem: str) -> str | None:
    """Path of the shared library named ``stem.so*`` already mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    name = os.path.basename(parts[5])
                    if name == f"{stem}.so" or name.startswith(f"{stem}.so."):
                        return parts[5]
    except OSError:
        return None
    return None


class _Libs:
    """The cuFFT and NVRTC entry points, bound through ctypes."""

    def __init__(self):
        cp = backend.cupy
        from cupy.cuda import cufft as cp_cufft

        self.version = int(cp_cufft.getVersion())
        if self.version < 11300:
            raise CallbackError(f"cuFFT {self.version} has no LTO callbacks (needs 11.3 or newer)")
        cp_cufft.Plan1d(8, cp_cufft.CUFFT_R2C, 1)  # make sure libcufft is mapped
        path = _mapped_library("libcufft")
        if path is None:
            raise CallbackError("libcufft is not mapped into this process")
        self.cufft = ctypes.CDLL(path)
        fn = getattr(self.cufft, "cufftXtSetJITCallback", None)
        if self.version < 12000:  # CUDA 12: the entry point with the symbol name is versioned
            fn = getattr(self.cufft, "__cufftXtSetJITCallback_12_7", None)
        if fn is None:
            raise CallbackError(f"{path} has no cufftXtSetJITCallback")
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = ctypes.c_int
        self.set_jit_callback = fn
        c = self.cufft
        c.cufftCreate.argtypes = [ctypes.POINTER(ctypes.c_int)]
        c.cufftDestroy.argtypes = [ctypes.c_int]
        c.cufftSetAutoAllocation.argtypes = [ctypes.c_int, ctypes.c_int]
        c.cufftSetWorkArea.argtypes = [ctypes.c_int, ctypes.c_void_p]
        c.cufftSetStream.argtypes = [ctypes.c_int, ctypes.c_void_p]
        ip = ctypes.POINTER(ctypes.c_int)
        c.cufftMakePlanMany.argtypes = [ctypes.c_int, ctypes.c_int, ip, ip, ctypes.c_int,
                                        ctypes.c_int, ip, ctypes.c_int, ctypes.c_int,
                                        ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
        for name in ("cufftExecD2Z", "cufftExecZ2D", "cufftExecR2C", "cufftExecC2R"):
            getattr(c, name).argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        for name in ("cufftCreate", "cufftDestroy", "cufftSetAutoAllocation", "cufftSetWorkArea",
                     "cufftSetStream", "cufftMakePlanMany", "cufftExecD2Z", "cufftExecZ2D",
                     "cufftExecR2C", "cufftExecC2R"):
            getattr(c, name).restype = ctypes.c_int

        path = _mapped_library("libnvrtc")
        if path is None:  # NVRTC is loaded on the first run-time compilation
            cp.RawKernel('extern "C" __global__ void fmv_probe() {}', "fmv_probe").compile()
            path = _mapped_library("libnvrtc")
        if path is None:
            raise CallbackError("libnvrtc is not mapped into this process")
        n = self.nvrtc = ctypes.CDLL(path)
        if not hasattr(n, "nvrtcGetLTOIR"):
            raise CallbackError(f"{path} cannot compile to LTO-IR")
        vp, sp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)
        n.nvrtcCreateProgram.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.c_int, vp, vp]
        n.nvrtcCompileProgram.argtypes = [vp, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        n.nvrtcGetProgramLogSize.argtypes = [vp, sp]
        n.nvrtcGetProgramLog.argtypes = [vp, ctypes.c_char_p]
        n.nvrtcGetLTOIRSize.argtypes = [vp, sp]
        n.nvrtcGetLTOIR.argtypes = [vp, ctypes.c_char_p]
        n.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(vp)]

    def compile(self, source: str, defines: dict, arch: str) -> bytes:
        """LTO-IR of ``source`` with ``defines``, for ``arch`` (``sm_90``)."""
        n = self.nvrtc
        prog = ctypes.c_void_p()
        _check_nvrtc(n.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"fft_callbacks.cu",
                                          0, None, None), "nvrtcCreateProgram")
        try:
            opts = [f"-arch=compute_{arch.removeprefix('sm_')}", "-rdc=true", "-dlto",
                    "-std=c++17"] + [f"-D{k}={v}" for k, v in defines.items()]
            arr = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
            rc = n.nvrtcCompileProgram(prog, len(opts), arr)
            if rc != 0:
                size = ctypes.c_size_t()
                n.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
                log = ctypes.create_string_buffer(size.value + 1)
                n.nvrtcGetProgramLog(prog, log)
                raise CallbackError(f"NVRTC could not compile the FFT callback ({opts}): "
                                    f"{log.value.decode(errors='replace')}")
            size = ctypes.c_size_t()
            _check_nvrtc(n.nvrtcGetLTOIRSize(prog, ctypes.byref(size)), "nvrtcGetLTOIRSize")
            buf = ctypes.create_string_buffer(size.value)
            _check_nvrtc(n.nvrtcGetLTOIR(prog, buf), "nvrtcGetLTOIR")
            return buf.raw
        finally:
            n.nvrtcDestroyProgram(ctypes.byref(prog))


def _check_nvrtc(rc: int, what: str) -> None:
    if rc != 0:
        raise CallbackError(f"{what} failed with NVRTC error {rc}")


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise CallbackError(f"{what} failed with cuFFT error {rc}")


def _libs() -> _Libs:
    with _lock:
        if "libs" not in _state:
            try:
                _state["libs"] = (_Libs(), "")
            except (CallbackError, OSError, AttributeError) as exc:
                _state["libs"] = (None, str(exc))
        libs, reason = _state["libs"]
    if libs is None:
        raise CallbackError(reason)
    return libs


def support() -> tuple[bool, str]:
    """Whether cuFFT LTO callbacks can be used here, and if not, why not."""
    if not backend.gpu_available():
        return False, "no GPU"
    if backend.is_hip():
        return False, "hipFFT: callbacks not used on ROCm"
    try:
        _libs()
    except CallbackError as exc:
        return False, str(exc)
    return True, "cuFFT LTO callbacks"


def _source() -> str:
    from ..kernels import source_dir

    return (source_dir() / "fft_callbacks.cu").read_text()


_IR: dict = {}  # (which, defines, arch) -> LTO-IR bytes, shared by every plan of the process


def _callback_ir(which: str, defines: dict, arch: str) -> bytes:
    key = (which, tuple(sorted(defines.items())), arch)
    with _lock:
        ir = _IR.get(key)
    if ir is None:
        ir = _libs().compile(_source(), {which: 1, **defines}, arch)
        with _lock:
            _IR[key] = ir
    return ir


class CallbackPlan:
    """One batched 1D cuFFT plan of length ``L`` with LTO load and/or store callbacks.

    Parameters
    ----------
    kind : ``"r2c"`` or ``"c2r"``
    L : int
        FFT length.
    batch : int
        Number of transforms (rows).
    double : bool
        Double precision (D2Z / Z2D) or single (R2C / C2R).
    load, store : (name, defines) or None
        The callback (``FMV_PAD_LOAD``, ``FMV_XHAT_STORE``, ``FMV_XHAT_SCALE_STORE``,
        ``FMV_YHAT_LOAD``, ``FMV_SPLIT_LOAD``, ``FMV_UNPAD_STORE``) and its macros.
    store_info : CuPy array or None
        Device memory the store callback reads (its ``callerInfo``): the float16 scales for
        ``FMV_XHAT_SCALE_STORE``. The plan keeps the array alive.
    """

    _NAMES = {"FMV_PAD_LOAD": "fmv_pad_load", "FMV_XHAT_STORE": "fmv_xhat_store",
              "FMV_XHAT_SCALE_STORE": "fmv_xhat_scale_store",
              "FMV_YHAT_LOAD": "fmv_yhat_load", "FMV_SPLIT_LOAD": "fmv_split_load",
              "FMV_UNPAD_STORE": "fmv_unpad_store"}

    def __init__(self, kind: str, L: int, batch: int, double: bool, load=None, store=None,
                 store_info=None):
        cp = backend.cupy
        from cupy.cuda import cufft as cf

        libs = _libs()
        self._libs, self.kind, self.double = libs, kind, double
        arch = backend.device_arch()
        if kind == "r2c":
            self._type = cf.CUFFT_D2Z if double else cf.CUFFT_R2C
            self._exec = libs.cufft.cufftExecD2Z if double else libs.cufft.cufftExecR2C
            ld = cf.CUFFT_CB_LD_REAL_DOUBLE if double else cf.CUFFT_CB_LD_REAL
            st = cf.CUFFT_CB_ST_COMPLEX_DOUBLE if double else cf.CUFFT_CB_ST_COMPLEX
        else:
            self._type = cf.CUFFT_Z2D if double else cf.CUFFT_C2R
            self._exec = libs.cufft.cufftExecZ2D if double else libs.cufft.cufftExecC2R
            ld = cf.CUFFT_CB_LD_COMPLEX_DOUBLE if double else cf.CUFFT_CB_LD_COMPLEX
            st = cf.CUFFT_CB_ST_REAL_DOUBLE if double else cf.CUFFT_CB_ST_REAL
        self._exec_lock = threading.Lock()  # the stream is set on the plan, then it runs
        self._stream = None  # the stream last set on the plan
        handle = ctypes.c_int()
        _check(libs.cufft.cufftCreate(ctypes.byref(handle)), "cufftCreate")
        self.handle = handle.value
        # the LTO-IR and names (cuFFT reads them when the plan is made), and the memory the
        # store callback reads
        self._keep = [store_info]
        try:
            for spec, cb_type, data in ((load, ld, None), (store, st, store_info)):
                if spec is None:
                    continue
                which, defines = spec
                ir = _callback_ir(which, defines, arch)
                name = self._NAMES[which].encode()
                buf = ctypes.create_string_buffer(ir, len(ir))
                info = ctypes.c_void_p(0 if data is None else int(data.data.ptr))
                self._keep += [buf, name, info]
                _check(libs.set_jit_callback(self.handle, name, ctypes.cast(buf, ctypes.c_void_p),
                                             len(ir), cb_type, ctypes.byref(info)),
                       f"cufftXtSetJITCallback({self._NAMES[which]})")
            _check(libs.cufft.cufftSetAutoAllocation(self.handle, 0), "cufftSetAutoAllocation")
            n = (ctypes.c_int * 1)(L)
            work = ctypes.c_size_t()
            _check(libs.cufft.cufftMakePlanMany(self.handle, 1, n, None, 1, 0, None, 1, 0,
                                                self._type, batch, ctypes.byref(work)),
                   f"cufftMakePlanMany({kind}, L={L}, batch={batch}) with callbacks")
            self.work = cp.empty(max(int(work.value), 1), dtype=np.uint8)
            _check(libs.cufft.cufftSetWorkArea(self.handle, self.work.data.ptr), "cufftSetWorkArea")
        except BaseException:
            libs.cufft.cufftDestroy(self.handle)
            self.handle = None
            raise

    def __call__(self, idata_ptr: int, odata_ptr: int, stream: int | None = None) -> None:
        """Execute on ``stream`` (a pointer; by default the current stream)."""
        if stream is None:
            stream = backend.cupy.cuda.get_current_stream().ptr
        with self._exec_lock:
            if stream != self._stream:
                _check(self._libs.cufft.cufftSetStream(self.handle, stream), "cufftSetStream")
                self._stream = stream
            _check(self._exec(self.handle, idata_ptr, odata_ptr), "cufftExec")

    def __del__(self):
        h = getattr(self, "handle", None)
        if h is not None:
            try:
                self._libs.cufft.cufftDestroy(h)
            except Exception:
                pass
            self.handle = None


_PLANS: OrderedDict = OrderedDict()  # the plans of the process, most recently used last
MAX_PLANS = 32


def _spec_key(spec):
    return None if spec is None else (spec[0], tuple(sorted(spec[1].items())))


def get_plan(kind: str, L: int, batch: int, double: bool, load=None, store=None,
             store_info=None) -> CallbackPlan:
    """A :class:`CallbackPlan`, shared by every operator of the process with the same sizes,
    types and callbacks (making one links cuFFT's kernels with the callbacks, 0.05-1 s). A
    plan whose store callback reads ``store_info`` (an operator's scales) serves that operator
    only. The ``MAX_PLANS`` most recently used are kept."""
    key = (backend.cupy.cuda.Device().id, kind, L, batch, double, _spec_key(load),
           _spec_key(store), None if store_info is None else int(store_info.data.ptr))
    with _lock:
        plan = _PLANS.get(key)
        if plan is not None:
            _PLANS.move_to_end(key)
            return plan
    plan = CallbackPlan(kind, L, batch, double, load=load, store=store, store_info=store_info)
    with _lock:
        _PLANS[key] = plan
        while len(_PLANS) > MAX_PLANS:
            _PLANS.popitem(last=False)
    return plan


def ctype(dtype) -> str:
    """The C type of a real dtype, for the callbacks' macros."""
    return _CTYPE[np.dtype(dtype)]
