"""Stages 1+2 and 4+5 as one kernel each: the package's own real FFTs of the time axis
(``hip_kernels/rowfft.cuh``), with the padding, unpadding and precision casts inside.

A plan is a callable ``plan(in_ptr, out_ptr, stream)``, like a cuFFT callback plan
(:class:`fftmatvec._fftcb.CallbackPlan`), so a fused product takes either. They need no cuFFT
callbacks, so they also fuse the stages on ROCm. They exist for 5-smooth lengths ``L`` (every
length :func:`fftmatvec.operator.fft_length` picks) whose two shared-memory buffers of
:func:`complex_length` + 1 complex values fit a block.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import backend, kernels

__all__ = ["RowFFT", "block_bytes", "complex_length", "default_rows_per_block", "factorisations",
           "packed_radices", "radices", "supported"]

_REAL = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}
_CPLX = {np.dtype(np.complex128): "c128", np.dtype(np.complex64): "c64"}
# The radices a pass may take: the butterflies of 2, 3, 4, 5 and 8, and the composite ones the
# kernels run as prime-factor DFTs in registers (one pass where two would go through shared
# memory). A transform takes the fewest passes whose radices are at most its cap
# (:data:`MAX_RADIX`), the odd ones first: an odd radix's first pass writes its outputs RAD apart
# without shared-memory bank conflicts (8 apart, 16-byte values meet 8-way).
RADICES = (2, 3, 4, 5, 6, 8, 10)
MAX_PASSES = 10  # 6 bits per pass in one 64-bit kernel argument
# The kernels come in families by their largest radix (a kernel's registers are those of its
# largest butterfly): `_r<M>` takes the radices up to M, and a transform runs on the smallest
# family that takes all of its passes.
FAMILIES = (8, 10)
# The largest radix by default, per (FFT precision, kind): more registers per butterfly, fewer
# passes (scripts/bench_row_fft.py --radices): radix 10 in float32 and in the
# float64 forward transforms; the float64 inverse ones, whose radix-10 kernels spill their
# registers, up to radix 8.
MAX_RADIX = {(np.dtype(np.float64), "r2c"): 10, (np.dtype(np.float64), "c2r"): 8,
             (np.dtype(np.float32), "r2c"): 10, (np.dtype(np.float32), "c2r"): 10}
# A block holds whole rows, about ROWS_BYTES bytes of them per buffer, with THREADS threads
# (scripts/bench_row_fft.py --sweep).
ROWS_BYTES = 16 * 1024
THREADS = 128
MAX_THREADS = 128  # the kernels' launch bound (rowfft.cuh: ROWFFT_MAX_THREADS)

_tables: dict = {}  # (device, complex length, complex dtype, radices) -> twiddle table there
_lock = threading.Lock()


def radices(n: int, max_radix: int = 8) -> list[int] | None:
    """The Stockham passes' radices for a complex FFT of length ``n`` (product ``n``), or None
    where ``n`` has a prime factor above 5: the fewest passes of :data:`RADICES` up to
    ``max_radix``, then the smallest largest radix, the odd radices first, each kind in
    descending order."""
    if n < 1:
        return None
    allowed = [r for r in RADICES if r <= max_radix]
    best: dict[int, tuple | None] = {1: ()}

    def search(m):  # the best factorisation of m, by _rank
        if m not in best:
            found = None
            for r in allowed:
                if m % r == 0:
                    rest = search(m // r)
                    if rest is not None and (found is None or _rank((r,) + rest) < _rank(found)):
                        found = (r,) + rest
            best[m] = found
        return best[m]

    found = search(n)
    if found is None or len(found) > MAX_PASSES:
        return None
    return _in_pass_order(found)


def packed_radices(rads) -> int:
    """The passes' radices as the kernels take them: 6 bits each, the first pass lowest
    (rowfft.cuh)."""
    return sum(int(r) << (6 * i) for i, r in enumerate(rads))


def _rank(rads) -> tuple:
    """Factorisations compared: fewer passes, then a smaller largest radix, then larger radices."""
    return (len(rads), max(rads, default=0), sorted(rads, reverse=True))


def _in_pass_order(rads) -> list[int]:
    """The order the passes run in: the odd radices first, each kind in descending order."""
    return sorted(rads, key=lambda r: (r % 2 == 0, -r))


def factorisations(n: int, extra: int = 1, max_radix: int = max(RADICES)) -> list[list[int]]:
    """Every way to take a complex FFT of length ``n`` in passes of :data:`RADICES` up to
    ``max_radix``, with at most ``extra`` passes more than the fewest, each ordered as
    :func:`radices` orders them (for the tuning sweeps); empty where there is none."""
    fewest = radices(n, max_radix)
    if fewest is None:
        return []
    most = len(fewest) + extra
    out = set()

    def walk(m, smallest, taken):  # multisets in ascending order: each radix >= the last one
        if m == 1:
            out.add(tuple(_in_pass_order(taken)))
            return
        if len(taken) == most:
            return
        for r in RADICES:
            if smallest <= r <= max_radix and m % r == 0:
                walk(m // r, r, taken + [r])

    walk(n, 2, [])
    return sorted((list(t) for t in out), key=_rank)


def complex_length(L: int) -> int:
    """The length of the complex FFT behind a real one of length ``L``: ``L / 2`` for an even
    ``L`` (two samples packed per complex value), else ``L``."""
    return L // 2 if L % 2 == 0 else L


def _complex_bytes(fft_dtype) -> int:
    """Bytes of one complex value of a transform in ``fft_dtype``."""
    return 16 if np.dtype(fft_dtype) == np.float64 else 8


def block_bytes(L: int, fft_dtype, rows_per_block: int = 1) -> int:
    """Dynamic shared memory of a block of ``rows_per_block`` rows: the kernels' two buffers of
    :func:`complex_length` + 1 complex values per row (the inverse loads ``L // 2 + 1``)."""
    return 2 * rows_per_block * (complex_length(L) + 1) * _complex_bytes(fft_dtype)


def supported(L: int, fft_dtype, smem_per_block: int) -> bool:
    """Whether the row FFT kernels take length ``L`` in ``fft_dtype`` (float64 / float32) on a
    device with ``smem_per_block`` bytes of shared memory per block."""
    if L < 1 or radices(complex_length(L)) is None:
        return False
    return block_bytes(L, fft_dtype) <= smem_per_block


def longest_length(fft_dtype, smem_per_block: int) -> int:
    """The longest even length the row FFT kernels take in ``fft_dtype`` on a device with
    ``smem_per_block`` bytes of shared memory per block (0 where none fits): 14400 in float64
    within 227 KB, 4050 within 64 KB."""
    n = smem_per_block // (2 * _complex_bytes(fft_dtype)) - 1  # the most values a row may hold
    while n >= 1 and radices(n) is None:
        n -= 1
    return 2 * n if n >= 1 else 0


def default_rows_per_block(L: int, fft_dtype) -> int:
    """Rows per block of a transform of length ``L`` in ``fft_dtype`` by default: whole rows,
    about :data:`ROWS_BYTES` of them per buffer."""
    return max(1, ROWS_BYTES // (complex_length(L) * _complex_bytes(fft_dtype)))


def twiddle_table(n: int, rads=None) -> np.ndarray:
    """The kernels' twiddles for a complex FFT of length ``n`` (float64, on the host):
    ``exp(-2 pi i k / 2n)`` for ``k <= n // 2`` (the real FFT's split of an even length
    ``2n``), then for each pass of ``rads`` (by default :func:`radices`), combining
    sub-transforms of length ``ls`` ``RAD`` at a time, the ``(RAD - 1) x ls`` values
    ``exp(-2 pi i q k / (ls RAD))``, q-major (the complex128 kernels read only each pass's
    ``q = 1`` row and make the others from it: ``TwiddlePowers`` in ``rowfft.cuh``).
    Each angle is reduced to a fraction of a turn in [-1/2, 1/2] exactly, in integers, before
    its sine and cosine."""

    def unit(num, den):  # exp(-2 pi i num / den) for integer arrays num
        t = np.mod(num, den).astype(np.float64) / den
        t -= np.rint(t)
        return np.cos(2 * np.pi * t) - 1j * np.sin(2 * np.pi * t)

    parts = [unit(np.arange(n // 2 + 1), 2 * n)]
    ls = 1
    for rad in radices(n) if rads is None else rads:
        q, k = np.meshgrid(np.arange(1, rad), np.arange(ls), indexing="ij")
        parts.append(unit(q * k, ls * rad).ravel())
        ls *= rad
    return np.concatenate(parts)


def twiddles(n: int, cdtype, rads):
    """:func:`twiddle_table` of passes ``rads`` on the current device in ``cdtype``, made once
    per device."""
    cp = backend.cupy
    key = (cp.cuda.Device().id, n, np.dtype(cdtype), tuple(rads))
    with _lock:
        table = _tables.get(key)
    if table is None:
        table = cp.asarray(twiddle_table(n, rads).astype(cdtype))
        with _lock:
            _tables[key] = table
    return table


class RowFFT:
    """One batched real FFT of length ``L`` over ``rows`` rows, as one kernel.

    ``kind="r2c"``: stages 1 and 2. Reads ``(rows, nt)`` in ``in_dtype`` (real), rounds each
    sample to ``mid_dtype`` (stage 1's precision), pads with zeros to ``L``, transforms in
    ``fft_dtype`` and writes ``(rows, L // 2 + 1)`` in ``out_dtype`` (complex), times
    ``scale[(r % nd), f]`` (``(nd, nfp)`` float32) when ``scale`` is given.

    ``kind="c2r"``: stages 4 and 5. Reads ``(rows, L // 2 + 1)`` in ``in_dtype`` (complex),
    transforms in ``fft_dtype`` (unnormalised), rounds the first ``nt`` samples of each row to
    ``mid_dtype`` (stage 5's precision) and writes them ``(rows, nt)`` in ``out_dtype``.

    ``rows_per_block``, ``threads`` and ``rads`` (the passes' radices, product
    :func:`complex_length`) override the defaults (:data:`ROWS_BYTES`, :data:`THREADS`,
    :func:`radices` up to :data:`MAX_RADIX`), for the tuning sweeps.
    """

    def __init__(self, kind: str, L: int, nt: int, rows: int, in_dtype, mid_dtype, fft_dtype,
                 out_dtype, scale=None, nd: int = 1, nfp: int = 0, rows_per_block=None,
                 threads=None, rads=None, smem_per_block: int = 227 * 1024):
        in_dtype, mid_dtype = np.dtype(in_dtype), np.dtype(mid_dtype)
        fft_dtype, out_dtype = np.dtype(fft_dtype), np.dtype(out_dtype)
        if kind not in ("r2c", "c2r"):
            raise ValueError(f"kind must be 'r2c' or 'c2r', got {kind!r}")
        if not supported(L, fft_dtype, smem_per_block):
            raise ValueError(f"no row FFT kernel for length {L} in {fft_dtype} (it needs a "
                             f"5-smooth length that fits shared memory)")
        if not 1 <= nt <= L:
            raise ValueError(f"nt must be in [1, L = {L}], got {nt}")
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        real_in, real_out = (in_dtype, out_dtype) if kind == "r2c" else (out_dtype, in_dtype)
        for what, dtype, table in (("the real side", real_in, _REAL), ("the complex side",
                                   real_out, _CPLX), ("mid_dtype", mid_dtype, _REAL),
                                  ("fft_dtype", fft_dtype, _REAL)):
            if dtype not in table:
                raise ValueError(f"{what} of a row FFT must be one of "
                                 f"{', '.join(sorted(d.name for d in table))}, got {dtype}")
        if threads is not None and not 1 <= int(threads) <= MAX_THREADS:
            raise ValueError(f"threads must be in [1, {MAX_THREADS}] (the kernels' launch "
                             f"bound), got {threads}")
        if scale is not None and (tuple(scale.shape) != (nd, nfp) or nfp < L // 2 + 1
                                  or np.dtype(scale.dtype) != np.float32):
            raise ValueError(f"scale must be float32 ({nd}, nfp) with nfp >= {L // 2 + 1}, got "
                             f"{np.dtype(scale.dtype)} {tuple(scale.shape)} for nfp = {nfp}")
        n = complex_length(L)
        if rads is None:
            rads = radices(n, MAX_RADIX[fft_dtype, kind])
        rads = [int(r) for r in rads]
        if (int(np.prod(rads, dtype=np.int64)) != n or not set(rads) <= set(RADICES)
                or len(rads) > MAX_PASSES):
            raise ValueError(f"rads must be at most {MAX_PASSES} of {RADICES} with product "
                             f"{n}, got {rads}")
        cdtype = np.dtype(np.complex128 if fft_dtype == np.float64 else np.complex64)
        if kind == "r2c":
            if out_dtype == np.complex128 and fft_dtype != np.float64:
                raise ValueError("a float32 FFT writes complex64")
            name = (f"rfft_pad_{_REAL[in_dtype]}_{_REAL[mid_dtype]}_{_REAL[fft_dtype]}_"
                    f"{_CPLX[out_dtype]}")
        else:
            if in_dtype == np.complex128 and fft_dtype != np.float64:
                raise ValueError("a float32 FFT reads complex64")
            if scale is not None:
                raise ValueError("only the forward transform applies row scales")
            name = (f"irfft_unpad_{_CPLX[in_dtype]}_{_REAL[fft_dtype]}_{_REAL[mid_dtype]}_"
                    f"{_REAL[out_dtype]}")
        self.family = min(f for f in FAMILIES if f >= max(rads, default=2))
        name += f"_r{self.family}"
        rpb = rows_per_block or default_rows_per_block(L, fft_dtype)
        rpb = max(1, min(rpb, rows, smem_per_block // block_bytes(L, fft_dtype)))
        self.kind, self.L, self.nt, self.rows, self.name = kind, L, nt, rows, name
        self.rows_per_block, self.threads = rpb, int(threads or THREADS)
        self.smem = block_bytes(L, fft_dtype, rpb)
        self.grid = (-(-rows // rpb),)
        self.radices = rads
        self._given = dict(kind=kind, L=L, nt=nt, rows=rows, in_dtype=in_dtype,
                           mid_dtype=mid_dtype, fft_dtype=fft_dtype, out_dtype=out_dtype,
                           scale=scale, nd=nd, nfp=nfp, rows_per_block=rows_per_block,
                           threads=threads, rads=rads, smem_per_block=smem_per_block)
        packed = packed_radices(rads)
        self.twiddles = twiddles(n, cdtype, rads)
        fn = kernels.get_function(name, self.smem)
        i64, i32 = np.int64, np.int32
        geometry = (i32(nt), i32(L), i32(rpb), np.uint64(packed), i32(len(rads)))
        if kind == "r2c":
            self.scale = scale  # kept alive with the plan
            s = np.uint64(0) if scale is None else scale
            args = (None, None, self.twiddles, s, i64(rows)) + geometry + (i32(nd), i32(nfp),
                                                                         None)
        else:
            args = (None, None, self.twiddles, i64(rows)) + geometry
        self._launch = kernels.PackedLaunch(fn, self.grid, (self.threads,), self.smem, args)

    def variant(self, **changes) -> "RowFFT":
        """The same transform with some of the constructor's arguments changed (the tuning
        sweeps: ``rows_per_block``, ``threads``, ``rads``)."""
        return RowFFT(**{**self._given, **changes})

    def __call__(self, in_ptr: int, out_ptr: int, stream: int | None = None,
                 amax: int = 0) -> None:
        """Run on ``stream`` (a pointer; by default the current stream). ``amax``: for
        ``r2c``, the scratch pointer of an input's largest magnitude
        (:meth:`fftmatvec._scaling._DeviceAmax.fold`), computed as the input is read; 0
        computes none."""
        if stream is None:
            stream = backend.cupy.cuda.get_current_stream().ptr
        if self.kind == "r2c":
            self._launch(stream, in_ptr, out_ptr, amax)
        else:
            self._launch(stream, in_ptr, out_ptr)
