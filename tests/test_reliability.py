"""Reliability: bad values that must raise the package's errors instead of silent wrong answers
(NaN/Inf inputs, arrays changed after construction, bad weights, outputs over inputs)."""

import numpy as np
import pytest

from fftmatvec import BlockToeplitz
from fftmatvec._errors import FFTMatvecTypeError, FFTMatvecValueError


@pytest.fixture
def op():
    rng = np.random.default_rng(1)
    return BlockToeplitz(rng.standard_normal((3, 4, 10))), rng


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_raises(op, bad):
    F, rng = op
    m = rng.standard_normal((4, 10))
    m[1, 2] = bad
    d = rng.standard_normal((3, 10))
    d[0, 9] = bad
    calls = [(F.matvec, m, "m"), (F.matmat, m[None], "M"), (F.rmatvec, d, "d"),
             (F.rmatmat, d[None], "D"), (F.normal().matvec, m, "m"), (F.T.matvec, d, "m")]
    for f, a, name in calls:
        with pytest.raises(FFTMatvecValueError, match=f"^{name} contains NaN or Inf"):
            f(a)
    # check_finite=False skips the check (the FFT spreads the NaN)
    assert np.isnan(F.matvec(m, check_finite=False)).all()


def test_long_double_overflowing_input_raises(op):
    F, rng = op
    m = rng.standard_normal((4, 10)).astype(np.longdouble)
    if np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 here")
    m[0, 0] = np.longdouble("1e400")
    with pytest.raises(FFTMatvecValueError, match="^m holds values too large"):
        F.matvec(m)


def test_normal_copies_weight(op):
    F, rng = op
    W = rng.random((3, 10)) + 0.5
    H = F.normal(W)
    m = rng.standard_normal((4, 10))
    y = H.matvec(m)
    W[0, 0] = np.nan
    assert np.array_equal(H.matvec(m), y)


def test_with_precision_refuses_changed_kernel():
    rng = np.random.default_rng(2)
    K = rng.standard_normal((3, 4, 10))
    F = BlockToeplitz(K)
    F.with_precision("sssss")  # unchanged: fine
    K[:] = 0
    for p in ("sssss", "dsddd"):
        with pytest.raises(FFTMatvecValueError, match="kernel was changed"):
            F.with_precision(p)


@pytest.mark.parametrize("w, cls", [("abc", FFTMatvecTypeError), (1j, FFTMatvecTypeError),
                                    (True, FFTMatvecTypeError), (-1.0, FFTMatvecValueError)])
def test_bad_scalar_weight(op, w, cls):
    F, _ = op
    with pytest.raises(cls, match="^weight"):
        F.normal(w)


def test_negative_array_weight(op):
    F, rng = op
    W = rng.random((3, 10))
    W[1, 1] = -1
    with pytest.raises(FFTMatvecValueError, match="^weight"):
        F.normal(W)
