"""The GPU path's environment switches and its stage-3 kernel choice (host logic, no GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import EnvOverrides, set_plan

from fftmatvec import FFTMatvecValueError
from fftmatvec import kernels
from fftmatvec.gpu import rowfft as _rowfft
from fftmatvec.backend import shared_memory_limits
from fftmatvec.gpu import KnownCode, pipe_split_count, pipe_split_time
from fftmatvec.gpu.launches import LaunchBuilders, rows_launch
from fftmatvec.gpu.planner import Planner
from fftmatvec.gpu.stage3 import _split_k
from fftmatvec.gpu.plan import mode
from fftmatvec.gpu.rules import rules_for
from fftmatvec.precision import PrecisionConfig

_RULES = rules_for("sm_90")  # an H100's or H200's rules


@pytest.mark.parametrize("value,expected", [(None, "auto"), ("", "auto"), ("auto", "auto"),
                                            ("0", "0"), ("1", "1"), (" AUTO ", "auto")])
def test_switch_values(monkeypatch, value, expected):
    if value is None:
        set_plan(monkeypatch, "staged", None)
    else:
        set_plan(monkeypatch, "staged", value)
    assert mode(None, "staged") == expected


@pytest.mark.parametrize("name", ["staged", "graphs", "mma",
                                  "async", "fft_callbacks",
                                  "dmma_c64", "xreg"])
def test_switch_rejects_other_values(monkeypatch, name):
    set_plan(monkeypatch, name, "yes")
    with pytest.raises(FFTMatvecValueError, match=f"FFTMATVEC_PLAN: {name} must be auto, 0 or 1"):
        mode(None, name)


@pytest.mark.parametrize("store,arch,switch,expected", [
    ("c64", "sm_90", None, "c64dmma"), ("c64", "sm_80", None, "c64"),
    ("c64", "sm_100", None, "c64"), ("c64", "gfx90a", None, "c64"),
    ("c64", "sm_80", "1", "c64dmma"), ("c64", "sm_90", "0", "c64"),
    ("c64", "sm_90", "auto", "c64dmma"),
    ("c128", "sm_90", "0", "c128"), ("c128", "sm_80", "1", "c128"),
    ("c32h", "sm_90", "1", "c32h"), ("c32h", "sm_90", None, "c32h"),
])
def test_pipe_store(monkeypatch, store, arch, switch, expected):
    """Complex64 storage's batches run on FP64 tensor cores (the c64dmma kernels) on
    DMMA_C64_ARCHS by default, on TF32 elsewhere, dmma_c64 overriding; other
    storages keep their own kernels whatever the switch says."""
    from fftmatvec.gpu import DMMA_C64_ARCHS, MMA_MIN_KB, PIPE_DEFAULTS, PIPE_FEW, PIPE_TILES

    if switch is None:
        set_plan(monkeypatch, "dmma_c64", None)
    else:
        set_plan(monkeypatch, "dmma_c64", switch)
    engine = SimpleNamespace(resolved=EnvOverrides(), store=store, arch=arch, rules=rules_for(arch))
    got = LaunchBuilders.pipe_store.fget(engine)
    assert got == expected
    assert (arch in DMMA_C64_ARCHS) == (arch == "sm_90")
    for adjoint in (False, True):  # every table knows the name
        assert PIPE_DEFAULTS[(got, adjoint)] in PIPE_TILES[got]
        assert PIPE_FEW[(got, adjoint)] in PIPE_TILES[got]
        assert MMA_MIN_KB[(got, adjoint)] >= 1
    set_plan(monkeypatch, "dmma_c64", "2")
    with pytest.raises(FFTMatvecValueError, match="dmma_c64"):
        LaunchBuilders.pipe_store.fget(SimpleNamespace(resolved=EnvOverrides(), store="c64", arch=arch,
                                                      rules=rules_for(arch)))


@pytest.mark.parametrize(
    "store,kb,n_red,adjoint,expected",
    [
        ("c128", 1, 5000, False, False),  # d streams as fast unstaged
        ("c128", 1, 100, True, False),
        ("c64", 1, 5000, False, True),  # s forward: staged
        ("c64", 1, 100, True, False),
        ("c32h", 1, 5000, False, True),  # h: staged both ways ...
        ("c32h", 1, 100, True, True),
        ("c32h", 1, 10, True, False),  # ... unless the adjoint reduces over under one chunk
        ("c32h", 16, 5000, False, False),  # batches use the register-tiled kernel
    ],
)
def test_staged_choice(monkeypatch, store, kb, n_red, adjoint, expected):
    set_plan(monkeypatch, "staged", None)
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, store=store)
    assert Planner._use_staged(engine, kb, n_red, adjoint) is expected
    set_plan(monkeypatch, "staged", "0")
    assert Planner._use_staged(engine, kb, n_red, adjoint) is False
    set_plan(monkeypatch, "staged", "1")
    assert Planner._use_staged(engine, kb, n_red, adjoint) is (kb == 1)


@pytest.mark.parametrize("store", ["c128", "c64dmma", "c32h"])
@pytest.mark.parametrize("n_out,expected", [(1, None), (4, None), (5, 9), (8, 9), (9, "min"),
                                            (100, "min")])
def test_tensor_cores_forward_over_few_outputs(monkeypatch, store, n_out, expected):
    """Forward launches over at most 4 outputs stay on the GEMV kernels, over at most 8 they
    take tensor cores from 9 right-hand sides (MMA_FEW_OUT_MIN_KB); adjoints are not affected."""
    from fftmatvec.gpu import MMA_MIN_KB

    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, _sm80_kernels=lambda: True,
                             builders=SimpleNamespace(pipe_store=store), nd=n_out)
    set_plan(monkeypatch, "mma", None)
    least = MMA_MIN_KB[(store, False)]
    want = least if expected == "min" else None if expected is None else max(least, expected)
    assert Planner._mma_min_kb(engine, False, 5000, n_out) == want
    assert Planner._mma_min_kb(engine, True, 5000, n_out) == MMA_MIN_KB[(store, True)]


@pytest.mark.parametrize("has_mma", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("store,nd", [("c128", 1), ("c128", 32), ("c64", 50), ("c64", 100),
                                      ("c32h", 100), ("c32h", 50), ("c64dmma", 100)])
def test_tensor_core_choice(monkeypatch, has_mma, adjoint, store, nd):
    """Tensor cores serve batches of a storage's MMA_MIN_KB or more right-hand sides, in both
    directions and at any Nd, by default (MMA_FEW_MIN_KB over fewer than MMA_FEW_RED reduction
    rows); every launch with mma=1 (an error where the device has none); nothing with
    =0."""
    from fftmatvec.gpu import MMA_FEW_MIN_KB, MMA_FEW_RED, MMA_MIN_KB

    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, _sm80_kernels=lambda: has_mma,
                             builders=SimpleNamespace(pipe_store=store), nd=nd)
    set_plan(monkeypatch, "mma", None)
    expected = MMA_MIN_KB[(store, adjoint)] if has_mma else None
    assert Planner._mma_min_kb(engine, adjoint) == expected
    n_red = nd if adjoint else 5000
    if has_mma and n_red < MMA_FEW_RED:
        expected = MMA_FEW_MIN_KB.get((store, adjoint), expected)
    assert Planner._mma_min_kb(engine, adjoint, n_red) == expected
    if has_mma and (store, adjoint) == ("c128", True):
        assert Planner._mma_min_kb(engine, adjoint, 17) == 8
        assert Planner._mma_min_kb(engine, adjoint, 32) == 4
    set_plan(monkeypatch, "mma", "0")
    assert Planner._mma_min_kb(engine, adjoint) is None
    set_plan(monkeypatch, "mma", "1")
    if has_mma:
        assert Planner._mma_min_kb(engine, adjoint) == 1
        assert Planner._mma_min_kb(engine, adjoint, 5000, 2) == 1
    else:
        with pytest.raises(FFTMatvecValueError, match="mma"):
            Planner._mma_min_kb(engine, adjoint)
    set_plan(monkeypatch, "mma", "maybe")
    with pytest.raises(FFTMatvecValueError, match="mma"):
        Planner._mma_min_kb(engine, adjoint)


@pytest.mark.parametrize("has_async", [True, False])
@pytest.mark.parametrize(
    "store,adjoint,n_out,n_red,expected",
    [
        ("c128", False, 100, 5000, True),  # d forward (Khat in blocks of frequencies)
        ("c128", False, 10, 100000, True),  # ... and with few outputs
        ("c128", True, 5000, 100, False),
        # s: from complex128 input the staged / register kernels are as fast, except forward
        # with few outputs; from complex64 input (the fused forward FFT's) it always serves
        ("c64", False, 100, 5000, "c64"),
        ("c64", False, 16, 5000, True),
        ("c64", True, 5000, 100, "c64"),
        ("c64", True, 5000, 10, "c64"),
        ("c32h", False, 100, 5000, True),
        ("c32h", True, 5000, 100, True),
        ("c32h", True, 5000, 10, False),  # h adjoints over fewer than 32 rows: register kernel
    ],
)
@pytest.mark.parametrize("in_dtype", [np.complex128, np.complex64])
def test_async_choice(monkeypatch, has_async, store, adjoint, n_out, n_red, expected, in_dtype):
    """The cp.async kernel serves one vector where ASYNC_MIN_RED and ASYNC_FEW_ROWS say so, by
    default; always with async=1 (an error where the device has none); never with =0,
    for batches, or where a device has too little shared memory per block."""
    builders = SimpleNamespace(rules=_RULES, store=store, async_smem=lambda tile, dt: 1024,
                               async_fill=lambda *args: 1.0)
    builders._async_default = lambda *args: LaunchBuilders._async_default(builders, *args)
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, store=store, smem_per_block=227 * 1024,
                             _sm80_kernels=lambda: has_async, builders=builders)

    def use(kb=1):
        return Planner._use_async(engine, kb, n_out, n_red, adjoint, in_dtype)

    if expected == "c64":  # the default only for complex64 input
        expected = in_dtype == np.complex64
    set_plan(monkeypatch, "async", None)
    assert use() is (expected and has_async)
    assert use(16) is False
    builders.async_smem = lambda tile, dt: 228 * 1024
    assert use() is False
    builders.async_smem = lambda tile, dt: 1024
    set_plan(monkeypatch, "async", "0")
    assert use() is False
    set_plan(monkeypatch, "async", "1")
    if has_async:
        assert use() is True
    else:
        with pytest.raises(FFTMatvecValueError, match="async"):
            use()


@pytest.mark.parametrize("store,itemsize,tile,in_dtype,freqs,smem,suffix", [
    # A = J RT W (32 TY) 16 bytes, x = J (32 V W) bytes of the input, per stage, times NS
    ("c32h", 4, (4, 4, 2, 4), np.complex64, 128, 4 * (2 * 4 * 128 * 16 + 2 * 128 * 8), "_s4"),
    ("c32h", 4, (4, 4, 2, 3, 2), np.complex64, 256, 3 * (2 * 4 * 2 * 128 * 16 + 2 * 256 * 8),
     "_s3_w2"),
    ("c32h", 4, (2, 4, 2, 4, 2), np.complex128, 256, 4 * (2 * 2 * 2 * 128 * 16 + 2 * 256 * 16),
     "_s4_w2"),
    ("c128", 16, (1, 8, 8, 3), np.complex128, 32, 3 * (8 * 1 * 256 * 16 + 8 * 32 * 16), "_s3"),
])
def test_async_tile_shapes(store, itemsize, tile, in_dtype, freqs, smem, suffix):
    """The cp.async tiles' frequencies per block, shared memory (the kernel's AsyncTile::BYTES
    times NS) and entry-point names, with and without the W of two-chunk tiles."""
    engine = object.__new__(LaunchBuilders)
    engine.resolved = EnvOverrides()
    engine.store = store
    engine.data = np.empty(1, dtype={4: np.uint32, 16: np.complex128}[itemsize])
    assert engine._async_freqs(tile) == freqs
    assert engine.async_smem(tile, in_dtype) == smem
    name = engine._async_name(tile, in_dtype, np.complex128)
    assert name.startswith(f"sbgemva_{store}_") and name.endswith(suffix)


def _h200_engine(store: str, nf: int):
    engine = object.__new__(LaunchBuilders)
    engine.resolved = EnvOverrides()
    engine.store, engine.nf = store, nf
    engine.data = np.empty(1, dtype={"c32h": np.uint32, "c128": np.complex128}[store])
    engine.num_sms, engine.smem_per_sm, engine.smem_per_block = 132, 228 * 1024, 227 * 1024
    engine.threads_per_sm = 2048
    engine.rules = _RULES
    return engine


@pytest.mark.parametrize("nm,nd,nf,alt", [
    (1000, 100, 1001, True),  # 504 blocks of the default for 396 slots: 64 % filled
    (5000, 100, 1001, False),  # 2504 blocks in 7 rounds: 90 %
    (20000, 50, 501, False),  # 97 %
    (100000, 10, 101, False),
    (16, 100, 1001, True),  # too few rows to split: 48 blocks, 12 % of 396 slots or 18 % of 264
])
def test_async_fill_choice(nm, nd, nf, alt):
    """A float16 adjoint's cp.async tile: the default, unless its blocks leave most of their
    last round of slots empty and ASYNC_FILL_ALT's tile fills more of them."""
    from fftmatvec.gpu import (ASYNC_DEFAULTS, ASYNC_FEW, ASYNC_FEW_ROWS, ASYNC_FILL_ALT,
                                ASYNC_MIN_FILL)

    engine = _h200_engine("c32h", nf)
    got = engine._async_default(nm, nd, True, np.complex64)
    default, other = ASYNC_DEFAULTS[("c32h", True)], ASYNC_FILL_ALT[("c32h", True)]
    assert got == (other if alt else default)
    fill = engine.async_fill(*default, nm, nd, np.complex64)
    assert (fill < ASYNC_MIN_FILL) is alt
    assert 0 < fill <= 1
    # blocks, splits and slots as the launch makes them
    base, splits, chunk, slots = engine._async_grid(default[0], default[1], nm, nd, np.complex64)
    assert fill == pytest.approx(base * splits / (-(-base * splits // slots) * slots))
    assert splits * chunk >= nd > (splits - 1) * chunk
    # forward products and the other storages have no alternative
    fwd = ASYNC_FEW["c32h"] if nd <= ASYNC_FEW_ROWS else ASYNC_DEFAULTS[("c32h", False)]
    assert engine._async_default(nd, nm, False, np.complex64) == fwd
    engine128 = _h200_engine("c128", nf)
    assert engine128._async_default(nm, nd, True, np.complex64) == ASYNC_DEFAULTS[("c128", True)]


@pytest.mark.parametrize("nm,nd,nf,splits,unruled", [
    (1000, 100, 1001, 2, 6),  # 416 blocks fill a round: 2 splits of 504 rows, not 6 of 168
    (1500, 100, 1001, 3, 6),
    (5000, 100, 1001, 6, 6),  # 840 rows per split: as 8 rounds make it
    (20000, 50, 501, 19, 19),
    (1000, 20, 101, 18, 18),  # 12 blocks: split to fill the rounds, 56 rows each
    (1000, 40, 1001, 14, 14),  # 160 blocks, less than a round (264 slots): as the rounds ask
    (2000, 50, 501, 18, 18),
])
def test_async_split_rows(nm, nd, nf, splits, unruled):
    """A complex128 forward cp.async launch whose blocks of one split fill a round of the slots
    splits its reduction only while each split keeps ASYNC_SPLIT_ROWS rows; fewer blocks, and
    adjoints (no such rule), split as the rounds ask."""
    from fftmatvec.gpu import ASYNC_DEFAULTS, ASYNC_SPLIT_ROWS

    engine = _h200_engine("c128", nf)
    tile, waves = engine._async_default(nd, nm, False, np.complex128)
    assert (tile, waves) == ASYNC_DEFAULTS[("c128", False)]
    base, got, chunk, slots = engine._async_grid(tile, waves, nd, nm, np.complex128, False)
    assert got == splits and got * chunk >= nm > (got - 1) * chunk
    assert chunk >= ASYNC_SPLIT_ROWS[("c128", False)] or base < slots
    assert engine._async_grid(tile, waves, nd, nm, np.complex128, True)[1] == unruled


@pytest.mark.parametrize(
    "nbytes,k,nm,nd,nt,expected",
    [
        (60 * 2**20, 16, 100000, 10, 100, True),  # small Khat: always a graph
        (int(1.6e9), 1, 1000, 100, 1000, True),  # (1000, 100, 1000) complex128: 8.8 MB of vectors
        (int(1.6e9), 16, 1000, 100, 1000, False),  # ... but not 16 of them (141 MB)
        (int(1.6e9), 1, 100000, 10, 100, False),  # skinny: 80 MB of vectors
        (int(8e9), 1, 5000, 100, 1000, False),  # large Khat: the launches hide behind the GPU
    ],
)
def test_graph_choice(nbytes, k, nm, nd, nt, expected):
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, nbytes=nbytes, nm=nm, nd=nd, nt=nt)
    x = np.zeros((k, 1, 1))
    assert Planner.graph_pays(engine, x) is expected


@pytest.mark.parametrize("mode,fused,pays,expected", [
    ("auto", False, True, True),  # stage by stage at a size where a graph pays: a graph
    ("auto", True, True, False),  # a fused product: faster than its replay
    ("auto", False, False, False),  # large: the launches hide behind the device
    ("1", True, False, True),  # always
    ("0", False, True, False),  # never
])
def test_graph_replay_choice(monkeypatch, mode, fused, pays, expected):
    """By default a graph replays only the products that run stage by stage, at the sizes
    graph_pays names; graphs=1 and =0 override both (the plan's path; an executor builds the
    graph its plan names)."""
    from fftmatvec import backend

    set_plan(monkeypatch, "graphs", mode)
    monkeypatch.setattr(backend, "is_hip", lambda: False)
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, graph_pays=lambda x: pays, hip=False)
    x = np.zeros((1, 3, 4))
    assert Planner.replays(engine, x, fused) is expected


def test_plan_key_follows_the_environment(monkeypatch):
    """plan_key (kept for the FNO layer alone) reads FFTMATVEC_PLAN at the call: every
    assignment and deletion through os.environ changes it."""
    from fftmatvec.gpu.plan import ENV, plan_key

    monkeypatch.delenv(ENV, raising=False)
    assert plan_key() is None
    seen = {None}
    for value in ("row_fft=0", "row_fft=0,graphs=1", "stage3=mma"):
        monkeypatch.setenv(ENV, value)
        assert plan_key() == value and plan_key() not in seen
        seen.add(plan_key())
    monkeypatch.delenv(ENV)
    assert plan_key() is None


def test_env_reader_reads_at_each_call():
    """_env_reader (kept for the FNO layer alone) reads its mapping's get at each call."""
    from fftmatvec.gpu.plan import _env_reader

    env = {"A": "1"}
    read = _env_reader("A", environ=env)
    assert read() == "1"
    del env["A"]
    assert read() is None


def test_gpu_modules_read_no_environment():
    """Nothing in fftmatvec/gpu reads the environment but plan.py's plan_key and _env_reader
    (the FNO layer's, until it reads its settings once), and no module reaches into
    os.environ's private dict."""
    from pathlib import Path

    import fftmatvec

    for path in (Path(fftmatvec.__file__).parent / "gpu").glob("*.py"):
        text = path.read_text()
        assert "environ._data" not in text and "encodekey" not in text, path.name
        reads = text.count("os.environ")
        assert reads == (2 if path.name == "plan.py" else 0), path.name


@pytest.mark.parametrize("mode,L,prec,callbacks,expect", [
    (None, 2000, "ddddd", True, True), ("auto", 15, "ddddd", True, True),
    (None, 2000, "sdhds", True, True), (None, 2000, "sssss", True, True),
    (None, 15, "sssss", False, True),
    ("0", 2000, "ddddd", True, False), ("1", 2000, "sssss", True, True),
    (None, 2016, "ddddd", False, False),  # 1008 = 2^4 3^2 7: cuFFT
    (None, 2 * 7290, "ddddd", True, False),  # its buffers do not fit a block in float64 ...
    ("1", 2 * 7290, "sssss", True, True),  # ... in float32 they do
])
def test_row_ffts_by_length_and_switch(monkeypatch, mode, L, prec, callbacks, expect):
    """Fused products run their FFTs as the package's kernels where those take the length in
    both FFTs' precisions (by default in ROW_FFT_DTYPES, or any where cuFFT has no callbacks);
    row_fft=0 never, =1 always."""
    from fftmatvec import gpu as _gpu

    if mode is None:
        set_plan(monkeypatch, "row_fft", None)
    else:
        set_plan(monkeypatch, "row_fft", mode)
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, fft_len=L, smem_per_block=227 * 1024, _row_ffts={},
                             callbacks=lambda: (callbacks, "why"))
    engine.rules = _RULES.with_table({"row_fft_dtypes": (np.dtype(np.float64),
                                                       np.dtype(np.float32))})
    assert Planner.row_ffts(engine, PrecisionConfig(prec)) is expect
    assert Planner.row_ffts(engine, PrecisionConfig(prec)) is expect  # from the cache
    if mode is None and expect:  # a precision out of ROW_FFT_DTYPES keeps cuFFT's callbacks
        engine.rules = _RULES.with_table({"row_fft_dtypes": ()})
        engine._row_ffts.clear()
        assert Planner.row_ffts(engine, PrecisionConfig(prec)) is (not callbacks)
    set_plan(monkeypatch, "row_fft", "1")
    if _gpu.rowfft.supported(L, np.float64, 227 * 1024) or prec == "sssss":
        assert Planner.row_ffts(engine, PrecisionConfig(prec)) is True
    else:
        with pytest.raises(kernels.KernelLoadError, match=f"length {L} in float64"):
            Planner.row_ffts(engine, PrecisionConfig(prec))
    set_plan(monkeypatch, "row_fft", "yes")
    with pytest.raises(FFTMatvecValueError, match="row_fft must be auto, 0 or 1"):
        Planner.row_ffts(engine, PrecisionConfig(prec))


@pytest.mark.parametrize("mode,callbacks,rows,L,dtype,expect", [
    (None, True, 5000, 2000, np.float64, True),  # 5000 blocks of one row
    (None, True, 100, 2000, np.float64, False),  # 100 blocks: fewer than 3 rounds of 132
    (None, True, 395, 2000, np.float64, False),
    (None, True, 396, 2000, np.float64, True),  # 3 rounds
    (None, True, 500, 2000, np.float32, False),  # 250 blocks of 2 rows
    (None, True, 1000, 2000, np.float32, True),  # 500 blocks
    (None, True, 100000, 200, np.float64, True),  # blocks of 10 rows
    ("1", True, 1, 2000, np.float64, True), (None, False, 1, 2000, np.float64, True),
])
def test_row_fft_pays_where_blocks_fill_the_device(monkeypatch, mode, callbacks, rows, L, dtype,
                                                   expect):
    if mode is None:
        set_plan(monkeypatch, "row_fft", None)
    else:
        set_plan(monkeypatch, "row_fft", mode)
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, fft_len=L, num_sms=132, callbacks=lambda: (callbacks, "why"))
    assert Planner.row_fft_pays(engine, rows, np.dtype(dtype)) is expect


def test_row_fft_line(monkeypatch):
    from fftmatvec import gpu as _gpu

    def line(gpu, value="auto"):
        return _gpu.row_fft_line(gpu, overrides=_gpu.Overrides.resolve({"row_fft": value}))

    assert line(False) == "no GPU"
    assert line(True).startswith("stages 1+2 and 4+5 as the package's own FFT")
    assert _gpu.row_fft_line(True) == line(True)  # no overrides: the built-in rules
    assert line(True, "0").startswith("off (row_fft=0)")
    assert "any precision" in line(True, "1")


@pytest.mark.parametrize("rows,cols", [(1, 1), (5000, 2000), (3, 100000), (100000, 200), (1, 10**7)])
def test_rows_launch_fills_the_device(rows, cols):
    """Pad and unpad launch enough blocks to fill the device: long-lived blocks over many rows,
    and several blocks per row when the rows are few."""
    (gx, gy), (bx, by) = rows_launch(rows, cols, 132)
    assert bx * by == 256 and 32 <= bx <= 256
    assert gx <= 8 * 132 and gx * by >= min(rows, 8 * 132 * by)
    assert 1 <= gy <= 65535 and gx * gy <= 8 * 132
    if rows * cols >= 8 * 132 * 256 * 4:  # work for a full device: it gets one
        assert gx * gy >= 8 * 132 // 2


@pytest.mark.parametrize("splits,n_red,step", [(1, 100, 32), (3, 100, 32), (8, 5000, 2),
                                               (264, 100000, 8), (5, 7, 4), (4, 3, 1)])
def test_split_k_rounds_to_whole_chunks(splits, n_red, step):
    """Split-K chunks are whole multiples of the kernel's step, none of them empty."""
    got, chunk = _split_k(splits, n_red, step)
    assert chunk % step == 0 and 1 <= got <= splits
    assert (got - 1) * chunk < n_red <= got * chunk


@pytest.mark.parametrize("base,resident,n_red,step,max_splits", [
    (32, 132, 20000, 4, 625), (126, 132, 5000, 4, 156), (504, 132, 5000, 4, 156),
    (7, 132, 100000, 4, 3125), (5024, 132, 100, 4, 3), (1, 1, 40, 4, 1)])
@pytest.mark.parametrize("model", [(0.25, 20.0, 0.85), (0.16, 0.0, 1.1), (1.0, 0.0, 0.0)])
def test_pipe_split_count_minimises_the_model(base, resident, n_red, step, max_splits, model):
    """The tensor-core launches' split-K count is the model's best over every allowed count
    (up to the 64 rounds of blocks past which it stops looking), and stays in range."""
    partial = 16 * 100 * 1001 * 8
    got = pipe_split_count(base, resident, n_red, step, max_splits, partial, model)
    assert 1 <= got <= max_splits
    splits, chunk = _split_k(got, n_red, step)
    assert splits == got
    t_got = pipe_split_time(got, chunk, base, resident, partial, model)
    top = min(max_splits, -(-64 * resident // base))
    for want in range(1, top + 1):
        s, c = _split_k(want, n_red, step)
        assert t_got <= pipe_split_time(s, c, base, resident, partial, model) * (1 + 1e-9)


def test_pipe_split_count_prefers_whole_rounds():
    """Rows alone (no partial sums, no fill): 32 blocks a split on 132 slots take 4 splits
    (one round, 97 % full) over 5 (two rounds, the second nearly empty)."""
    model = (1.0, 0.0, 0.0)
    t4 = pipe_split_time(4, 5000, 32, 132, 0, model)
    t5 = pipe_split_time(5, 4000, 32, 132, 0, model)
    assert t4 < t5
    assert pipe_split_count(32, 132, 20000, 4, 4, 0, model) == 4
    # partial sums that cost more than the rows keep the reduction whole
    assert pipe_split_count(32, 132, 20000, 4, 625, 10**9, (1.0, 0.0, 1e3)) == 1


@pytest.mark.parametrize("regs,threads,smem,expected", [
    (168, 256, 98304, 1),   # registers: 12 warps fit, a block has 8
    (64, 256, 98304, 2),    # shared memory: two blocks of 96 KB (and 1 KB each reserved)
    (0, 256, 98304, 2),     # registers unknown: left out
    (32, 1024, 0, 2),       # threads
    (128, 512, 49152, 1),   # 512 threads x 128 registers fill the register file
    (255, 32, 0, 8),        # one warp of 255 registers (256 allocated): 8 of them
])
def test_resident_blocks(regs, threads, smem, expected):
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, smem_per_sm=228 * 1024, threads_per_sm=2048, regs_per_sm=65536,
                             device=SimpleNamespace(code=KnownCode(regs={"k": regs})))
    engine.kernel_regs = lambda name: LaunchBuilders.kernel_regs(engine, name)
    assert LaunchBuilders.resident_blocks(engine, "k", threads, smem) == expected


def test_pipe_split_count_caps_the_rows_of_a_split():
    """A cap on the rows of a split raises the count to ceil(n_red / cap) at least, unless the
    reduction is too short for that many splits."""
    model = (0.15, 0.0, 1.1)
    assert pipe_split_count(126, 132, 20000, 4, 625, 16 * 50 * 501 * 16, model) == 1
    got = pipe_split_count(126, 132, 20000, 4, 625, 16 * 50 * 501 * 16, model, max_rows=2048)
    assert got >= 10 and _split_k(got, 20000, 4)[1] <= 2048
    assert pipe_split_count(126, 132, 20000, 4, 3, 0, model, max_rows=2048) <= 3


@pytest.mark.parametrize("store", ["c128", "c64", "c32h", "c64dmma"])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("nd", [1, 10, 16, 17, 100])
def test_pipe_tile_for_few_rows(store, adjoint, nd):
    """Forward products with at most PIPE_FEW_ROWS outputs, and adjoints over at most that many
    rows, take the 16-row tile with a split-K by rounds; the rest the default tile and the
    fitted model. Every tile chosen is compiled."""
    from fftmatvec.gpu import PIPE_DEFAULTS, PIPE_FEW, PIPE_FEW_ROWS, PIPE_FEW_WAVES, PIPE_TILES

    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, pipe_store=store)
    n_out, n_red = (5000, nd) if adjoint else (nd, 5000)
    tile, waves = LaunchBuilders._pipe_tile(engine, n_out, n_red, adjoint)
    few = nd <= PIPE_FEW_ROWS
    if few:
        assert tile == PIPE_FEW[(store, adjoint)] and waves == PIPE_FEW_WAVES
        assert 16 * tile[0] * tile[2] == 16  # rows of a block: one MMA tile of 16
    else:
        assert tile == PIPE_DEFAULTS[(store, adjoint)] and waves is None
    assert tile in PIPE_TILES[store]


@pytest.mark.parametrize("shape, adjoint, wide", [
    ((100, 5000, 1000), False, True), ((100, 5000, 1000), True, True),
    ((50, 20000, 500), False, True), ((50, 20000, 500), True, True),
    ((100, 1000, 1000), False, True), ((100, 1000, 1000), True, True),
    ((50, 20000, 100), False, True),  # Nf = 101 fills 0.79 of one 128-frequency span
    ((10, 100000, 100), True, True),
    ((10, 100000, 100), False, False),  # 10 outputs
    ((20, 1000, 100), False, False),  # 3 row tiles, 31 splits at most: 93 blocks
    ((20, 1000, 100), True, False),  # 125 blocks, 20 reduction rows: no split
    ((15, 289, 10), True, False),  # Nf = 11 fills 0.09 of the span
    ((60, 20000, 70), False, False),  # Nf = 71: 0.55
])
def test_wide_tile_choice(shape, adjoint, wide):
    """One complex128 vector takes the wide GEMV tile where its frequencies fill the blocks'
    spans and its blocks, split, fill the device once; small and skinny products keep the tile
    of one group. Other storages and batches never take it by default."""
    from fftmatvec.gpu import WIDE_DEFAULTS, WIDE_TILES

    nd, nm, nt = shape
    n_out, n_red = (nm, nd) if adjoint else (nd, nm)
    engine = SimpleNamespace(resolved=EnvOverrides(), rules=_RULES, store="c128", nf=nt + 1, num_sms=132)
    engine._gemv_blocks = lambda *a: LaunchBuilders._gemv_blocks(engine, *a)
    got = LaunchBuilders._wide_default(engine, 1, n_out, n_red, adjoint)
    assert (got is not None) == wide
    if wide:
        assert got == WIDE_DEFAULTS[("c128", adjoint)] and got[0] in WIDE_TILES["c128"]
    assert LaunchBuilders._wide_default(engine, 2, n_out, n_red, adjoint) is None
    for store in ("c64", "c32h"):
        engine.store = store
        assert LaunchBuilders._wide_default(engine, 1, n_out, n_red, adjoint) is None


def test_packed_launch_argument_block(monkeypatch):
    """The packed argument block holds each argument at its width and each call's pointers in
    the open slots (read back as the driver would), with grid and block padded to 3-D."""
    import ctypes

    from fftmatvec import backend, kernels

    launched = []

    class FakeArray:
        def __init__(self, ptr):
            self.data = SimpleNamespace(ptr=ptr)

    def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        p = (ctypes.c_void_p * 6).from_address(params)
        read = [ctypes.c_uint64.from_address(p[0]).value, ctypes.c_uint64.from_address(p[1]).value,
                ctypes.c_uint64.from_address(p[2]).value, ctypes.c_int64.from_address(p[3]).value,
                ctypes.c_int32.from_address(p[4]).value, ctypes.c_double.from_address(p[5]).value]
        launched.append(((f, gx, gy, gz, bx, by, bz, smem, stream, extra), read))

    fake = SimpleNamespace(ndarray=FakeArray, cuda=SimpleNamespace(driver=SimpleNamespace(
        launchKernel=launch)))
    monkeypatch.setattr(backend, "cupy", fake)
    fn = SimpleNamespace(ptr=77)
    la = kernels.PackedLaunch(fn, (5, 2), (32,), 1024,
                              (FakeArray(0xABC0), None, None, np.int64(-3), np.int32(7),
                               np.float64(0.5)))
    la(99, 2**40 + 8, 16)
    la(98, 24, 2**63 + 1)
    assert launched[0] == ((77, 5, 2, 1, 32, 1, 1, 1024, 99, 0), [0xABC0, 2**40 + 8, 16, -3, 7, 0.5])
    assert launched[1] == ((77, 5, 2, 1, 32, 1, 1, 1024, 98, 0), [0xABC0, 24, 2**63 + 1, -3, 7, 0.5])
    with pytest.raises(TypeError, match="takes 2 pointers, got 1"):
        la(99, 8)
    for bad in (3, 2.5, np.float16(1), np.zeros(2)):
        with pytest.raises(TypeError, match="NumPy scalar"):
            kernels.PackedLaunch(fn, (1,), (32,), 0, (bad,))


@pytest.mark.parametrize("arch,mma,dmma,xreg,expected", [
    (None, None, None, None, "no GPU"),
    ("gfx90a", None, None, None, "GEMV kernels (the tensor-core ones need NVIDIA sm_80 or newer)"),
    ("sm_75", "1", None, None, "GEMV kernels (the tensor-core ones need NVIDIA sm_80 or newer)"),
    ("sm_90", "0", None, None, "GEMV kernels (mma=0)"),
    ("sm_90", None, None, None, "batches of 4 to 16 right-hand sides or more (forward over at "
                                "most 4 sensors never, over at most 8 sensors from 9), by "
                                "storage and direction: d DMMA, s DMMA, h TF32; adjoints over "
                                "at most 12 sensors with the input in registers, from c128 3, "
                                "c64 3, c32h 3 right-hand sides (c128 4, c64 4 over more than 4 "
                                "sensors on the GEMV kernels)"),
    ("sm_90", "1", "0", None, "every launch (mma=1): d DMMA, s 3xTF32, h TF32;"),
    ("sm_80", None, None, None, "by storage and direction: d DMMA, s 3xTF32, h TF32;"),
    ("sm_100", None, "1", None, "by storage and direction: d DMMA, s DMMA, h TF32;"),
    ("sm_90", None, None, "0", "h TF32; adjoints with the input in registers off "
                               "(xreg=0)"),
    ("sm_90", None, None, "1", "with the input in registers, every launch (xreg=1)"),
])
def test_batch_kernels_line(monkeypatch, arch, mma, dmma, xreg, expected):
    """``fftmatvec info`` names the batches' kernels as the engine picks them."""
    from fftmatvec.gpu import Overrides, batch_kernels

    overrides = Overrides.resolve({name: value for name, value in (
        ("mma", mma), ("dmma_c64", dmma), ("xreg", xreg)) if value is not None})
    line = batch_kernels(arch, overrides)
    assert expected in line
    if expected == "no GPU" or expected.startswith("GEMV"):
        assert line == expected


# CuPy's getDeviceProperties: the CUDA build's keys (an H200), and the ROCm build's, which has no
# sharedMemPerMultiprocessor, sharedMemPerBlockOptin or regsPerMultiprocessor (an MI250X GCD)
H200_PROPS = {"name": b"NVIDIA H200", "sharedMemPerBlock": 48 * 1024,
              "sharedMemPerMultiprocessor": 228 * 1024, "sharedMemPerBlockOptin": 227 * 1024,
              "multiProcessorCount": 132}
MI250X_PROPS = {"name": b"", "sharedMemPerBlock": 64 * 1024,
                "maxSharedMemoryPerMultiProcessor": 64 * 1024,
                "gcnArchName": b"gfx90a:sramecc+:xnack-", "multiProcessorCount": 110}


@pytest.mark.parametrize("props,expected", [
    (H200_PROPS, (228 * 1024, 227 * 1024)),
    (MI250X_PROPS, (64 * 1024, 64 * 1024)),
    ({"multiProcessorCount": 108}, (228 * 1024, 227 * 1024)),  # neither: an H100's
])
def test_shared_memory_limits(props, expected):
    assert shared_memory_limits(props) == expected


def test_row_ffts_fit_an_amd_block():
    """On AMD the row FFT kernels take only the lengths whose two buffers fit 64 KB: float64
    L = 2000 (32 KB), not L = 5000 (80 KB), which the CUDA defaults would have let through."""
    _, per_block = shared_memory_limits(MI250X_PROPS)
    assert _rowfft.supported(2000, np.float64, per_block)
    assert not _rowfft.supported(5000, np.float64, per_block)
    assert _rowfft.supported(5000, np.float32, per_block)
    assert _rowfft.supported(5000, np.float64, shared_memory_limits(H200_PROPS)[1])


class _FakeFunction:
    """A loaded kernel (its class has a RawKernel's attribute properties) that records each
    attribute set; ``fail``: setting one raises, as CuPy's ROCm builds do."""

    ptr = 1
    max_dynamic_shared_size_bytes = preferred_shared_memory_carveout = 0

    def __init__(self, fail: bool):
        object.__setattr__(self, "fail", fail)
        object.__setattr__(self, "set", [])

    def __setattr__(self, name, value):
        if self.fail:
            raise RuntimeError("hipErrorUnknown")
        self.set.append((name, value))


def _fake_cupy(props):
    runtime = SimpleNamespace(getDeviceProperties=lambda dev: props)
    cuda = SimpleNamespace(Device=lambda: SimpleNamespace(id=0), runtime=runtime)
    return SimpleNamespace(cuda=cuda)


@pytest.mark.parametrize("hip", [True, False])
def test_dynamic_shared_memory_on_rocm(monkeypatch, hip):
    """On ROCm a kernel's dynamic shared memory is checked against what a block may use and
    not opted into (CuPy's ROCm builds fail every function-attribute call); on CUDA it is
    opted into, as before."""
    fn = _FakeFunction(fail=hip)
    module = SimpleNamespace(get_function=lambda name: fn)
    monkeypatch.setattr(kernels.backend, "cupy", _fake_cupy(MI250X_PROPS if hip else H200_PROPS))
    monkeypatch.setattr(kernels.backend, "is_hip", lambda: hip)
    monkeypatch.setattr(kernels, "_load_module", lambda name: module)
    monkeypatch.setattr(kernels, "_functions", {})
    monkeypatch.setattr(kernels, "_shared_mem", {})
    if hip:
        assert kernels.get_function("rfft_pad_x", 32 * 1024) is fn
        assert kernels.get_function("rfft_pad_x", 64 * 1024) is fn
        assert fn.set == []
        with pytest.raises(kernels.KernelLoadError, match=r"'big' asks for 65537 bytes.*65536"):
            kernels.get_function("big", 64 * 1024 + 1)
    else:
        assert kernels.get_function("rfft_pad_x", 32 * 1024) is fn
        assert fn.set == [("max_dynamic_shared_size_bytes", 32 * 1024),
                          ("preferred_shared_memory_carveout", 100)]


@pytest.mark.parametrize("dtype,per_block,expected", [
    (np.float64, 227 * 1024, 14400), (np.float32, 227 * 1024, 28800),
    (np.float64, 64 * 1024, 4050), (np.float32, 64 * 1024, 8100), (np.float64, 16, 0)])
def test_longest_row_fft_length(dtype, per_block, expected):
    """The longest length the row FFT kernels take within a block's shared memory: it fits and
    is taken, and no longer even length is."""
    got = _rowfft.longest_length(dtype, per_block)
    assert got == expected
    if got:
        assert _rowfft.supported(got, dtype, per_block)
    assert not any(_rowfft.supported(L, dtype, per_block) for L in range(got + 2, got + 400, 2))


def test_row_fft_line_names_the_longest_lengths(monkeypatch):
    from fftmatvec import gpu as _gpu

    set_plan(monkeypatch, "row_fft", None)
    line = _gpu.row_fft_line(True, 64 * 1024)
    assert "up to L = 4050 in float64, 8100 in float32" in line
    assert "up to" not in _gpu.row_fft_line(True)


@pytest.mark.parametrize("hip", [True, False])
def test_device_description_on_each_vendor(monkeypatch, hip):
    """What ``fftmatvec info`` says of a GPU, from CuPy's properties of each build: the AMD
    architecture from ``gcnArchName`` without its feature flags, and the shared memory the
    engine sizes its launches by."""
    from fftmatvec import backend

    props = dict(MI250X_PROPS if hip else H200_PROPS, totalGlobalMem=64 * 2**30,
                 warpSize=64 if hip else 32)
    fake = _fake_cupy(props)
    fake.cuda.Device = lambda i=None: SimpleNamespace(id=0, compute_capability="90")
    monkeypatch.setattr(backend, "cupy", fake)
    monkeypatch.setattr(backend, "is_hip", lambda: hip)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    backend.device_arch.cache_clear()
    try:
        desc = backend.device_description()
    finally:
        backend.device_arch.cache_clear()
    assert desc["vendor"] == ("AMD" if hip else "NVIDIA")
    assert desc["arch"] == ("gfx90a" if hip else "sm_90")
    assert desc["shared_memory_kib"] == ("64 per multiprocessor, 64 per block" if hip
                                         else "228 per multiprocessor, 227 per block")
