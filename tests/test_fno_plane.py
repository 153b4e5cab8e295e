"""The FNO layer's last two axes on the plane kernels (fftmatvec/fno/_rows.py: Plane): against
NumPy's float64 FFTs, against the GEMM steps of the chain they replace, through the layer
against the GEMM chain and the dense reference, and the planner's choice."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError, backend
from fftmatvec.fno import _dft, _reference, kept_modes
from fftmatvec.fno._plan import fno_plane, fno_plane_auto

from fno_oracle import assert_grads_close as _assert_grads_close
from fno_oracle import clear_chains as _clear_chains
from fno_oracle import cuda_case as _cuda_case
from fno_oracle import cupy_dft_error
from fno_oracle import layer_grads as _layer_grads
from fno_oracle import plane_c2r as _fft_c2r
from fno_oracle import plane_r2c as _fft_r2c

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")

# (n0, n1, m0, m1): powers of two and not, odd axes (one complex FFT of the last), one mode,
# every mode of an odd first axis, the Nyquist bin kept, the benchmark's planes
PLANES = [(64, 64, 16, 9), (128, 128, 16, 9), (12, 10, 6, 5), (45, 30, 12, 16),
          (15, 64, 15, 33), (1, 16, 1, 9), (2, 8, 2, 5), (60, 50, 20, 26), (20, 75, 7, 20),
          (256, 256, 64, 33), (9, 15, 3, 1),
          # the warp form's: every mode and the Nyquist bin, rows of 64 complex values kept to
          # Nyquist, non-square planes, one mode
          (32, 64, 32, 33), (64, 128, 20, 65), (256, 64, 12, 5), (32, 256, 3, 40), (128, 64, 1, 1)]


def _warp_plane(n0, n1, m0, m1):
    from fftmatvec.fno._rows import warp_supported

    return warp_supported(n0, n1, m0, m1, 48 * 1024)


def test_auto_rule():
    """By default both ways on a layer of two or three axes whose plane's first axis keeps a
    quarter of its frequencies or more, an eighth where the warp form takes the plane; never
    on one axis."""
    for warp in (False, True):
        assert fno_plane_auto((64, 64), (16, 9), warp) == {"r2c", "c2r"}
        assert fno_plane_auto((64, 64, 64), (16, 16, 9), warp) == {"r2c", "c2r"}
        assert fno_plane_auto((256, 256), (64, 33), warp) == {"r2c", "c2r"}
        assert fno_plane_auto((128,), (33,), warp) == set()
        assert fno_plane_auto((256, 256), (31, 17), warp) == set()
        assert fno_plane_auto((128, 128), (15, 9), warp) == set()
    assert fno_plane_auto((128, 128), (16, 9)) == set()
    assert fno_plane_auto((256, 256), (32, 17)) == set()
    assert fno_plane_auto((128, 128), (16, 9), warp=True) == {"r2c", "c2r"}
    assert fno_plane_auto((256, 256), (32, 17), warp=True) == {"r2c", "c2r"}


def test_warp_form_rule():
    """The warp form takes even last axes of 64, 128 or 256 points and first axes of 32 to 256,
    within the block's shared memory; the pass form the rest."""
    from fftmatvec.fno._rows import warp_bytes, warp_supported

    smem = 48 * 1024
    assert warp_supported(64, 64, 16, 9, smem) and warp_supported(256, 128, 1, 65, 10**6)
    assert warp_supported(32, 256, 32, 129, 10**6)
    assert not warp_supported(60, 64, 16, 9, smem)      # a first axis of 60
    assert not warp_supported(64, 96, 16, 9, smem)      # rows of 48 complex values
    assert not warp_supported(64, 512, 16, 9, smem)     # rows of 256
    assert not warp_supported(512, 64, 16, 9, 10**6)    # columns of 512
    assert not warp_supported(64, 64, 16, 34, smem)     # past the Nyquist bin
    assert warp_bytes(256, 64, 33) == 8 * 33 * 257 + 8 * 64 * 33
    assert not warp_supported(256, 256, 64, 33, warp_bytes(256, 64, 33) - 1)


def test_no_plane_without_a_gpu(monkeypatch):
    if backend.gpu_available():
        pytest.skip("a GPU is present")
    assert not fno_plane((64, 64), (16, 9), np.float32, 0)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_plane=1")
    with pytest.raises(FFTMatvecValueError, match="fno_plane=1.*no GPU"):
        fno_plane((64, 64), (16, 9), np.float32, 0)


def test_no_plane_in_float64_or_one_axis(monkeypatch):
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_plane=1")
    with pytest.raises(FFTMatvecValueError, match="fno_plane=1.*float32.*float64"):
        fno_plane((64, 64), (16, 9), np.float64, 0)
    with pytest.raises(FFTMatvecValueError, match="fno_plane=1.*one axis"):
        fno_plane((128,), (33,), np.float32, 0)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_plane=0")
    assert not fno_plane((64, 64), (16, 9), np.float32, 0)


def _check_against_numpy(rng, t, kind, n0, n1, m0, m1, bins, s0, s1, layout):
    """The plane transform ``t`` against NumPy's float64 FFTs on 1, 5 and 67 planes, in the
    spectral layout ``layout``, every element of a poisoned output written."""
    cp = backend.cupy
    ref = _fft_r2c if kind == "r2c" else _fft_c2r
    M = m0 * m1

    def paired(v):  # (planes, 2 M) -> (M, 2 planes): mode i of plane p at [i, 2p], [i, 2p + 1]
        return np.ascontiguousarray(v.reshape(-1, 2, M).transpose(2, 0, 1)).reshape(M, -1)

    for planes in (1, 5, 67):
        a = rng.standard_normal((planes, t.shape[0]))
        want = ref(a, n0, n1, m0, m1, bins, s0, s1)
        if layout and kind == "r2c":
            want = paired(want)
        elif layout:
            a = paired(a)
        out = cp.full(want.shape, np.nan, dtype=np.float32)
        got = t(cp.asarray(a, dtype=np.float32), out=out)
        assert got is out
        err = np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()
        assert err < 2e-6 * max(1.0, np.log2(n0 * n1)), (kind, n0, n1, m0, m1, planes, err)


def _check_chain_steps(rng, kernels, n0, n1, m0, m1):
    """``kernels`` (plane_set's four transforms) against the float64 DFT products of the
    chain's steps they stand for."""
    cp = backend.cupy
    chain = _dft.Chain(_reference._xp_ops(np, np.dtype(np.float64)), (n0, n1), (m0, m1))
    B, C = 2, 3
    x = rng.standard_normal((B, C, n0, n1))
    Y = rng.standard_normal((B, C, 2, m0 * m1))
    steps = {"ana": (x, chain.analysis), "synT": (x, chain.synthesis_adjoint),
             "syn": (Y, chain.synthesis), "anaT": (Y, chain.analysis_adjoint)}
    for name, (a, step) in steps.items():
        want = step(a).reshape(B * C, -1)
        got = cp.asnumpy(kernels[name](cp.asarray(a.reshape(B * C, -1), dtype=np.float32)))
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 2e-6 * max(1.0, np.log2(n0 * n1)), (name, err)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n0,n1,m0,m1", PLANES)
@pytest.mark.parametrize("kind", ["r2c", "c2r"])
@pytest.mark.parametrize("threads", [None, 128, 256])
@pytest.mark.parametrize("variant", ["passes", "warp", "ahead"])
@pytest.mark.parametrize("layout", [False, "paired"])
def test_plane_matches_numpy_fft(rng, kind, n0, n1, m0, m1, threads, variant, layout):
    """Each direction, with bins scattered over the first axis and scales of both axes, equals
    NumPy's float64 FFTs within float32 rounding, on every element of a poisoned output; with
    the default threads and with both of the sweep's; in both forms of the kernels, and the
    warp form's r2c with its rows loaded ahead; the spectral side a plane's modes in a row, or
    modes-major in complex pairs (``"paired"``)."""
    from fftmatvec.fno._rows import PLANE_AHEAD_ROWS, Plane

    if variant != "passes" and not _warp_plane(n0, n1, m0, m1):
        pytest.skip("no warp form for this plane")
    if variant == "ahead" and (kind != "r2c" or n1 // 64 not in PLANE_AHEAD_ROWS):
        pytest.skip("no rows loaded ahead for this kernel")
    cp = backend.cupy
    bins = rng.permutation(n0)[:m0]
    s0, s1 = 0.75, rng.uniform(0.5, 2.0, m1)
    t = Plane(kind, n0, n1, m0, m1, bins, s0, s1, cp.cuda.Device().id, threads=threads,
              variant="warp" if variant == "ahead" else variant, ahead=variant == "ahead",
              modes_major=layout)
    assert t.variant == ("warp" if variant == "ahead" else variant)
    assert t.ahead is (variant == "ahead") and t.name.endswith("a") is (variant == "ahead")
    _check_against_numpy(rng, t, kind, n0, n1, m0, m1, bins, s0, s1, layout)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n0,n1,m0,m1", PLANES)
def test_plane_set_matches_the_chain_steps(rng, n0, n1, m0, m1):
    """The four transforms of plane_set stand for the chain's first two steps and their
    adjoints: equal to the float64 DFT products of a chain without them."""
    from fftmatvec.fno._rows import plane_set

    kernels = plane_set((n0, n1), (m0, m1), backend.cupy.cuda.Device().id)
    _check_chain_steps(rng, kernels, n0, n1, m0, m1)


# (n0, n1, m0, m1) of the direct form: lengths with prime factors past 5 (85 = 5 x 17, 17,
# 19), one mode, every mode of a short first axis, the Nyquist bin kept, each register tile of
# the last axis's bins (4, 8, 12, 16), sums cut into parts (short axes, few modes) and not
# (first axes past 256 points, rows past 256 points, more than 256 modes), the benchmark's
# planes
DIRECT_PLANES = [(85, 85, 12, 7), (17, 19, 5, 10), (9, 15, 3, 1), (1, 16, 1, 9), (2, 8, 2, 5),
                 (12, 10, 6, 5), (45, 30, 12, 16), (30, 256, 16, 16), (64, 64, 16, 9),
                 (128, 128, 16, 9), (7, 7, 7, 4), (300, 8, 4, 3), (4, 300, 3, 16),
                 (40, 40, 32, 16), (96, 33, 64, 12)]


def test_direct_form_rule():
    """The direct form takes at most 16 bins of the last axis and 64 modes of the first, a block
    of each kind (one plane) fitting the shared memory; its register tile holds the fewest of
    4, 8, 12 or 16 bins."""
    from fftmatvec.fno._rows import direct_bins, direct_bytes, direct_supported

    big = 227 * 1024
    assert direct_supported(85, 85, 12, 7, big) and direct_supported(7, 7, 7, 4, big)
    assert direct_supported(30, 256, 16, 16, big) and direct_supported(1, 16, 1, 9, big)
    assert direct_supported(96, 33, 64, 12, big)
    assert not direct_supported(96, 96, 65, 9, big)       # 65 modes of the first axis
    assert not direct_supported(64, 64, 16, 17, big)      # 17 bins of the last
    assert not direct_supported(64, 64, 16, 34, big)      # past the Nyquist bin
    assert not direct_supported(4, 4, 5, 3, big)          # more modes than points
    assert not direct_supported(256, 256, 16, 16, big)    # the plane past a block's memory
    assert [direct_bins(m) for m in (1, 4, 5, 8, 9, 12, 13, 16, 17)] == [
        4, 4, 8, 8, 12, 12, 16, 16, None]
    # r2c: the plane's rows of 85 | 1 = 85 values (3613 pairs, more than the parts' partial
    # sums), T1 85 x 8, T0 12 x 85, Z 7 x 85; c2r: T0, the 84 modes, W 85 x 8
    assert direct_bytes("r2c", 85, 85, 12, 7) == 8 * (3614 + 680 + 1020 + 595)
    assert direct_bytes("c2r", 85, 85, 12, 7) == 8 * (1020 + 84 + 680)
    # 64 x 64 keeping 9 bins (a tile of 12): rows of 65; four parts of 64 rows, three of their
    # partial sums (2304 pairs) more than the plane (2080)
    assert direct_bytes("r2c", 64, 64, 16, 9) == 8 * (2304 + 64 * 12 + 16 * 65 + 9 * 65)
    one = direct_bytes("r2c", 128, 200, 16, 16)
    assert direct_supported(128, 200, 16, 16, one)
    assert not direct_supported(128, 200, 16, 16, one - 1)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n0,n1,m0,m1", DIRECT_PLANES)
@pytest.mark.parametrize("kind", ["r2c", "c2r"])
@pytest.mark.parametrize("layout", [False, "paired"])
def test_direct_plane_matches_numpy_fft(rng, kind, n0, n1, m0, m1, layout):
    """The direct form against NumPy's float64 FFTs as the FFT forms are: scattered bins,
    scales of both axes, both layouts, every element of a poisoned output, one plane to
    many."""
    from fftmatvec.fno._rows import DirectPlane

    cp = backend.cupy
    bins = rng.permutation(n0)[:m0]
    s0, s1 = 0.75, rng.uniform(0.5, 2.0, m1)
    t = DirectPlane(kind, n0, n1, m0, m1, bins, s0, s1, cp.cuda.Device().id,
                    modes_major=layout)
    assert t.variant == "direct" and t.name.startswith(
        "fno_plane_rdft" if kind == "r2c" else "fno_plane_irdft")
    _check_against_numpy(rng, t, kind, n0, n1, m0, m1, bins, s0, s1, layout)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n0,n1,m0,m1", DIRECT_PLANES)
def test_direct_plane_set_matches_the_chain_steps(rng, n0, n1, m0, m1):
    """plane_set's four transforms in the direct form stand for the chain's steps."""
    from fftmatvec.fno._rows import DirectPlane, plane_set

    kernels = plane_set((n0, n1), (m0, m1), backend.cupy.cuda.Device().id, variant="direct")
    assert all(isinstance(k, DirectPlane) for k in kernels.values())
    _check_chain_steps(rng, kernels, n0, n1, m0, m1)


@gpu
@pytest.mark.gpu
def test_direct_plane_checks_its_arguments():
    from fftmatvec.fno._rows import DirectPlane

    dev = backend.cupy.cuda.Device().id
    with pytest.raises(ValueError, match="no direct-form FNO plane kernel for 64 x 64 points "
                                         "keeping 16 x 17"):
        DirectPlane("r2c", 64, 64, 16, 17, np.arange(16), 1.0, 1.0, dev)
    with pytest.raises(ValueError, match="distinct bins"):
        DirectPlane("c2r", 16, 16, 3, 5, [0, 1, 1], 1.0, 1.0, dev)
    with pytest.raises(ValueError, match="kind must be"):
        DirectPlane("c2c", 16, 16, 3, 5, np.arange(3), 1.0, 1.0, dev)
    t = DirectPlane("r2c", 16, 16, 4, 5, np.arange(4), 1.0, 1.0, dev)
    with pytest.raises(ValueError, match="rows of 256 values"):
        t(backend.cupy.zeros((3, 255), dtype=np.float32))


@gpu
@pytest.mark.gpu
def test_plane_checks_its_arguments():
    from fftmatvec.fno._rows import Plane

    cp = backend.cupy
    dev = cp.cuda.Device().id
    with pytest.raises(ValueError, match="no FNO plane kernel for 85 x 85"):
        Plane("r2c", 85, 85, 12, 7, np.arange(12), 1.0, 1.0, dev)
    with pytest.raises(ValueError, match="distinct bins"):
        Plane("c2r", 16, 16, 3, 5, [0, 1, 1], 1.0, 1.0, dev)
    with pytest.raises(ValueError, match=r"threads must be in \[1, 256\], got 512"):
        Plane("r2c", 16, 16, 4, 5, np.arange(4), 1.0, 1.0, dev, threads=512)
    with pytest.raises(ValueError, match="variant must be one of"):
        Plane("r2c", 64, 64, 4, 5, np.arange(4), 1.0, 1.0, dev, variant="fast")
    with pytest.raises(ValueError, match="no warp-form FNO plane kernel for 16 x 16"):
        Plane("r2c", 16, 16, 4, 5, np.arange(4), 1.0, 1.0, dev, variant="warp")
    with pytest.raises(ValueError, match="multiple of 32 for the warp form, got 100"):
        Plane("c2r", 64, 64, 4, 5, np.arange(4), 1.0, 1.0, dev, threads=100)
    with pytest.raises(ValueError, match="ahead: the c2r plane kernel"):
        Plane("c2r", 64, 64, 4, 5, np.arange(4), 1.0, 1.0, dev, ahead=True)
    with pytest.raises(ValueError, match="ahead: the r2c plane kernel of 64 x 256"):
        Plane("r2c", 64, 256, 4, 5, np.arange(4), 1.0, 1.0, dev, ahead=True)
    assert Plane("r2c", 64, 64, 4, 5, np.arange(4), 1.0, 1.0, dev).variant == "warp"
    assert Plane("r2c", 60, 64, 4, 5, np.arange(4), 1.0, 1.0, dev).variant == "passes"
    with pytest.raises(ValueError, match="modes_major must be False or 'paired' for a plane"):
        Plane("r2c", 16, 16, 4, 5, np.arange(4), 1.0, 1.0, dev, modes_major=True)
    t = Plane("c2r", 16, 16, 4, 5, np.arange(4), 1.0, 1.0, dev, modes_major="paired")
    with pytest.raises(ValueError, match="20 rows of complex pairs"):
        t(cp.zeros((3, 40), dtype=np.float32))
    t = Plane("r2c", 16, 16, 4, 5, np.arange(4), 1.0, 1.0, dev)
    with pytest.raises(ValueError, match="rows of 256 values"):
        t(cp.zeros((3, 255), dtype=np.float32))
    with pytest.raises(ValueError, match="out must be"):
        t(cp.zeros((3, 256), dtype=np.float32), out=cp.zeros((3, 39), dtype=np.float32))


# 2-D and 3-D layers (the plane is the last two axes), odd and non-power-of-two axes
CASES = [((2, 3, 16, 30), 4, (8, 16)), ((2, 3, 45, 64), 2, (12, 33)),
         ((2, 2, 12, 10, 16), 3, (6, 5, 9)), ((2, 2, 20, 75), 3, (7, 20)),
         ((3, 2, 64, 64), 3, (16, 16)), ((2, 2, 6, 9, 8), 2, (3, 5, 8))]
# the layers the direct form takes (at most 16 modes an axis), lengths the FFT kernels cannot
# take among them (85, 17)
DIRECT_CASES = [c for c in CASES if max(kept_modes(c[2])[-2:]) <= 16] + [
    ((2, 3, 85, 85), 3, (12, 12)), ((2, 2, 17, 21), 2, (6, 8)), ((2, 2, 5, 17, 19), 3, (4, 6, 9))]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("paired", ["0", "auto"])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_cupy_layer_on_planes_matches_reference(monkeypatch, rng, shape, cout, n_modes, paired):
    """The CuPy float32 layer on the plane kernels (plan fno_plane=1) within 1e-5 of the dense
    float64 reference, with the modes interleaved (plan fno_paired=0) and as the rules take
    them (the two-axis layers' modes paired)."""
    monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_plane=1,fno_paired={paired},fno_direct=0")
    err = cupy_dft_error(rng, shape, cout, n_modes)
    modes = tuple(int(v) for v in kept_modes(n_modes))
    device = backend.cupy.cuda.Device().id
    assert fno_plane(shape[2:], modes, np.float32, device) == {"r2c", "c2r"}
    assert err < 1e-5


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("paired", ["0", "auto"])
@pytest.mark.parametrize("shape,cout,n_modes", DIRECT_CASES)
def test_cupy_layer_on_direct_planes_matches_reference(monkeypatch, rng, shape, cout, n_modes,
                                                       paired):
    """The same on the planes' direct form (plan fno_direct=1), which the planner takes by
    default only where the FFT plane kernels cannot take the plane (85 x 85, 17 x 21)."""
    from fftmatvec.fno._rows import plane_supported
    from fftmatvec.fno._plan import fno_direct

    modes = tuple(int(v) for v in kept_modes(n_modes))
    device = backend.cupy.cuda.Device().id
    smem = backend.shared_memory_limits()[1]
    fft = plane_supported(*shape[-2:], *modes[-2:], smem)
    assert fno_direct(shape[2:], modes, np.float32, device) == (not fft)
    monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_plane=1,fno_paired={paired},fno_direct=1")
    assert fno_direct(shape[2:], modes, np.float32, device)
    assert cupy_dft_error(rng, shape, cout, n_modes) < 1e-5


torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not (torch.cuda.is_available() and backend.gpu_available()),
                          reason="no CUDA device for PyTorch and CuPy")


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("paired", ["0", "auto"])
@pytest.mark.parametrize("shape,cout,n_modes,direct",
                         [c + ("0",) for c in CASES] + [c + ("1",) for c in DIRECT_CASES])
def test_torch_layer_on_planes_matches_gemm_chain(monkeypatch, rng, shape, cout, n_modes,
                                                  graphs, paired, direct):
    """Output and the input, weight and bias gradients of the layer on the plane kernels (plan
    fno_plane=1) agree with the GEMM chain (plan fno_plane=0, fno_rows=0) within 1e-5,
    eagerly and replayed as graphs, and with the dense reference; the modes interleaved (plan
    fno_paired=0) and as the rules take them (a two-axis layer's paired: every transform on
    the plane kernels, none on the row kernels); in the FFT forms and the direct form (plan
    fno_direct=1)."""
    from fftmatvec.fno import _torch_dft

    case, (xt, wt, bt), modes = _cuda_case(rng, shape, cout, n_modes)
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN",
                           f"fno_plane=1,fno_paired={paired},fno_direct={direct}")
        _clear_chains()
        got = _layer_grads(xt, wt, bt, n_modes, graphs)
        chain = _torch_dft.chain_for(xt, torch.float32, modes)
        rows = chain.rows
        plane_forms = {f for k, f in chain.forms if k in ("ana", "syn", "synT", "anaT")}
        assert (plane_forms == {"direct"}) if direct == "1" else "direct" not in plane_forms
        assert {r for r in rows if r.startswith("plane:")} == \
            {"plane:ana", "plane:anaT", "plane:syn", "plane:synT"}
        if paired == "auto" and len(shape) == 4:
            assert rows == ("paired", "plane:ana", "plane:anaT", "plane:syn", "plane:synT")
        else:
            assert "paired" not in rows
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0,fno_plane=0")
        want = _layer_grads(xt, wt, bt, n_modes, graphs)
        assert _torch_dft.chain_for(xt, torch.float32, modes).rows == ()
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        _clear_chains()
    _assert_grads_close(got, want, case, n_modes)
