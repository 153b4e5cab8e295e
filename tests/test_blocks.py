"""The stage-level building blocks (fftmatvec.blocks) composed by hand: the input's spectra in
two row chunks (pad_fft), stage 3 as four blocks of Khat accumulating into the output spectra
(stage3_block, beta 0 then 1), the inverse in two row chunks (ifft_unpad): the whole product
to rounding, forward and adjoint, against the operator's own product and the float64 dense
matrix; on NumPy and, where present, CuPy (the package's kernels)."""

from __future__ import annotations

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecTypeError, FFTMatvecValueError
from fftmatvec.blocks import ifft_unpad, pad_fft, stage3_block

from conftest import dense_btt, rel_err, to_numpy

# relative error to the dense float64 product, per precision
TOL = {"ddddd": 1e-12, "dsddd": 1e-5, "sssss": 1e-5, "ddhdd": 2e-3}


def _by_blocks(F, x, adjoint: bool):
    """The product of ``x`` ``(k, n_in, Nt)`` by the building blocks: the input rows in two
    chunks, Khat in 2 x 2 blocks, the output rows in two chunks."""
    xp = F._xp
    nd, nm = F.nd, F.nm
    rs, cs = (0, nd // 2, nd), (0, nm // 3, nm)  # sensor and parameter splits
    in_split, out_split = (rs, cs) if adjoint else (cs, rs)
    k = x.shape[0]
    xhat = [pad_fft(F, x[:, a:b]) for a, b in zip(in_split, in_split[1:])]
    cd = F.precision.complex_dtype("ifft")
    yhat = [xp.full((k, b - a, F.nf), complex(np.nan, np.nan), dtype=cd)  # poisoned
            for a, b in zip(out_split, out_split[1:])]
    for o, (o0, o1) in enumerate(zip(out_split, out_split[1:])):
        for r, (r0, r1) in enumerate(zip(in_split, in_split[1:])):
            rows, cols = ((r0, r1), (o0, o1)) if adjoint else ((o0, o1), (r0, r1))
            stage3_block(F, xhat[r], yhat[o], rows, cols, adjoint=adjoint, beta=int(r > 0))
    y = xp.concatenate([ifft_unpad(F, yh) for yh in yhat], axis=1)
    return y


@pytest.mark.parametrize("precision", ["ddddd", "dsddd", "sssss", "ddhdd"])
@pytest.mark.parametrize("adjoint", [False, True])
def test_blocks_compose_to_the_product(xp, rng, precision, adjoint):
    nd, nm, nt, k = 5, 7, 9, 3
    K = rng.standard_normal((nd, nm, nt))
    F = fm.BlockToeplitz(xp.asarray(K), precision)
    n_in = nd if adjoint else nm
    x = rng.standard_normal((k, n_in, nt))
    got = _by_blocks(F, xp.asarray(x), adjoint)
    assert got.shape == (k, nm if adjoint else nd, nt) and got.dtype == F.dtype
    whole = (F.rmatmat if adjoint else F.matmat)(xp.asarray(x))
    A = dense_btt(K)
    ref = np.stack([(A.T if adjoint else A) @ v.ravel() for v in x]).reshape(got.shape)
    assert rel_err(got, ref) < TOL[precision]
    # the whole product's rounding: the same stages on the same values
    assert rel_err(got, to_numpy(whole)) < (1e-13 if precision == "ddddd" else TOL[precision])


def test_stage3_block_accumulates_and_overwrites(xp, rng):
    """beta=0 overwrites a poisoned output; beta=1 adds the block to what is there."""
    K = rng.standard_normal((4, 6, 8))
    F = fm.BlockToeplitz(xp.asarray(K))
    x = xp.asarray(rng.standard_normal((2, 6, 8)))
    xhat = pad_fft(F, x)
    y = xp.full((2, 4, F.nf), complex(np.nan, np.nan), dtype=np.complex128)
    stage3_block(F, xhat, y, (0, 4), (0, 6))
    assert not bool(xp.isnan(y).any())
    twice = y.copy()
    stage3_block(F, xhat, twice, (0, 4), (0, 6), beta=1)
    y2 = 2 * to_numpy(y)
    assert np.linalg.norm(to_numpy(twice) - y2) <= 1e-15 * np.linalg.norm(y2)
    w = xp.asarray(rng.standard_normal((4, 8)))
    weighted = ifft_unpad(F, y.copy(), weight=w)
    assert rel_err(weighted, to_numpy(ifft_unpad(F, y.copy())) * to_numpy(w)) < 1e-15


def test_building_blocks_refuse_bad_arguments(rng):
    F = fm.BlockToeplitz(rng.standard_normal((4, 6, 8)))
    xhat = pad_fft(F, rng.standard_normal((1, 6, 8)))
    y = np.empty((1, 4, F.nf), dtype=np.complex128)
    with pytest.raises(FFTMatvecValueError, match="rows must be a non-empty range within 0..4"):
        stage3_block(F, xhat, y, (2, 2), (0, 6))
    with pytest.raises(FFTMatvecTypeError, match="cols must be a slice or a"):
        stage3_block(F, xhat, y, (0, 4), [0, 6])
    with pytest.raises(FFTMatvecValueError, match="beta must be 0 or 1, got 2"):
        stage3_block(F, xhat, y, (0, 4), (0, 6), beta=2)
    with pytest.raises(FFTMatvecValueError, match=rf"xhat must have shape \(k, 3, {F.nf}\)"):
        stage3_block(F, xhat, y, (0, 4), (0, 3))
    with pytest.raises(FFTMatvecValueError, match="yhat must be a C-contiguous complex128"):
        stage3_block(F, xhat, y.astype(np.complex64), (0, 4), (0, 6))
    with pytest.raises(FFTMatvecValueError, match=r"x must have shape \(k, n, 8\)"):
        pad_fft(F, np.zeros((1, 6, 7)))


def test_block_view_reads_khat_in_place():
    """On the kernel engine a block of Khat is stage 3 on a block of the stored array (a
    gpu.stage3.Stage3Runner of KhatStore.block), made once per block by the engine: its data
    starts at the block's first element, the strides that address Khat are the whole array's,
    and its launches are the planning function's for a product of the block's shape; the whole
    Khat is the engine's own stage 3. (Host side: an engine described on NumPy arrays.)"""
    from types import SimpleNamespace

    from fftmatvec.gpu import KernelEngine, KhatStore, Overrides, Problem, stage3_launches
    from fftmatvec.gpu.planning import DeviceInfo
    from fftmatvec.gpu.rules import rules_for
    from fftmatvec.gpu.stage3 import Stage3Runner
    from fftmatvec.precision import PrecisionConfig

    device = DeviceInfo.from_properties({"multiProcessorCount": 132,
                                         "sharedMemPerMultiprocessor": 228 * 1024,
                                         "sharedMemPerBlockOptin": 227 * 1024}, "sm_90")
    nd, nm, nt, L = 6, 10, 20, 40
    nf = L // 2 + 1
    khat = KhatStore.zeros(np, "c128", nd, nm, nf, L, np.complex128)
    prec, rules = PrecisionConfig("ddddd"), rules_for("sm_90")
    whole_khat = Stage3Runner(khat, device, rules, Overrides(), prec, nt)
    eng = SimpleNamespace(prec=prec, nd=nd, nm=nm, nt=nt, device=device, rules=rules,
                          resolved=Overrides(), khat_store=khat, stage3=whole_khat, _blocks={})
    whole = khat.strides(False), khat.strides(True)
    view = KernelEngine.block(eng, 2, 5, 3, 9)
    assert isinstance(view, Stage3Runner) and KernelEngine.block(eng, 2, 5, 3, 9) is view
    assert KernelEngine.block(eng, 0, nd, 0, nm) is whole_khat
    assert (view.nd, view.nm) == (view.khat_store.nd, view.khat_store.nm) == (3, 6)
    data = view.khat_store.data
    assert np.shares_memory(data, khat.data) and data.shape == (khat.blocks, 3, 6,
                                                                 khat.block_freqs)
    khat.data[0, 2, 3, 0] = 7.0
    assert data[0, 0, 0, 0] == 7.0  # the block's first element
    assert (view.khat_store.strides(False), view.khat_store.strides(True)) == whole
    for adjoint in (False, True):
        want = stage3_launches(Problem(3, 6, nt, L, 4, adjoint), device, eng.rules,
                               Overrides(), np.complex128, np.complex128)
        assert view.launches(adjoint, 4, np.complex128, np.complex128) == want
    with pytest.raises(ValueError, match="a block of Khat within its"):
        KernelEngine.block(eng, 4, 4, 0, 1)
