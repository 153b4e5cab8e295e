"""Power-of-two scaling: reduced precisions neither over- nor underflow for kernels and inputs
far from 1, and the input check that shares the scale's reduction (fftmatvec/_scaling.py)."""

import math
import warnings

import numpy as np
import pytest

from fftmatvec import BlockToeplitz, _scaling, backend
from fftmatvec._errors import FFTMatvecValueError

from conftest import dense_btt, to_numpy

# the README's bounds: about 1e-7 with any `s` stage, 1.5e-4 with `h` (held to 2e-3)
BOUND = {"s": 2e-6, "h": 2e-3}
PRECISIONS = ["sssss", "dssdd", "ddhdd", "dsddd", "sdddd", "ddsdd", "dddsd", "dddds", "ssssd"]


def _bound(p):
    return BOUND["h"] if "h" in p else BOUND["s"]


def _err(y, ref) -> float:
    """Relative error, computed without over- or underflow whatever the magnitudes."""
    y = np.asarray(to_numpy(y), dtype=np.float64)
    ref = np.asarray(to_numpy(ref), dtype=np.float64)
    s = np.abs(ref).max()
    assert np.isfinite(s) and s > 0
    return float(np.linalg.norm((y - ref) / s) / np.linalg.norm(ref / s))


def _case(xp, rng, kf, xf, shape=(3, 5, 16), dtype=np.float64):
    nd, nm, nt = shape
    K = xp.asarray(rng.standard_normal(shape) * kf)
    m = xp.asarray((rng.standard_normal((nm, nt)) * xf).astype(dtype))
    d = xp.asarray((rng.standard_normal((nd, nt)) * xf).astype(dtype))
    return K, m, d


def _products(F, m, d, normal=True):
    out = [F.matvec(m), F.rmatvec(d), F.matmat(m[None])[0], F.T.matvec(d)]
    if normal:  # F^T W F m: only where its output is within float64's range
        out += [F.normal().matvec(m), F.normal(2.0).matvec(m)]
    return out


def _normal_fits(kf, xf, dtype=np.float64):
    e = 2 * math.log10(kf) + math.log10(xf)
    return abs(e) < (280 if dtype == np.float64 else 30)


@pytest.mark.parametrize("kf, xf", [(1e-25, 1e-25), (1e20, 1e20), (1e300, 1.0), (1.0, 1e300),
                                    (1e300, 1e-300), (1e-300, 1e290), (1e-150, 1e-150),
                                    (2.0**31, 2.0**-32)])  # the last: no scaling needed
@pytest.mark.parametrize("p", PRECISIONS)
def test_extreme_magnitudes_within_bound(xp, rng, p, kf, xf):
    """Kernel and input far from 1: every product of a reduced precision within its bound of
    ``ddddd`` (before the scaling: relative error 1.0, NaN or Inf)."""
    K, m, d = _case(xp, rng, kf, xf)
    ref = BlockToeplitz(K, "ddddd")
    refs = _products(ref, m, d, _normal_fits(kf, xf))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / underflow warning either
        F = BlockToeplitz(K, p)
        got = _products(F, m, d, _normal_fits(kf, xf))
    for g, r in zip(got, refs):
        assert np.isfinite(to_numpy(g)).all()
        assert _err(g, r) < _bound(p), (p, kf, xf)


@pytest.mark.parametrize("p", ["sssss", "ddhdd", "dssdd"])
@pytest.mark.parametrize("kf, xf", [(1e-44, 1e34), (1e36, 1e-42), (1e38, 1e-30), (1e9, 1e-9)])
def test_float32_interface(xp, rng, p, kf, xf):
    """A float32 interface dtype: float32 vectors, float64 kernel far from 1, an output within
    float32's range (the last case needs no scaling)."""
    K, m, d = _case(xp, rng, kf, xf, dtype=np.float32)
    ref = BlockToeplitz(K, "ddddd", dtype=np.float32)
    F = BlockToeplitz(K, p, dtype=np.float32)
    fits = _normal_fits(kf, xf, np.float32)
    for g, r in zip(_products(F, m, d, fits), _products(ref, m, d, fits)):
        assert g.dtype == np.float32
        assert _err(g, r) < max(_bound(p), 1e-6), (p, kf, xf)


def test_ddddd_and_usual_magnitudes_untouched(xp, rng):
    """A kernel and input inside ``[2**-32, 2**32)`` (``ddddd``: ``[2**-256, 2**256)``) are
    computed exactly as without the scaling (bit for bit)."""
    K, m, d = _case(xp, rng, 1e9, 1e-9)
    assert BlockToeplitz(K * 1e60, "ddddd").kernel_exponent == 0
    G = BlockToeplitz(K * 1e60, "ddddd")
    got = [G.matvec(m * 1e60), G.rmatvec(d * 1e-60)]
    G._scaled = False
    for g, q in zip(got, [G.matvec(m * 1e60), G.rmatvec(d * 1e-60)]):
        np.testing.assert_array_equal(to_numpy(g), to_numpy(q))
    assert BlockToeplitz(K * 1e290, "ddddd").kernel_exponent > 256
    for p in ["sssss", "ddhdd", "dssdd"]:
        F = BlockToeplitz(K, p)
        assert F.kernel_exponent == 0
        got = [F.matvec(m), F.rmatvec(d)]
        F._scaled = False  # the products as they were before the scaling
        plain = [F.matvec(m), F.rmatvec(d)]
        for g, q in zip(got, plain):
            np.testing.assert_array_equal(to_numpy(g), to_numpy(q))


@pytest.mark.parametrize("p", ["ddddd", "sssss", "dssdd", "ddhdd"])
def test_products_near_float64s_largest(xp, rng, p):
    """Inputs near 3e306 whose exact products (about 3e307) fit float64: every precision
    within its bound of the dense product (``ddddd`` gave Inf / NaN before it was scaled),
    forward, adjoint and batched; a float32 operator likewise near float32's largest."""
    K = xp.asarray(rng.standard_normal((3, 5, 16)))
    A = dense_btt(K)
    m = rng.standard_normal((5, 16)) * 3e306
    d = rng.standard_normal((3, 16)) * 3e306
    F = BlockToeplitz(K, p)
    bound = 1e-13 if p == "ddddd" else _bound(p)
    tiny = 2.0 ** -1000  # the dense reference, computed where it cannot overflow
    for y, ref in [(F.matvec(xp.asarray(m)), A @ (m * tiny).ravel()),
                   (F.rmatvec(xp.asarray(d)), A.T @ (d * tiny).ravel()),
                   (F.matmat(xp.asarray(m[None]))[0], A @ (m * tiny).ravel())]:
        y = to_numpy(y)
        assert np.isfinite(y).all() and np.abs(y).max() > 1e306, p
        assert _err(y.ravel() * tiny, ref) < bound, p
    G = BlockToeplitz(K, p, dtype=np.float32)
    m32 = (rng.standard_normal((5, 16)) * 3e36).astype(np.float32)
    y = to_numpy(G.matvec(xp.asarray(m32)))
    assert np.isfinite(y).all()
    assert _err(y.ravel() * 2.0**-100, A @ (m32 * 2.0**-100).ravel()) < max(bound, 1e-6)


def test_guard_keeps_a_correct_product_near_float64s_largest(rng):
    """The guard's ``ddddd`` reference near float64's largest is finite and agrees: a correct
    ``sssss`` operator stays ``sssss`` (it moved to a ``ddddd`` that returned NaN)."""
    K = rng.standard_normal((3, 5, 16))
    F = BlockToeplitz(K, "sssss", check_every=1)
    m = rng.standard_normal((5, 16)) * 3e306
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = F @ m
        y = F @ m
    assert F.precision.letters == "sssss" and np.isfinite(y).all()


def test_with_precision_shares_only_the_same_scale(rng):
    K, m, d = _case(np, rng, 1e50, 1.0)  # outside the reduced window, inside ddddd's
    F = BlockToeplitz(K, "ddddd")
    G = F.with_precision("dsddd")  # same stage-3 letter, but a scaled Khat: not shared
    assert G.kernel_exponent != 0 and G._engine is not F._engine
    H = G.with_precision("ssddd")  # same letter and the same scale: shared
    assert H._engine is G._engine and H.kernel_exponent == G.kernel_exponent
    for op in (G, H):
        assert _err(op @ m, F @ m) < BOUND["s"]


def test_kernel_exponent_values():
    assert _scaling.kernel_exponent(np, np.full((1, 1, 2), 3.0)) == 0
    assert _scaling.kernel_exponent(np, np.array([[[1e-25, -2.0**-90]]])) == -83
    assert _scaling.kernel_exponent(np, np.array([[[-(2.0**40), 1.0]]])) == 41
    assert _scaling.scale_exponent(2.0**40) == -41
    assert _scaling.scale_exponent(2.0**-33) == 32
    assert _scaling.scale_exponent(5e-324) == 1023  # clamped: 2**1074 is not a float64
    assert _scaling.scale_exponent(1e-45, 4) == 127
    assert _scaling.scale_exponent(float("nan")) == 0
    assert _scaling.scale_exponent(0.0) == 0


def test_long_double_kernel_beyond_float64(rng):
    """A long double kernel above float64's range keeps its values in a reduced precision
    (scaled before its cast to float64)."""
    if np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 here")
    K = rng.standard_normal((2, 3, 8))
    m = rng.standard_normal((3, 8))
    F = BlockToeplitz(K.astype(np.longdouble) * np.longdouble("1e400"), "sssss")
    assert F.kernel_exponent > 1024
    ref = BlockToeplitz(K, "ddddd") @ m * 1e100
    assert _err(F @ (m * 1e-300), ref) < BOUND["s"]


# ---- the check shared with the scale: "launch then check" with a fake device -------------
class _FakeDeviceOps:
    """The GPU's steps (:class:`_scaling.DeviceOps`) on NumPy, logged: a measure whose host
    value comes only when waited for, the device-side scale and unscale, ``ldexp``."""

    host = False

    def __init__(self):
        self.log = []

    def measure(self, x, launch=True):
        self.log.append("measure")
        ops = self

        class Measure:
            device = np.asarray(np.abs(x).max())
            waited = False
            recorded = True

            def ensure(self, x):
                pass

            def value(self):
                if not self.waited:
                    ops.log.append("wait")
                    self.waited = True
                return float(self.device)

        return Measure()

    def device_amax(self, x):
        self.log.append("device_amax")
        return np.asarray(np.abs(x).max())

    def scale(self, x, a):
        self.log.append("scale")
        return x * 2.0 ** _scaling.scale_exponent(a, x.dtype.itemsize)

    def unscale(self, y, a, kexp):
        self.log.append("unscale")
        y[...] = np.ldexp(y, kexp - _scaling.scale_exponent(a, y.dtype.itemsize))
        return y

    def ldexp(self, x, k, out=None, rows=None):
        self.log.append("ldexp")
        if rows is not None:  # one exponent more per row of (k, n, Nt)
            k = k + np.asarray(rows).reshape(-1, 1)
        return np.ldexp(x, k, out=out)


@pytest.fixture
def fake(monkeypatch):
    ops = _FakeDeviceOps()
    monkeypatch.setattr(_scaling, "ops_for", lambda xp: ops)
    monkeypatch.delenv("FFTMATVEC_PLAN", raising=False)
    return ops


def _logged(F, ops):
    """``F`` with each run of the five stages logged as "product"."""
    run = F._run_stages

    def logged(*a, **k):
        ops.log.append("product")
        return run(*a, **k)

    F._run_stages = logged
    return F


def _calls(F, m, d):
    return [(F.matvec, m, "m"), (F.rmatvec, d, "d"), (F.matmat, m[None], "M"),
            (F.rmatmat, d[None], "D"), (F.T.matvec, d, "m"), (F.normal().matvec, m, "m")]


def test_launch_then_check_order(fake, rng):
    """On a device the product is queued before the host waits for the reduction; a NaN
    raises after it, with no output returned. A usual input runs one product and no pass of
    its own; an extreme one runs again, scaled."""
    K, m, d = _case(np, rng, 1.0, 1.0)
    F = _logged(BlockToeplitz(K, "sssss"), fake)
    for f, a, name in _calls(F, m, d):
        fake.log.clear()
        f(a)
        if f.__self__ is F or f.__self__ is F.T:
            assert fake.log == ["measure", "product", "wait"], fake.log
        bad = a.copy()
        bad.flat[3] = np.nan
        fake.log.clear()
        with pytest.raises(FFTMatvecValueError, match=f"^{name} contains NaN or Inf"):
            f(bad)
        assert fake.log[:3] == ["measure", "product", "wait"], fake.log
    # ddddd: the same reduction (its range is scaled too), with or without the check
    G = _logged(BlockToeplitz(K, "ddddd"), fake)
    fake.log.clear()
    G.matvec(m)
    assert fake.log == ["measure", "product", "wait"]
    fake.log.clear()
    G.matvec(m, check_finite=False)
    assert fake.log == ["measure", "product", "wait"]
    fake.log.clear()
    F.matvec(m, check_finite=False)  # the scale still needs the reduction
    assert fake.log == ["measure", "product", "wait"]


def test_extreme_input_runs_again_scaled(fake, rng):
    K, m, d = _case(np, rng, 1e-30, 1e25)
    ref = BlockToeplitz(K, "ddddd")
    F = _logged(BlockToeplitz(K, "sssss"), fake)
    fake.log.clear()
    y = F.matvec(m)
    assert fake.log == ["measure", "product", "wait", "ldexp", "product", "ldexp"]
    assert _err(y, ref.matvec(m)) < BOUND["s"]
    for f, g in [(F.rmatvec, ref.rmatvec), (F.normal(3.0).matvec, ref.normal(3.0).matvec)]:
        v = d if f == F.rmatvec else m
        assert _err(f(v), g(v)) < BOUND["s"]
    # an extreme kernel alone: one product, its output rescaled
    K2, m2, _ = _case(np, rng, 1e-30, 1.0)
    F2 = _logged(BlockToeplitz(K2, "dssdd"), fake)
    fake.log.clear()
    y2 = F2.matvec(m2)
    assert fake.log == ["measure", "product", "wait", "ldexp"]
    assert _err(y2, BlockToeplitz(K2, "ddddd").matvec(m2)) < BOUND["s"]


def test_scale_on_device_switch(fake, rng, monkeypatch):
    """``FFTMATVEC_PLAN="scale_pass=1"``: the scale and unscale as device passes around one
    product, the exponent never on the host (the check still waits after the product)."""
    monkeypatch.setenv("FFTMATVEC_PLAN", "scale_pass=1")
    K, m, d = _case(np, rng, 1e-30, 1e25)
    ref = BlockToeplitz(K, "ddddd")
    F = _logged(BlockToeplitz(K, "ddhdd"), fake)
    fake.log.clear()
    y = F.matvec(m)
    assert fake.log == ["measure", "device_amax", "scale", "product", "unscale", "wait"]
    assert _err(y, ref.matvec(m)) < BOUND["h"]
    fake.log.clear()
    y = F.rmatvec(d, check_finite=False)
    assert fake.log == ["device_amax", "scale", "product", "unscale"]
    assert _err(y, ref.rmatvec(d)) < BOUND["h"]


def test_failed_product_waits_for_the_copy(fake, rng):
    K, m, _ = _case(np, rng, 1.0, 1.0)
    F = BlockToeplitz(K, "sssss")

    def boom(*a, **k):
        raise RuntimeError("launch failed")

    F._run_stages = boom
    with pytest.raises(RuntimeError, match="launch failed"):
        F.matvec(m)
    assert fake.log == ["measure", "wait"]


# ---- on a GPU ---------------------------------------------------------------------------
_GPU = [pytest.mark.gpu, pytest.mark.skipif(not backend.gpu_available(),
                                            reason="no GPU (CuPy missing or no device)")]


@_GPU[0]
@_GPU[1]
def test_gpu_check_after_launch_every_path(rng):
    """NaN / Inf raise on every GPU path, also the remembered one-vector path (called twice
    so the second call takes it), and no output comes back."""
    xp = backend.cupy
    for p in ["ddddd", "sssss", "ddhdd"]:
        K, m, d = _case(xp, rng, 1e-30, 1e25, shape=(4, 6, 32))
        F = BlockToeplitz(K, p)
        ref = BlockToeplitz(K, "ddddd")
        for _ in range(3):  # the first call remembers the path, the next ones take it
            assert _err(F.matvec(m), ref.matvec(m)) < _bound(p)
            assert _err(F.rmatvec(d), ref.rmatvec(d)) < _bound(p)
        for bad_value in (np.nan, np.inf):
            calls = [(F.matvec, m, "m"), (F.rmatvec, d, "d"), (F.matmat, m[None], "M"),
                     (F.rmatmat, d[None], "D"), (F.T.matvec, d, "m"),
                     (F.normal().matvec, m, "m")]
            for f, a, name in calls:
                bad = a.copy()
                bad[0, 1] = bad_value
                for _ in range(2):
                    with pytest.raises(FFTMatvecValueError, match=f"^{name} contains NaN"):
                        f(bad)
                assert np.isfinite(to_numpy(f(a))).all()  # the pinned slots are reused
            assert not np.isfinite(to_numpy(F.matvec(bad, check_finite=False))).all()


@_GPU[0]
@_GPU[1]
def test_gpu_exponents_match_host():
    """The device's scale exponent is the host's (scale_exponent), and the scale is exact."""
    xp = backend.cupy
    ops = _scaling.ops_for(xp)
    for dt in (np.float32, np.float64):
        tiny = np.finfo(dt).smallest_subnormal
        for a in [0.0, 1.0, 3.0, 2.0**-33, 2.0**40, 1e-30, 1e30, float(tiny), float("inf")]:
            if not math.isinf(a) and a > np.finfo(dt).max:
                continue
            x = xp.asarray(np.array([a, -a / 2], dtype=dt))
            amax = ops.device_amax(x)  # CuPy's own reduction flushes float32 subnormals
            want = float(np.abs(to_numpy(x)).max())
            s = _scaling.scale_exponent(want, np.dtype(dt).itemsize)
            # the one-launch measure keeps the exponent (float64: its high word)
            got = ops.measure(x).value()
            assert _scaling.scale_exponent(got, np.dtype(dt).itemsize) == s
            assert math.isinf(got) == math.isinf(a) and (got == 0.0) == (a == 0.0)
            if dt is np.float32:
                assert got == want
            if math.isfinite(a):
                exact = (to_numpy(x).astype(np.float64) * 2.0**s).astype(dt)
                np.testing.assert_array_equal(to_numpy(ops.ldexp(x, s)), exact)
                if a == 0.0 or a >= np.finfo(dt).tiny:  # scale_pass=1: CuPy's own arithmetic
                    np.testing.assert_array_equal(to_numpy(ops.scale(x, amax)), exact)
                    y = ops.scale(x, amax)
                    ops.unscale(y, amax, 0)
                    np.testing.assert_array_equal(to_numpy(y), to_numpy(x))
        nan = xp.asarray(np.array([1.0, np.nan, 2.0], dtype=dt))
        assert math.isnan(float(ops.device_amax(nan))) and math.isnan(ops.measure(nan).value())
        # a NaN whose payload lies in float64's low word only
        quiet = np.array([1.0, 2.0], dtype=np.float64)
        quiet.view(np.uint64)[0] = 0x7FF0000000000001
        assert math.isnan(ops.measure(xp.asarray(quiet)).value())


@_GPU[0]
@_GPU[1]
def test_gpu_row_fft_computes_the_magnitude(rng):
    """Where a remembered one-vector product's forward FFT is the package's row FFT, that
    kernel computes the input's largest magnitude (no launch of its own): NaN and Inf still
    raise, extreme inputs are still scaled, and a large grid of blocks (the last block's
    reset of the scratch words) gives the same answer call after call."""
    xp = backend.cupy
    for p in ["ddddd", "dssdd", "ddhdd"]:
        K, m, d = _case(xp, rng, 1e-30, 1e25, shape=(3, 3000, 64))
        F = BlockToeplitz(K, p, plan={"row_fft": "1"})
        ref = BlockToeplitz(K, "ddddd")
        want = ref.matvec(m)
        for _ in range(3):
            assert _err(F.matvec(m), want) < _bound(p)
        product = F._one_paths[(False, m.shape, m.dtype)][0]
        assert product is not None and product.folds_amax, F.plan()
        for bad_value in (np.nan, np.inf, -np.inf):
            bad = m.copy()
            bad[-1, -1] = bad_value
            with pytest.raises(FFTMatvecValueError, match="^m contains NaN"):
                F.matvec(bad)
            assert _err(F.matvec(m), want) < _bound(p)


def test_wide_dynamic_range_normwise(rng):
    """A vector whose entries span more than float32's range: one scale cannot keep the small
    ones, but the error relative to the output's norm stays within the bound (documented)."""
    K, m, d = _case(np, rng, 1.0, 1.0)
    m[:, ::2] *= 1e30
    m[:, 1::2] *= 1e-30
    ref = BlockToeplitz(K, "ddddd")
    for p in ["sssss", "ddhdd"]:
        assert _err(BlockToeplitz(K, p) @ m, ref @ m) < _bound(p)


def test_bench_check_runs_on_cpu(capsys):
    from conftest import load_script

    bench = load_script("bench_check")
    assert bench.main(["--device", "cpu", "--size", "20x3x8", "--repeat", "1", "--rounds", "1",
                       "--precisions", "ddddd,dssdd"]) == 0
    out = capsys.readouterr().out
    assert " dssdd  adj | queued |" in out and "ratio" in out


@_GPU[0]
@_GPU[1]
def test_gpu_amax_large_and_strided(rng):
    """The one-launch largest magnitude over many blocks: the host's value (float64: to its
    high word, which keeps the exponent), NaN where one is, also for a strided view."""
    cp = backend.cupy
    ops = _scaling.ops_for(cp)

    def close(got, want, dt):
        if dt is np.float32:
            return got == want
        return math.frexp(got)[1] == math.frexp(want)[1] and abs(got - want) <= want * 2.0**-19

    for dt in (np.float32, np.float64):
        for n in (1, 255, 257, 3_000_001):
            h = rng.standard_normal(n).astype(dt)
            i = int(rng.integers(n))
            h[i] = -7.5 * float(np.abs(h).max() + 1)  # the largest is negative
            x = cp.asarray(h)
            for _ in range(2):  # the scratch words are reset by the last block
                assert close(ops.measure(x).value(), float(np.abs(h).max()), dt)
            for bad in (np.inf, np.nan):
                hb = h.copy()
                hb[int(rng.integers(n))] = bad
                got = ops.measure(cp.asarray(hb)).value()
                assert (math.isnan(got) if np.isnan(bad) else got == np.inf)
        h = rng.standard_normal((40, 30, 50)).astype(dt)
        x = cp.asarray(h).transpose(2, 0, 1)[:, ::3]
        assert close(ops.measure(x).value(), float(np.abs(h.transpose(2, 0, 1)[:, ::3]).max()),
                     dt)


# ---- `h` with kernel columns of spread magnitudes: a scale per parameter column ----------
# parameters in different units: columns 1e12 apart, the input balancing them
_SPREAD = np.array([1.0, 1e-12, 1.0, 1e-12, 1e-6, 1.0])


def _spread_case(rng, kf=1.0, nd=4, nt=16, k=3, spread=1.0):
    nm = _SPREAD.size
    col = _SPREAD ** (1.0 if spread == 1.0 else np.log10(spread) / 12 + 1)
    K = rng.standard_normal((nd, nm, nt)) * col[None, :, None] * kf
    M = rng.standard_normal((k, nm, nt)) / col[:, None]
    D = rng.standard_normal((k, nd, nt))
    return K, M, D


def _rows_err(y, ref) -> float:
    """The largest relative error of one output row (a parameter's), each against its own
    norm."""
    y = np.asarray(to_numpy(y), dtype=np.float64).reshape(ref.shape)
    return float(max(np.linalg.norm(y[..., j, :] - ref[..., j, :]) / np.linalg.norm(ref[..., j, :])
                     for j in range(ref.shape[-2])))


@pytest.mark.parametrize("spread", [1.0, 1e20])  # 1e20: columns 1e-32 apart
@pytest.mark.parametrize("kf", [1.0, 1e-30, 1e30])
@pytest.mark.parametrize("p", ["ddhdd", "sshss"])
def test_h_columns_of_spread_magnitudes(xp, rng, p, kf, spread):
    """Columns 1e12 apart with `h` (before the column scales, far past its bound forward): every
    product within `h`'s bound of the float64 dense product, the adjoint's rows each against
    their own norm, one vector and batches, the normal operator with and without weight."""
    K, M, D = _spread_case(rng, kf, spread=spread)
    A = dense_btt(K)
    nd, nm, nt = K.shape
    fwd = lambda X: np.einsum("ab,kb->ka", A, X.reshape(len(X), -1)).reshape(len(X), nd, nt)
    adj = lambda X: np.einsum("ba,kb->ka", A, X.reshape(len(X), -1)).reshape(len(X), nm, nt)
    W = rng.random((nd, nt)) + 0.5
    F = BlockToeplitz(xp.asarray(K), p)
    Mx, Dx = xp.asarray(M), xp.asarray(D)
    for y in (F.matvec(Mx[0]), F @ Mx[0].reshape(-1)):
        assert _err(y.reshape(nd, nt), fwd(M[:1])[0]) < BOUND["h"]
    y = F.matmat(Mx)
    assert y.dtype == np.float64 and _err(y, fwd(M)) < BOUND["h"]
    assert _rows_err(F.rmatvec(Dx[0]), adj(D[:1])[0]) < BOUND["h"]
    assert _rows_err(F.T @ Dx, adj(D)) < BOUND["h"]
    assert _rows_err(F.rmatmat(Dx), adj(D)) < BOUND["h"]
    if kf == 1.0:  # F^T W F: only where its output is within float64's range
        Mb = M * _SPREAD[:, None]  # unbalanced here: F^T F weighs column j by _SPREAD[j]**2
        assert _rows_err(F.normal().matmat(xp.asarray(Mb)), adj(fwd(Mb))) < BOUND["h"]
        G = F.normal(xp.asarray(W))
        assert _err(G.matvec(xp.asarray(Mb[0])), adj(fwd(Mb[:1]) * W)[0]) < BOUND["h"]
    # the dot test: <F m, d> = <m, F^T d> to `h`'s precision
    lhs = float(np.vdot(to_numpy(F @ Mx[0]), D[0]))
    rhs = float(np.vdot(M[0], to_numpy(F.T @ Dx[0])))
    assert abs(lhs - rhs) <= BOUND["h"] * abs(fwd(M[:1])[0].ravel() @ D[0].ravel())
    assert F._cols is not None


def test_h_columns_float32_interface(rng):
    K, M, D = _spread_case(rng)
    A = dense_btt(K)
    F = BlockToeplitz(K, "ddhdd", dtype=np.float32)
    m = (M[0] * 1e-20).astype(np.float32)
    y = F @ m
    assert y.dtype == np.float32
    assert _err(y, (A @ m.astype(np.float64).ravel()).reshape(y.shape)) < BOUND["h"]


def test_column_scales_only_where_needed(rng):
    """Columns within 2**12 of each other (and every precision without `h`) take no column
    scale: the common case costs nothing per product."""
    K = rng.standard_normal((3, 5, 8))
    K[:, 1] *= 1e3
    K[:, 2] = 0.0  # a zero column does not count
    assert BlockToeplitz(K, "ddhdd")._cols is None
    K[:, 3] *= 2.0**-20
    c = BlockToeplitz(K, "ddhdd")._cols
    assert c is not None and c[1] == c[2] == 0 and c[3] < -12 and -12 < c[0] < 0
    assert BlockToeplitz(K, "sssss")._cols is None and BlockToeplitz(K, "ddddd")._cols is None
    c = _scaling.column_exponents(np, np.array([[[1.0], [2.0**-100], [0.0]]]))
    assert list(c) == [0, -100, 0]
    c = _scaling.column_exponents(np, np.array([[[1.0], [2.0**-300], [0.0]]]))
    assert list(c) == [0, -_scaling.COLUMN_RANGE, 0]


def test_column_scales_on_device_steps(fake, rng):
    """A GPU product with column scales (a fake device): the host waits for the input's
    magnitude, then one pass scales it (times the column scales forward) and one product runs;
    the adjoint's output pass applies the column scales."""
    K, M, D = _spread_case(rng)
    A = dense_btt(K)
    F = _logged(BlockToeplitz(K, "ddhdd"), fake)
    fake.log.clear()
    y = F.matvec(M[0])
    assert fake.log[:4] == ["measure", "ldexp", "measure", "wait"], fake.log
    assert fake.log.count("product") == 1
    assert _err(y, (A @ M[0].ravel()).reshape(y.shape)) < BOUND["h"]
    fake.log.clear()
    z = F.rmatvec(D[0], check_finite=False)
    assert fake.log[0] == "measure" and fake.log.count("product") == 1, fake.log
    assert fake.log[-1] == "ldexp"
    assert _rows_err(z, (A.T @ D[0].ravel()).reshape(z.shape)) < BOUND["h"]


@pytest.mark.parametrize("kf, xf, spread", [(1.0, 1.0, False), (1e-300, 1e290, False),
                                            (1.0, 1.0, True)])
@pytest.mark.parametrize("p", ["ddddd", "sssss", "dssdd", "ddhdd"])
def test_bound_relative_to_the_terms(rng, p, kf, xf, spread):
    """The README's figures bound the error relative to the size of the product's terms,
    ``||(|F| |x|)||``, for any finite kernel and input: here inputs near the null space of
    ``F``, whose output cancels to about 1e-9 of its terms, with kernels far from 1 and with
    columns 1e12 apart."""
    nd, nm, nt = 3, 5, 24
    col = np.array([1.0, 1e-12, 1.0, 1e-6, 1.0]) if spread else np.ones(nm)
    K = rng.standard_normal((nd, nm, nt)) * col[None, :, None]
    A = dense_btt(K)
    null = np.linalg.svd(A)[2][nd * nt:]  # rows spanning the null space of F
    F = BlockToeplitz(K * kf, p)
    bound = 1e-14 if p == "ddddd" else _bound(p)
    for _ in range(3):
        v = null.T @ rng.standard_normal(null.shape[0])
        x = (v / np.linalg.norm(v) + 1e-9 * rng.standard_normal(nm * nt) / col.repeat(nt))
        ref = A @ x  # the product of K (not K * kf): rescaled below, exactly
        terms = np.linalg.norm(np.abs(A) @ np.abs(x))
        y = F @ (x * xf).reshape(nm, nt)
        err = np.linalg.norm(y.ravel() / (kf * xf) - ref) / np.linalg.norm(ref)
        assert terms / np.linalg.norm(ref) > 1e6  # the output cancels
        assert err <= bound * terms / np.linalg.norm(ref), (p, err)


def test_guard_leaving_h_drops_the_column_scales(rng):
    """The guard's move from `h` with column scales to ``ddddd`` takes the new operator's
    scales with its ``Khat``: later products are ``ddddd``'s, both directions."""
    K, M, D = _spread_case(rng)
    A = dense_btt(K)
    F = BlockToeplitz(K, "ddhdd", check_every=1)
    with pytest.warns(UserWarning, match="moving to 'ddddd'"):
        F @ M[0]
    assert F.precision.letters == "ddddd" and F._cols is None
    nd, nm, nt = K.shape
    assert _err(F @ M[1], (A @ M[1].ravel()).reshape(nd, nt)) < 1e-14
    assert _err(F.T @ D[1], (A.T @ D[1].ravel()).reshape(nm, nt)) < 1e-14
