"""Arrays from other libraries: vectors and kernels from any DLPack producer, results of the
caller's kind.

The operator computes on NumPy (CPU) or CuPy (GPU) arrays. A PyTorch tensor, a JAX array, any
object with ``__dlpack__`` and ``__dlpack_device__``, or a bare DLPack capsule is viewed as one
of them without a copy (``numpy.from_dlpack`` / ``cupy.from_dlpack``), and a product's result is
handed back the same way, as the caller's kind: a torch tensor for a torch tensor (on its
device), an array of the producer's namespace (``__array_namespace__().from_dlpack``) for an
array-API producer, a NumPy or CuPy array for a capsule. On a GPU the product runs on the
caller's current stream (PyTorch's, for a torch tensor), so it is ordered after the work that
wrote the input and before the work that reads the output, with no synchronisation.

:func:`accepts_arrays` puts this in front of a public product (the one place the operator calls
it); :func:`asarray` converts a kernel or any other array argument.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable

import numpy as np

from . import backend
from ._errors import FFTMatvecTypeError

__all__ = ["accepts_arrays", "asarray"]

# DLPack device types (``DLDeviceType`` of dlpack.h) that NumPy reads: host memory.
_HOST_DEVICES = frozenset({1, 3, 11, 13})  # kDLCPU, kDLCUDAHost, kDLROCMHost, kDLCUDAManaged
# DLPack device types that CuPy reads: device memory of an NVIDIA or AMD GPU.
_GPU_DEVICES = frozenset({2, 10})  # kDLCUDA, kDLROCM


def _native_types() -> tuple:
    return (np.ndarray,) if backend.cupy is None else (np.ndarray, backend.cupy.ndarray)


_NATIVE = _native_types()


def _torch_tensor(x: Any) -> bool:
    """True for a ``torch.Tensor`` (without importing torch: one can exist only if it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _capsule(x: Any) -> bool:
    return type(x).__name__ == "PyCapsule" and type(x).__module__ == "builtins"


class _CapsuleProducer:
    """A bare DLPack capsule presented through the protocol that ``numpy.from_dlpack`` reads."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: NumPy reads the capsule's own device and refuses any other


def _need_cupy(name: str, what: str):
    if backend.cupy is None:
        raise FFTMatvecTypeError(
            f"{name} is {what} in GPU memory, but CuPy is not installed; install "
            f"fftmatvec[cuda12] or [cuda13], or move it to the CPU first")
    return backend.cupy


@contextlib.contextmanager
def _on_stream(device_id: int, stream_ptr: int):
    """Make GPU ``device_id`` and the raw stream ``stream_ptr`` (0: the legacy default stream)
    CuPy's current ones."""
    cupy = backend.cupy
    stream = cupy.cuda.Stream.null if stream_ptr == 0 else cupy.cuda.ExternalStream(stream_ptr)
    with cupy.cuda.Device(device_id), stream:
        yield


def _from_torch(x, name: str, product: bool):
    """``(array, back, context)`` of a torch tensor: a NumPy or CuPy view of it, the function
    that returns a result as a tensor on its device, and the context in which a product must
    run (on a GPU: the tensor's device and PyTorch's current stream there). ``product``: the
    view is a product's input, read on PyTorch's current stream; else (a kernel) it is read on
    CuPy's current stream, which DLPack makes wait for PyTorch's."""
    import torch

    if x.requires_grad:
        if product:
            raise FFTMatvecTypeError(
                f"{name} is a torch tensor that requires grad; the operator's products do not "
                f"record gradients: apply F.as_torch() (a differentiable module, gradients "
                f"through F^T), or pass {name}.detach()")
        raise FFTMatvecTypeError(
            f"{name} is a torch tensor that requires grad; the operator is a fixed linear map "
            f"with no gradient with respect to its {name}: pass {name}.detach()")
    if x.device.type == "cpu":
        return _dlpack_view(np.from_dlpack, x, name), torch.from_dlpack, contextlib.nullcontext()
    if x.device.type != "cuda":  # ROCm builds of PyTorch name their GPUs "cuda" too
        raise FFTMatvecTypeError(
            f"{name} is a torch tensor on {x.device}; expected one on the CPU or a CUDA/ROCm GPU")
    _need_cupy(name, "a torch tensor")
    if not product:
        with backend.cupy.cuda.Device(x.device.index):
            return (_dlpack_view(backend.cupy.from_dlpack, x, name), torch.from_dlpack,
                    contextlib.nullcontext())
    ptr = torch.cuda.current_stream(x.device).cuda_stream
    with _on_stream(x.device.index, ptr):  # on the tensor's stream: no wait for its producer
        arr = _dlpack_view(backend.cupy.from_dlpack, x, name)
    return arr, torch.from_dlpack, _on_stream(x.device.index, ptr)


def _dlpack_view(from_dlpack: Callable, x, name: str):
    try:
        return from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise FFTMatvecTypeError(
            f"{name} ({type(x).__module__}.{type(x).__name__}) cannot be read through DLPack: "
            f"{exc}") from None


def _from_producer(x, name: str):
    """``(array, back, context)`` of an object with ``__dlpack__`` and ``__dlpack_device__``."""
    try:
        dev_type, dev_id = (int(v) for v in x.__dlpack_device__())
    except Exception as exc:  # noqa: BLE001 - a producer's own failure, said as the argument's
        raise FFTMatvecTypeError(
            f"{name}: __dlpack_device__() of {type(x).__name__} failed: {exc}") from None
    namespace = getattr(x, "__array_namespace__", None)
    back = _identity
    if namespace is not None:
        ns = namespace()
        if hasattr(ns, "from_dlpack"):
            back = ns.from_dlpack
    if dev_type in _HOST_DEVICES:
        return _dlpack_view(np.from_dlpack, x, name), back, contextlib.nullcontext()
    if dev_type in _GPU_DEVICES:
        cupy = _need_cupy(name, f"a {type(x).__name__}")
        with cupy.cuda.Device(dev_id):
            arr = _dlpack_view(cupy.from_dlpack, x, name)
        return arr, back, cupy.cuda.Device(dev_id)
    raise FFTMatvecTypeError(
        f"{name} ({type(x).__name__}) lives on DLPack device type {dev_type}; expected host "
        f"memory or a CUDA/ROCm GPU")


def _from_capsule(x, name: str):
    """``(array, back, context)`` of a bare DLPack capsule (a result comes back as a NumPy or
    CuPy array: a capsule is consumed once and names no array library)."""
    try:
        return np.from_dlpack(_CapsuleProducer(x)), _identity, contextlib.nullcontext()
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        # NumPy refuses device memory (an error naming the device) without consuming the
        # capsule, which CuPy then reads; a capsule already consumed has another name
        if not (isinstance(exc, (BufferError, RuntimeError)) and "device" in str(exc).lower()
                and backend.cupy is not None):
            raise FFTMatvecTypeError(
                f"{name} is a DLPack capsule that cannot be read (a capsule is read once): "
                f"{exc}") from None
    return _dlpack_view(backend.cupy.from_dlpack, x, name), _identity, contextlib.nullcontext()


def _identity(y):
    return y


def _view(x, name: str, product: bool):
    """``(array, back, context)`` of a non-native array, or None for anything else."""
    if _torch_tensor(x):
        return _from_torch(x, name, product)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _from_producer(x, name)
    if _capsule(x):
        return _from_capsule(x, name)
    return None


def asarray(x: Any, name: str):
    """``x`` as a NumPy or CuPy array sharing its memory, where it is a DLPack producer (a torch
    tensor, a JAX array, a capsule); anything else unchanged, for the caller's own checks.

    Raises
    ------
    FFTMatvecTypeError
        A torch tensor that requires grad, or one on a device other than the CPU or a GPU;
        GPU memory without CuPy; a producer DLPack cannot read (e.g. bfloat16).
    """
    if isinstance(x, _NATIVE):
        return x
    view = _view(x, name, product=False)
    return x if view is None else view[0]


def accepts_arrays(name: str):
    """Decorator of a public product ``method(self, x, ...)``: a DLPack producer ``x`` is
    viewed as a NumPy or CuPy array, the product runs on its device and current stream, and
    the result comes back as the caller's kind. NumPy and CuPy arrays pass straight through.
    ``name``: the argument's name in messages."""

    def wrap(method):
        @functools.wraps(method)
        def product(self, x, *args, **kwargs):
            if isinstance(x, _NATIVE):
                return method(self, x, *args, **kwargs)
            view = _view(x, name, product=True)
            if view is None:  # not an array: the product's own checks say so
                return method(self, x, *args, **kwargs)
            arr, back, context = view
            with context:
                return back(method(self, arr, *args, **kwargs))

        return product

    return wrap
