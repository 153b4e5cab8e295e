"""The PyLops MDC baseline of scripts/bench_matvec.py computes the same product, on NumPy."""

import numpy as np
import pytest
from conftest import load_script

import fftmatvec as fm

pytest.importorskip("pylops")


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 6, 8), (5, 2, 3)])
def test_pylops_mdc_matches_block_toeplitz(shape):
    bench = load_script("bench_matvec")
    rng = np.random.default_rng()
    nd, nm, nt = shape
    K = rng.standard_normal((nd, nm, nt))
    F = fm.BlockToeplitz(K, "ddddd")
    M = bench.PylopsMDC(np, K, nt, F.fft_len, np.complex128)
    m = rng.standard_normal((nm, nt))
    d = rng.standard_normal((nd, nt))
    for got, ref in ((M.matvec(m), F.matvec(m)), (M.rmatvec(d), F.rmatvec(d))):
        assert got.dtype == np.float64
        assert np.linalg.norm(got - ref) <= 1e-13 * np.linalg.norm(ref)
