"""The FNO layer's bias added by the synthesis's kernels (fftmatvec/fno/_dft.py: kernel_bias,
PairedChain.end_bias): the inverse row and plane kernels with a bias against the float64
transform of the modes with the bias on their constant mode, and the layer on every path
(eager, CUDA graphs of the whole chain or of its middle, bound ends, the fast paths and the
layer's memo after in-place updates, training then evaluation, no bias, a bias the kernels do
not take, CuPy) against the dense float64 reference, so that a bias added twice, or never, is
seen. Without a GPU, the chain's rule runs with a stand-in kernel on the CPU, and the bound
ends' launches with stand-in kernels that refuse a pointer too many or too few."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import backend
from fftmatvec.fno import _dft, _reference, _rows, kept_modes

from fno_oracle import clear_chains as _clear_chains
from fno_oracle import dense_reference, rand_case
from fno_oracle import plane_c2r as _plane_c2r

gpu = pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")


@pytest.fixture(autouse=True)
def _end_bias_rule(monkeypatch):
    """The rule on (:data:`fftmatvec.fno._plan.FNO_END_BIAS`), whatever its default: these
    tests are of the kernels that add the bias; the chains built under another setting
    dropped before and after."""
    from fftmatvec.fno import _plan as rules

    monkeypatch.setattr(rules, "FNO_END_BIAS", True)
    _clear_chains()
    yield
    _clear_chains()


def _case(rng, shape, cout, n_modes):
    """A random case ``(x, w, b)`` (float64, complex128) whose bias is as large as the
    spectral part of the output: a bias added twice or never moves the output by about its
    size."""
    x, w, _ = rand_case(rng, shape, cout, n_modes)
    scale = dense_reference(x, w, n_modes, np.zeros(cout)).std()
    return x, w, scale * rng.standard_normal(cout)


def _err(got, want) -> float:
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max() / np.abs(want).max())


def _spy_modes_step(monkeypatch):
    """The biases :func:`fftmatvec.fno._dft.modes_step` is handed from now (None: the
    synthesis's kernel adds it, or there is none)."""
    seen, real = [], _dft.modes_step

    def spy(ops, chain, X, W, bias):
        seen.append(bias)
        return real(ops, chain, X, W, bias)

    monkeypatch.setattr(_dft, "modes_step", spy)
    return seen


# ------------------------------------------------- the chain's rule, with a stand-in kernel --

class _Synthesis:
    """A stand-in on the CPU for a paired chain's row kernel of the synthesis (``A``, the
    paired modes ``(m, 2 rows)`` to rows ``(rows, n)``): the float64 product, ``bias[r % O]``
    added to the real part of bin 0 of row ``r`` as the kernels add it; the biases it was
    handed in ``got``; it takes a bias where ``takes`` says so."""

    bias_mode = 0

    def __init__(self, n, m, takes=True):
        self.A, self.m, self.takes, self.got = _dft.synthesis_last(n, m), m, takes, []
        self.shape = (2 * m, n)

    def takes_bias(self, bias):
        return self.takes and getattr(bias, "ndim", 0) == 1

    def __call__(self, T, out=None, bias=None):
        self.got.append(bias)
        torch_in = type(T).__module__.startswith("torch")
        t = T.numpy() if torch_in else T
        s = t.reshape(self.m, -1, 2)
        re, im = s[..., 0].T.copy(), s[..., 1].T.copy()  # (rows, m)
        if bias is not None:
            b = bias.numpy() if torch_in else bias
            re[:, 0] += b[np.arange(re.shape[0]) % b.shape[0]]
        y = np.concatenate([re, im], axis=1) @ self.A
        if torch_in:
            import torch

            return torch.from_numpy(y)
        return y


@pytest.mark.parametrize("takes", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_chain_hands_the_bias_to_its_synthesis_kernel(rng, monkeypatch, takes, with_bias):
    """A paired chain whose synthesis is a kernel that takes the bias hands it the bias and
    leaves the modes without it; one that does not take it (or no bias) leaves the bias to the
    channel product: the output is the dense float64 reference's either way (once, not
    twice)."""
    shape, cout, n_modes = (3, 4, 24), 5, 13
    x, w, b = _case(rng, shape, cout, n_modes)
    b = b if with_bias else None
    (m,) = kept_modes(n_modes)
    kernel = _Synthesis(shape[-1], m, takes)
    chain = _dft.PairedChain(_reference._xp_ops(np, np.dtype(np.float64)), shape[2:], (m,),
                             last_axis={"A": kernel})
    assert chain.end_bias
    seen = _spy_modes_step(monkeypatch)
    wmm = np.ascontiguousarray(w.transpose(2, 0, 1))
    y, _ = _dft.forward(chain._ops, chain, x, wmm, b)
    want = dense_reference(x, w, n_modes, np.zeros(cout) if b is None else b)
    assert y.dtype == np.float64 and _err(y, want) < 1e-12
    moved = with_bias and takes
    assert (kernel.got[-1] is b) if moved else kernel.got[-1] is None
    assert seen[-1] is (None if moved else b)


def test_end_bias_rule_off(rng, monkeypatch):
    """With the rule off (:data:`fftmatvec.fno._plan.FNO_END_BIAS`) a chain whose synthesis's
    kernel takes the bias leaves it to the channel product: the kernel is handed none, the
    output the dense float64 reference's."""
    from fftmatvec.fno import _plan as rules

    monkeypatch.setattr(rules, "FNO_END_BIAS", False)
    shape, cout, n_modes = (3, 4, 24), 5, 13
    x, w, b = _case(rng, shape, cout, n_modes)
    (m,) = kept_modes(n_modes)
    kernel = _Synthesis(shape[-1], m)
    chain = _dft.PairedChain(_reference._xp_ops(np, np.dtype(np.float64)), shape[2:], (m,),
                             last_axis={"A": kernel})
    assert not chain.end_bias and _dft.kernel_bias(chain, b) is None
    seen = _spy_modes_step(monkeypatch)
    y, _ = _dft.forward(chain._ops, chain, x, np.ascontiguousarray(w.transpose(2, 0, 1)), b)
    assert _err(y, dense_reference(x, w, n_modes, b)) < 1e-12
    assert kernel.got[-1] is None and seen[-1] is b


@pytest.mark.parametrize("contiguous", [True, False])
def test_torch_chain_hands_the_bias_to_its_synthesis_kernel(rng, monkeypatch, contiguous):
    """The PyTorch chain's steps (:func:`fftmatvec.fno._torch_dft.forward_chain`, the middle
    and the ends a graph splits) agree on who adds the bias: the synthesis's kernel where it
    takes it (a contiguous bias, read in place: its address), else the middle; the output is
    the dense float64 reference's."""
    torch = pytest.importorskip("torch")
    from fftmatvec.fno import _torch_dft

    shape, cout, n_modes = (2, 3, 20), 4, 9
    x, w, b = _case(rng, shape, cout, n_modes)
    (m,) = kept_modes(n_modes)
    kernel = _Synthesis(shape[-1], m)
    chain = _dft.PairedChain(_torch_dft._ops(torch.float64, torch.device("cpu")), shape[2:],
                             (m,), last_axis={"A": kernel})
    bt = torch.as_tensor(b)
    if not contiguous:
        bt = torch.as_tensor(np.repeat(b, 2))[::2]
    assert torch.equal(bt, torch.as_tensor(b))
    seen = _spy_modes_step(monkeypatch)
    y, _ = _torch_dft.forward_chain(torch.as_tensor(x), torch.as_tensor(w), bt, chain,
                                    torch.float64)
    assert y.dtype == torch.float64
    assert _err(y.numpy(), dense_reference(x, w, n_modes, b)) < 1e-12
    if contiguous:
        assert kernel.got[-1].data_ptr() == bt.data_ptr() and seen[-1] is None
        assert _torch_dft.end_bias(chain, bt) is not None
    else:
        assert kernel.got[-1] is None and seen[-1] is not None
        assert _torch_dft.end_bias(chain, bt) is None


def test_chains_without_a_synthesis_kernel_keep_the_bias():
    """The GEMM chains, and a paired chain whose synthesis is a GEMM or that keeps no constant
    mode (an odd axis keeping fewer than 3 modes), add the bias themselves."""
    ops = _reference._xp_ops(np, np.dtype(np.float64))
    b = np.ones(3)
    assert not _dft.Chain(ops, (12, 10), (6, 8)).end_bias
    assert not _dft.SplitChain(ops, (16,), (8,)).end_bias
    assert not _dft.PairedChain(ops, (16,), (8,)).end_bias
    assert _dft.kernel_bias(_dft.PairedChain(ops, (16,), (8,)), b) is None
    no_constant = _dft.PairedChain(ops, (9, 16), (2, 8))
    assert no_constant.bias_mode is None and not no_constant.end_bias


class _EndKernel:
    """A stand-in on the CPU for a chain's end kernel on the bound launches' path: its
    launches take as many pointers as the real kernel's packed arguments leave open (the two
    arrays', and the bias's where it takes one: :attr:`._rows.LastAxis.bias_args`, read by
    the package's own ``_bias_args``) and refuse any other count, as
    :class:`fftmatvec.kernels.PackedLaunch` does; the pointers of each launch in
    ``launched``."""

    bias_mode = 0
    _bias_ptr = _rows.LastAxis._bias_ptr

    def __init__(self, kind, bias_args, width):
        self.kind, self.bias_args, self.shape, self.launched = kind, bias_args, (width, width), []

    def takes_bias(self, bias):
        return self.bias_args is not None and getattr(bias, "ndim", 0) == 1

    def _launch(self, rows, channels=1):
        slots = 2 + sum(a is None for a in _rows.LastAxis._bias_args(self, channels))

        def launch(stream, *ptrs):
            if len(ptrs) != slots:
                raise TypeError(f"this launch takes {slots} pointers, got {len(ptrs)}")
            self.launched.append(ptrs)

        return launch

    def _rows_of(self, a):
        return a.numel() // self.shape[0]

    def _out_shape(self, rows):
        return (rows, self.shape[1])


class _Entry:
    """A stand-in for a captured graph whose ends run outside it (:class:`._graphs.Captured`):
    its buffers, and ``run_between`` without the replay."""

    def __init__(self, buf_in, buf_out):
        self.inputs, self.outputs = (buf_in,), (buf_out,)

    def run_between(self, before, after):
        return None if before() is False else after()


@pytest.mark.parametrize("bias_args", ["rows", "plane", None])
@pytest.mark.parametrize("with_bias", [True, False])
def test_bound_ends_hand_each_launch_its_pointers(monkeypatch, bias_args, with_bias):
    """The ends of a replay bound as launches (:func:`fftmatvec.fno._torch_dft.bound_ends`,
    the graphs' in training; :class:`~fftmatvec.fno._torch_dft.BoundEnds`, the forward's
    fast path, and its training form) hand the synthesis's launch the pointers its kernel
    takes: the arrays', and the bias's where the kernel takes one (0 without a bias), none
    where it takes none (the planes' pass form). On the CPU, with stand-in kernels: no GPU
    test is needed to see a pointer too many."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from fftmatvec.fno import _torch_dft

    monkeypatch.setattr(_rows, "_raw_stream", lambda torch, device: 0)
    runtime = SimpleNamespace(setDevice=lambda index: None)
    monkeypatch.setattr(backend, "cupy", SimpleNamespace(cuda=SimpleNamespace(runtime=runtime)))
    n, O = 8, 2
    first, last = _EndKernel("r2c", None, n), _EndKernel("c2r", bias_args, n)
    x = torch.randn(3, O, n)
    bias = torch.randn(O) if with_bias else None
    buf_in, buf_out = torch.empty(3 * O, n), torch.empty(3 * O, n)
    takes = bias_args is not None
    want_bias = (bias.data_ptr() if with_bias else 0,) if takes else ()

    start, end = _torch_dft.bound_ends(torch, (first, last), x, x.shape, bias)
    start(buf_in)
    y = end(buf_out)
    assert tuple(y.shape) == tuple(x.shape)
    assert first.launched == [(x.data_ptr(), buf_in.data_ptr())]
    assert last.launched == [(buf_out.data_ptr(), y.data_ptr()) + want_bias]

    chain = SimpleNamespace(forward_ends=(first, last), bias_mode=0, end_bias=True,
                            _kernels={"A": last})
    bound = _torch_dft.BoundEnds.of(torch, _Entry(buf_in, buf_out), chain, torch.float32,
                                    x.shape, x, bias)
    assert bound is not None
    y = bound(torch, x, bias)
    assert tuple(y.shape) == tuple(x.shape)
    assert first.launched[-1] == (x.data_ptr(), buf_in.data_ptr())
    assert last.launched[-1] == (buf_out.data_ptr(), y.data_ptr()) + want_bias
    y, lent = bound.train(torch, x, bias, None, 0)  # a training call's, nothing lent
    assert tuple(y.shape) == tuple(x.shape) and lent is None
    assert first.launched[-1] == (x.data_ptr(), buf_in.data_ptr())
    assert last.launched[-1] == (buf_out.data_ptr(), y.data_ptr()) + want_bias


# ------------------------------------------------------------------- the kernels (CuPy) --

def _rows_in_layout(s, layout, m):
    """The rows' spectral side ``s`` ``(rows, 2m)`` in ``layout``: rows (False), split
    ``(2m, rows)`` (True), paired ``(m, 2 rows)``."""
    if layout == "paired":
        return s.reshape(-1, 2, m).transpose(2, 0, 1).reshape(m, -1)
    return s.T if layout else s


ROW_FORMS = [("passes", 96, 11), ("passes", 45, 23), ("warp", 128, 17), ("warp", 256, 129),
             ("columns", 1024, 21), ("columns", 4096, 33)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("layout", [False, True, "paired"])
@pytest.mark.parametrize("variant,L,m", ROW_FORMS)
@pytest.mark.parametrize("name", ["A", "FT"])
def test_row_kernels_add_the_bias_to_bin_0(rng, name, variant, L, m, layout):
    """The inverse row kernels (both of the chain's: the synthesis and the analysis's adjoint,
    with its scales) in every form and layout, with a bias of O values: the float64 matrix
    they replace applied to the bins with ``bias[r % O]`` on the real part of bin 0 of row
    ``r`` (before the scales), every element of a poisoned output; without one, the plain
    transform."""
    from fftmatvec.fno import _rows

    cp = backend.cupy
    t = _rows.last_axis_set(L, m, cp.cuda.Device().id, kinds=("c2r",), modes_major=layout,
                            variant=variant)[name]
    assert t.variant == variant and t.bias_mode == 0
    M = {"A": _dft.synthesis_last(L, m), "FT": _dft.analysis_last(L, m).T}[name]
    for O, rows in ((1, 1), (3, 9), (7, 301)):
        s = rng.standard_normal((rows, 2 * m))
        b = rng.standard_normal(O)
        bias = cp.asarray(b, dtype=np.float32)
        assert t.takes_bias(bias)
        sb = s.copy()
        sb[:, 0] += b[np.arange(rows) % O]
        a = cp.asarray(_rows_in_layout(s, layout, m), dtype=np.float32)
        for given, want in ((bias, sb @ M), (None, s @ M)):
            out = cp.full((rows, L), np.nan, dtype=np.float32)
            got = t(a, out=out, bias=given)
            assert got is out and got.dtype == np.float32
            err = _err(cp.asnumpy(got), want)
            assert err < 2e-6 * max(1.0, np.log2(L)), (name, variant, L, m, rows, err)


@gpu
@pytest.mark.gpu
def test_row_kernels_check_the_bias():
    """A bias of the wrong dtype, layout, size or device, or given to a forward transform, is
    refused before any launch."""
    from fftmatvec.fno import _rows

    cp = backend.cupy
    ts = _rows.last_axis_set(64, 9, cp.cuda.Device().id, modes_major="paired")
    a = cp.zeros((9, 2 * 6), dtype=np.float32)
    ok = cp.ones(3, dtype=np.float32)
    ts["A"](a, bias=ok)
    for bad in (cp.ones(3, dtype=np.float64), cp.ones(6, dtype=np.float32)[::2],
                cp.ones(4, dtype=np.float32), cp.ones((3, 1), dtype=np.float32),
                np.ones(3, dtype=np.float32)):
        assert not ts["A"].takes_bias(bad) or bad.shape == (4,)
        with pytest.raises(ValueError, match="bias"):
            ts["A"](a, bias=bad)
    assert ts["F"].bias_mode is None and not ts["F"].takes_bias(ok)
    with pytest.raises(ValueError, match="bias"):
        ts["F"](cp.zeros((6, 64), dtype=np.float32), bias=ok)


# (variant, n0, n1, m0, m1): the forms that take the bias (not the pass form), the bin 0 of the
# first axis at a scattered mode
PLANE_FORMS = [("warp", 64, 64, 16, 9), ("warp", 32, 128, 6, 65), ("direct", 85, 85, 12, 7),
               ("direct", 17, 19, 5, 10)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("layout", [False, "paired"])
@pytest.mark.parametrize("variant,n0,n1,m0,m1", PLANE_FORMS)
def test_plane_kernels_add_the_bias_to_the_constant_mode(rng, variant, n0, n1, m0, m1, layout):
    """The inverse plane kernels in every form and both layouts, scattered bins (bin 0 at a
    mode inside) and scales on both axes, with a bias of O values: NumPy's float64 transform of
    the modes with ``bias[p % O]`` on the real part of plane ``p``'s mode at bin 0 of both axes
    (before the scales), every element of a poisoned output; without one, the plain transform;
    a plane keeping no mode at bin 0 takes no bias."""
    from fftmatvec.fno import _rows

    cp = backend.cupy
    dev = cp.cuda.Device().id
    bins = np.concatenate([[0], rng.permutation(np.arange(1, n0))[:m0 - 1]])
    bins = rng.permutation(bins)
    s0, s1 = 0.75, rng.uniform(0.5, 2.0, m1)

    def make(b):
        if variant == "direct":
            return _rows.DirectPlane("c2r", n0, n1, m0, m1, b, s0, s1, dev, modes_major=layout)
        return _rows.Plane("c2r", n0, n1, m0, m1, b, s0, s1, dev, variant=variant,
                           modes_major=layout)

    t = make(bins)
    assert t.variant == variant
    mode = int(np.flatnonzero(bins == 0)[0]) * m1
    assert t.bias_mode == mode
    M = m0 * m1

    def in_layout(v):  # (planes, 2 M) -> (M, 2 planes) where paired
        if not layout:
            return v
        return np.ascontiguousarray(v.reshape(-1, 2, M).transpose(2, 0, 1)).reshape(M, -1)

    for O, planes in ((1, 1), (3, 6), (5, 65)):
        v = rng.standard_normal((planes, 2 * M))
        b = rng.standard_normal(O)
        bias = cp.asarray(b, dtype=np.float32)
        vb = v.copy()
        vb[:, mode] += b[np.arange(planes) % O]
        a = cp.asarray(in_layout(v), dtype=np.float32)
        for given, want in ((bias, _plane_c2r(vb, n0, n1, m0, m1, bins, s0, s1)),
                            (None, _plane_c2r(v, n0, n1, m0, m1, bins, s0, s1))):
            out = cp.full((planes, n0 * n1), np.nan, dtype=np.float32)
            got = t(a, out=out, bias=given)
            assert got is out and got.dtype == np.float32
            err = _err(cp.asnumpy(got), want)
            assert err < 2e-6 * max(1.0, np.log2(n0 * n1)), (variant, planes, err)
    without = make(np.arange(1, m0 + 1))  # no mode at bin 0
    assert without.bias_mode is None and not without.takes_bias(cp.ones(3, dtype=np.float32))


@gpu
@pytest.mark.gpu
def test_plane_pass_form_takes_no_bias():
    """The planes' pass form takes no bias (the chain adds it before): it says so, and refuses
    one."""
    from fftmatvec.fno import _rows

    cp = backend.cupy
    t = _rows.Plane("c2r", 40, 36, 12, 9, np.arange(12), 1.0, 1.0, cp.cuda.Device().id,
                    variant="passes", modes_major="paired")
    bias = cp.ones(3, dtype=np.float32)
    assert t.bias_mode is None and t.bias_args is None and not t.takes_bias(bias)
    with pytest.raises(ValueError, match="bias"):
        t(cp.zeros((12 * 9, 2 * 6), dtype=np.float32), bias=bias)


# ------------------------------------------------------------------------ the layer, GPU --

# (shape, cout, n_modes, plan, the synthesis kernel's name starts with; None: the chain adds
# the bias): the paired chains' ends in every form (the planes' pass form takes no bias), and
# one without a constant mode (the bias added to y)
LAYERS = [((3, 4, 1024), 5, 40, "fno_paired=1,fno_fused=0", "fno_irfft_cols_f32"),
          ((3, 4, 128), 5, 33, "fno_paired=1,fno_warp=1,fno_fused=0", "fno_irfft_f32_w"),
          ((3, 4, 96), 5, 20, "fno_paired=1,fno_warp=0,fno_fused=0", "fno_irfft_f32_r"),
          ((2, 3, 64, 64), 5, (16, 16), "fno_paired=1,fno_warp=1", "fno_plane_irfft_f32_w"),
          ((2, 3, 40, 36), 5, (12, 16), "fno_paired=1,fno_warp=0", None),  # the pass form
          ((2, 3, 85, 85), 5, (12, 12), "fno_paired=1,fno_direct=1", "fno_plane_irdft_f32_b"),
          ((2, 3, 45, 64), 5, (2, 16), "fno_paired=1,fno_warp=0", None)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape,cout,n_modes,plan,kernel", LAYERS)
def test_cupy_layer_bias(monkeypatch, rng, shape, cout, n_modes, plan, kernel, with_bias):
    """:func:`fftmatvec.fno.spectral_conv` on CuPy arrays on the paired chains: the synthesis's
    kernel adds the bias (the channel product is handed none), a strided bias (which the
    kernels do not take) is added by the chain, no bias adds nothing: the dense float64
    reference within 1e-5 each time."""
    from fftmatvec.fno import spectral_conv

    cp = backend.cupy
    x, w, b = _case(rng, shape, cout, n_modes)
    monkeypatch.setenv("FFTMATVEC_PLAN", plan)
    _clear_chains()
    seen = _spy_modes_step(monkeypatch)
    try:
        xc, wc = cp.asarray(x, dtype=np.float32), cp.asarray(w.astype(np.complex64))
        if not with_bias:
            y = spectral_conv(xc, wc, n_modes, None, method="dft")
            assert y.dtype == np.float32
            assert _err(cp.asnumpy(y), dense_reference(x, w, n_modes, np.zeros(cout))) < 1e-5
            assert seen[-1] is None
            return
        want = dense_reference(x, w, n_modes, b)
        y = spectral_conv(xc, wc, n_modes, cp.asarray(b, dtype=np.float32), method="dft")
        assert y.dtype == np.float32 and _err(cp.asnumpy(y), want) < 1e-5
        assert (seen[-1] is None) == (kernel is not None)
        strided = cp.asarray(np.repeat(b, 2), dtype=np.float32)[::2]
        y = spectral_conv(xc, wc, n_modes, strided, method="dft")
        assert _err(cp.asnumpy(y), want) < 1e-5 and seen[-1] is not None
    finally:
        _clear_chains()


torch = pytest.importorskip("torch")
cuda = pytest.mark.skipif(not (torch.cuda.is_available() and backend.gpu_available()),
                          reason="no CUDA device for PyTorch and CuPy")


@pytest.fixture
def fresh(monkeypatch):
    """Fresh graphs, fast paths and chains for the test, released after it."""
    from fftmatvec.fno import _graphs

    cache = _graphs.GraphCache()
    monkeypatch.setattr(_graphs, "CACHE", cache)
    monkeypatch.setattr(_graphs, "FAST", {})
    monkeypatch.setattr(_graphs, "FAST_TRAINING", {})
    _clear_chains()
    yield cache
    cache.clear()
    _clear_chains()


@pytest.fixture(params=["eager", "whole", "ends"])
def path(request, monkeypatch):
    """The layer's path: the eager chain (graphs=False), CUDA graphs of the whole chains, or of
    their middles with the ends outside (bound launches where they are kernels), whatever the
    layer's size."""
    from fftmatvec.fno import _graphs

    limit = 0 if request.param == "ends" else 2**62
    monkeypatch.setattr(_graphs, "ENDS_MIN_BYTES", limit)
    monkeypatch.setattr(_graphs, "ENDS_MIN_BYTES_INFERENCE", limit)
    return request.param


def _layer(x, w, b, n_modes, graphs):
    """A float32 SpectralConv on the GPU with the case's weight and bias (None: no bias)."""
    from fftmatvec.fno import SpectralConv

    cin, cout = w.shape[:2]
    layer = SpectralConv(cin, cout, n_modes, bias=b is not None, device="cuda", method="dft",
                         graphs=graphs)
    assert tuple(layer.weight.shape) == w.shape and layer.weight.dtype == torch.complex64
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(w.astype(np.complex64)))
        if b is not None:
            layer.bias.copy_(torch.as_tensor(b, dtype=torch.float32).reshape(layer.bias.shape))
    return layer


def _bias_of(layer):
    cout = layer.out_channels
    return np.zeros(cout) if layer.bias is None else (
        layer.bias.detach().double().cpu().numpy().reshape(-1))


def _poison(shape):
    """A block of ``shape`` float32 values filled with NaN and freed on the current stream, which
    the caching allocator hands to the next output of that size."""
    torch.full(shape, float("nan"), dtype=torch.float32, device="cuda")


def _check(y, x, w, layer, n_modes, tol=1e-5):
    """``y`` (float32, on the device) within ``tol`` of the dense float64 reference of ``x``
    with the case's weight and the layer's bias as it is now."""
    assert y.dtype == torch.float32 and y.is_cuda
    want = dense_reference(x, w, n_modes, _bias_of(layer))
    err = _err(y.detach().double().cpu().numpy(), want)
    assert err < tol, err


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape,cout,n_modes,plan,kernel", LAYERS)
def test_layer_bias_on_every_path(monkeypatch, rng, fresh, path, shape, cout, n_modes, plan,
                                  kernel, with_bias):
    """The layer on the paired chains, on each path, against the dense float64 reference with
    fresh inputs and poisoned outputs: forwards without gradients (the full call, then the
    fast path and the layer's memo), after in-place updates of ``x`` and of the bias (read by
    the kernel in place), a training step (output and bias gradient), forwards after it and
    after an optimiser's in-place step, a new bias tensor (a new signature), and inputs the
    bound ends do not read in place (strided, misaligned). The synthesis's kernel adds the
    bias where the chain has one (the channel product is handed none)."""
    from fftmatvec.fno import _layer as layer_module
    from fftmatvec.fno import _torch_dft

    x, w, b = _case(rng, shape, cout, n_modes)
    monkeypatch.setenv("FFTMATVEC_PLAN", plan)
    layer = _layer(x, w, b if with_bias else None, n_modes,
                   graphs=False if path == "eager" else "auto")
    seen = _spy_modes_step(monkeypatch)
    full, calls = layer_module.spectral_conv_torch, []

    def counted(*args, **kwargs):
        calls.append(1)
        return full(*args, **kwargs)

    monkeypatch.setattr(layer_module, "spectral_conv_torch", counted)
    xt = torch.as_tensor(x, dtype=torch.float32, device="cuda")
    y_shape = (shape[0], cout) + shape[2:]
    chain = _torch_dft.chain_for(xt, torch.float32, kept_modes(n_modes), cout)
    assert chain.paired and chain.end_bias == (kernel is not None)
    if kernel is not None:
        assert chain._kernels["A"].name.startswith(kernel)
    in_kernel = with_bias and kernel is not None

    def forward(x64, xin=None):
        _poison(y_shape)
        with torch.no_grad():
            y = layer(torch.as_tensor(x64, dtype=torch.float32, device="cuda")
                      if xin is None else xin)
        _check(y, x64, w, layer, n_modes)

    forward(x)
    assert calls == [1]
    if with_bias:
        assert (seen[-1] is None) == in_kernel
    x2 = rng.standard_normal(shape)
    forward(x2)  # the memo (with graphs), the eager chain again (without)
    assert len(calls) == (2 if path == "eager" else 1)
    if with_bias:
        with torch.no_grad():
            layer.bias.mul_(-2.0).add_(0.25)  # in place: the kernel reads it there
        forward(rng.standard_normal(shape))
        assert len(calls) == (3 if path == "eager" else 1)

    # a training step, then evaluation and an optimiser's step in place
    xg = torch.as_tensor(rng.standard_normal(shape), dtype=torch.float32,
                         device="cuda").requires_grad_(True)
    g = torch.randn(y_shape, device="cuda")
    layer.zero_grad(set_to_none=True)
    _poison(y_shape)
    y = layer(xg)
    _check(y, xg.detach().double().cpu().numpy(), w, layer, n_modes)
    y.backward(g)
    if with_bias:
        db = g.double().sum(dim=(0,) + tuple(range(2, g.dim()))).cpu().numpy()
        got = layer.bias.grad.double().cpu().numpy().reshape(-1)
        assert layer.bias.grad.dtype == torch.float32 and _err(got, db) < 1e-5
    assert xg.grad is not None and torch.isfinite(xg.grad).all()
    forward(rng.standard_normal(shape))
    if with_bias:
        with torch.no_grad():
            layer.bias -= 0.5 * layer.bias.grad / layer.bias.grad.abs().max()
        forward(rng.standard_normal(shape))
        forward(rng.standard_normal(shape))
        n = len(calls)
        layer.bias = torch.nn.Parameter(layer.bias.detach().clone() + 1.0)  # a new signature
        forward(rng.standard_normal(shape))
        assert len(calls) == n + 1
        forward(rng.standard_normal(shape))

    # inputs the bound ends cannot read in place: strided, misaligned
    x3 = rng.standard_normal(shape)
    strided = torch.as_tensor(np.repeat(x3, 2, axis=-1), dtype=torch.float32,
                              device="cuda")[..., ::2]
    forward(x3, strided)
    flat = torch.empty(x3.size + 1, dtype=torch.float32, device="cuda")
    misaligned = flat[1:].view(shape)
    misaligned.copy_(torch.as_tensor(x3, dtype=torch.float32))
    forward(x3, misaligned)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("shape,cout,n_modes,plan,kernel", LAYERS[:1] + LAYERS[3:4])
def test_functional_bias_the_kernels_do_not_take(monkeypatch, rng, fresh, path, shape, cout,
                                                  n_modes, plan, kernel):
    """A float32 layer whose bias is float64 or strided (which the synthesis's kernels do not
    read in place), and float64 and 16-bit layers (no kernels), keep the bias in the chain's
    middle: the dense float64 reference, replayed twice; a contiguous float32 bias goes to the
    kernel, and a graph of it is not the one of a strided bias of the same values."""
    from fftmatvec.fno import _torch_dft, spectral_conv_torch

    x, w, b = _case(rng, shape, cout, n_modes)
    monkeypatch.setenv("FFTMATVEC_PLAN", plan)
    graphs = False if path == "eager" else "auto"
    modes = kept_modes(n_modes)
    xt = torch.as_tensor(x, dtype=torch.float32, device="cuda")
    wt = torch.as_tensor(w.astype(np.complex64), device="cuda")
    want = dense_reference(x, w, n_modes, b)
    chain = _torch_dft.chain_for(xt, torch.float32, modes, cout)
    plain = torch.as_tensor(b, dtype=torch.float32, device="cuda")
    strided = torch.as_tensor(np.repeat(b, 2), dtype=torch.float32, device="cuda")[::2]
    wide = torch.as_tensor(b, dtype=torch.float64, device="cuda")
    assert _torch_dft.end_bias(chain, plain) is not None
    assert _torch_dft.end_bias(chain, strided) is None
    assert _torch_dft.end_bias(chain, wide) is None
    seen = _spy_modes_step(monkeypatch)
    with torch.no_grad():
        for bias in (plain, strided, wide, plain):
            for _ in range(2):
                _poison((shape[0], cout) + shape[2:])
                y = spectral_conv_torch(xt, wt, n_modes, bias, method="dft", graphs=graphs)
                assert y.dtype == torch.float32
                assert _err(y.double().cpu().numpy(), want) < 1e-5
        if graphs:  # the forward graphs' problems (:func:`_torch_dft._forward`: ctx.problem),
            # the last item whether the synthesis's kernel adds the bias
            problems = {k[2][0] for k in fresh._entries if k[0] == "forward"}
            assert len(problems) == 3 and {p[-1] for p in problems} == {True, False}
        assert any(s is not None for s in seen) and any(s is None for s in seen)
        monkeypatch.delenv("FFTMATVEC_PLAN")  # (the paired modes forced: float32 only)
        x64 = torch.as_tensor(x, device="cuda")
        y = spectral_conv_torch(x64, torch.as_tensor(w, device="cuda"), n_modes,
                                torch.as_tensor(b, device="cuda"), method="dft",
                                graphs=graphs)
        assert y.dtype == torch.float64 and _err(y.cpu().numpy(), want) < 1e-10
        y = spectral_conv_torch(xt, wt, n_modes, plain, method="dft", graphs=graphs,
                                compute_dtype=torch.bfloat16)
        assert y.dtype == torch.float32 and _err(y.double().cpu().numpy(), want) < 3e-2
