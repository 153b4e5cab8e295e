"""The operator's guard, input checks, adapters, scalars, pickling and warnings (issue 72)."""

from __future__ import annotations

import copy
import inspect
import pickle
import threading
import time
import warnings

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecTypeError, FFTMatvecValueError
from fftmatvec.tuning import select

from conftest import dense_btt, rel_err, to_numpy

SHAPE = (4, 3, 10)  # (Nd, Nm, Nt)


def random(xp, rng, *shape, dtype=np.float64):
    return xp.asarray(rng.standard_normal(shape).astype(dtype))


def kernel(xp, rng, shape=SHAPE):
    K = rng.standard_normal(shape)
    return K, xp.asarray(K)


# ---- the check_every guard sees every product -------------------------------------------
@pytest.mark.parametrize("weight", [None, 2.5], ids=["unweighted", "weighted"])
def test_guard_sees_normal_products(xp, rng, weight):
    """``ddhdd`` is far from ``rtol`` (1e-6 by default): the first checked product of the
    normal operator moves the operator to ``ddddd`` and returns the reference."""
    K, Kx = kernel(xp, rng)
    F = fm.BlockToeplitz(Kx, "ddhdd", check_every=1)
    N = F.normal(weight)
    m = random(xp, rng, SHAPE[1], SHAPE[2])
    A = dense_btt(K)
    w = 1.0 if weight is None else weight
    ref = A.T @ (w * (A @ to_numpy(m).ravel()))
    with pytest.warns(UserWarning, match="moving to 'ddddd'"):
        y = N @ m
    assert y.dtype == np.float64 and y.shape == m.shape
    assert F.precision.letters == "ddddd" and "guard" in F.precision_source
    assert rel_err(y.ravel(), ref) < 1e-12
    # the batched and adjoint forms of the normal operator are checked too
    G = fm.BlockToeplitz(Kx, "ddhdd", check_every=1)
    M = random(xp, rng, 2, SHAPE[1], SHAPE[2])
    with pytest.warns(UserWarning, match="moving to 'ddddd'"):
        Y = G.normal(weight).T.matmat(M)
    refs = [A.T @ (w * (A @ to_numpy(M[b]).ravel())) for b in range(2)]
    assert max(rel_err(Y[b].ravel(), refs[b]) for b in range(2)) < 1e-12


def test_guard_counts_a_normal_product_once(xp, rng):
    """With ``check_every=2`` the second normal product is checked, not the first one's
    adjoint half."""
    _, Kx = kernel(xp, rng)
    F = fm.BlockToeplitz(Kx, "ddhdd", check_every=2)
    N = F.normal()
    m = random(xp, rng, SHAPE[1], SHAPE[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        N @ m
    assert F.precision.letters == "ddhdd"
    with pytest.warns(UserWarning, match="moving to 'ddddd'"):
        N @ m
    assert F.precision.letters == "ddddd"


# ---- the guard under threads --------------------------------------------------------------
def _products_in_threads(op, vectors):
    """Every vector's product with ``op``, the vectors split over 8 threads that start
    together."""
    out = [None] * len(vectors)
    errors = []
    start = threading.Barrier(8)

    def work(t):
        try:
            start.wait()
            for i in range(t, len(vectors), 8):
                out[i] = op @ vectors[i]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a product never returned"
    assert not errors, errors
    return out


@pytest.mark.parametrize("which", ["forward", "adjoint", "normal"])
def test_guard_threads_get_checked_results(xp, rng, which):
    """8 threads share one operator with ``check_every=1``: all 64 results are within the
    reference's accuracy (a product of ``ddhdd`` is 1e-4 off), and it switches once."""
    shape = (40, 30, 64)
    K, Kx = kernel(xp, rng, shape)
    A = dense_btt(K)
    F = fm.BlockToeplitz(Kx, "ddhdd", check_every=1)
    op, n, Aop = {"forward": (F, shape[1], A), "adjoint": (F.T, shape[0], A.T),
                  "normal": (F.normal(2.0), shape[1], 2.0 * A.T @ A)}[which]
    vectors = [random(xp, rng, n, shape[2]) for _ in range(64)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _products_in_threads(op, vectors)
    assert sum("moving to" in str(w.message) for w in caught) == 1
    assert F.precision.letters == "ddddd"
    errs = [rel_err(y.ravel(), Aop @ to_numpy(v).ravel()) for y, v in zip(out, vectors)]
    assert max(errs) < 1e-12, sorted(errs)[-4:]


def test_guard_result_never_from_an_unchecked_precision(monkeypatch, rng):
    """A product computed in ``ddhdd`` while another thread switches the operator to ``ddddd``
    is still checked against the precision it ran in (it used to pass unchecked, since the
    operator's precision was ``ddddd`` by the time of its check)."""
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K, "ddhdd", check_every=1)
    A = dense_btt(K)
    apply = fm.BlockToeplitz._apply
    first = threading.Event()

    def slow_apply(op, x, adjoint, *args, **kwargs):
        y = apply(op, x, adjoint, *args, **kwargs)
        if threading.current_thread().name == "slow" and not first.is_set():
            first.set()  # computed in ddhdd; wait (at most 1 s) for the other thread's switch
            deadline = time.monotonic() + 1.0
            while F.precision.letters == "ddhdd" and time.monotonic() < deadline:
                time.sleep(0.01)
        return y

    monkeypatch.setattr(fm.BlockToeplitz, "_apply", slow_apply)
    m1, m2 = random(np, rng, 3, 10), random(np, rng, 3, 10)
    got = {}

    def slow():
        got["slow"] = F @ m1

    th = threading.Thread(target=slow, name="slow")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        th.start()
        assert first.wait(10)
        got["fast"] = F @ m2
        th.join(30)
    assert not th.is_alive()
    assert F.precision.letters == "ddddd"
    assert rel_err(got["slow"].ravel(), A @ m1.ravel()) < 1e-12
    assert rel_err(got["fast"].ravel(), A @ m2.ravel()) < 1e-12


def test_guard_switches_where_warnings_are_errors(rng):
    """A warning filter that turns the guard's warning into an error still leaves the
    operator in the precision it moved to."""
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K, "ddhdd", check_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="moving to 'ddddd'"):
            F @ random(np, rng, 3, 10)
    assert F.precision.letters == "ddddd"


def test_guard_error_does_not_overflow(rng):
    """Outputs near 1e305 are checked without overflow: the error of ``sssss`` (1e-7) is
    within ``rtol``, so the guard keeps it (a norm that overflowed gave NaN, and a switch)."""
    K = rng.standard_normal((2, 2, 200)) * 1e-3
    m = 3e306 * rng.standard_normal((2, 200))
    ref = dense_btt(K) @ m.ravel()
    F = fm.BlockToeplitz(K, "sssss", check_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with np.errstate(over="ignore", invalid="ignore"):
            y = F @ m
    assert F.precision.letters == "sssss"
    assert rel_err(y.ravel() / 1e300, ref / 1e300) < 1e-6


def test_guard_keeps_a_finite_result_over_a_non_finite_reference(rng):
    """A reference that is not finite (``ddddd`` on inputs near float64's largest, where its
    FFT may overflow) neither replaces a finite result nor switches the operator to it."""
    K = rng.uniform(0.5, 1.0, (2, 2, 200)) * 1e-3
    m = 3e306 * rng.uniform(0.5, 1.0, (2, 200))
    ref = dense_btt(K) @ m.ravel()
    assert np.isfinite(ref).all()
    F = fm.BlockToeplitz(K, "sssss", check_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with np.errstate(over="ignore", invalid="ignore"):
            y = F @ m
    assert F.precision.letters == "sssss" and np.isfinite(y).all()
    assert rel_err(y.ravel() / 1e300, ref / 1e300) < 1e-6


# ---- masked vectors ----------------------------------------------------------------------
def test_masked_vectors_refused(rng):
    """A masked array's NaN under its mask passed the NaN check and gave all-NaN outputs."""
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K)
    m = rng.standard_normal((3, 10))
    m[1, 4] = np.nan
    mm = np.ma.array(m, mask=np.isnan(m))
    d = np.ma.array(rng.standard_normal((4, 10)), mask=False)
    calls = [lambda: F @ mm, lambda: F.matvec(mm.ravel()), lambda: F.rmatvec(d),
             lambda: F.matmat(mm[None]), lambda: F.T @ d, lambda: F.normal() @ mm,
             lambda: F.aslinearoperator().matvec(mm.ravel()),
             lambda: F.normal(np.ma.array(np.ones((4, 10)), mask=False))]
    for call in calls:
        with pytest.raises(FFTMatvecTypeError, match="masked array"):
            call()


# ---- adapters run the checks of F @ x ----------------------------------------------------
@pytest.mark.parametrize("which", ["F", "F.T", "normal"])
def test_linear_operator_checks_inputs(xp, rng, which):
    K, Kx = kernel(xp, rng)
    F = fm.BlockToeplitz(Kx)
    op = {"F": F, "F.T": F.T, "normal": F.normal(2.0)}[which]
    A = op.aslinearoperator()
    n_out, n_in = op.shape
    x = random(xp, rng, n_in)
    u = random(xp, rng, n_out)
    # complex input is refused, not reduced to its real part
    with pytest.raises(FFTMatvecTypeError, match="complex"):
        A @ (x + 1j)
    with pytest.raises(FFTMatvecTypeError, match="complex"):
        A.rmatvec(u + 1j)
    with pytest.raises(FFTMatvecTypeError, match="complex"):
        A.matmat(xp.stack([x, x], axis=1) * (1 + 1j))
    with pytest.raises(FFTMatvecTypeError, match="int"):
        A.matvec(xp.ones(n_in, dtype=np.int64))
    for bad in (np.nan, np.inf):
        v = x.copy()
        v[3] = bad
        with pytest.raises(FFTMatvecValueError, match="NaN or Inf"):
            A.matvec(v)
        with pytest.raises(FFTMatvecValueError, match="NaN or Inf"):
            A.matmat(xp.stack([x, v], axis=1))
        w = u.copy()
        w[0] = bad
        with pytest.raises(FFTMatvecValueError, match="NaN or Inf"):
            A.rmatvec(w)
    with pytest.raises(ValueError):
        A.matvec(random(xp, rng, n_in + 1))
    # and the products are those of op
    assert_same(A.matvec(x), (op @ x).ravel(), "ddddd")
    assert_same(A.rmatvec(u), (op.T @ u).ravel(), "ddddd")
    X = random(xp, rng, n_in, 3)
    Y = A.matmat(X)
    assert Y.shape == (n_out, 3) and Y.dtype == np.float64
    for b in range(3):  # a batched product: rounded as the batch is, not as one vector
        assert rel_err(Y[:, b], to_numpy(op @ X[:, b])) < 1e-14
    # a float32 input is taken as F @ x takes it: the output is in the operator's dtype
    y32 = A.matvec(x.astype(np.float32))
    assert y32.dtype == np.float64
    assert rel_err(y32, to_numpy(op @ x.astype(np.float32))) == 0.0


# ---- scalars: Python, NumPy, 0-d arrays ------------------------------------------------
@pytest.mark.parametrize("w", [np.array(2.0), np.float32(2.0), np.int64(2), np.array(2),
                               np.float64(2.0)], ids=repr)
def test_normal_weight_numpy_scalars(xp, rng, w):
    _, Kx = kernel(xp, rng)
    F = fm.BlockToeplitz(Kx)
    m = random(xp, rng, 3, 10)
    y = F.normal(w) @ m
    assert y.dtype == np.float64
    assert rel_err(y, to_numpy(F.normal(2.0) @ m)) == 0.0


@pytest.mark.parametrize("w", [True, np.bool_(True), np.array(True), "2", b"2", 2j,
                               np.complex128(2)], ids=repr)
def test_normal_weight_bad_scalars(rng, w):
    F = fm.BlockToeplitz(rng.standard_normal(SHAPE))
    with pytest.raises(FFTMatvecTypeError, match="weight must be a real number"):
        F.normal(w)


@pytest.fixture
def no_tables(tmp_path, monkeypatch):
    """``precision="auto"`` on the a-priori model, quietly (no table in the user's cache)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "tables").mkdir()
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path / "tables"))
    monkeypatch.setattr(select, "_warned", set())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="no tuning table")
        yield


@pytest.mark.parametrize("rtol", [np.int64(1), np.array(1), np.float32(1.0), np.array(1.0),
                                  np.float64(1.0)], ids=repr)
def test_rtol_numpy_scalars(rng, no_tables, rtol):
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K, "auto", rtol=rtol)
    G = fm.BlockToeplitz(K, "auto", rtol=1)
    assert F.precision == G.precision and F.rtol == 1.0 and type(F.rtol) is float


@pytest.mark.parametrize("rtol", [True, np.bool_(True), np.array(False), "1e-5", 1e-5j],
                         ids=repr)
def test_rtol_bad_scalars(rng, no_tables, rtol):
    with pytest.raises(FFTMatvecTypeError, match="rtol must be a"):
        fm.BlockToeplitz(rng.standard_normal(SHAPE), "auto", rtol=rtol)


def test_integer_arguments_numpy_scalars(rng):
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K, "ddhdd", check_every=np.array(3), fft_len=np.array(24))
    assert F.fft_len == 24 and F._guard.every == 3
    assert F.plan(np.array(2)).k == 2 and F.plan(np.int32(3)).k == 3
    for bad in (True, np.array(True), 3.0, np.array(3.0), "3"):
        with pytest.raises(FFTMatvecTypeError, match="check_every must be an integer"):
            fm.BlockToeplitz(K, check_every=bad)
        with pytest.raises(FFTMatvecTypeError, match="fft_len must be an integer"):
            fm.BlockToeplitz(K, fft_len=bad)
    with pytest.raises(FFTMatvecValueError, match="check_every must be positive"):
        fm.BlockToeplitz(K, check_every=np.int64(0))


# ---- pickle and deepcopy -----------------------------------------------------------------
def _copies(op):
    """``op`` through pickle (each protocol from 2) and through ``copy.deepcopy``."""
    out = [pickle.loads(pickle.dumps(op, protocol=p))
           for p in range(2, pickle.HIGHEST_PROTOCOL + 1)]
    return out + [copy.deepcopy(op)]


def assert_same(a, b, precision):
    """Equal on the CPU; on a GPU within the precision's rounding (a first product and a
    later one of the same operator may take different kernels there)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert rel_err(a, to_numpy(b)) < (1e-13 if precision == "ddddd" else 1e-5)


@pytest.mark.parametrize("precision", ["ddddd", "sssss", "ddhdd", "dsdsd"])
def test_pickle_and_deepcopy(xp, rng, precision):
    K, Kx = kernel(xp, rng)
    F = fm.BlockToeplitz(Kx, precision, dtype=np.float32 if precision == "sssss" else None,
                         fft_len=24)
    w = xp.asarray(rng.uniform(0.5, 2.0, (SHAPE[0], SHAPE[2])))
    m = random(xp, rng, 3, 10)
    d = random(xp, rng, 4, 10)
    M = random(xp, rng, 2, 3, 10)
    for G in _copies(F):
        assert type(G) is fm.BlockToeplitz and G is not F
        assert (G.precision, G.dtype, G.fft_len, G.shape, G.xp) == (
            F.precision, F.dtype, F.fft_len, F.shape, F.xp)
        assert G.kernel_exponent == F.kernel_exponent
        assert G._kernel is not F._kernel
        np.testing.assert_array_equal(to_numpy(G._kernel), K)
        if xp is not np:
            assert G._device.id == F._device.id
        for a, b in ((G @ m, F @ m), (G.T @ d, F.T @ d), (G.matmat(M), F.matmat(M))):
            assert_same(a, b, precision)
    for T in _copies(F.T):
        assert type(T) is type(F.T) and T.shape == F.T.shape
        assert_same(T @ d, F.T @ d, precision)
        assert_same(T.T @ m, F @ m, precision)
    for weight in (None, 2.5, w):
        N = F.normal(weight)
        for C in _copies(N):
            assert type(C) is fm.NormalOperator and C._op is not F
            assert_same(C @ m, N @ m, precision)


def test_pickle_keeps_sharing_and_settings(rng, no_tables):
    """One pickle of an operator and of its adjoint and normal operator keeps them on one
    operator; ``auto``'s choice, ``rtol``, the guard and the plan overrides come back."""
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K, "auto", rtol=1e-3, check_every=2, plan={"row_fft": 0})
    F2, T2, N2 = pickle.loads(pickle.dumps((F, F.T, F.normal(2.0))))
    assert T2.T is F2 and N2._op is F2
    for attr in ("precision", "precision_source", "rtol", "_front", "plan_overrides"):
        assert getattr(F2, attr) == getattr(F, attr), attr
    assert F2._guard.every == 2 and F2._guard.op is F2
    # a guard that has moved on pickles in the precision it moved to
    G = fm.BlockToeplitz(K, "ddhdd", check_every=1)
    with pytest.warns(UserWarning, match="moving to"):
        G @ random(np, rng, 3, 10)
    G2 = pickle.loads(pickle.dumps(G))
    assert G2.precision.letters == "ddddd" and G2.precision_source == G.precision_source


def test_pickle_refuses_a_changed_kernel(rng):
    """The operator rebuilds from its kernel: one changed after construction would give
    another operator."""
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K)
    K[0, 0, 0] += 1.0
    with pytest.raises(FFTMatvecValueError, match="kernel was changed"):
        pickle.dumps(F)
    with pytest.raises(FFTMatvecValueError, match="kernel was changed"):
        copy.deepcopy(F.normal())


def _apply_in_worker(op, x):
    """A worker process's product (module level, so that the pool can pickle it)."""
    return op @ x


@pytest.mark.slow
def test_operators_cross_processes(rng):
    """multiprocessing sends ``F``, ``F.T`` and ``F.normal(w)`` to a fresh interpreter
    (spawn), whose products equal this process's."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz(K, "dssdd")
    m, d = random(np, rng, 3, 10), random(np, rng, 4, 10)
    jobs = [(F, m), (F.T, d), (F.normal(rng.uniform(0.5, 2.0, (4, 10))), m)]
    # the worker starts with this process's sys.path (spawn): the package and this module
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = list(pool.map(_apply_in_worker, *zip(*jobs)))
    for (op, x), y in zip(jobs, got):
        np.testing.assert_array_equal(y, op @ x)


@pytest.mark.gpu
def test_gpu_copies_choose_their_device(rng):
    """A deep copy stays on its operator's GPU; an unpickled operator lands on the current
    GPU, as an unpickled CuPy array does."""
    from fftmatvec import backend

    if not backend.gpu_available() or backend.cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs")
    cp = backend.cupy
    K = rng.standard_normal(SHAPE)
    with cp.cuda.Device(1):
        F = fm.BlockToeplitz(cp.asarray(K), "dssdd")
        m = cp.asarray(rng.standard_normal((3, 10)))
        y = F @ m
    with cp.cuda.Device(0):
        C = copy.deepcopy(F)
        P = pickle.loads(pickle.dumps(F))
    assert C._device.id == 1 and P._device.id == 0
    with cp.cuda.Device(1):
        assert rel_err(C @ m, to_numpy(y)) < 1e-6
    assert rel_err(P @ cp.asarray(to_numpy(m)), to_numpy(y)) < 1e-6


# ---- warnings point at the caller's line --------------------------------------------------
def _guarded(rng):
    K = rng.standard_normal(SHAPE)
    return fm.BlockToeplitz(K, "ddhdd", check_every=1)


CALLS = {  # the public products, each on a guarded operator
    "F @ m": lambda F, A, m, d, M, D: F @ m,
    "F.matvec(flat)": lambda F, A, m, d, M, D: F.matvec(m.ravel()),
    "F.matmat(M)": lambda F, A, m, d, M, D: F.matmat(M),
    "F.T @ d": lambda F, A, m, d, M, D: F.T @ d,
    "F.rmatmat(D)": lambda F, A, m, d, M, D: F.rmatmat(D),
    "F.normal() @ m": lambda F, A, m, d, M, D: F.normal() @ m,
    "F.normal(2.0).T.matmat(M)": lambda F, A, m, d, M, D: F.normal(2.0).T.matmat(M),
    "A.matvec(flat)": lambda F, A, m, d, M, D: A.matvec(m.ravel()),
    "A @ flat": lambda F, A, m, d, M, D: A @ m.ravel(),
    "A.rmatvec(flat)": lambda F, A, m, d, M, D: A.rmatvec(d.ravel()),
    "A.matmat(block)": lambda F, A, m, d, M, D: A.matmat(M.reshape(2, -1).T),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_guard_warning_points_at_the_caller(rng, call):
    F = _guarded(rng)
    m, d = random(np, rng, 3, 10), random(np, rng, 4, 10)
    M, D = random(np, rng, 2, 3, 10), random(np, rng, 2, 4, 10)
    with pytest.warns(UserWarning, match="moving to") as caught:
        CALLS[call](F, F.aslinearoperator(), m, d, M, D)
    assert [w.filename for w in caught] == [__file__], [(w.filename, w.lineno) for w in caught]


def test_guard_warning_through_a_scipy_solver(rng):
    """Through SciPy's ``cg`` on the adapter the warning points at the call of ``cg``."""
    from scipy.sparse.linalg import cg

    N = _guarded(rng).normal(1.0).aslinearoperator()
    b = random(np, rng, 30)
    with pytest.warns(UserWarning, match="moving to") as caught:
        line = inspect.currentframe().f_lineno + 1
        cg(N, b, maxiter=3)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_guard_warning_from_threads_points_at_their_code(rng):
    F = _guarded(rng)
    m = random(np, rng, 3, 10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        th = threading.Thread(target=lambda: F @ m)
        th.start()
        th.join(30)
    assert [w.filename for w in caught if "moving to" in str(w.message)] == [__file__]


def test_auto_model_warning_points_at_the_caller(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "tables").mkdir()
    monkeypatch.setenv("FFTMATVEC_TUNING_PATH", str(tmp_path / "tables"))
    monkeypatch.setattr(select, "_warned", set())
    with pytest.warns(UserWarning, match="no tuning table") as caught:
        fm.BlockToeplitz(rng.standard_normal(SHAPE), "auto", rtol=1e-3)
    assert [w.filename for w in caught] == [__file__]


# ---- the pylops-mpi adapter --------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("n", [2])
def test_pylops_mpi_adapter_checks_inputs(n):
    from test_distributed import _run

    res = _run(n, "check_adapters.py")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    words = res.stdout.split()
    if words[:1] == ["SKIP"]:
        pytest.skip(res.stdout.strip())
    assert words[:2] == ["OK", str(n)], res.stdout
