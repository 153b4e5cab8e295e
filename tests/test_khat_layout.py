"""The stored Khat's layout in blocks of frequencies, on the host (no GPU): every element that
``KhatStore.store_rows`` (the engine's) writes is where the kernels' address (``khat_foff`` in
hip_kernels/common.cuh, mirrored by ``khat_offset`` below) looks for it, in both directions."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import gpu as _gpu
from fftmatvec.gpu import KhatStore, khat_layout


def khat_offset(o, r, f, so: int, sr: int, shift: int, block_stride: int):
    """Element of Khat (output row o, reduction row r, frequency f) as the kernels address it:
    hip_kernels/common.cuh's khat_foff on top of the row strides."""
    return o * so + r * sr + (f >> shift) * block_stride + (f & ((1 << shift) - 1))


@pytest.mark.parametrize("store,nfp,expected", [
    ("c32h", 1008, (128, 8, 7)),  # (5000, 100, 1000): 8 blocks, the last one 112 used
    ("c32h", 504, (128, 4, 7)),
    ("c32h", 128, (128, 1, 62)),  # one block: the plain layout
    ("c32h", 104, (104, 1, 62)),
    ("c128", 1002, (64, 16, 6)),
    ("c128", 64, (64, 1, 62)),
    ("c64", 1004, (64, 16, 6)),
    ("c64", 104, (104, 1, 62)),  # Nf = 101: two blocks of 64 would add 23 % to Khat's memory
    ("c128", 502, (64, 8, 6)),  # 2 % more
])
def test_layout_choice(store, nfp, expected):
    assert khat_layout(store, nfp) == expected


@pytest.mark.parametrize("block", [0, 96, 2, -8])
def test_layout_rejects_bad_blocks(monkeypatch, block):
    """Blocks must be powers of two of whole 16-byte chunks (4 float16 pairs)."""
    monkeypatch.setitem(_gpu.KHAT_BLOCK, "c32h", block)
    with pytest.raises(ValueError, match="KHAT_BLOCK"):
        khat_layout("c32h", 1008)


def _engine(store: str, nd: int, nm: int, nf: int) -> KhatStore:
    """The stored Khat of an engine (KhatStore) on NumPy, L = 8."""
    eng = KhatStore.zeros(np, store, nd, nm, nf, 8,
                          np.uint32 if store == "c32h" else np.complex128)
    eng.data[...] = 0xDEADBEEF if store == "c32h" else np.nan  # poisoned before store_rows
    return eng


@pytest.mark.parametrize("store,block", [("c32h", 16), ("c32h", 128), ("c128", 4), ("c128", None)])
@pytest.mark.parametrize("nf", [5, 37, 64, 250])
def test_store_rows_meets_kernel_addresses(monkeypatch, store, block, nf):
    monkeypatch.setitem(_gpu.KHAT_BLOCK, store, block)
    monkeypatch.setattr(_gpu.khat, "KHAT_MAX_WASTE", 1.0)  # last blocks with unused frequencies too
    rng = np.random.default_rng(nf)
    nd, nm = 3, 7
    eng = _engine(store, nd, nm, nf)
    khat = rng.standard_normal((nd, nm, nf)) + 1j * rng.standard_normal((nd, nm, nf))
    eng.store_rows(0, khat[:2])  # in two calls, as the distributed setup does
    eng.store_rows(2, khat[2:])
    if store == "c32h":
        words = eng.data.reshape(-1)
        re = (words & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64)
        im = (words >> 16).astype(np.uint16).view(np.float16).astype(np.float64)
        flat = re + 1j * im
    else:
        flat = eng.data.reshape(-1)
    d, m, f = np.meshgrid(np.arange(nd), np.arange(nm), np.arange(nf), indexing="ij")
    for adjoint in (False, True):
        so, sr, shift, sb = eng.strides(adjoint)
        o, r = (m, d) if adjoint else (d, m)  # output row, reduction row
        got = flat[khat_offset(o, r, f, so, sr, shift, sb)]
        if store == "c32h":
            got = got * eng.scale[d, f]
            np.testing.assert_allclose(got, khat / 8, rtol=0, atol=2e-3 * np.abs(khat).max() / 8)
        else:
            np.testing.assert_array_equal(got, khat / 8)
    if eng.blocks > 1:  # every stored word is one of Khat's: no two frequencies collide
        offsets = khat_offset(d, m, f, *eng.strides(False))
        assert len(np.unique(offsets)) == offsets.size
    plain = eng.khat()  # (nd, nm, nfp), as a reader of the old layout expects it
    assert plain.shape == (nd, nm, eng.nfp)
    np.testing.assert_array_equal(plain[:, :, :nf],
                                  eng.data.reshape(-1)[khat_offset(d, m, f, *eng.strides(False))])
    if store != "c32h":
        np.testing.assert_array_equal(plain[:, :, :nf], khat / 8)
