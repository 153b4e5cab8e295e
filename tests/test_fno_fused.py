"""A one-axis layer's forward in one kernel (fftmatvec/fno/_fused1d.py: Layer1d): its launch
shapes and the planner's rule on the CPU; on a GPU against the layer's float64 definition on the
full grid (CuPy arrays and PyTorch tensors, outputs poisoned), through the layer against the
paired chain, and on the forward's fast path."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError, backend
from fftmatvec.fno._fused1d import (CHANNELS, MAX_BATCH_ROWS, MAX_THREADS, batch_rows,
                                    launch_shape, smem_bytes, supported)
from fftmatvec.fno._plan import fno_fused
from fftmatvec.fno._plan import FNO_FUSED_MIN_FILL

from fno_oracle import clear_chains, dense_reference, on_poisoned_side_stream

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
H100_SMEM = 227 * 1024


def test_launch_shapes():
    """Blocks of at most MAX_BATCH_ROWS batch rows (a multiple of 4) whose modes fit; every
    batch row covered; the items (a mode and four batch rows) in the fewest rounds the threads
    allow."""
    for B, L, C, m in [(1024, 128, 64, 33), (1, 64, 64, 1), (13, 256, 64, 65), (9, 128, 128, 33),
                       (100, 64, 128, 17), (7, 256, 128, 40)]:
        nb, rb, grid, block, smem = launch_shape(B, L, C, m, H100_SMEM)
        assert nb % 4 == 0 and 4 <= nb <= MAX_BATCH_ROWS
        assert rb in (4, 8) and nb % rb == 0 and (rb == 8) == (C == 64 and nb == 8)
        assert smem == smem_bytes(C, m, nb) <= H100_SMEM
        assert nb == MAX_BATCH_ROWS or smem_bytes(C, m, nb + 4) > H100_SMEM
        assert grid[0] * nb >= B > (grid[0] - 1) * nb
        threads, most = block[0], MAX_THREADS[L // 64, C // 64, rb]
        assert threads % 32 == 0 and threads == most  # the kernel's most threads
        assert launch_shape(B, L, C, m, H100_SMEM, rb, 256)[3] == (256,)
        four = launch_shape(B, L, C, m, H100_SMEM, 4, 320, 4)  # blocks of 4 batch rows
        assert four[:2] == (4, 4) and four[3] == (320,) and four[4] == smem_bytes(C, m, 4)
        assert four[2][0] == -(-B // 4)
    assert batch_rows(64, 33, H100_SMEM) == 8 and batch_rows(128, 33, H100_SMEM) == 4
    assert batch_rows(64, 129, H100_SMEM) is None  # 4 rows of 129 modes: 265 KB
    assert supported(128, 33, 64, 64, H100_SMEM) and supported(256, 33, 128, 128, 200 * 1024)
    for L, m, cin, cout in [(4096, 33, 64, 64), (96, 17, 64, 64), (128, 33, 64, 32),
                            (128, 33, 32, 32), (128, 66, 64, 64), (256, 129, 64, 64)]:
        assert not supported(L, m, cin, cout, H100_SMEM), (L, m, cin, cout)
    assert not supported(128, 33, 64, 64, 64 * 1024)  # an AMD block's 64 KB: 4 rows take 67
    assert CHANNELS == (64, 128)


def test_fused_rule(monkeypatch):
    """Off the GPU, off the paired one-axis layers, beside the pass form: never, and forced
    there an error that says why; on a GPU by default where the batch fills the device."""
    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    assert not fno_fused(1024, 64, 64, (128,), (33,), "paired", "auto", False, -1)
    assert not fno_fused(1024, 64, 64, (128,), (33,), "split", "auto", True, -1)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_fused=1")
    with pytest.raises(FFTMatvecValueError, match="fno_fused=1.*float32 layers on a GPU"):
        fno_fused(1024, 64, 64, (128,), (33,), "paired", "auto", False, -1)
    with pytest.raises(FFTMatvecValueError, match="fno_fused=1.*one-axis layers on the paired"):
        fno_fused(8, 64, 64, (16, 16), (4, 5), "paired", "auto", True, -1)
    with pytest.raises(FFTMatvecValueError, match="fno_fused=1.*pass form"):
        fno_fused(1024, 64, 64, (128,), (33,), "paired", "passes", True, -1)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_fused=0")
    assert not fno_fused(1024, 64, 64, (128,), (33,), "paired", "auto", True, -1)
    from fftmatvec.fno import _dft

    with pytest.raises(ValueError, match="one-kernel layer takes a one-axis layer"):
        _dft.make_chain(None, (128,), (33,), -1, layout="interleaved", fused=True)


@gpu
@pytest.mark.gpu
def test_fused_rule_on_the_device(monkeypatch):
    from fftmatvec.fno._plan import _sm_count

    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    dev = backend.cupy.cuda.Device().id
    assert fno_fused(1024, 64, 64, (128,), (33,), "paired", "auto", True, dev)
    sms = _sm_count(dev)
    # blocks of 8 batch rows: a wave filled to FNO_FUSED_MIN_FILL, or not
    full = 8 * math.ceil(FNO_FUSED_MIN_FILL * sms)
    assert fno_fused(full, 64, 64, (128,), (33,), "paired", "auto", True, dev)
    assert not fno_fused(full - 8, 64, 64, (128,), (33,), "paired", "auto", True, dev)
    assert fno_fused(8 * (sms + full // 8), 64, 64, (128,), (33,), "paired", "auto", True, dev)
    assert not fno_fused(8 * (sms + 1), 64, 64, (128,), (33,), "paired", "auto", True, dev)
    assert not fno_fused(1024, 64, 32, (128,), (33,), "paired", "auto", True, dev)
    assert not fno_fused(64, 64, 64, (4096,), (33,), "paired", "auto", True, dev)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_fused=1")
    assert fno_fused(8, 64, 64, (128,), (33,), "paired", "auto", True, dev)
    with pytest.raises(FFTMatvecValueError, match="fno_fused=1.*got 4096 points"):
        fno_fused(64, 64, 64, (4096,), (33,), "paired", "auto", True, dev)


# (B, C, L, m): the benchmark's layer, every row length and channel count, the most modes that
# fit, one mode, a last block of fewer batch rows, a single batch row, odd bins and Nyquist kept
FUSED_CASES = [(1024, 64, 128, 33), (19, 64, 64, 33), (6, 64, 256, 65), (5, 128, 128, 33),
               (9, 128, 64, 17), (1, 64, 128, 1), (13, 128, 256, 40), (4, 64, 128, 65),
               (8, 64, 64, 1)]


def _kernel(L, m, C, rb=None, nb=None, threads=None):
    from fftmatvec.fno._fused1d import Layer1d
    from fftmatvec.fno._rows import last_axis_set

    dev = backend.cupy.cuda.Device().id
    rows = last_axis_set(L, m, dev, modes_major="paired")
    return Layer1d(L, m, C, rows["F"], rows["A"], dev, item_rows=rb, batch_rows=nb,
                   threads=threads)


def _cupy_run(fused, x, wmm, b):
    """The kernel's ``y`` (NumPy) of CuPy copies of ``x``, the modes-major weight ``wmm`` and
    ``b`` (None: no bias), its output taken from a pool that held NaNs."""
    cp = backend.cupy
    X = cp.asarray(x, dtype=np.float32)
    W = cp.asarray(wmm, dtype=np.complex64)
    bc = None if b is None else cp.asarray(b, dtype=np.float32)
    cp.full(x.size, np.nan, dtype=np.float32)  # freed: the pool hands it out again
    return cp.asnumpy(fused(X, W, bc))


def _assert_close(got, want, case):
    """``got`` of ``want``'s shape, every element written, within float32 accuracy."""
    assert got.shape == want.shape and np.isfinite(got).all()
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-5, case + (err,)


def _case(rng, B, C, L, m, bias=True):
    x = rng.standard_normal((B, C, L))
    w = (rng.standard_normal((C, C, m)) + 1j * rng.standard_normal((C, C, m))) / C
    b = rng.standard_normal(C) if bias else np.zeros(C)
    return x, w, b, dense_reference(x, w, 2 * m - 1, b)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("B,C,L,m", FUSED_CASES)
@pytest.mark.parametrize("kind", ["cupy", "torch"])
@pytest.mark.parametrize("shape", [None, (4, 8, None), (4, 4, 320)])
def test_fused_matches_dense_reference(rng, B, C, L, m, kind, shape):
    """The kernel's ``y`` within float32 accuracy of the float64 definition on the full grid,
    on every element of an output poisoned before it is written; with and without a bias; with
    the default blocks and items, with items of four batch rows, and with blocks of four batch
    rows (several a multiprocessor) of 320 threads."""
    rb, nb, threads = shape or (None, None, None)
    fused = _kernel(L, m, C, rb, nb, threads)
    default = _kernel(L, m, C)
    if shape is not None and (fused.item_rows, fused.batch_rows) == (
            default.item_rows, default.batch_rows):
        pytest.skip("the default blocks and items are these here")
    for bias in (True, False):
        x, w, b, want = _case(rng, B, C, L, m, bias)
        wmm = np.ascontiguousarray(w.transpose(2, 0, 1))
        if kind == "torch":
            torch = pytest.importorskip("torch")
            if not torch.cuda.is_available():
                pytest.skip("no CUDA device for PyTorch")
            X = torch.tensor(x, dtype=torch.float32, device="cuda")
            W = torch.tensor(wmm, dtype=torch.complex64, device="cuda")
            bt = torch.tensor(b, dtype=torch.float32, device="cuda") if bias else None
            got = on_poisoned_side_stream(lambda: fused(X, W, bt), (B, C, L), torch.float32)
        else:
            got = _cupy_run(fused, x, wmm, b if bias else None)
        _assert_close(got, want, (B, C, L, m, bias))


@gpu
@pytest.mark.gpu
def test_fused_refuses_what_it_cannot_take():
    cp = backend.cupy
    fused = _kernel(128, 33, 64)
    x = cp.ones((3, 64, 128), dtype=np.float32)
    W = cp.ones((33, 64, 64), dtype=np.complex64)
    b = cp.ones(64, dtype=np.float32)
    assert fused.takes(x, W, b) and fused.takes(x, W, None)
    bad = [(x[:, :32], W, b), (x.astype(np.float64), W, b), (x, W[:32], b),
           (x, W.astype(np.complex128), b), (x, W, b[:32]), (x[:, :, ::2], W, b),
           (cp.ones((3, 64, 256), dtype=np.float32), W, b),
           (cp.ones(3 * 64 * 128 + 1, dtype=np.float32)[1:].reshape(3, 64, 128), W, b),
           (x, W, cp.ones(65, dtype=np.float32)[1:])]
    for args in bad:
        assert not fused.takes(*args)
        with pytest.raises(ValueError, match="fno_layer1d_f32_w2_c1_r8: expected contiguous"):
            fused(*args)
    with pytest.raises(ValueError, match="no one-kernel FNO layer for L = 128 keeping m = 33 "
                                         "bins with 32 channels"):
        from fftmatvec.fno._fused1d import Layer1d
        from fftmatvec.fno._rows import last_axis_set

        rows = last_axis_set(128, 33, 0, modes_major="paired")
        Layer1d(128, 33, 32, rows["F"], rows["A"], 0)


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and backend.gpu_available()):
        pytest.skip("no CUDA device for PyTorch and CuPy")
    clear_chains()
    yield torch
    clear_chains()


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("B,C,L,m", [(256, 64, 128, 33), (64, 128, 64, 17), (40, 64, 256, 65)])
def test_layer_on_the_fused_kernel(torch, monkeypatch, rng, B, C, L, m):
    """``SpectralConv`` and ``spectral_conv`` (CuPy) under plan ``fno_fused=1`` against the
    paired chain (``fno_fused=0``) and the float64 definition; the forward's fast path (the
    second call) reads the weight's and the bias's in-place updates; a call with gradients
    wanted keeps the chain."""
    from fftmatvec.fno import SpectralConv, _graphs, clear_graphs, spectral_conv
    from fftmatvec.fno._torch_dft import FusedForward

    n_modes = 2 * m - 1  # m kept bins
    x, w, b, want = _case(rng, B, C, L, m)
    layer = SpectralConv(C, C, n_modes, method="dft").cuda()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(w, dtype=torch.complex64))
        layer.bias.copy_(torch.tensor(b, dtype=torch.float32).reshape(layer.bias.shape))
    X = torch.tensor(x, dtype=torch.float32, device="cuda")
    outs = {}
    for mode in ("0", "1"):
        monkeypatch.setenv("FFTMATVEC_PLAN", f"fno_fused={mode}")
        clear_chains()
        clear_graphs()
        with torch.no_grad():
            outs[mode] = [layer(X).cpu().numpy() for _ in range(3)]  # full, fast, fast
        if mode == "1":
            assert any(isinstance(h, FusedForward) for h in _graphs.FAST.values())
    for got in outs["1"] + outs["0"]:
        assert np.abs(got - want).max() / np.abs(want).max() < 1e-5
    assert np.abs(outs["1"][0] - outs["0"][0]).max() / np.abs(want).max() < 1e-5
    # in-place updates seen on the fast path
    with torch.no_grad():
        layer.weight.mul_(0.5)
        layer.bias.add_(1.0)
        got = layer(X).cpu().numpy()
    want2 = dense_reference(x, 0.5 * w, n_modes, b + 1.0)
    assert np.abs(got - want2).max() / np.abs(want2).max() < 1e-5
    # with gradients wanted: the chain, the gradients flowing
    Xg = X.clone().requires_grad_(True)
    y = layer(Xg)
    y.sum().backward()
    assert Xg.grad is not None and layer.weight.grad is not None
    assert np.abs(y.detach().cpu().numpy() - want2).max() / np.abs(want2).max() < 1e-5
    # a new weight tensor after fast calls: the memo's launch (queued before its last checks,
    # reading the weight it holds) is dropped, the full path reads the new one, then the memo
    want3 = dense_reference(x, w, n_modes, b + 1.0)
    with torch.no_grad():
        for _ in range(2):
            layer(X)
        layer.weight = torch.nn.Parameter(2 * layer.weight.detach())  # w again
        for _ in range(3):
            got = layer(X).cpu().numpy()
            assert np.abs(got - want3).max() / np.abs(want3).max() < 1e-5
    # CuPy
    cp = backend.cupy
    yc = spectral_conv(cp.asarray(x, dtype=np.float32), cp.asarray(0.5 * w, dtype=np.complex64),
                       n_modes, bias=cp.asarray(b + 1.0, dtype=np.float32))
    assert np.abs(cp.asnumpy(yc) - want2).max() / np.abs(want2).max() < 1e-5


@gpu
@pytest.mark.gpu
def test_fast_path_spare_outputs(torch, monkeypatch, rng):
    """The forward's fast path on the one-kernel layer writes a spare output made after the
    previous call's launch: every call returns its own tensor (outputs the caller still holds
    are not written again, each the float64 definition's for its input), a spare made in
    inference mode is a normal tensor returned outside it, and none is kept above
    ``SPARE_MAX_BYTES``."""
    from fftmatvec.fno import SpectralConv, _graphs, _torch_dft, clear_graphs

    B, C, L, m = 64, 64, 128, 33
    n_modes = 2 * m - 1
    _, w, b, _ = _case(rng, B, C, L, m)
    layer = SpectralConv(C, C, n_modes, method="dft").cuda()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(w, dtype=torch.complex64))
        layer.bias.copy_(torch.tensor(b, dtype=torch.float32).reshape(layer.bias.shape))
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_fused=1")
    clear_graphs()
    inputs = [rng.standard_normal((B, C, L)) for _ in range(3)]
    wants = [dense_reference(x, w, n_modes, b) for x in inputs]
    X = torch.empty((B, C, L), device="cuda")

    def call(i):
        X.copy_(torch.tensor(inputs[i], dtype=torch.float32))
        return layer(X)

    def fused_hits():
        return [h for h in _graphs.FAST.values() if isinstance(h, _torch_dft.FusedForward)]

    with torch.no_grad():
        outs = [call(i % 3) for i in range(7)]
    assert len({y.data_ptr() for y in outs}) == len(outs)
    for i, y in enumerate(outs):
        want = wants[i % 3]
        assert np.abs(y.cpu().numpy() - want).max() / np.abs(want).max() < 1e-5
    (hit,) = fused_hits()
    assert len(hit.spares) == 1
    with torch.inference_mode():
        y = call(1)
        assert not hit.spares[0].is_inference()
    assert np.abs(y.cpu().numpy() - wants[1]).max() / np.abs(wants[1]).max() < 1e-5
    with torch.no_grad():
        y = call(2)  # the spare made in inference mode
    assert not y.is_inference()
    y.add_(0.0)  # a normal tensor: updated in place outside inference mode
    assert np.abs(y.cpu().numpy() - wants[2]).max() / np.abs(wants[2]).max() < 1e-5
    monkeypatch.setattr(_torch_dft, "SPARE_MAX_BYTES", X.numel() * 4 - 1)
    clear_graphs()
    assert not hit.spares  # released
    with torch.no_grad():
        outs = [call(i) for i in range(3)]
    (hit,) = fused_hits()
    assert not hit.spares
    for y, want in zip(outs, wants):
        assert np.abs(y.cpu().numpy() - want).max() / np.abs(want).max() < 1e-5
