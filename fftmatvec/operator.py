"""The block lower-triangular Toeplitz operator and its five stages.

``F`` of shape ``(Nd*Nt, Nm*Nt)`` is defined by its kernel (first block column)
``K[i, j, l]``, the response of sensor ``i`` at lag ``l`` to a unit impulse of parameter ``j``::

    (F m)[i, t]   = sum_j sum_{s <= t} K[i, j, t - s] m[j, s]
    (F^T d)[j, s] = sum_i sum_{t >= s} K[i, j, t - s] d[i, t]

Both are applied through FFTs of length ``L >= 2 Nt - 1`` in five stages, each in its own
precision (see :class:`~fftmatvec.precision.PrecisionConfig`):

1. ``broadcast_and_pad``  cast the input and zero-pad its time axis to ``L``;
2. ``fft``                real-to-complex FFT along time;
3. ``sbgemv``             per frequency ``f``: ``Khat[f] @ x[f]`` (adjoint ``Khat[f]^H @ x[f]``);
4. ``ifft``               complex-to-real inverse FFT of length ``L``;
5. ``unpad_and_reduce``   keep the first ``Nt`` samples, cast to the interface dtype.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import numbers
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import scipy.fft
from numpy.typing import DTypeLike

from . import _interop, _memory, _scaling, _warnings, backend
from .gpu.plan import ENV as _PLAN_ENV
from .gpu.plan import Plan, parse_overrides
from .gpu.planning import Overrides
from ._typing import Array, PathLike
from ._errors import FFTMatvecTypeError, FFTMatvecValueError
from ._matmul import MatmulEngine, rfft
from .precision import PrecisionConfig

__all__ = ["BlockToeplitz", "NormalOperator", "fft_length"]

_INTERFACE_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))

_log = logging.getLogger(__name__)


def fft_length(nt: int) -> int:
    """Smallest fast FFT length ``L >= 2*nt - 1`` (5-smooth, fast for FFTW-style, cuFFT and
    hipFFT alike)."""
    if nt < 1:
        raise FFTMatvecValueError(f"nt must be >= 1, got {nt}")
    return int(scipy.fft.next_fast_len(2 * nt - 1, real=True))


# ------------------------------------------------------------------------------------------
# Validation helpers (public methods check, private methods compute)
# ------------------------------------------------------------------------------------------
def _scalar_value(value):
    """``value`` itself, or the element of a 0-d array (NumPy or CuPy)."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _real_scalar(value, name: str, expected: str = "a real number") -> float:
    """``value`` as a float: a Python or NumPy real number, or a 0-d array of one; a bool, a
    string or a complex number is refused with :class:`FFTMatvecTypeError` (its message: what
    ``name`` must be, ``expected``, and what came)."""
    v = _scalar_value(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise FFTMatvecTypeError(f"{name} must be {expected}, got {type(value).__name__} "
                                 f"{value!r}")
    return float(v)


def _integer(value, name: str) -> int:
    """``value`` as an int: a Python or NumPy integer, or a 0-d array of one; a bool, a float
    or a string is refused with :class:`FFTMatvecTypeError`."""
    v = _scalar_value(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise FFTMatvecTypeError(f"{name} must be an integer, got {type(value).__name__} "
                                 f"{value!r}")
    return int(v)


def _check_fft_len(fft_len, nt: int) -> int:
    if fft_len is None:
        return fft_length(nt)
    fft_len = _integer(fft_len, "fft_len")
    if fft_len < 2 * nt - 1:
        raise FFTMatvecValueError(f"fft_len must be at least 2*Nt - 1 = {2 * nt - 1}, got {fft_len}")
    return fft_len


def _check_kernel(kernel: Any):
    xp = backend.get_array_module(kernel, name="kernel")
    if kernel.ndim != 3:
        raise FFTMatvecValueError(
            f"kernel must be a 3-D array (Nd, Nm, Nt), got {kernel.ndim}-D with shape {kernel.shape}"
        )
    if any(n == 0 for n in kernel.shape):
        raise FFTMatvecValueError(f"kernel must have no empty dimension, got shape {kernel.shape}")
    dt = kernel.dtype
    if dt.kind == "c":
        raise FFTMatvecTypeError(f"kernel must be real (float32 or float64), got complex dtype {dt}")
    if dt.kind != "f":
        raise FFTMatvecTypeError(f"kernel must be real floating point (float32 or float64), got {dt}")
    if isinstance(kernel, np.ma.MaskedArray):  # its mask would be ignored, NaN under it too
        raise FFTMatvecTypeError("kernel is a masked array; pass kernel.filled(0) or a plain ndarray")
    if not bool(xp.isfinite(kernel).all()):
        raise FFTMatvecValueError("kernel contains NaN or Inf values")
    return xp


def _fingerprint(xp, kernel) -> tuple:
    """Sums of the kernel's bits read as unsigned integers (plain and position-weighted, exact
    modulo 2**64): any realistic change to the kernel changes them. One pass over the kernel."""
    k = xp.ascontiguousarray(kernel)
    u = k.reshape(-1).view(np.uint32 if k.dtype.itemsize == 4 else
                           np.uint64 if k.dtype.itemsize == 8 else np.uint8)
    total = int(u.sum(dtype=np.uint64))
    rows = k.reshape(k.shape[0], -1).view(u.dtype).sum(axis=1, dtype=np.uint64)
    ramp = xp.arange(1, rows.size + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return total, int((rows * ramp).sum(dtype=np.uint64))


def _check_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(np.float64 if dtype is None else dtype)
    except TypeError as exc:
        raise FFTMatvecTypeError(f"dtype must be float32 or float64, got {dtype!r}") from exc
    if dt not in _INTERFACE_DTYPES:
        raise FFTMatvecTypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


class _OperatorBase:
    """Shared interface: shape bookkeeping, input validation, ``@``, adjoints, LinearOperator.

    Subclasses set ``_xp``, ``dtype``, ``nt``, ``_n_in``, ``_n_out`` and implement
    ``_matmat(X)`` and ``_rmatmat(Y)`` on 3-D arrays ``(k, n, nt)`` already validated.
    """

    _xp: Any
    _device: Any = None  # the CuPy device of a GPU operator
    dtype: np.dtype
    nt: int
    _n_in: int
    _n_out: int

    # ---- shapes --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self._n_out * self.nt, self._n_in * self.nt)

    @property
    def model_shape(self) -> tuple[int, int]:
        """Shape ``(n, Nt)`` of an input vector."""
        return (self._n_in, self.nt)

    @property
    def data_shape(self) -> tuple[int, int]:
        """Shape ``(n, Nt)`` of an output vector."""
        return (self._n_out, self.nt)

    @property
    def xp(self) -> Any:
        """The array module (``numpy`` or ``cupy``) the operator lives on."""
        return self._xp

    # ---- validation ----------------------------------------------------------------------
    def _check_vector(self, x: Any, n: int, name: str, batched: bool, check_finite: bool = True):
        """``(x as (k, n, Nt), flat, check)``: ``check`` says that the product must still check
        ``x`` for finiteness (:meth:`_product`); a dtype cast here was checked here."""
        xp = backend.get_array_module(x, name=name)
        if xp is not self._xp:
            where = "CuPy (GPU)" if self._xp is not np else "NumPy (CPU)"
            got = "CuPy (GPU)" if xp is not np else "NumPy (CPU)"
            raise FFTMatvecTypeError(
                f"{name} is a {got} array but the operator lives on {where}; move it explicitly "
                f"(cupy.asarray / cupy.asnumpy)"
            )
        if isinstance(x, np.ma.MaskedArray):  # its mask would be ignored, NaN under it too
            raise FFTMatvecTypeError(
                f"{name} is a masked array; pass {name}.filled(0) or a plain ndarray")
        if x.dtype.kind not in "f":
            raise FFTMatvecTypeError(
                f"{name} must be real floating point (float32 or float64), got dtype {x.dtype}"
            )
        check = check_finite
        if x.dtype not in _INTERFACE_DTYPES:  # float16, longdouble: the stages take f32 / f64
            if check_finite and x.size and not bool(xp.isfinite(x).all()):
                raise FFTMatvecValueError(f"{name} contains NaN or Inf values")
            x = x.astype(self.dtype)
            if check_finite and x.size and not bool(xp.isfinite(x).all()):
                raise FFTMatvecValueError(
                    f"{name} holds values too large for {self.dtype} (they overflow to Inf)"
                )
            check = False
        if self._device is not None and x.device.id != self._device.id:
            raise FFTMatvecValueError(
                f"{name} lives on GPU {x.device.id} but the operator on GPU {self._device.id}; "
                f"move it explicitly (cupy.asarray under cupy.cuda.Device({self._device.id}))"
            )
        if batched:
            if x.ndim != 3 or x.shape[1:] != (n, self.nt):
                raise FFTMatvecValueError(
                    f"{name} must have shape (k, {n}, {self.nt}), got {x.shape}"
                )
            if x.shape[0] == 0:
                raise FFTMatvecValueError(f"{name} must hold at least one vector, got shape {x.shape}")
            return x, False, check
        if x.shape == (n, self.nt):
            return x[None], False, check
        if x.shape == (n * self.nt,):
            return x.reshape(1, n, self.nt), True, check
        raise FFTMatvecValueError(
            f"{name} must have shape ({n}, {self.nt}) or ({n * self.nt},), got {x.shape}"
        )

    def _on_device(self):
        return contextlib.nullcontext() if self._device is None else self._device

    def _product(self, x, adjoint: bool, name: str, check: bool):
        """``_matmat(x)`` (``_rmatmat`` for ``adjoint``), checking ``x`` for finiteness where
        ``check``: one reduction (its largest magnitude, which also gives the input's scale),
        tested before the product on the CPU; on a GPU the product is queued first and the
        host then waits only for the reduction's result (:func:`_scaling.checked`)."""
        run = self._rmatmat if adjoint else self._matmat
        if not check:
            return run(x)
        with self._on_device():
            return _scaling.checked(_scaling.ops_for(self._xp), x, name,
                                    lambda a: run(x, amax=a))

    # ---- public products -----------------------------------------------------------------
    # Each takes a NumPy or CuPy array, or any DLPack producer (a torch tensor, a JAX array)
    # viewed without a copy, and returns the caller's kind (fftmatvec/_interop.py).
    @_interop.accepts_arrays("m")
    def matvec(self, m: Array, *, check_finite: bool = True) -> Array:
        """Apply the operator to one vector.

        Parameters
        ----------
        m : (n_in, Nt) or (n_in*Nt,) array
            Real input, on the operator's device: a NumPy or CuPy array, or a DLPack producer
            there (a torch tensor, a JAX array, a capsule), read without a copy.
        check_finite : bool, default True
            Raise :class:`~fftmatvec.FFTMatvecValueError` if ``m`` holds NaN or Inf (one
            reduction over ``m``, the one that also gives a reduced precision's input scale).
            On the CPU it raises before the product; on a GPU the product is queued first, so
            the device never waits for the host, and the error comes once the reduction's
            result is back, with no output returned. ``False`` skips it; a non-finite input
            then spreads to every output time through the FFT. (A GPU operator still makes the
            reduction, for the input's scale, and its host still waits for the reduction's
            value, never for the product.)

        Returns
        -------
        (n_out, Nt) or (n_out*Nt,) array
            Same rank as ``m``, in the operator's ``dtype``, of ``m``'s kind: a torch tensor
            for a torch tensor (on its device; on a GPU computed on its current stream), the
            producer's namespace's array for an array-API producer, a NumPy or CuPy array for
            a capsule.
        """
        x, flat, check = self._check_vector(m, self._n_in, "m", batched=False,
                                            check_finite=check_finite)
        y = self._product(x, False, "m", check)
        return y.reshape(-1) if flat else y[0]

    @_interop.accepts_arrays("d")
    def rmatvec(self, d: Array, *, check_finite: bool = True) -> Array:
        """Apply the adjoint to one vector: ``d`` is ``(n_out, Nt)`` or flat (``check_finite``
        as in :meth:`matvec`)."""
        x, flat, check = self._check_vector(d, self._n_out, "d", batched=False,
                                            check_finite=check_finite)
        y = self._product(x, True, "d", check)
        return y.reshape(-1) if flat else y[0]

    @_interop.accepts_arrays("M")
    def matmat(self, M: Array, *, check_finite: bool = True) -> Array:
        """Apply the operator to a batch ``M`` of shape ``(k, n_in, Nt)`` in one batched product
        (``check_finite`` as in :meth:`matvec`)."""
        x, _, check = self._check_vector(M, self._n_in, "M", batched=True, check_finite=check_finite)
        return self._product(x, False, "M", check)

    @_interop.accepts_arrays("D")
    def rmatmat(self, D: Array, *, check_finite: bool = True) -> Array:
        """Apply the adjoint to a batch ``D`` of shape ``(k, n_out, Nt)`` (``check_finite`` as
        in :meth:`matvec`)."""
        x, _, check = self._check_vector(D, self._n_out, "D", batched=True,
                                         check_finite=check_finite)
        return self._product(x, True, "D", check)

    def __matmul__(self, x: Array) -> Array:
        if getattr(x, "ndim", None) == 3:
            return self.matmat(x)
        return self.matvec(x)

    __array_ufunc__ = None  # ndarray @ F: NumPy defers to __rmatmul__ instead of a gufunc error

    def __rmatmul__(self, x):
        raise FFTMatvecTypeError(
            f"x @ {type(self).__name__} is not defined (the operator applies from the left): "
            f"use F @ x, or F.T @ x for the product with the adjoint"
        )

    @property
    def T(self) -> _OperatorBase:
        """The adjoint (transpose) as an operator sharing this one's data."""
        return _Adjoint(self)

    H = T

    def aslinearoperator(self) -> Any:
        """A ``scipy.sparse.linalg.LinearOperator`` (NumPy) or cupyx one (CuPy) on flat vectors,
        so SciPy's / cupyx's iterative solvers run on it.

        Its products check their input as ``F @ x`` does: a complex, integer or masked vector
        is refused (:class:`~fftmatvec.FFTMatvecTypeError`), one holding NaN or Inf too
        (:class:`~fftmatvec.FFTMatvecValueError`), and a vector of the wrong length. A block
        of vectors ``(n*Nt, k)`` runs as one batched product."""
        if self._xp is np:
            from scipy.sparse.linalg import LinearOperator
        else:
            from cupyx.scipy.sparse.linalg import LinearOperator

        def mv(v):
            return self._flat_product(v, adjoint=False)

        def rmv(v):
            return self._flat_product(v, adjoint=True)

        kwargs = dict(shape=self.shape, dtype=self.dtype, matvec=mv, rmatvec=rmv, matmat=mv)
        if self._xp is np:
            kwargs["rmatmat"] = rmv
        return LinearOperator(**kwargs)

    def _flat_product(self, v, adjoint: bool):
        """The product of a flat vector ``(n*Nt,)`` or of a block of them ``(n*Nt, k)`` (the
        layout of a ``LinearOperator``), with the checks of :meth:`matvec` / :meth:`matmat`."""
        n, name = (self._n_out, "d") if adjoint else (self._n_in, "m")
        if getattr(v, "ndim", None) != 2:
            x, _, check = self._check_vector(v, n, name, batched=False)
            return self._product(x, adjoint, name, check).reshape(-1)
        if v.shape[0] != n * self.nt:
            raise FFTMatvecValueError(
                f"{name} must have shape ({n * self.nt}, k), got {v.shape}")
        x, _, check = self._check_vector(v.T.reshape(-1, n, self.nt), n, name, batched=True)
        y = self._product(x, adjoint, name, check)
        return y.reshape(y.shape[0], -1).T

    def aspylops(self) -> Any:
        """A ``pylops.LinearOperator`` with ``dims = model_shape`` and ``dimsd = data_shape``
        (:class:`fftmatvec.pylops.PyLopsOperator`), so PyLops's solvers run on it."""
        from .pylops import PyLopsOperator

        return PyLopsOperator(self)

    def as_torch(self) -> Any:
        """A ``torch.nn.Module`` applying the operator to torch tensors, differentiable:
        gradients go through the adjoint (:class:`fftmatvec.torch.TorchOperator`)."""
        from .torch import TorchOperator

        return TorchOperator(self)

    # ---- to implement --------------------------------------------------------------------
    # ``amax``: the largest magnitude of ``x`` where the caller has it (a host float, or a
    # device measure of fftmatvec/_scaling.py), else None.
    def _matmat(self, x, amax=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def _rmatmat(self, x, amax=None):  # pragma: no cover - abstract
        raise NotImplementedError


class _Adjoint(_OperatorBase):
    """``F^T`` of an operator ``F``, sharing its data."""

    def __init__(self, op: _OperatorBase):
        self._op = op
        self._xp, self._device = op._xp, op._device
        self.dtype = op.dtype
        self.nt = op.nt
        self._n_in, self._n_out = op._n_out, op._n_in

    def _matmat(self, x, amax=None):
        return self._op._rmatmat(x, amax)

    def _rmatmat(self, x, amax=None):
        return self._op._matmat(x, amax)

    @property
    def T(self):
        return self._op

    H = T

    def __reduce__(self):  # the adjoint of the pickled (or copied) operator
        return _Adjoint, (self._op,)

    def __repr__(self) -> str:
        return f"{self._op!r}.T"


class NormalOperator(_OperatorBase):
    """The Gauss-Newton operator ``F^T W F`` with ``W`` diagonal, applied on the device.

    Parameters
    ----------
    op : BlockToeplitz
    weight : None, float, or (Nd, Nt) array
        The diagonal of ``W``; ``None`` means the identity.
    """

    def __init__(self, op: BlockToeplitz, weight: float | Array | None = None) -> None:
        self._op = op
        self._xp, self._device = op._xp, op._device
        self.dtype = op.dtype
        self.nt = op.nt
        self._n_in = self._n_out = op.nm
        xp = op._xp
        if isinstance(weight, np.ma.MaskedArray):  # its mask would be ignored, NaN under it too
            raise FFTMatvecTypeError(
                "weight is a masked array; pass weight.filled(...) or a plain ndarray")
        weight = _interop.asarray(weight, "weight")  # a DLPack producer: viewed (then copied)
        if weight is None:
            self._weight = None
        elif getattr(weight, "ndim", 0) == 0:  # a number, or a 0-d array
            w = _real_scalar(weight, "weight", f"a real number or an ({op.nd}, {op.nt}) array")
            if not math.isfinite(w) or w < 0:
                raise FFTMatvecValueError(
                    f"weight (a noise precision) must be finite and >= 0, got {weight!r}"
                )
            with op._on_device():
                self._weight = xp.full((op.nd, op.nt), w, dtype=op.dtype)
        else:
            wxp = backend.get_array_module(weight, name="weight")
            if wxp is not xp:
                raise FFTMatvecTypeError(
                    "weight must live on the same device as the operator (NumPy vs CuPy mismatch)"
                )
            if op._device is not None and weight.device.id != op._device.id:
                raise FFTMatvecValueError(
                    f"weight lives on GPU {weight.device.id} but the operator on GPU {op._device.id}"
                )
            if weight.shape != (op.nd, op.nt):
                raise FFTMatvecValueError(
                    f"weight must be a scalar or have shape ({op.nd}, {op.nt}), got {weight.shape}"
                )
            if weight.dtype.kind not in "fiu":
                raise FFTMatvecTypeError(f"weight must be real, got dtype {weight.dtype}")
            if not bool(xp.isfinite(weight).all()):
                raise FFTMatvecValueError("weight contains NaN or Inf values")
            if bool((weight < 0).any()):
                raise FFTMatvecValueError("weight (a noise precision) must be >= 0 everywhere")
            # a copy: a weight changed after construction must not change the operator
            with op._on_device():
                self._weight = xp.array(weight, dtype=op.dtype, order="C", copy=True)

    def _matmat(self, x, amax=None):
        weight = self._weight

        def product(op):  # the weight is applied inside the forward product's stage 5
            return op._apply(op._apply(x, adjoint=False, weight=weight, amax=amax), adjoint=True)

        guard = self._op._guard  # checks the whole product, in one precision
        return product(self._op) if guard is None else guard.run(product)

    _rmatmat = _matmat  # F^T W F is symmetric

    def __reduce__(self):  # the normal operator of the pickled (or copied) operator
        w = self._weight
        if w is not None and self._xp is not np:
            w = backend.cupy.asnumpy(w)
        return _normal_operator, (self._op, w)

    def __repr__(self) -> str:
        return f"NormalOperator({self._op!r})"


def _normal_operator(op, weight) -> NormalOperator:
    """``op.normal(weight)`` with ``weight`` a NumPy array or None, moved to ``op``'s device
    (the loader of a pickled :class:`NormalOperator`)."""
    if weight is not None and op._xp is not np:
        with op._on_device():
            weight = op._xp.asarray(weight)
    return NormalOperator(op, weight)


# ------------------------------------------------------------------------------------------
# The operator
# ------------------------------------------------------------------------------------------
# ``BlockToeplitz(_plan_env=...)`` left out: the overrides of FFTMATVEC_PLAN are read from the
# environment at construction
_FROM_ENVIRONMENT = object()


class BlockToeplitz(_OperatorBase):
    """Block lower-triangular Toeplitz operator ``F`` of shape ``(Nd*Nt, Nm*Nt)``.

    Parameters
    ----------
    kernel : (Nd, Nm, Nt) real array
        First block column: ``kernel[i, j, l]`` is the response of sensor ``i`` at lag ``l`` to
        a unit impulse of parameter ``j``. A NumPy array gives a CPU operator, a CuPy array a
        GPU operator on that array's device; a DLPack producer (a torch tensor, a JAX array)
        is viewed as one of them without a copy. :meth:`from_file` reads one from a file.
    precision : str or PrecisionConfig, default ``"ddddd"``
        One letter per stage (see :class:`~fftmatvec.precision.PrecisionConfig`).
    dtype : float64 (default) or float32
        Interface dtype of inputs and outputs, whatever precision the stages run in.
    fft_len : int, optional
        FFT length ``L`` (at least ``2*Nt - 1``); by default :func:`fft_length`. A longer
        ``L`` stores more frequencies but may suit the device's FFT library better.
    rtol : float, optional
        Only with ``precision="auto"`` (default 1e-6): the fastest configuration of the tuning
        tables (or the a-priori model) whose error is within ``rtol`` (docs/tuning.md), checked
        at construction on this kernel (one product against ``ddddd`` on a sample of sensor
        rows); where it fails, the next point of the table's front, as ``precision_source``
        says.
    check_every : int, optional
        Guard: compare one application in ``check_every`` with ``ddddd`` and move to the next more
        accurate front point, with a warning, when the error exceeds ``rtol``. Every
        application counts: products, adjoints, batches and those of :meth:`normal`. Threads
        may share the operator: a product runs in one precision, and is checked in it.
    plan : mapping, optional
        Planner overrides; wins over a tuning table's plan.

    Attributes
    ----------
    nd, nm, nt : int
        Sensors, parameters, time steps.
    fft_len : int
        FFT length ``L``: the one given, else the smallest fast length ``>= 2*Nt - 1``.
    nf : int
        Number of stored frequencies, ``L//2 + 1``.
    shape : (int, int)
        ``(Nd*Nt, Nm*Nt)``.
    precision_source : str
        ``"explicit"``, ``"model"``, or the tuning table's file and entry; with the points
        that ``precision="auto"``'s check on this kernel passed over, and their errors.

    Raises
    ------
    FFTMatvecTypeError
        ``kernel`` is not a NumPy/CuPy array, or is complex/integer/masked; bad ``dtype``;
        ``rtol`` not a real number, ``fft_len`` or ``check_every`` not an integer (Python or
        NumPy scalars and 0-d arrays are taken; bools and strings are not).
    FFTMatvecValueError
        ``kernel`` is not 3-D, has an empty dimension, or contains NaN/Inf; bad precision.

    Notes
    -----
    ``Khat = rfft(K, n=L)`` is computed once, in float64, and stored only in stage 3's
    precision. Vectors are space-outer, time-inner (SOTI): ``m`` is ``(Nm, Nt)``.

    The kernel is scaled once by a power of two and each input by another, from their largest
    magnitudes where these lie outside ``[2**-32, 2**32)`` (``ddddd``: ``[2**-256, 2**256)``),
    and the output back (exact in binary; ``fftmatvec/_scaling.py``): no stage over- or
    underflows for any finite kernel and input, and the error stays within the precision's
    bound, relative to the norm of the product's terms ``|F| |x|`` (the output's norm where
    they do not cancel). With ``h`` and kernel columns whose magnitudes spread over more than
    ``2**12``, each parameter column is scaled as well, undone on the input's rows in stage 1
    (forward) or the output's in stage 5 (adjoint). Entries far below a vector's (or the
    kernel's) own largest (about ``2**-90`` of it) may still be flushed in float32: their share
    of the output lies far below float32's rounding, but an output entry made only of them
    loses its relative accuracy.
    """

    def __init__(self, kernel: Array, precision: str | PrecisionConfig = "ddddd", *,
                 dtype: DTypeLike = None, fft_len: int | None = None, rtol: float | None = None,
                 check_every: int | None = None, plan: Mapping[str, str] | str | None = None,
                 _share=None, _tuned=None, _plan_env=_FROM_ENVIRONMENT) -> None:
        kernel = _interop.asarray(kernel, "kernel")  # a DLPack producer: viewed, not copied
        if _share is None:  # before the kernel is read
            _memory.check_khat_fits(kernel, precision, fft_len)
        xp = _check_kernel(kernel)
        self._xp = xp
        self.dtype = _check_dtype(dtype)
        self.nd, self.nm, self.nt = (int(n) for n in kernel.shape)
        if rtol is not None:  # any real number, as a float
            rtol = _real_scalar(rtol, "rtol")
        precision, self.precision_source, self._front, self._tuned_plan = _resolve_precision(
            xp, precision, rtol, self.nm, self.nd, self.nt)
        if _tuned is not None:  # a point of "auto"'s front, checked: the plan tuned for it
            self._tuned_plan = _tuned
        if self._front is not None and _share is None and precision != "ddddd":
            # "auto": the pick checked on this kernel; the operator that passed lends its Khat
            precision, self._tuned_plan, _share, note = _check_pick(
                xp, kernel, precision, self._front, rtol, self.dtype, fft_len, plan,
                self._tuned_plan)
            self.precision_source += note
        self.rtol = rtol
        self.precision = PrecisionConfig(precision)
        self._guard = _Guard(self, check_every) if check_every is not None else None
        # the planner's overrides, read once, here: the user's plan= wins over FFTMATVEC_PLAN
        # (as it is now; a derived operator keeps its parent's), which wins over the tuned
        # table's (fftmatvec.gpu.planning.Overrides)
        self._plan_user = parse_overrides(plan, "plan")
        self._plan_tuned = parse_overrides(self._tuned_plan, "the tuning table's plan")
        if _plan_env is _FROM_ENVIRONMENT:  # else an unpickled operator's, as it was read
            _plan_env = _share._plan_env if _share is not None else os.environ.get(_PLAN_ENV)
        self._plan_env = _plan_env
        self._overrides = Overrides.resolve(self._plan_user, self._plan_env, self._plan_tuned)
        self.plan_overrides = {**self._plan_tuned, **self._plan_user}
        # (adjoint, k, input dtype, weighted, precision) -> the Executor of that product, made
        # at its first product or plan() (fftmatvec.gpu.executor); a precision switch drops them
        self._executors: dict = {}
        self._executors_lock = threading.Lock()
        self._n_in, self._n_out = self.nm, self.nd
        self.fft_len = _check_fft_len(fft_len, self.nt)
        self.nf = self.fft_len // 2 + 1
        self._kernel = kernel
        # a fingerprint of the kernel's bytes: a derived operator (with_precision) must equal
        # the one built from the kernel as it was here, so it refuses a changed kernel
        self._kernel_print = _share._kernel_print if _share is not None else _fingerprint(xp, kernel)
        # Power-of-two scaling (fftmatvec/_scaling.py): Khat is stored times 2**-_kexp and
        # each input scaled from its largest magnitude where they lie outside the window of
        # the precision (_window), so that no stage over- or underflows; with `h` and kernel
        # columns of spread magnitudes, also per parameter column (_cols: their exponents on
        # the host; _cols_xp: on the operator's array module, as the products take them).
        # _scaled: the products scale (scripts/bench_check.py switches it off to time them
        # without; column scales are applied whatever it says)
        self._scaled = True
        if (self.precision.letters == "ddddd" and kernel.dtype.itemsize > 8
                and np.abs(kernel).max() > np.finfo(np.float64).max):
            # a long double beyond float64 in ddddd, the precision a user picks to compute with
            # the kernel as given: refused, as it always was (a reduced precision scales it)
            raise FFTMatvecValueError(
                "kernel holds values too large for float64 (ddddd computes with the kernel's "
                "float64 values; a precision with a reduced stage scales it)")
        self._cols = _scaling.column_exponents(xp, kernel) if self.precision.half else None
        self._window = 0 if self._cols is not None else _scaling.window(self.precision.letters)
        self._cols_xp = None
        if self._cols is not None:
            with contextlib.nullcontext() if xp is np else kernel.device:
                self._cols_xp = self._cols[:, None] if xp is np else xp.asarray(self._cols)
        self._kexp = (_share._kexp if _share is not None and _share._window == self._window
                      else _scaling.kernel_exponent(xp, kernel, self._window))
        # the GPU the kernel lives on: products run there whatever device is current
        self._device = None if xp is np else kernel.device
        # One-vector products that a fused product served before (_one): (adjoint, shape,
        # dtype) -> (product or None, output shape). Only CuPy arrays look here.
        self._one_paths: dict = {}
        self._one_type = None if xp is np else backend.cupy.ndarray
        self._device_id = None if xp is np else kernel.device.id
        self._engine = None
        if (_share is not None and _share.precision.letters[2] == self.precision.letters[2]
                and _share.fft_len == self.fft_len and _share._kexp == self._kexp
                and _share._overrides == self._overrides):
            self._engine = _share._engine
        if self._engine is None:
            with self._on_device():
                self._engine = self._make_engine()
                self._setup_khat()

    @classmethod
    def from_file(cls, path: PathLike, precision: str | PrecisionConfig = "ddddd", *,
                  device: Literal["cpu", "gpu"] = "cpu",
                  rows: slice | Sequence[int] | Sequence[bool] | None = None,
                  cols: slice | Sequence[int] | Sequence[bool] | None = None,
                  **kwargs: Any) -> BlockToeplitz:
        """The operator of a kernel stored in a file.

        Parameters
        ----------
        path : str or os.PathLike
            An FFTMatvec matrix directory or a native ``.h5`` file
            (:func:`fftmatvec.io.load_matrix`).
        precision : str or PrecisionConfig, default ``"ddddd"``
        device : {"cpu", "gpu"}, default "cpu"
            Where the operator lives: NumPy, or CuPy on the current GPU.
        rows, cols : optional
            Block rows (sensors) and columns (parameters) to read, as in
            :func:`fftmatvec.io.load_matrix`; all by default.
        **kwargs
            The other arguments of :class:`BlockToeplitz` (``dtype``, ``fft_len``, ...).

        Raises
        ------
        FFTMatvecFileError
            A missing, malformed or inconsistent matrix (see :func:`fftmatvec.io.load_matrix`).
        FFTMatvecValueError
            ``device`` is not "cpu" or "gpu", or "gpu" where no GPU is usable.
        """
        if device not in ("cpu", "gpu"):
            raise FFTMatvecValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
        if device == "gpu" and not backend.gpu_available():
            raise FFTMatvecValueError(
                "device='gpu': no GPU is available (CuPy is missing or sees no device)")
        from . import io

        kernel = io.load_matrix(path, rows=rows, cols=cols)
        if device == "gpu":
            kernel = backend.cupy.asarray(kernel)
        return cls(kernel, precision, **kwargs)

    # ---- setup ---------------------------------------------------------------------------
    def _make_engine(self):
        if self._xp is not np:
            from . import kernels

            if kernels.available():
                from .gpu.engine import KernelEngine

                return KernelEngine(self.precision, self.nd, self.nm, self.nf, self.nt,
                                    self.fft_len, self._overrides)
        return MatmulEngine(self._xp, self.precision, self.nd, self.nm, self.nf, self.nt, self.fft_len)

    def _setup_khat(self):
        """Compute ``Khat`` in float64, a block of rows at a time to bound temporary memory."""
        xp = self._xp
        per_row = self.nm * (self.fft_len * 8 + self.nf * 16) * 2
        rows = max(1, min(self.nd, (512 * 2**20) // max(per_row, 1)))
        for i0 in range(0, self.nd, rows):
            blk = _scaling.scale_kernel(xp, self._kernel[i0 : i0 + rows], self._kexp)
            if self._cols is not None:  # column j times 2**-c[j] >= 1: exact
                blk = blk * xp.asarray(np.ldexp(1.0, -self._cols))[None, :, None]
            khat = rfft(xp, blk, self.fft_len)  # (c, Nm, Nf) complex128
            self._engine.store_rows(i0, khat)
            del khat

    def with_precision(self, precision: str | PrecisionConfig) -> BlockToeplitz:
        """A new operator in another precision, sharing the kernel and, when stage 3's letter
        is unchanged, the stored ``Khat``."""
        if _fingerprint(self._xp, self._kernel) != self._kernel_print:
            raise FFTMatvecValueError(
                "kernel was changed after this operator was built; with_precision derives from "
                "that kernel, so build a new BlockToeplitz from the changed kernel instead"
            )
        return BlockToeplitz(self._kernel, precision, dtype=self.dtype, fft_len=self.fft_len,
                             plan=self._plan_user or None, _share=self)

    def plan(self, k: int = 1, adjoint: bool = False) -> Plan:
        """The :class:`~fftmatvec.gpu.plan.Plan` a product of ``k`` right-hand sides will run
        (``print`` it for the words): fused or stage by stage, the FFTs, stage 3's kernels with
        their tiles and split-K, CUDA-graph replay, and the overrides in effect. The overrides
        are those of the operator's construction (``plan=``, ``FFTMATVEC_PLAN`` as it was then,
        the tuning table's): a later change of the environment changes neither the plan nor
        what runs. It is the plan of the :class:`~fftmatvec.gpu.executor.Executor` that runs
        the products of ``k`` right-hand sides in the operator's dtype (made here if no product
        made it yet): :func:`~fftmatvec.gpu.planning.make_plan` of the product, the engine's
        device and rules, and those overrides."""
        k = _integer(k, "k")
        if k < 1:
            raise FFTMatvecValueError(f"k must be a positive integer, got {k}")
        return self._executor(bool(adjoint), int(k), self.dtype, False).plan

    def _executor(self, adjoint: bool, k: int, in_dtype, weighted: bool):
        """The :class:`~fftmatvec.gpu.executor.Executor` of a product of ``k`` right-hand sides
        of ``in_dtype`` (weighted or not), made once: its plan from
        :func:`~fftmatvec.gpu.planning.make_plan` with the engine's device and rules and the
        overrides of the operator's construction."""
        key = (adjoint, k, in_dtype, weighted, self.precision.letters)
        hit = self._executors.get(key)
        if hit is not None:
            return hit
        from .gpu.executor import Executor
        from .gpu.plan import Plan
        from .gpu.planning import Problem

        with self._executors_lock:  # one executor a product, whichever thread comes first
            hit = self._executors.get(key)
            if hit is not None:
                return hit
            eng = self._engine
            problem = Problem(self.nd, self.nm, self.nt, self.fft_len, k, adjoint,
                              self.precision.letters, in_dtype, self.dtype, weighted)
            if eng.name != "kernels":
                plan = Plan("adjoint" if adjoint else "forward", k, self.precision.letters,
                            "cpu" if self._xp is np else "stages",
                            device="CPU" if self._xp is np else "GPU (CuPy, no package kernels)",
                            overrides=self._overrides.items, problem=problem)
                hit = Executor(plan, eng)
            else:
                from .gpu.planning import make_plan, make_plan_without_callbacks

                overrides = self._overrides
                with self._on_device():
                    plan = make_plan(problem, eng.device, eng.rules, overrides)
                    hit = Executor(plan, eng, replan=lambda why: make_plan_without_callbacks(
                        problem, eng.device, eng.rules, overrides, why))
            self._executors[key] = hit
        return hit

    def normal(self, weight: float | Array | None = None) -> NormalOperator:
        """The Gauss-Newton operator ``F^T W F`` (``W`` diagonal: scalar or ``(Nd, Nt)``)."""
        return NormalOperator(self, weight)

    def release_buffers(self) -> None:
        """Free the intermediate arrays that products keep from one call to the next.

        On NVIDIA a product holds its FFT output, stage-3 output and split-K workspace per
        stream where together they take at most a quarter of ``Khat``'s bytes (or 64 MiB), so
        that a call spends no host time on allocations before its first kernel. They are made
        again by the next product; ``cupy.get_default_memory_pool().free_all_blocks()`` frees
        them only after this call."""
        for executor in list(self._executors.values()):
            executor.release()

    @property
    def kernel_exponent(self) -> int:
        """``e``: the stored ``Khat`` is ``rfft(K) * 2**-e`` (and products rescale their output
        by it). 0 for kernels whose largest magnitude lies in ``[2**-32, 2**32)`` (``ddddd``:
        ``[2**-256, 2**256)``); else the largest magnitude is brought to ``[0.5, 1)`` so that
        no stage over- or underflows (always, for ``h`` with column scales)."""
        return self._kexp

    @property
    def khat_nbytes(self) -> int:
        """Bytes of the stored ``Khat`` (stage 3's storage precision)."""
        return self._engine.nbytes

    @property
    def engine(self) -> str:
        """Which stage-3 implementation runs: ``'matmul'`` or ``'kernels'``."""
        return self._engine.name

    def __repr__(self) -> str:
        dev = "cpu" if self._xp is np else "gpu"
        return (
            f"BlockToeplitz(nd={self.nd}, nm={self.nm}, nt={self.nt}, precision='{self.precision}', "
            f"dtype={self.dtype}, device={dev})"
        )

    # ---- pickle and deepcopy (multiprocessing and MPI send operators) ---------------------
    def __getstate__(self) -> dict:
        """What rebuilds this operator: its kernel as a NumPy array, and the choices made at
        construction (and by the guard since). ``Khat``, the engine, its plans and buffers are
        not pickled: they are rebuilt on load, on the GPU current there for a GPU operator
        (as CuPy arrays unpickle), by :meth:`__setstate__`."""
        if _fingerprint(self._xp, self._kernel) != self._kernel_print:
            raise FFTMatvecValueError(
                "kernel was changed after this operator was built; a pickled or copied operator "
                "is rebuilt from its kernel, so build a new BlockToeplitz from the changed "
                "kernel instead")
        guard = self._guard
        return {
            "kernel": self._kernel if self._xp is np else backend.cupy.asnumpy(self._kernel),
            "gpu": self._xp is not np,
            "precision": self.precision.letters,
            "dtype": self.dtype,
            "fft_len": self.fft_len,
            "plan": self._plan_user,
            "plan_env": self._plan_env,
            "tuned_plan": self._tuned_plan,
            "rtol": self.rtol,
            "precision_source": self.precision_source,
            "front": self._front,
            "check_every": None if guard is None else guard.every,
            "checked": 0 if guard is None else guard.count,
        }

    def __setstate__(self, state: dict) -> None:
        kernel = state["kernel"]
        if state["gpu"]:
            if not backend.gpu_available():
                raise FFTMatvecTypeError(
                    "this operator was pickled on a GPU: loading it needs CuPy and a GPU")
            kernel = backend.cupy.asarray(kernel)  # on the current device
        # the overrides as the pickled operator read them (FFTMATVEC_PLAN at its construction),
        # and the tuning table's plan that came with "auto"'s choice
        BlockToeplitz.__init__(self, kernel, state["precision"], dtype=state["dtype"],
                               fft_len=state["fft_len"], plan=state["plan"] or None,
                               _tuned=state["tuned_plan"], _plan_env=state["plan_env"])
        self.rtol, self.precision_source = state["rtol"], state["precision_source"]
        self._front = state["front"]
        if state["check_every"] is not None:
            self._guard = _Guard(self, state["check_every"])
            self._guard.count = state["checked"]

    def __deepcopy__(self, memo: dict) -> "BlockToeplitz":
        """A copy rebuilt from a copy of the kernel, on this operator's device."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        state = copy.deepcopy(self.__getstate__(), memo)
        with self._on_device():
            new.__setstate__(state)
        return new

    # ---- one vector: the fused product without the general path's overhead ---------------
    @_interop.accepts_arrays("m")
    def matvec(self, m: Array, *, check_finite: bool = True) -> Array:
        return self._one(m, adjoint=False, check_finite=check_finite)

    @_interop.accepts_arrays("d")
    def rmatvec(self, d: Array, *, check_finite: bool = True) -> Array:
        return self._one(d, adjoint=True, check_finite=check_finite)

    matvec.__doc__ = _OperatorBase.matvec.__doc__
    rmatvec.__doc__ = _OperatorBase.rmatvec.__doc__

    def _one(self, v, adjoint: bool, check_finite: bool = True):
        """One vector's product. Once the general path has served a CuPy vector of this shape
        and dtype through a fused product (NVIDIA), later ones go to that product directly:
        their checks shrink to the ones that can change between calls (the array's device and
        the current one, contiguity). A product waits for this host time before its first
        kernel (docs/benchmarks.md)."""
        # the guard sees every product; column scales take the general path
        known = type(v) is self._one_type and self._guard is None and self._cols is None
        if known:
            hit = self._one_paths.get((adjoint, v.shape, v.dtype))
            if hit is not None:
                product, y_shape = hit
                if product is None:
                    known = False  # the general path serves this shape and dtype
                elif (v.data.device_id == self._device_id and v.flags.c_contiguous
                      and backend.cupy.cuda.runtime.getDevice() == self._device_id):
                    if check_finite:  # queued, then checked: the device never waits
                        return _scaling.checked(
                            _scaling.ops_for(self._xp), v, "d" if adjoint else "m",
                            lambda a: self._fast_one(product, v, y_shape, a), fold=True)
                    return self._fast_one(product, v, y_shape, None)
        y = (_OperatorBase.rmatvec if adjoint else _OperatorBase.matvec)(
            self, v, check_finite=check_finite)
        if known:
            self._remember_one(v, adjoint, y.shape)
        return y

    def _fast_one(self, product, v, y_shape, amax):
        """The fused product of a remembered one-vector path, scaled where the input lies
        outside the precision's window (:func:`_scaling.run_scaled`). ``amax``: ``v``'s
        largest magnitude, which the product computes as it reads ``v`` where it has not been
        launched."""
        if not self._scaled:
            return product(v, y_shape, contiguous=True, amax=amax)
        ops = _scaling.ops_for(self._xp)
        if amax is None:
            amax = ops.measure(v, launch=False)
        return _scaling.run_scaled(ops, lambda x: product(x, y_shape, contiguous=True),
                                   v, amax, self._kexp,
                                   first=lambda x: product(x, y_shape, contiguous=True,
                                                           amax=amax), window=self._window,
                                   device_pass=self._overrides.get("scale_pass") == "1")

    def _remember_one(self, v, adjoint: bool, y_shape) -> None:
        """Record which path serves vectors like ``v`` (a CuPy array the general path has just
        accepted): the fused product, or None for the general path."""
        if not v.flags.c_contiguous:
            return  # copied first on the general path; a contiguous one may follow
        product = None
        if v.dtype in _INTERFACE_DTYPES:
            executor = self._executor(adjoint, 1, v.dtype, False)
            if executor.plan.path == "fused":
                product = executor.product
        self._one_paths[(adjoint, v.shape, v.dtype)] = (product, y_shape)

    # ---- the five stages -----------------------------------------------------------------
    # Each stage honours its letter of the precision string; the engine (chosen once, at
    # construction) supplies the leaf that runs it on the operator's device.
    def broadcast_and_pad(self, x: Array, out: Array | None = None,
                          scale_exp: int | Array = 0) -> Array:
        """Stage 1: cast ``x`` ``(k, n, Nt)`` to stage 1's precision and zero-pad time to ``L``.

        The kernel engine writes the padded array directly in stage 2's precision (the cast of
        the next stage fused in); each value is still rounded to stage 1's precision first.
        ``scale_exp``: multiply by ``2**scale_exp`` in the cast, or by ``2**scale_exp[j]`` on row
        ``j`` (an integer array ``(n, 1)``: a forward's column scales) (CPU engine only; a GPU
        operator scales its input before this stage)."""
        if getattr(scale_exp, "ndim", 0) or scale_exp:
            return self._engine.pad(x, self.precision, out=out, scale_exp=scale_exp)
        return self._engine.pad(x, self.precision, out=out)

    def fft(self, x: Array, out: Array | None = None) -> Array:
        """Stage 2: real-to-complex FFT along time in stage 2's precision: ``(k, n, Nf)``."""
        return self._engine.fft(x.astype(self.precision.real_dtype("fft"), copy=False), out=out)

    def sbgemv(self, xhat: Array, adjoint: bool = False, out: Array | None = None,
               workspace: Any = None, xhat_scaled: bool = False) -> Array:
        """Stage 3: per-frequency product with ``Khat`` (``Khat^H`` for the adjoint), returned in
        stage 4's precision (the cast fused in). The stored ``Khat`` is scaled by
        ``2**-kernel_exponent`` (:attr:`kernel_exponent`; the products undo it).
        ``xhat_scaled``: an adjoint's input already multiplied by the float16 row scales (the
        GPU's FFT store callback does so)."""
        return self._engine.apply(
            xhat, adjoint, self.precision.complex_dtype("ifft"), out=out, workspace=workspace,
            xhat_scaled=xhat_scaled,
        )

    def ifft(self, yhat: Array, out: Array | None = None) -> Array:
        """Stage 4: complex-to-real inverse FFT of length ``L`` in stage 4's precision."""
        cd = self.precision.complex_dtype("ifft")
        return self._engine.ifft(yhat.astype(cd, copy=False), out=out)

    def unpad_and_reduce(self, y: Array, weight: Array | None = None, out: Array | None = None,
                         exponent: int | Array = 0) -> Array:
        """Stage 5: keep the first ``Nt`` samples, round to stage 5's precision, return in the
        interface dtype, times the diagonal ``weight`` ``(n, Nt)`` if given (the normal
        operator). (A distributed operator also sums partial outputs here.) ``exponent``:
        multiply by ``2**exponent`` after the rounding, before the weight, or by
        ``2**exponent[j]`` on row ``j`` (an integer array ``(n, 1)``: an adjoint's column
        scales) (CPU engine only)."""
        if getattr(exponent, "ndim", 0) or exponent:
            return self._engine.unpad(y, self.precision, self.nt, self.dtype, weight=weight,
                                      out=out, exponent=exponent)
        return self._engine.unpad(y, self.precision, self.nt, self.dtype, weight=weight, out=out)

    def _apply(self, x, adjoint: bool, weight=None, amax=None):
        """The product of ``x`` ``(k, n, Nt)``, scaled by powers of two: on the CPU inside the
        casts of stages 1 and 5; on a GPU the product runs on ``x`` as given and again on a
        scaled ``x`` only where its largest magnitude lies outside the precision's window
        (``[2**-32, 2**32)``, ``ddddd``: ``[2**-256, 2**256)``; :func:`_scaling.run_scaled`).
        With column scales (``h``), forward input row ``j`` and adjoint output row ``j`` are
        also multiplied by ``2**c[j]`` (on a GPU: :func:`_scaling.run_columns`). ``amax``:
        ``x``'s largest magnitude where the caller has it (a float, or a device measure)."""
        with self._on_device():
            ops = _scaling.ops_for(self._xp)
            cols = self._cols_xp
            if not self._scaled and cols is None:
                return self._run_stages(x, adjoint, weight)
            if ops.host:
                if cols is not None and not adjoint:  # stage 1's magnitude: x's rows scaled
                    amax = float(np.ldexp(np.abs(x).max(axis=(0, 2)), cols[:, 0]).max())
                elif amax is None:
                    amax = ops.measure(x)
                s = _scaling.scale_exponent(amax, x.dtype.itemsize, self._window)
                in_exp, out_exp = s, self._kexp - s
                if cols is not None:
                    if adjoint:
                        out_exp = out_exp + cols
                    else:
                        in_exp = in_exp + cols
                return self._run_stages(x, adjoint, weight, in_exp, out_exp)
            run = lambda v: self._run_stages(v, adjoint, weight)  # noqa: E731
            if cols is not None:
                return _scaling.run_columns(ops, run, x, amax, self._kexp, cols, adjoint)
            return _scaling.run_scaled(ops, run, x, amax, self._kexp, window=self._window,
                                       device_pass=self._overrides.get("scale_pass") == "1")

    def _run_stages(self, x, adjoint: bool, weight=None, in_exp=0, out_exp=0):
        """The product's executor run on ``x``: its plan's path (a graph replay, the fused
        product, or the five stages); ``in_exp`` / ``out_exp`` (CPU): the powers of two of the
        input's scale and of the output's."""
        executor = self._executor(adjoint, x.shape[0], x.dtype, weight is not None)
        return executor(x, weight, in_exp, out_exp)

    def _matmat(self, x, amax=None):
        if self._guard is None:
            return self._apply(x, adjoint=False, amax=amax)
        return self._guard.run(lambda op: op._apply(x, adjoint=False, amax=amax))

    def _rmatmat(self, x, amax=None):
        if self._guard is None:
            return self._apply(x, adjoint=True, amax=amax)
        return self._guard.run(lambda op: op._apply(x, adjoint=True, amax=amax))


_PROBE_BYTES = 64 * 2**20  # most bytes of the float64 Khat that "auto"'s check builds


def _check_pick(xp, kernel, pick, front, rtol, dtype, fft_len, plan, tuned):
    """``precision="auto"``'s check of its pick on the user's own kernel.

    One product of the pick against ``ddddd`` on a random input whose row ``j`` is scaled by
    the inverse of kernel column ``j``'s largest magnitude (a power of two), so that every
    parameter's terms count alike, as where parameters in different units are balanced by the
    input. The reference is computed on a random sample of sensor rows, whose float64 ``Khat``
    takes at most :data:`_PROBE_BYTES` (one row at least), so that a large problem never holds
    a second full ``Khat``. The pick passes where its error on those rows, times the tables'
    safety factor, is within ``rtol``; else the next point of the front is tried, down to
    ``ddddd``. Both draw from a generator seeded by the kernel's bits, so a kernel always gets
    the same choice.

    Returns
    -------
    (precision, tuned plan, the operator that passed or None, a note for precision_source)
    """
    from .tuning import select
    from .tuning.sweep import device_info

    rtol = 1e-6 if rtol is None else float(rtol)
    nd, nm, nt = (int(n) for n in kernel.shape)
    fft_len = _check_fft_len(fft_len, nt)
    order = [p for p, _ in front]
    later = order[order.index(pick) + 1:] if pick in order else []
    candidates = list(dict.fromkeys([pick] + later + ["ddddd"]))
    rng = np.random.default_rng(_fingerprint(xp, kernel)[0])
    amax = _scaling.column_amax(xp, kernel)
    e = np.frexp(np.where((amax > 0) & np.isfinite(amax), amax, 1.0))[1]
    e = np.minimum(e.max() - e, 64)  # binary orders, >= 0 (within a float32 input's range)
    x = np.ldexp(rng.standard_normal((nm, nt)), e[:, None].astype(np.int32)).astype(dtype)
    per_row = nm * (fft_len // 2 + 1) * 16
    rows = np.sort(rng.choice(nd, size=max(1, min(nd, _PROBE_BYTES // per_row)), replace=False))
    arch = None
    with contextlib.nullcontext() if xp is np else kernel.device:
        x, rows_xp = xp.asarray(x), xp.asarray(rows)
        ref = BlockToeplitz(xp.ascontiguousarray(kernel[rows_xp]), "ddddd", dtype=dtype,
                            fft_len=fft_len).matvec(x)
        if not bool(xp.isfinite(ref).all()):  # a reference beyond float64's range judges nothing
            return pick, tuned, None, ""
        gave = []
        for q in candidates:
            if q != pick:
                if arch is None:
                    arch = device_info(xp)["arch"]
                tuned = select.point_plan(arch, "matvec", nm, nd, nt, 1, q)
            if q == "ddddd":
                op = None
                break
            op = BlockToeplitz(kernel, q, dtype=dtype, fft_len=fft_len, plan=plan,
                               _tuned=tuned)
            err = _scaling.relative_error(xp, op.matvec(x)[rows_xp], ref)
            if select.SAFETY * err <= rtol:
                break
            gave.append(f"{q} gave {err:.2g}")
            op = None  # its Khat freed before the next point's
    if not gave:
        return q, tuned, op, ""
    note = (f"; checked on this kernel: {', '.join(gave)} (x{select.SAFETY:g} above "
            f"rtol={rtol:g}), took {q}")
    return q, tuned, op, note


def _resolve_precision(xp, precision, rtol, nm, nd, nt):
    """``(precision string, source, front, plan)``: "auto" resolved from the tuning tables."""
    if rtol is not None:  # any real number, as a float (the distributed operator's too)
        rtol = _real_scalar(rtol, "rtol")
        if not (math.isfinite(rtol) and rtol > 0):
            raise FFTMatvecValueError(f"rtol must be positive and finite, got {rtol!r}")
    if not (isinstance(precision, str) and precision.strip().lower() == "auto"):
        if rtol is not None:
            raise FFTMatvecValueError(
                f"rtol is only for precision='auto', got precision={str(precision)!r} with rtol={rtol!r}")
        return precision, "explicit", None, None
    from .tuning import select
    from .tuning.sweep import device_info

    arch = device_info(xp)["arch"]
    rtol = 1e-6 if rtol is None else rtol
    p, src, plan, front = select.choose(arch, "matvec", nm, nd, nt, 1, rtol)
    _log.info("precision='auto' (rtol=%g) chose %s from %s", rtol, p, src)
    return p, src, front, plan


class _SwitchLock:
    """Many products at once, or one precision switch alone: a product holds the lock shared
    while it reads the operator's precision, engine and scales, so that a switch (which holds it
    alone) never changes them in the middle of a product. A waiting switch holds new products
    back, so that a stream of products cannot keep it waiting forever. (Plain methods, not
    context managers: a product pays two short critical sections and nothing more.)"""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._products = 0  # products holding the lock
        self._switching = False  # a switch holds the lock
        self._waiting = 0  # switches waiting for the products to finish

    def acquire_shared(self) -> None:
        with self._cond:
            while self._switching or self._waiting:
                self._cond.wait()
            self._products += 1

    def release_shared(self) -> None:
        with self._cond:
            self._products -= 1
            if not self._products:
                self._cond.notify_all()

    def acquire_alone(self) -> None:
        with self._cond:
            self._waiting += 1
            try:
                while self._switching or self._products:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._switching = True

    def release_alone(self) -> None:
        with self._cond:
            self._switching = False
            self._cond.notify_all()


class _Guard:
    """Compare one application in ``every`` with ``ddddd`` (sharing the kernel); past ``rtol``
    move to the next more accurate front point, with a warning.

    Thread-safe: a product runs in one precision from start to end (:class:`_SwitchLock`), its
    check compares and decides in the precision it ran in, and a switch happens once per
    precision however many threads find it wanting at once. On a GPU the checked products
    run one at a time (the engine's buffers serve one product at a time)."""

    def __init__(self, op, every):
        every = _integer(every, "check_every")
        if every < 1:
            raise FFTMatvecValueError(f"check_every must be positive, got {every}")
        self.op, self.every, self.count, self.ref = op, every, 0, None
        self._count_lock = threading.Lock()  # the count and the reference's construction
        self._switch_lock = _SwitchLock()

    def run(self, product):
        """``product(op)``, checked where due: ``product`` computes one application (a product,
        its adjoint or the normal operator's) on the operator it is given, which is this
        guard's operator and, for the check, the ``ddddd`` reference. Returns the operator's
        result, or the reference's where the operator's was above ``rtol``."""
        op, lock = self.op, self._switch_lock
        if op._xp is not np:
            # a GPU engine's buffers, plans and graphs serve one product at a time: the whole
            # check, the reference's product and a switch included, runs alone
            lock.acquire_alone()
            try:
                return self._checked(product, op, lock, alone=True)
            finally:
                lock.release_alone()
        return self._checked(product, op, lock, alone=False)

    def _checked(self, product, op, lock, alone: bool):
        """:meth:`run`'s body; ``alone``: the caller holds the lock alone, else it is taken
        shared for the product and alone for a switch."""
        if not alone:
            lock.acquire_shared()
        try:
            letters = op.precision.letters  # the precision ``y`` is computed in
            y = product(op)
            with self._count_lock:
                self.count += 1
                due = not self.count % self.every and letters != "ddddd"
                if due and self.ref is None:  # shares Khat and its engine where stage 3 is `d`
                    self.ref = BlockToeplitz(op._kernel, "ddddd", dtype=op.dtype,
                                             fft_len=op.fft_len, plan=op._plan_user or None,
                                             _share=op)
            ref = self.ref
        finally:
            if not alone:
                lock.release_shared()
        if not due:
            return y
        r = product(ref)
        err = _scaling.relative_error(op._xp, y, r)
        if math.isnan(err):  # a reference beyond float64's range never replaces the result
            return y
        tol = op.rtol if op.rtol is not None else 1e-6
        if err <= tol:  # (NaN, where ``y`` is not finite, is not)
            return y
        if not alone:
            lock.acquire_alone()
        try:
            if op.precision.letters == letters:  # else another thread has switched it already
                self._move_on(letters, err, tol)
        finally:
            if not alone:
                lock.release_alone()
        return r

    def _move_on(self, cur: str, err: float, tol: float) -> None:
        """Switch the operator from ``cur`` to the next more accurate front point."""
        op = self.op
        front = [p for p, _ in (op._front or [])]
        later = front[front.index(cur) + 1:] if cur in front else []
        nxt = later[0] if later else "ddddd"
        new = op.with_precision(nxt)
        old = op._engine
        op.precision, op._engine, op._one_paths = new.precision, new._engine, {}
        op._executors = {}  # the old precision's: their plans, products and graphs go with it
        op._kexp, op._window, op._cols, op._cols_xp = new._kexp, new._window, new._cols, new._cols_xp
        op.precision_source = f"{op.precision_source} (guard: {cur} -> {nxt})"
        if op._device is not None and old is not op._engine:
            # products queued on other streams may still read the old Khat: its memory goes
            # back to the pool only once they are done
            op._device.synchronize()
        del old
        # after the switch: where warnings are errors, the operator has moved on all the same
        _warnings.warn(f"precision {cur!r} gave a relative error {err:.3g} above rtol={tol:g}; "
                       f"moving to {nxt!r}")
