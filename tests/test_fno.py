"""FNO spectral convolution: a float64 dense reference, neuraloperator, autograd."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError
from fftmatvec.fno import spectral_conv
from fftmatvec.fno._modes import kept_modes

CASES = [((2, 3, 10), 4, 6), ((2, 3, 9), 5, 9), ((2, 2, 7, 7), 3, (5, 6)),
         ((1, 2, 5, 8), 2, (5, 8)), ((2, 2, 4, 5, 6), 3, (3, 2, 6))]


def dense_reference(x, w, n_modes, bias):
    """The layer's definition on the full grid: truncate the full spectrum, contract, invert.

    On a non-last axis of odd size ``n`` neuraloperator writes frequency ``k`` to bin ``k - 1``
    (it applies ``fftshift`` twice), and so does this reference.
    """
    B, C, *sp = x.shape
    modes = kept_modes(n_modes)
    X = np.fft.fftn(x, axes=range(2, x.ndim)) / np.prod(sp)
    Y = np.zeros((B, w.shape[1], *sp), complex)
    freqs = [np.arange(m) - m // 2 for m in modes[:-1]] + [np.arange(modes[-1])]
    for k in np.ndindex(*modes):
        f = tuple(fr[j] for fr, j in zip(freqs, k))
        fo = tuple((fr + 2 * (n // 2)) % n for fr, n in zip(f[:-1], sp[:-1])) + f[-1:]
        Y[(slice(None), slice(None)) + fo] = X[(slice(None), slice(None)) + f] @ w[(...,) + k]
    # inverse over the other axes, then the real inverse on the last axis (DC and Nyquist
    # columns once, their imaginary part dropped; the other columns doubled)
    d = len(sp)
    part = np.fft.ifftn(Y, axes=range(2, 1 + d), norm="forward") if d > 1 else Y
    y = np.zeros((B, w.shape[1], *sp))
    n = np.arange(sp[-1])
    for kl in range(modes[-1]):
        cw = 1.0 if kl == 0 or 2 * kl == sp[-1] else 2.0
        y += cw * np.real(part[..., kl, None] * np.exp(2j * np.pi * kl * n / sp[-1]))
    return y + bias.reshape((1, -1) + (1,) * d)


def _rand(rng, shape, cout, n_modes):
    x = rng.standard_normal(shape)
    modes = kept_modes(n_modes)
    w = rng.standard_normal((shape[1], cout) + modes) + 1j * rng.standard_normal(
        (shape[1], cout) + modes)
    return x, w, rng.standard_normal(cout)


@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_matches_dense_reference(xp, rng, shape, cout, n_modes):
    x, w, b = _rand(rng, shape, cout, n_modes)
    want = dense_reference(x, w, n_modes, b)
    got = spectral_conv(xp.asarray(x), xp.asarray(w), n_modes, xp.asarray(b))
    got = got.get() if hasattr(got, "get") else got
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_bad_modes(rng):
    x, w, _ = _rand(rng, (1, 2, 6), 2, 6)
    with pytest.raises(FFTMatvecValueError, match="n_modes"):
        spectral_conv(x, np.zeros((2, 2, 5), complex), 8)
    with pytest.raises(FFTMatvecValueError, match="weight"):
        spectral_conv(x, w[:1], 6)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_torch_matches_reference(rng, shape, cout, n_modes):
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = _rand(rng, shape, cout, n_modes)
    got = spectral_conv_torch(torch.tensor(x), torch.tensor(w), n_modes, torch.tensor(b))
    want = dense_reference(x, w, n_modes, b)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_gradcheck(rng, shape, cout, n_modes):
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = (torch.tensor(a, requires_grad=True) for a in _rand(rng, shape, cout, n_modes))
    assert torch.autograd.gradcheck(lambda x, w, b: spectral_conv_torch(x, w, n_modes, b),
                                    (x, w, b))


def _neuralop():
    try:
        from neuralop.layers.spectral_convolution import SpectralConv as NSC
    except Exception:  # noqa: BLE001 - any import failure means: not available
        pytest.skip("neuraloperator not importable")
    return NSC


@pytest.mark.parametrize("shape,n_modes", [((3, 4, 32), 12), ((2, 4, 16, 17), (8, 10)),
                                           ((2, 4, 15, 18), (15, 18)),
                                           ((2, 3, 8, 9, 10), (4, 6, 6))])
def test_from_neuralop(shape, n_modes):
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(sum(shape))
    ref = _neuralop()(shape[1], 5, n_modes)
    ours = SpectralConv.from_neuralop(ref)
    x = torch.randn(shape, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y_ref, y = ref(x), ours(x2)
    g = torch.randn_like(y)
    (y_ref * g).sum().backward()
    (y * g).sum().backward()

    def close(a, b):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5

    close(y, y_ref)
    close(x2.grad, x.grad)
    close(ours.weight.grad, ref.weight.tensor.grad)
    close(ours.bias.grad, ref.bias.grad)


@pytest.mark.parametrize("shape,n_modes", [((4, 8, 64), 32), ((2, 6, 24, 30), (12, 16)),
                                           ((2, 4, 10, 12, 14), (6, 6, 8))])
def test_float32_gradients_match_autograd_of_reference(shape, n_modes):
    """Ours in float32 against PyTorch's autograd of an rfftn / einsum / irfftn reference."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(len(shape) * 7 + shape[-1])
    layer = SpectralConv(shape[1], 5, n_modes)
    modes = layer.modes
    d = len(modes)
    x = torch.randn(shape, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    wr = layer.weight.detach().clone().requires_grad_(True)

    def reference(x, w):
        X = torch.fft.rfftn(x, dim=tuple(range(-d, 0)), norm="forward")
        idx = [torch.as_tensor((np.arange(m) - m // 2) % n) for n, m in zip(shape[2:-1], modes)]
        for a, ix in enumerate(idx):
            X = X.index_select(2 + a, ix)
        X = X[..., : modes[-1]]
        Y = torch.einsum("bi...,io...->bo...", X, w)
        out = X.new_zeros((shape[0], 5) + tuple(shape[2:-1]) + (shape[-1] // 2 + 1,))
        grids = torch.meshgrid(*idx, indexing="ij") if idx else ()
        out[(slice(None), slice(None)) + tuple(grids) + (slice(0, modes[-1]),)] = Y
        if d > 1:
            out = torch.fft.ifftn(out, dim=tuple(range(2, 1 + d)), norm="forward")
        return torch.fft.irfft(out, n=shape[-1], dim=-1, norm="forward")

    y = layer(x)
    y_ref = reference(xr, wr) + layer.bias.detach()
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    for a, b in ((y, y_ref), (x.grad, xr.grad), (layer.weight.grad, wr.grad)):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device for torch")
@pytest.mark.parametrize("shape,n_modes", [((4, 8, 100), 40), ((2, 6, 85, 85), (12, 12)),
                                           ((2, 4, 16, 16, 16), (8, 8, 8))])
def test_cuda_tensors_match_cpu(shape, n_modes):
    """On the device: the output and gradients equal the CPU path's, and stay on the device."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(shape[-1])
    cpu = SpectralConv(shape[1], 6, n_modes)
    gpu = SpectralConv(shape[1], 6, n_modes, device="cuda")
    with torch.no_grad():
        gpu.weight.copy_(cpu.weight)
        gpu.bias.copy_(cpu.bias)
    x = torch.randn(shape, requires_grad=True)
    xg = x.detach().cuda().requires_grad_(True)
    y, yg = cpu(x), gpu(xg)
    assert yg.is_cuda
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (yg * g.cuda()).sum().backward()
    for a, b in ((yg, y), (xg.grad, x.grad), (gpu.weight.grad, cpu.weight.grad)):
        a, b = a.detach().cpu(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5
