"""FNO layer, CUDA-graph replay of the DFT path: the option, the keys, the cache, the replay.

Without a GPU the replay runs on the CPU with a stand-in graph (replaying reruns the chain on
the static inputs and copies into the graph's outputs, as a real replay overwrites them), so
that the glue (keys, static buffers, clones, saved tensors, the gradients wanted) is tested
everywhere; the tests marked ``gpu`` capture real graphs.
"""

from __future__ import annotations

import contextlib
import math
import types
import warnings

import pytest

from fftmatvec import FFTMatvecValueError
from fftmatvec.fno import _graphs, _torch_dft, clear_graphs
from fftmatvec.fno._graphs import GraphCache
from fftmatvec.fno._modes import kept_modes
from conftest import set_plan

torch = pytest.importorskip("torch")

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")


def _rel(a, b):
    a, b = a.detach().cpu().to(torch.complex128), b.detach().cpu().to(torch.complex128)
    return float((a - b).abs().max() / b.abs().max())


def _layer(cin, cout, n_modes, device="cpu", bias=True, **kw):
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(7)
    return SpectralConv(cin, cout, n_modes, bias=bias, device=device, method="dft", **kw)


def _twin(layer, **kw):
    """A layer with ``layer``'s weight and bias (copies) and other options."""
    from fftmatvec.fno import SpectralConv

    twin = SpectralConv(layer.in_channels, layer.out_channels, layer.n_modes,
                        bias=layer.bias is not None, device=layer.weight.device,
                        method="dft", compute_dtype=layer.compute_dtype, **kw)
    with torch.no_grad():
        twin.weight.copy_(layer.weight)
        if layer.bias is not None:
            twin.bias.copy_(layer.bias)
    return twin


def _step(layer, x, g, need_x=True):
    """Output and the gradients of ``(layer(x) * g).sum()`` (None where not computed): the
    tensors the layer returned, not copies (the next step starts from fresh gradients)."""
    for p in layer.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_(need_x)
    y = layer(x)
    (y * g).sum().backward()
    return [y.detach(), x.grad, layer.weight.grad,
            None if layer.bias is None else layer.bias.grad]


def _close(got, want, tol):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
            assert _rel(a, b) < tol


def _full_calls(monkeypatch):
    """A function counting the layer's calls that took the full path since now (graphs not
    False: not its eager twin's)."""
    from fftmatvec.fno import _torch as layer_module

    full, calls = layer_module._spectral_conv_torch, []

    def counted(*args):
        calls.append(args[7] is not False)
        return full(*args)

    monkeypatch.setattr(layer_module, "_spectral_conv_torch", counted)
    return lambda: sum(calls)


@pytest.fixture
def cache(monkeypatch):
    """A fresh process cache for the test, released after it."""
    fresh = GraphCache()
    monkeypatch.setattr(_graphs, "CACHE", fresh)
    monkeypatch.setattr(_graphs, "FAST", {})
    monkeypatch.setattr(_graphs, "FAST_TRAINING", {})
    yield fresh
    fresh.clear()


# ------------------------------------------------------------------------------ the option --

def test_fast_path_only_for_cuda_tensors():
    """The fast path's signature (:func:`fftmatvec.fno._torch_dft.fast_key`) is None for CPU
    tensors, ``graphs=False`` and options the full path must check first (a list of modes, an
    unknown method or compute dtype, a bias that is no tensor)."""
    from fftmatvec.fno._torch_dft import fast_key

    x, w = torch.randn(2, 3, 8), torch.randn(3, 3, 5, dtype=torch.complex64)
    for args in [(x, w, 8, None, "auto", None, "auto"), (x, w, 8, None, "auto", None, False),
                 (x, w, [8], None, "auto", None, "auto"), (x, w, 8, None, ["dft"], None, "auto"),
                 (x, w, 8, None, "auto", "float32", "auto"), (x, w, 8, [1.0], "auto", None, True),
                 (x, w, 8, None, "auto", None, ["auto"])]:
        assert fast_key(torch, *args) is None


@pytest.mark.parametrize("bad", ["yes", "Auto", None, 1, 0, "true"])
def test_bad_option(bad):
    from fftmatvec.fno import SpectralConv, spectral_conv_torch

    with pytest.raises(FFTMatvecValueError, match=r"graphs: expected 'auto', True or False"):
        SpectralConv(2, 2, 4, graphs=bad)
    x, w = torch.randn(1, 2, 8), torch.randn(2, 2, 3, dtype=torch.complex64)
    with pytest.raises(FFTMatvecValueError, match="graphs"):
        spectral_conv_torch(x, w, 4, graphs=bad)
    layer = SpectralConv(2, 2, 4)
    layer.graphs = bad  # changed after construction: checked at the call
    with pytest.raises(FFTMatvecValueError, match="graphs"):
        layer(x)


@pytest.mark.parametrize("good", ["auto", True, False])
def test_good_options(good):
    assert _graphs.check_option(good) is good
    assert _layer(2, 2, 4, graphs=good).graphs is good


def test_cpu_tensors_run_the_eager_chain(cache):
    """On CPU tensors "auto" captures nothing and gives graphs=False's result bit for bit;
    graphs=True raises, naming the reason."""
    layer = _layer(3, 4, (6, 8))
    x, g = torch.randn(2, 3, 12, 10), torch.randn(2, 4, 12, 10)
    want = _step(_twin(layer, graphs=False), x, g)
    got = _step(layer, x, g)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert len(cache) == 0
    layer.graphs = True
    with pytest.raises(FFTMatvecValueError, match="graphs=True: CUDA graphs need CUDA tensors"):
        layer(x)


def test_true_on_the_fft_path_raises():
    from fftmatvec.fno import spectral_conv_torch

    x, w = torch.randn(1, 2, 8), torch.randn(2, 2, 3, dtype=torch.complex64)
    with pytest.raises(FFTMatvecValueError, match="graphs=True.*method='fft'"):
        spectral_conv_torch(x, w, 4, method="fft", graphs=True)
    assert spectral_conv_torch(x, w, 4, method="fft", graphs="auto").shape == (1, 2, 8)


def test_tracing_detected(monkeypatch):
    assert not _graphs._tracing(torch)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _graphs._tracing(torch)


def test_wanted_on_cpu():
    x, w = torch.randn(1, 2, 8), torch.randn(2, 2, 3, dtype=torch.complex64)
    assert _graphs.wanted(torch, "auto", x, w, None) is False
    assert _graphs.wanted(torch, False, x, w, None) is False
    with pytest.raises(FFTMatvecValueError, match="got x on cpu"):
        _graphs.wanted(torch, True, x, w, None)


# -------------------------------------------------------------------------------- the keys --

def test_keys():
    """A key changes with what a capture depends on, and not with the values in place."""
    w = torch.randn(4, 3, 5, 3, dtype=torch.complex64)
    b = torch.randn(3, 1, 1)
    sp, f32, c64 = (2, 4, 10, 6), torch.float32, torch.complex64

    def key(shape=sp, dtype=f32, cdtype=f32, modes=(5, 3), w=w, b=b):
        return _graphs.problem_key(shape, dtype, torch.device("cpu"), cdtype, modes, w, b)

    base = key()
    assert key() == base and hash(key()) == hash(base)
    with torch.no_grad():
        w.mul_(2)        # an optimizer step: the same memory, the same graph
        b.add_(1)
    assert key() == base
    alive = [w.clone(), b.clone(), w.to(torch.complex128), torch.randn(4, 3, 5, 3, dtype=c64)]
    others = [key(shape=(3, 4, 10, 6)), key(dtype=torch.float64), key(cdtype=torch.bfloat16),
              key(modes=(3, 3)), key(w=alive[0]), key(b=alive[1]), key(b=None),
              key(w=alive[2]), key(w=alive[3])]
    assert len({base, *others}) == len(others) + 1
    sq = torch.randn(4, 3, 5, 5, dtype=c64)     # the same address and shape, other strides
    assert sq.mT.data_ptr() == sq.data_ptr() and key(w=sq.mT) != key(w=sq)
    needs = (True, True, False)
    fwd = _graphs.forward_key(base, 11)
    bwd = _graphs.backward_key(base, 11, needs, f32)
    assert fwd != bwd and fwd == _graphs.forward_key(base, 11)
    assert fwd != _graphs.forward_key(base, 12)                      # another stream
    assert bwd == _graphs.backward_key(base, 11, [1, 1, 0], f32)
    variants = {_graphs.backward_key(base, 11, n, f32)
                for n in [(a, b_, c) for a in (0, 1) for b_ in (0, 1) for c in (0, 1)]}
    assert len(variants) == 8
    assert bwd != _graphs.backward_key(base, 12, needs, f32)
    assert bwd != _graphs.backward_key(base, 11, needs, torch.float64)


# ------------------------------------------------------------------------------- the cache --

class _Entry:
    def __init__(self, name):
        self.name, self.released = name, 0

    def release(self):
        self.released += 1


def _capturer(log, fail=False):
    def make(name):
        def capture():
            log.append(name)
            if fail:
                raise RuntimeError(f"capture of {name} failed")
            return _Entry(name)
        return capture
    return make


@pytest.mark.filterwarnings("ignore:.*CUDA graphs of the DFT chain evicted")
def test_cache_lru_eviction_releases():
    c = GraphCache(capacity=3)
    log = []
    make = _capturer(log)
    a, b, d = (c.get(k, make(k)) for k in "abd")
    assert log == ["a", "b", "d"] and len(c) == 3
    assert c.get("a", make("a")) is a and log == ["a", "b", "d"]   # a hit: nothing captured
    e = c.get("e", make("e"))                                       # evicts b, the oldest use
    assert "b" not in c and b.released == 1 and len(c) == 3
    assert a.released == d.released == e.released == 0
    c.get("f", make("f"))                                           # evicts d
    assert d.released == 1 and "a" in c and "e" in c
    assert c.get("b", make("b")).name == "b" and log[-1] == "b"   # captured again
    c.clear()
    assert len(c) == 0 and a.released == e.released == 1


def test_cache_failed_capture_raises_and_keeps_nothing():
    """A capture that raises leaves nothing in the cache; the next call tries again."""
    c = GraphCache(capacity=2)
    log = []
    with pytest.raises(RuntimeError, match="capture of k failed"):
        c.get("k", _capturer(log, fail=True)("k"))
    assert log == ["k"] and len(c) == 0 and "k" not in c
    entry = c.get("k", _capturer(log)("k"))  # a capture that works now
    assert entry.name == "k" and log == ["k", "k"] and c.get("k", None) is entry


def test_cache_warns_on_churn():
    """Once as many graphs as the cache holds have been evicted, it warns (once)."""
    c = GraphCache(capacity=2)
    make = _capturer([])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(3):
            c.get(k, make(k))                                        # one eviction
    with pytest.warns(RuntimeWarning, match="2 CUDA graphs of the DFT chain evicted") as caught:
        c.get(3, make(3))
    assert [w.filename for w in caught] == [__file__]  # the caller's line, not the cache's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(4, 8):
            c.get(k, make(k))


# ------------------------------------------------ the capture's steps, with a stand-in CUDA --

class _FakeCuda:
    """Just enough of ``torch.cuda`` to follow :func:`_graphs.capture`: which stream is current
    at each step, and a ``torch.cuda.graph`` whose failed ``capture_end`` (like the real one)
    leaves the capture stream current."""

    def __init__(self, fail_end=False):
        cuda = self

        class Stream:
            def __init__(self, device, name="side"):
                self.name = name

            def wait_stream(self, other):
                cuda.log.append(("wait", self.name, other.name))

            def __eq__(self, other):
                return getattr(other, "name", other) == self.name

            __hash__ = None

        class CUDAGraph:
            pass

        class graph:
            def __init__(self, g, pool, stream, capture_error_mode):
                self.stream, self.pool = stream, pool
                cuda.log.append(("capture mode", capture_error_mode))

            def __enter__(self):
                self.saved, cuda.current = cuda.current, self.stream
                cuda.log.append("capture_begin")

            def __exit__(self, kind, err, tb):
                if kind is not None or cuda.fail_end:
                    raise RuntimeError("capture invalidated")
                cuda.current = self.saved
                cuda.log.append("capture_end")

        self.Stream, self.CUDAGraph, self.graph = Stream, CUDAGraph, graph
        self.log, self.current, self.fail_end = [], Stream(None, "main"), fail_end

    def device(self, d):
        return contextlib.nullcontext()

    def current_stream(self, device=None):
        return self.current

    @contextlib.contextmanager
    def stream(self, s):
        saved, self.current = self.current, s
        yield
        self.current = saved

    def set_stream(self, s):
        self.log.append(("set_stream", s.name))
        self.current = s

    def graph_pool_handle(self):
        return (0, 7)


def _fake_torch(cuda):
    pools = []
    c = types.SimpleNamespace(_cuda_endAllocateToPool=lambda i, p: pools.append(("end", p)),
                              _cuda_releasePool=lambda i, p: pools.append(("release", p)))
    fake = types.SimpleNamespace(cuda=cuda, _C=c, empty=torch.empty, device=torch.device,
                                 inference_mode=torch.inference_mode, no_grad=torch.no_grad)
    return fake, pools


@pytest.mark.parametrize("fail", [None, "in the chain", "at capture_end"])
def test_capture_steps(monkeypatch, fail):
    """Warm-up and capture on the side stream, inside the precision context, from static
    copies of the inputs; after a failed capture the current stream is back and the graph's
    pool is ended and released."""
    monkeypatch.setattr(_graphs, "_STREAMS", {})
    cuda = _FakeCuda(fail_end=fail == "at capture_end")
    fake, pools = _fake_torch(cuda)
    calls, entered = [], []
    x = torch.randn(3, 4)

    def fn(a, b):
        calls.append(cuda.current)
        assert b is None and a is not x and torch.equal(a, x) and entered == [1]
        if fail == "in the chain" and cuda.current == "side" and len(calls) > _graphs.WARMUP:
            raise RuntimeError("operation not permitted when stream is capturing")
        return (a * 2,)

    @contextlib.contextmanager
    def precision():
        entered.append(1)
        try:
            yield
        finally:
            entered.pop()

    if fail is None:
        with torch.inference_mode():  # buffers that later calls in any mode can write
            entry = _graphs.capture(fake, fn, (x, None), torch.device("cpu"), precision)
        assert isinstance(entry, _graphs.Captured) and entry.inputs[1] is None
        assert torch.equal(entry.outputs[0], 2 * x) and pools == []
        assert not entry.inputs[0].is_inference() and not entry.outputs[0].is_inference()
    else:
        with pytest.raises(RuntimeError):
            _graphs.capture(fake, fn, (x, None), torch.device("cpu"), precision)
        assert pools == [("end", (0, 7)), ("release", (0, 7))]
    assert calls == ["side"] * (_graphs.WARMUP + 1) and cuda.current == "main"
    assert ("capture mode", "thread_local") in cuda.log and entered == []
    assert cuda.log[0] == ("wait", "side", "main")        # the side stream waits for the data


# ------------------------------------------------------- replay with a stand-in, on the CPU --

class _FakeGraph:
    """Stands in for ``torch.cuda.CUDAGraph``: the outputs are fixed buffers that every replay
    overwrites with the chain run again on the static inputs."""

    def __init__(self, fn, inputs, precision):
        self.fn, self.inputs, self.precision = fn, inputs, precision
        self.replays = 0
        with precision():
            self.outputs = fn(*inputs)

    def replay(self):
        with self.precision():
            new = self.fn(*self.inputs)
        for o, n in zip(self.outputs, new):
            if o is not None:
                o.copy_(n)
        self.replays += 1

    def reset(self):
        self.fn = None


@pytest.fixture
def fake(monkeypatch, cache):
    """Graph replay on CPU tensors with :class:`_FakeGraph`; the captures are logged."""
    log = []

    def capture(torch_, fn, args, device, precision, keep=()):
        inputs = tuple(_graphs.static_input(torch, a, device) for a in args)
        graph = _FakeGraph(fn, inputs, precision)
        log.append(graph)
        return _graphs.Captured(graph, inputs, graph.outputs, device, keep)

    monkeypatch.setattr(_graphs, "capture", capture)
    real = _graphs.wanted
    monkeypatch.setattr(_graphs, "wanted", lambda torch_, graphs, x, w, b, training=None: (
        graphs if x.device.type == "cpu" else real(torch_, graphs, x, w, b, training)))
    return log


def _ends_from(monkeypatch, limit):
    """The graphs' ends outside from ``limit`` bytes, in training and in a forward alone."""
    monkeypatch.setattr(_graphs, "ENDS_MIN_BYTES", limit)
    monkeypatch.setattr(_graphs, "ENDS_MIN_BYTES_INFERENCE", limit)


@pytest.fixture(params=["whole", "ends"])
def ends(request, monkeypatch):
    """The graphs hold the whole chains (``"whole"``) or their middles, the ends outside
    (``"ends"``), whatever the layer's size (:func:`fftmatvec.fno._graphs.ends_outside`)."""
    _ends_from(monkeypatch, 0 if request.param == "ends" else 2**62)
    return request.param


REPLAY_CASES = [((2, 3, 16), 8, True), ((2, 3, 12, 10), (6, 8), True),
                ((2, 3, 9, 10), (2, 4), True),        # no constant mode: the bias on y
                ((2, 3, 12, 10), (6, 8), False), ((1, 2, 6, 5, 8), (4, 3, 6), True)]


@pytest.mark.parametrize("shape,n_modes,bias", REPLAY_CASES)
def test_replay_matches_eager(fake, cache, ends, shape, n_modes, bias):
    """Forward and backward through the replay equal the eager chain; one forward and one
    backward graph serve both steps, and nothing returned aliases a graph's buffers."""
    layer = _layer(shape[1], 4, n_modes, bias=bias)
    eager = _twin(layer, graphs=False)
    torch.manual_seed(1)
    x1, x2 = torch.randn(shape), torch.randn(shape)
    g1, g2 = (torch.randn((shape[0], 4) + shape[2:]) for _ in range(2))
    first = _step(layer, x1, g1)
    keep = [None if t is None else t.clone() for t in first]
    second = _step(layer, x2, g2)
    _close(first, _step(eager, x1, g1), 1e-6)
    _close(second, _step(eager, x2, g2), 1e-6)
    for a, b in zip(first, keep):     # the second step left the first step's results alone
        assert a is None or torch.equal(a, b)
    assert len(fake) == 2 and len(cache) == 2
    assert [gr.replays for gr in fake] == [2, 2]
    with torch.no_grad():             # the same forward graph serves no_grad
        y = layer(x1)
    assert len(fake) == 2 and torch.equal(y, first[0])
    clear_graphs()
    assert len(cache) == 0 and all(gr.fn is None for gr in fake)
    with torch.no_grad():
        assert torch.equal(layer(x1), y) and len(fake) == 3


def _grads(layer, xs, gs, order, retain=False):
    """Gradients of ``sum_i (layer(x_i) * g_i).sum()`` with the forwards of ``xs`` run first,
    then the backwards in ``order`` (each kept for a second backward where ``retain``)."""
    for p in layer.parameters():
        p.grad = None
    xs = [x.detach().clone().requires_grad_(True) for x in xs]
    ys = [layer(x) for x in xs]
    for i in order:
        (ys[i] * gs[i]).sum().backward(retain_graph=retain)
    return [x.grad for x in xs] + [layer.weight.grad, layer.bias.grad]


@pytest.mark.parametrize("grid,n_modes,split", [((12, 10), (6, 8), False), ((16,), 8, True)])
def test_replay_lent_input_interleaved(fake, cache, ends, grid, n_modes, split):
    """Two forwards before their backwards, in either order, and a backward run twice
    (``retain_graph``): the input each backward reads is the one its own forward left in the
    graph's buffer (copied out before the next forward overwrote it, put back for its
    backward), so every gradient is the eager chain's. With the split modes (1-D) and the
    ends outside, that buffer is the graph's input buffer, which the next forward's first step
    writes before its replay."""
    layer = _layer(3, 4, n_modes)
    eager = _twin(layer, graphs=False)
    torch.manual_seed(3)
    xs = [torch.randn((2, 3) + grid) for _ in range(3)]
    gs = [torch.randn((2, 4) + grid) for _ in range(3)]
    assert getattr(_torch_dft.chain_for(xs[0], torch.float32, kept_modes(n_modes), 4), "split",
                   False) is split
    for order in ([0, 1, 2], [2, 0, 1], [1, 1, 0, 2]):
        want = _grads(eager, xs, gs, order, retain=True)
        _close(_grads(layer, xs, gs, order, retain=True), want, 1e-6)
    assert len(fake) == 2


def test_replay_lent_input_not_copied_after_backward(fake, cache, ends):
    """Once a forward's backward has run (without ``retain_graph``), the next forward copies
    nothing out of the buffer for it, though its output is still alive; with
    ``retain_graph`` it is copied out, for the backward that may run again."""
    layer = _layer(3, 4, (6, 8))
    x = torch.randn(2, 3, 12, 10, requires_grad=True)
    g = torch.randn(2, 4, 12, 10)
    for retain in (False, True):
        y = layer(x)
        lent = y.grad_fn.lent
        assert lent is not None and lent.value is None
        y.backward(g, retain_graph=retain)
        layer(x)
        assert (lent.value is not None) == retain


@pytest.mark.parametrize("need", [(True, True, True), (True, False, False),
                                  (False, True, False), (False, False, True),
                                  (True, True, False), (False, True, True)])
def test_replay_needs_input_grad(fake, cache, ends, need):
    """Each combination of wanted gradients has its backward graph and gives the eager
    chain's gradients (None where not wanted)."""
    need_x, need_w, need_b = need
    layer = _layer(3, 4, (6, 8))
    eager = _twin(layer, graphs=False)
    for lay in (layer, eager):
        lay.weight.requires_grad_(need_w)
        lay.bias.requires_grad_(need_b)
    x, g = torch.randn(2, 3, 12, 10), torch.randn(2, 4, 12, 10)
    got, want = _step(layer, x, g, need_x), _step(eager, x, g, need_x)
    _close(got, want, 1e-6)
    assert [t is not None for t in got[1:]] == list(need)
    assert len(fake) == 2
    bwd = [k for k in cache._entries if k[0] == "backward"]
    assert len(bwd) == 1 and bwd[0][3] == need


def test_replay_two_forwards_one_backward(fake, cache, ends):
    """A weight-shared layer applied twice before one backward: each forward keeps its own
    modes-major input, and the gradients are the eager chain's."""
    layer = _layer(4, 4, (6, 8))
    eager = _twin(layer, graphs=False)
    x, g = torch.randn(2, 4, 12, 10), torch.randn(2, 4, 12, 10)

    def run(lay):
        lay.zero_grad()
        xr = x.clone().requires_grad_(True)
        y = lay(torch.tanh(lay(xr)))
        (y * g).sum().backward()
        return [y.detach(), xr.grad, lay.weight.grad.clone(), lay.bias.grad.clone()]

    _close(run(layer), run(eager), 1e-6)
    assert len(cache) == 2 and [gr.replays for gr in fake] == [2, 2]


def test_replay_replaced_weight_recaptures(fake, cache):
    """A new weight Parameter is a new capture (its address is in the key); an in-place update
    is seen by the graph already captured."""
    layer = _layer(3, 4, (6, 8))
    x = torch.randn(2, 3, 12, 10)
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(0.5)                           # in place: the same graph
        got = layer(x)
    assert len(fake) == 1
    assert _rel(got, _twin(layer, graphs=False)(x)) < 1e-6
    layer.weight = torch.nn.Parameter(torch.randn_like(layer.weight))
    with torch.no_grad():
        got = layer(x)
    assert len(fake) == 2 and len(cache) == 2
    assert _rel(got, _twin(layer, graphs=False)(x)) < 1e-6


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_replay_sixteen_bit(fake, cache, ends, name):
    layer = _layer(3, 4, (6, 8), compute_dtype=getattr(torch, name))
    x, g = torch.randn(2, 3, 12, 10), torch.randn(2, 4, 12, 10)
    _close(_step(layer, x, g), _step(_twin(layer, graphs=False), x, g), 1e-6)
    assert len(fake) == 2


def test_replay_failed_capture_raises(monkeypatch, cache):
    """A capture that fails raises, "auto" as True, naming graphs=False (after a failed capture
    PyTorch's CUDA state may stay unusable: the process must know); graphs=False runs."""
    from fftmatvec._errors import FFTMatvecError

    monkeypatch.setattr(_graphs, "wanted", lambda torch_, graphs, x, w, b, training=None: graphs)
    tries = []

    def capture(*args, **kw):
        tries.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(_graphs, "capture", capture)
    layer = _layer(3, 4, (6, 8))
    x, g = torch.randn(2, 3, 12, 10), torch.randn(2, 4, 12, 10)
    want = _step(_twin(layer, graphs=False), x, g)
    for mode in ("auto", True):
        layer.graphs = mode
        with pytest.raises(FFTMatvecError, match="graphs=False") as err:
            layer(x)
        assert "not permitted" in str(err.value.__cause__)
    assert len(tries) == 2 and len(cache) == 0
    layer.graphs = False
    _close(_step(layer, x, g), want, 1e-6)


# ------------------------------------------------------------------------- on the device --

GPU_CASES = [((4, 8, 64), 32), ((4, 16, 40, 36), (12, 16)), ((3, 8, 9, 10), (2, 4)),
             ((2, 4, 10, 12, 14), (6, 6, 8))]


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape,n_modes", GPU_CASES)
def test_cuda_graphs_match_eager(cache, ends, shape, n_modes):
    """Graphed forward and backward against graphs=False, float32, 1e-6; two graphs captured;
    a second step's results leave the first step's unchanged."""
    layer = _layer(shape[1], 6, n_modes, device="cuda")
    eager = _twin(layer, graphs=False)
    torch.manual_seed(2)
    x1, x2 = (torch.randn(shape, device="cuda") for _ in range(2))
    g1, g2 = (torch.randn((shape[0], 6) + shape[2:], device="cuda") for _ in range(2))
    first = _step(layer, x1, g1)
    keep = [t.clone() for t in first]
    second = _step(layer, x2, g2)
    assert len(cache) == 2
    _close(first, _step(eager, x1, g1), 1e-6)
    _close(second, _step(eager, x2, g2), 1e-6)
    for a, b in zip(first, keep):
        assert torch.equal(a, b)
    assert first[2].stride() == layer.weight.stride()   # dL/dW in the weight's layout
    with torch.no_grad():
        y1, y2 = layer(x1), layer(x2)
        assert _rel(y1, eager(x1)) < 1e-6 and _rel(y2, eager(x2)) < 1e-6
    assert torch.equal(y1, first[0]) and y1.data_ptr() != y2.data_ptr()
    assert len(cache) == 2


@pytest.mark.gpu
@cuda
def test_cuda_graphs_inference_mode(cache):
    """A graph captured under ``torch.inference_mode`` serves calls outside it, and back."""
    layer = _layer(8, 8, (12, 12), device="cuda")
    eager = _twin(layer, graphs=False)
    x = torch.randn(4, 8, 32, 32, device="cuda")
    with torch.inference_mode():
        y = layer(x)
    with torch.no_grad():
        assert _rel(layer(x), y) < 1e-6 and _rel(y, eager(x)) < 1e-6
    with torch.inference_mode():
        assert _rel(layer(x), y) < 1e-6
    assert len(cache) == 1


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape,n_modes", GPU_CASES)
def test_fast_path_of_a_forward_without_gradients(cache, ends, monkeypatch, shape, n_modes):
    """A forward without gradients whose signature replayed a graph replays it again without
    the call's checks and planning: the full path is not called, and the output is the eager
    chain's for new values of ``x`` written in place and a weight updated in place. A new
    ``FFTMATVEC_PLAN``, a new weight tensor, a call with gradients and released graphs take
    the full path."""
    from fftmatvec.fno import clear_graphs

    layer = _layer(shape[1], 6, n_modes, device="cuda")
    eager = _twin(layer, graphs=False)
    x = torch.randn(shape, device="cuda")
    with torch.no_grad():
        y0 = layer(x)
    assert len(_graphs.FAST) == 1
    layer_calls = _full_calls(monkeypatch)

    with torch.no_grad():
        assert torch.equal(layer(x), y0) and layer_calls() == 0
        x.copy_(torch.randn_like(x))
        assert _rel(layer(x), eager(x)) < 1e-6
        layer.weight.mul_(0.5)
        eager.weight.mul_(0.5)
        assert _rel(layer(x), eager(x)) < 1e-6 and layer_calls() == 0
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=0")
        assert _rel(layer(x), eager(x)) < 1e-6 and layer_calls() == 1
        assert _rel(layer(x), eager(x)) < 1e-6 and layer_calls() == 1
        monkeypatch.delenv("FFTMATVEC_PLAN")
        layer.weight = torch.nn.Parameter(layer.weight.detach().clone())
        assert _rel(layer(x), eager(x)) < 1e-6 and layer_calls() == 2
        clear_graphs()
        assert not _graphs.FAST
        assert _rel(layer(x), eager(x)) < 1e-6 and layer_calls() == 3
    y = layer(x.clone().requires_grad_(True))
    assert layer_calls() == 4 and y.requires_grad


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape,n_modes", GPU_CASES)
def test_layer_memo_of_forwards(cache, ends, monkeypatch, shape, n_modes):
    """A layer's forward without gradients like one before is served from the layer's memo
    (:class:`fftmatvec.fno._torch_dft.LayerFast`), by input shape: neither the module's steps
    nor the function are called, and the output is the eager chain's for new values of ``x``
    and of the weight. Another stream, options, plan, weight tensor or ``weight.data``,
    released graphs and a call with gradients take the full way, right too."""
    from fftmatvec.fno import _layer as layer_module
    from fftmatvec.fno._torch_dft import LayerFast

    layer = _layer(shape[1], 6, n_modes, device="cuda")
    eager = _twin(layer, graphs=False)
    full, calls = layer_module.spectral_conv_torch, []

    def counted(*args, **kwargs):
        calls.append(args[1] is not eager.weight)  # the layer's, not its eager twin's
        return full(*args, **kwargs)

    monkeypatch.setattr(layer_module, "spectral_conv_torch", counted)

    def check(x, full_calls):
        assert _rel(layer(x), eager(x)) < 1e-6 and sum(calls) == full_calls

    x = torch.randn(shape, device="cuda")
    other = torch.randn((shape[0] + 1,) + shape[1:], device="cuda")
    with torch.no_grad():
        check(x, 1)
        assert list(layer._fast) == [x.shape]
        assert isinstance(layer._fast[x.shape], LayerFast)
        x.copy_(torch.randn_like(x))
        check(x, 1)
        layer.weight.mul_(0.5)  # read in place
        eager.weight.mul_(0.5)
        check(x, 1)
        check(other, 2)  # another shape: a second entry
        check(x, 2)
        check(other, 2)
        assert len(layer._fast) == 2
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            check(x, 3)
            check(x, 3)
        torch.cuda.current_stream().wait_stream(side)
        check(x, 4)  # one entry a shape: back on the first stream, the full way once
        check(x, 4)
        layer.weight.data = layer.weight.data.clone()  # the same parameter, new storage
        check(x, 5)
        check(x, 5)
        layer.weight = torch.nn.Parameter(layer.weight.detach().clone())
        check(x, 6)
        layer.graphs = False  # an option changed: the full way, every call
        check(x, 7)
        check(x, 8)
        layer.graphs = "auto"
        check(x, 9)
        check(x, 9)
        monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=0")
        check(x, 10)
        check(x, 10)
        monkeypatch.delenv("FFTMATVEC_PLAN")
        check(x, 11)
        clear_graphs()
        check(x, 12)
        check(x, 12)
    y = layer(x.clone().requires_grad_(True))
    assert sum(calls) == 13 and y.requires_grad
    assert _rel(y, eager(x)) < 1e-6


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape,n_modes", GPU_CASES)
def test_fast_path_of_a_training_call(cache, ends, monkeypatch, shape, n_modes):
    """A call with gradients wanted whose signature was planned before takes that plan
    (:class:`fftmatvec.fno._torch_dft.TrainingPlan`) without the call's checks and planning:
    the full path is not called, and the output and gradients are the eager chain's for new
    values of ``x`` and of the weight. Which inputs want gradients, a new ``FFTMATVEC_PLAN``, a
    new weight tensor and released graphs make new signatures or take the full path."""
    from fftmatvec.fno import clear_graphs

    layer = _layer(shape[1], 6, n_modes, device="cuda")
    eager = _twin(layer, graphs=False)
    g = torch.randn((shape[0], 6) + shape[2:], device="cuda")
    _step(layer, torch.randn(shape, device="cuda"), g)
    assert len(_graphs.FAST_TRAINING) == 1 and not _graphs.FAST
    layer_calls = _full_calls(monkeypatch)

    x = torch.randn(shape, device="cuda")
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
    assert layer_calls() == 0
    with torch.no_grad():
        layer.weight.mul_(0.5)
        eager.weight.mul_(0.5)
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
    assert layer_calls() == 0
    # a step with no gradient for x: another signature, planned on its first call only
    for _ in range(2):
        _close(_step(layer, x, g, need_x=False), _step(eager, x, g, need_x=False), 1e-6)
        assert layer_calls() == 1
    monkeypatch.setenv("FFTMATVEC_PLAN", "fno_warp=0")
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
    assert layer_calls() == 2
    monkeypatch.delenv("FFTMATVEC_PLAN")
    layer.weight = torch.nn.Parameter(layer.weight.detach().clone())
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
    assert layer_calls() == 3
    clear_graphs()
    assert not _graphs.FAST_TRAINING
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
    assert layer_calls() == 4


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape,n_modes", GPU_CASES)
def test_bound_ends(cache, ends, monkeypatch, shape, n_modes):
    """Where the ends run outside the graph on the package's kernels, their launches are bound
    (:func:`fftmatvec.fno._torch_dft.bound_ends`; in the fast path, once:
    :class:`~fftmatvec.fno._torch_dft.BoundEnds`): the outputs and gradients are the eager
    chain's for fresh inputs, one call's output is not the next one's, and an input or output
    gradient the kernels cannot read in place (misaligned, or strided) takes the unbound
    steps, right too."""
    from fftmatvec.fno import _torch_dft

    layer = _layer(shape[1], 6, n_modes, device="cuda")
    eager = _twin(layer, graphs=False)
    made, bound = [], _torch_dft.bound_ends
    monkeypatch.setattr(_torch_dft, "bound_ends", lambda *a: made.append(bound(*a)) or made[-1])
    g_shape = (shape[0], 6) + shape[2:]
    for g in (torch.randn(g_shape, device="cuda"),
              torch.randn(g_shape[:-1] + (2 * g_shape[-1],), device="cuda")[..., ::2]):
        x = torch.randn(shape, device="cuda")
        got = []
        for f in (layer, eager):
            made.clear()
            f.zero_grad(set_to_none=True)
            xg = x.clone().requires_grad_(True)
            y = f(xg)
            y.backward(g)  # g itself, strided or not, reaches the backward
            got.append([y.detach(), xg.grad, f.weight.grad, f.bias.grad])
            if f is layer and ends == "ends" and len(shape) == 3:
                # the row kernels take the 1-D layer's ends: the forward's and the backward's
                # launches bound, the backward's only where it reads g in place
                assert len(made) == 2 and made[0] is not None
                assert (made[1] is not None) == g.is_contiguous()
        _close(got[0], got[1], 1e-6)
    with torch.no_grad():
        layer(torch.randn(shape, device="cuda"))
        (hit,) = _graphs.FAST.values()
        chain = hit.chain
        bindable = ends == "ends" and chain.forward_ends is not None
        assert (hit.bound is not None) == bindable
        if ends == "ends" and len(shape) == 3:  # the row kernels take the 1-D layer's ends
            assert hit.bound is not None
        x1, x2 = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
        y1 = layer(x1)
        keep = y1.clone()
        y2 = layer(x2)
        assert _rel(y1, eager(x1)) < 1e-6 and _rel(y2, eager(x2)) < 1e-6
        assert torch.equal(y1, keep)
        flat = torch.empty(x1.numel() + 1, device="cuda")
        misaligned = flat[1:].view(shape)
        misaligned.copy_(torch.randn(shape, device="cuda"))
        strided = torch.randn(shape[:-1] + (2 * shape[-1],), device="cuda")[..., ::2]
        for x in (misaligned, strided):
            assert _rel(layer(x), eager(x)) < 1e-6
        assert len(_graphs.FAST) == 1 and next(iter(_graphs.FAST.values())) is hit


def test_training_plan_keeps_few_bound_replays(monkeypatch):
    """A training plan keeps at most ``BOUND_MAX`` bound replays: a backward graph captured
    again (evicted) lends another buffer, a new key, and the old bindings are dropped rather
    than kept for ever; a key bound again replaces its binding."""
    monkeypatch.setattr(_torch_dft.BoundBackward, "of", classmethod(lambda cls, *a: object()))
    plan = _torch_dft.TrainingPlan((4,), torch.float32, "auto", (), types.SimpleNamespace(
        backward_ends=None), True, None)
    needs = (True, True, True)
    for borrowed in range(3 * _torch_dft.BOUND_MAX):
        plan.bind_backward(torch, None, (2, 3, 8), 1, needs, borrowed, None)
        assert 1 <= len(plan.bound) <= _torch_dft.BOUND_MAX
        assert ("backward", 1, needs, borrowed) in plan.bound
    first = plan.bound[("backward", 1, needs, borrowed)]
    plan.bind_backward(torch, None, (2, 3, 8), 1, needs, borrowed, None)
    assert plan.bound[("backward", 1, needs, borrowed)] is not first
    assert len(plan.bound) <= _torch_dft.BOUND_MAX


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("shape,n_modes", GPU_CASES)
def test_bound_training_replays(cache, ends, monkeypatch, shape, n_modes):
    """A training call's replays with bound ends, bound once per plan
    (:meth:`fftmatvec.fno._torch_dft.TrainingPlan.forward`, ``backward``): from the plan's
    second call on no call binds its ends again, and every step's output and gradients are
    the eager chain's for fresh inputs; two forwards before their backwards (the lent input
    copied out and put back), a step without ``dL/dx``, a strided ``dL/dy``, an in-place
    update of the weight and the bias, and released graphs stay right."""
    from fftmatvec.fno import _torch_dft

    layer = _layer(shape[1], 6, n_modes, device="cuda")
    eager = _twin(layer, graphs=False)
    made, bound = [], _torch_dft.bound_ends
    monkeypatch.setattr(_torch_dft, "bound_ends", lambda *a: made.append(bound(*a)) or made[-1])
    g_shape = (shape[0], 6) + shape[2:]

    def fresh():
        return torch.randn(shape, device="cuda"), torch.randn(g_shape, device="cuda")

    for i in range(4):
        made.clear()
        x, g = fresh()
        _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
        if i >= 2:  # the first call planned, the second bound: none binds from here
            (plan,) = _graphs.FAST_TRAINING.values()
            kinds = {k[0] for k in plan.bound}
            # a direction bound skips its ends' binding; the whole chains in the graphs bind
            # none
            assert len(made) == (0 if ends == "whole" else 2 - len(kinds))
            if ends == "whole":
                assert not kinds
            elif len(shape) == 3:  # the row kernels take the 1-D layer's ends both ways
                assert kinds == {"forward", "backward"}
    with torch.no_grad():  # an optimiser's step: read in place by the bound launches
        for p in (layer, eager):
            p.weight.mul_(0.5)
            p.bias.add_(1.0)
    x, g = fresh()
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)
    # two forwards, then their backwards in turn: the second replay copies the first's lent
    # input out, its backward puts it back
    (x1, g1), (x2, g2) = fresh(), fresh()
    got, want = [], []
    for f, out in ((layer, got), (eager, want)):
        f.zero_grad(set_to_none=True)
        a, b = x1.clone().requires_grad_(True), x2.clone().requires_grad_(True)
        y1, y2 = f(a), f(b)
        y2.backward(g2)
        w2 = f.weight.grad.clone()
        f.zero_grad(set_to_none=True)
        y1.backward(g1)
        out += [y1.detach(), y2.detach(), a.grad, b.grad, w2, f.weight.grad, f.bias.grad]
    _close(got, want, 1e-6)
    for _ in range(2):  # no dL/dx: another signature, planned, then bound
        x, g = fresh()
        _close(_step(layer, x, g, need_x=False), _step(eager, x, g, need_x=False), 1e-6)
    x = torch.randn(shape, device="cuda")
    strided = torch.randn(g_shape[:-1] + (2 * g_shape[-1],), device="cuda")[..., ::2]
    got = []
    for f in (layer, eager):
        f.zero_grad(set_to_none=True)
        xg = x.clone().requires_grad_(True)
        f(xg).backward(strided)
        got.append([xg.grad, f.weight.grad, f.bias.grad])
    _close(got[0], got[1], 1e-6)
    for plan in _graphs.FAST_TRAINING.values():
        for hit in plan.bound.values():
            hit.entry.release()  # as an eviction releases them: the replays' own steps
    x, g = fresh()
    _close(_step(layer, x, g), _step(eager, x, g), 1e-6)


@pytest.mark.gpu
@cuda
def test_cuda_graphs_outputs_do_not_alias(cache, ends):
    """Calling twice and keeping the first result: it is unchanged (forward and gradient)."""
    layer = _layer(8, 8, (12, 12), device="cuda")
    x1, x2 = torch.randn(4, 8, 32, 32, device="cuda"), torch.randn(4, 8, 32, 32, device="cuda")
    with torch.no_grad():
        y1 = layer(x1)
        keep = y1.clone()
        y2 = layer(x2)
    torch.cuda.synchronize()
    assert torch.equal(y1, keep) and not torch.equal(y1, y2)
    a = x1.clone().requires_grad_(True)
    layer(a).sum().backward()
    ga, gw, gb = a.grad, layer.weight.grad, layer.bias.grad
    keep = [t.clone() for t in (ga, gw, gb)]
    layer.zero_grad(set_to_none=True)
    b = x2.clone().requires_grad_(True)
    (2 * layer(b)).sum().backward()
    torch.cuda.synchronize()
    for t, k in zip((ga, gw, gb), keep):
        assert torch.equal(t, k)
    assert not torch.equal(ga, b.grad) and not torch.equal(gw, layer.weight.grad)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("need", [(True, False, False), (False, True, False),
                                  (False, False, True), (True, True, False)])
@pytest.mark.parametrize("bias", [True, False])
def test_cuda_graphs_needs_input_grad(cache, ends, need, bias):
    need_x, need_w, need_b = need
    if need_b and not bias:
        pytest.skip("no bias to differentiate")
    layer = _layer(8, 6, (12, 12), device="cuda", bias=bias)
    eager = _twin(layer, graphs=False)
    for lay in (layer, eager):
        lay.weight.requires_grad_(need_w)
        if bias:
            lay.bias.requires_grad_(need_b)
    x, g = torch.randn(4, 8, 30, 30, device="cuda"), torch.randn(4, 6, 30, 30, device="cuda")
    got, want = _step(layer, x, g, need_x), _step(eager, x, g, need_x)
    _close(got, want, 1e-6)
    assert len(cache) == 2


@pytest.mark.gpu
@cuda
def test_cuda_graphs_two_forwards_one_backward(cache, ends):
    layer = _layer(8, 8, (12, 12), device="cuda")
    eager = _twin(layer, graphs=False)
    x, g = torch.randn(4, 8, 32, 32, device="cuda"), torch.randn(4, 8, 32, 32, device="cuda")

    def run(lay):
        lay.zero_grad()
        xr = x.clone().requires_grad_(True)
        y = lay(torch.tanh(lay(xr)))
        (y * g).sum().backward()
        return [y.detach(), xr.grad, lay.weight.grad.clone(), lay.bias.grad.clone()]

    _close(run(layer), run(eager), 1e-6)
    assert len(cache) == 2


@pytest.mark.gpu
@cuda
def test_cuda_graphs_replaced_weight_recaptures(cache):
    layer = _layer(8, 8, (12, 12), device="cuda")
    x = torch.randn(4, 8, 32, 32, device="cuda")
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(0.5)                  # an in-place update: the same graph sees it
        got = layer(x)
        assert len(cache) == 1 and _rel(got, _twin(layer, graphs=False)(x)) < 1e-6
        old = layer.weight.data_ptr()
        layer.weight = torch.nn.Parameter(torch.randn_like(layer.weight))
        assert layer.weight.data_ptr() != old
        got = layer(x)
        assert len(cache) == 2 and _rel(got, _twin(layer, graphs=False)(x)) < 1e-6


@pytest.mark.gpu
@cuda
def test_cuda_graphs_inside_user_capture(cache):
    """Inside the caller's own capture the layer runs the eager chain, which that graph
    captures: replaying it with new inputs gives the layer's outputs."""
    layer = _layer(8, 8, (12, 12), device="cuda")
    eager = _twin(layer, graphs=False)
    static = torch.randn(4, 8, 32, 32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            layer(static)
    torch.cuda.current_stream().wait_stream(side)
    before = len(cache)
    assert len(_graphs.FAST) == 1  # the warm-up's signature, on the capture's stream
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=side):
        out = layer(static)
    assert len(cache) == before                 # nothing captured of our own inside
    for _ in range(2):
        x = torch.randn_like(static)
        static.copy_(x)
        graph.replay()
        with torch.no_grad():
            assert _rel(out, eager(x)) < 1e-6


@pytest.mark.gpu
@cuda
def test_cuda_graphs_not_under_compile_tracing(cache, monkeypatch):
    layer = _layer(8, 8, (12, 12), device="cuda")
    monkeypatch.setattr(_graphs, "_tracing", lambda torch_: True)
    with torch.no_grad():
        y = layer(torch.randn(2, 8, 20, 20, device="cuda"))
    assert y.is_cuda and len(cache) == 0


@pytest.mark.gpu
@cuda
def test_cuda_graphs_with_torch_compile(cache):
    """``torch.compile`` of the layer (dynamo, eager backend): the call is not traced (an eager
    step of the compiled model, its graphs replayed); outputs and gradients as the layer's
    without graphs."""
    layer = _layer(8, 6, (12, 12), device="cuda")
    eager = _twin(layer, graphs=False)
    compiled = torch.compile(layer, backend="eager")
    x, g = torch.randn(4, 8, 30, 30, device="cuda"), torch.randn(4, 6, 30, 30, device="cuda")
    for _ in range(2):
        _close(_step(compiled, x, g), _step(eager, x, g), 1e-5)
    assert len(cache) > 0  # the compiled model's call captured (and replayed) its graphs


@pytest.mark.gpu
@cuda
def test_cuda_graphs_lent_input_interleaved(cache, ends):
    """On the device: forwards before their backwards in any order, and a backward run twice,
    against the layer without graphs (the backward graph reads the forward graph's buffer)."""
    layer = _layer(8, 6, (12, 12), device="cuda", graphs=True)
    eager = _twin(layer, graphs=False)
    xs = [torch.randn(4, 8, 30, 30, device="cuda") for _ in range(3)]
    gs = [torch.randn(4, 6, 30, 30, device="cuda") for _ in range(3)]
    for order in ([0, 1, 2], [2, 0, 1], [1, 1, 0, 2]):
        _close(_grads(layer, xs, gs, order, retain=True), _grads(eager, xs, gs, order, True),
               1e-5)
    assert len(cache) == 2


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_cuda_graphs_sixteen_bit(cache, ends, name):
    layer = _layer(8, 6, (12, 12), device="cuda", compute_dtype=getattr(torch, name))
    x, g = torch.randn(4, 8, 30, 30, device="cuda"), torch.randn(4, 6, 30, 30, device="cuda")
    _close(_step(layer, x, g), _step(_twin(layer, graphs=False), x, g), 1e-2)
    assert len(cache) == 2


@pytest.mark.gpu
@cuda
def test_cuda_graphs_eviction_frees(cache):
    """Beyond the capacity the least recently used graph is released; the layer still works."""
    cache.capacity = 2
    layer = _layer(4, 4, (8, 8), device="cuda")
    eager = _twin(layer, graphs=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for n in (16, 18, 20, 16):
            x = torch.randn(2, 4, n, n, device="cuda")
            assert _rel(layer(x), eager(x)) < 1e-6
    assert len(cache) == 2


_FAILED_CAPTURE = """
import torch
from fftmatvec._errors import FFTMatvecError
from fftmatvec.fno import SpectralConv, _torch_dft

real = _torch_dft.forward_chain

def syncing(x, *args):
    if torch.cuda.is_current_stream_capturing():
        x.sum().item()
    return real(x, *args)

torch.manual_seed(0)
layer = SpectralConv(4, 4, (8, 8), device="cuda")
x = torch.randn(2, 4, 16, 16, device="cuda")
with torch.no_grad():
    layer.graphs = False
    want = layer(x)
    _torch_dft.forward_chain = syncing
    layer.graphs = "auto"
    try:
        layer(x)
    except FFTMatvecError as err:
        assert "graphs=False" in str(err), err
    else:
        raise AssertionError("a failed capture did not raise")
    layer.graphs = False
    got = layer(x)
    assert float((got - want).abs().max() / want.abs().max()) < 1e-6
print("OK")
"""


@pytest.mark.gpu
@cuda
def test_cuda_graphs_failed_capture():
    """A chain that cannot be captured (a host synchronisation inside) raises, in "auto" as
    with True, naming graphs=False; graphs=False then runs. In a process of its own: after the
    failed capture PyTorch's CUDA random generator refuses further use in that process."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _FAILED_CAPTURE], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stderr[-2000:]


def test_auto_captures_only_layers_whose_input_and_output_fit():
    """``graphs="auto"``: inputs and outputs of at most 384 MiB in inference (the 1-D and 64^2
    benchmark layers, 67-134 MB, and (32, 64, 128^2), 268 MB), 768 MiB in training (the 537 MB
    256^2 layers too); larger ones run op by op; more output channels count. From 192 MiB in
    training, 32 MiB in a forward alone, the graphs hold the chains' middles only."""
    fits = _graphs.auto_fits
    assert fits((32, 64, 64, 64), 4, 64) and fits((64, 64, 4096), 4, 64)
    assert fits((32, 64, 128, 128), 4, 64)
    assert fits((32, 64, 128, 128), 4, 64, training=True)
    assert not fits((16, 64, 256, 256), 4, 64) and fits((16, 64, 256, 256), 4, 64, True)
    assert not fits((16, 128, 256, 256), 4, 128, True)
    assert not fits((32, 64, 64, 64), 4, 1024)
    assert fits((16, 64, 256, 256), 2, 64)  # 16-bit storage: half the bytes
    limit = _graphs.AUTO_MAX_BYTES
    assert fits((1, 1, limit // 8), 4, 1) and not fits((1, 1, limit // 8 + 1), 4, 1)
    limit = _graphs.AUTO_MAX_BYTES_TRAINING
    assert fits((1, 1, limit // 8), 4, 1, True) and not fits((1, 1, limit // 8 + 1), 4, 1, True)
    ends = _graphs.ends_outside
    assert not ends((32, 64, 64, 64), 4, 64) and not ends((1024, 64, 128), 4, 64)
    assert ends((32, 64, 128, 128), 4, 64) and ends((4, 32, 64, 64, 64), 4, 32)
    assert not ends((32, 64, 128, 128), 2, 64)
    edge = _graphs.ENDS_MIN_BYTES
    assert not ends((1, 1, edge // 8), 4, 1) and ends((1, 1, edge // 8 + 1), 4, 1)
    # a forward alone takes the ends outside from a smaller size
    edge = _graphs.ENDS_MIN_BYTES_INFERENCE
    assert edge < _graphs.ENDS_MIN_BYTES
    assert not ends((1, 1, edge // 8), 4, 1, training=False)
    assert ends((1, 1, edge // 8 + 1), 4, 1, training=False)
    assert not ends((1, 1, edge // 8 + 1), 4, 1, training=True)
    assert ends((32, 64, 64, 64), 4, 64, training=False)
    # in training too for a one-axis layer whose ends are the package's kernels (bound)
    assert ends((1024, 64, 128), 4, 64, True, kernel_ends=True)
    assert not ends((1024, 64, 128), 4, 64, True, kernel_ends=False)
    assert not ends((32, 64, 64, 64), 4, 64, True, kernel_ends=True)
    assert ends((1, 1, edge // 8 + 1), 4, 1, True, kernel_ends=True)
    assert not ends((1, 1, edge // 8), 4, 1, True, kernel_ends=True)


@pytest.mark.parametrize("shape,n_modes", [((2, 3, 16), 8), ((2, 3, 12, 10), (6, 8)),
                                           ((1, 2, 6, 5, 8), (4, 3, 6))])
def test_replay_ends_outside_the_graph(fake, cache, monkeypatch, shape, n_modes):
    """With the ends outside, the graphs hold the chains' middles: the forward graph's input is
    the first step's rows (not a copy of x) and the backward's the adjoint's; the output and
    dL/dx are new tensors, sharing no memory with a graph's buffers; a layer below
    ENDS_MIN_BYTES keeps its whole chain in the graph."""
    _ends_from(monkeypatch, 0)
    layer = _layer(shape[1], 4, n_modes)
    x = torch.randn(shape).requires_grad_(True)
    y = layer(x)
    y.backward(torch.randn_like(y))
    fwd, bwd = cache._entries.values()
    per_row = shape[-1]                  # on the CPU the first step is the last axis's GEMM
    # its rows run down the first axis of its output, or along the second with the split modes
    axis = 1 if getattr(_torch_dft.chain_for(x, torch.float32, kept_modes(n_modes), 4),
                        "split", False) else 0
    assert axis == (len(shape) == 3)
    for entry, channels in ((fwd, shape[1]), (bwd, 4)):   # dL/dy has the 4 output channels
        rows = shape[0] * channels * math.prod(shape[2:]) // per_row
        assert entry.inputs[0].dim() == 2 and entry.inputs[0].shape[axis] == rows
        buffers = {t.untyped_storage().data_ptr() for t in entry.inputs + entry.outputs
                   if t is not None}
        for t in (y, x.grad):
            assert t.untyped_storage().data_ptr() not in buffers
    clear_graphs()
    _ends_from(monkeypatch, 2**62)
    y = layer(x)
    (fwd,) = cache._entries.values()
    assert fwd.inputs[0].shape == x.shape
    # plan key fno_ends: the middles at any size (1), the whole chains above the limit (0)
    for value, limit, whole in (("1", 2**62, False), ("0", 0, True)):
        clear_graphs()
        _ends_from(monkeypatch, limit)
        set_plan(monkeypatch, "fno_ends", value)
        y = layer(x)
        y.backward(torch.randn_like(y))
        for entry in cache._entries.values():
            assert (entry.inputs[0].dim() == x.dim()) == whole
    set_plan(monkeypatch, "fno_ends", None)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no_input_requires_grad"])
def test_forward_without_gradients_skips_the_function(fake, cache, monkeypatch, mode):
    """Where no gradient can be wanted the forward runs without the autograd Function (its
    bookkeeping is host time): the replayed and the eager outputs equal the Function's, and
    nothing is recorded for autograd."""
    from fftmatvec.fno import _torch_dft

    layer = _layer(3, 4, (6, 8))
    eager = _twin(layer, graphs=False)
    x = torch.randn(2, 3, 12, 10)
    want = layer(x).detach()                     # grad mode on, weight requires grad: Function
    monkeypatch.setattr(_torch_dft, "_FN", None)
    monkeypatch.setattr(_torch_dft, "_function", lambda: pytest.fail("the Function was used"))
    if mode == "no_input_requires_grad":
        for lay in (layer, eager):
            lay.requires_grad_(False)
        context = contextlib.nullcontext()
    else:
        context = getattr(torch, mode)()
    with context:
        for lay in (layer, eager, layer):
            y = lay(x)
            assert y.grad_fn is None and not y.requires_grad
            assert _rel(y, want) < 1e-6
    assert [gr.replays for gr in fake] == [3]    # one graph: the Function's call and two more


def test_forward_without_gradients_under_compile(cache):
    """``torch.compile`` (eager backend) of a layer called without gradients: outputs as
    without compile."""
    layer = _layer(3, 4, (6, 8))
    compiled = torch.compile(layer, backend="eager")
    x = torch.randn(2, 3, 12, 10)
    with torch.no_grad():
        want = _twin(layer, graphs=False)(x)
        for _ in range(2):
            assert _rel(compiled(x), want) < 1e-6
