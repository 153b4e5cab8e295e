"""The FNO layer's oracle: the definition on the full grid in float64, and random cases."""

from __future__ import annotations

import numpy as np
import pytest

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


def plane_r2c(a, n0, n1, m0, m1, bins, s0, s1):
    """A plane kernel's forward transform (``fftmatvec.fno._rows.Plane``, ``r2c``) in
    float64: ``a`` ``(P, n0 n1)``."""
    X = np.fft.fft(np.fft.rfft(a.reshape(-1, n0, n1), axis=-1), axis=-2)
    Z = X[:, bins, :m1] * (s0 * np.asarray(s1))
    return np.concatenate([Z.real, Z.imag], axis=1).reshape(a.shape[0], -1)


def plane_c2r(v, n0, n1, m0, m1, bins, s0, s1):
    """A plane kernel's inverse transform (``c2r``) in float64: ``v`` ``(P, 2 m0 m1)``."""
    v = v.reshape(-1, 2, m0, m1)
    Z = np.zeros((v.shape[0], n0, n1 // 2 + 1), dtype=complex)
    Z[:, bins, :m1] = s0 * (v[:, 0] + 1j * v[:, 1])
    W = np.fft.ifft(Z, axis=-2) * n0
    W[..., :m1] *= np.asarray(s1)
    W[..., 0] = W[..., 0].real
    if n1 % 2 == 0:
        W[..., n1 // 2] = W[..., n1 // 2].real
    return (np.fft.irfft(W, n=n1, axis=-1) * n1).reshape(v.shape[0], -1)


def rand_case(rng, shape, cout, n_modes):
    x = rng.standard_normal(shape)
    modes = kept_modes(n_modes)
    w = rng.standard_normal((shape[1], cout) + modes) + 1j * rng.standard_normal(
        (shape[1], cout) + modes)
    return x, w, rng.standard_normal(cout)


def cupy_dft_error(rng, shape, cout, n_modes):
    """The CuPy float32 DFT path on a fresh random case against the dense float64 reference:
    max |error| / max |exact|. The chains are made anew (the plan of the moment read) and
    dropped after."""
    from fftmatvec import backend
    from fftmatvec.fno import spectral_conv

    cp = backend.cupy
    x, w, b = rand_case(rng, shape, cout, n_modes)
    want = dense_reference(x, w, n_modes, b)
    clear_chains()
    try:
        got = spectral_conv(cp.asarray(x, dtype=np.float32), cp.asarray(w.astype(np.complex64)),
                            n_modes, cp.asarray(b, dtype=np.float32), method="dft")
    finally:
        clear_chains()
    return float(np.abs(cp.asnumpy(got) - want).max() / np.abs(want).max())


def neuralop_spectral_conv():
    """neuraloperator's ``SpectralConv`` class; the test is skipped where it does not import."""
    try:
        from neuralop.layers.spectral_convolution import SpectralConv
    except Exception:  # noqa: BLE001 - any import failure means: not available
        pytest.skip("neuraloperator not importable")
    return SpectralConv


def clear_chains():
    """Drop the cached DFT chains and graphs, so that the next layer call reads the plan."""
    from fftmatvec.fno import _reference, _torch_dft, clear_graphs

    _torch_dft._chain.cache_clear()
    _torch_dft._planned_chain.cache_clear()
    _reference._xp_chain.cache_clear()
    clear_graphs()


def layer_grads(x, w, b, n_modes, graphs):
    """The DFT path's output and its input, weight and bias gradients for a fixed ``dL/dy``."""
    import torch

    from fftmatvec.fno import spectral_conv_torch

    xs = x.detach().clone().requires_grad_(True)
    ws = w.detach().clone().requires_grad_(True)
    bs = b.detach().clone().requires_grad_(True)
    y = spectral_conv_torch(xs, ws, n_modes, bs, method="dft", graphs=graphs)
    g = torch.randn(y.shape, generator=torch.Generator(y.device).manual_seed(7),
                    device=y.device)
    y.backward(g)
    return y.detach(), xs.grad, ws.grad, bs.grad


def trel(a, b):
    """The largest difference of two tensors relative to the largest magnitude of ``b``."""
    return float((a - b).abs().max() / b.abs().max())


def cuda_case(rng, shape, cout, n_modes):
    """A random case (:func:`rand_case`), its float32 CUDA tensors and the weight's modes:
    ``((x, w, b), (xt, wt, bt), modes)``."""
    import torch

    x, w, b = rand_case(rng, shape, cout, n_modes)
    dev = torch.device("cuda")
    tensors = (torch.as_tensor(x, dtype=torch.float32, device=dev),
               torch.as_tensor(w.astype(np.complex64), device=dev),
               torch.as_tensor(b, dtype=torch.float32, device=dev))
    return (x, w, b), tensors, tuple(int(v) for v in kept_modes(n_modes))


def assert_grads_close(got, want, case=None, n_modes=None, tol=1e-5):
    """:func:`layer_grads` of two runs within ``tol`` of each other (output and the input,
    weight and bias gradients); with ``case`` ``(x, w, b)``, the output within ``tol`` of the
    dense float64 reference too."""
    import torch

    for name, a, c in zip(("y", "dx", "dW", "db"), got, want):
        assert trel(a, c) < tol, (name, trel(a, c))
    if case is not None:
        x, w, b = case
        assert trel(got[0].double().cpu(),
                    torch.as_tensor(dense_reference(x, w, n_modes, b))) < tol


def on_poisoned_side_stream(fn, shape, dtype):
    """``fn()`` (a kernel call returning a new CUDA tensor of ``shape`` and ``dtype``) on a
    side stream right after a block of that size was filled with NaN and freed, so that the
    caching allocator hands the poisoned block to the call's output; its result on the host
    (NumPy) once the stream is done."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.full(shape, float("nan"), dtype=dtype, device="cuda")
        out = fn()
    stream.synchronize()
    return out.cpu().numpy()
