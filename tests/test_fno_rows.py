"""The FNO layer's last-axis transforms on the row FFT kernels (fftmatvec/fno/_rows.py):
against the float64 DFT matrices they replace, through the layer against the GEMM chain and the
dense reference, and the planner's choice."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError, backend
from fftmatvec.fno import _dft, kept_modes, spectral_conv
from fftmatvec.gpu import rowfft as _rowfft
from fftmatvec.fno._plan import fno_rows, fno_rows_auto

from fno_oracle import assert_grads_close as _assert_grads_close
from fno_oracle import clear_chains as _clear_chains
from fno_oracle import cuda_case as _cuda_case
from fno_oracle import cupy_dft_error
from fno_oracle import layer_grads as _layer_grads
from fno_oracle import rand_case as _rand

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")

# even lengths (packed: complex length L / 2) and odd ones (one complex FFT of length L),
# powers of two and not, one bin, a few, and every bin up to Nyquist
LENGTHS = [(2, 1), (8, 5), (10, 3), (30, 16), (45, 23), (64, 9), (75, 12), (90, 46), (128, 33),
           (250, 17), (256, 129), (4096, 33), (1, 1), (15, 8), (64, 33), (128, 65), (256, 1),
           (192, 9), (512, 100), (1024, 65), (4096, 129), (1088, 40), (1088, 545), (2048, 64),
           (8192, 40), (16384, 70)]


def _matrix(kind, L, m):
    """The float64 matrix each transform replaces (analysis F, synthesis A, adjoints)."""
    return {"F": _dft.analysis_last(L, m), "A": _dft.synthesis_last(L, m),
            "AT": _dft.synthesis_last(L, m).T, "FT": _dft.analysis_last(L, m).T}[kind]


def test_no_rows_without_a_gpu(monkeypatch):
    """The planner takes the GEMMs where there is no GPU, and says why where forced."""
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    assert not fno_rows(64, 9, np.float32, 0)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1")
    with pytest.raises(FFTMatvecValueError, match="fno_rows=1.*no GPU"):
        fno_rows(64, 9, np.float32, 0)


def test_auto_rule():
    """By default the forward transforms where the GEMM is compute-bound, the inverse ones
    where their warp form takes the axis: rows of 128 or 256 points."""
    assert fno_rows_auto(256, 33) == {"r2c", "c2r"}
    assert fno_rows_auto(128, 33) == {"r2c", "c2r"}
    assert fno_rows_auto(4096, 33) == {"r2c", "c2r"}  # long rows: the column form both ways
    assert fno_rows_auto(4096, 16) == {"r2c", "c2r"}  # (the GEMM's flops per byte below 16)
    assert fno_rows_auto(4096, 16, warp=False) == set()
    assert fno_rows_auto(4096, 200) == {"r2c"}        # past COLS_AUTO_MAX_BINS: the pass form
    assert fno_rows_auto(1088, 40) == {"r2c", "c2r"}
    assert fno_rows_auto(128, 9) == {"c2r"} and fno_rows_auto(256, 17) == {"c2r"}
    assert fno_rows_auto(128, 33, smem_per_block=64) == {"r2c"}   # its block does not fit
    for n, m in ((64, 9), (85, 7), (96, 9)):
        assert fno_rows_auto(n, m) == set(), (n, m)


def test_warp_auto_rule(monkeypatch):
    """variant="auto" takes the rows' warp form for rows of 64 P points, not long rows, and
    for the inverse from 128 points; not at all without ROW_WARP_AUTO."""
    from fftmatvec.fno import _rows

    for L, m in ((64, 9), (128, 33), (256, 65)):
        assert _rows.row_warp_auto("r2c", L, m)
    assert not _rows.row_warp_auto("c2r", 64, 9)
    assert _rows.row_warp_auto("c2r", 128, 9) and _rows.row_warp_auto("c2r", 256, 33)
    for kind in ("r2c", "c2r"):
        assert not _rows.row_warp_auto(kind, 4096, 33)   # long rows
        assert not _rows.row_warp_auto(kind, 96, 9)      # no warp form
    monkeypatch.setattr(_rows, "ROW_WARP_AUTO", False)
    assert not _rows.row_warp_auto("r2c", 128, 33)


@gpu
@pytest.mark.gpu
def test_default_rows_on_the_device(monkeypatch):
    """On a GPU the planner's default is fno_rows_auto; plan fno_warp=0 (the pass form, slower
    than the GEMMs for the inverse) keeps the inverse transforms on the GEMMs."""
    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    dev = backend.cupy.cuda.Device().id
    assert fno_rows(128, 33, np.float32, dev) == {"r2c", "c2r"}
    assert fno_rows(4096, 33, np.float32, dev) == {"r2c", "c2r"}
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=0")
    assert fno_rows(128, 33, np.float32, dev) == {"r2c"}
    assert fno_rows(4096, 33, np.float32, dev) == {"r2c"}
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=0,fno_rows=1")
    assert fno_rows(128, 33, np.float32, dev) == {"r2c", "c2r"}


def test_no_rows_in_float64(monkeypatch):
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1")
    with pytest.raises(FFTMatvecValueError, match="fno_rows=1.*float32.*float64"):
        fno_rows(64, 9, np.float64, 0)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0")
    assert not fno_rows(64, 9, np.float32, 0)


def _set(L, m, variant, modes_major=False):
    """The four transforms in ``variant`` (skipped where the warp form does not take L)."""
    from fftmatvec.fno import _rows

    cp = backend.cupy
    dev = cp.cuda.Device().id
    if variant == "warp" and not _rows.row_warp_supported(L, m, 48 * 1024):
        pytest.skip(f"no warp form for L = {L}")
    if variant == "columns" and not _rows.row_cols_supported(L, m, 48 * 1024):
        pytest.skip(f"no column form for L = {L}")
    if variant == "passes" and not _rowfft.supported(L, np.float32, 48 * 1024):
        pytest.skip(f"no pass form for L = {L}")
    ts = _rows.last_axis_set(L, m, dev, modes_major=modes_major, variant=variant)
    assert all(t.variant == variant for t in ts.values())
    return ts


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["passes", "warp", "columns"])
@pytest.mark.parametrize("L,m", LENGTHS)
@pytest.mark.parametrize("kind", ["F", "A", "AT", "FT"])
def test_last_axis_matches_its_matrix(rng, kind, L, m, variant):
    """Each of the four transforms, in both forms, equals its float64 DFT matrix within float32
    rounding, on every element of a poisoned output, for row counts that leave a partial last
    block."""
    cp = backend.cupy
    t = _set(L, m, variant)[kind]
    M = _matrix(kind, L, m)
    assert t.shape == M.shape
    for rows in (1, 7, 301):
        a = rng.standard_normal((rows, M.shape[0]))
        want = a @ M
        out = cp.full((rows, M.shape[1]), np.nan, dtype=np.float32)
        got = t(cp.asarray(a, dtype=np.float32), out=out)
        assert got is out
        err = np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()
        assert err < 2e-6 * max(1.0, np.log2(L)), (kind, L, m, rows, err)


def _in_layout(s, layout, m):
    """The spectral side ``s`` ``(rows, 2m)`` (real parts, then imaginary) in ``layout``: the
    split modes ``(2m, rows)`` (``True``) or the paired ones ``(m, 2 rows)``, bin k of row r at
    [k, 2r] and [k, 2r + 1]."""
    if layout == "paired":
        return s.reshape(-1, 2, m).transpose(2, 0, 1).reshape(m, -1)
    return s.T


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("layout", [True, "paired"])
@pytest.mark.parametrize("variant", ["passes", "warp", "columns"])
@pytest.mark.parametrize("L,m", LENGTHS)
@pytest.mark.parametrize("kind", ["F", "A", "AT", "FT"])
def test_last_axis_modes_major_matches_its_matrix(rng, kind, L, m, variant, layout):
    """The transforms with their spectral side modes-major, split ``(2m, rows)`` or in complex
    pairs ``(m, 2 rows)``, in both forms, equal the float64 matrix they replace, on every
    element of a poisoned output, for row counts that leave a partial last block and a block of
    a single row."""
    cp = backend.cupy
    t = _set(L, m, variant, modes_major=layout)[kind]
    M = _matrix(kind, L, m)
    forward = kind in ("F", "AT")                    # rows (rows, L) -> the modes
    for rows in (1, 7, 301):
        if forward:
            a = rng.standard_normal((rows, L))
            want = _in_layout(a @ M, layout, m)
        else:
            s = rng.standard_normal((rows, 2 * m))
            a, want = _in_layout(s, layout, m), s @ M
        out = cp.full(want.shape, np.nan, dtype=np.float32)
        got = t(cp.asarray(a, dtype=np.float32), out=out)
        assert got is out
        err = np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()
        assert err < 2e-6 * max(1.0, np.log2(L)), (kind, L, m, rows, err)
    paired = layout == "paired"
    with pytest.raises(ValueError, match="rows" if forward else
                       "complex pairs" if paired else "columns"):
        t(cp.zeros((m + 1, 3) if paired else (3, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="out must be"):
        t(cp.asarray(a, dtype=np.float32),
          out=cp.zeros((want.shape[0] + 1, want.shape[1]), dtype=np.float32))


@gpu
@pytest.mark.gpu
def test_last_axis_checks_its_arguments():
    from fftmatvec.fno._rows import LastAxis

    cp = backend.cupy
    dev = cp.cuda.Device().id
    with pytest.raises(ValueError, match="no FNO row kernel for L = 85"):
        LastAxis("r2c", 85, 7, np.ones(7), dev)
    with pytest.raises(ValueError, match="no warp-form FNO row kernel for L = 4096 keeping "
                                         "m = 33 bins \\(rows of 64, 128 or 256"):
        LastAxis("c2r", 4096, 33, np.ones(33), dev, variant="warp")
    with pytest.raises(ValueError, match="variant must be one of"):
        LastAxis("c2r", 128, 33, np.ones(33), dev, variant="shuffles")
    with pytest.raises(ValueError, match="no column-form FNO row kernel for L = 128"):
        LastAxis("r2c", 128, 33, np.ones(33), dev, variant="columns")
    with pytest.raises(ValueError, match="no pass-form FNO row kernel for L = 1088"):
        LastAxis("r2c", 1088, 40, np.ones(40), dev, variant="passes")
    from fftmatvec.fno import _rows

    # the column form by default where it takes the axis (rows of 64 R points, 16 <= R <= 256)
    # and ROW_COLS_AUTO; the only form of 1088 points (544 = 32 x 17 complex values)
    assert LastAxis("c2r", 1088, 40, np.ones(40), dev).variant == "columns"
    for kind, L, m in (("r2c", 128, 33), ("c2r", 128, 33), ("c2r", 64, 9), ("r2c", 4096, 33),
                       ("c2r", 4096, 33), ("r2c", 512, 100), ("r2c", 4096, 200)):
        want = ("columns" if _rows.row_cols_auto(L, m) else "warp"
                if _rows.row_warp_auto(kind, L, m) else "passes")
        assert LastAxis(kind, L, m, np.ones(m), dev).variant == want, (kind, L, m)
    assert _rows.row_cols_auto(4096, 33) and not _rows.row_cols_auto(512, 100)
    assert not _rows.row_cols_auto(4096, 200)          # past COLS_AUTO_MAX_BINS
    assert LastAxis("r2c", 1088, 300, np.ones(300), dev).variant == "columns"  # the only form
    t = LastAxis("r2c", 64, 9, np.ones(9), dev)
    with pytest.raises(ValueError, match="rows of 64 values"):
        t(cp.zeros((3, 63), dtype=np.float32))
    with pytest.raises(ValueError, match="float32"):
        t(cp.zeros((3, 64), dtype=np.float64))
    with pytest.raises(ValueError, match="out must be"):
        t(cp.zeros((3, 64), dtype=np.float32), out=cp.zeros((3, 17), dtype=np.float32))


@gpu
@pytest.mark.gpu
def test_forced_rows_on_a_length_they_do_not_take(monkeypatch, rng):
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1")
    _clear_chains()
    cp = backend.cupy
    x, w, b = _rand(rng, (2, 3, 17, 17), 2, (6, 6))
    try:
        with pytest.raises(FFTMatvecValueError, match="fno_rows=1.*17 points"):
            spectral_conv(cp.asarray(x, dtype=np.float32), cp.asarray(w.astype(np.complex64)),
                          (6, 6), cp.asarray(b, dtype=np.float32), method="dft")
    finally:
        _clear_chains()


# the last one takes the forward transforms on the kernels by default (fno_rows_auto)
CASES = [((3, 4, 64), 3, 17), ((2, 3, 16, 30), 4, (8, 16)), ((2, 3, 45, 64), 2, (12, 33)),
         ((2, 2, 12, 10, 16), 3, (6, 5, 9)), ((4, 3, 15), 2, 15), ((2, 2, 20, 75), 3, (7, 20)),
         ((2, 3, 6, 128), 2, (4, 64))]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_cupy_layer_on_rows_matches_reference(monkeypatch, rng, shape, cout, n_modes):
    """The CuPy float32 layer, its last axis on the kernels both ways (plan fno_rows=1), within
    1e-5 of the dense float64 reference."""
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1,fno_plane=0")
    err = cupy_dft_error(rng, shape, cout, n_modes)
    modes = tuple(int(v) for v in kept_modes(n_modes))
    device = backend.cupy.cuda.Device().id
    assert fno_rows(shape[-1], modes[-1], np.float32, device) == {"r2c", "c2r"}
    assert err < 1e-5


torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not (torch.cuda.is_available() and backend.gpu_available()),
                          reason="no CUDA device for PyTorch and CuPy")


def _planned_kernels(plan, L, m):
    """The matrices the row kernels replace under plan ``fno_rows=plan`` ("1" or "auto")."""
    if plan == "1":
        return ("A", "AT", "F", "FT")
    auto = fno_rows_auto(L, m)
    names = (("AT", "F") if "r2c" in auto else ()) + (("A", "FT") if "c2r" in auto else ())
    return tuple(sorted(names))


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("plan", ["1", "auto"])
@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_torch_layer_on_rows_matches_gemm_chain(monkeypatch, rng, shape, cout, n_modes, graphs,
                                                plan):
    """Output and the input, weight and bias gradients of the layer on the kernels (both ways,
    or as the planner chooses) agree with the GEMM chain (plan fno_rows=0) within 1e-5,
    eagerly and replayed as graphs (the plane kernels off: tests/test_fno_plane.py)."""
    from fftmatvec.fno import _torch_dft

    case, (xt, wt, bt), modes = _cuda_case(rng, shape, cout, n_modes)
    want_rows = _planned_kernels(plan, shape[-1], modes[-1])
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN",
                           f"fno_rows={plan},fno_plane=0,fno_split=0,fno_paired=0")
        _clear_chains()
        got = _layer_grads(xt, wt, bt, n_modes, graphs)
        assert _torch_dft.chain_for(xt, torch.float32, modes).rows == want_rows
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0,fno_plane=0,fno_split=0")
        want = _layer_grads(xt, wt, bt, n_modes, graphs)
        assert _torch_dft.chain_for(xt, torch.float32, modes).rows == ()
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        _clear_chains()
    _assert_grads_close(got, want, case, n_modes)


ONE_AXIS = [c for c in CASES if len(c[0]) == 3]


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["split", "paired"])
@pytest.mark.parametrize("plan", ["1", "auto"])
@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("shape,cout,n_modes", ONE_AXIS)
def test_torch_modes_major_layer_on_rows_matches_gemm_chain(monkeypatch, rng, shape, cout,
                                                            n_modes, graphs, plan, layout):
    """The split modes (plan fno_split=1) and the paired ones (fno_paired=1) on the row
    kernels, modes-major (both ways, or as the planner chooses; the paired modes take all four
    transforms): output and gradients within 1e-5 of the interleaved GEMM chain, eagerly and
    replayed as graphs."""
    from fftmatvec.fno import _torch_dft

    case, (xt, wt, bt), modes = _cuda_case(rng, shape, cout, n_modes)
    kernels = (_planned_kernels(plan, shape[-1], modes[-1]) if layout == "split"
               else _planned_kernels("1", shape[-1], modes[-1]))
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_rows={plan},fno_{layout}=1")
        _clear_chains()
        got = _layer_grads(xt, wt, bt, n_modes, graphs)
        assert _torch_dft.chain_for(xt, torch.float32, modes, cout).rows == \
            (layout,) + kernels
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0,fno_split=0")
        want = _layer_grads(xt, wt, bt, n_modes, graphs)
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        _clear_chains()
    _assert_grads_close(got, want, case, n_modes)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["split", "paired"])
@pytest.mark.parametrize("shape,cout,n_modes", ONE_AXIS)
def test_cupy_split_layer_on_rows_matches_reference(monkeypatch, rng, shape, cout, n_modes,
                                                    layout):
    """The CuPy float32 layer on the split or paired modes and the row kernels both ways,
    within 1e-5 of the dense float64 reference."""
    monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_rows=1,fno_{layout}=1")
    assert cupy_dft_error(rng, shape, cout, n_modes) < 1e-5


def test_row_warp_rule():
    """The warp form takes even last axes of 64, 128 and 256 points; a block's rows halve from
    ROW_WARP_ROWS (64) while their kept bins pass the budget, and never pass a block's shared
    memory."""
    from fftmatvec.fno import _rows

    smem = 48 * 1024
    for L in (64, 128, 256):
        assert _rows.row_warp_supported(L, L // 2 + 1, smem)
        assert _rows.row_warp_supported(L, 1, smem)
        assert not _rows.row_warp_supported(L, L // 2 + 2, smem)
    for L in (32, 62, 66, 96, 255, 85, 250):
        assert not _rows.row_warp_supported(L, 5, smem), L
    # rows of 64 P points; longer ones take the column form
    assert _rows.row_warp_p(128, 65) == 2 and _rows.row_warp_p(64, 33) == 1
    assert _rows.row_warp_p(256, 1) == 4 and _rows.row_warp_p(256, 130) is None
    for L in (192, 512, 4096):
        assert _rows.row_warp_p(L, 9) is None and not _rows.row_warp_supported(L, 9, smem), L
    assert not _rows.row_warp_supported(128, 33, _rows.row_warp_bytes(33, 1) - 1)
    assert _rows.row_warp_rows(33, None, smem) == _rows.ROW_WARP_ROWS == 64
    assert _rows.row_warp_rows(65, None, smem) == 32
    assert _rows.row_warp_rows(129, None, smem) == 16
    assert _rows.row_warp_bytes(129, 16) <= _rows.ROW_WARP_MAX_BYTES
    assert _rows.row_warp_rows(129, 64, smem) == 32            # asked for: only what fits
    assert _rows.row_warp_bytes(129, 32) <= smem < _rows.row_warp_bytes(129, 64)
    assert _rows.row_warp_rows(129, 64, 2048) == 1


def test_row_cols_rule():
    """The column form takes rows of 64 R points, 16 <= R <= 256 (not only 5-smooth R), any
    kept bins up to Nyquist; a block holds 256 threads of columns, fewer rows where its
    shared memory does not fit; its twiddle table is w^(n1 k), exact, transposed and
    conjugated for the inverse."""
    from fftmatvec.fno import _rows

    smem = 48 * 1024
    assert _rows.row_cols_shape(4096, 64) == 64 and _rows.row_cols_shape(1088, 545) == 17
    assert _rows.row_cols_shape(1024, 1) == 16 and _rows.row_cols_shape(16384, 8193) == 256
    for L, m in ((960, 9), (4100, 9), (32768, 9), (4096, 2050), (4096, 0)):
        assert _rows.row_cols_shape(L, m) is None, (L, m)
    assert _rows.cols_bytes("r2c", 64, 64, 4) == 8 * 4 * 64 * 33 + 8 * 64 * 5
    assert _rows.cols_bytes("c2r", 64, 64, 4) == 8 * 4 * 64 + 8 * 64 * 5
    # COLS_BLOCK_THREADS (128) of rows by default, fewer rows where they do not fit
    assert _rows.cols_rows("c2r", 64, 64, smem) == 2 and _rows.cols_rows("c2r", 16, 64, smem) == 8
    assert _rows.cols_rows("r2c", 256, 64, smem) == 1
    assert _rows.cols_rows("r2c", 17, 40, 227 * 1024) == 7    # 119 threads
    assert _rows.cols_rows("r2c", 16, 64, smem) == 8
    assert _rows.cols_rows("r2c", 16, 64, _rows.cols_bytes("r2c", 16, 64, 8) - 1) == 7
    assert _rows.cols_rows("r2c", 64, 64, 20000) == 1
    assert not _rows.row_cols_supported(4096, 64, _rows.cols_bytes("r2c", 64, 64, 1) - 1)
    assert _rows.supported(1088, 40, smem)                    # the column form's alone
    L, m = 1088, 40
    tw = _rows.cols_twiddles("r2c", L, m)
    n1, k = np.arange(17)[:, None], np.arange(m)[None, :]
    assert tw.dtype == np.complex64 and tw.shape == (17, m)
    assert np.abs(tw - np.exp(-2j * np.pi * n1 * k / L)).max() < 1e-7
    inv = _rows.cols_twiddles("c2r", L, m)
    assert np.array_equal(inv, np.conj(tw).T) and inv.flags.c_contiguous  # (m, R) in memory
    # R fixed in the inverse kernel for rows of 1024-8192 points, read at run time for the
    # others and by the forward
    assert _rows.cols_kernel("r2c", 64) == "fno_rfft_cols_f32"
    assert _rows.cols_kernel("c2r", 64) == "fno_irfft_cols_f32_r64"
    assert _rows.cols_kernel("c2r", 16) == "fno_irfft_cols_f32_r16"
    assert _rows.cols_kernel("c2r", 17) == "fno_irfft_cols_f32"
    assert _rows.cols_kernel("r2c", 256) == "fno_rfft_cols_f32"
    # the forward's sums in parts where a row's threads outnumber its bins
    assert _rows.cols_parts(64, 64) == 1 and _rows.cols_parts(64, 16) == 4
    assert _rows.cols_parts(256, 64) == 4 and _rows.cols_parts(256, 1) == 8
    assert _rows.cols_bytes("r2c", 256, 64, 1) == 8 * 256 * 33 + 8 * 64 * 2 + 8 * 4 * 64


def test_output_shapes_of_rows_and_planes():
    """The arrays the transforms write, from the matrix each replaces: rows, or for the split
    and paired modes the forward transforms' bins modes-major; a plane's spectral side in rows
    or in complex pairs modes-major (checked without a GPU on instances given only what the
    shapes are made of)."""
    from fftmatvec.fno._rows import LastAxis, Plane

    def bare(cls, kind, shape, modes_major=None):
        t = object.__new__(cls)
        t.kind, t.shape = kind, shape
        if modes_major is not None:
            t.modes_major, t.paired = bool(modes_major), modes_major == "paired"
        return t

    assert bare(LastAxis, "r2c", (128, 66), False)._out_shape(7) == (7, 66)
    assert bare(LastAxis, "r2c", (128, 66), True)._out_shape(7) == (66, 7)
    assert bare(LastAxis, "c2r", (66, 128), False)._out_shape(7) == (7, 128)
    assert bare(LastAxis, "c2r", (66, 128), True)._out_shape(7) == (7, 128)
    assert bare(LastAxis, "r2c", (128, 66), "paired")._out_shape(7) == (33, 14)
    assert bare(LastAxis, "c2r", (66, 128), "paired")._out_shape(7) == (7, 128)
    assert bare(Plane, "r2c", (64 * 64, 2 * 16 * 9))._out_shape(5) == (5, 288)
    assert bare(Plane, "c2r", (2 * 16 * 9, 64 * 64))._out_shape(5) == (5, 4096)
    assert bare(Plane, "r2c", (64 * 64, 2 * 16 * 9), "paired")._out_shape(5) == (144, 10)
    assert bare(Plane, "c2r", (2 * 16 * 9, 64 * 64), "paired")._out_shape(5) == (5, 4096)
    t = bare(Plane, "c2r", (2 * 16 * 9, 64 * 64), "paired")
    t.name = "plane"
    assert t._rows_of(np.zeros((144, 10))) == 5
    with pytest.raises(ValueError, match="144 rows of complex pairs"):
        t._rows_of(np.zeros((5, 288)))


def test_variant_plan(monkeypatch):
    """Plan fno_warp: the kernels' own rule by default, the pass form under 0, the warp form
    under 1 (a layer taking no kernel has nothing to check)."""
    from fftmatvec.fno._plan import fno_variant

    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    assert fno_variant((128,), (33,), {"r2c"}, frozenset(), 0) == "auto"
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=0")
    assert fno_variant((128,), (33,), {"r2c"}, frozenset(), 0) == "passes"
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=1")
    assert fno_variant((85,), (7,), frozenset(), frozenset(), 0) == "warp"


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("shape,cout,n_modes,plan", [
    ((3, 4, 128), 3, 64, "fno_rows=1,fno_split=1"), ((2, 3, 64), 2, 17, "fno_rows=1,fno_split=0"),
    ((2, 3, 256), 3, 100, "fno_rows=1,fno_split=1"), ((3, 2, 256), 2, 40, "fno_rows=1,fno_split=0"),
    ((2, 3, 32, 64), 2, (8, 33), "fno_plane=1")])
def test_torch_layer_in_the_warp_form(monkeypatch, rng, shape, cout, n_modes, plan):
    """Plan fno_warp=1 (the row kernels both ways, or the planes): the layer's output and
    gradients within 1e-5 of the GEMM chain, on kernels in the warp form; where a kernel the
    layer takes has no warp form, an error that names the plan."""
    from fftmatvec.fno import _torch_dft

    _, (xt, wt, bt), modes = _cuda_case(rng, shape, cout, n_modes)
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN", plan + ",fno_warp=1")
        _clear_chains()
        got = _layer_grads(xt, wt, bt, n_modes, True)
        chain = _torch_dft.chain_for(xt, torch.float32, modes, cout)
        assert chain.forms and all(f == "warp" for _, f in chain.forms)
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0,fno_plane=0,fno_split=0")
        want = _layer_grads(xt, wt, bt, n_modes, True)
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1,fno_warp=1")
        _clear_chains()
        x4096 = torch.randn(2, 3, 4096, device=xt.device)
        with pytest.raises(FFTMatvecValueError, match="fno_warp=1.*4096 points keeping 200"):
            _torch_dft.chain_for(x4096, torch.float32, (200,), 3)
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        _clear_chains()
    _assert_grads_close(got, want)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("shape,cout,n_modes,plan", [
    ((2, 3, 4096), 3, 64, ""), ((2, 3, 4096), 3, 64, "fno_rows=1,fno_split=1"),
    ((3, 2, 1088), 2, 40, "fno_rows=1,fno_split=0"), ((2, 2, 3, 2048), 3, (3, 100), "fno_plane=0")])
def test_torch_layer_in_the_column_form(monkeypatch, rng, shape, cout, n_modes, plan):
    """Long last axes (rows of 64 R points) take the column form of the row kernels by default,
    in every layout of the modes: the layer's output and gradients within 1e-5 of the GEMM
    chain."""
    from fftmatvec.fno import _torch_dft

    _, (xt, wt, bt), modes = _cuda_case(rng, shape, cout, n_modes)
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN", plan)
        _clear_chains()
        got = _layer_grads(xt, wt, bt, n_modes, True)
        chain = _torch_dft.chain_for(xt, torch.float32, modes, cout)
        assert chain.forms and all(f == "columns" for _, f in chain.forms), chain.forms
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0,fno_plane=0,fno_split=0")
        _clear_chains()
        want = _layer_grads(xt, wt, bt, n_modes, True)
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        _clear_chains()
    _assert_grads_close(got, want)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["passes", "warp"])
def test_last_axis_reads_a_misaligned_input(rng, variant):
    """An input whose first value is not 16-byte aligned (the kernels load pairs of values)
    gives what its aligned copy gives; an output buffer that is not aligned is refused."""
    cp = backend.cupy
    t = _set(128, 33, variant)["F"]
    flat = cp.asarray(rng.standard_normal(7 * 128 + 1), dtype=np.float32)
    a = flat[1:].reshape(7, 128)
    assert a.data.ptr % 16
    assert cp.array_equal(t(a), t(a.copy()))
    buf = cp.empty(7 * 66 + 1, dtype=np.float32)[1:].reshape(7, 66)
    with pytest.raises(ValueError, match="aligned"):
        t(a, out=buf)
