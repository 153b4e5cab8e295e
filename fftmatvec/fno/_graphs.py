"""CUDA-graph replay of the DFT path's GEMM chains: the option, the keys, the cache, the capture.

On a small layer the GPU waits for the host: the forward and the backward are chains of 10 to 15
small launches. Captured once per call signature into a ``torch.cuda.CUDAGraph``, a chain is
replayed in one launch on the current stream: the inputs are copied into the graph's static buffers
and the outputs cloned out of its buffers, so nothing returned aliases memory that the next replay
overwrites. The exception is the modes-major input that the backward reads: it stays in the forward
graph's buffer, lent to the call's backward (:class:`Slot`), whose graph reads it there; a replay
that would overwrite it while that backward can still run copies it out first. On a larger layer
(:func:`ends_outside`) the graph holds the chain's middle: the chain's first step runs outside it
and writes its rows into the graph's input buffer, and its last step reads the graph's output and
writes a new tensor (:func:`fftmatvec.fno._torch_dft._replay_forward`), so no full-size tensor is
copied in or out.

A graph reads the weight and the bias where they lie (their addresses, layouts and dtypes are
in the key: an optimizer's in-place update is seen, a replaced parameter is a new capture).
Every graph holds a private memory pool, about the chain's peak working memory for its call:
its static inputs, its intermediates and its outputs; the cache keeps at most
:data:`CAPACITY` graphs per process and releases the least recently used one beyond that.

The option, the keys (:func:`problem_key`) and the cache (:class:`GraphCache`) need no GPU and
are unit-tested with stand-in captures, :func:`capture`'s steps with a stand-in ``torch.cuda``,
and :class:`Captured` with a stand-in graph; only the real capture and replay need CUDA.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from .. import _warnings
from .._errors import FFTMatvecError, FFTMatvecValueError

#: The most graphs the process keeps: a forward and a backward per layer and input shape in
#: training, so 64 serve 32 layers, or fewer layers with a second batch size or evaluation.
CAPACITY = 64

#: Eager runs of a chain on the capture stream before its capture: libraries initialise lazily
#: (cuBLAS handles and workspaces), which a capture must not see.
WARMUP = 2


#: ``graphs="auto"`` captures while the input and the output together hold at most this many
#: bytes: :data:`AUTO_MAX_BYTES` in inference, :data:`AUTO_MAX_BYTES_TRAINING` where gradients
#: are wanted. A replay of a whole chain copies the input into the graph and the output out
#: of it, two passes that a large layer's eager chain does not make, against the host time it
#: saves; past these sizes the passes cost more (scripts/bench_fno.py, graphed against op by
#: op; docs/benchmarks.md). A graph with its ends outside (:data:`ENDS_MIN_BYTES`) holds
#: mode-sized buffers, not x and y, so the larger limit in training costs little memory.
AUTO_MAX_BYTES = 384 * 2**20
AUTO_MAX_BYTES_TRAINING = 768 * 2**20

#: A graph holds only the middle of its chain, the first and the last step run outside it, from
#: this many bytes of input and output together where gradients are wanted (a training step's
#: forward and its backward): there the copies in and out that it saves cost more than the host
#: time of launching two steps outside it in each. Below, where a layer waits for the host, the
#: whole chain is in the graph: the ends outside are four kernel launches from Python inside a
#: layer's call, each more host time than a copy in or a clone out (docs/benchmarks.md).
ENDS_MIN_BYTES = 192 * 2**20
#: The same for a forward alone (no gradient wanted), which launches two steps outside its
#: graph, not four.
ENDS_MIN_BYTES_INFERENCE = 32 * 2**20


def _layer_bytes(x_shape, itemsize: int, cout: int) -> int:
    """Bytes of an input ``(B, Cin, *spatial)`` and its output of ``cout`` channels."""
    per = 1
    for n in (x_shape[0],) + tuple(x_shape[2:]):
        per *= int(n)
    return itemsize * per * (int(x_shape[1]) + int(cout))


def ends_outside(x_shape, itemsize: int, cout: int, training: bool = True,
                 kernel_ends: bool = False) -> bool:
    """Whether a graph of the layer holds only its chain's middle: above
    :data:`ENDS_MIN_BYTES` where gradients are wanted (``training``), else above
    :data:`ENDS_MIN_BYTES_INFERENCE`; for one-axis layers whose ends are the package's kernels,
    their launches bound (``kernel_ends``: :func:`fftmatvec.fno._torch_dft.bound_ends`), above
    :data:`ENDS_MIN_BYTES_INFERENCE` in training too.

    The ends bound gain in training; the two-axis layers' plane kernels do not
    (docs/benchmarks.md)."""
    limit = ENDS_MIN_BYTES_INFERENCE if not training or (
        kernel_ends and len(x_shape) == 3) else ENDS_MIN_BYTES
    return len(x_shape) >= 2 and _layer_bytes(x_shape, itemsize, cout) > limit


def auto_fits(x_shape, itemsize: int, cout: int, training: bool = False) -> bool:
    """Whether ``graphs="auto"`` captures for an input ``(B, Cin, *spatial)`` of ``itemsize``
    bytes an element and ``cout`` output channels (:data:`AUTO_MAX_BYTES`, or
    :data:`AUTO_MAX_BYTES_TRAINING` where ``training``)."""
    if len(x_shape) < 2:
        return True
    limit = AUTO_MAX_BYTES_TRAINING if training else AUTO_MAX_BYTES
    return _layer_bytes(x_shape, itemsize, cout) <= limit


def check_option(graphs):
    """``graphs`` if it is one of ``"auto"``, ``True``, ``False``; FFTMatvecValueError if not."""
    if graphs is True or graphs is False or (isinstance(graphs, str) and graphs == "auto"):
        return graphs
    raise FFTMatvecValueError(f"graphs: expected 'auto', True or False, got {graphs!r}")


def _tracing(torch):
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def replayable(torch, t):
    """Whether a graph may replay for the tensor ``t`` now: not under ``torch.compile`` or
    ``torch.jit`` tracing (compiled autograd's included), not while the current stream is
    capturing, ``t`` no tensor subclass. A backward whose forward replayed a graph asks only
    this of ``dL/dy`` (:func:`wanted` answered the rest for the forward)."""
    plain = (torch.Tensor, torch.nn.Parameter)
    return not (_tracing(torch) or type(t) not in plain
                or (t.is_cuda and torch.cuda.is_current_stream_capturing()))


def grad_wanted(torch, x, weight, bias) -> bool:
    """Whether a call records a gradient: grad mode on and ``x``, the weight or the bias
    (None: none) requiring one."""
    return torch.is_grad_enabled() and (x.requires_grad or (
        weight is not None and weight.requires_grad) or (bias is not None and bias.requires_grad))


def wanted(torch, graphs, x, weight, bias, training=None):
    """The option to replay graphs with (``"auto"`` or ``True``), or ``False`` for the eager
    chain: on CPU tensors, under ``torch.compile`` or ``torch.jit`` tracing, while the current
    stream is capturing (the caller's own graph captures the eager chain), and for tensor
    subclasses (fake tensors) or parameters on another device (the eager chain reports it);
    with ``"auto"`` also for a weight or bias computed in the autograd graph (not a leaf) and
    for inputs and outputs larger than :data:`AUTO_MAX_BYTES` (``training``, default: whether
    gradients are wanted: :data:`AUTO_MAX_BYTES_TRAINING`).

    Raises FFTMatvecValueError for ``graphs=True`` on tensors that are not on a CUDA device."""
    if graphs is False:
        return False
    if not x.is_cuda:
        if graphs is True:
            raise FFTMatvecValueError(
                f"graphs=True: CUDA graphs need CUDA tensors, got x on {x.device} "
                "(pass graphs='auto' or False)"
            )
        return False
    if not replayable(torch, x):
        return False
    if training is None:  # gradients wanted: the forward of a training step
        training = grad_wanted(torch, x, weight, bias)
    if (graphs == "auto" and weight is not None and weight.dim() >= 2
            and not auto_fits(tuple(x.shape), x.element_size(), weight.shape[1], training)):
        return False
    dev, plain = x.device, (torch.Tensor, torch.nn.Parameter)
    for t in (weight, bias):
        if t is not None and (type(t) not in plain or t.device != dev):
            return False
        if graphs == "auto" and t is not None and t.requires_grad and not t.is_leaf:
            return False  # computed anew every call: a new address, a new capture each time
    return graphs


def tensor_key(t):
    """``(address, dtype, shape, strides)`` of a tensor that a graph reads in place; None."""
    if t is None:
        return None
    return t.data_ptr(), t.dtype, tuple(t.shape), t.stride()


def problem_key(x_shape, x_dtype, device, cdtype, modes, weight, bias):
    """What a capture depends on besides the stream and the direction: the input's shape, dtype
    and device, the compute dtype, the modes, and where and how the weight and the bias lie."""
    return (tuple(x_shape), x_dtype, device, cdtype, tuple(modes), tensor_key(weight),
            tensor_key(bias))


def forward_key(problem, stream):
    """The forward graph's key: ``stream`` the current stream's id (each stream replays its own
    graph, so two streams never share static buffers)."""
    return "forward", stream, problem


def backward_key(problem, stream, needs, g_dtype, borrowed=None):
    """The backward graph's key: ``needs`` which of ``dL/dx, dL/dW, dL/db`` are computed;
    ``borrowed`` the address of the forward graph's buffer that it reads in place (None: a
    static copy), which the graph keeps allocated while it lives."""
    return "backward", stream, problem, tuple(bool(n) for n in needs), g_dtype, borrowed


class GraphCache:
    """A bounded LRU of captured graphs.

    ``get(key, capture)`` returns the entry for ``key``, captured by ``capture()`` on a miss (a
    capture that raises leaves nothing in the cache and raises). An entry is anything with
    ``release()``, called when it is evicted (beyond ``capacity``) or cleared. Once
    ``capacity`` entries have been evicted (more signatures in use than the cache holds, each
    captured again on its next call) it warns.
    """

    def __init__(self, capacity=CAPACITY):
        self.capacity = int(capacity)
        self.evictions = 0
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._entries)

    def __contains__(self, key):
        return key in self._entries

    def get(self, key, capture):
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
        entry = capture()
        with self._lock:
            old = self._entries.pop(key, None)  # another thread's capture of the same key
            self._entries[key] = entry
            evicted = []
            while len(self._entries) > self.capacity:
                evicted.append(self._entries.popitem(last=False)[1])
            before, self.evictions = self.evictions, self.evictions + len(evicted)
            churn = before < self.capacity <= self.evictions
        for e in evicted + ([old] if old is not None else []):
            e.release()
        if churn:
            _warnings.warn(
                f"SpectralConv: {self.capacity} CUDA graphs of the DFT chain evicted: more call "
                "signatures (input shapes, weights, streams) are in use than the cache holds, "
                "and each is captured again on its next call (graphs=False runs the eager "
                "chain)", RuntimeWarning)
        return entry

    def clear(self):
        """Release every graph."""
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        for e in entries:
            e.release()


CACHE = GraphCache()

#: Forwards without gradients that replayed a graph, by their call's signature
#: (:func:`fftmatvec.fno._torch_dft.fast_key`): what the next such call replays without its
#: checks and planning (:func:`fftmatvec.fno._torch_dft.fast_forward`). Cleared with the
#: graphs; the oldest out past :data:`FAST_MAX`.
FAST: dict = {}
#: Calls with gradients wanted whose forward replayed a graph, by their call's signature: the
#: planning the next such call takes (:class:`fftmatvec.fno._torch_dft.TrainingPlan`).
FAST_TRAINING: dict = {}
FAST_MAX = 64
#: Counts :func:`clear_graphs`'s calls: a layer's memo of its forwards
#: (:class:`fftmatvec.fno._torch_dft.LayerFast`) keeps what ``FAST`` held before the last.
EPOCH = [0]

# one capture at a time in the process (a CUDA-graph restriction); one side stream per device,
# for the warm-up and the capture both (cuBLAS keeps a workspace per stream)
_CAPTURE_LOCK = threading.Lock()
_STREAMS: dict = {}


def clear_graphs() -> None:
    """Release the CUDA graphs of the FNO layers' DFT path and their memory pools.

    The memory goes back to PyTorch's caching allocator (``torch.cuda.empty_cache()`` returns
    it to the device); the next call of a layer captures its graph again."""
    EPOCH[0] += 1
    for hit in list(FAST.values()):  # what a fast path holds besides graphs (spare outputs)
        release = getattr(hit, "release", None)
        if release is not None:
            release()
    FAST.clear()
    FAST_TRAINING.clear()
    CACHE.clear()


#: ``wanted`` for an output of :meth:`Captured.run` left in its buffer and lent (:class:`Slot`).
LEND = "lend"


class Lent:
    """A forward's output left in its graph's buffer for the backward (:meth:`Slot.lend`):
    ``value`` is None while the buffer holds it, its copy once a replay was to overwrite it;
    ``alive()`` the token, a tensor the caller saves for the backward, which autograd frees
    once no backward can run (after one without ``retain_graph``), or None since then."""

    __slots__ = ("slot", "value", "alive")


class Slot:
    """An output buffer of a graph lent to the one call whose output it holds, copy on
    overwrite: a replay about to write it copies the output out first for a call whose
    backward can still run (its token alive), and that call's backward reads the buffer in
    place (:meth:`hold`), or puts its copy back. In a training loop the backward runs before
    the next forward, which then copies nothing: the modes-major input the backward reads
    goes neither out of the forward's graph nor into the backward's.

    ``lock``: the lock of the graph that writes the buffer; whoever reads the buffer holds it
    while its own reads are queued."""

    def __init__(self, buf, lock):
        self.buf, self.lock = buf, lock
        self._lent = None      # the Lent of the output the buffer holds

    def vacate(self):
        """Before the buffer is written: its output copied out where it may still be read."""
        lent, self._lent = self._lent, None
        if lent is not None and lent.value is None and lent.alive() is not None:
            lent.value = self.buf.clone()

    def lend(self, token):
        """A :class:`Lent` of the output the buffer holds now, ``token`` its holder's."""
        lent = Lent()
        lent.slot, lent.value, lent.alive = self, None, weakref.ref(token)
        self._lent = lent
        return lent

    def hold(self, lent):
        """The buffer, holding ``lent``'s output (put back from its copy where a replay
        overwrote it); call with :attr:`lock` held."""
        if lent.value is not None:
            self.vacate()
            self.buf.copy_(lent.value)
            lent.value = None
            self._lent = lent
        return self.buf


class Borrowed:
    """An argument that a graph reads in place rather than from a static copy: another
    graph's output buffer (:class:`Slot`)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def static_input(torch, a, device):
    """The static input of a capture for the argument ``a``: a copy of it, the tensor of a
    :class:`Borrowed`, or None."""
    if a is None:
        return None
    if isinstance(a, Borrowed):
        return a.tensor
    return torch.empty(a.shape, dtype=a.dtype, device=device).copy_(a)


class Captured:
    """One captured chain: its static inputs, the graph, its outputs. ``run(args, wanted)``
    copies ``args`` into the inputs (None: no copy, for a buffer that is not needed or is
    borrowed: :class:`Borrowed`), replays the graph on the current stream and returns clones of
    the outputs where ``wanted`` is True, a :class:`Lent` of the output left in its buffer where
    it is :data:`LEND` (``token`` its holder's), None elsewhere, or None once released. With
    ``start``, ``start(buffer)`` writes the first input in place of a copy; with ``end``, the
    first output (where wanted) is ``end(buffer)`` in place of a clone: the chain's first and
    last steps, run in turn with the replay. ``keep``: what the graph reads and nothing else
    holds (the DFT matrices, a borrowed buffer)."""

    def __init__(self, graph, inputs, outputs, device, keep=()):
        self.graph, self.inputs, self.outputs = graph, tuple(inputs), tuple(outputs)
        self.device, self._keep = device, keep
        # copy in, replay and clone out in turn (two threads on one stream), never released
        # in between
        self._lock = threading.RLock()
        self._slots: dict = {}

    def slot(self, i):
        """The :class:`Slot` of output ``i``."""
        s = self._slots.get(i)
        if s is None:
            s = self._slots[i] = Slot(self.outputs[i], self._lock)
        return s

    def run(self, args, wanted, start=None, end=None, token=None):
        with self._lock:
            if self.graph is None:
                return None
            for s in self._slots.values():  # first: a lent output may lie in an input buffer
                s.vacate()
            for i, (buf, a) in enumerate(zip(self.inputs, args)):
                if i == 0 and start is not None:
                    start(buf)
                elif buf is not None and a is not None:
                    buf.copy_(a)
            self.graph.replay()
            return tuple(None if not w or o is None else
                         self.slot(i).lend(token) if w is LEND else
                         end(o) if i == 0 and end is not None else o.clone()
                         for i, (o, w) in enumerate(zip(self.outputs, wanted)))

    def run_between(self, before, after):
        """``before()``, the replay and ``after()`` in turn, lent outputs vacated first:
        ``after()``'s value, or None once released or where ``before()`` returns False (no
        replay then). For a forward whose ends are bound launches
        (:class:`fftmatvec.fno._torch_dft.BoundEnds`): ``before`` writes the input buffer,
        ``after`` reads the output buffer."""
        with self._lock:
            if self.graph is None:
                return None
            for s in self._slots.values():
                s.vacate()
            if before() is False:
                return None
            self.graph.replay()
            return after()

    def release(self):
        import torch

        with self._lock:
            if self.graph is None:
                return
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # no replay of this graph still queued
            self.graph.reset()
            self.graph = None
            self.inputs = self.outputs = self._keep = ()
            self._slots = {}  # a lent output stays in its buffer, which no replay writes now


def capture(torch, fn, args, device, precision, keep=()):
    """Capture ``fn(*inputs)`` into a CUDA graph, ``inputs`` static copies of ``args`` (tensors,
    or None for an argument not needed).

    ``precision()``: the context the chain's GEMMs run in, entered around the warm-up and the
    capture, so that the captured kernels have the layer's precision. The warm-up and the
    capture run on a side stream that waits for the current one; ``torch.cuda.graph``
    synchronises the device before capturing. The buffers are made outside inference mode and
    autograd, so that later calls in any mode can copy into them."""
    with _CAPTURE_LOCK, torch.cuda.device(device), torch.inference_mode(False), \
            torch.no_grad(), precision():
        inputs = tuple(static_input(torch, a, device) for a in args)
        side = _STREAMS.get(device)
        if side is None:
            side = _STREAMS[device] = torch.cuda.Stream(device)
        current = torch.cuda.current_stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                fn(*inputs)
        current.wait_stream(side)
        graph, pool = torch.cuda.CUDAGraph(), torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=pool, stream=side,
                                  capture_error_mode="thread_local"):
                outputs = fn(*inputs)
        except BaseException:
            _end_pool(torch, device, pool)
            raise
        finally:  # a failed capture_end leaves the capture stream current
            if torch.cuda.current_stream(device) != current:
                torch.cuda.set_stream(current)
    return Captured(graph, inputs, outputs, device, keep)


def explained(capture):
    """``capture`` whose failure raises FFTMatvecError saying what to do. The layer
    raises rather than running the eager chain: after a failed capture PyTorch's CUDA state
    can stay inconsistent (its CUDA random generator, with PyTorch 2.11, then refuses every
    later ``torch.randn`` on the device), so the process should know at once."""
    def run():
        try:
            return capture()
        except Exception as err:
            raise FFTMatvecError(
                f"SpectralConv: capturing the DFT chain into a CUDA graph failed ({err!r}); "
                "pass graphs=False to run it op by op. After a failed capture PyTorch's CUDA "
                "state (its random generator) may stay unusable in this process") from err
    return run


def _end_pool(torch, device, pool):
    """After a failed capture: stop routing allocations to the graph's pool, and release it.

    ``CUDAGraph.capture_end`` raises before it tells the caching allocator that the capture is
    over when the capture was invalidated; the allocator's record of a capture underway would
    then fail every later ``empty_cache`` (the next capture's among them) and stop it recycling
    memory used across streams, and the graph, never captured, would not release its pool.
    Where the allocator has no such record (the capture ended: the graph releases its pool
    itself) the call raises, and nothing more is done."""
    end = getattr(torch._C, "_cuda_endAllocateToPool", None)
    release = getattr(torch._C, "_cuda_releasePool", None)
    if end is None or release is None:
        return
    index = torch.device(device).index
    try:
        end(index, pool)
    except Exception:  # noqa: BLE001 - nothing underway: the capture ended
        return
    try:
        release(index, pool)
    except Exception:  # noqa: BLE001 - the capture's own error is the one to report
        pass
