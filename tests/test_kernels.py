"""GPU kernels against the NumPy float64 path: fresh random inputs, outputs poisoned first.

Shapes exercise the tails: Nd and Nm not multiples of any tile, Nd=1, Nm=1, k=1 and k=17
right-hand sides, large Nm with small Nd and the reverse, few and many frequencies.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import planning_view, set_plan
from conftest import poisoned

import fftmatvec as fm
from fftmatvec import backend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)"),
]

SHAPES = [  # (Nd, Nm, Nt)
    (1, 1, 5),
    (1, 37, 40),
    (37, 1, 40),
    (13, 70, 33),
    (3, 5000, 12),
    (5000, 3, 12),
    (9, 130, 100),
    (45, 77, 150),  # Nd = 32 + 13: a full and a partial staged chunk in the adjoint
    (100, 23, 1000),  # Nf = 1001: frequency tiles with a ragged end
]
def _khat_reference(K, L):
    return np.fft.rfft(K, n=L, axis=-1)  # (Nd, Nm, Nf) complex128


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", ["d", "s", "h"])
@pytest.mark.parametrize("k", [1, 11, 17])  # launches of 16, 8, 2 and 1 right-hand sides
@pytest.mark.parametrize("adjoint", [False, True], ids=["fwd", "adj"])
# default kernel choice (cp.async or staged for one vector, tensor cores for several where the
# device has them); the plain GEMV kernel only
@pytest.mark.parametrize("kernels", ["auto", "gemv"])
def test_sbgemv(rng, monkeypatch, shape, store, k, adjoint, kernels):
    if kernels == "gemv":
        set_plan(monkeypatch, "staged", "0")
        set_plan(monkeypatch, "mma", "0")
        set_plan(monkeypatch, "async", "0")
    cp = backend.cupy
    nd, nm, nt = shape
    K = rng.standard_normal(shape)
    prec = f"dd{store}dd"
    F = fm.BlockToeplitz(cp.asarray(K), prec)
    assert F.engine == "kernels"
    L, nf = F.fft_len, F.nf
    khat = _khat_reference(K, L) / L  # the engine stores Khat/L (normalisation of stage 4)
    n_in, n_out = (nd, nm) if adjoint else (nm, nd)
    tol = {"d": 1e-13, "s": 2e-6, "h": 2e-3}[store]
    if store == "s" and k >= 16 and kernels == "auto" and not adjoint:
        tol = 4e-6  # tensor cores (3xTF32) where the device has them; see test_pipe_tiles
    for in_dt, out_dt in [(np.complex128, np.complex128), (np.complex64, np.complex64),
                          (np.complex64, np.complex128), (np.complex128, np.complex64)]:
        x = (rng.standard_normal((k, n_in, nf)) + 1j * rng.standard_normal((k, n_in, nf)))
        x = x.astype(in_dt)
        ref = _dense_product(khat, x, adjoint)
        out = poisoned(cp, (k, n_out, nf), out_dt)
        F._engine.apply(cp.asarray(x), adjoint, out_dt, out=out)
        got = cp.asnumpy(out)
        assert got.dtype == out_dt
        assert np.isfinite(got).all(), "some outputs were never written"
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        t = max(tol, 2e-6 if (in_dt == np.complex64 or out_dt == np.complex64) else 0)
        assert err < t, (in_dt, out_dt, err)


def _dense_product(khat, x, adjoint):
    if adjoint:
        return np.einsum("ijf,bif->bjf", khat.conj(), x.astype(np.complex128))
    return np.einsum("ijf,bjf->bif", khat, x.astype(np.complex128))


def _tile_case(rng, shape, store, adjoint):
    """(operator, its engine, the float64 Khat / L, n_in, n_out, n_red) of a tile test."""
    cp = backend.cupy
    K = rng.standard_normal(shape)
    F = fm.BlockToeplitz(cp.asarray(K), f"dd{store}dd")
    khat = _khat_reference(K, F.fft_len) / F.fft_len
    nd, nm, _ = shape
    n_in, n_out, n_red = (nd, nm, nd) if adjoint else (nm, nd, nm)
    return F, F._engine, khat, n_in, n_out, n_red


@pytest.mark.parametrize("shape", [(45, 77, 150), (100, 23, 1000), (3, 300, 20)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", ["d", "s", "h"])
@pytest.mark.parametrize("adjoint", [False, True], ids=["fwd", "adj"])
def test_staged_tiles(rng, shape, store, adjoint):
    """Every compiled tile of the staged kernel, with narrow and wide blocks, with and without
    split-K, against the float64 product."""
    cp = backend.cupy
    from fftmatvec.gpu import STAGED_TILES

    F, eng, khat, n_in, n_out, n_red = _tile_case(rng, shape, store, adjoint)
    x = rng.standard_normal((1, n_in, F.nf)) + 1j * rng.standard_normal((1, n_in, F.nf))
    ref = _dense_product(khat, x, adjoint)
    tol = {"d": 1e-13, "s": 2e-6, "h": 2e-3}[store]
    for rt, v in STAGED_TILES[eng.store]:
        for ty in (1, 4, 16):
            for sms in (eng.num_sms, 1):  # split-K on the device's count; none with one SM
                device = dataclasses.replace(eng.device, multiprocessors=sms)
                la = planning_view(F, adjoint, device=device).builders._launch_staged(
                    n_out, n_red, np.complex128, np.complex128, tile=(rt, v, ty))
                out = poisoned(cp, (1, n_out, F.nf), np.complex128)
                eng.apply(cp.asarray(x), adjoint, np.complex128, out=out, plan=[la])
                got = cp.asnumpy(out)
                assert np.isfinite(got).all(), (rt, v, ty, la)
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                assert err < tol, (rt, v, ty, la, err)


@pytest.mark.parametrize("shape", [(45, 77, 150), (100, 23, 1000), (3, 300, 20), (1, 37, 40),
                                   (37, 1, 40), (9, 130, 700)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", ["d", "s"])  # float16 storage has no such tiles
@pytest.mark.parametrize("adjoint", [False, True], ids=["fwd", "adj"])
def test_wide_tiles(rng, shape, store, adjoint):
    """Every compiled one-vector tile of several frequency groups per thread, with blocks of
    32 to 128 lanes, with and without split-K, in and out in both precisions, against the float64
    product (groups past the padded frequencies, rows past the end)."""
    cp = backend.cupy
    from fftmatvec.gpu import WIDE_TILES

    F, eng, khat, n_in, n_out, n_red = _tile_case(rng, shape, store, adjoint)
    tol = {"d": 1e-13, "s": 2e-6}[store]
    assert WIDE_TILES[eng.store]
    for rt, v, w in WIDE_TILES[eng.store]:
        for (bx, ty), per_sm, in_dt, out_dt in [((32, 4), 64, np.complex128, np.complex128),
                                                ((64, 2), 1, np.complex64, np.complex128),
                                                ((128, 1), 0, np.complex128, np.complex64),
                                                ((32, 1), 8, np.complex64, np.complex64)]:
            x = rng.standard_normal((1, n_in, F.nf)) + 1j * rng.standard_normal((1, n_in, F.nf))
            x = x.astype(in_dt)
            ref = _dense_product(khat, x, adjoint)
            la = planning_view(F, adjoint, gemv_blocks_per_sm=per_sm).builders._launch_gemv(  # 0: no split-K
                1, n_out, n_red, in_dt, out_dt, tile=(rt, v, bx, ty, w))
            assert la.name.endswith(f"_w{w}")
            out = poisoned(cp, (1, n_out, F.nf), out_dt)
            eng.apply(cp.asarray(x), adjoint, out_dt, out=out, plan=[la])
            got = cp.asnumpy(out)
            assert np.isfinite(got).all(), la
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            t = max(tol, 2e-6 if (in_dt == np.complex64 or out_dt == np.complex64) else 0)
            assert err < t, (la, in_dt, out_dt, err)


@pytest.mark.parametrize("shape", [(45, 77, 150), (100, 23, 1000), (3, 300, 20), (1, 37, 40),
                                   (37, 1, 40), (130, 9, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", ["d", "s", "h"])
@pytest.mark.parametrize("adjoint", [False, True], ids=["fwd", "adj"])
def test_async_tiles(rng, shape, store, adjoint):
    """Every compiled tile of the cp.async one-vector kernel, in and out in both precisions,
    with and without split-K, against the float64 product (zero-filled tails: rows, reduction
    steps, frequencies)."""
    cp = backend.cupy
    from fftmatvec.gpu import ASYNC_TILES

    F, eng, khat, n_in, n_out, n_red = _tile_case(rng, shape, store, adjoint)
    if not eng.device.mma_kernels:
        pytest.skip("no cp.async kernels on this device")
    tol = {"d": 1e-13, "s": 2e-6, "h": 2e-3}[store]
    for tile in ASYNC_TILES[eng.store]:
        for waves, in_dt, out_dt in [(1, np.complex128, np.complex128), (8, np.complex64, np.complex128),
                                     (0, np.complex128, np.complex64), (4, np.complex64, np.complex64)]:
            x = rng.standard_normal((1, n_in, F.nf)) + 1j * rng.standard_normal((1, n_in, F.nf))
            x = x.astype(in_dt)
            ref = _dense_product(khat, x, adjoint)
            la = planning_view(F, adjoint, async_waves=waves).builders._launch_async(  # 0: no split-K
                n_out, n_red, in_dt, out_dt, tile=tile, adjoint=adjoint)
            out = poisoned(cp, (1, n_out, F.nf), out_dt)
            eng.apply(cp.asarray(x), adjoint, out_dt, out=out, plan=[la])
            got = cp.asnumpy(out)
            assert np.isfinite(got).all(), (tile, la)
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            t = max(tol, 2e-6 if (in_dt == np.complex64 or out_dt == np.complex64) else 0)
            assert err < t, (tile, waves, in_dt, out_dt, la, err)


@pytest.mark.parametrize("shape", [(45, 77, 150), (100, 23, 1000), (3, 300, 20), (1, 37, 40),
                                   (37, 1, 40), (130, 9, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", ["d", "s-tf32", "s-dmma", "h"])
@pytest.mark.parametrize("adjoint", [False, True], ids=["fwd", "adj"])
def test_pipe_tiles(rng, monkeypatch, shape, store, adjoint):
    """Every compiled tile of the pipelined tensor-core kernel, with 1, 5 and 16 right-hand
    sides, with and without split-K, in and out in both precisions, both directions, against
    the float64 product (zero-filled tails: rows, reduction rows, frequencies, vectors).
    Complex64 storage on both of its kernels, TF32 and DMMA."""
    cp = backend.cupy
    from fftmatvec.gpu import PIPE_TILES

    store, _, mma = store.partition("-")
    if mma:
        set_plan(monkeypatch, "dmma_c64", "1" if mma == "dmma" else "0")
    F, eng, khat, n_in, n_out, n_red = _tile_case(rng, shape, store, adjoint)
    view = planning_view(F, adjoint)
    if view.planner._mma_min_kb() is None:
        pytest.skip("no tensor-core kernels on this device")
    assert view.builders.pipe_store == {"dmma": "c64dmma", "tf32": "c64", "": eng.store}[mma]
    # 3xTF32 with each k-step's sum added in float32: a few 1e-7, like float32 FMAs; on DMMA
    # the products and sums are exact in float64 and the error is complex64 storage's (3e-8)
    tol = {"d": 1e-13, "s": 4e-6, "h": 2e-3}[store]
    if mma == "dmma":
        tol = 2e-7
    for kb in (1, 5, 16):
        x = rng.standard_normal((kb, n_in, F.nf)) + 1j * rng.standard_normal((kb, n_in, F.nf))
        ref = _dense_product(khat, x, adjoint)
        for tile in PIPE_TILES[view.builders.pipe_store]:
            # split-K as far as the reduction allows, or none; both block orders
            for waves, freq_major in ((64, False), (0, True), (64, True), (0, False)):
                for in_dt, out_dt in ((np.complex128, np.complex128),
                                      (np.complex64, np.complex64)):
                    la = planning_view(F, adjoint, kb, pipe_waves=waves, pipe_freq_major=freq_major
                               ).builders._launch_pipe(kb, n_out, n_red, in_dt, out_dt, tile=tile)
                    assert la.freq_major == freq_major
                    out = poisoned(cp, (kb, n_out, F.nf), out_dt)
                    eng.apply(cp.asarray(x.astype(in_dt)), adjoint, out_dt, out=out, plan=[la])
                    got = cp.asnumpy(out)
                    case = (kb, tile, la, in_dt)
                    assert np.isfinite(got).all(), case
                    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                    t = tol if in_dt == np.complex128 else max(tol, 2e-6)
                    assert err < t, (case, err)


@pytest.mark.parametrize("adjoint", [False, True], ids=["fwd", "adj"])
def test_h_batch_vector_ranges(rng, adjoint):
    """Float16-storage batches on tensor cores with vectors 40 decades apart, and vectors whose
    magnitude grows (or shrinks) by 2^40 along the reduction: each product against its own
    float64 reference, on every tile, split and unsplit (a kernel that converts the vectors to
    a narrower type must keep each one's own range)."""
    cp = backend.cupy
    from fftmatvec.gpu import PIPE_TILES

    F, eng, khat, n_in, n_out, n_red = _tile_case(rng, (45, 300, 40), "h", adjoint)
    view = planning_view(F, adjoint)
    if view.planner._mma_min_kb() is None:
        pytest.skip("no tensor-core kernels on this device")
    kb = 16
    x = rng.standard_normal((kb, n_in, F.nf)) + 1j * rng.standard_normal((kb, n_in, F.nf))
    decades = np.linspace(-20, 20, kb)
    ramp = np.linspace(0, 40, n_in) * np.log10(2.0)  # 2^40 from the first row to the last
    for b in range(kb):
        trend = (ramp, -ramp, np.zeros(n_in))[b % 3]
        x[b] *= 10.0 ** (decades[b] + trend)[:, None]
    x = x.astype(np.complex64).astype(np.complex128)  # within float32's range
    ref = _dense_product(khat, x, adjoint)
    xs = cp.asarray(x.astype(np.complex64))
    if adjoint:
        xs = eng.stage3.scale_xhat(xs)
    for tile in PIPE_TILES[view.builders.pipe_store]:
        for waves in (64, 0):
            la = planning_view(F, adjoint, kb, pipe_waves=waves).builders._launch_pipe(
                kb, n_out, n_red, xs.dtype, np.complex128, tile=tile)
            out = poisoned(cp, (kb, n_out, F.nf), np.complex128)
            eng.apply(xs, adjoint, np.complex128, out=out, plan=[la], xhat_scaled=adjoint)
            got = cp.asnumpy(out)
            assert np.isfinite(got).all(), (tile, la)
            err = np.linalg.norm(got - ref, axis=(1, 2)) / np.linalg.norm(ref, axis=(1, 2))
            assert err.max() < 2e-3, (tile, la, err)


@pytest.mark.parametrize("shape", [(45, 77, 150), (100, 23, 1000), (1, 37, 40), (37, 1, 40),
                                   (130, 9, 64), (3, 300, 20)], ids=lambda s: "x".join(map(str, s)))
def test_h_adjoint_prescaled(rng, monkeypatch, shape):
    """Float16 adjoints take their input times the row scales (the FFT's store callback, or
    the scale_rows kernel): every kernel family, every compiled tile, 1 and 17 right-hand
    sides, against the float64 product, with outputs poisoned first."""
    cp = backend.cupy
    from fftmatvec.gpu import ASYNC_TILES, PIPE_TILES, STAGED_TILES

    nd, nm, nt = shape
    K = rng.standard_normal(shape)
    F = fm.BlockToeplitz(cp.asarray(K), "ddhdd")
    eng = F._engine
    khat = _khat_reference(K, F.fft_len) / F.fft_len
    with pytest.raises(ValueError, match="adjoint"):
        eng.apply(cp.zeros((1, nm, F.nf), np.complex64), False, np.complex128, xhat_scaled=True)
    with pytest.raises(ValueError, match=r"\(k, %d, %d\)" % (nd, F.nf)):
        eng.stage3.scale_xhat(cp.zeros((1, nd + 1, F.nf), np.complex64))
    sm80 = eng.device.mma_kernels
    view = planning_view(F, True)  # the planner and the launch builders
    for k in (1, 17):
        x = rng.standard_normal((k, nd, F.nf)) + 1j * rng.standard_normal((k, nd, F.nf))
        ref = _dense_product(khat, x, True)
        # as the FFT's callback writes it
        xs = eng.stage3.scale_xhat(cp.asarray(x).astype(np.complex64))
        assert xs.dtype == np.complex64 and xs.shape == x.shape
        scale = cp.asnumpy(eng.khat_store.scale)[:, : F.nf]
        np.testing.assert_allclose(cp.asnumpy(xs), x.astype(np.complex64) * scale, rtol=1e-6)
        # in complex128 the product is exact to the last bit: x times the float32 scale
        np.testing.assert_array_equal(cp.asnumpy(eng.stage3.scale_xhat(cp.asarray(x))),
                                      x * scale.astype(np.float64))
        plans = [None]  # the default plan
        if k == 1:
            plans += [[view.builders._launch_staged(nm, nd, xs.dtype, np.complex128, tile=(rt, v, 8))]
                      for rt, v in STAGED_TILES[eng.store]]
            plans += [[view.builders._launch_gemv(1, nm, nd, xs.dtype, np.complex128, tile=(rt, v, 32, 4))]
                      for rt, kb, v in [(2, 1, 4), (8, 1, 2)]]
            if sm80:
                plans += [[view.builders._launch_async(nm, nd, xs.dtype, np.complex128, tile=t,
                                              adjoint=True)]
                          for t in ASYNC_TILES[eng.store]]
        elif sm80:
            plans += [[view.builders._launch_pipe(16, nm, nd, xs.dtype, np.complex128, tile=t, adjoint=True),
                       view.planner._launch(1, nm, nd, xs.dtype, np.complex128, adjoint=True)]
                      for t in PIPE_TILES[view.builders.pipe_store]]
        for plan in plans:
            out = poisoned(cp, (k, nm, F.nf), np.complex128)
            eng.apply(xs, True, np.complex128, out=out, plan=plan, xhat_scaled=True)
            got = cp.asnumpy(out)
            assert np.isfinite(got).all(), plan
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            assert err < 2e-3, (k, plan, err)
        # without the flag the kernels apply the scales again: the product must change
        out = poisoned(cp, (k, nm, F.nf), np.complex128)
        eng.apply(xs, True, np.complex128, out=out)
        assert np.linalg.norm(cp.asnumpy(out) - ref) / np.linalg.norm(ref) > 1e-2


@pytest.mark.parametrize("rows,nt", [(1, 1), (3, 7), (70000, 9), (5, 1000), (3, 50001)])
@pytest.mark.parametrize("types", ["ddd", "dsd", "dds", "sss", "sdd", "ssd"])
def test_pad_unpad(rng, rows, nt, types):
    cp = backend.cupy
    from fftmatvec.gpu import KernelEngine
    from fftmatvec.precision import PrecisionConfig

    iface = np.float64 if types[0] == "d" else np.float32
    p1 = types[1]
    p2 = types[2]
    prec = PrecisionConfig(f"{p1}{p2}d{p2}{p1}")
    L = fm.fft_length(nt)
    eng = KernelEngine(prec, 1, 1, L // 2 + 1, nt, L)
    x = rng.standard_normal((1, rows, nt)).astype(iface)
    out = poisoned(cp, (1, rows, L), prec.real_dtype("fft"))
    eng.pad(cp.asarray(x), prec, out=out)
    got = cp.asnumpy(out)
    ref = np.zeros((1, rows, L))
    ref[..., :nt] = x.astype(prec.pad_dtype).astype(prec.real_dtype("fft"))
    assert got.dtype == prec.real_dtype("fft")
    np.testing.assert_array_equal(got, ref)

    y = rng.standard_normal((1, rows, L)).astype(prec.real_dtype("ifft"))
    w = rng.uniform(0.5, 2, (rows, nt)).astype(iface)
    for weight in (None, w):
        out = poisoned(cp, (1, rows, nt), iface)
        eng.unpad(cp.asarray(y), prec, nt, iface, weight=None if weight is None else cp.asarray(weight), out=out)
        ref = y[..., :nt].astype(prec.reduce_dtype).astype(iface)
        if weight is not None:
            ref = ref * weight
        got = cp.asnumpy(out)
        assert got.dtype == iface
        np.testing.assert_allclose(got, ref, rtol=1e-6 if iface == np.float32 else 1e-15)


def test_packed_launch(rng):
    """A packed launch runs its kernel with the pointers of each call in its open slots, and
    refuses a wrong number of pointers or an argument it cannot pack."""
    cp = backend.cupy
    from fftmatvec import kernels

    n, splits = 1000, 3
    fn = kernels.get_function("reduce_c128_c64")
    launch = kernels.PackedLaunch(fn, (8,), (32, 2), 0, (None, None, np.int64(n), np.int32(splits)))
    for _ in range(2):  # fresh pointers each call
        part = cp.asarray(rng.standard_normal((splits, n)) + 1j * rng.standard_normal((splits, n)))
        y = poisoned(cp, n, np.complex64)
        launch(cp.cuda.get_current_stream().ptr, part.data.ptr, y.data.ptr)
        np.testing.assert_allclose(cp.asnumpy(y), cp.asnumpy(part.sum(axis=0)), rtol=1e-6)
    with pytest.raises(TypeError, match="takes 2 pointers"):
        launch(cp.cuda.get_current_stream().ptr, part.data.ptr)
    with pytest.raises(TypeError, match="NumPy scalar"):
        kernels.PackedLaunch(fn, (8,), (32, 2), 0, (None, None, 5, np.int32(splits)))


@pytest.mark.parametrize("prec,out", [("ddddd", np.complex128), ("ddddd", np.complex64),
                                      ("sssss", np.complex64), ("sssss", np.complex128)])
@pytest.mark.parametrize("n,splits", [(1, 2), (255, 3), (257, 8), (1000, 9), (4099, 16),
                                      (40_000, 16), (40_000, 17), (300, 40)])
def test_split_sums(rng, prec, out, n, splits):
    """Both split-K sums against NumPy (the serial one adds the splits in order, so it matches
    a sum in that order to the last bit), and the engine's pick: one thread per output only
    for few splits over many outputs."""
    cp = backend.cupy
    from fftmatvec import gpu as _gpu, kernels

    eng = fm.BlockToeplitz(cp.asarray(rng.standard_normal((2, 3, 4))), prec)._engine
    part = (rng.standard_normal((splits, n)) + 1j * rng.standard_normal((splits, n)))
    part = part.astype(eng.compute)
    ref = part[0].copy()
    for p in part[1:]:
        ref = ref + p
    ref = ref.astype(out)
    dpart = cp.asarray(part)
    for serial in (False, True):
        fn, grid, block, args = eng.stage3.split_sum(n, splits, out, serial=serial)
        y = poisoned(cp, n, out)
        kernels.PackedLaunch(fn, grid, block, 0, (None, None) + args)(
            cp.cuda.get_current_stream().ptr, dpart.data.ptr, y.data.ptr)
        got = cp.asnumpy(y)
        if serial:
            np.testing.assert_array_equal(got, ref)
        else:
            tol = 1e-13 if eng.compute == np.complex128 and out == np.complex128 else 1e-5
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * splits)
    picked = eng.stage3.split_sum(n, splits, out)[2]
    serial = (splits <= _gpu.REDUCE_SERIAL_MAX_SPLITS
              and n >= _gpu.REDUCE_SERIAL_MIN_OUTPUTS * eng.num_sms)
    assert (len(picked) == 1) is serial


def test_kernel_source_loads_by_name():
    from fftmatvec import kernels

    fn = kernels.get_function("sbgemv_c64_c64_c64_r4_k1_v2")
    assert fn is kernels.get_function("sbgemv_c64_c64_c64_r4_k1_v2")  # memoized
    info = kernels.describe()
    assert "current_device" in info


@pytest.mark.parametrize("precision", ["ddddd", "sssss", "dsdsd", "ddhdd"])
@pytest.mark.parametrize("shape", [(3, 7, 10), (20, 289, 10), (5, 1000, 33)])
def test_graph_replay_matches_stages(rng, monkeypatch, precision, shape):
    """The captured-graph path and the stage-by-stage path give the same products."""
    cp = backend.cupy
    from conftest import dense_btt, rel_err

    nd, nm, nt = shape
    K = rng.standard_normal(shape)
    A = dense_btt(K)
    tol = 1e-12 if precision == "ddddd" else (2e-3 if "h" in precision else 1e-5)
    results = {}
    m1 = cp.asarray(rng.standard_normal((nm, nt)))
    m2 = cp.asarray(rng.standard_normal((nm, nt)))
    d = cp.asarray(rng.standard_normal((nd, nt)))
    for mode in ("0", "1"):
        set_plan(monkeypatch, "graphs", mode)
        F = fm.BlockToeplitz(cp.asarray(K), precision)
        y1, y2 = F @ m1, F @ m2  # the second call must not overwrite the first result
        z = F.T @ d
        N = F.normal(2.0)
        w = N @ m1
        for got, ref in ((y1, A @ cp.asnumpy(m1).ravel()), (y2, A @ cp.asnumpy(m2).ravel()),
                         (z, A.T @ cp.asnumpy(d).ravel()),
                         (w, 2.0 * A.T @ (A @ cp.asnumpy(m1).ravel()))):
            assert got.dtype == np.float64
            assert rel_err(got.ravel(), ref) < tol
        results[mode] = cp.asnumpy(y1)
        if mode == "1":
            assert any(e.plan.path == "graph" and e._graphs for e in F._executors.values()), \
                "the graph path was not taken"
    np.testing.assert_allclose(results["0"], results["1"], rtol=1e-12 if precision == "ddddd" else 1e-5, atol=0)
