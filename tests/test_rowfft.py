"""The package's own real FFTs of the time axis (stages 1+2 and 4+5 in one kernel each,
``hip_kernels/rowfft.cuh``), against NumPy's float64 FFT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fftmatvec import backend
from fftmatvec.gpu import rowfft as _rowfft
from fftmatvec.operator import fft_length

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
C128, C64 = np.dtype(np.complex128), np.dtype(np.complex64)


# ---- host side (no GPU needed) --------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10, 100, 500, 1000, 1350, 1024, 3 ** 7, 5 ** 5])
def test_radices_multiply_to_the_length(n):
    rads = _rowfft.radices(n)
    assert rads is not None and int(np.prod(rads, dtype=np.int64)) == n
    assert set(rads) <= set(_rowfft.RADICES)
    odd = [r for r in rads if r % 2]
    assert rads[:len(odd)] == odd  # the odd radices first (their first pass has no conflicts)


@pytest.mark.parametrize("n", [1, 16, 100, 1000, 1350, 7200])
@pytest.mark.parametrize("cap", [5, 8, 10])
def test_radices_take_the_fewest_passes_under_the_cap(n, cap):
    rads = _rowfft.radices(n, cap)
    assert int(np.prod(rads, dtype=np.int64)) == n and max(rads, default=0) <= cap
    every = _rowfft.factorisations(n, extra=2, max_radix=cap)
    assert rads in every  # the first by (passes, largest radix)
    assert all((len(rads), max(rads, default=0)) <= (len(t), max(t, default=0)) for t in every)


def test_factorisations():
    assert _rowfft.factorisations(100, extra=0) == [[10, 10]]
    assert _rowfft.factorisations(1000, extra=0, max_radix=8) == [[5, 5, 5, 8]]
    every = _rowfft.factorisations(1000, extra=1)
    assert every == [[10, 10, 10], [5, 5, 5, 8], [5, 5, 10, 4], [5, 10, 10, 2]]
    assert _rowfft.factorisations(7) == []
    assert _rowfft.radices(36, 8) == [6, 6]  # 2 passes, not 3, 3, 4


def _stockham(z, sign, rads=None):
    """The kernels' complex FFT (fft_rows / fft_pass in hip_kernels/rowfft.cuh) in NumPy, on
    the host's twiddle table: each pass combines sub-transforms of length ls RAD at a time,
    butterfly j reading j + q stride and writing (j - k) RAD + k + q ls, k = j % ls."""
    n = z.shape[-1]
    rads = _rowfft.radices(n) if rads is None else rads
    table = _rowfft.twiddle_table(n, rads)
    twp = n // 2 + 1  # the passes' tables follow the real split's n // 2 + 1 values
    a, ls = z.astype(np.complex128), 1
    for rad in rads:
        stride = n // rad
        j = np.arange(stride)
        k = j % ls
        v = np.stack([a[..., j + q * stride] for q in range(rad)])
        for q in range(1, rad):
            w = table[twp + (q - 1) * ls + k]
            v[q] *= w if sign < 0 else np.conj(w)
        dft = np.exp(sign * 2j * np.pi * np.outer(np.arange(rad), np.arange(rad)) / rad)
        out = np.tensordot(dft, v, axes=(1, 0))
        b = np.empty_like(a)
        for q in range(rad):
            b[..., (j - k) * rad + k + q * ls] = out[q]
        a, twp, ls = b, twp + (rad - 1) * ls, ls * rad
    return a


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 100, 1000, 1350, 1024, 243])
def test_twiddle_table_drives_the_passes(rng, n):
    """The table the host makes, read as the kernels read it, gives the forward and inverse
    DFT; its first n // 2 + 1 values are exp(-2 pi i k / 2n)."""
    z = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    scale = max(1.0, np.sqrt(n))
    assert np.abs(_stockham(z, -1) - np.fft.fft(z)).max() < 1e-13 * scale * n
    assert np.abs(_stockham(z, 1) - np.fft.ifft(z) * n).max() < 1e-13 * scale * n
    head = _rowfft.twiddle_table(n)[: n // 2 + 1]
    assert np.abs(head - np.exp(-2j * np.pi * np.arange(n // 2 + 1) / (2 * n))).max() < 1e-15


@pytest.mark.parametrize("n,rads", [(60, [10, 6]), (240, [3, 8, 10]), (1000, [10, 10, 10]),
                                    (1000, [5, 10, 10, 2]), (216, [6, 6, 6])])
def test_twiddle_table_drives_composite_passes(rng, n, rads):
    z = rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))
    assert np.abs(_stockham(z, -1, rads) - np.fft.fft(z)).max() < 1e-12 * n
    assert np.abs(_stockham(z, 1, rads) - np.fft.ifft(z) * n).max() < 1e-12 * n


@pytest.mark.parametrize("n", [0, 7, 11, 1008, 2 * 49])
def test_radices_refuse_other_primes(n):
    assert _rowfft.radices(n) is None


def test_supported_lengths():
    big = 227 * 1024
    assert _rowfft.supported(2000, F64, big) and _rowfft.supported(2000, F32, big)
    assert _rowfft.supported(25, F64, big) and _rowfft.complex_length(25) == 25  # odd: all of it
    assert _rowfft.complex_length(2000) == 1000
    assert not _rowfft.supported(2016, F64, big)  # 1008 = 2^4 3^2 7
    assert not _rowfft.supported(21, F64, big)
    assert not _rowfft.supported(0, F64, big)
    # two buffers of N + 1 complex values per row must fit a block
    assert _rowfft.supported(2 * 7200, F64, big) and not _rowfft.supported(2 * 7290, F64, big)
    assert _rowfft.supported(2 * 7290, F32, big)


def test_block_bytes():
    """Two buffers of complex_length + 1 values per row, 16 or 8 bytes each."""
    assert _rowfft.block_bytes(2000, F64) == 2 * 1001 * 16
    assert _rowfft.block_bytes(2000, F32, 2) == 2 * 2 * 1001 * 8
    assert _rowfft.block_bytes(15, F64, 3) == 2 * 3 * 16 * 16  # odd: all 15 values, plus one
    assert _rowfft.default_rows_per_block(2000, F64) == 1
    assert _rowfft.default_rows_per_block(2000, F32) == 2
    assert _rowfft.default_rows_per_block(200, F64) == 10


def test_operator_lengths_are_supported():
    """Every length the operator picks by default has a row FFT kernel."""
    for nt in list(range(1, 300)) + [500, 1000, 2000, 3000]:
        L = fft_length(nt)
        assert _rowfft.supported(L, F64, 227 * 1024), (nt, L)


@pytest.mark.parametrize("args,match", [
    (("fft", 8, 4, 1, F64, F64, F64, C128), "kind"),
    (("r2c", 2016, 1000, 1, F64, F64, F64, C128), "length 2016"),
    (("r2c", 8, 9, 1, F64, F64, F64, C128), "nt"),
    (("r2c", 8, 4, 0, F64, F64, F64, C128), "rows"),
    (("r2c", 8, 4, 1, F64, F64, F32, C128), "float32 FFT writes complex64"),
    (("c2r", 8, 4, 1, C128, F64, F32, F64), "float32 FFT reads complex64"),
    (("r2c", 8, 4, 1, np.dtype(np.float16), F64, F64, C128), "real side .* got float16"),
    (("c2r", 8, 4, 1, F64, F64, F64, F64), "complex side .* got float64"),
    (("r2c", 8, 4, 1, F64, F64, C128, C128), "fft_dtype .* got complex128"),
])
def test_plan_rejects_bad_arguments(args, match):
    """Checked before anything touches a GPU."""
    with pytest.raises(ValueError, match=match):
        _rowfft.RowFFT(*args)


@pytest.mark.parametrize("L,rads", [(32, [2, 2]), (32, [8, 4]), (28, [7, 2]), (32, [16]),
                                    (4096, [2] * 11)])
def test_plan_rejects_bad_radices(L, rads):
    """A product other than the complex length, a radix the kernels lack, too many passes."""
    with pytest.raises(ValueError, match="rads must be|no row FFT kernel"):
        _rowfft.RowFFT("r2c", L, 4, 1, F64, F64, F64, C128, rads=rads)


def test_plan_rejects_bad_blocks_and_scales():
    with pytest.raises(ValueError, match="threads"):
        _rowfft.RowFFT("r2c", 8, 4, 1, F64, F64, F64, C128, threads=2048)
    with pytest.raises(ValueError, match="launch bound"):
        _rowfft.RowFFT("r2c", 8, 4, 1, F64, F64, F64, C128, threads=_rowfft.MAX_THREADS + 1)
    scale = np.ones((3, 4), dtype=np.float32)  # nfp = 4 < L // 2 + 1 = 5
    with pytest.raises(ValueError, match="nfp >= 5"):
        _rowfft.RowFFT("r2c", 8, 4, 3, F64, F64, F64, C64, scale=scale, nd=3, nfp=4)
    with pytest.raises(ValueError, match="only the forward"):
        _rowfft.RowFFT("c2r", 8, 4, 3, C64, F64, F64, F64, scale=np.ones((3, 8), np.float32),
                       nd=3, nfp=8)


# ---- on the GPU -------------------------------------------------------------------------------
LENGTHS = [1, 2, 3, 4, 6, 10, 12, 15, 16, 20, 25, 30, 45, 48, 90, 200, 250, 1000, 2000, 2700]


def _tol(fft_dtype, narrow):
    """Relative tolerance against float64: the FFT's precision, or complex64 / float32 values."""
    return 1e-13 if fft_dtype == F64 and not narrow else 2e-6 if fft_dtype == F64 else 1e-5


@gpu
@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("fft_dtype,out_dtype", [(F64, C128), (F64, C64), (F32, C64)])
@pytest.mark.parametrize("in_dtype", [F64, F32])
def test_forward_matches_numpy(rng, L, fft_dtype, out_dtype, in_dtype):
    cp = backend.cupy
    for nt in sorted({1, (L + 1) // 2, max(1, L // 2 - 1), L}):
        for rows, rpb in ((1, None), (int(rng.integers(2, 40)), None), (17, 3)):
            x = rng.standard_normal((rows, nt)).astype(in_dtype)
            xd = cp.asarray(x)
            out = cp.full((rows, L // 2 + 1), np.nan, dtype=out_dtype)  # poisoned
            plan = _rowfft.RowFFT("r2c", L, nt, rows, in_dtype, F64, fft_dtype, out_dtype,
                                  rows_per_block=rpb)
            plan(xd.data.ptr, out.data.ptr)
            ref = np.fft.rfft(x.astype(np.float64), n=L)
            got = out.get()
            assert np.isfinite(got).all()
            err = np.abs(got - ref).max() / np.abs(ref).max()
            assert err < _tol(fft_dtype, out_dtype == C64), (nt, rows, rpb, err)
            assert np.array_equal(xd.get(), x)


@gpu
@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("in_dtype,fft_dtype", [(C128, F64), (C64, F64), (C64, F32)])
@pytest.mark.parametrize("out_dtype", [F64, F32])
def test_inverse_matches_numpy(rng, L, in_dtype, fft_dtype, out_dtype):
    cp = backend.cupy
    nf = L // 2 + 1
    for nt in sorted({1, (L + 1) // 2, max(1, L // 2 - 1), L}):  # odd and even Nt: the kept values
        for rows, rpb in ((1, None), (int(rng.integers(2, 40)), None), (17, 3)):
            y = (rng.standard_normal((rows, nf)) + 1j * rng.standard_normal((rows, nf)))
            y = y.astype(in_dtype)
            yd = cp.asarray(y)
            out = cp.full((rows, nt), np.nan, dtype=out_dtype)
            plan = _rowfft.RowFFT("c2r", L, nt, rows, in_dtype, F64, fft_dtype, out_dtype,
                                  rows_per_block=rpb)
            plan(yd.data.ptr, out.data.ptr)
            # unnormalised, the imaginary parts of X[0] and X[N] dropped (as numpy does)
            ref = np.fft.irfft(y.astype(np.complex128), n=L)[:, :nt] * L
            got = out.get()
            assert np.isfinite(got).all()
            err = np.abs(got - ref).max() / np.abs(ref).max()
            assert err < _tol(fft_dtype, out_dtype == F32), (nt, rows, rpb, err)
            assert np.array_equal(yd.get(), y)  # the input is only read


@gpu
@pytest.mark.parametrize("mid", [F64, F32])
def test_stage_precisions_round_on_the_way(rng, mid):
    """Stage 1's precision rounds each sample before a float64 FFT, stage 5's each output."""
    cp = backend.cupy
    L, nt, rows = 200, 100, 5
    x = rng.standard_normal((rows, nt))
    out = cp.full((rows, L // 2 + 1), np.nan, dtype=C128)
    _rowfft.RowFFT("r2c", L, nt, rows, F64, mid, F64, C128)(cp.asarray(x).data.ptr, out.data.ptr)
    ref = np.fft.rfft(x.astype(mid).astype(np.float64), n=L)
    assert np.abs(out.get() - ref).max() / np.abs(ref).max() < 1e-13
    y = out.get()
    back = cp.full((rows, nt), np.nan, dtype=F64)
    _rowfft.RowFFT("c2r", L, nt, rows, C128, mid, F64, F64)(out.data.ptr, back.data.ptr)
    exact = np.fft.irfft(y, n=L)[:, :nt] * L
    assert np.array_equal(back.get(), back.get().astype(mid).astype(np.float64))
    assert np.abs(back.get() - exact).max() / np.abs(exact).max() < (1e-13 if mid == F64 else 1e-6)


@gpu
def test_forward_applies_row_scales(rng):
    """A float16 adjoint's forward FFT writes its output times the row scales of Khat."""
    cp = backend.cupy
    L, nt, nd, nfp, k = 200, 100, 7, 104, 3
    rows = k * nd
    s = rng.uniform(0.5, 2.0, (nd, nfp)).astype(np.float32)
    x = rng.standard_normal((rows, nt))
    out = cp.full((rows, L // 2 + 1), np.nan, dtype=C64)
    plan = _rowfft.RowFFT("r2c", L, nt, rows, F64, F64, F64, C64, scale=cp.asarray(s), nd=nd,
                          nfp=nfp)
    plan(cp.asarray(x).data.ptr, out.data.ptr)
    ref = np.fft.rfft(x, n=L) * s[np.arange(rows) % nd, : L // 2 + 1]
    assert np.abs(out.get() - ref).max() / np.abs(ref).max() < 2e-6


RADIX_CASES = [(2000, [10, 10, 10]), (2000, [5, 5, 5, 8]), (240, [3, 8, 5]), (240, [6, 10, 2]),
               (432, [6, 6, 6]), (75, [3, 5, 5]), (45, [3, 5, 3]), (20, [10])]


def test_radix_cases_cover_every_radix():
    assert {r for _, rads in RADIX_CASES for r in rads} == set(_rowfft.RADICES) - {4}


@gpu
@pytest.mark.parametrize("L,rads", RADIX_CASES)
@pytest.mark.parametrize("fft_dtype", [F64, F32])
def test_every_radix_matches_numpy(rng, L, rads, fft_dtype):
    """Each composite radix (a prime-factor DFT in registers) and each family of kernels, in
    both directions, against NumPy."""
    cp = backend.cupy
    cplx = C128 if fft_dtype == F64 else C64
    nt, rows = L - L // 3, 5
    x = rng.standard_normal((rows, nt))
    out = cp.full((rows, L // 2 + 1), np.nan, dtype=cplx)
    plan = _rowfft.RowFFT("r2c", L, nt, rows, F64, F64, fft_dtype, cplx, rads=rads)
    assert plan.radices == rads and plan.family >= max(rads)
    plan(cp.asarray(x).data.ptr, out.data.ptr)
    ref = np.fft.rfft(x, n=L)
    tol = _tol(fft_dtype, False)
    assert np.abs(out.get() - ref).max() / np.abs(ref).max() < tol
    y = (rng.standard_normal((rows, L // 2 + 1))
         + 1j * rng.standard_normal((rows, L // 2 + 1))).astype(cplx)
    back = cp.full((rows, nt), np.nan, dtype=F64)
    _rowfft.RowFFT("c2r", L, nt, rows, cplx, F64, fft_dtype, F64, rads=rads)(
        cp.asarray(y).data.ptr, back.data.ptr)
    exact = np.fft.irfft(y.astype(np.complex128), n=L)[:, :nt] * L
    assert np.abs(back.get() - exact).max() / np.abs(exact).max() < tol


def test_thread_bound_matches_the_kernels():
    """The host's block-size limit is the kernels' launch bound."""
    text = (Path(__file__).parents[1] / "hip_kernels" / "rowfft.cuh").read_text()
    assert f"#define ROWFFT_MAX_THREADS {_rowfft.MAX_THREADS}\n" in text
    assert _rowfft.THREADS <= _rowfft.MAX_THREADS
