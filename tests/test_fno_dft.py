"""FNO layer, the DFT-product path: against the dense reference, the FFT path and neuraloperator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fftmatvec import FFTMatvecTypeError, FFTMatvecValueError
from fftmatvec.fno import _dft, spectral_conv
from fftmatvec.fno._modes import kept_modes

from conftest import load_script, to_numpy
from fno_oracle import CASES, dense_reference
from fno_oracle import neuralop_spectral_conv as _neuralop
from fno_oracle import rand_case as _rand

# odd and non-power-of-two grids, odd mode counts, modes up to Nyquist, and odd axes keeping
# fewer than 3 modes (no mode is constant on the grid there: the bias goes onto y)
EXTRA = [((2, 3, 85, 85), 4, (12, 12)), ((2, 3, 9, 10), 3, (2, 4)), ((2, 3, 11), 2, 7),
         ((2, 2, 7, 6, 5), 2, (2, 3, 5)), ((1, 3, 12, 15), 2, (12, 15)),
         ((2, 2, 5, 4, 8), 3, (5, 4, 8)), ((3, 2, 16), 3, 16)]


def _rel(a, b):
    """max |a - b| / max |b|, on arrays or (detached) tensors."""
    a, b = (t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t) for t in (a, b))
    a, b = a.astype(np.complex128), b.astype(np.complex128)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("shape,cout,n_modes", CASES + EXTRA)
def test_dft_matches_dense_reference(xp, rng, shape, cout, n_modes):
    x, w, b = _rand(rng, shape, cout, n_modes)
    want = dense_reference(x, w, n_modes, b)
    got64 = spectral_conv(xp.asarray(x), xp.asarray(w), n_modes, xp.asarray(b), method="dft")
    assert got64.dtype == np.float64 and got64.shape == want.shape
    assert _rel(to_numpy(got64), want) < 1e-12
    got32 = spectral_conv(xp.asarray(x, dtype=np.float32), xp.asarray(w.astype(np.complex64)),
                          n_modes, xp.asarray(b, dtype=np.float32), method="dft")
    assert got32.dtype == np.float32
    assert _rel(to_numpy(got32), want) < 1e-5
    fft32 = spectral_conv(xp.asarray(x, dtype=np.float32), xp.asarray(w.astype(np.complex64)),
                          n_modes, xp.asarray(b, dtype=np.float32), method="fft")
    assert _rel(to_numpy(got32), to_numpy(fft32)) < 1e-5


def test_bad_method(rng):
    x, w, _ = _rand(rng, (1, 2, 8), 2, 4)
    with pytest.raises(FFTMatvecValueError, match="method"):
        spectral_conv(x, w, 4, method="gemm")


torch = pytest.importorskip("torch")


def test_auto_rule():
    """The issue's nine sizes take the DFT products; all modes of a long axis take the FFT."""
    for B, C, grid, m in load_script("bench_fno").SIZES:
        modes = kept_modes((m,) * len(grid))
        assert _dft.choose_method(B, C, C, grid, modes) == "dft"
    assert _dft.choose_method(8, 16, 16, (4096,), kept_modes(4096)) == "fft"
    assert _dft.choose_method(2, 16, 16, (512, 512), kept_modes((512, 512))) == "fft"


def _layers(c_in, c_out, n_modes, **kw):
    from fftmatvec.fno import SpectralConv

    a = SpectralConv(c_in, c_out, n_modes, method="dft", **kw)
    b = SpectralConv(c_in, c_out, n_modes, method="fft")
    with torch.no_grad():
        b.weight.copy_(a.weight)
        b.bias.copy_(a.bias)
    return a, b


def _grads(layer, x, g):
    x = x.detach().clone().requires_grad_(True)
    layer.zero_grad()
    y = layer(x)
    (y * g).sum().backward()
    return y.detach(), x.grad, layer.weight.grad.clone(), layer.bias.grad.clone()


TORCH_CASES = [((4, 8, 64), 32), ((3, 4, 33), 17), ((2, 6, 24, 30), (12, 16)),
               ((2, 4, 85, 85), (12, 12)), ((2, 3, 15, 18), (15, 18)), ((2, 3, 9, 10), (2, 4)),
               ((2, 4, 10, 12, 14), (6, 6, 8)), ((2, 3, 7, 8, 9), (7, 3, 9))]


@pytest.mark.parametrize("shape,n_modes", TORCH_CASES)
def test_torch_dft_matches_fft_path(shape, n_modes):
    """float32 output and input, weight and bias gradients of the two paths, within 1e-5."""
    torch.manual_seed(shape[-1] * 31 + len(shape))
    dft, fft = _layers(shape[1], 5, n_modes)
    x = torch.randn(shape)
    g = torch.randn((shape[0], 5) + shape[2:])
    got, want = _grads(dft, x, g), _grads(fft, x, g)
    assert got[0].dtype == torch.float32 and got[1].dtype == torch.float32
    assert got[2].dtype == torch.complex64
    for a, b in zip(got, want):
        assert _rel(a, b) < 1e-5


@pytest.mark.parametrize("shape,n_modes", [((2, 3, 10), 6), ((2, 2, 9), 9), ((1, 2, 7, 6), (5, 6)),
                                           ((2, 2, 9, 10), (2, 4)),
                                           ((1, 2, 4, 5, 6), (3, 2, 6))])
def test_dft_gradcheck(rng, shape, n_modes):
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = (torch.tensor(a, requires_grad=True) for a in _rand(rng, shape, 3, n_modes))
    assert torch.autograd.gradcheck(
        lambda x, w, b: spectral_conv_torch(x, w, n_modes, b, method="dft"), (x, w, b))


@pytest.mark.parametrize("shape,n_modes", [((3, 4, 32), 12), ((2, 4, 16, 17), (8, 10)),
                                           ((2, 4, 85, 85), (12, 12)), ((2, 4, 15, 18), (15, 18)),
                                           ((2, 3, 8, 9, 10), (4, 6, 6))])
def test_dft_from_neuralop(shape, n_modes):
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(sum(shape))
    ref = _neuralop()(shape[1], 5, n_modes)
    ours = SpectralConv.from_neuralop(ref, method="dft")
    x = torch.randn(shape)
    g = torch.randn((shape[0], 5) + shape[2:])
    xr = x.clone().requires_grad_(True)
    (ref(xr) * g).sum().backward()
    want = (ref(x).detach(), xr.grad, ref.weight.tensor.grad, ref.bias.grad)
    for a, b in zip(_grads(ours, x, g), want):
        assert _rel(a, b) < 1e-5


#: bounds on the relative errors (max |error| / max |exact|, output and gradients, 1-D to 3-D),
#: about 3x the largest seen on the CPU over three seeds
SIXTEEN_BOUNDS = {"bfloat16": 3e-2, "float16": 4e-3}


def _output_and_grads(x, w, b, g, n_modes, **kw):
    """The DFT path's output and its input, weight and bias gradients for the cotangent ``g``,
    on fresh leaves (keywords: the layer's, e.g. ``compute_dtype``)."""
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    y = spectral_conv_torch(x, w, n_modes, b, method="dft", **kw)
    (y * g.to(y.device, y.dtype)).sum().backward()
    return y, x.grad, w.grad, b.grad


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape,n_modes", [((4, 16, 64), 32), ((2, 16, 40, 40), (12, 12)),
                                           ((2, 8, 12, 12, 12), (6, 6, 6))])
def test_sixteen_bit_error_bound(name, shape, n_modes):
    """16-bit storage, float32 accumulation: output and gradients against float64."""
    from fftmatvec.fno import spectral_conv_torch

    dtype = getattr(torch, name)
    torch.manual_seed(3)
    modes = kept_modes(n_modes)
    x = torch.randn(shape, dtype=torch.float64)
    w = torch.randn((shape[1], 6) + modes, dtype=torch.complex128) / shape[1] ** 0.5
    b = torch.randn(6, dtype=torch.float64)
    g = torch.randn((shape[0], 6) + shape[2:], dtype=torch.float64)

    def run(x, w, b, **kw):
        return _output_and_grads(x, w, b, g, n_modes, **kw)

    want = run(x, w, b)
    got = run(x.float(), w.to(torch.complex64), b.float(), compute_dtype=dtype)
    assert got[0].dtype == torch.float32 and got[2].dtype == torch.complex64
    for a, e in zip(got, want):
        assert _rel(a, e) < SIXTEEN_BOUNDS[name]
    y16 = spectral_conv_torch(x.to(dtype), w.to(torch.complex64), n_modes, b.float())
    assert y16.dtype == dtype
    assert _rel(y16.float(), want[0]) < SIXTEEN_BOUNDS[name]


def test_sixteen_bit_needs_dft():
    from fftmatvec.fno import spectral_conv_torch

    x, w = torch.randn(2, 3, 16), torch.randn(3, 3, 5, dtype=torch.complex64)
    with pytest.raises(FFTMatvecValueError, match="compute_dtype"):
        spectral_conv_torch(x, w, 8, method="fft", compute_dtype=torch.bfloat16)
    with pytest.raises(FFTMatvecTypeError, match="compute_dtype"):
        spectral_conv_torch(x, w, 8, compute_dtype=torch.int32)


def test_precision_setting_restored():
    """The layer sets IEEE float32 matmuls around its GEMMs and puts the user's setting back."""
    from fftmatvec.fno import spectral_conv_torch
    from fftmatvec.fno._torch_dft import gemm_precision

    mm = torch.backends.cuda.matmul
    old = mm.fp32_precision
    try:
        mm.fp32_precision = "tf32"
        with gemm_precision(torch.float32):
            assert mm.fp32_precision == "ieee"
        assert mm.fp32_precision == "tf32"
        x = torch.randn(2, 3, 16, requires_grad=True)
        w = torch.randn(3, 3, 5, dtype=torch.complex64, requires_grad=True)
        spectral_conv_torch(x, w, 8, method="dft").sum().backward()
        assert mm.fp32_precision == "tf32"
    finally:
        mm.fp32_precision = old


@pytest.mark.parametrize("dtype, flag", [(torch.bfloat16, "allow_bf16_reduced_precision_reduction"),
                                         (torch.float16, "allow_fp16_reduced_precision_reduction")])
def test_sixteen_bit_settings_and_autocast_restored(dtype, flag):
    """16-bit GEMMs reduce in float32 inside the layer and autocast is off there; the user's
    flag and autocast region are back after it, also after an error inside."""
    from fftmatvec.fno._torch_dft import gemm_precision

    mm = torch.backends.cuda.matmul
    old = getattr(mm, flag)
    try:
        setattr(mm, flag, True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with gemm_precision(dtype, "cpu"):
                assert getattr(mm, flag) is False and not torch.is_autocast_enabled("cpu")
            assert getattr(mm, flag) is True and torch.is_autocast_enabled("cpu")
            with pytest.raises(RuntimeError, match="inside"):
                with gemm_precision(dtype, "cpu"):
                    raise RuntimeError("inside")
            assert getattr(mm, flag) is True and torch.is_autocast_enabled("cpu")
        with gemm_precision(dtype, "cpu"):  # outside autocast: nothing to turn off
            assert not torch.is_autocast_enabled("cpu")
    finally:
        setattr(mm, flag, old)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device for torch")
@pytest.mark.parametrize("shape,n_modes", [((8, 32, 128), 64), ((4, 32, 85, 85), (12, 12)),
                                           ((4, 64, 64, 64), (32, 32)),
                                           ((2, 16, 24, 24, 24), (8, 8, 8))])
def test_cuda_dft_float32_accuracy_with_tf32_enabled(shape, n_modes):
    """On the device, with TF32 switched on process-wide: still within 1e-5 of float64,
    and the 16-bit options within their bounds."""

    torch.manual_seed(1)
    modes = kept_modes(n_modes)
    x = torch.randn(shape, dtype=torch.float64)
    w = torch.randn((shape[1], 16) + modes, dtype=torch.complex128) / shape[1] ** 0.5
    b = torch.randn(16, dtype=torch.float64)
    g = torch.randn((shape[0], 16) + shape[2:], dtype=torch.float64)

    def run(x, w, b, **kw):
        return _output_and_grads(x, w, b, g, n_modes, **kw)

    want = run(x, w, b)
    mm = torch.backends.cuda.matmul
    old = mm.fp32_precision
    try:
        mm.fp32_precision = "tf32"
        got = run(x.float().cuda(), w.to(torch.complex64).cuda(), b.float().cuda())
        assert mm.fp32_precision == "tf32"
    finally:
        mm.fp32_precision = old
    assert got[0].is_cuda and got[0].dtype == torch.float32
    for a, e in zip(got, want):
        assert _rel(a, e) < 1e-5
    for name, bound in SIXTEEN_BOUNDS.items():
        got = run(x.float().cuda(), w.to(torch.complex64).cuda(), b.float().cuda(),
                  compute_dtype=getattr(torch, name))
        for a, e in zip(got, want):
            assert _rel(a, e) < bound


def test_weight_read_in_place():
    """The layer's weight is stored modes-major: the DFT path reads it without a copy, and its
    gradient comes back in the same layout."""
    from fftmatvec.fno import SpectralConv
    from fftmatvec.fno._torch_dft import weight_view

    layer = SpectralConv(3, 4, (6, 8), method="dft")
    wv = weight_view(layer.weight, torch.float32)
    assert wv.shape == (6 * 5, 3, 4) and wv.is_complex() and wv.is_contiguous()
    assert wv.data_ptr() == layer.weight.data_ptr()
    wr = weight_view(layer.weight, torch.bfloat16)  # 16-bit storage: the real view, cast
    assert wr.shape == (6 * 5, 3, 8) and wr.dtype == torch.bfloat16
    layer(torch.randn(2, 3, 12, 10)).sum().backward()
    assert layer.weight.grad.stride() == layer.weight.stride()


def test_autocast_leaves_float32_accuracy():
    """Inside an autocast region the layer keeps its own precision (float32 here)."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(5)
    layer = SpectralConv(4, 4, (8, 8), method="dft")
    x = torch.randn(2, 4, 20, 18)
    want = layer(x).detach()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = layer(x)
    assert got.dtype == torch.float32 and _rel(got, want) < 1e-6


# ------------------------------------------- one-axis layers: the split modes (SplitChain) --

ONE_AXIS = [((3, 4, 32), 3, 12), ((2, 3, 11), 2, 7), ((3, 2, 16), 3, 16), ((5, 4, 40), 6, 17),
            ((1, 6, 64), 2, 64)]


@pytest.mark.parametrize("split", ["0", "1"])
@pytest.mark.parametrize("shape,cout,n_modes", ONE_AXIS)
def test_split_modes_match_dense_reference(monkeypatch, xp, rng, split, shape, cout, n_modes):
    """Both layouts of a one-axis layer's modes (plan fno_split=0 / 1) against the dense
    float64 reference: to rounding in float64, within 1e-5 in float32."""
    monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_split={split}")
    _check_against_dense(xp, rng, shape, cout, n_modes)


def _check_against_dense(xp, rng, shape, cout, n_modes):
    """``spectral_conv`` (DFT path) against the dense float64 reference: to rounding in
    float64, within 1e-5 in float32."""
    x, w, b = _rand(rng, shape, cout, n_modes)
    want = dense_reference(x, w, n_modes, b)
    got64 = spectral_conv(xp.asarray(x), xp.asarray(w), n_modes, xp.asarray(b), method="dft")
    assert _rel(to_numpy(got64), want) < 1e-12
    got32 = spectral_conv(xp.asarray(x, dtype=np.float32), xp.asarray(w.astype(np.complex64)),
                          n_modes, xp.asarray(b, dtype=np.float32), method="dft")
    assert got32.dtype == np.float32 and _rel(to_numpy(got32), want) < 1e-5


@pytest.mark.parametrize("split", ["0", "1"])
@pytest.mark.parametrize("shape,cout,n_modes", ONE_AXIS)
def test_torch_split_modes(monkeypatch, rng, split, shape, cout, n_modes):
    """The torch layer on either layout: the chain the plan asks for, float32 output and
    gradients within 1e-5 of the FFT path, and ``gradcheck`` in float64."""
    from fftmatvec.fno import _torch_dft

    monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_split={split}")
    x = torch.randn(shape)
    chain = _torch_dft.chain_for(x, torch.float32, kept_modes(n_modes), cout)
    assert isinstance(chain, _dft.SplitChain) is (split == "1")
    _check_torch_layer(rng, x, cout, n_modes)


def _check_torch_layer(rng, x, cout, n_modes):
    """The torch layer: float32 output and gradients within 1e-5 of the FFT path on ``x``,
    ``gradcheck`` in float64; the gradients (and the bias's alone) of the layer as returned."""
    from fftmatvec.fno import spectral_conv_torch

    shape = tuple(x.shape)
    torch.manual_seed(shape[-1] + cout)
    dft, fft = _layers(shape[1], cout, n_modes)
    g = torch.randn((shape[0], cout) + shape[2:])
    for a, c in zip(_grads(dft, x, g), _grads(fft, x, g)):
        assert _rel(a, c) < 1e-5
    x, w, b = (torch.tensor(a, requires_grad=True) for a in _rand(rng, shape, cout, n_modes))
    assert torch.autograd.gradcheck(
        lambda x, w, b: spectral_conv_torch(x, w, n_modes, b, method="dft"), (x, w, b))
    w.requires_grad_(False)
    x.requires_grad_(False)
    spectral_conv_torch(x, w, n_modes, b, method="dft").sum().backward()
    assert torch.allclose(b.grad, torch.full_like(b, shape[0] * math.prod(shape[2:])))


@pytest.fixture
def paired_on_gemms(monkeypatch):
    """The planner's chain for every layer: the paired modes, every transform on its GEMMs (the
    row and plane kernels need a GPU; :class:`_dft.PairedChain` then permutes into and out of
    its layout), so that the chain's own arithmetic is checked without one."""
    from fftmatvec.fno import _plan as planner
    from fno_oracle import clear_chains

    monkeypatch.setattr(planner, "fno_chain",
                        lambda *a, **k: (frozenset(), frozenset(), "paired", "auto", False, False))
    clear_chains()
    yield
    monkeypatch.undo()
    clear_chains()


#: Layers of one axis and of two (the paired modes' layers: the row kernels or the plane
#: kernels), the last of them with no mode constant over the grid (an odd first axis keeping 2).
PAIRED_CASES = ONE_AXIS + [((2, 3, 12, 15), 2, (5, 8)), ((1, 3, 12, 15), 2, (12, 15)),
                           ((2, 2, 8, 6), 3, (3, 4)), ((2, 3, 9, 10), 3, (2, 4))]


@pytest.mark.parametrize("shape,cout,n_modes", PAIRED_CASES)
def test_paired_modes_match_dense_reference(paired_on_gemms, xp, rng, shape, cout, n_modes):
    """The paired modes (:class:`_dft.PairedChain`) against the dense float64 reference: to
    rounding in float64, within 1e-5 in float32."""
    _check_against_dense(xp, rng, shape, cout, n_modes)


@pytest.mark.parametrize("shape,cout,n_modes", PAIRED_CASES)
def test_torch_paired_modes(paired_on_gemms, rng, shape, cout, n_modes):
    """The torch layer on the paired modes: float32 output and gradients within 1e-5 of the
    FFT path, ``gradcheck`` in float64, and the bias's gradient also without the others'."""
    from fftmatvec.fno import _torch_dft

    x = torch.randn(shape)
    chain = _torch_dft.chain_for(x, torch.float32, kept_modes(n_modes), cout)
    assert isinstance(chain, _dft.PairedChain) and chain.rows == ("paired",)
    _check_torch_layer(rng, x, cout, n_modes)


def test_paired_rule(monkeypatch):
    """The paired modes need the row kernels of one axis or the plane kernels of two (float32
    on a GPU); forced where they cannot serve, an error that says why; never beside the split
    modes forced, or the GEMMs."""
    from fftmatvec.fno._plan import fno_chain, fno_paired

    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    assert not fno_paired((128,), (33,), np.float32, -1, kernels=False)
    assert fno_chain(1024, 64, 64, (128,), (33,), np.float32, -1, False)[2] == "split"
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1")
    with pytest.raises(FFTMatvecValueError, match="fno_paired=1.*3 axes"):
        fno_paired((8, 8, 8), (4, 4, 5), np.float32, -1, kernels=True)
    with pytest.raises(FFTMatvecValueError, match="fno_paired=1.*row kernels run float32"):
        fno_paired((128,), (33,), np.float32, -1, kernels=False)
    with pytest.raises(FFTMatvecValueError, match="fno_paired=1.*plane kernels run float32"):
        fno_paired((8, 8), (4, 5), np.float32, -1, kernels=False)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1,fno_plane=0")
    with pytest.raises(FFTMatvecValueError, match="fno_paired=1.*fno_plane=0"):
        fno_paired((8, 8), (4, 5), np.float32, -1, kernels=True)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1,fno_rows=0")
    with pytest.raises(FFTMatvecValueError, match="fno_paired=1.*fno_rows=0"):
        fno_paired((128,), (33,), np.float32, -1, kernels=True)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1,fno_split=1")
    with pytest.raises(FFTMatvecValueError, match="fno_paired=1.*fno_split=1"):
        fno_chain(1024, 64, 64, (128,), (33,), np.float32, -1, False)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=0")
    assert not fno_paired((128,), (33,), np.float32, -1, kernels=True)
    with pytest.raises(ValueError, match="layout must be one of"):
        _dft.make_chain(None, (8,), (3,), -1, layout="pairs")


def test_split_rule(monkeypatch):
    """By default one-axis float32/float64 layers whose weight copy is no larger than the
    permutes it saves; forced where it cannot serve, an error that says why."""
    from fftmatvec.fno._plan import fno_split

    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    assert fno_split(1024, 64, 64, (128,), np.float32)
    assert fno_split(64, 64, 64, (4096,), "float64")
    assert fno_split(32, 64, 64, (4096,), torch.float32)          # 32 * 128 == 64 * 64
    assert not fno_split(31, 64, 64, (4096,), np.float32)
    assert not fno_split(1024, 64, 64, (128, 128), np.float32)    # more than one axis
    assert not fno_split(1024, 64, 64, (128,), torch.bfloat16)    # 16-bit storage
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1")         # the row kernels take both
    assert fno_split(1024, 64, 64, (128,), np.float32)
    monkeypatch.delenv("FFTMATVEC_PLAN")
    # on the row kernels, only with FNO_SPLIT_WITH_ROW_KERNELS (until measured)
    from fftmatvec.fno import _plan as planner

    assert fno_split(1024, 64, 64, (128,), np.float32, row_kernels=True) \
        is planner.FNO_SPLIT_WITH_ROW_KERNELS
    monkeypatch.setattr(planner, "FNO_SPLIT_WITH_ROW_KERNELS", True)
    assert fno_split(1024, 64, 64, (128,), np.float32, row_kernels=True)
    monkeypatch.setattr(planner, "FNO_SPLIT_WITH_ROW_KERNELS", False)
    assert not fno_split(1024, 64, 64, (128,), np.float32, row_kernels=True)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_split=1")
    assert fno_split(1024, 64, 64, (128,), np.float32, row_kernels=True)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_split=1")
    assert fno_split(1, 64, 64, (128,), np.float32)
    with pytest.raises(FFTMatvecValueError, match="fno_split=1.*2 axes"):
        fno_split(2, 3, 3, (8, 8), np.float32)
    with pytest.raises(FFTMatvecValueError, match="fno_split=1.*bfloat16"):
        fno_split(2, 3, 3, (8,), torch.bfloat16)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_split=0")
    assert not fno_split(1024, 64, 64, (128,), np.float32)
