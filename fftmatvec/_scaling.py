"""Power-of-two scaling of the kernel and the input, and the input's finiteness check.

Reduced stages (``s``, ``h``) hold values in float32's range (about 1.2e-38 to 3.4e38; the float16
pairs of ``h`` are scaled per (sensor, frequency) by a float32). A kernel or an input far from
1 would over- or underflow there, and even in ``ddddd`` an input near float64's largest number
overflows in the FFT's sums while the product itself fits. So every configuration scales both by
powers of two, which is exact in binary:

* the kernel once at setup, by ``2**-kernel_exponent`` (:func:`kernel_exponent`);
* the input per product, by ``2**s`` with ``s`` from its largest magnitude
  (:func:`scale_exponent`), fused into stage 1's cast on the CPU;
* the output by ``2**(kernel_exponent - s)``.

A magnitude inside ``[2**-w, 2**w)`` is left as it is (exponent 0), so usual kernels and
inputs are computed exactly as without scaling; ``w`` is :data:`WINDOW` with any reduced stage,
:data:`WINDOW_DOUBLE` for ``ddddd`` (:func:`window`). Outside it the largest magnitude is
brought to ``[0.5, 1)``. Then every stage's values stay below ``n_in * Nt**2 * 2**(2*w)`` (far
below float32's 2**128, and float64's 2**1024, for any problem that fits in memory), and
entries down to about ``2**-90`` of the largest stay normal float32 numbers.

With ``h`` the float16 values of a (sensor, frequency) row share one scale, so a kernel whose
parameter columns differ in magnitude by more than float16's range (parameters in different
units) would lose its small columns. Where the columns' largest magnitudes spread over more
than ``2**COLUMN_SPREAD``, each column ``j`` is also scaled at setup by ``2**-c[j]``
(:func:`column_exponents`, ``c[j] <= 0``: every column brought to the largest one's binade);
since that scale is the same at every frequency, the product undoes it in the time domain:
forward, input row ``j`` times ``2**c[j]`` in stage 1's cast; adjoint, output row ``j`` times
``2**c[j]`` in stage 5's (on a GPU: in the input's scaling pass, and in the output's,
:func:`run_columns`). Columns below ``2**-COLUMN_RANGE`` of the largest are brought only that
far. Such an operator scales its kernel and every input to ``[0.5, 1)`` whatever their
magnitude (a window of 0; forward, the input's magnitude is taken after its column scales), so
the largest terms of every column stay far above float32's smallest normal number.

What one scale cannot do: a vector (or kernel) whose own entries span more than float32's range
(1e-30 next to 1e30, say) keeps its small entries only down to about ``2**-126`` of its largest
in a reduced stage; below, they are flushed. Their share of the output is far below float32's
rounding, so the error bound, relative to the output's norm, still holds; an output entry made
only of such entries loses its relative accuracy. No error is raised for it: after the scaling,
every finite kernel fits every stage, and a precision's bound is a normwise one. The same holds
for float16 rows (``h``) whose largest entry lies below about ``2**-111`` of the kernel's.
The normal operator's weight is applied to the forward half's output before that output is
rescaled, on a GPU (inside the engine's stage 5): a weight near the interface dtype's largest
number may overflow there.

The largest magnitude is one reduction; it also decides whether the input is finite, so the
check and the scale share it. On a GPU the host does not wait for the device before the
product is queued: one launch writes the magnitude straight into mapped pinned host memory
and an event is recorded behind it; the product runs on the input as given, and only then
does the host wait for that event (which completes long before the product), raise if the
input was not finite, and, for an input outside the window, run the product again on the
scaled input (:func:`run_scaled`; ``FFTMATVEC_PLAN="scale_pass=1"`` scales on the device
instead). Where a fused product's first kernel is the package's row FFT, that kernel computes
the magnitude as it reads the input (:meth:`DeviceOps.measure` with ``launch=False``): the
reduction costs no pass over the input and no launch of its own.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ._errors import FFTMatvecValueError

__all__ = ["WINDOW", "WINDOW_DOUBLE", "COLUMN_SPREAD", "COLUMN_RANGE", "window",
           "scale_exponent", "kernel_exponent", "column_amax", "column_exponents",
           "scale_kernel", "relative_error", "ops_for", "HostOps", "DeviceOps",
           "not_finite_error", "checked", "run_scaled", "run_columns"]

WINDOW = 32  # binary orders either side of 1 left unscaled with any reduced stage
WINDOW_DOUBLE = 256  # the same for ddddd: sums of products of two such values fit float64
COLUMN_SPREAD = 12  # binary orders of spread between kernel columns before `h` scales them
COLUMN_RANGE = 200  # most binary orders a column is scaled by (far beyond float32's range)
_WIDEN = r"""
__device__ double fm_widen(double x) { return x; }
__device__ double fm_widen(float x) {
    const unsigned int b = __float_as_uint(x);
    if ((b & 0x7f800000u) != 0u) return (double)x;
    const double m = ldexp((double)(b & 0x7fffffu), -149);  // zero or subnormal: exact
    return (b >> 31) ? -m : m;
}
"""
# exponents s for which 2**s is a normal number of the dtype (so x * 2**s is exact)
_NORMAL = {4: (-126, 127), 8: (-1022, 1023)}


def window(letters: str) -> int:
    """Binary orders either side of 1 that a configuration leaves unscaled: :data:`WINDOW`
    with any reduced stage, :data:`WINDOW_DOUBLE` for ``ddddd``."""
    return WINDOW_DOUBLE if letters == "ddddd" else WINDOW


def scale_exponent(a, itemsize: int = 8, window: int = WINDOW) -> int:
    """``s`` such that ``a * 2**s`` lies in ``[0.5, 1)``, or 0 where ``a`` (a largest
    magnitude) lies in ``[2**-window, 2**window)``, is zero, NaN or Inf; clamped so that
    ``2**s`` is a normal number of a float of ``itemsize`` bytes. The device kernels compute
    the same for :data:`WINDOW` (``_PREAMBLE``)."""
    a = float(a)
    if not (a > 0.0) or math.isinf(a) or 2.0 ** -window <= a < 2.0 ** window:
        return 0
    lo, hi = _NORMAL[itemsize]
    return min(hi, max(lo, -math.frexp(a)[1]))


def kernel_exponent(xp, kernel, window: int = WINDOW) -> int:
    """``e`` such that ``kernel * 2**-e`` has its largest magnitude in ``[0.5, 1)``, or 0 where
    that magnitude lies in ``[2**-window, 2**window)`` (a float64 or long double kernel: not
    clamped, :func:`scale_kernel` applies any exponent)."""
    hi, lo = kernel.max(), kernel.min()  # no temporary of the kernel's size (it is finite)
    if xp is not np:
        hi, lo = hi.get(), lo.get()
    amax = max(np.asarray(hi)[()], -np.asarray(lo)[()])
    if not (amax > 0) or not np.isfinite(amax) or 2.0 ** -window <= amax < 2.0 ** window:
        return 0
    return int(np.frexp(amax)[1])


def column_amax(xp, kernel) -> np.ndarray:
    """The largest magnitude of each parameter column ``kernel[:, j, :]``, ``(Nm,)`` on the
    host (float64; a long double kernel's above float64's range is Inf)."""
    hi = kernel.max(axis=(0, 2))  # no temporary of the kernel's size
    lo = kernel.min(axis=(0, 2))
    if xp is not np:
        hi, lo = hi.get(), lo.get()
    return np.maximum(np.asarray(hi, dtype=np.float64), -np.asarray(lo, dtype=np.float64))


def column_exponents(xp, kernel):
    """``c`` ``(Nm,)`` int32, ``c[j] <= 0``: ``kernel[:, j, :] * 2**-c[j]`` has its largest
    magnitude in the binade of the largest column's (down to ``-COLUMN_RANGE``; 0 for a zero
    column), or None where the nonzero columns' largest magnitudes lie within
    ``2**COLUMN_SPREAD`` of each other (the stored ``h`` values keep their range unscaled)."""
    amax = column_amax(xp, kernel)
    nonzero = amax > 0
    if not nonzero.any():
        return None
    e = np.frexp(np.where(nonzero, np.minimum(amax, np.finfo(np.float64).max), 1.0))[1]
    top, low = int(e[nonzero].max()), int(e[nonzero].min())
    if top - low <= COLUMN_SPREAD:
        return None
    c = np.where(nonzero, np.maximum(e - top, -COLUMN_RANGE), 0)
    return c.astype(np.int32)


def scale_kernel(xp, block, exponent: int):
    """``block * 2**-exponent`` in float64 (a long double block is scaled before its cast, so
    a kernel beyond float64's range but within its own keeps its values)."""
    if block.dtype.itemsize > 8:  # long double (NumPy only)
        return np.ldexp(block, -exponent).astype(np.float64)
    block = block.astype(np.float64, copy=False)
    if exponent == 0:
        return block
    if xp is np:
        return np.ldexp(block, -exponent)
    h = -exponent // 2  # two normal powers of two: |exponent| may exceed 1022
    return block * (2.0 ** h) * (2.0 ** (-exponent - h))


def relative_error(xp, y, ref) -> float:
    """``||y - ref|| / ||ref||`` as a host float, computed on both divided by ``ref``'s
    largest magnitude, so that products near float64's largest or smallest numbers neither
    over- nor underflow in the norms. Inf where ``y`` is not finite and ``ref`` is; NaN where
    ``ref`` is not finite; 0 where both are zero."""
    s = float(xp.abs(ref).max()) if ref.size else 0.0
    if not math.isfinite(s):
        return math.nan
    if not bool(xp.isfinite(y).all()):
        return math.inf
    if s == 0.0:
        return 0.0 if not bool(y.any()) else math.inf
    num = float(xp.linalg.norm((y / s - ref / s).ravel()))
    return num / float(xp.linalg.norm((ref / s).ravel()))


def not_finite_error(name: str) -> FFTMatvecValueError:
    return FFTMatvecValueError(
        f"{name} contains NaN or Inf values (pass check_finite=False to skip this check)"
    )


class HostOps:
    """NumPy: the largest magnitude is a host float; the check raises before the product."""

    host = True

    @staticmethod
    def measure(x) -> float:
        return float(np.abs(x).max())


_PREAMBLE = r"""
template <typename T> __device__ int fm_scale_exp(T a_) {
    // the exponent of fftmatvec._scaling.scale_exponent
    const double a = (double)a_;
    if (!(a > 0.0) || isinf(a) || (a >= ldexp(1.0, -WINDOW) && a < ldexp(1.0, WINDOW))) return 0;
    int e;
    frexp(a, &e);
    const int lo = sizeof(T) == 4 ? -126 : -1022, hi = sizeof(T) == 4 ? 127 : 1023;
    const int s = -e;
    return s < lo ? lo : (s > hi ? hi : s);
}
""".replace("WINDOW", str(WINDOW))


class _DeviceAmax:
    """The largest magnitude of an input, on its way to host memory.

    A launch computes its key (a float32's bits, or a float64's high word: ``amax_key``) and
    writes it straight into mapped pinned host memory
    (``amax_<dtype>`` or the row FFT of a fused product, ``hip_kernels/common.cuh``:
    ``amax_finish``: no memset before it, no copy after it); an event recorded behind that
    launch tells the host when it has landed. :meth:`value` waits for that event only: the
    product queued after it keeps the device busy. ``launch``: run ``amax_<dtype>`` over ``x``
    now; else the caller passes :meth:`fold`'s pointers to the kernel that reads ``x`` first
    and calls :meth:`record` after it."""

    __slots__ = ("ops", "slot", "recorded", "itemsize", "_value")

    def __init__(self, ops: "DeviceOps", x, launch: bool = True):
        self.ops = ops
        self.itemsize = x.dtype.itemsize
        self.slot = ops._take_slot()
        self.recorded = False
        self._value = None
        if launch:
            self.ensure(x)

    def ensure(self, x) -> None:
        """Launch ``amax_<dtype>`` over ``x`` now unless a launch has been recorded (a measure
        made with ``launch=False`` whose product does not compute it)."""
        if not self.recorded:
            stream = self.ops.cp.cuda.get_current_stream()
            self.ops.launch_amax(x, self.fold(), stream.ptr)
            self.record(stream)

    def fold(self) -> int:
        """The scratch pointer for the kernel that computes the magnitude (the result's
        pointer is in it: ``amax_finish``)."""
        return self.slot[3].data.ptr

    def record(self, stream) -> None:
        """Mark the magnitude's launch, just queued on ``stream`` (a CuPy stream)."""
        self.slot[2].record(stream)
        self.recorded = True

    def value(self) -> float:
        """The largest magnitude as a host float (waits for its launch once). NaN where no
        launch was recorded (a product that failed before its first kernel)."""
        if self._value is None:
            buf, _, event, _ = self.slot
            if not self.recorded:  # the slot may still be written: not given back
                self._value = math.nan
                return self._value
            event.synchronize()
            key = np.array([buf[0]], dtype=np.uint32)  # decoded on the host: exact
            if self.itemsize == 4:
                self._value = float(key.view(np.float32)[0])
            else:
                self._value = float((key.astype(np.uint64) << np.uint64(32)).view(np.float64)[0])
            self.ops._give_slot(self.slot)
        return self._value


class DeviceOps:
    """CuPy: every step is queued on the current stream; nothing waits for the device but
    :meth:`_DeviceAmax.value`."""

    host = False
    _THREADS = 256  # amax_<dtype>'s launch bound

    def __init__(self, cp):
        self.cp = cp
        self._local = threading.local()  # per thread and device: free slots
        self._blocks: dict = {}  # device id -> blocks of amax_<dtype>
        self._launches: dict = {}  # (device id, itemsize, size) -> its packed launch
        self._scale = cp.ElementwiseKernel(
            "X x, X a", "X y", "y = x * (X)ldexp(1.0, fm_scale_exp<X>(a))",
            "fftmatvec_scale_input", preamble=_PREAMBLE)
        self._unscale = cp.ElementwiseKernel(
            "X a, int32 k", "Y y", "y = (Y)ldexp((double)y, k - fm_scale_exp<X>(a))",
            "fftmatvec_unscale_output", preamble=_PREAMBLE)
        # CuPy compiles its kernels with float32 subnormals flushed to zero: a float32 is
        # widened through its bits, so a subnormal input keeps its value in the scale
        self._ldexp = cp.ElementwiseKernel(
            "X x, int32 k", "X y", "y = (X)ldexp(fm_widen(x), k)", "fftmatvec_ldexp",
            preamble=_WIDEN)
        # the same with an exponent per row of a (k, n, Nt) array: the kernel's column scales
        self._ldexp_rows = cp.ElementwiseKernel(
            "X x, raw int32 r, int32 e, int64 nt, int64 nrow", "X y",  # (n, i: CuPy's names)
            "y = (X)ldexp(fm_widen(x), e + r[(i / nt) % nrow])", "fftmatvec_ldexp_rows",
            preamble=_WIDEN)

    def measure(self, x, launch: bool = True) -> _DeviceAmax:
        """``x``'s largest magnitude (:class:`_DeviceAmax`), computed now where ``launch``."""
        return _DeviceAmax(self, x, launch)

    def launch_amax(self, x, scratch: int, stream: int) -> None:
        """Queue ``amax_<dtype>`` over ``x`` through ``scratch`` (:meth:`_DeviceAmax.fold`)."""
        from . import kernels

        cp = self.cp
        if not x.flags.c_contiguous:
            x = cp.ascontiguousarray(x)
        if x.dtype.itemsize not in (4, 8):
            raise TypeError(f"the largest magnitude takes float32 or float64, got {x.dtype}")
        key = (x.data.device_id, x.dtype.itemsize, x.size)
        launch = self._launches.get(key)
        if launch is None:
            per = self._blocks.get(key[0])
            if per is None:
                sms = cp.cuda.Device(key[0]).attributes["MultiProcessorCount"]
                per = self._blocks[key[0]] = 8 * sms
            blocks = max(1, min(per, -(-x.size // self._THREADS)))
            fn = kernels.get_function("amax_f32" if x.dtype.itemsize == 4 else "amax_f64")
            if len(self._launches) >= 64:
                self._launches.clear()
            launch = self._launches[key] = kernels.PackedLaunch(
                fn, (blocks,), (self._THREADS,), 0, (None, np.int64(x.size), None))
        launch(stream, x.data.ptr, scratch)

    def device_amax(self, x):
        """The largest magnitude of ``x`` as a 0-d device array (NaN if ``x`` holds one)."""
        return self.cp.abs(x).max()

    def scale(self, x, a):
        """A new C-contiguous ``x * 2**s``, ``s`` from the 0-d device array ``a``
        (:func:`scale_exponent`, computed on the device)."""
        return self._scale(x, a)

    def unscale(self, y, a, kexp: int):
        """``y *= 2**(kexp - s)`` in place, ``s`` from ``a`` on the device (``ldexp``: any
        exponent, one rounding)."""
        self._unscale(a, np.int32(kexp), y)
        return y

    def ldexp(self, x, k: int, out=None, rows=None):
        """``x * 2**k`` (a host exponent; one rounding), into ``out`` where given; ``rows``:
        times ``2**(k + rows[j])`` on row ``j`` of ``x`` ``(k, n, Nt)`` (an int32 device array
        ``(n,)``)."""
        if rows is not None:
            args = (x, rows, np.int32(k), np.int64(x.shape[-1]), np.int64(x.shape[-2]))
            return self._ldexp_rows(*args) if out is None else self._ldexp_rows(*args, out)
        if out is None:
            return self._ldexp(x, np.int32(k))
        return self._ldexp(x, np.int32(k), out)

    def _take_slot(self):
        """(result: a 32-bit word in mapped pinned host memory, its device pointer, an event,
        scratch: on the current device, two zero words and the result's device pointer)."""
        free = self._free()
        if free:
            return free.pop()
        cp = self.cp
        rt = cp.cuda.runtime
        mem = cp.cuda.PinnedMemory(8, rt.hostAllocMapped | rt.hostAllocPortable)
        buf = np.ndarray((1,), np.uint32, buffer=cp.cuda.PinnedMemoryPointer(mem, 0))
        # unified addressing: the host pointer of mapped memory is its device pointer
        scratch = cp.zeros(4, dtype=np.uint32)
        scratch[2:].view(np.uint64)[...] = mem.ptr
        return (buf, mem.ptr, cp.cuda.Event(block=False, disable_timing=True), scratch)

    def _give_slot(self, slot) -> None:
        self._free().append(slot)

    def _free(self) -> list:
        """This thread's free slots for the current device."""
        slots = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = {}
        return slots.setdefault(self.cp.cuda.runtime.getDevice(), [])


_DEVICE_OPS: list = []
_LOCK = threading.Lock()


def ops_for(xp):
    """:class:`HostOps` for NumPy, the (one) :class:`DeviceOps` for CuPy."""
    if xp is np:
        return HostOps
    if _DEVICE_OPS:
        return _DEVICE_OPS[0]
    with _LOCK:
        if not _DEVICE_OPS:
            _DEVICE_OPS.append(DeviceOps(xp))
        return _DEVICE_OPS[0]


def checked(ops, x, name: str, run, fold: bool = False):
    """``run(a)`` with ``a`` the largest magnitude of ``x`` (``ops.measure``), raising if ``x``
    is not finite: before the product on the host; on a device after queueing it, once the
    reduction's value is back (no result is returned then). ``fold``: on a device, ``run``
    computes the magnitude in the product's first kernel (or launches it,
    :meth:`_DeviceAmax.ensure`)."""
    if ops.host:
        a = ops.measure(x)
        if not math.isfinite(a):
            raise not_finite_error(name)
        return run(a)
    a = ops.measure(x, launch=not fold)
    try:
        y = run(a)
    finally:
        v = a.value()  # also after a failed launch: the value has landed, or is NaN
    if not math.isfinite(v):
        raise not_finite_error(name)
    return y


def run_scaled(ops, run, x, a, kexp: int, first=None, window: int = WINDOW,
               device_pass: bool = False):
    """``run(x')`` on a GPU, with the input and the output scaled (kernel exponent ``kexp``).

    By default the product is queued on ``x`` as it is; then the host waits for the
    reduction's value ``a`` (queued before the product, so the device stays busy), and only an
    input outside ``[2**-WINDOW, 2**WINDOW)`` is run again, scaled: usual inputs cost no pass
    over ``x`` beyond the reduction, extreme ones two products. The output is rescaled where
    the exponent is not 0 (a pass over the output). ``a``: a :class:`_DeviceAmax`, or None.
    ``first``: the first run on ``x`` as given, where it differs from ``run`` (a product that
    computes ``a`` as it reads ``x``). ``window``: the operator's (:func:`window`; the device
    pass uses :data:`WINDOW`, exact as well). ``device_pass``: the operator's plan key
    ``scale_pass=1`` (read once, at its construction): scale every input by an element-wise
    pass with the exponent computed on the device, and rescale the output, instead.
    """
    if device_pass:
        if a is not None:
            a.ensure(x)
        dev = ops.device_amax(x)
        return ops.unscale(run(ops.scale(x, dev)), dev, kexp)
    if a is None:
        a = ops.measure(x)
    y = (first or run)(x)
    s = scale_exponent(a.value(), x.dtype.itemsize, window)
    if s:
        y = run(ops.ldexp(x, s))
    e = kexp - s
    return ops.ldexp(y, e, out=y) if e else y


def run_columns(ops, run, x, a, kexp: int, rows, adjoint: bool):
    """``run(x')`` on a GPU for a kernel with column scales (:func:`column_exponents`, ``rows``
    on the device), run once on an input whose largest magnitude is brought to ``[0.5, 1)``;
    the host waits for that magnitude before the product. Forward, a pass multiplies input
    row ``j`` by ``2**rows[j]`` first and the magnitude is that of its result; adjoint, ``a``
    (a :class:`_DeviceAmax` of ``x``, or None) gives it, and the output's rescale multiplies
    its row ``j`` by ``2**rows[j]``."""
    if adjoint:
        if a is None:
            a = ops.measure(x)
        else:
            a.ensure(x)
        s = scale_exponent(a.value(), x.dtype.itemsize, 0)
        y = run(ops.ldexp(x, s) if s else x)
        return ops.ldexp(y, kexp - s, out=y, rows=rows)
    xs = ops.ldexp(x, 0, rows=rows)
    s = scale_exponent(ops.measure(xs).value(), x.dtype.itemsize, 0)
    if s:
        xs = ops.ldexp(xs, s, out=xs)
    y = run(xs)
    e = kexp - s
    return ops.ldexp(y, e, out=y) if e else y
