"""The FNO layer's last-axis transforms as cuFFT plans with callbacks (fftmatvec/fno/_rows.py,
CufftLastAxis): against the float64 DFT matrices they replace, through the layer against the
GEMM chain and the dense reference, and the planner's choice between them, the row kernels and
the GEMMs."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError, backend
from fftmatvec.fno import _dft, _reference, kept_modes, spectral_conv
from fftmatvec.gpu import planner
from fftmatvec.gpu.planner import fno_cufft, fno_cufft_auto, fno_last_axis

from fno_oracle import dense_reference
from fno_oracle import rand_case as _rand

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")

# even and odd lengths, 5-smooth and not (85 = 5 17, 34 = 2 17, 21 = 3 7), one bin, a few,
# every bin up to Nyquist
LENGTHS = [(2, 1), (8, 5), (10, 3), (21, 11), (34, 9), (64, 9), (85, 7), (90, 46), (128, 33),
           (256, 129), (4096, 33), (1, 1), (15, 8)]


def _matrix(kind, L, m):
    return {"F": _dft.analysis_last(L, m), "A": _dft.synthesis_last(L, m),
            "AT": _dft.synthesis_last(L, m).T, "FT": _dft.analysis_last(L, m).T}[kind]


def _clear_chains():
    from fftmatvec.fno import _torch_dft, clear_graphs

    _torch_dft._chain.cache_clear()
    _reference._xp_chain.cache_clear()
    clear_graphs()


def test_auto_rule():
    """By default both directions, on every axis of two points or more."""
    for n, m in ((64, 9), (256, 33), (85, 7), (4096, 33), (2, 1)):
        assert fno_cufft_auto(n, m) == {"r2c", "c2r"}, (n, m)
    assert fno_cufft_auto(1, 1) == set()


def test_no_cufft_without_a_gpu_or_in_float64(monkeypatch):
    if not backend.gpu_available():
        assert not fno_cufft(64, 9, np.float32, 0)
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_cufft=1")
        with pytest.raises(FFTMatvecValueError, match="fno_cufft=1.*no GPU"):
            fno_cufft(64, 9, np.float32, 0)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_cufft=1")
    with pytest.raises(FFTMatvecValueError, match="fno_cufft=1.*float32.*float64"):
        fno_cufft(64, 9, np.float64, 0)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_cufft=0")
    assert not fno_cufft(64, 9, np.float32, 0)


def test_last_axis_split(monkeypatch):
    """cuFFT takes what both would; a forced row kernel wins over cuFFT's default; both forced
    is an error."""
    picks = {"rows": frozenset({"r2c"}), "cufft": frozenset({"r2c", "c2r"})}
    monkeypatch.setattr(planner, "fno_rows", lambda *a: picks["rows"])
    monkeypatch.setattr(planner, "fno_cufft", lambda *a: picks["cufft"])
    assert fno_last_axis(256, 33, np.float32, 0) == (frozenset(), {"r2c", "c2r"})
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1")
    picks["rows"] = frozenset({"r2c", "c2r"})
    assert fno_last_axis(256, 33, np.float32, 0) == ({"r2c", "c2r"}, frozenset())
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_cufft=0")
    picks["rows"], picks["cufft"] = frozenset({"r2c"}), frozenset()
    assert fno_last_axis(256, 33, np.float32, 0) == ({"r2c"}, frozenset())
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=1,fno_cufft=1")
    with pytest.raises(FFTMatvecValueError, match="fno_rows=1 and fno_cufft=1"):
        fno_last_axis(256, 33, np.float32, 0)


def test_arguments_checked_before_any_device_work():
    from fftmatvec.fno._rows import CufftLastAxis

    with pytest.raises(ValueError, match="kind"):
        CufftLastAxis("c2c", 64, 9, np.ones(9), 0)
    with pytest.raises(ValueError, match="keeps 1 to 33 bins, not 34"):
        CufftLastAxis("r2c", 64, 34, np.ones(34), 0)
    with pytest.raises(ValueError, match="scale must hold 9"):
        CufftLastAxis("r2c", 64, 9, np.ones(8), 0)
    t = CufftLastAxis("c2r", 64, 9, np.ones(9), 0)
    assert t.shape == (18, 64) and t.engine == "cufft"


cufft_ok = pytest.mark.skipif(not backend.gpu_available() or not planner._fftcb.support()[0],
                              reason="no cuFFT callbacks here")


@cufft_ok
@pytest.mark.gpu
@pytest.mark.parametrize("L,m", LENGTHS)
@pytest.mark.parametrize("kind", ["F", "A", "AT", "FT"])
def test_last_axis_matches_its_matrix(rng, kind, L, m):
    """Each transform equals its float64 DFT matrix within float32 rounding on every element
    of a poisoned output, for several row counts (one plan each), and a second call with other
    arrays reuses the plan (its callbacks read the new addresses)."""
    from fftmatvec.fno._rows import last_axis_set

    cp = backend.cupy
    t = last_axis_set(L, m, cp.cuda.Device().id, cufft=("r2c", "c2r"))[kind]
    assert t.engine == "cufft"
    M = _matrix(kind, L, m)
    assert t.shape == M.shape
    for rows in (1, 7, 301, 7):
        a = rng.standard_normal((rows, M.shape[0]))
        want = a @ M
        src = cp.asarray(a, dtype=np.float32)
        keep = src.copy()
        out = cp.full((rows, M.shape[1]), np.nan, dtype=np.float32)
        got = t(src, out=out)
        assert got is out
        assert bool((src == keep).all()), "the input was changed"
        err = np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()
        assert err < 2e-6 * max(1.0, np.log2(L)), (kind, L, m, rows, err)


@cufft_ok
@pytest.mark.gpu
def test_streams_have_their_own_plans(rng):
    """Two streams running the same transform on different arrays, back to back without a
    wait, each get their own result."""
    from fftmatvec.fno._rows import CufftLastAxis

    cp = backend.cupy
    t = CufftLastAxis("c2r", 256, 33, np.ones(33), cp.cuda.Device().id)
    M = _dft.synthesis_last(256, 33)
    a = [rng.standard_normal((4096, 66)) for _ in range(2)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    outs = []
    for s, ai in zip(streams, a):
        with s:
            outs.append(t(cp.asarray(ai, dtype=np.float32)))
    for s, ai, o in zip(streams, a, outs):
        s.synchronize()
        want = ai @ M
        assert np.abs(cp.asnumpy(o) - want).max() / np.abs(want).max() < 2e-5


CASES = [((3, 4, 64), 3, 17), ((2, 3, 16, 30), 4, (8, 16)), ((2, 3, 45, 64), 2, (12, 33)),
         ((2, 2, 12, 10, 16), 3, (6, 5, 9)), ((4, 3, 15), 2, 15), ((2, 2, 20, 85), 3, (7, 12)),
         ((2, 3, 6, 128), 2, (4, 64))]


@cufft_ok
@pytest.mark.gpu
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_cupy_layer_on_cufft_matches_reference(monkeypatch, rng, shape, cout, n_modes):
    """The CuPy float32 layer, its last axis on cuFFT both ways (the default), within 1e-5 of
    the dense float64 reference."""
    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    cp = backend.cupy
    x, w, b = _rand(rng, shape, cout, n_modes)
    want = dense_reference(x, w, n_modes, b)
    args = (cp.asarray(x, dtype=np.float32), cp.asarray(w.astype(np.complex64)), n_modes,
            cp.asarray(b, dtype=np.float32))
    _clear_chains()
    try:
        got = spectral_conv(*args, method="dft")
        modes = tuple(int(v) for v in kept_modes(n_modes))
        assert fno_last_axis(shape[-1], modes[-1], np.float32, cp.cuda.Device().id) \
            == (frozenset(), {"r2c", "c2r"})
    finally:
        _clear_chains()
    err = np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max()
    assert err < 1e-5


torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not (torch.cuda.is_available() and backend.gpu_available()),
                          reason="no CUDA device for PyTorch and CuPy")


def _layer_grads(x, w, b, n_modes, graphs):
    from fftmatvec.fno import spectral_conv_torch

    xs = x.detach().clone().requires_grad_(True)
    ws = w.detach().clone().requires_grad_(True)
    bs = b.detach().clone().requires_grad_(True)
    y = spectral_conv_torch(xs, ws, n_modes, bs, method="dft", graphs=graphs)
    g = torch.randn(y.shape, generator=torch.Generator(y.device).manual_seed(7),
                    device=y.device)
    y.backward(g)
    return y.detach(), xs.grad, ws.grad, bs.grad


def _trel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@cufft_ok
@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_torch_layer_on_cufft_matches_gemm_chain(monkeypatch, rng, shape, cout, n_modes, graphs):
    """Output and input, weight and bias gradients with the last axis on cuFFT (plan
    fno_cufft=1) agree with the GEMM chain within 1e-5, eagerly and replayed as graphs; two
    calls of the graphed layer on new inputs give new results."""
    from fftmatvec.fno import _torch_dft

    x, w, b = _rand(rng, shape, cout, n_modes)
    dev = torch.device("cuda")
    xt = torch.as_tensor(x, dtype=torch.float32, device=dev)
    wt = torch.as_tensor(w.astype(np.complex64), device=dev)
    bt = torch.as_tensor(b, dtype=torch.float32, device=dev)
    modes = tuple(int(v) for v in kept_modes(n_modes))
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_cufft=1")
        _clear_chains()
        got = _layer_grads(xt, wt, bt, n_modes, graphs)
        again = _layer_grads(2 * xt + 1, wt, bt, n_modes, graphs)
        assert _torch_dft.chain_for(xt, torch.float32, modes).engines == (
            ("A", "cufft"), ("AT", "cufft"), ("F", "cufft"), ("FT", "cufft"))
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_rows=0,fno_cufft=0")
        want = _layer_grads(xt, wt, bt, n_modes, graphs)
        want2 = _layer_grads(2 * xt + 1, wt, bt, n_modes, graphs)
        assert _torch_dft.chain_for(xt, torch.float32, modes).rows == ()
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        _clear_chains()
    for name, a, c in zip(("y", "dx", "dW", "db") * 2, got + again, want + want2):
        assert _trel(a, c) < 1e-5, (name, _trel(a, c))
    assert _trel(got[0].double().cpu(), torch.as_tensor(dense_reference(x, w, n_modes, b))) \
        < 1e-5
