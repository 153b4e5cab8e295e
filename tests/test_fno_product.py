"""The paired modes' channel product on the package's kernel (fftmatvec/fno/_product.py:
ModeProduct): its launch shapes and the planner's rule on the CPU; on a GPU against NumPy's
float64 product, and through the layer against cuBLAS's product."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError, backend
from fftmatvec.fno._product import CHUNK, SMEM_BUDGET, THREADS, launch_shape, supported
from fftmatvec.fno._plan import fno_chain, fno_product
from fftmatvec.fno._plan import FNO_PRODUCT_MAX_BATCH

from fno_oracle import assert_grads_close, clear_chains, cuda_case, cupy_dft_error
from fno_oracle import layer_grads, on_poisoned_side_stream

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")


def test_launch_shapes():
    """A block holds whole modes (O / 2 threads each) within THREADS threads and SMEM_BUDGET
    bytes of shared memory; the rows in the smallest tile that holds them, more tiles of the
    largest past it; every mode and row covered."""
    for M, B, C, O in [(2112, 16, 128, 128), (1, 1, 2, 2), (7, 13, 6, 10), (3, 40, 64, 512),
                       (100, 8, 32, 2), (5, 17, 130, 64)]:
        tile, mpb, grid, block, smem = launch_shape(M, B, C, O)
        assert tile == (8 if B <= 8 else 16)
        assert block[0] == mpb * (O // 2) <= THREADS and 1 <= mpb <= M
        assert smem == mpb * 2 * tile * CHUNK * 8 <= max(SMEM_BUDGET, 2 * tile * CHUNK * 8)
        assert grid[0] * mpb >= M > (grid[0] - 1) * mpb
        assert grid[1] * tile >= B > (grid[1] - 1) * tile
    assert supported(2, 2) and supported(128, 512)
    assert not supported(3, 4) and not supported(4, 5) and not supported(4, 514)


def test_product_rule(monkeypatch):
    """By default for the paired modes of float32 layers on a GPU with at most
    FNO_PRODUCT_MAX_BATCH rows and even channel counts; forced where it cannot serve, an error
    that says why; never under fno_product=0."""
    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    small = FNO_PRODUCT_MAX_BATCH
    assert fno_product(small, 64, 64, "paired", kernels=True)
    assert not fno_product(small + 1, 64, 64, "paired", kernels=True)
    assert not fno_product(small, 64, 64, "interleaved", kernels=True)
    assert not fno_product(small, 64, 64, "paired", kernels=False)
    assert not fno_product(small, 63, 64, "paired", kernels=True)
    # on the CPU the chain has no paired modes, so no kernel
    assert fno_chain(4, 8, 8, (16, 16), (4, 5), np.float32, -1, False)[4] is False
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_product=1")
    assert fno_product(small + 1, 64, 64, "paired", kernels=True)
    with pytest.raises(FFTMatvecValueError, match="fno_product=1.*split, not paired"):
        fno_product(4, 64, 64, "split", kernels=True)
    with pytest.raises(FFTMatvecValueError, match="fno_product=1.*float32 layers on a GPU"):
        fno_product(4, 64, 64, "paired", kernels=False)
    with pytest.raises(FFTMatvecValueError, match="fno_product=1.*even channel counts"):
        fno_product(4, 64, 7, "paired", kernels=True)
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_product=0")
    assert not fno_product(4, 64, 64, "paired", kernels=True)
    from fftmatvec.fno import _dft

    with pytest.raises(ValueError, match="takes the paired modes"):
        _dft.make_chain(None, (8,), (3,), -1, layout="interleaved", product=True)


# (M, B, C, O): the benchmark's products, one mode, odd counts of modes and rows, a row tile
# and a chunk of columns cut short, the widest output, the narrowest channels
PRODUCTS = [(2112, 16, 128, 128), (544, 8, 128, 128), (1, 1, 2, 2), (7, 13, 6, 10),
            (5, 17, 130, 64), (3, 40, 34, 512), (33, 16, 64, 2), (9, 3, 2, 36)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("M,B,C,O", PRODUCTS)
@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_product_matches_numpy(rng, M, B, C, O, kind):
    """``Y[m] = X[m] W[m]`` within float32 rounding of NumPy's float64 product, on every
    element of the new output; CuPy arrays and PyTorch tensors on their current stream."""
    from fftmatvec.fno._product import ModeProduct

    cp = backend.cupy

    def crand(*shape):
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)

    Xh, Wh = crand(M, B, C), crand(M, C, O)
    want = np.einsum("mbc,mco->mbo", Xh, Wh)
    product = ModeProduct(cp.cuda.Device().id)
    if kind == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device for PyTorch")
        X = torch.tensor(Xh, dtype=torch.complex64, device="cuda")
        W = torch.tensor(Wh, dtype=torch.complex64, device="cuda")
        got = on_poisoned_side_stream(lambda: product(X, W), (M, B, O), torch.complex64)
    else:
        X, W = cp.asarray(Xh, dtype=np.complex64), cp.asarray(Wh, dtype=np.complex64)
        cp.full(M * B * O, np.nan, dtype=np.complex64)  # freed: the pool hands it out again
        got = cp.asnumpy(product(X, W))
    assert got.shape == (M, B, O) and np.isfinite(got).all()
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 2e-6 * max(1.0, np.log2(C)), (M, B, C, O, err)


@gpu
@pytest.mark.gpu
def test_product_refuses_what_it_cannot_take():
    from fftmatvec.fno._product import ModeProduct

    cp = backend.cupy
    product = ModeProduct(cp.cuda.Device().id)
    X = cp.zeros((4, 3, 8), dtype=np.complex64)
    W = cp.zeros((4, 8, 6), dtype=np.complex64)
    assert product.takes(X, W)
    bad = [(X[:, :, :7], W[:, :7]), (X.astype(np.complex128), W.astype(np.complex128)),
           (X, W[:3]), (X, cp.zeros((4, 8, 5), dtype=np.complex64)),
           (X[:, :, ::2], W[:, ::2]), (X.ravel()[1:].reshape(1, 1, -1)[:, :, :8], W[:1])]
    for a, b in bad:
        assert not product.takes(a, b)
        with pytest.raises(ValueError, match="fno_modes_cgemm: expected contiguous"):
            product(a, b)


# one axis on the row kernels, two on the plane kernels: the paired modes' layers
CASES = [((3, 4, 64), 6, 17), ((16, 8, 128), 8, 33), ((5, 6, 16, 30), 4, (8, 16)),
         ((12, 4, 64, 64), 6, (16, 16)), ((2, 4, 45, 64), 2, (12, 33))]


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and backend.gpu_available()):
        pytest.skip("no CUDA device for PyTorch and CuPy")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_torch_layer_with_the_product_kernel(monkeypatch, rng, torch, shape, cout, n_modes,
                                             graphs):
    """The layer with its forward product on the kernel (plan fno_product=1) against cuBLAS's
    (fno_product=0): output and gradients within 1e-5, eagerly and replayed as graphs."""
    from fftmatvec.fno import _torch_dft

    case, (xt, wt, bt), modes = cuda_case(rng, shape, cout, n_modes)
    try:
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1,fno_product=1")
        clear_chains()
        got = layer_grads(xt, wt, bt, n_modes, graphs)
        chain = _torch_dft.chain_for(xt, torch.float32, modes, cout)
        assert chain.paired and chain.product
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1,fno_product=0")
        want = layer_grads(xt, wt, bt, n_modes, graphs)
        assert not _torch_dft.chain_for(xt, torch.float32, modes, cout).product
    finally:
        monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
        clear_chains()
    assert_grads_close(got, want, case, n_modes)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_cupy_layer_with_the_product_kernel(monkeypatch, rng, shape, cout, n_modes):
    """The CuPy float32 layer with the product on the kernel within 1e-5 of the dense float64
    reference."""
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_paired=1,fno_product=1")
    assert cupy_dft_error(rng, shape, cout, n_modes) < 1e-5
