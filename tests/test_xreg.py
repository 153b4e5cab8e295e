"""Stage 3 of adjoint batches over few reduction rows with the input in registers
(``hip_kernels/sbgemvx.cuh``): the engine's rule and launch geometry on the host, and on the
GPU every compiled kernel against the float64 product, outputs poisoned first."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import planning_view, EnvOverrides, set_plan
from conftest import poisoned

import fftmatvec as fm
from fftmatvec import gpu as _gpu, backend, kernels
from fftmatvec._errors import FFTMatvecValueError
from fftmatvec.gpu.stage3 import Stage3Runner
from fftmatvec.gpu.launches import LaunchBuilders
from fftmatvec.gpu.planner import Planner

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
KERNELS = Path(__file__).parents[1] / "hip_kernels"


# ---- host side (no GPU needed) --------------------------------------------------------------
def _engine(monkeypatch, store="c128", nd=10, nm=100000, nf=101, sm80=True, present=True):
    """The planner's and the launch builders' host side for the rule and the launch geometry."""
    monkeypatch.setattr(kernels, "has_function", lambda name: present)
    eng = SimpleNamespace(resolved=EnvOverrides(), rules=_gpu.rules_for("sm_90"), has_kernel=lambda n: kernels.has_function(n),
                          store=store, nd=nd, nm=nm, nf=nf, smem_per_block=227 * 1024,
                          data=SimpleNamespace(itemsize=_gpu.rules._ELEM_BYTES[store]))
    for name in ("_xreg_fw", "_xreg_name", "xreg_smem", "xreg_rows", "_launch_xreg"):
        setattr(eng, name, getattr(LaunchBuilders, name).__get__(eng))
    eng._xreg_takes = Planner._xreg_takes.__get__(eng)
    eng.builders = eng  # the planner's rule asks the launch builders: here the same stand-in
    eng._sm80_kernels = lambda: sm80
    return eng


def _min_kb(eng, adjoint=True, n_red=None):
    n_red = eng.nd if n_red is None else n_red
    return Planner._xreg_min_kb(eng, adjoint, n_red, np.complex128, np.complex128)


@pytest.mark.parametrize("change,expect", [
    ({}, "default"), ({"store": "c64"}, "default"), ({"store": "c32h"}, "default"),
    ({"nd": _gpu.XREG_MAX_ND}, "default"), ({"nd": 1}, "default"),
    ({"nd": _gpu.XREG_MAX_ND + 1}, None), ({"sm80": False}, None), ({"present": False}, None),
    ({"adjoint": False}, None),
])
def test_xreg_rule(monkeypatch, change, expect):
    """By default: adjoints over at most XREG_MAX_ND reduction rows on devices with the sm_80
    kernels, from XREG_MIN_KB right-hand sides of their storage; never forward."""
    set_plan(monkeypatch, "xreg", None)
    adjoint = change.pop("adjoint", True)
    eng = _engine(monkeypatch, **change)
    got = _min_kb(eng, adjoint)
    assert got == (None if expect is None else _gpu.XREG_MIN_KB[eng.store])


@pytest.mark.parametrize("store,nd,kb,takes", [
    ("c128", 10, 4, False), ("c128", 5, 4, False), ("c64", 12, 4, False), ("c128", 4, 4, True),
    ("c64", 1, 4, True), ("c32h", 10, 4, True), ("c128", 10, 3, True), ("c64", 10, 5, True),
    ("c128", 10, 20, True),
])
def test_xreg_gemv_batches(monkeypatch, store, nd, kb, takes):
    """Launches of XREG_GEMV_KB right-hand sides over more than the fewest sensors compiled
    stay on the GEMV kernels by default (their 4-wide tile is one launch); xreg=1
    takes them too."""
    set_plan(monkeypatch, "xreg", None)
    eng = _engine(monkeypatch, store=store, nd=nd)
    assert eng._xreg_takes(kb) is takes
    set_plan(monkeypatch, "xreg", "1")
    assert eng._xreg_takes(kb) is True


def test_xreg_switch(monkeypatch):
    """=0 never; =1 from one right-hand side, and an error that says why where the kernel
    cannot take the adjoint (forward products never take it); anything else is an error."""
    set_plan(monkeypatch, "xreg", "0")
    assert _min_kb(_engine(monkeypatch)) is None
    set_plan(monkeypatch, "xreg", "1")
    assert _min_kb(_engine(monkeypatch)) == 1
    assert _min_kb(_engine(monkeypatch), adjoint=False) is None
    for change, why in (({"nd": 13}, "13 reduction rows"), ({"sm80": False}, "sm_80 or newer"),
                        ({"present": False}, "no sbgemvx_c128_c128_c128_n10_f16")):
        with pytest.raises(FFTMatvecValueError, match=why):
            _min_kb(_engine(monkeypatch, **change))
    set_plan(monkeypatch, "xreg", "on")
    with pytest.raises(FFTMatvecValueError, match="xreg must be auto, 0 or 1"):
        _min_kb(_engine(monkeypatch))


@pytest.mark.parametrize("store,nf,fw", [
    ("c128", 101, 16), ("c128", 51, 32), ("c128", 501, 32), ("c128", 1, 16), ("c128", 17, 32),
    ("c128", 16, 16), ("c128", 48, 16), ("c64", 101, 64), ("c64", 33, 64), ("c64", 96, 32),
    ("c32h", 1001, 64), ("c32h", 160, 32),
])
def test_xreg_frequencies_per_block(monkeypatch, store, nf, fw):
    """The fewest threads past Nf, the larger block on a tie."""
    assert _engine(monkeypatch, store=store, nf=nf)._xreg_fw() == fw


def test_xreg_launch_geometry(monkeypatch):
    """Blocks of FW x ceil(kb / BG) threads over FW frequencies and XREG_ROWS rows, more rows
    where the grid would pass 65535 blocks of rows; the shared memory of NS stages of RS rows of
    the sensors compiled; bad arguments are errors that name them."""
    eng = _engine(monkeypatch, store="c128", nd=9, nm=100001, nf=101)
    la = eng._launch_xreg(16, np.complex128, np.complex64)
    assert la.name == "sbgemvx_c128_c128_c64_n10_f16"
    assert (la.kb, la.splits, la.xreg_rows) == (16, 1, _gpu.XREG_ROWS)
    assert la.grid == (7, -(-100001 // _gpu.XREG_ROWS)) and la.block == (16 * 8, 1)
    bg, rs, ns = _gpu.XREG_TILES["c128"][16]
    assert la.smem == ns * rs * 10 * 16 * 16
    assert eng._launch_xreg(3, np.complex64, np.complex64).block == (16 * 2, 1)
    la = eng._launch_xreg(5, np.complex128, np.complex128, fw=32, rows=7)
    assert la.xreg_rows == 8 and la.block == (32 * 3, 1)  # rows rounded up to whole stages
    big = _engine(monkeypatch, store="c64", nd=3, nm=5_000_000, nf=4)
    la = big._launch_xreg(16, np.complex64, np.complex64)
    assert la.grid[1] <= 65535 and la.grid[1] * la.xreg_rows >= 5_000_000
    assert la.name == "sbgemvx_c64_c64_c64_n4_f32" and la.block == (32 * 4, 1)
    with pytest.raises(ValueError, match="1 to 16 right-hand sides, got 17"):
        eng._launch_xreg(17, np.complex128, np.complex128)
    with pytest.raises(ValueError, match="no input-in-registers kernel of 64 frequencies"):
        eng._launch_xreg(4, np.complex128, np.complex128, fw=64)
    with pytest.raises(ValueError, match="at most 12 reduction rows, got 13"):
        _engine(monkeypatch, nd=13)._launch_xreg(4, np.complex128, np.complex128)
    small = _engine(monkeypatch)
    small.smem_per_block = 16 * 1024
    with pytest.raises(ValueError, match="bytes of shared memory"):
        small._launch_xreg(4, np.complex128, np.complex128)


@pytest.mark.parametrize("store,nd,nf,fw,rows", [
    ("c128", 1, 101, 16, 4), ("c128", 4, 51, 32, 4), ("c128", 5, 101, 16, 8),
    ("c128", 8, 201, 16, 8), ("c128", 6, 51, 32, 32), ("c128", 9, 101, 16, 32),
    ("c64", 2, 201, 32, 4), ("c64", 3, 101, 64, 8), ("c64", 5, 101, 64, 32),
    ("c32h", 4, 51, 64, 8), ("c32h", 1, 4, 32, 4), ("c32h", 12, 101, 64, 32),
])
def test_xreg_rows_per_block(monkeypatch, store, nd, nf, fw, rows):
    """Fewer rows per block over few sensors (XREG_FEW_ROWS, by storage, compiled sensor count
    and width), XREG_ROWS elsewhere; the launch takes them unless the grid needs more."""
    eng = _engine(monkeypatch, store=store, nd=nd, nm=1000, nf=nf)
    assert eng._xreg_fw() == fw and eng.xreg_rows(fw) == rows
    la = eng._launch_xreg(16, np.complex64, np.complex64)
    assert la.xreg_rows == rows and la.grid == (-(-nf // fw), -(-1000 // rows))
    big = _engine(monkeypatch, store=store, nd=nd, nm=65535 * rows + 1, nf=nf)
    assert big._launch_xreg(16, np.complex64, np.complex64).xreg_rows > rows


def test_xreg_few_rows_table():
    """Each entry of XREG_FEW_ROWS names a compiled kernel and whole stages of its rows."""
    for (store, nd, fw), rows in _gpu.XREG_FEW_ROWS.items():
        assert nd in _gpu.XREG_ND and fw in _gpu.XREG_TILES[store]
        assert rows % _gpu.XREG_TILES[store][fw][1] == 0 and rows < _gpu.XREG_ROWS


def test_xreg_tables_match_the_kernels():
    """XREG_TILES and XREG_ND are the entry points the kernel source instantiates."""
    source = (KERNELS / "fftmatvec_kernels.cu").read_text()
    built = {(m[0], int(m[2])): (int(m[1]), int(m[3]), int(m[4]))
             for m in re.findall(r"^FFTMATVEC_SBGEMVX_ND\((\w+), \w+, (\d+), (\d+), (\d+), (\d+),",
                                 source, re.M)}
    want = {(s, fw): t for s, tiles in _gpu.XREG_TILES.items() for fw, t in tiles.items()}
    assert built == want
    nds = re.findall(r"FFTMATVEC_FOR_IO\(FFTMATVEC_SBGEMVX, SNAME, STORE, (\d+),", source)
    assert tuple(int(n) for n in nds) == _gpu.XREG_ND
    # the launch bound is the block a launch of 16 right-hand sides takes
    assert "__launch_bounds__(FW * 16 / BG, MINB)" in source


# ---- GPU --------------------------------------------------------------------------------------
@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1, 5), (1, 37, 40), (3, 5000, 12), (9, 130, 100),
                                   (12, 301, 60), (10, 1000, 100), (4, 67, 400), (6, 1001, 100)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("store", ["d", "s", "h"])
def test_xreg_kernels(rng, shape, store):
    """Every compiled frequency width, 1, 5, 11 and 16 right-hand sides, both precisions in and
    out, against the float64 adjoint (a float16 one with its input times the row scales)."""
    cp = backend.cupy
    nd, nm, nt = shape
    K = rng.standard_normal(shape)
    F = fm.BlockToeplitz(cp.asarray(K), f"dd{store}dd")
    eng, view = F._engine, planning_view(F, True).builders
    if not eng.device.mma_kernels:
        pytest.skip("no sm_80 kernels on this device")
    khat = np.fft.rfft(K, n=F.fft_len, axis=-1) / F.fft_len
    tol = {"d": 1e-13, "s": 2e-6, "h": 2e-3}[store]
    for kb in (1, 5, 11, 16):
        x = rng.standard_normal((kb, nd, F.nf)) + 1j * rng.standard_normal((kb, nd, F.nf))
        ref = np.einsum("ijf,bif->bjf", khat.conj(), x)
        for fw in _gpu.XREG_TILES[eng.store]:
            for in_dt, out_dt in ((np.complex128, np.complex128), (np.complex64, np.complex64),
                                  (np.complex64, np.complex128), (np.complex128, np.complex64)):
                la = view._launch_xreg(kb, in_dt, out_dt, fw=fw)
                out = poisoned(cp, (kb, nm, F.nf), out_dt)
                eng.apply(cp.asarray(x.astype(in_dt)), True, out_dt, out=out, plan=[la])
                got = cp.asnumpy(out)
                case = (kb, fw, in_dt, out_dt)
                assert np.isfinite(got).all(), case
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                t = tol if in_dt == out_dt == np.complex128 else max(tol, 2e-6)
                assert err < t, (case, err)


@gpu
@pytest.mark.gpu
def test_xreg_many_rows(rng):
    """More rows than 65535 blocks of XREG_ROWS: the launch takes more rows per block."""
    cp = backend.cupy
    nd, nm, nt = 2, 2_200_000, 3
    K = cp.asarray(rng.standard_normal((nd, nm, nt)))
    F = fm.BlockToeplitz(K, "ddddd")
    eng = F._engine
    if not eng.device.mma_kernels:
        pytest.skip("no sm_80 kernels on this device")
    la = planning_view(F, True).builders._launch_xreg(2, np.complex128, np.complex128)
    assert la.xreg_rows > _gpu.XREG_ROWS and la.grid[1] <= 65535
    x = cp.asarray(rng.standard_normal((2, nd, F.nf)) + 1j * rng.standard_normal((2, nd, F.nf)))
    khat = cp.fft.rfft(K, n=F.fft_len, axis=-1) / F.fft_len
    ref = cp.einsum("ijf,bif->bjf", khat.conj(), x)
    out = poisoned(cp, (2, nm, F.nf), np.complex128)
    eng.apply(x, True, np.complex128, out=out, plan=[la])
    assert bool(cp.isfinite(out).all())
    assert float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref)) < 1e-13
    del K, F, eng, khat, ref, out
    cp.get_default_memory_pool().free_all_blocks()


@gpu
@pytest.mark.gpu
def test_xreg_by_default(rng, monkeypatch):
    """The default plan of an adjoint of 17 right-hand sides over 10 sensors: 16 on this kernel
    (on sm_80 and newer), the last one on another; the operator's result matches the dense
    product with the kernel and without (xreg=0)."""
    from conftest import dense_btt, rel_err, to_numpy

    cp = backend.cupy
    set_plan(monkeypatch, "xreg", None)
    K = rng.standard_normal((10, 300, 40))
    A = dense_btt(K)
    D = rng.standard_normal((17, 10, 40))
    want = np.stack([A.T @ d.ravel() for d in D])
    for precision, tol in (("ddddd", 1e-12), ("sssss", 1e-5)):
        F = fm.BlockToeplitz(cp.asarray(K), precision)
        got = to_numpy(F.rmatmat(cp.asarray(D))).reshape(17, -1)
        assert rel_err(got.ravel(), want.ravel()) < tol
        plans = [F.plan(17, True).launches]  # what the product's executor runs
        names = [la.name for la in plans[0]]
        if F._engine.device.mma_kernels:
            assert names[0].startswith("sbgemvx_") and plans[0][0].kb == 16, names
            assert not any(n.startswith("sbgemvx_") for n in names[1:]), names
        set_plan(monkeypatch, "xreg", "0")
        G = fm.BlockToeplitz(cp.asarray(K), precision)
        got = to_numpy(G.rmatmat(cp.asarray(D))).reshape(17, -1)
        assert rel_err(got.ravel(), want.ravel()) < tol
        plans = [G.plan(17, True).launches]
        assert plans and not any(la.name.startswith("sbgemvx_") for la in plans[0])
        set_plan(monkeypatch, "xreg", None)


def test_xreg_launch_keeps_the_default_carveout(monkeypatch):
    """A launch asks for the shared-memory opt-in (and with it the largest carveout) only past
    XREG_MAX_SMEM; its arguments end with kb and the rows per block; forward is refused."""
    got = []
    monkeypatch.setattr(kernels, "get_function",
                        lambda name, shared_mem=0: got.append((name, shared_mem)) or name)
    for nd, fw, opt_in in ((12, 32, False), (12, 32, True)):
        if opt_in:  # none compiled passes 48 KB: 6 stages of the 32-frequency tile would
            monkeypatch.setitem(_gpu.XREG_TILES["c128"], 32, (2, 2, 6))
        eng = _engine(monkeypatch, store="c128", nd=nd, nf=101)
        eng._args = {}
        eng.khat_store = SimpleNamespace(
            nfp=102, strides=lambda adjoint: (64, 64 * eng.nm, 6, eng.nd * eng.nm * 64))
        la = eng._launch_xreg(16, np.complex128, np.complex128, fw=fw)
        assert (la.smem > _gpu.XREG_MAX_SMEM) is opt_in
        fn, args, reduce = Stage3Runner._launch_args(eng, la, True, eng.nm, nd, np.complex128)
        assert got[-1] == (la.name, la.smem if opt_in else 0) and reduce is None
        assert [int(a) for a in args[-2:]] == [16, la.xreg_rows]
        with pytest.raises(ValueError, match="adjoints only"):
            Stage3Runner._launch_args(eng, la, False, nd, eng.nm, np.complex128)
