"""The operator's guard, input checks, adapters, scalars, pickling and warnings (issue 72)."""

from __future__ import annotations

import copy
import pickle
import threading
import time
import warnings

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecError, FFTMatvecTypeError, FFTMatvecValueError
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
def _products_in_threads(F, vectors, adjoint=False):
    """Every vector's product, the vectors split over 8 threads that start together."""
    out = [None] * len(vectors)
    errors = []
    start = threading.Barrier(8)

    def work(t):
        try:
            start.wait()
            for i in range(t, len(vectors), 8):
                out[i] = (F.T if adjoint else F) @ vectors[i]
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


@pytest.mark.parametrize("adjoint", [False, True], ids=["forward", "adjoint"])
def test_guard_threads_get_checked_results(xp, rng, adjoint):
    """8 threads share one operator with ``check_every=1``: all 64 results are within the
    reference's accuracy (a product of ``ddhdd`` is 1e-4 off), and it switches once."""
    shape = (40, 30, 64)
    K, Kx = kernel(xp, rng, shape)
    A = dense_btt(K)
    F = fm.BlockToeplitz(Kx, "ddhdd", check_every=1)
    n = shape[0] if adjoint else shape[1]
    vectors = [random(xp, rng, n, shape[2]) for _ in range(64)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _products_in_threads(F, vectors, adjoint)
    assert sum("moving to" in str(w.message) for w in caught) == 1
    assert F.precision.letters == "ddddd"
    Aop = A.T if adjoint else A
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
            first.set()  # computed in ddhdd; wait (at most 3 s) for the other thread's switch
            deadline = time.monotonic() + 3.0
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
