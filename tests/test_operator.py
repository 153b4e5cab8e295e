"""BlockToeplitz against the float64 dense block-triangular Toeplitz matrix."""

from __future__ import annotations

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecError, FFTMatvecTypeError, FFTMatvecValueError, PrecisionConfig

from conftest import dense_btt, rel_err, to_numpy

SHAPES = [  # (Nd, Nm, Nt)
    (1, 1, 1),
    (2, 3, 1),
    (1, 4, 6),
    (5, 1, 8),
    (4, 3, 13),  # prime Nt
    (6, 2, 17),  # Nd > Nm, prime Nt
    (2, 7, 16),  # Nd < Nm
    (3, 5, 11),
    (7, 9, 30),
]

DS_STRINGS = PrecisionConfig.all_strings("ds")
H_STRINGS = [p for p in PrecisionConfig.all_strings("dsh") if p[2] == "h"]


def tol_for(precision: str) -> float:
    if "h" in precision:
        return 2e-3
    if "s" in precision:
        return 1e-5
    return 1e-12


def make(xp, rng, shape, precision="ddddd", dtype=None):
    K = rng.standard_normal(shape)
    F = fm.BlockToeplitz(xp.asarray(K), precision, dtype=dtype)
    return K, F


def random(xp, rng, *shape, dtype=np.float64):
    return xp.asarray(rng.standard_normal(shape).astype(dtype))


# ---- agreement with the dense reference -------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_adjoint_dense(xp, rng, shape):
    K, F = make(xp, rng, shape)
    nd, nm, nt = shape
    A = dense_btt(K)
    m = random(xp, rng, nm, nt)
    d = random(xp, rng, nd, nt)
    y = F.matvec(m)
    z = F.rmatvec(d)
    assert y.shape == (nd, nt) and y.dtype == np.float64
    assert z.shape == (nm, nt) and z.dtype == np.float64
    assert rel_err(y.ravel(), A @ to_numpy(m).ravel()) < 1e-12
    assert rel_err(z.ravel(), A.T @ to_numpy(d).ravel()) < 1e-12
    # flat vectors give flat outputs
    yf = F.matvec(m.ravel())
    assert yf.shape == (nd * nt,) and yf.dtype == np.float64
    assert rel_err(yf, A @ to_numpy(m).ravel()) < 1e-12
    # the matmul operator and the .T / .H operators
    assert rel_err((F @ m).ravel(), A @ to_numpy(m).ravel()) < 1e-12
    assert rel_err((F.T @ d).ravel(), A.T @ to_numpy(d).ravel()) < 1e-12
    assert rel_err((F.H @ d).ravel(), A.T @ to_numpy(d).ravel()) < 1e-12
    assert F.T.T is F and F.T.shape == (nm * nt, nd * nt)


@pytest.mark.parametrize("precision", DS_STRINGS + H_STRINGS)
def test_every_precision(xp, rng, precision):
    shape = (5, 7, 12)
    K, F = make(xp, rng, shape, precision)
    A = dense_btt(K)
    m = random(xp, rng, shape[1], shape[2])
    d = random(xp, rng, shape[0], shape[2])
    y, z = F.matvec(m), F.rmatvec(d)
    assert y.dtype == np.float64 and z.dtype == np.float64
    tol = tol_for(precision)
    assert rel_err(y.ravel(), A @ to_numpy(m).ravel()) < tol
    assert rel_err(z.ravel(), A.T @ to_numpy(d).ravel()) < tol


@pytest.mark.parametrize("precision", DS_STRINGS + H_STRINGS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adjoint_dot(xp, rng, precision, dtype):
    shape = (6, 4, 19)
    _, F = make(xp, rng, shape, precision, dtype=dtype)
    m = random(xp, rng, shape[1], shape[2], dtype=dtype)
    d = random(xp, rng, shape[0], shape[2], dtype=dtype)
    Fm, Ftd = F.matvec(m), F.rmatvec(d)
    assert Fm.dtype == dtype and Ftd.dtype == dtype
    lhs = float((to_numpy(Fm).astype(np.float64) * to_numpy(d)).sum())
    rhs = float((to_numpy(m).astype(np.float64) * to_numpy(Ftd)).sum())
    scale = np.linalg.norm(to_numpy(Fm)) * np.linalg.norm(to_numpy(d))
    tol = 1e-13 if (precision == "ddddd" and dtype == np.float64) else (5e-3 if "h" in precision else 1e-5)
    assert abs(lhs - rhs) / scale < tol


@pytest.mark.parametrize("precision", ["ddddd", "sssss", "ddhdd"])
@pytest.mark.parametrize("k", [1, 3, 17])
def test_batches_match_columns(xp, rng, precision, k):
    shape = (4, 6, 9)
    _, F = make(xp, rng, shape, precision)
    M = random(xp, rng, k, shape[1], shape[2])
    D = random(xp, rng, k, shape[0], shape[2])
    Y, Z = F.matmat(M), F.rmatmat(D)
    assert Y.shape == (k, shape[0], shape[2]) and Y.dtype == np.float64
    assert Z.shape == (k, shape[1], shape[2]) and Z.dtype == np.float64
    tol = 1e-13 if precision == "ddddd" else 1e-6
    for b in range(k):
        assert rel_err(Y[b], to_numpy(F.matvec(M[b]))) < tol
        assert rel_err(Z[b], to_numpy(F.rmatvec(D[b]))) < tol
    assert rel_err(F @ M, to_numpy(Y)) == 0.0


@pytest.mark.parametrize("weight_kind", ["none", "scalar", "array"])
@pytest.mark.parametrize("precision", ["ddddd", "sssss"])
def test_normal_operator(xp, rng, weight_kind, precision):
    shape = (3, 5, 10)
    _, F = make(xp, rng, shape, precision)
    w = {"none": None, "scalar": 2.5, "array": xp.asarray(rng.uniform(0.5, 2.0, (shape[0], shape[2])))}[weight_kind]
    N = F.normal(w)
    assert N.shape == (shape[1] * shape[2],) * 2
    m = random(xp, rng, shape[1], shape[2])
    Fm = F @ m
    Wd = Fm if w is None else Fm * w
    ref = F.T @ Wd
    out = N @ m
    assert out.dtype == np.float64 and out.shape == m.shape
    assert rel_err(out, to_numpy(ref)) < (1e-13 if precision == "ddddd" else 1e-6)
    M = random(xp, rng, 2, shape[1], shape[2])
    assert rel_err(N.matmat(M)[1], to_numpy(N @ M[1])) < (1e-12 if precision == "ddddd" else 1e-6)


def test_float32_interface(xp, rng):
    K, F = make(xp, rng, (3, 4, 9), "sssss", dtype=np.float32)
    assert F.dtype == np.float32
    m = random(xp, rng, 4, 9, dtype=np.float32)
    y = F @ m
    assert y.dtype == np.float32
    assert rel_err(y.ravel(), dense_btt(K) @ to_numpy(m).ravel().astype(np.float64)) < 1e-5
    # a float64 input to a float32 operator is cast by stage 1, and the output stays float32
    assert (F @ m.astype(np.float64)).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_half_precision_input_is_cast(xp, rng, dtype):
    """A float16 input is taken in the operator's dtype (the stages read float32 or float64)."""
    K, F = make(xp, rng, (3, 4, 9), "ddddd", dtype=dtype)
    m = random(xp, rng, 2, 4, 9, dtype=np.float16)
    d = random(xp, rng, 3, 9, dtype=np.float16)
    Y, z = F.matmat(m), F.rmatvec(d)
    assert Y.dtype == dtype and z.dtype == dtype
    A = dense_btt(K)
    tol = 1e-12 if dtype == np.float64 else 1e-6
    assert rel_err(Y[1].ravel(), A @ to_numpy(m[1]).astype(np.float64).ravel()) < tol
    assert rel_err(z.ravel(), A.T @ to_numpy(d).astype(np.float64).ravel()) < tol


def test_linear_operator_cg(xp, rng):
    shape = (6, 3, 8)
    K, F = make(xp, rng, shape)
    A = dense_btt(K)
    N = F.normal(1.0)
    L = N.aslinearoperator()
    lam = 0.1
    if xp is np:
        from scipy.sparse.linalg import LinearOperator, cg
    else:
        from cupyx.scipy.sparse.linalg import LinearOperator, cg
    n = shape[1] * shape[2]
    H = LinearOperator((n, n), matvec=lambda v: L @ v + lam * v, dtype=np.float64)
    b = random(xp, rng, n)
    x, info = cg(H, b, rtol=1e-12, maxiter=500)
    assert info == 0
    ref = np.linalg.solve(A.T @ A + lam * np.eye(n), to_numpy(b))
    assert rel_err(x, ref) < 1e-8
    FL = F.aslinearoperator()
    assert FL.shape == F.shape and FL.dtype == np.float64
    v = random(xp, rng, F.shape[1])
    assert rel_err(FL.matvec(v), A @ to_numpy(v)) < 1e-12
    u = random(xp, rng, F.shape[0])
    assert rel_err(FL.rmatvec(u), A.T @ to_numpy(u)) < 1e-12
    V = random(xp, rng, F.shape[1], 3)
    assert rel_err(FL.matmat(V), A @ to_numpy(V)) < 1e-12


def test_with_precision_shares(xp, rng):
    K, F = make(xp, rng, (3, 4, 10), "ddddd")
    G = F.with_precision("dsdsd")
    assert G._engine is F._engine  # same stage-3 letter: Khat shared, not recomputed
    H = F.with_precision("sssss")
    assert H._engine is not F._engine
    assert H.khat_nbytes * 2 == F.khat_nbytes
    m = random(xp, rng, 4, 10)
    assert rel_err(G @ m, to_numpy(F @ m)) < 1e-5


def test_fft_length_and_storage(xp, rng):
    assert fm.fft_length(1) == 1
    assert fm.fft_length(1000) == 2000
    assert fm.fft_length(7) == 15  # not 2*Nt = 14 blindly, nor a power of two
    assert fm.fft_length(100) == 200
    for nt in range(1, 200):
        L = fm.fft_length(nt)
        assert L >= 2 * nt - 1
        f = L
        for p in (2, 3, 5):
            while f % p == 0:
                f //= p
        assert f == 1
    _, F = make(xp, rng, (3, 4, 10), "ddddd")
    assert F.fft_len == 20 and F.nf == 11
    assert F.khat_nbytes == 11 * 3 * 4 * 16  # stored once, complex128
    _, S = make(xp, rng, (3, 4, 10), "ddsdd")
    assert S.khat_nbytes == 11 * 3 * 4 * 8  # stored once, complex64
    _, Hh = make(xp, rng, (3, 4, 10), "ddhdd")
    assert Hh.khat_nbytes == 11 * 3 * 4 * 4 + 11 * 3 * 4  # float16 pairs + a float32 scale per row


@pytest.mark.parametrize("precision", ["ddddd", "ddhdd"])
def test_longer_fft_length(xp, rng, precision):
    """Any FFT length of at least 2*Nt - 1 gives the same product (more frequencies stored);
    a shorter one, or one that is not an integer, is refused by name."""
    shape = (3, 4, 10)
    K, F = make(xp, rng, shape, precision)
    G = fm.BlockToeplitz(xp.asarray(K), precision, fft_len=32)
    assert (G.fft_len, G.nf) == (32, 17) and G.khat_nbytes > F.khat_nbytes
    assert G.with_precision("ddddd").fft_len == 32
    A = dense_btt(K)
    m, d = random(xp, rng, shape[1], shape[2]), random(xp, rng, shape[0], shape[2])
    tol = 1e-12 if precision == "ddddd" else 2e-3
    assert rel_err(G.matvec(m).ravel(), A @ to_numpy(m).ravel()) < tol
    assert rel_err(G.rmatvec(d).ravel(), A.T @ to_numpy(d).ravel()) < tol
    assert fm.BlockToeplitz(xp.asarray(K), precision, fft_len=19).fft_len == 19
    with pytest.raises(FFTMatvecValueError, match=r"fft_len must be at least 2\*Nt - 1 = 19, got 18"):
        fm.BlockToeplitz(xp.asarray(K), precision, fft_len=18)
    with pytest.raises(FFTMatvecTypeError, match="fft_len must be an integer, got float"):
        fm.BlockToeplitz(xp.asarray(K), precision, fft_len=32.0)


def test_half_never_overflows(xp, rng):
    """Kernels with entries far beyond float16's range are scaled, not saturated."""
    K = rng.standard_normal((3, 5, 12)) * 1e9
    K[1] *= 1e-12  # and rows of very different magnitudes
    F = fm.BlockToeplitz(xp.asarray(K), "ddhdd")
    m = random(xp, rng, 5, 12)
    A = dense_btt(K)
    y = to_numpy(F @ m).ravel()
    assert np.all(np.isfinite(y))
    assert rel_err(y, A @ to_numpy(m).ravel()) < 2e-3
    ref = (A @ to_numpy(m).ravel()).reshape(3, 12)
    assert rel_err(y.reshape(3, 12)[1], ref[1]) < 2e-3  # the small row keeps its accuracy


def test_attributes(xp, rng):
    _, F = make(xp, rng, (3, 4, 10), "DsSdD")
    assert (F.nd, F.nm, F.nt) == (3, 4, 10)
    assert F.shape == (30, 40)
    assert str(F.precision) == "dssdd"
    assert F.dtype == np.float64
    assert F.xp is xp


# ---- bad input --------------------------------------------------------------------------
def test_precision_config_errors():
    assert PrecisionConfig("DSSDD").letters == "dssdd"
    assert PrecisionConfig("ddhdd").half
    with pytest.raises(FFTMatvecValueError, match="exactly 5 letters"):
        PrecisionConfig("dddd")
    with pytest.raises(FFTMatvecValueError, match="letter 2 .*fft.*'x'"):
        PrecisionConfig("dxddd")
    with pytest.raises(FFTMatvecValueError, match="letter 1"):
        PrecisionConfig("hdddd")
    with pytest.raises(FFTMatvecTypeError):
        PrecisionConfig(5)
    assert len(DS_STRINGS) == 32 and len(set(DS_STRINGS)) == 32


def test_bad_kernels(xp, rng):
    with pytest.raises(FFTMatvecValueError, match="3-D"):
        fm.BlockToeplitz(xp.ones((3, 4)))
    with pytest.raises(FFTMatvecValueError, match="empty"):
        fm.BlockToeplitz(xp.ones((3, 0, 4)))
    with pytest.raises(FFTMatvecTypeError, match="complex"):
        fm.BlockToeplitz(xp.ones((2, 3, 4), dtype=np.complex128))
    with pytest.raises(FFTMatvecTypeError, match="int"):
        fm.BlockToeplitz(xp.ones((2, 3, 4), dtype=np.int64))
    K = rng.standard_normal((2, 3, 4))
    K[1, 2, 3] = np.nan
    with pytest.raises(FFTMatvecValueError, match="NaN"):
        fm.BlockToeplitz(xp.asarray(K))
    K[1, 2, 3] = np.inf
    with pytest.raises(FFTMatvecValueError, match="Inf"):
        fm.BlockToeplitz(xp.asarray(K))
    with pytest.raises(FFTMatvecTypeError, match="numpy.ndarray or cupy.ndarray"):
        fm.BlockToeplitz([[[1.0]]])
    with pytest.raises(FFTMatvecValueError, match="letter 3"):
        fm.BlockToeplitz(xp.ones((2, 3, 4)), "ddxdd")
    with pytest.raises(FFTMatvecTypeError, match="dtype"):
        fm.BlockToeplitz(xp.ones((2, 3, 4)), dtype=np.float16)


def test_bad_vectors(xp, rng):
    _, F = make(xp, rng, (3, 4, 5))
    with pytest.raises(FFTMatvecValueError, match=r"m must have shape \(4, 5\) or \(20,\), got \(5, 4\)"):
        F.matvec(xp.ones((5, 4)))
    with pytest.raises(FFTMatvecValueError, match=r"d must have shape \(3, 5\)"):
        F.rmatvec(xp.ones((4, 5)))
    with pytest.raises(FFTMatvecValueError, match=r"\(k, 4, 5\)"):
        F.matmat(xp.ones((4, 5)))
    with pytest.raises(FFTMatvecValueError, match="at least one"):
        F.matmat(xp.ones((0, 4, 5)))
    with pytest.raises(FFTMatvecValueError):
        F.matvec(xp.ones((1, 4, 5))[0, :, :4])  # no silent broadcast or truncation
    with pytest.raises(FFTMatvecTypeError, match="complex"):
        F.matvec(xp.ones((4, 5), dtype=np.complex128))
    with pytest.raises(FFTMatvecTypeError, match="int"):
        F.matvec(xp.ones((4, 5), dtype=np.int32))
    with pytest.raises(FFTMatvecValueError, match="weight"):
        F.normal(xp.ones((4, 5)))
    with pytest.raises(FFTMatvecValueError, match="finite"):
        F.normal(float("nan"))
    # every error is catchable as the package error, and as the builtin kind
    with pytest.raises(FFTMatvecError):
        F.matvec(xp.ones(7))
    with pytest.raises(ValueError):
        F.matvec(xp.ones(7))


@pytest.mark.gpu
def test_device_mismatch(rng):
    from fftmatvec import backend

    if not backend.gpu_available():
        pytest.skip("no GPU")
    cp = backend.cupy
    K = rng.standard_normal((2, 3, 4))
    Fc = fm.BlockToeplitz(cp.asarray(K))
    Fn = fm.BlockToeplitz(K)
    with pytest.raises(FFTMatvecTypeError, match="NumPy .* operator lives on CuPy"):
        Fc.matvec(np.ones((3, 4)))
    with pytest.raises(FFTMatvecTypeError, match="CuPy .* operator lives on NumPy"):
        Fn.matvec(cp.ones((3, 4)))
    with pytest.raises(FFTMatvecTypeError, match="weight"):
        Fc.normal(np.ones((2, 4)))


def test_release_buffers(xp, rng):
    """release_buffers frees what products hold (nothing on the CPU) and products go on."""
    K, F = make(xp, rng, (3, 4, 9))
    m = random(xp, rng, 4, 9)
    y = F.matvec(m)
    F.release_buffers()
    assert rel_err(F.matvec(m), to_numpy(y)) == 0.0
