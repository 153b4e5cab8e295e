"""The DFT-product path of the PyTorch layer: an autograd Function over the GEMM chain.

Every GEMM of the forward and the backward runs inside :func:`gemm_precision`: float32 products
in IEEE float32 (no TF32, whatever the process-wide setting), 16-bit products with float32
accumulation and no reduced-precision split-K reduction, and autocast off inside. The settings
are process-wide in PyTorch, so they are set around the layer's GEMMs and restored after them.

On CUDA tensors the forward and the backward chains (:func:`forward_chain`,
:func:`backward_chain`) are captured once per call signature as CUDA graphs, inside that
setting, and replayed (:mod:`._graphs`); elsewhere, and with ``graphs=False``, they run eagerly.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading

from .. import backend
from ..gpu.plan import mode as plan_mode
from ..gpu.plan import plan_key
from ._plan import fno_ends
from . import _dft, _graphs, _rows, _tuning
from ._graphs import grad_wanted

def _torch():
    import torch

    return torch


@contextlib.contextmanager
def gemm_precision(dtype, device_type="cuda"):
    """IEEE float32 matmuls, and float32 reductions for 16-bit ones, restored on exit; autocast
    off (the precision is the layer's ``compute_dtype``, not the autocast region's). Only what
    differs is set, and autocast is entered only where it is on: each step is several
    microseconds of host time, which small layers on a GPU wait for."""
    torch = _torch()
    mm = torch.backends.cuda.matmul
    old = mm.fp32_precision
    flag = {torch.bfloat16: "allow_bf16_reduced_precision_reduction",
            torch.float16: "allow_fp16_reduced_precision_reduction"}.get(dtype)
    old_flag = getattr(mm, flag) if flag else False
    if old != "ieee":
        mm.fp32_precision = "ieee"
    if old_flag:
        setattr(mm, flag, False)
    try:
        if torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type, enabled=False):
                yield
        else:
            yield
    finally:
        if old != "ieee":
            mm.fp32_precision = old
        if old_flag:
            setattr(mm, flag, old_flag)


def _ops(dtype, device):
    torch = _torch()
    return _dft.Ops(view=lambda a, axes: a.permute(axes),
                    matrix=lambda m: torch.as_tensor(m, dtype=dtype, device=device),
                    empty=lambda shape: torch.empty(shape, dtype=dtype, device=device),
                    sub=lambda out, a, b: torch.sub(a, b, out=out),
                    add=lambda out, a, b: torch.add(a, b, out=out),
                    neg=lambda out, a: torch.neg(a, out=out),
                    as_complex=torch.view_as_complex, as_real=torch.view_as_real,
                    conj_t=lambda a: a.mH,
                    matmul=lambda a, b, out: torch.matmul(a, b, out=out),
                    muladd=lambda out, a, b, sign: out.baddbmm_(a, b, alpha=sign))


def complex_product(cdtype) -> bool:
    """Whether the channel product runs in complex arithmetic: for float32 and float64 (one
    complex GEMM per mode); 16-bit storage has no complex GEMM, so it runs on the real view."""
    torch = _torch()
    return cdtype in (torch.float32, torch.float64)


def weight_view(weight, cdtype):
    """The complex weight ``(Cin, Cout, *modes)`` modes-major: complex ``(M, Cin, Cout)`` for
    float32 and float64 (:func:`complex_product`), else seen as real ``(M, Cin, 2 Cout)`` in
    ``cdtype``; a view when the weight is stored modes-major and already in that precision."""
    torch = _torch()
    C, O = weight.shape[:2]
    wmm = weight.reshape(C, O, -1).permute(2, 0, 1)
    if complex_product(cdtype):
        return wmm.to(cdtype.to_complex())
    return torch.view_as_real(wmm).to(cdtype).reshape(wmm.shape[0], C, 2 * O)


def modes_major_complex(gw, shape, dtype):
    """``dL/dW`` laid out as the modes-major weight, from its complex ``(M, Cin, Cout)`` or
    real-view ``(M, Cin, 2 Cout)`` form."""
    torch = _torch()
    if not gw.is_complex():
        M, C, O2 = gw.shape
        gw = torch.view_as_complex(gw.to(dtype.to_real()).reshape(M, C, O2 // 2, 2).contiguous())
    return gw.to(dtype).permute(1, 2, 0).reshape(shape)


@functools.lru_cache(maxsize=64)
def _chain(device, dtype_name, spatial, modes, rows=frozenset(), plane=frozenset(),
           layout="interleaved", variant="auto", product=False, fused=False, channels=None):
    torch = _torch()
    dev = torch.device(device)
    return _dft.make_chain(_ops(getattr(torch, dtype_name), dev), spatial, modes, dev.index,
                           rows, plane, layout, variant, product, fused, channels)


def chain_for(x, dtype, modes, cout=None, tuned=()):
    """The cached DFT matrices for ``x``'s grid and device in ``dtype`` (``cout`` output
    channels, default ``x``'s): the modes split (:class:`._dft.SplitChain`), the last axis on
    the row FFT kernels and the last two on the plane kernels where the planner says so
    (:func:`fftmatvec.fno._plan.fno_chain`), asked once per shape, device, dtype and value
    of ``FFTMATVEC_PLAN`` and tuned plan ``tuned`` (the pairs of the layer's FNO tuning table
    entry, :mod:`._tuning`)."""
    B, C = x.shape[:2]
    return _planned_chain(x.device, dtype, tuple(x.shape[2:]), tuple(modes), plan_key(),
                          (B, C, C if cout is None else cout), tuned)


@functools.lru_cache(maxsize=256)
def _planned_chain(device, dtype, spatial, modes, plan, channels, tuned=()):
    """:func:`chain_for`'s chain (``plan``: the raw ``FFTMATVEC_PLAN``, a key only;
    ``channels``: ``(B, Cin, Cout)``): on the path of every call, where the planner's
    questions cost a small layer's device tens of microseconds of waiting."""
    from ._plan import fno_chain

    name = str(dtype).rsplit(".", 1)[-1]
    kernels = device.type == "cuda" and name == "float32"
    choice = fno_chain(*channels, spatial, modes, name, device.index, kernels, tuned)
    return _chain(str(device), name, spatial, modes, *choice,
                  channels=channels[1] if choice[5] else None)


# The chains in three parts: the first step and the last, and the middle; a CUDA graph of the
# middle, its ends run outside it, copies no full-size tensor in or out (:func:`_replay_forward`);
# the eager chain is the three in turn.

def forward_start(x, chain, cdtype, out=None):
    """The forward's first step (the analysis's first axes): rows, into ``out`` if given."""
    return chain.analysis_start(x.to(cdtype), out)


def end_bias(chain, bias):
    """The bias ``(O,)`` (a view of ``bias``: its address) where the synthesis's last step, a
    kernel, adds it to the constant mode (:func:`._dft.kernel_bias`: a paired chain's row or
    plane kernel, ``bias`` contiguous float32 on its device), else None: the middle adds it
    (:func:`forward_middle`) or :func:`forward_end` after the synthesis. A function of the
    chain and of the bias's dtype, layout and device alone, which the graphs' keys hold
    (:func:`._graphs.problem_key`; :func:`_forward` puts the answer in as well), so that a
    graph's middle and the ends run outside it agree on who adds it: every path adds it
    once."""
    if bias is None or not chain.end_bias or not bias.is_contiguous():
        return None
    return _dft.kernel_bias(chain, bias.reshape(-1))


def forward_middle(H, x_shape, weight, bias, chain, cdtype):
    """From the first step's rows ``H`` to the rows the synthesis's last step reads, and the
    modes-major input ``Xs`` the backward reads: complex ``(M, B, Cin)``, or real ``(M, 2B,
    Cin)`` for 16-bit storage (:func:`complex_product`), or on the split modes
    (:class:`._dft.SplitChain`) ``H`` itself seen as ``(2, M, B, Cin)``. The bias is added to
    the constant mode unless the last step's kernel adds it (:func:`end_bias`)."""
    ops = _ops(cdtype, H.device)
    b = None if bias is None or end_bias(chain, bias) is not None else (
        bias.reshape(-1).to(cdtype))
    X = chain.analysis_rest(H, x_shape)
    Y, Xs = _dft.modes_step(ops, chain, X, weight_view(weight, cdtype), b)
    return chain.synthesis_front(Y), Xs


def forward_end(T, chain, y_shape, bias, cdtype, x_dtype):
    """The synthesis's last step from the rows ``T``, its kernel adding the bias where it takes
    it (:func:`end_bias`), else the bias where no mode took it: ``y`` ``y_shape`` in
    ``x_dtype``."""
    end = end_bias(chain, bias)
    if end is not None:
        return chain.synthesis_end(T, y_shape, end).to(x_dtype)
    b = None if bias is None else bias.reshape(-1).to(cdtype)
    return _dft.late_bias(chain, chain.synthesis_end(T, y_shape), b).to(x_dtype)


def _y_shape(x_shape, w_shape):
    return (x_shape[0], w_shape[1]) + tuple(x_shape[2:])


def forward_chain(x, weight, bias, chain, cdtype):
    """The forward GEMM chain (inside :func:`gemm_precision`): ``y`` in ``x``'s dtype and the
    modes-major input ``Xs`` (:func:`forward_middle`)."""
    T, Xs = forward_middle(forward_start(x, chain, cdtype), tuple(x.shape), weight, bias,
                           chain, cdtype)
    return forward_end(T, chain, _y_shape(x.shape, weight.shape), bias, cdtype, x.dtype), Xs


def backward_start(g, chain, cdtype, out=None):
    """The backward's first step (the synthesis adjoint's first axes on ``dL/dy``): rows."""
    return chain.synthesis_adjoint_start(g.to(cdtype).contiguous(), out)


def backward_middle(G, g_shape, Xs, weight, chain, cdtype, needs, meta):
    """From the first step's rows ``G``: the rows the analysis adjoint's last step reads (None
    unless ``dL/dx`` is needed), ``dL/dW``, and ``dL/db`` where a mode holds the bias (None
    elsewhere: :func:`bias_grad`); ``Xs`` is read only for ``dL/dW``."""
    ops = _ops(cdtype, G.device)
    need_x, need_w, need_b = needs
    w_shape, w_dtype, bias_meta = meta[1:]
    gT = gw = gb = None
    gY = chain.synthesis_adjoint_rest(G, g_shape)
    if need_x or need_w:
        wv = weight_view(weight, cdtype)
        if chain.paired:
            gX, gwv = _dft.mode_product_paired_adjoint(ops, gY, Xs, wv, need_x, need_w)
        elif chain.split:
            gX, gWs = _dft.mode_product_split_adjoint(ops, gY, Xs, _dft.split_weight(ops, wv),
                                                      need_x, need_w)
            gwv = _dft.join_weight(ops, gWs) if need_w else None
        elif complex_product(cdtype):
            gX, gwv = _dft.mode_product_complex_adjoint(ops, gY, Xs, wv, need_x, need_w)
        else:
            gXs, gwv = _dft.mode_product_adjoint(ops, gY, Xs, wv, need_x, need_w)
            gX = _dft.from_modes_major(ops, gXs) if need_x else None
        if need_x:
            gT = chain.analysis_adjoint_front(gX)
        if need_w:
            gw = modes_major_complex(gwv, w_shape, w_dtype)
    if need_b and chain.bias_mode is not None:
        shape, dtype = bias_meta
        # made contiguous first: summed in place over B along rows 2M values apart, the
        # reduction is slower than a copy and a sum (docs/benchmarks.md)
        gb = chain.constant_mode(gY).contiguous().sum(0).to(dtype).reshape(shape)
    return gT, gw, gb


def backward_end(gT, g_shape, chain, meta):
    """``dL/dx`` from the rows ``gT``: the analysis adjoint's last step."""
    x_dtype, w_shape = meta[:2]
    x_shape = (g_shape[0], w_shape[0]) + tuple(g_shape[2:])
    return chain.analysis_adjoint_end(gT, x_shape).to(x_dtype)


def bias_grad(g, chain, meta):
    """``dL/db`` from ``g`` where no mode holds the bias (:func:`backward_middle` otherwise)."""
    shape, dtype = meta[3]
    return g.sum(dim=(0,) + tuple(range(2, g.dim()))).to(dtype).reshape(shape)


def backward_chain(g, Xs, weight, chain, cdtype, needs, meta):
    """The backward GEMM chain (inside :func:`gemm_precision`): ``dL/dx, dL/dW, dL/db`` where
    ``needs`` says so (None elsewhere) from ``g = dL/dy``; ``Xs`` is read only for ``dL/dW``.
    ``meta``: ``x``'s dtype, the weight's shape and dtype, the bias's shape and dtype (or
    None)."""
    G = backward_start(g, chain, cdtype)
    gT, gw, gb = backward_middle(G, tuple(g.shape), Xs, weight, chain, cdtype, needs, meta)
    gx = backward_end(gT, tuple(g.shape), chain, meta) if needs[0] else None
    if needs[2] and chain.bias_mode is None:
        gb = bias_grad(g, chain, meta)
    return gx, gw, gb


def _stream(torch, device):
    """The current stream's id on ``device`` (None off CUDA), without the ``torch.cuda.Stream``
    that ``torch.cuda.current_stream`` builds (host time on every call)."""
    if device.type != "cuda":
        return None
    get = getattr(torch._C, "_cuda_getCurrentStream", None)
    if get is None:  # pragma: no cover - older PyTorch
        return torch.cuda.current_stream(device).stream_id
    return get(device.index)[0]


def _in_place(t) -> bool:
    """Whether the package's kernels read (or write) the tensor ``t`` in place: contiguous and
    16-byte aligned (they move rows as pairs of values)."""
    return t.is_contiguous() and not t.data_ptr() % _rows._ALIGN


def bound_ends(torch, kernels, a, out_shape, bias=None):
    """The ends of a replay (``(start, end)``, as :func:`_replay` takes them) as launches of
    the chain's end kernels ``kernels`` (:attr:`._dft.Chain.forward_ends` or
    ``backward_ends``, None: none): ``start(buf)`` transforms ``a`` into the graph's input
    buffer, ``end(T)`` the graph's output into a new float32 array of ``out_shape``, adding
    ``bias`` (the forward's, where its kernel takes it: :func:`end_bias`; None: none). None
    where the kernels cannot read ``a`` in place (not float32, contiguous, aligned and
    non-empty). The steps they stand for
    (:func:`forward_start`, :func:`forward_end` and the backward's) view and check their
    arrays and enter the GEMMs' precision, which costs a small layer's host more than the
    launches; the caller checks that nothing else is left to them (a late bias, a cast)."""
    if kernels is None or a.dtype != torch.float32 or not a.numel() or not _in_place(a):
        return None
    ptr = a.data_ptr()
    first, last = kernels
    device = a.device
    stream = _rows._raw_stream(torch, device)
    rows = a.numel() // first.shape[0]

    def start(buf):
        # the device's context current on this thread (autograd's threads select the device
        # without one), as the kernels' own calls set it
        backend.cupy.cuda.runtime.setDevice(device.index)
        first._launch(rows)(stream, ptr, buf.data_ptr())

    channels = 1 if bias is None else bias.shape[0]
    ends_bias = last._bias_ptr(bias)  # (none where the kernel takes no bias: a plane's pass form)

    def end(T):
        if not _in_place(T):
            return last(T, bias=bias).reshape(out_shape)
        y = torch.empty(out_shape, dtype=torch.float32, device=device)
        last._launch(T.numel() // last.shape[0], channels)(stream, T.data_ptr(), y.data_ptr(),
                                                            *ends_bias)
        return y

    return start, end


def forward_kernels(torch, chain, x_dtype, cdtype, bias):
    """The kernels of the forward's ends (:attr:`._dft.Chain.forward_ends`) where their
    launches may stand for :func:`forward_start` and :func:`forward_end` (:func:`bound_ends`):
    float32 in and out, no bias added after the synthesis (:func:`._dft.late_bias`); else
    None."""
    if x_dtype == cdtype == torch.float32 and (bias is None or chain.bias_mode is not None):
        return chain.forward_ends
    return None


def kernel_ends(torch, chain, x_dtype, cdtype, bias, training):
    """Whether the ends that a replay runs outside its graph are the package's kernels, their
    launches bound (:func:`bound_ends`): the forward's (:func:`forward_kernels`), and where
    ``training`` the backward's as well."""
    return (forward_kernels(torch, chain, x_dtype, cdtype, bias) is not None
            and (not training or chain.backward_ends is not None))


def _replay(torch, key, device, cdtype, chain, fn, args, wanted, ends, token=None,
            replayed=None, bound=False):
    """Replay the graph of ``key``, capturing ``fn(*inputs)`` on a miss (a failed capture
    raises: :func:`fftmatvec.fno._graphs.explained`). ``args``: the chain's inputs
    (:class:`._graphs.Borrowed` for one read in place); with ``ends`` (``(start, end)``,
    :func:`._graphs.ends_outside`) ``fn`` is the chain's middle, its first input written by
    ``start(buffer)`` (args[0] computes it at the capture) and its first output read by
    ``end(buffer)``, both outside the graph, in the layer's GEMM precision. ``wanted`` and
    ``token``: as :meth:`._graphs.Captured.run` takes them; ``replayed(entry)`` is called
    after a replay of the graph ``entry``; ``bound``: the ends are :func:`bound_ends`, which
    run no GEMM."""
    precision = functools.partial(gemm_precision, cdtype, device.type)
    start, end = ends or (None, None)
    borrowed = tuple(a.tensor for a in args if isinstance(a, _graphs.Borrowed))

    def capture():
        inputs = args
        if start is not None:
            with precision():
                inputs = (args[0](),) + tuple(args[1:])
        return _graphs.capture(torch, fn, inputs, device, precision, keep=(chain,) + borrowed)

    entry = _graphs.CACHE.get(key, _graphs.explained(capture))
    feed = tuple(None if (i == 0 and start is not None) or isinstance(a, _graphs.Borrowed)
                 else a for i, a in enumerate(args))
    with precision() if start is not None and not bound else contextlib.nullcontext():
        out = entry.run(feed, wanted, start=start, end=end, token=token)
    if out is not None and replayed is not None:
        replayed(entry)
    return out


def _replay_forward(torch, ctx, x, weight, bias, token, plan=None):
    """``(y, Xs)`` from the forward graph: ``Xs`` None, or with a ``token`` (a tensor the
    backward saves) the modes-major input left in the graph's buffer and lent
    (:class:`._graphs.Lent`). Where ``ctx.outside`` (:func:`fftmatvec.fno._plan.fno_ends`),
    the graph holds the chain's middle (:func:`forward_middle`): its first step writes the
    graph's input buffer and its last reads the graph's output, outside it; else the whole
    chain, ``x`` copied in and ``y`` cloned out."""
    chain, cdtype, outside = ctx.chain, ctx.cdtype, ctx.outside
    x_shape = tuple(x.shape)
    key = _graphs.forward_key((ctx.problem, outside), _stream(torch, x.device))
    wanted = (True, False if token is None else _graphs.LEND)
    y_shape = _y_shape(x_shape, weight.shape)
    fast = getattr(_PENDING, "key", None) if token is None else None
    replayed = None if fast is None else (
        lambda entry: _remember(_graphs.FAST, fast, FastReplay(
            torch, entry, chain, cdtype, y_shape, outside, x, bias)))
    if not outside:
        return _replay(torch, key, x.device, cdtype, chain,
                       lambda xs: forward_chain(xs, weight, bias, chain, cdtype), (x,),
                       wanted, None, token, replayed)
    bound = bound_ends(torch, forward_kernels(torch, chain, x.dtype, cdtype, bias), x,
                       y_shape, end_bias(chain, bias))
    if plan is not None and bound is not None:  # a training call's: its replay bound once
        replayed = functools.partial(plan.bind_forward, torch, x, bias, y_shape)
    ends = bound or (lambda buf: forward_start(x, chain, cdtype, buf),
                     lambda T: forward_end(T, chain, y_shape, bias, cdtype, x.dtype))
    return _replay(torch, key, x.device, cdtype, chain,
                   lambda h: forward_middle(h, x_shape, weight, bias, chain, cdtype),
                   (lambda: forward_start(x, chain, cdtype),), wanted, ends, token, replayed,
                   bound is not None)


# ---- the fast paths of a call whose signature was seen ---------------------------------------
# A small layer's device waits for its host: a forward's first kernel launches after the
# call's checks, its plan's lookups, the graph's key and about 150 Python calls
# (docs/benchmarks.md). A forward without gradients whose
# signature replayed a graph before replays it again after one lookup of that signature
# (fast_key: everything those steps read), running only the replay and the chain's ends; a
# call with gradients wanted takes the plan its signature's first call made (TrainingPlan).

# the signature a full call keeps its replay (key) or its planning (training) under
_PENDING = threading.local()
_INFERENCE = (True, False)  # the forward graph's outputs wanted: y, not the modes


def fast_key(torch, x, weight, n_modes, bias, method, compute_dtype, graphs):
    """The signature of a layer call that :func:`fast_forward` (its last item None: no
    gradient wanted) or :func:`fast_training` may serve, or None: a plain CUDA tensor ``x``,
    graphs allowed, ``n_modes`` an int or a tuple; what the call's checks and plan read: the
    shapes, dtypes and devices, where the weight and the bias lie, the options, the current
    stream, ``FFTMATVEC_PLAN``, the tuning tables' state and, with gradients wanted, which
    inputs want them and whether the weight and the bias are leaves."""
    if not (graphs is True or type(graphs) is str and graphs == "auto"):
        return None
    if type(x) is not torch.Tensor or not x.is_cuda:
        return None
    if type(method) is not str or not (compute_dtype is None
                                       or isinstance(compute_dtype, torch.dtype)):
        return None  # (an unhashable option: the full path says what is wrong)
    if not (type(n_modes) is int or type(n_modes) is tuple
            and all(type(m) is int for m in n_modes)):
        return None
    if bias is not None and not torch.is_tensor(bias):
        return None
    grad = None  # a forward alone; with gradients wanted, what decides the graphs' use
    if grad_wanted(torch, x, weight, bias):
        grad = (x.requires_grad, weight.requires_grad, weight.is_leaf, weight.device,
                None if bias is None else (bias.requires_grad, bias.is_leaf, bias.device))
    state = _tuning._state
    return (x.shape, x.dtype, x.device, type(weight), _graphs.tensor_key(weight),
            type(bias), _graphs.tensor_key(bias), n_modes, method, compute_dtype, graphs,
            _stream(torch, x.device), plan_key(), _tuning._env(), state["off"],
            state["generation"], grad)


def _fast_now(torch, x):
    """Whether a call kept under its signature may take its fast path now: a graph may replay
    (:func:`._graphs.replayable`), and no functorch transform or forward-mode AD is active
    (which the full path hands to the reference)."""
    return _graphs.replayable(torch, x) and not _transformed(torch)


def _transformed(torch):
    """Whether a functorch transform or forward-mode AD is active."""
    return (torch._C._are_functorch_transforms_active()
            or torch.autograd.forward_ad._current_level >= 0)


def layer_params(layer):
    """``(layer.weight, layer.bias)`` read from the module's own dictionaries. Python reaches
    ``torch.nn.Module.__getattr__``, which finds a parameter, only after its own lookup has
    failed: host time on every read, three of them before the memo's launch."""
    params = layer._parameters
    return (params["weight"] if "weight" in params else layer.weight,
            params["bias"] if "bias" in params else layer.bias)


def fast_forward(torch, key, x, weight, bias):
    """The output of the call of signature ``key`` (:func:`fast_key`) from the graph that
    served it last (:class:`FastReplay`), or None (no such graph, or one released since; now
    no replay (:func:`._graphs.replayable`), forward-mode AD or a functorch transform)."""
    hit = _graphs.FAST.get(key)
    if hit is None or not _fast_now(torch, x):
        return None
    out = hit(torch, x, bias)
    if out is None:  # released (evicted, cleared): the full path captures it again
        _graphs.FAST.pop(key, None)
    return out


#: Input shapes whose forwards a layer keeps in its memo (:class:`LayerFast`), the oldest out
#: beyond.
LAYER_FAST_MAX = 8


class LayerFast:
    """A :class:`~fftmatvec.fno.SpectralConv`'s forward without gradients for one input shape,
    as :func:`fast_forward` served it: the hit and its signature (:func:`fast_key`) kept as the
    values a call compares with its own, so that the layer's next such call finds the hit
    without building and hashing the signature, and without the module's and the function's
    steps before it (about half the host time of a small layer's forward before its first
    launch: docs/benchmarks.md). The comparisons are the
    signature's items one by one, and what :func:`_fast_now` asks that the module's forward
    has not (it is not compiling, ``x`` is a plain tensor): those the first launch needs before
    it, the rest (:meth:`holds`) while the device runs it; any that differs, or a released
    hit, takes the layer's full call. The
    current stream is compared by its handle, which the hit's launches then take."""

    __slots__ = ("dtype", "index", "wtype", "wkey", "btype", "bkey", "options", "stream",
                 "plan", "env", "off", "generation", "epoch", "hit")

    def __init__(self, key, hit, stream):
        (_, self.dtype, device, self.wtype, self.wkey, self.btype, self.bkey, n_modes, method,
         compute_dtype, graphs, _, self.plan, self.env, self.off, self.generation,
         grad) = key
        if grad is not None or device.type != "cuda":
            raise ValueError("a layer's memo keeps forwards without gradients on CUDA tensors")
        self.index, self.options = device.index, (n_modes, method, compute_dtype, graphs)
        self.stream = stream  # the handle of the signature's stream
        self.epoch, self.hit = _graphs.EPOCH[0], hit

    @classmethod
    def of(cls, torch, x, weight, n_modes, bias, method, compute_dtype, graphs):
        """The memo entry of a forward without gradients just served (its signature's hit in
        :data:`._graphs.FAST`), or None."""
        key = fast_key(torch, x, weight, n_modes, bias, method, compute_dtype, graphs)
        if key is None or key[-1] is not None:
            return None
        hit = _graphs.FAST.get(key)
        return None if hit is None else cls(key, hit, _rows._raw_stream(torch, x.device))

    def __call__(self, torch, layer, x):
        """The output of ``layer(x)`` (``x`` a plain tensor of the entry's shape, outside
        ``torch.compile`` tracing) from the kept hit, or None where the call is not the one
        kept (or its hit was released)."""
        w, b = layer_params(layer)
        # (get_device: -1 for a CPU tensor)
        if (x.dtype is not self.dtype or x.get_device() != self.index
                or grad_wanted(torch, x, w, b) or torch.jit.is_tracing()
                or torch.cuda.is_current_stream_capturing() or _transformed(torch)):
            return None
        stream = _rows.raw_stream_at(torch, self.index)
        if stream != self.stream:
            return None
        return self.hit(torch, x, b, lambda: self.holds(layer), stream)

    def holds(self, layer):
        """The rest of the call's checks, made while the device runs the first launch: those
        it does not need (it reads ``x``, on the kept stream, outside a capture) and that a
        call rarely fails (:meth:`__call__` checks those, and whether a gradient is wanted,
        which a model switching between training and evaluation fails often). A launch whose
        call then fails them wrote only the hit's own buffer or a ``y`` that is dropped."""
        w, b = layer_params(layer)
        state = _tuning._state
        return not (type(w) is not self.wtype or type(b) is not self.btype
                    or _graphs.tensor_key(w) != self.wkey or _graphs.tensor_key(b) != self.bkey
                    or (layer._n_modes, layer.method, layer.compute_dtype, layer.graphs)
                    != self.options or plan_key() != self.plan
                    or _tuning._env() != self.env or state["off"] != self.off
                    or state["generation"] != self.generation
                    or _graphs.EPOCH[0] != self.epoch)


def layer_forward(torch, layer, x):
    """``layer(x)`` from the layer's memo (:class:`LayerFast`), or None (``x`` not a plain
    tensor). Not called under ``torch.compile`` tracing."""
    if type(x) is not torch.Tensor:
        return None
    fast = layer._fast.get(x.shape)
    if fast is None:
        return None
    y = fast(torch, layer, x)
    if y is None:
        layer._fast.pop(x.shape, None)
    return y


def remember_layer_forward(torch, layer, x, n_modes):
    """After a call of ``layer`` on ``x`` that took the full way (the module's steps, then
    :func:`fftmatvec.fno._torch.spectral_conv_torch`): keep its forward in the layer's memo
    where it was one without gradients that a fast path kept (:data:`._graphs.FAST`). Costs a
    call only where ``FAST`` holds anything and no gradient is wanted. Not called under
    ``torch.compile`` tracing."""
    if not _graphs.FAST or type(x) is not torch.Tensor or not x.is_cuda:
        return
    w, b = layer_params(layer)
    if grad_wanted(torch, x, w, b):
        return
    fast = LayerFast.of(torch, x, w, n_modes, b, layer.method, layer.compute_dtype,
                        layer.graphs)
    if fast is None:
        return
    memo = layer._fast
    memo[x.shape] = fast
    while len(memo) > LAYER_FAST_MAX:
        try:
            memo.pop(next(iter(memo)), None)
        except (RuntimeError, StopIteration):
            break


class FastReplay:
    """The replay of a forward without gradients, kept under its call's signature
    (:func:`fast_key`): ``x`` copied into the graph or transformed into its input buffer, the
    replay, the output cloned or transformed out, as :func:`_replay_forward` runs them; where
    the chain's ends are the package's kernels, through their launches bound once
    (:class:`BoundEnds`)."""

    __slots__ = ("entry", "chain", "cdtype", "y_shape", "outside", "bound")

    def __init__(self, torch, entry, chain, cdtype, y_shape, outside, x, bias):
        self.entry, self.chain, self.cdtype = entry, chain, cdtype
        self.y_shape, self.outside = y_shape, outside
        self.bound = BoundEnds.of(torch, entry, chain, cdtype, y_shape, x, bias) if (
            outside) else None

    def __call__(self, torch, x, bias, holds=None, stream=None):
        """The output ``y``, or None once the graph is released or where ``holds()`` (the
        rest of a layer's memo's checks, :class:`LayerFast`; None: none) is false: called
        once the first kernel is queued where the ends are bound launches, else first.
        ``stream``: the current stream's handle on ``x``'s device (None: looked up)."""
        if self.bound is not None:
            y = self.bound(torch, x, bias, holds, stream)
            if y is not False:
                return y
        if holds is not None and not holds():
            return None
        entry, chain, cdtype = self.entry, self.chain, self.cdtype
        if not self.outside:
            out = entry.run((x,), _INFERENCE)
        else:
            y_shape = self.y_shape
            with gemm_precision(cdtype, "cuda"):
                out = entry.run((None,), _INFERENCE,
                                start=lambda buf: forward_start(x, chain, cdtype, buf),
                                end=lambda T: forward_end(T, chain, y_shape, bias, cdtype,
                                                          x.dtype))
        return None if out is None else out[0]


class BoundEnds:
    """A forward's replay whose first and last steps, outside the graph, are the package's
    kernels in float32 (:func:`forward_kernels`): their launches
    (:class:`fftmatvec.kernels.PackedLaunch`) looked up once, the graph's buffers' addresses
    bound, so that a call only allocates ``y``, sets the launches' pointers and replays. The
    steps :func:`forward_start` and :func:`forward_end` take otherwise (views, checks, the
    precision's context, the kernels' own checks) cost a small layer's host more than the
    launches. Where the synthesis's kernel adds the bias (:func:`end_bias`, decided once: the
    signature holds the bias's address and layout), each call hands it the call's bias's
    address."""

    __slots__ = ("entry", "y_shape", "device_id", "start", "end", "end_kernel", "buf_in",
                 "buf_out", "bias")

    @classmethod
    def of(cls, torch, entry, chain, cdtype, y_shape, x, bias):
        """The bound ends of the replay of ``entry`` for inputs like ``x``, or None where they
        are not both kernels, the computation is not float32, the bias is added after the
        synthesis (:func:`._dft.late_bias`) or the buffers are not as the kernels take them."""
        kernels = forward_kernels(torch, chain, x.dtype, cdtype, bias)
        if kernels is None:
            return None
        start, end = kernels
        buf_in, buf_out = entry.inputs[0], entry.outputs[0]
        try:
            rows_in = start._rows_of(x.reshape(-1, start.shape[0]))
            rows_out = end._rows_of(buf_out)
        except (RuntimeError, ValueError):
            return None
        if (tuple(buf_in.shape) != start._out_shape(rows_in)
                or math.prod(end._out_shape(rows_out)) != math.prod(y_shape)
                or not (_in_place(buf_in) and _in_place(buf_out))):
            return None
        b = end_bias(chain, bias)
        self = cls()
        self.entry, self.y_shape, self.device_id = entry, tuple(y_shape), x.device.index
        self.bias = b is not None  # whether the call's bias is handed to the end kernel
        self.end_kernel = end  # (its bias pointer as it takes it: none for a plane's pass form)
        self.start = start._launch(rows_in)
        self.end = end._launch(rows_out, 1 if b is None else b.shape[0])
        self.buf_in, self.buf_out = buf_in.data_ptr(), buf_out.data_ptr()
        return self

    def __call__(self, torch, x, bias, holds=None, stream=None):
        """``y``, None once the graph is released or where ``holds()`` is false after the
        first launch (its output then left in the graph's input buffer, not replayed), or
        False for an ``x`` the kernels do not read in place (not contiguous or not aligned:
        :class:`FastReplay`'s own steps). ``bias``: the call's, of the signature's address
        and layout (its values read in place by the last launch, where it adds it);
        ``stream``: the current stream's handle (None: looked up)."""
        if not _in_place(x):
            return False
        if stream is None:
            stream = _rows._raw_stream(torch, x.device)
        return self._run(torch, x, bias, stream, holds)

    def train(self, torch, x, bias, token, stream):
        """``(y, Xs)`` of a training call's forward (:meth:`TrainingPlan.forward`): as
        :meth:`__call__`, the modes-major input left in the graph's buffer and lent for the
        backward where a ``token`` is given (else None), as :meth:`._graphs.Captured.run`
        lends it; None once the graph is released or for an ``x`` the kernels do not read in
        place."""
        if not _in_place(x):
            return None
        return self._run(torch, x, bias, stream, lend=True, token=token)

    def _run(self, torch, x, bias, stream, holds=None, lend=False, token=None):
        """The first launch, the replay and the last launch (:meth:`._graphs.Captured.
        run_between`): ``y``, or with ``lend`` ``(y, Xs)``."""
        entry, ptr = self.entry, x.data_ptr()

        def before():
            # the device's context current on this thread (as the kernels' own calls set it)
            backend.cupy.cuda.runtime.setDevice(self.device_id)
            self.start(stream, ptr, self.buf_in)
            return holds is None or holds()

        def after():  # y allocated once the device has work: the allocation overlaps it
            y = torch.empty(self.y_shape, dtype=torch.float32, device=x.device)
            # (the bias read after holds(): the call's is then the signature's)
            self.end(stream, self.buf_out, y.data_ptr(),
                     *self.end_kernel._bias_ptr(bias if self.bias else None))
            if not lend:
                return y
            return y, (None if token is None or entry.outputs[1] is None
                       else entry.slot(1).lend(token))

        return entry.run_between(before, after)


class BoundBackward:
    """A training call's backward replay whose first and last steps, outside the graph, are
    the package's kernels in float32 (:attr:`._dft.Chain.backward_ends`), bound once as
    :class:`BoundEnds` binds a forward's: a call launches the first step from ``dL/dy`` into
    the graph's input buffer, replays, launches the last step into a new ``dL/dx`` (where
    wanted) and clones the weight's and the bias's gradients out (where wanted), as
    :func:`_replay_backward_of` runs them through :func:`bound_ends` and
    :meth:`._graphs.Captured.run`. For a graph that copies no argument in (the modes-major
    input read in the forward graph's buffer, or not read)."""

    __slots__ = ("entry", "device_id", "x_shape", "needs", "start", "buf_in", "end",
                 "buf_out", "end_args")

    @classmethod
    def of(cls, torch, entry, kernels, g, x_shape, needs):
        """The bound replay of ``entry`` for ``dL/dy`` like ``g`` (float32, contiguous,
        aligned), or None where its buffers are not as the kernels take them."""
        if (kernels is None or g.dtype != torch.float32 or not g.is_contiguous()
                or not g.numel() or entry.graph is None):
            return None
        first, last = kernels
        buf_in, T = entry.inputs[0], entry.outputs[0]
        if buf_in is None or not _in_place(buf_in):
            return None
        self = cls()
        self.entry, self.device_id = entry, g.device.index
        self.x_shape, self.needs = tuple(x_shape), tuple(bool(n) for n in needs)
        self.start = first._launch(g.numel() // first.shape[0])
        self.buf_in = buf_in.data_ptr()
        self.end = self.buf_out = None
        self.end_args = ()
        if self.needs[0]:
            if T is None or not _in_place(T):
                return None
            self.end = last._launch(T.numel() // last.shape[0], 1)
            self.buf_out, self.end_args = T.data_ptr(), tuple(last._bias_ptr(None))
        return self

    def __call__(self, torch, g, stream):
        """``(dL/dx, dL/dW, dL/db)`` (None where not wanted), or None once the graph is
        released or for a ``g`` the kernel does not read in place."""
        if not _in_place(g):
            return None
        entry, needs, ptr = self.entry, self.needs, g.data_ptr()

        def before():
            backend.cupy.cuda.runtime.setDevice(self.device_id)
            self.start(stream, ptr, self.buf_in)

        def after():
            gx = None
            if self.end is not None:
                gx = torch.empty(self.x_shape, dtype=torch.float32, device=g.device)
                self.end(stream, self.buf_out, gx.data_ptr(), *self.end_args)
            outs = entry.outputs
            return (gx,) + tuple(None if not w or o is None else o.clone()
                                 for o, w in zip(outs[1:], needs[1:]))

        return entry.run_between(before, after)


def full_call(key, call, *args):
    """``call(*args)``, the full path of a call of signature ``key`` (:func:`fast_key`; None:
    none), whose forward graph's replay (no gradient wanted) or planning (gradients wanted) is
    then kept under ``key``."""
    if key is None:
        return call(*args)
    which = "key" if key[-1] is None else "training"
    setattr(_PENDING, which, key)
    try:
        return call(*args)
    finally:
        setattr(_PENDING, which, None)


def _remember(store, key, hit):
    """Keep ``hit`` in ``store`` (:data:`._graphs.FAST` or :data:`._graphs.FAST_TRAINING`) for
    the signature ``key``, unless plan ``fno_fast=0`` (every call on the full path: the
    benchmark's comparison)."""
    if plan_mode(None, "fno_fast") == "0":
        return
    store[key] = hit
    while len(store) > _graphs.FAST_MAX:
        try:  # the oldest out (another thread may be at it too)
            store.pop(next(iter(store)), None)
        except (RuntimeError, StopIteration):
            break


def _replay_backward(torch, ctx, g, Xs, weight, needs):
    """``(dL/dx, dL/dW, dL/db)`` from the backward graph of ``needs``. As in
    :func:`_replay_forward`, the graph holds the chain's middle (:func:`backward_middle`) or
    the whole chain. A lent ``Xs`` (:class:`._graphs.Lent`) is read in the forward graph's
    buffer, held while the replay is queued."""
    if isinstance(Xs, _graphs.Lent) and needs[1]:
        slot = Xs.slot
        with slot.lock:
            buf = slot.hold(Xs)
            return _replay_backward_of(torch, ctx, g, _graphs.Borrowed(buf), weight, needs,
                                       buf.data_ptr())
    return _replay_backward_of(torch, ctx, g, Xs if needs[1] else None, weight, needs)


def _replay_backward_of(torch, ctx, g, xs, weight, needs, borrowed=None):
    chain, cdtype, meta = ctx.chain, ctx.cdtype, ctx.meta
    outside, plan = ctx.outside, getattr(ctx, "plan", None)
    ends32 = outside and cdtype == torch.float32 and meta[0] == torch.float32
    stream = out = replayed = None
    if ends32 and plan is not None and g.dtype == torch.float32 and (
            xs is None or isinstance(xs, _graphs.Borrowed)):
        # a training call's, no argument copied into its graph: its replay bound once
        stream = _rows._raw_stream(torch, g.device)
        out = plan.backward(torch, g, stream, needs, borrowed)
    if out is None:
        g_shape = tuple(g.shape)
        key = _graphs.backward_key((ctx.problem, outside), _stream(torch, g.device), needs,
                                   g.dtype, borrowed)
        if not outside:
            return _replay(torch, key, g.device, cdtype, chain,
                           lambda gs, xs: backward_chain(gs, xs, weight, chain, cdtype, needs,
                                                         meta),
                           (g, xs), needs, None)
        bound = None
        if ends32:  # (x_shape: dL/dx's, if needed)
            x_shape = (g_shape[0], meta[1][0]) + g_shape[2:]
            bound = bound_ends(torch, chain.backward_ends, g, x_shape)
            if bound is not None and stream is not None:
                replayed = functools.partial(plan.bind_backward, torch, g, x_shape, stream,
                                             needs, borrowed)
        ends = bound or (lambda buf: backward_start(g, chain, cdtype, buf),
                         lambda gT: backward_end(gT, g_shape, chain, meta))
        out = _replay(torch, key, g.device, cdtype, chain,
                      lambda gs, xs: backward_middle(gs, g_shape, xs, weight, chain, cdtype,
                                                     needs, meta),
                      (lambda: backward_start(g, chain, cdtype), xs), needs, ends,
                      replayed=replayed, bound=bound is not None)
    if out is not None and needs[2] and chain.bias_mode is None:
        with gemm_precision(cdtype, g.device.type):
            out = out[:2] + (bias_grad(g, chain, meta),)
    return out


def _eager_backward(torch, ctx, g, Xs, weight, needs):
    """The backward chain op by op; a lent ``Xs`` read in its buffer, held meanwhile."""
    if isinstance(Xs, _graphs.Lent):
        with Xs.slot.lock:
            return _eager_backward(torch, ctx, g, Xs.slot.hold(Xs), weight, needs)
    with gemm_precision(ctx.cdtype, g.device.type):
        return backward_chain(g, Xs, weight, ctx.chain, ctx.cdtype, needs, ctx.meta)


def _forward(torch, ctx, x, weight, bias, modes, cdtype, graphs, token, tuned=(),
             training=True, plan=None):
    """``(y, Xs)``, from the forward graph where ``graphs`` (``Xs`` None there unless a
    ``token`` is given: :func:`_replay_forward`), else from the eager chain; sets
    ``ctx.chain``, ``ctx.cdtype`` and, with graphs, ``ctx.problem`` and ``ctx.outside``
    (whether the graphs hold the chains' middles: :func:`fftmatvec.fno._plan.fno_ends`,
    for a forward with a backward to come where ``training``), what the backward and the
    replay read: from ``plan`` where given (:class:`TrainingPlan`, a training call's fast
    path), else planned here, and kept for the fast path of the training call being made, if
    any (:func:`full_call`)."""
    if plan is not None:
        chain = ctx.chain = plan.chain
        ctx.cdtype, ctx.outside, ctx.problem = cdtype, plan.outside, plan.problem
        ctx.plan = plan  # (the backward's bound replay is kept there too)
        out = plan.forward(torch, x, bias, token)
        if out is None:
            out = _replay_forward(torch, ctx, x, weight, bias, token, plan)
        if out is not None:
            return out
        with gemm_precision(cdtype, x.device.type):
            return forward_chain(x, weight, bias, chain, cdtype)
    chain = chain_for(x, cdtype, modes, weight.shape[1], tuned)
    if not training and chain.fused is not None:
        y = _fused_forward(torch, chain.fused, x, weight, bias, cdtype)
        if y is not None:
            return y, None
    ctx.chain, ctx.cdtype = chain, cdtype
    if graphs:
        ctx.outside = fno_ends(tuple(x.shape), x.element_size(), weight.shape[1], tuned,
                               training, kernel_ends(torch, chain, x.dtype, cdtype, bias,
                                                     training))
        # (end_bias: whether the middle leaves the bias to the synthesis's kernel; the key's
        # other items decide it, and it is in the key so that no graph is shared across it)
        ctx.problem = (_graphs.problem_key(x.shape, x.dtype, x.device, cdtype, modes, weight,
                                           bias), chain.rows, chain.forms,
                       end_bias(chain, bias) is not None)
        out = _replay_forward(torch, ctx, x, weight, bias, token)
        if out is not None:
            pending = getattr(_PENDING, "training", None) if training else None
            if pending is not None:
                _remember(_graphs.FAST_TRAINING, pending, TrainingPlan(
                    modes, cdtype, graphs, tuned, chain, ctx.outside, ctx.problem))
            return out
    with gemm_precision(cdtype, x.device.type):
        return forward_chain(x, weight, bias, chain, cdtype)


def _fused_forward(torch, fused, x, weight, bias, cdtype):
    """``y`` of a forward without gradients from the one-kernel layer ``fused``
    (:class:`._fused1d.Layer1d`), or None where it does not take the call (16-bit storage, an
    input not contiguous or aligned). Where it reads the weight and the bias in place, it is
    kept under the call's signature for the forward's fast path (:class:`FusedForward`)."""
    if cdtype != torch.float32 or x.dtype != torch.float32:
        return None
    W = weight_view(weight, cdtype)
    if not W.is_contiguous():  # a weight passed in another layout: read from a copy
        W = W.contiguous()
    b = None if bias is None else bias.reshape(-1)
    if b is not None and (b.dtype != torch.float32 or not b.is_contiguous()):
        b = b.to(torch.float32).contiguous()
    if not fused.takes(x, W, b):
        return None
    y = fused.run(x, W, b)
    key = getattr(_PENDING, "key", None)
    if key is not None and W.data_ptr() == weight.data_ptr() and (
            b is None or b.data_ptr() == bias.data_ptr()):
        _remember(_graphs.FAST, key, FusedForward(fused, W, b, x))
    return y


#: The largest output (bytes) of which a one-axis forward's fast path keeps a spare
#: (:class:`FusedForward`).
SPARE_MAX_BYTES = 64 * 2**20


class FusedForward:
    """A forward without gradients on the one-kernel layer (:class:`._fused1d.Layer1d`), kept
    under its call's signature (:func:`fast_key`, which holds the weight's and the bias's
    addresses and layouts: their in-place updates are read, a new one is a new signature):
    one launch after the lookup.

    The launch writes a spare output allocated after the previous call's launch, and the next
    spare is allocated after this one's, while the device runs it: the allocation (host time,
    docs/benchmarks.md) is then not between the
    call and its launch. A spare is made on the signature's stream and device, which the
    signature's calls run on, and is held until :func:`fftmatvec.fno.clear_graphs` or until
    the hit is dropped (from :data:`._graphs.FAST` and the layers' memos); none for outputs
    above :data:`SPARE_MAX_BYTES`."""

    __slots__ = ("fused", "W", "b", "w_ptr", "b_ptr", "spares", "keep_spare")

    def __init__(self, fused, W, b, x):
        self.fused, self.W, self.b = fused, W, b  # (held: the addresses are theirs)
        self.w_ptr, self.b_ptr = W.data_ptr(), 0 if b is None else b.data_ptr()
        self.spares = []  # (a list: its pop and append are atomic, no two calls share one)
        self.keep_spare = x.numel() * x.element_size() <= SPARE_MAX_BYTES  # (y is x's size)

    def __call__(self, torch, x, bias, holds=None, stream=None):
        """``y``, or None for an ``x`` the kernel does not read in place (the full path) or
        where ``holds()`` is false after the launch (its ``y`` dropped: the weight and the
        bias it read are the ones held here). ``stream``: the current stream's handle on
        ``x``'s device (None: looked up)."""
        if not _in_place(x):
            return None
        try:
            y = self.spares.pop()
        except IndexError:
            y = None
        y = self.fused.run_torch(torch, x, self.w_ptr, self.b_ptr, stream, y)
        if self.keep_spare and not self.spares:
            # a normal tensor, whatever the mode (an inference tensor's uses are restricted
            # outside inference mode, where a later call may return it)
            with torch.inference_mode(False) if torch.is_inference_mode_enabled() else (
                    contextlib.nullcontext()):
                self.spares.append(torch.empty(x.shape, dtype=x.dtype, device=x.device))
        return y if holds is None or holds() else None

    def release(self):
        """Drop the spare output (:func:`fftmatvec.fno.clear_graphs`)."""
        self.spares.clear()


#: The bound replays a training plan keeps (:attr:`TrainingPlan.bound`), all dropped beyond.
BOUND_MAX = 8


class TrainingPlan:
    """What a call with gradients wanted planned, kept under its signature (:func:`fast_key`)
    for the next such call (:func:`fast_training`): the arguments of the autograd Function
    (``modes``, ``cdtype``, ``graphs``, ``tuned``) and of its forward's replay (``chain``,
    ``outside``, ``problem``: :func:`_forward`)."""

    __slots__ = ("modes", "cdtype", "graphs", "tuned", "chain", "outside", "problem", "bound")

    def __init__(self, modes, cdtype, graphs, tuned, chain, outside, problem):
        self.modes, self.cdtype, self.graphs, self.tuned = modes, cdtype, graphs, tuned
        self.chain, self.outside, self.problem = chain, outside, problem
        # the replays with bound ends that the plan's calls made, bound once: by ("forward",
        # stream) and ("backward", stream, needs, borrowed) (stream: the raw handle; borrowed:
        # as the backward graph's key holds it)
        self.bound = {}

    def forward(self, torch, x, bias, token):
        """``(y, Xs)`` from the forward bound for the current stream
        (:meth:`BoundEnds.train`), or None (none bound yet, its graph released, an ``x`` not
        read in place: the replay's own steps, :func:`_replay_forward`)."""
        if not self.bound:
            return None
        stream = _rows._raw_stream(torch, x.device)
        hit = self.bound.get(("forward", stream))
        return None if hit is None else hit.train(torch, x, bias, token, stream)

    def bind_forward(self, torch, x, bias, y_shape, entry):
        """After a replay of the forward graph ``entry`` with bound ends for ``x``: keep it
        bound for the plan's next calls on this stream."""
        hit = BoundEnds.of(torch, entry, self.chain, self.cdtype, y_shape, x, bias)
        if hit is not None:
            self._keep(("forward", _rows._raw_stream(torch, x.device)), hit)

    def backward(self, torch, g, stream, needs, borrowed):
        """``(dL/dx, dL/dW, dL/db)`` from the backward bound for ``stream``, ``needs`` and
        ``borrowed`` (:class:`BoundBackward`), or None."""
        hit = self.bound.get(("backward", stream, needs, borrowed))
        return None if hit is None else hit(torch, g, stream)

    def bind_backward(self, torch, g, x_shape, stream, needs, borrowed, entry):
        """After a replay of the backward graph ``entry`` with bound ends: keep it bound."""
        hit = BoundBackward.of(torch, entry, self.chain.backward_ends, g, x_shape, needs)
        if hit is not None:
            self._keep(("backward", stream, needs, borrowed), hit)

    def _keep(self, key, hit):
        # at most BOUND_MAX: a graph captured again (evicted, cleared) lends another buffer,
        # a new key; the bindings of released graphs go with the rest
        if key not in self.bound and len(self.bound) >= BOUND_MAX:
            self.bound.clear()
        self.bound[key] = hit


class _Call:
    """The attributes :func:`_forward` sets, for a call that records no autograd graph."""

    __slots__ = ("chain", "cdtype", "problem", "outside")


def _function():
    torch = _torch()

    class _DftSpectralConvFn(torch.autograd.Function):
        """``y = S(X W) + b`` with ``X = A x``; backward ``A^T((S^T g) W^T)``, ``X^T S^T g``.

        ``graphs``: ``"auto"`` or ``True`` to replay CUDA graphs of the chains (a failed
        capture raises: :func:`fftmatvec.fno._graphs.explained`), ``False`` for the eager
        chain; ``grad``: whether grad mode was on at the call (only then is ``Xs``, where
        ``dL/dW`` is wanted, lent from the forward graph's buffer to the backward:
        :class:`._graphs.Slot`)."""

        @staticmethod
        def forward(ctx, x, weight, bias, modes, cdtype, graphs, grad, tuned, plan):
            bias_meta = None if bias is None else (tuple(bias.shape), bias.dtype)
            ctx.meta = (x.dtype, tuple(weight.shape), weight.dtype, bias_meta)
            ctx.modes = modes
            ctx.graphs = graphs
            token = torch.empty(0) if grad and ctx.needs_input_grad[1] else None
            y, Xs = _forward(torch, ctx, x, weight, bias, modes, cdtype, graphs, token, tuned,
                             plan=plan)
            ctx.lent = Xs if isinstance(Xs, _graphs.Lent) else None
            # x itself for a backward under create_graph=True (reference_grads), as a
            # convolution keeps its input
            if ctx.lent is not None:  # the token freed by autograd: no backward can read it
                ctx.save_for_backward(x, None, weight, token)
            else:
                ctx.save_for_backward(x, Xs, weight)
            return y

        @staticmethod
        def backward(ctx, g):
            x, Xs, weight = ctx.saved_tensors[:3]
            needs = tuple(ctx.needs_input_grad[:3])
            if torch.is_grad_enabled():  # create_graph=True: gradients to differentiate again
                from ._torch import reference_grads

                return reference_grads(torch, x, weight, ctx.modes, g, needs, ctx.meta[3]) + (
                    None,) * 6
            Xs = ctx.lent or Xs
            out = None
            if ctx.graphs and _graphs.replayable(torch, g):
                out = _replay_backward(torch, ctx, g, Xs, weight, needs)
            if out is None:
                out = _eager_backward(torch, ctx, g, Xs, weight, needs)
            return out + (None,) * 6

    return _DftSpectralConvFn


_FN = None


def dft_spectral_conv(x, weight, bias, modes, cdtype, graphs="auto", tuned=()):
    """Apply the DFT-product autograd Function (shapes and ``graphs`` checked by the caller):
    with CUDA-graph replay where :func:`~fftmatvec.fno._graphs.wanted` says so. Where no
    gradient can be wanted (grad mode off, or no input that requires one), the forward runs
    without the Function, whose bookkeeping is host time a small layer's device waits for.
    ``tuned``: the plan of the layer's FNO tuning table entry (:func:`chain_for`)."""
    global _FN
    torch = _torch()
    training = grad_wanted(torch, x, weight, bias)
    use = _graphs.wanted(torch, graphs, x, weight, bias, training)
    if not training:
        return _forward(torch, _Call(), x, weight, bias, tuple(modes), cdtype, use, None,
                        tuned, training=False)[0]
    if _FN is None:
        _FN = _function()
    return _FN.apply(x, weight, bias, tuple(modes), cdtype, use, use, tuned, None)


def fast_training(torch, key, x, weight, bias):
    """The output of a call with gradients wanted of signature ``key`` (:func:`fast_key`)
    whose planning a full call kept (:class:`TrainingPlan`): the autograd Function applied
    with it, skipping the call's checks and planning; or None (none kept; now no replay,
    forward-mode AD or a functorch transform)."""
    plan = _graphs.FAST_TRAINING.get(key)
    if plan is None or _FN is None or not _fast_now(torch, x):
        return None
    return _FN.apply(x, weight, bias, plan.modes, plan.cdtype, plan.graphs, plan.graphs,
                     plan.tuned, plan)
