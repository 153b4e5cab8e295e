"""The FNO layer's transforms on the package's FFT kernels (``hip_kernels/fno.cuh``): the last
axis (:class:`LastAxis`) and the last two axes at once (:class:`Plane`).

The DFT-product chain (:mod:`._dft`) applies the truncated transform of the last axis as a GEMM
with a ``(N, 2m)`` matrix: ``4 N m`` flops per row, which on large grids and many modes is most
of the layer's time (GEMMs of that shape run well below the float32 peak). The row FFT
kernels of the operator (:mod:`fftmatvec.gpu.rowfft`) transform a row in shared memory for the
bytes it moves; here they keep only the ``m`` bins the layer needs, in the chain's layout (the
``m`` real parts, then the ``m`` imaginary parts), with a real scale per bin. A
:class:`LastAxis` takes the place of one of the four matrices of the last axis (forward
analysis, forward synthesis and their adjoints in the backward) and has its ``shape``.

A :class:`Plane` does the same for the last two axes of a plane (one block a plane): the rows'
real FFTs and the kept columns' complex FFTs in shared memory between one read of the plane and
one write of its modes (and back), where the chain runs two GEMMs and goes through memory
between them. It takes the place of the chain's first two transforms (or last two).

They run in float32 on CuPy arrays and on CUDA/ROCm tensors of PyTorch (zero-copy, on the
current stream), for lengths whose complex FFT is 5-smooth and fits a block's shared memory;
:func:`fftmatvec.fno._plan.fno_rows` and :func:`~fftmatvec.fno._plan.fno_plane` say where
they are taken.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from .. import backend, kernels
from ..gpu import rowfft as _rowfft

#: Launches kept per transform, one per number of rows (a layer sees a few batch sizes); beyond
#: that the oldest made is dropped.
MAX_LAUNCHES = 16
#: Bytes of rows a block's buffer holds by default (at least one row; the sweep behind it:
#: docs/benchmarks.md).
ROWS_BYTES = 8192

_F32 = np.dtype(np.float32)
#: ``modes_major`` of the spectral side modes-major in complex pairs (:class:`LastAxis`), and
#: its code in the kernels (``hip_kernels/fno.cuh``: ``FNO_PAIRED``).
PAIRED = "paired"
_PAIRED_CODE = 2
#: The alignment in bytes of an input the kernels read (a copy of a less aligned one is read).
_ALIGN = 16


def supported(n_last: int, m_last: int, smem_per_block: int) -> bool:
    """Whether the kernels take a last axis of ``n_last`` points keeping ``m_last`` bins: in
    the pass form (a 5-smooth complex length that fits a block) or the column form
    (:func:`row_cols_supported`)."""
    return (1 <= m_last <= n_last // 2 + 1
            and (_rowfft.supported(n_last, _F32, smem_per_block)
                 or row_cols_supported(n_last, m_last, smem_per_block)))


#: The column form of the last axis's kernels (``hip_kernels/fno.cuh``: ``fno_rfft_cols_f32``):
#: a row of ``L = 64 R`` points as ``R`` columns of :data:`COLS_POINTS` (``x[n1 + R n2]``), a
#: thread a column, its real FFT in registers, the kept bins summed over the columns with a
#: table of twiddles; for ``COLS_MIN_R <= R <= COLS_THREADS`` (a warp's loads of a row at least
#: ``4 COLS_MIN_R`` contiguous bytes), any ``R`` (not only 5-smooth ones), any kept bins.
COLS_POINTS = 64
COLS_MIN_R = 16
COLS_THREADS = 256
#: The ``R`` that the column form's inverse kernel is also built for with ``R`` fixed
#: (``fno_irfft_cols_f32_r<R>``: the offsets of a thread's stores in the instructions, rather
#: than an address sum each, which is faster: docs/history.md); other
#: ``R``, and the forward (slower so built), take the kernels that read ``R`` at run time.
COLS_FIXED_R = (16, 32, 64, 128)
#: Threads of a column-form block by default: ``COLS_BLOCK_THREADS // R`` rows, at least one
#: (``scripts/bench_fno_rows.py --long-rows``; docs/benchmarks.md).
COLS_BLOCK_THREADS = 128
#: Whether ``variant="auto"`` takes the column form where it exists, for at most
#: :data:`COLS_AUTO_MAX_BINS` kept bins (a thread's sums cost ``m`` products, where the pass
#: form's cost does not grow with ``m``); there it is faster than the pass form both ways.
ROW_COLS_AUTO = True
COLS_AUTO_MAX_BINS = 129


def row_cols_shape(n_last: int, m_last: int):
    """``R`` of the column form for a last axis of ``n_last`` points keeping ``m_last`` bins
    (rows of ``64 R`` points), None where it takes none."""
    if n_last % COLS_POINTS or not 1 <= m_last <= n_last // 2 + 1:
        return None
    R = n_last // COLS_POINTS
    return R if COLS_MIN_R <= R <= COLS_THREADS else None


def cols_kernel(kind: str, R: int) -> str:
    """The column form's kernel for ``kind`` (``"r2c"`` or ``"c2r"``) and rows of ``64 R``
    points: the inverse built for that ``R`` where it is one of :data:`COLS_FIXED_R`, else the
    kernel that reads ``R`` at run time."""
    if kind == "r2c":
        return "fno_rfft_cols_f32"
    return "fno_irfft_cols_f32" + (f"_r{R}" if R in COLS_FIXED_R else "")


def cols_parts(R: int, m: int) -> int:
    """Threads that sum one kept bin of a row over its ``R`` columns in the forward column
    form: up to 8 (a power of two) while the row's ``R`` threads hold as many for its ``m``
    bins (``hip_kernels/fno.cuh``: ``fno_cols_parts``)."""
    parts = 1
    while parts < 8 and 2 * parts * m <= R:
        parts *= 2
    return parts


def cols_bytes(kind: str, R: int, m: int, rows_per_block: int) -> int:
    """Dynamic shared memory of a column-form block of ``rows_per_block`` rows: the forward's
    columns' 33 bins a column (complex), the inverse's scaled kept bins, then the kept bins
    staged in either layout (``2 m`` columns of ``rows_per_block + 1``), then the forward's
    parts of its sums (:func:`cols_parts`, where more than one)."""
    rpb = rows_per_block
    if kind == "c2r":
        return 8 * rpb * m + 4 * 2 * m * (rpb + 1)
    parts = cols_parts(R, m)
    return (8 * rpb * R * (COLS_POINTS // 2 + 1) + 4 * 2 * m * (rpb + 1)
            + (8 * parts * rpb * m if parts > 1 else 0))


def cols_rows(kind: str, R: int, m: int, smem_per_block: int) -> int:
    """Rows a column-form block transforms: as many as :data:`COLS_BLOCK_THREADS` threads hold
    (a thread a column), fewer while its shared memory passes ``smem_per_block``."""
    rpb = max(1, COLS_BLOCK_THREADS // R)
    while rpb > 1 and cols_bytes(kind, R, m, rpb) > smem_per_block:
        rpb -= 1
    return rpb


def row_cols_supported(n_last: int, m_last: int, smem_per_block: int) -> bool:
    """Whether the column form takes a last axis of ``n_last`` points keeping ``m_last`` bins
    (:func:`row_cols_shape`), a block of one row fitting both ways."""
    R = row_cols_shape(n_last, m_last)
    return R is not None and all(cols_bytes(kind, R, m_last, 1) <= smem_per_block
                                 for kind in ("r2c", "c2r"))


def row_cols_auto(n_last: int, m_last: int) -> bool:
    """Whether ``variant="auto"`` takes the column form for a last axis of ``n_last`` points
    keeping ``m_last`` bins, where it exists (:data:`ROW_COLS_AUTO`,
    :data:`COLS_AUTO_MAX_BINS`)."""
    return (ROW_COLS_AUTO and m_last <= COLS_AUTO_MAX_BINS
            and row_cols_shape(n_last, m_last) is not None)


def cols_twiddles(kind: str, n_last: int, m_last: int):
    """The column form's table of ``w^(n1 k)``, ``w = exp(-2 pi i / L)`` (``n1 < R``, ``k <
    m``), exact in float64 and rounded once: ``(R, m)`` for the forward (``"r2c"``), the
    conjugates ``(m, R)`` for the inverse, as complex64."""
    R = n_last // COLS_POINTS
    n1, k = np.arange(R)[:, None], np.arange(m_last)[None, :]
    w = np.exp(-2j * np.pi * ((n1 * k) % n_last) / n_last)
    return np.ascontiguousarray(w if kind == "r2c" else np.conj(w).T, dtype=np.complex64)


#: The warp form of the last axis's kernels (``hip_kernels/fno.cuh``: ``fno_rfft_f32_w<P>``):
#: rows of the plane kernels' warp form (:data:`WARP_ROWS` complex values, 64-256 points), a
#: block of :data:`ROW_WARP_THREADS` threads transforming :data:`ROW_WARP_ROWS` rows, halved
#: while their kept bins take more than :data:`ROW_WARP_MAX_BYTES` of shared memory
#: (``scripts/bench_fno_rows.py --row-forms``; docs/benchmarks.md).
ROW_WARP_THREADS = 256
ROW_WARP_ROWS = 64
ROW_WARP_MAX_BYTES = 24 * 1024
#: Whether ``variant="auto"`` takes the warp form of the last axis's kernels where
#: :func:`row_warp_auto` does; ``variant="warp"`` takes them anywhere they exist. The warp
#: form is faster forward on rows of 64-256 points and inverse on rows of 128 and 256; the
#: inverse of 64-point rows is slower in it.
ROW_WARP_AUTO = True
#: The shortest rows whose inverse transform takes the warp form by default.
ROW_WARP_C2R_MIN = 128


def row_warp_auto(kind: str, n_last: int, m_last: int) -> bool:
    """Whether ``variant="auto"`` takes the warp form for the ``kind`` transform of a last axis
    of ``n_last`` points keeping ``m_last`` bins, where it exists (:data:`ROW_WARP_AUTO`): rows
    of ``64 P`` points, and for the inverse (``"c2r"``) rows of at least
    :data:`ROW_WARP_C2R_MIN` points."""
    return (ROW_WARP_AUTO and row_warp_p(n_last, m_last) is not None
            and (kind == "r2c" or n_last >= ROW_WARP_C2R_MIN))


def row_warp_bytes(m: int, rows_per_block: int) -> int:
    """Dynamic shared memory of a warp-form row block: its rows' ``2 m`` kept values, in rows
    or in ``2 m`` columns of ``rows_per_block + 1``."""
    return 4 * 2 * m * (rows_per_block + 1)


def row_warp_rows(m: int, rows_per_block: int | None, smem_per_block: int) -> int:
    """Rows a warp-form row block transforms: ``rows_per_block``, or :data:`ROW_WARP_ROWS`
    halved while over :data:`ROW_WARP_MAX_BYTES`; at most what fits ``smem_per_block``."""
    rpb = int(rows_per_block or ROW_WARP_ROWS)
    if not rows_per_block:
        while rpb > 1 and row_warp_bytes(m, rpb) > ROW_WARP_MAX_BYTES:
            rpb //= 2
    while rpb > 1 and row_warp_bytes(m, rpb) > smem_per_block:
        rpb //= 2
    return max(1, rpb)


def row_warp_p(n_last: int, m_last: int):
    """``P`` of the warp form for a last axis of ``n_last = 64 P`` points (P = 1, 2, 4) keeping
    ``m_last`` bins, None where it takes none. (Longer rows take the column form: a warp form
    of them, a row's columns of ``64 P`` points a group's, is slower than the column form and
    the pass form; docs/history.md.)"""
    if n_last not in (64, 128, 256) or not 1 <= m_last <= n_last // 2 + 1:
        return None
    return n_last // 64


def row_warp_supported(n_last: int, m_last: int, smem_per_block: int) -> bool:
    """Whether the warp form takes a last axis of ``n_last`` points keeping ``m_last`` bins
    (:func:`row_warp_p`), a block's shared memory fitting."""
    return (row_warp_p(n_last, m_last) is not None
            and row_warp_bytes(m_last, 1) <= smem_per_block)


def _is_torch(a) -> bool:
    return type(a).__module__.split(".", 1)[0] == "torch"


def _data_ptr(a) -> int:
    """The device address of a CuPy array's or a torch tensor's first element."""
    return a.data_ptr() if _is_torch(a) else a.data.ptr


def _check_variant(variant):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def _row_form(kind: str, L: int, m: int, variant: str, smem_limit: int) -> str:
    """The form of a last axis's kernel (``"columns"``, ``"warp"`` or ``"passes"``) for
    ``variant``: the one asked for (an error where it does not take the axis); for ``"auto"``
    the column form where :func:`row_cols_auto` says so or no other form takes the axis, else
    the warp form where :func:`row_warp_auto` says so, else the pass form."""
    has_cols = row_cols_supported(L, m, smem_limit)
    if variant == "columns" and not has_cols:
        raise ValueError(f"no column-form FNO row kernel for L = {L} keeping m = {m} bins "
                         f"(rows of 64 R points, {COLS_MIN_R} <= R <= {COLS_THREADS})")
    passes_ok = _rowfft.supported(L, _F32, smem_limit)
    if variant == "passes" and not passes_ok:
        raise ValueError(f"no pass-form FNO row kernel for L = {L} (a 5-smooth complex "
                         "length that fits a block)")
    if has_cols and (variant == "columns" or (
            variant == "auto" and (row_cols_auto(L, m) or not passes_ok))):
        return "columns"
    warp = _warp_form(variant, row_warp_supported(L, m, smem_limit), row_warp_auto(kind, L, m),
                      f"row kernel for L = {L} keeping m = {m} bins (rows of 64, 128 or 256 "
                      "points)")
    return "warp" if warp else "passes"


def _warp_form(variant: str, has_warp: bool, auto: bool, missing: str) -> bool:
    """Whether a kernel runs in its warp form for ``variant``: ``"warp"`` (an error naming
    ``missing`` where the kernel has none), ``"passes"`` never, ``"auto"`` where it has one
    and ``auto``."""
    if variant == "warp" and not has_warp:
        raise ValueError(f"no warp-form FNO {missing}")
    return has_warp and (variant == "warp" or (variant == "auto" and auto))


class LastAxis:
    """One truncated transform of rows of length ``L`` keeping ``m`` bins, on device
    ``device_id``.

    ``kind="r2c"``: ``(rows, L)`` -> ``(rows, 2m)``, ``s_k`` times bin ``k`` of the
    unnormalised real FFT. ``kind="c2r"``: ``(rows, 2m)`` -> ``(rows, L)``, the unnormalised
    inverse real FFT of ``s_k`` times the bins (zero above ``m``; the imaginary parts of the DC
    and Nyquist bins dropped). ``scale``: the ``m`` values ``s_k``. ``shape``: that of the
    matrix it replaces, ``(L, 2m)`` or ``(2m, L)``. ``modes_major``: the spectral side
    transposed, ``(2m, rows)`` (``True``: the split modes of :class:`._dft.SplitChain`), or
    modes-major in complex pairs, ``(m, 2 rows)`` (``"paired"``: bin ``k`` of row ``r`` at
    ``[k, 2r]`` and ``[k, 2r + 1]``, the complex modes-major layout of
    :class:`._dft.PairedChain`). Called on a 2-D float32 array (CuPy) or tensor (PyTorch) on
    that device, it returns a new one of the same kind.

    ``variant``: ``"warp"`` the warp form (a group of 32 lanes a row, its FFT in registers and
    across the lanes, as the plane kernels' warp form: :func:`row_warp_supported`), ``"passes"``
    the pass form (the rows' FFTs in shared-memory passes), ``"auto"`` the warp form where it
    takes the axis and :func:`row_warp_auto` says so, else the pass form. ``rows_per_block``:
    rows a block transforms (the defaults: :data:`ROWS_BYTES` of rows for the pass form,
    :data:`ROW_WARP_ROWS` for the warp form, :func:`cols_rows` for the column form).

    ``kind="c2r"`` also takes a bias (:meth:`__call__`): ``bias[r % O]`` added to the real
    part of bin 0 of row ``r`` (``O`` the bias's values: rows in (batch, channel) order) before
    its scale, as the chain's middle would add it to the constant mode
    (:attr:`._dft.PairedChain.end_bias`); :attr:`bias_mode`, the flat index of the mode that
    takes it (0 here; None for ``r2c``).
    """

    def __init__(self, kind: str, L: int, m: int, scale, device_id: int,
                 rows_per_block: int | None = None, modes_major: bool | str = False,
                 variant: str = "auto"):
        if kind not in ("r2c", "c2r"):
            raise ValueError(f"kind must be 'r2c' or 'c2r', got {kind!r}")
        if modes_major not in (False, True, PAIRED):
            raise ValueError(f"modes_major must be False, True or {PAIRED!r}, got "
                             f"{modes_major!r}")
        _check_variant(variant)
        cp = backend.cupy
        with cp.cuda.Device(device_id):
            smem_limit = backend.shared_memory_limits()[1]
            if not supported(L, m, smem_limit):
                raise ValueError(f"no FNO row kernel for L = {L} keeping m = {m} bins")
            form = _row_form(kind, L, m, variant, smem_limit)
            verb = "rfft" if kind == "r2c" else "irfft"
            layout = np.int32(_PAIRED_CODE if modes_major == PAIRED else int(bool(modes_major)))
            rads = ()
            if form == "columns":  # rows_per_block within the threads of a block
                R = L // COLS_POINTS
                rpb = (max(1, min(int(rows_per_block), COLS_THREADS // R)) if rows_per_block
                       else cols_rows(kind, R, m, smem_limit))
                self.smem, name = cols_bytes(kind, R, m, rpb), cols_kernel(kind, R)
                self.twiddles = cp.asarray(cols_twiddles(kind, L, m))
                self.threads = rpb * R
                self._geometry = (np.int32(R), np.int32(m), np.int32(rpb), layout)
            else:
                n = _rowfft.complex_length(L)
                rads = _rowfft.radices(n, _rowfft.MAX_RADIX[_F32, kind])
                self.twiddles = _rowfft.twiddles(n, np.complex64, rads)
                if form == "warp":
                    rpb = row_warp_rows(m, rows_per_block, smem_limit)
                    self.smem = row_warp_bytes(m, rpb)
                    name = f"fno_{verb}_f32_w{row_warp_p(L, m)}"
                    self.threads = ROW_WARP_THREADS
                    self._geometry = (np.int32(m), np.int32(rpb), layout)
                else:
                    family = min(f for f in _rowfft.FAMILIES if f >= max(rads, default=2))
                    rpb = int(rows_per_block or max(1, ROWS_BYTES // (n * 8)))
                    rpb = max(1, min(rpb, smem_limit // _rowfft.block_bytes(L, _F32)))
                    self.smem = _rowfft.block_bytes(L, _F32, rpb)
                    name = f"fno_{verb}_f32_r{family}"
                    self.threads = _rowfft.THREADS
                    self._geometry = (np.int32(L), np.int32(m), np.int32(rpb),
                                      np.uint64(_rowfft.packed_radices(rads)),
                                      np.int32(len(rads)), layout)
            self.scale = cp.asarray(np.asarray(scale, dtype=np.float64).astype(np.float32))
            if self.scale.shape != (m,):
                raise ValueError(f"scale must hold {m} values, got shape {self.scale.shape}")
            self._fn = kernels.get_function(name, self.smem)
        self.kind, self.L, self.m, self.device_id = kind, int(L), int(m), int(device_id)
        self.rows_per_block, self.radices, self.name = rpb, rads, name
        self.variant = form
        self.shape = (self.L, 2 * self.m) if kind == "r2c" else (2 * self.m, self.L)
        self.modes_major, self.paired = bool(modes_major), modes_major == PAIRED
        self.bias_mode = 0 if kind == "c2r" else None
        self._launches: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _launch(self, rows: int, channels: int = 1):
        """The packed launch for ``rows`` rows (planes): pointers ``(in, out)``, and for
        ``c2r`` ``(in, out, bias)`` (0: no bias) with ``channels`` the bias's values (1 without
        one), kept per ``(rows, channels)``."""
        return cached_launch(
            self._launches, self._lock, (rows, channels), lambda: kernels.PackedLaunch(
                self._fn, self._grid(rows), (self.threads,), self.smem,
                self._args(rows) + self._bias_args(channels)))

    def _bias_args(self, channels: int) -> tuple:
        """The bias's arguments of a ``c2r`` kernel after its others (:attr:`bias_args`): its
        pointer (given at each launch), its number of values, and a plane's mode that takes
        it; none for ``r2c`` and the planes' pass form."""
        if self.bias_args == "rows":
            return (None, np.int32(channels))
        if self.bias_args == "plane":
            return (None, np.int32(channels),
                    np.int32(-1 if self.bias_mode is None else self.bias_mode))
        return ()

    @property
    def bias_args(self):
        """The bias's arguments the kernel takes: ``"rows"`` (pointer, values), ``"plane"``
        (pointer, values, mode), or None (``r2c``; the planes' pass form)."""
        if self.kind != "c2r":
            return None
        if not self.planar:
            return "rows"
        return None if self.variant == "passes" else "plane"

    planar = False  # (a plane's c2r kernels take the mode's index as well: Plane)

    def _grid(self, rows: int):
        return (-(-rows // self.rows_per_block),)

    def _args(self, rows: int):
        return (None, None, self.twiddles, self.scale, np.int64(rows)) + self._geometry

    modes_major = paired = False  # (the spectral side in rows, where not set)

    def _out_shape(self, rows: int) -> tuple:
        width = self.shape[1]  # 2 m of the forward's modes, L of the inverse's rows
        if self.kind == "c2r" or not self.modes_major:
            return (rows, width)
        return (width // 2, 2 * rows) if self.paired else (width, rows)

    def _rows_of(self, a) -> int:
        """The number of rows an input ``a`` holds; ValueError where its shape is not one of
        this transform's inputs."""
        width = self.shape[0]  # of the matrix replaced: L (r2c), 2 m (c2r); a Plane's too
        if self.paired and self.kind == "c2r":
            what = f"{width // 2} rows of complex pairs (m, 2 rows)"
            ok = a.ndim == 2 and a.shape[0] == width // 2 and a.shape[1] % 2 == 0
            rows = a.shape[1] // 2 if ok else 0
        else:
            across = int(self.modes_major and self.kind == "c2r")
            what = f"{'columns' if across else 'rows'} of {width} values"
            ok = a.ndim == 2 and a.shape[1 - across] == width
            rows = a.shape[across] if ok else 0
        if not ok:
            raise ValueError(f"{self.name}: expected {what}, got shape {tuple(a.shape)}")
        return int(rows)

    def __call__(self, a, out=None, bias=None):
        """The transform of the rows of ``a`` (of its columns: the spectral side modes-major),
        into ``out`` where given (else a new array); ``bias`` (``c2r`` only; None: none): ``O``
        float32 values, ``O`` dividing the rows, contiguous on the same device, read in place,
        ``bias[r % O]`` added to the real part of bin 0 (of mode :attr:`bias_mode`) of row
        (plane) ``r`` before its scale."""
        rows = self._rows_of(a)
        if _is_torch(a):
            import torch

            if torch.compiler.is_compiling():  # a graph break, not a traced launch
                return _outside_compile()(self._torch_call, a, out, rows, bias)
            return self._torch_call(a, out, rows, bias)
        cp = backend.cupy
        if a.dtype != _F32 or a.device.id != self.device_id:
            raise ValueError(f"{self.name}: expected a float32 array on device "
                             f"{self.device_id}, got {a.dtype} on {a.device.id}")
        a = cp.ascontiguousarray(a)
        if _data_ptr(a) % _ALIGN:  # the kernels load rows as pairs of values
            a = a.copy()
        channels = self._check_bias(bias, rows)
        with cp.cuda.Device(self.device_id):
            if out is None:
                out = cp.empty(self._out_shape(rows), dtype=_F32)
            self._check_out(out, rows, _F32)
            if rows:
                self._launch(rows, channels)(cp.cuda.get_current_stream().ptr, a.data.ptr,
                                             out.data.ptr, *self._bias_ptr(bias))
        return out

    def takes_bias(self, bias) -> bool:
        """Whether :meth:`__call__` takes ``bias`` (the rows aside): an inverse transform
        whose modes hold the constant one (:attr:`bias_mode`), ``bias`` 1-D, non-empty,
        contiguous float32 on this device (a CuPy array or a CUDA tensor), read in place."""
        if self.bias_mode is None or getattr(bias, "ndim", None) != 1 or not bias.shape[0]:
            return False
        if _is_torch(bias):
            import torch

            return (bias.dtype is torch.float32 and bias.is_cuda and bias.is_contiguous()
                    and bias.device.index == self.device_id)
        cp = backend.cupy
        return (isinstance(bias, cp.ndarray) and bias.dtype == _F32 and bias.flags.c_contiguous
                and bias.device.id == self.device_id)

    def _check_bias(self, bias, rows) -> int:
        """The bias's number of values (1 for none); ValueError where this transform does not
        take it as given (:meth:`takes_bias`, its size dividing the ``rows``)."""
        if bias is None:
            return 1
        if not self.takes_bias(bias) or rows % bias.shape[0]:
            raise ValueError(f"{self.name}: the bias must be 1-D contiguous float32 on device "
                             f"{self.device_id}, its size dividing the {rows} rows, for an "
                             f"inverse transform keeping the constant mode; got "
                             f"{getattr(bias, 'dtype', type(bias).__name__)} "
                             f"{tuple(getattr(bias, 'shape', ()))} for a {self.kind} transform")
        return int(bias.shape[0])

    def _bias_ptr(self, bias) -> tuple:
        """The bias's pointer as a ``c2r`` launch takes it (0: none); none for ``r2c``."""
        if self.bias_args is None:
            return ()
        return (0 if bias is None else _data_ptr(bias),)

    def _torch_call(self, a, out, rows, bias=None):
        """The PyTorch side of :meth:`__call__`: on the tensor's current stream, with the
        device's context current (the backward runs on autograd's own threads). Every step
        here is host time on a small layer's path, so each attribute is read once."""
        import torch

        dev = a.device
        if a.dtype != torch.float32 or dev.type != "cuda" or dev.index != self.device_id:
            raise ValueError(f"{self.name}: expected a float32 tensor on cuda:"
                             f"{self.device_id}, got {a.dtype} on {dev}")
        a = a.contiguous()
        ptr = a.data_ptr()
        if ptr % _ALIGN:  # the kernels load rows as pairs of values
            a = a.clone()
            ptr = a.data_ptr()
        channels = self._check_bias(bias, rows)
        if out is None:  # contiguous and aligned by the caching allocator
            out = torch.empty(self._out_shape(rows), dtype=torch.float32, device=dev)
        else:
            self._check_out(out, rows, torch.float32)
        if rows:
            stream = _raw_stream(torch, dev)
            # the device's primary context current on this thread: PyTorch's autograd threads
            # select the device without making a context current, which a driver launch needs
            backend.cupy.cuda.runtime.setDevice(self.device_id)
            self._launch(rows, channels)(stream, ptr, out.data_ptr(), *self._bias_ptr(bias))
        return out

    def _check_out(self, out, rows, dtype):
        strides_ok = (out.is_contiguous() if _is_torch(out) else out.flags.c_contiguous)
        strides_ok = strides_ok and _data_ptr(out) % _ALIGN == 0  # written as pairs of values
        want = self._out_shape(rows)
        if tuple(out.shape) != want or out.dtype != dtype or not strides_ok:
            raise ValueError(f"{self.name}: out must be contiguous float32 of shape "
                             f"{want}, {_ALIGN}-byte aligned, got {out.dtype} "
                             f"{tuple(out.shape)}")


def cached_launch(launches, lock, key, make):
    """The launch kept in ``launches`` (an OrderedDict, written under ``lock``) for ``key``, or
    ``make()`` kept there, the oldest dropped beyond :data:`MAX_LAUNCHES`."""
    hit = launches.get(key)  # a dict lookup is atomic: no lock for a hit
    if hit is not None:
        return hit
    launch = make()
    with lock:
        launches[key] = launch
        while len(launches) > MAX_LAUNCHES:
            launches.popitem(last=False)
    return launch


def _raw_stream(torch, device) -> int:
    """The current stream's handle on the CUDA ``device``, without the ``torch.cuda.Stream``
    that ``torch.cuda.current_stream`` builds (host time, twice a forward whose kernels run
    outside its graph)."""
    return raw_stream_at(torch, device.index)


def raw_stream_at(torch, index: int) -> int:
    """:func:`_raw_stream` of the CUDA device of index ``index``."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:  # pragma: no cover - older PyTorch
        return torch.cuda.current_stream(index).cuda_stream
    return raw(index)


_OUTSIDE = None


def _outside_compile():
    """A caller of ``fn(*args)`` that ``torch.compile`` does not trace into (a launch through
    the driver is not something it can put in its graph; it breaks the graph there)."""
    global _OUTSIDE
    if _OUTSIDE is None:
        import torch

        _OUTSIDE = torch.compiler.disable(lambda fn, *args: fn(*args))
    return _OUTSIDE


def last_axis_set(n_last: int, m_last: int, device_id: int, kinds=("r2c", "c2r"),
                  modes_major: bool | str = False, variant: str = "auto") -> dict:
    """The transforms of ``kinds`` of a last axis of ``n_last`` points keeping ``m_last`` bins,
    by the name of the matrix each replaces in :class:`._dft.Chain` (or, ``modes_major``, in
    :class:`._dft.SplitChain`; ``"paired"``, in :class:`._dft.PairedChain`): ``r2c`` gives
    ``F`` (analysis, ``1 / N``) and ``AT`` (adjoint of the synthesis, ``c_k``), ``c2r`` gives
    ``A`` (synthesis) and ``FT`` (adjoint of the analysis, ``1 / (N c_k)``); ``variant`` as
    :class:`LastAxis` takes it."""
    from ._modes import hermitian_weights

    c = hermitian_weights(n_last, m_last)
    n, m = n_last, m_last
    out = {}

    def make(kind, scale):
        return LastAxis(kind, n, m, scale, device_id, modes_major=modes_major, variant=variant)

    if "r2c" in kinds:
        out["F"] = make("r2c", np.full(m, 1.0 / n))
        out["AT"] = make("r2c", c)
    if "c2r" in kinds:
        out["A"] = make("c2r", np.ones(m))
        out["FT"] = make("c2r", 1.0 / (n * c))
    return out


# ------------------------------------------------------------- the last two axes at once --

# The plane kernels' defaults (scripts/bench_fno_rows.py --plane; docs/benchmarks.md): 32 rows
# a step where two blocks still fit a multiprocessor (16 for the 256 x 256 plane keeping 64 x 33
# modes, whose kept columns take 68 KB), about 2048 values of columns a step (all kept columns
# of a 64- or 128-point first axis), and 128 threads for rows of up to 64 complex values, 256
# above.
#: Threads of a plane kernel's block at most (``hip_kernels/fno.cuh``: ``FNO_PLANE_THREADS``).
PLANE_THREADS = 256
#: Rows of the last axis a step transforms, the most (halved until two blocks fit).
PLANE_ROWS = 32
#: Complex values of the kept columns a step transforms, about (all of them where fewer).
PLANE_COLUMN_VALUES = 2048
#: Complex values of a row (the last axis's complex length) from which a block takes
#: :data:`PLANE_THREADS` threads; below, half as many.
PLANE_WIDE_ROW = 128


def plane_bytes(n0: int, n1: int, m1: int, rows_per_block: int, columns: int) -> int:
    """Dynamic shared memory of a plane kernel's block: the ``m1`` kept columns (``n0 + 1``
    values each), then the rows' two buffers or the columns' two, whichever is larger."""
    nc1 = _rowfft.complex_length(n1)
    return 8 * (m1 * (n0 + 1) + max(2 * rows_per_block * (nc1 + 1), 2 * columns * n0))


def plane_supported(n0: int, n1: int, m0: int, m1: int, smem_per_block: int) -> bool:
    """Whether the plane kernels take a plane of ``n0 x n1`` points keeping ``m0 x m1``
    modes: 5-smooth complex lengths for both axes, one row and one column fitting a block."""
    if not (1 <= m0 <= n0 and 1 <= m1 <= n1 // 2 + 1):
        return False
    if _rowfft.radices(n0) is None or _rowfft.radices(_rowfft.complex_length(n1)) is None:
        return False
    return plane_bytes(n0, n1, m1, 1, 1) <= smem_per_block


#: The warp form of the plane kernels (``hip_kernels/fno.cuh``): a group of 32 lanes a row or
#: a column, its FFT in registers and across the lanes, for rows of these many complex values
#: (the last axis's real length over 2) and columns of these many points.
WARP_ROWS = (32, 64, 128)
WARP_COLUMNS = (32, 64, 128, 256)
VARIANTS = ("auto", "passes", "warp", "columns")
#: The warp form's r2c plane kernels with their rows loaded ahead (``_w<P>x<Q>a``) exist for
#: rows of these many 32-value groups P (P = 4 spilled; P = 1 spills 16 bytes on sm_90 since
#: the lanes' butterflies lost their branch); taken by default where
#: :data:`PLANE_AHEAD`, off until timed against the plain ones (``bench_fno_rows.py --forms``).
PLANE_AHEAD_ROWS = (1, 2)
PLANE_AHEAD = False


def warp_bytes(n0: int, m0: int, m1: int) -> int:
    """Dynamic shared memory of a warp-form plane block: the ``m1`` kept columns (``n0 + 1``
    values each) and the plane's ``2 m0 m1`` modes."""
    return 8 * m1 * (n0 + 1) + 8 * m0 * m1


def warp_supported(n0: int, n1: int, m0: int, m1: int, smem_per_block: int) -> bool:
    """Whether the warp form takes the plane: an even last axis of ``2 x`` :data:`WARP_ROWS`
    points, a first axis of :data:`WARP_COLUMNS`, its shared memory fitting a block."""
    return (n1 % 2 == 0 and n1 // 2 in WARP_ROWS and n0 in WARP_COLUMNS
            and 1 <= m0 <= n0 and 1 <= m1 <= n1 // 2 + 1
            and warp_bytes(n0, m0, m1) <= smem_per_block)


def _check_kind_layout(kind: str, modes_major) -> None:
    """A plane transform's kind and spectral layout (:class:`Plane`, :class:`DirectPlane`)."""
    if kind not in ("r2c", "c2r"):
        raise ValueError(f"kind must be 'r2c' or 'c2r', got {kind!r}")
    if modes_major not in (False, PAIRED):
        raise ValueError(f"modes_major must be False or {PAIRED!r} for a plane, got "
                         f"{modes_major!r}")


def _plane_bias_mode(kind: str, bins, m1: int):
    """The flat index ``j m1`` of a plane's mode at bin 0 of both axes (``bins[j] == 0``), the
    mode constant over the plane that a ``c2r`` kernel adds the bias to; None for ``r2c`` or
    where no kept mode of the first axis lies at bin 0."""
    hit = np.flatnonzero(bins == 0)
    return int(hit[0]) * m1 if kind == "c2r" and hit.size else None


def _plane_bins(n0: int, m0: int, bins):
    """``bins`` as int64, checked: ``m0`` distinct bins of an axis of ``n0``."""
    bins = np.asarray(bins, dtype=np.int64)
    if bins.shape != (m0,) or bins.min() < 0 or bins.max() >= n0 \
            or np.unique(bins).size != m0:
        raise ValueError(f"bins must be {m0} distinct bins of an axis of {n0}, got {bins}")
    return bins


class Plane(LastAxis):
    """The truncated transforms of the last two axes, ``n0 x n1`` points, of a stack of planes
    in one kernel, keeping ``m0`` modes of the first axis (at the FFT bins ``bins``) and the
    first ``m1`` bins of the last, on device ``device_id``.

    ``kind="r2c"``: ``(planes, n0 n1)`` -> ``(planes, 2 m0 m1)``, the real and then the
    imaginary parts of ``s0 s1[k] X[bins[j], k]``, ``X`` a plane's unnormalised 2-D DFT
    (``exp(-2 pi i ...)``). ``kind="c2r"``: ``(planes, 2 m0 m1)`` -> ``(planes, n0 n1)``: the
    modes times ``s0`` placed at their bins of the first axis (zero elsewhere), its inverse
    complex FFT, times ``s1[k]``, then the inverse real FFT of the last axis (bins past ``m1``
    zero, the imaginary parts of the DC and Nyquist bins dropped), unnormalised. ``shape``: that
    of the matrix it stands for. Called like :class:`LastAxis`. ``rows_per_block`` (rows a step
    of the last axis transforms), ``columns`` (columns a step of the first) and ``threads``
    override the defaults, for the tuning sweeps.

    ``variant``: ``"warp"`` the warp form (a group of 32 lanes a row or a column, the FFTs in
    registers and across the lanes: :func:`warp_supported`), ``"passes"`` the pass form (the
    FFTs in shared-memory passes, rows and columns a step at a time), ``"auto"`` the warp form
    where it takes the plane; ``rows_per_block`` and ``columns`` apply to the pass form only.
    ``ahead``: the warp form's forward transform with its rows loaded several at a time
    (``fno_plane_rfft_f32_w<P>x<Q>a``, rows of 64 and 128 points); None: :data:`PLANE_AHEAD`
    where it has that kernel.

    ``modes_major="paired"``: the spectral side modes-major in complex pairs, ``(m0 m1, 2
    planes)`` (mode ``i = j m1 + k`` of plane ``p`` at ``[i, 2p]`` and ``[i, 2p + 1]``), the
    layout of :class:`._dft.PairedChain`, as :class:`LastAxis` takes it.

    ``kind="c2r"`` in the warp form takes a bias as :class:`LastAxis` does, ``bias[p % O]``
    added to the real part of plane ``p``'s mode :attr:`bias_mode` (``j m1``, ``bins[j] ==
    0``: the mode constant over the plane; None where no kept mode lies there) before its
    scales; the pass form takes none (:attr:`bias_mode` None: in its loads the bias spilled the
    AMD kernel's scalar registers), and a chain ending on it adds the bias before it.
    """

    planar = True

    def __init__(self, kind: str, n0: int, n1: int, m0: int, m1: int, bins, s0: float, s1,
                 device_id: int, rows_per_block: int | None = None, columns: int | None = None,
                 threads: int | None = None, variant: str = "auto", ahead: bool | None = None,
                 modes_major: bool | str = False):
        n0, n1, m0, m1 = int(n0), int(n1), int(m0), int(m1)
        _check_kind_layout(kind, modes_major)
        _check_variant(variant)
        if threads is not None and not 1 <= int(threads) <= PLANE_THREADS:
            raise ValueError(f"threads must be in [1, {PLANE_THREADS}], got {threads}")
        bins = _plane_bins(n0, m0, bins)
        cp = backend.cupy
        with cp.cuda.Device(device_id):
            smem_sm, smem_limit = backend.shared_memory_limits()
            if not plane_supported(n0, n1, m0, m1, smem_limit):
                raise ValueError(f"no FNO plane kernel for {n0} x {n1} points keeping "
                                 f"{m0} x {m1} modes")
            warp = _warp_form(variant, warp_supported(n0, n1, m0, m1, smem_limit), True,
                              f"plane kernel for {n0} x {n1} points keeping {m0} x {m1} modes "
                              f"(rows of {WARP_ROWS} complex values, columns of "
                              f"{WARP_COLUMNS})")
            if warp and threads is not None and int(threads) % 32:
                raise ValueError(f"threads must be a multiple of 32 for the warp form, got "
                                 f"{threads}")
            nc1 = _rowfft.complex_length(n1)
            rad1 = _rowfft.radices(nc1, _rowfft.MAX_RADIX[_F32, kind])
            rad0 = _rowfft.radices(n0, _rowfft.MAX_RADIX[_F32, kind])
            family = min(f for f in _rowfft.FAMILIES if f >= max(rad1 + rad0, default=2))
            g = max(1, min(int(columns or -(-PLANE_COLUMN_VALUES // n0)), m1))
            if rows_per_block:
                rpb = max(1, min(int(rows_per_block), n0))
            else:  # the most rows, up to PLANE_ROWS, with which two blocks fit
                rpb = max(1, min(PLANE_ROWS, n0))
                while rpb > 1 and 2 * plane_bytes(n0, n1, m1, rpb, g) > smem_sm:
                    rpb //= 2
            while plane_bytes(n0, n1, m1, rpb, g) > smem_limit and (rpb > 1 or g > 1):
                rpb, g = max(1, rpb // 2), max(1, g // 2)
            self.smem = plane_bytes(n0, n1, m1, rpb, g)
            self.twiddles = _rowfft.twiddles(nc1, np.complex64, rad1)
            self.twiddles0 = _rowfft.twiddles(n0, np.complex64, rad0)
            s1 = np.broadcast_to(np.asarray(s1, dtype=np.float64), (m1,))
            self.scale = cp.asarray(s1.astype(np.float32))
            if kind == "r2c" and not warp:
                table = bins
            else:  # the mode of each bin of the first axis, -1 for none
                table = np.full(n0, -1, dtype=np.int64)
                table[bins] = np.arange(m0)
            self.table = cp.asarray(table.astype(np.int32))
            name = (f"fno_plane_{'rfft' if kind == 'r2c' else 'irfft'}_f32_r{family}"
                    + ("p" if modes_major == PAIRED else ""))  # the pass form's paired kernels
            has_ahead = warp and kind == "r2c" and nc1 // 32 in PLANE_AHEAD_ROWS
            if ahead and not has_ahead:
                raise ValueError(f"ahead: the {kind} plane kernel of {n0} x {n1} points in the "
                                 f"{'warp' if warp else 'pass'} form has no rows loaded ahead "
                                 f"(the warp form's r2c, rows of {PLANE_AHEAD_ROWS} x 32 "
                                 "complex values)")
            self.ahead = bool(has_ahead and (PLANE_AHEAD if ahead is None else ahead))
            if warp:
                name = (f"fno_plane_{'rfft' if kind == 'r2c' else 'irfft'}_f32_"
                        f"w{nc1 // 32}x{n0 // 32}" + ("a" if self.ahead else ""))
                self.smem, rpb, g = warp_bytes(n0, m0, m1), 0, 0
            self._fn = kernels.get_function(name, self.smem)
        self.kind, self.device_id, self.name = kind, int(device_id), name
        self.L, self.m = n1, m1
        self.plane, self.modes = (n0, n1), (m0, m1)
        self.rows_per_block, self.columns, self.radices = rpb, g, (rad0, rad1)
        self.variant = "warp" if warp else "passes"
        wide = _rowfft.complex_length(n1) >= PLANE_WIDE_ROW
        self.threads = int(threads or (PLANE_THREADS if wide or warp else PLANE_THREADS // 2))
        width = (n0 * n1, 2 * m0 * m1)
        self.shape = width if kind == "r2c" else width[::-1]
        self.modes_major = self.paired = modes_major == PAIRED
        self.bias_mode = _plane_bias_mode(kind, bins, m1) if warp else None
        if warp:
            self._geometry = (np.float32(s0), np.int32(m0), np.int32(m1))
        else:
            self._geometry = (np.float32(s0), np.int32(n0), np.int32(n1), np.int32(m0),
                              np.int32(m1), np.int32(rpb), np.int32(g),
                              np.uint64(_rowfft.packed_radices(rad1)), np.int32(len(rad1)),
                              np.uint64(_rowfft.packed_radices(rad0)), np.int32(len(rad0)))
        self._launches: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _grid(self, rows: int):
        return (rows,)  # a block a plane

    def _paired_planes(self, rows: int):
        """The kernels' ``paired_planes``: the planes apart that a plane's pairs of modes lie
        (0: in rows); the pass form's paired kernels index them in 32 bits."""
        if self.paired and rows * self.modes[0] * self.modes[1] >= 2**31:
            raise ValueError(f"{self.name}: {rows} planes of {self.modes[0]} x "
                             f"{self.modes[1]} modes paired are 2^31 complex values or more")
        return np.int32(rows if self.paired else 0)

    def _args(self, rows: int):
        pairs = (self._paired_planes(rows),)
        if self.variant == "warp":
            return (None, None, self.twiddles, self.scale, self.table) + self._geometry + pairs
        return (None, None, self.twiddles, self.twiddles0, self.scale, self.table) \
            + self._geometry + pairs


#: The planes' direct form (``hip_kernels/fno.cuh``: ``fno_plane_rdft_f32_b<MB>``,
#: ``fno_plane_irdft_f32_b<MB>``): the truncated transforms as register-tiled sums over the
#: points, any plane size, a block a plane, the last axis's kept bins in registers: at most
#: the largest of :data:`DIRECT_BINS` (``MB``, the kernels' templates).
DIRECT_BINS = (4, 8, 12, 16)
DIRECT_MAX_MODES = DIRECT_BINS[-1]
#: Kept modes of the first axis, at most (its table ``m0 x n0`` in shared memory).
DIRECT_MAX_MODES0 = 64
#: Threads of a direct-form block (``FNO_DIRECT_THREADS``).
DIRECT_THREADS = 256


def _align2(n: int) -> int:
    return n + (n & 1)


def _parts(n: int, threads: int = DIRECT_THREADS) -> int:
    """Parts a sum over ``n`` tasks is cut into (``fno_direct_parts``)."""
    return threads // n if n <= threads else 1


def direct_bins(m1: int):
    """``MB``: the fewest bins of :data:`DIRECT_BINS` that hold ``m1`` (None past them)."""
    return next((b for b in DIRECT_BINS if b >= m1), None)


def direct_bytes(kind: str, n0: int, n1: int, m0: int, m1: int) -> int:
    """Dynamic shared memory of a direct-form block (one plane), as ``fno.cuh`` lays it out:
    ``r2c`` the plane (rows of ``n1 | 1``; then the parts' partial sums), the tables ``T1``
    and ``T0`` and the rows' sums; ``c2r`` the table ``T0``, the modes and the columns' sums."""
    mb, n0p, M = direct_bins(m1), n0 | 1, m0 * m1
    if kind == "r2c":
        a2 = max((n0 * (n1 | 1) + 1) // 2, (_parts(n0) - 1) * n0 * mb, (_parts(M) - 1) * M)
        return 8 * (_align2(a2) + n1 * mb + _align2(m0 * n0p) + m1 * n0p)
    return 8 * (_align2(m0 * n0p) + _align2(M) + n0 * mb)


def direct_supported(n0: int, n1: int, m0: int, m1: int, smem_per_block: int) -> bool:
    """Whether the direct form takes a plane of ``n0 x n1`` points keeping ``m0 x m1`` modes:
    at most :data:`DIRECT_MAX_MODES` bins of the last axis and :data:`DIRECT_MAX_MODES0` modes
    of the first, a plane of each kind fitting a block's ``smem_per_block`` bytes."""
    if not (1 <= m0 <= min(n0, DIRECT_MAX_MODES0)
            and 1 <= m1 <= min(n1 // 2 + 1, DIRECT_MAX_MODES)):
        return False
    if n0 * n1 >= 2**31:
        return False
    return all(direct_bytes(k, n0, n1, m0, m1) <= smem_per_block for k in ("r2c", "c2r"))


class DirectPlane(LastAxis):
    """The transforms of :class:`Plane` in the direct form: each axis's truncated DFT as sums
    over its points (``hip_kernels/fno.cuh``: ``fno_plane_rdft_f32_b<MB>``,
    ``fno_plane_irdft_f32_b<MB>``), for planes of any size keeping few modes
    (:func:`direct_supported`): ``n0 m1 (n1 + 2 m0)`` complex multiply-adds a plane, the
    lengths needing no small factors (85 = 5 x 17). :class:`Plane`'s arguments (but the pass
    and warp forms' shapes), layouts and call; the scales and the bins are folded into the
    kernels' twiddle tables (float64 on the host, the angles reduced in integers, rounded
    once); the bias as :class:`Plane` takes it."""

    variant = "direct"
    planar = True

    def __init__(self, kind: str, n0: int, n1: int, m0: int, m1: int, bins, s0: float, s1,
                 device_id: int, modes_major: bool | str = False):
        n0, n1, m0, m1 = int(n0), int(n1), int(m0), int(m1)
        _check_kind_layout(kind, modes_major)
        bins = _plane_bins(n0, m0, bins)
        cp = backend.cupy
        with cp.cuda.Device(device_id):
            smem_limit = backend.shared_memory_limits()[1]
            if not direct_supported(n0, n1, m0, m1, smem_limit):
                raise ValueError(f"no direct-form FNO plane kernel for {n0} x {n1} points "
                                 f"keeping {m0} x {m1} modes (at most {DIRECT_MAX_MODES} bins "
                                 f"of the last axis, {DIRECT_MAX_MODES0} modes of the first, "
                                 f"a plane fitting {smem_limit} bytes of shared memory)")
            mb = direct_bins(m1)
            self.smem = direct_bytes(kind, n0, n1, m0, m1)
            name = (f"fno_plane_{'rdft' if kind == 'r2c' else 'irdft'}_f32_b{mb}")
            self._fn = kernels.get_function(name, self.smem)
            sign = -1.0 if kind == "r2c" else 1.0
            s1 = np.broadcast_to(np.asarray(s1, dtype=np.float64), (m1,))
            n0p = n0 | 1
            t0 = np.zeros((_align2(m0 * n0p),), dtype=np.complex128)
            t0[:m0 * n0p].reshape(m0, n0p)[:, :n0] = float(s0) * np.exp(
                sign * 2j * np.pi * (np.outer(bins, np.arange(n0)) % n0) / n0)
            k, c = np.arange(m1), np.arange(n1)
            if kind == "r2c":  # T1[c][k] = s1[k] e^{-2 pi i k c / n1}, zero from m1
                t1 = np.zeros((n1, mb), dtype=np.complex128)
                t1[:, :m1] = s1 * np.exp(-2j * np.pi * (np.outer(c, k) % n1) / n1)
            else:  # U[k][c] = w_k s1[k] e^{+2 pi i k c / n1}, w_k the Hermitian sum's
                w = np.where((k == 0) | (2 * k == n1), 1.0, 2.0)
                t1 = np.zeros((mb, n1), dtype=np.complex128)
                t1[:m1] = (w * s1)[:, None] * np.exp(2j * np.pi * (np.outer(k, c) % n1) / n1)
            self.table0 = cp.asarray(t0.astype(np.complex64))
            self.table1 = cp.asarray(t1.astype(np.complex64))
        self.kind, self.device_id, self.name = kind, int(device_id), name
        self.L, self.m = n1, m1
        self.plane, self.modes = (n0, n1), (m0, m1)
        self.threads = DIRECT_THREADS
        width = (n0 * n1, 2 * m0 * m1)
        self.shape = width if kind == "r2c" else width[::-1]
        self.modes_major = self.paired = modes_major == PAIRED
        self.bias_mode = _plane_bias_mode(kind, bins, m1)
        tables = (self.table1, self.table0) if kind == "r2c" else (self.table0, self.table1)
        self._tables_geometry = tables + (np.int32(n0), np.int32(n1), np.int32(m0),
                                          np.int32(m1))
        self._launches: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    _grid = Plane._grid  # a block a plane
    _paired_planes = Plane._paired_planes

    def _args(self, rows: int):
        return (None, None) + self._tables_geometry + (self._paired_planes(rows),)


def plane_set(plane, modes, device_id: int, kinds=("r2c", "c2r"), variant: str = "auto",
              modes_major: bool | str = False) -> dict:
    """The plane transforms of ``kinds`` for the last two axes ``plane = (n0, n1)`` keeping
    ``modes = (m0, m1)``, by the name of the chain's transform each replaces
    (:class:`._dft.Chain`): ``r2c`` gives ``ana`` (the analysis: the analysis frequencies,
    ``1 / n0``, ``1 / n1``) and ``synT`` (the adjoint of the synthesis: the output bins, 1,
    ``c_k``); ``c2r`` gives ``syn`` (the synthesis: the output bins, 1, 1) and ``anaT`` (the
    adjoint of the analysis: the analysis frequencies, ``1 / n0``, ``1 / (n1 c_k)``);
    ``variant`` and ``modes_major`` as :class:`Plane` takes them, or ``variant="direct"``:
    :class:`DirectPlane`."""
    from ._modes import hermitian_weights, mode_indices

    (n0, n1), (m0, m1) = plane, modes
    freq = mode_indices((n0, 1), (m0, 1))[0]
    out_bins = mode_indices((n0, 1), (m0, 1), output=True)[0]
    c = hermitian_weights(n1, m1)
    out = {}

    def make(kind, bins, s0, s1):
        if variant == "direct":
            return DirectPlane(kind, n0, n1, m0, m1, bins, s0, s1, device_id,
                               modes_major=modes_major)
        return Plane(kind, n0, n1, m0, m1, bins, s0, s1, device_id, variant=variant,
                     modes_major=modes_major)

    if "r2c" in kinds:
        out["ana"] = make("r2c", freq, 1.0 / n0, 1.0 / n1)
        out["synT"] = make("r2c", out_bins, 1.0, c)
    if "c2r" in kinds:
        out["syn"] = make("c2r", out_bins, 1.0, 1.0)
        out["anaT"] = make("c2r", freq, 1.0 / n0, 1.0 / (n1 * c))
    return out
