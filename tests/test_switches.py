"""The GPU path's environment switches and its stage-3 kernel choice (host logic, no GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError
from fftmatvec._gpu import GRAPH_MAX_KHAT_BYTES, KernelEngine, _Launch, _split_k, _switch
from fftmatvec.precision import PrecisionConfig


@pytest.mark.parametrize("value,expected", [(None, "auto"), ("", "auto"), ("auto", "auto"),
                                            ("0", "0"), ("1", "1"), (" AUTO ", "auto")])
def test_switch_values(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("FFTMATVEC_STAGED", raising=False)
    else:
        monkeypatch.setenv("FFTMATVEC_STAGED", value)
    assert _switch("FFTMATVEC_STAGED") == expected


@pytest.mark.parametrize("name", ["FFTMATVEC_STAGED", "FFTMATVEC_CUDA_GRAPHS", "FFTMATVEC_MMA",
                                  "FFTMATVEC_ASYNC", "FFTMATVEC_FFT_CALLBACKS",
                                  "FFTMATVEC_OVERLAP"])
def test_switch_rejects_other_values(monkeypatch, name):
    monkeypatch.setenv(name, "yes")
    with pytest.raises(FFTMatvecValueError, match=name):
        _switch(name)


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
    monkeypatch.delenv("FFTMATVEC_STAGED", raising=False)
    engine = SimpleNamespace(store=store)
    assert KernelEngine._use_staged(engine, kb, n_red, adjoint) is expected
    monkeypatch.setenv("FFTMATVEC_STAGED", "0")
    assert KernelEngine._use_staged(engine, kb, n_red, adjoint) is False
    monkeypatch.setenv("FFTMATVEC_STAGED", "1")
    assert KernelEngine._use_staged(engine, kb, n_red, adjoint) is (kb == 1)


@pytest.mark.parametrize("has_mma", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("store,nd", [("c128", 1), ("c64", 100), ("c32h", 100), ("c32h", 50)])
def test_tensor_core_choice(monkeypatch, has_mma, adjoint, store, nd):
    """Tensor cores serve batches (of a storage's MMA_MIN_KB or more) forward, and adjoint in d
    and in h with 64+ reduction rows, by default; every launch with FFTMATVEC_MMA=1 (an error where the device has none);
    nothing with =0."""
    from fftmatvec._gpu import MMA_MIN_KB

    engine = SimpleNamespace(_sm80_kernels=lambda: has_mma, store=store, nd=nd)
    monkeypatch.delenv("FFTMATVEC_MMA", raising=False)
    uses = not adjoint or store == "c128" or (store == "c32h" and nd >= 64)
    expected = MMA_MIN_KB[(store, adjoint)] if has_mma and uses else None
    assert KernelEngine._mma_min_kb(engine, adjoint) == expected
    monkeypatch.setenv("FFTMATVEC_MMA", "0")
    assert KernelEngine._mma_min_kb(engine, adjoint) is None
    monkeypatch.setenv("FFTMATVEC_MMA", "1")
    if has_mma:
        assert KernelEngine._mma_min_kb(engine, adjoint) == 1
    else:
        with pytest.raises(FFTMatvecValueError, match="FFTMATVEC_MMA"):
            KernelEngine._mma_min_kb(engine, adjoint)
    monkeypatch.setenv("FFTMATVEC_MMA", "maybe")
    with pytest.raises(FFTMatvecValueError, match="FFTMATVEC_MMA"):
        KernelEngine._mma_min_kb(engine, adjoint)


@pytest.mark.parametrize("has_async", [True, False])
@pytest.mark.parametrize(
    "store,adjoint,n_out,n_red,expected",
    [
        ("c128", False, 100, 5000, False),  # d forward: the register kernel is as fast ...
        ("c128", False, 10, 100000, True),  # ... except with few outputs
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
    default; always with FFTMATVEC_ASYNC=1 (an error where the device has none); never with =0,
    for batches, or where a device has too little shared memory per block."""
    engine = SimpleNamespace(store=store, smem_per_block=227 * 1024,
                             _sm80_kernels=lambda: has_async, async_smem=lambda tile, dt: 1024)
    engine._async_default = lambda n_out, adjoint: KernelEngine._async_default(engine, n_out, adjoint)

    def use(kb=1):
        return KernelEngine._use_async(engine, kb, n_out, n_red, adjoint, in_dtype)

    if expected == "c64":  # the default only for complex64 input
        expected = in_dtype == np.complex64
    monkeypatch.delenv("FFTMATVEC_ASYNC", raising=False)
    assert use() is (expected and has_async)
    assert use(16) is False
    engine.async_smem = lambda tile, dt: 228 * 1024
    assert use() is False
    engine.async_smem = lambda tile, dt: 1024
    monkeypatch.setenv("FFTMATVEC_ASYNC", "0")
    assert use() is False
    monkeypatch.setenv("FFTMATVEC_ASYNC", "1")
    if has_async:
        assert use() is True
    else:
        with pytest.raises(FFTMatvecValueError, match="FFTMATVEC_ASYNC"):
            use()


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
    engine = SimpleNamespace(nbytes=nbytes, nm=nm, nd=nd, nt=nt)
    x = np.zeros((k, 1, 1))
    assert KernelEngine.graph_pays(engine, x) is expected


@pytest.mark.parametrize("rows,cols", [(1, 1), (5000, 2000), (3, 100000), (100000, 200), (1, 10**7)])
def test_rows_launch_fills_the_device(rows, cols):
    """Pad and unpad launch enough blocks to fill the device: long-lived blocks over many rows,
    and several blocks per row when the rows are few."""
    engine = SimpleNamespace(num_sms=132)
    (gx, gy), (bx, by) = KernelEngine._rows_launch(engine, rows, cols)
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


def _overlap_engine(nd, nm, splits, nbytes=2**31):
    """A KernelEngine's host side for overlap_plan: a forward launch of ``splits`` split-K
    slices (its rows per slice rounded like the kernels'), an adjoint one unsplit."""
    engine = KernelEngine.__new__(KernelEngine)  # no device arrays
    engine.__dict__.update(nd=nd, nm=nm, nf=11, nt=10, fft_len=20, compute=np.dtype(np.complex128),
                           overlap_chunks=4, _overlaps={}, _sm80=True)
    engine.__dict__["_mma_min_kb"] = lambda adjoint=False: None
    engine.__dict__["fused_plans"] = lambda *a, **k: ("r2c", "c2r")
    engine.__dict__["_callback_specs"] = lambda *a: None
    engine.__dict__["_forward_fft_plan"] = lambda specs, rows: ("r2c", rows)
    engine.__dict__["_inverse_fft_plan"] = lambda specs, rows: ("c2r", rows)
    engine.__dict__["xhat_dtype"] = lambda prec: np.dtype(np.complex128)

    def launch(kb, n_out, n_red, in_dtype, out_dtype, adjoint=False):
        s, per = _split_k(1 if adjoint else splits, n_red, 8)
        return _Launch("k", kb, (5, s), (32, 4), s, per)

    engine.__dict__["_launch"] = launch
    engine.__dict__["_nbytes"] = nbytes  # read by the fixture's nbytes property
    return engine


@pytest.fixture
def overlap_engine(monkeypatch):
    monkeypatch.setattr(KernelEngine, "nbytes", property(lambda self: self._nbytes))
    monkeypatch.delenv("FFTMATVEC_OVERLAP", raising=False)
    monkeypatch.delenv("FFTMATVEC_MMA", raising=False)
    return _overlap_engine


@pytest.mark.parametrize("nm,splits,chunks", [(5000, 64, 4), (5000, 7, 4), (300, 9, 2), (129, 4, 3),
                                              (1000, 3, 4)])
def test_overlap_forward_chunks_are_whole_split_slices(overlap_engine, nm, splits, chunks):
    """Forward: the chunks cover the reduction rows in order, each a run of whole split-K
    slices of the unchunked launch (so one split-K sum adds them all), each with its own FFT
    plan over its rows."""
    engine = overlap_engine(100, nm, splits)
    engine.overlap_chunks = chunks
    ov = engine.overlap_plan(PrecisionConfig("ddddd"), False, 1, np.float64, np.float64)
    total, per = _split_k(splits, nm, 8)
    assert ov.splits == total and ov.other == "c2r"
    assert 2 <= len(ov.chunks) <= chunks
    r, s = 0, 0
    for c in ov.chunks:
        assert (c.r0, c.s0) == (r, s)
        assert c.launch.red_chunk == per and c.launch.grid == (5, c.launch.splits)
        assert c.launch.splits == -(-(c.r1 - c.r0) // per)
        assert c.fft == ("r2c", c.r1 - c.r0)
        r, s = c.r1, s + c.launch.splits
    assert (r, s) == (nm, total)
    # the chunked FFT's output has room for the last chunk's scratch (complex128 here)
    assert ov.nbytes >= (nm + max(c.r1 - c.r0 for c in ov.chunks)) * 11 * 16


@pytest.mark.parametrize("nt,in_dtype,splits", [(13, np.float32, 9), (13, np.float64, 7), (20, np.float32, 5)])
def test_overlap_forward_chunks_start_aligned(overlap_engine, nt, in_dtype, splits):
    """cuFFT refuses pointers not aligned for its types: every forward chunk's input row
    (in the interface dtype) and output row (complex128 here) starts on 16 bytes."""
    engine = overlap_engine(7, 301, splits)
    engine.nt, engine.nf = nt, 13  # an odd count of complex64 values per output row
    engine.__dict__["xhat_dtype"] = lambda prec: np.dtype(np.complex64)
    ov = engine.overlap_plan(PrecisionConfig("ddhdd"), False, 1, in_dtype, np.float64)
    assert len(ov.chunks) >= 2 and ov.chunks[-1].r1 == 301
    for c in ov.chunks:
        assert c.r0 * nt * np.dtype(in_dtype).itemsize % 16 == 0
        assert c.r0 * 13 * 8 % 16 == 0


@pytest.mark.parametrize("nm,chunks,rows", [(5000, 4, 1280), (300, 2, 192), (129, 3, 64)])
def test_overlap_adjoint_chunks_of_output_rows(overlap_engine, nm, chunks, rows):
    engine = overlap_engine(100, nm, 1)
    engine.overlap_chunks = chunks
    ov = engine.overlap_plan(PrecisionConfig("ddddd"), True, 1, np.float64, np.float64)
    assert ov.other == "r2c"
    assert [(c.r0, c.r1) for c in ov.chunks] == [(r, min(nm, r + rows)) for r in range(0, nm, rows)]
    assert all(c.fft == ("c2r", c.r1 - c.r0) for c in ov.chunks)
    assert ov.nbytes >= nm * 10 * 8 + rows * 20 * 8


def test_overlap_when(overlap_engine, monkeypatch):
    """By default for one vector and a Khat over the graph threshold; never for batches, one
    slice or chunk, FFTMATVEC_OVERLAP=0, FFTMATVEC_MMA=1 or unfused products; =1 at any size."""
    prec = PrecisionConfig("ddddd")
    big = overlap_engine(100, 5000, 64)
    assert big.overlap_plan(prec, False, 1, np.float64, np.float64) is not None
    assert big.overlap_plan(prec, False, 2, np.float64, np.float64) is None
    assert overlap_engine(100, 5000, 1).overlap_plan(prec, False, 1, np.float64, np.float64) is None
    assert overlap_engine(100, 64, 1).overlap_plan(prec, True, 1, np.float64, np.float64) is None
    small = overlap_engine(100, 5000, 64, nbytes=GRAPH_MAX_KHAT_BYTES)
    assert small.overlap_plan(prec, False, 1, np.float64, np.float64) is None
    monkeypatch.setenv("FFTMATVEC_OVERLAP", "1")
    assert small.overlap_plan(prec, False, 1, np.float64, np.float64) is not None
    monkeypatch.setenv("FFTMATVEC_OVERLAP", "0")
    big._overlaps.clear()
    assert big.overlap_plan(prec, False, 1, np.float64, np.float64) is None
    monkeypatch.setenv("FFTMATVEC_OVERLAP", "auto")
    big.__dict__["_mma_min_kb"] = lambda adjoint=False: 1
    assert big.overlap_plan(prec, False, 1, np.float64, np.float64) is None
    big.__dict__["_mma_min_kb"] = lambda adjoint=False: None
    big.__dict__["fused_plans"] = lambda *a, **k: None
    big._overlaps.clear()
    assert big.overlap_plan(prec, False, 1, np.float64, np.float64) is None
