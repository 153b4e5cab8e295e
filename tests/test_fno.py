"""FNO spectral convolution: a float64 dense reference, neuraloperator, autograd."""

from __future__ import annotations

import numpy as np
import pytest

from fftmatvec import FFTMatvecValueError
from fftmatvec.fno import spectral_conv
from fno_oracle import CASES, dense_reference
from fno_oracle import neuralop_spectral_conv as _neuralop
from fno_oracle import rand_case as _rand

@pytest.mark.parametrize("method", ["fft", "dft"])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_matches_dense_reference(xp, rng, shape, cout, n_modes, method):
    x, w, b = _rand(rng, shape, cout, n_modes)
    want = dense_reference(x, w, n_modes, b)
    got = spectral_conv(xp.asarray(x), xp.asarray(w), n_modes, xp.asarray(b), method=method)
    got = got.get() if hasattr(got, "get") else got
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_bad_modes(rng):
    x, w, _ = _rand(rng, (1, 2, 6), 2, 6)
    with pytest.raises(FFTMatvecValueError, match="n_modes"):
        spectral_conv(x, np.zeros((2, 2, 5), complex), 8)
    with pytest.raises(FFTMatvecValueError, match="weight"):
        spectral_conv(x, w[:1], 6)


def test_bad_dtypes_and_modes_are_named(rng):
    from fftmatvec import FFTMatvecTypeError

    x, w, _ = _rand(rng, (2, 3, 8), 2, 6)
    for bad in (x.astype(np.int64), x.astype(bool), x + 0j):
        with pytest.raises(FFTMatvecTypeError, match=f"x: expected a real floating array .*got "
                                                     f"{bad.dtype}"):
            spectral_conv(bad, w, 6)
    with pytest.raises(FFTMatvecTypeError, match="weight: expected a complex"):
        spectral_conv(x, w.real.astype(np.int32), 6)
    with pytest.raises(FFTMatvecTypeError, match=r"n_modes: .*got \(6.5,\)"):
        spectral_conv(x, w, (6.5,))  # not rounded to 6
    with pytest.raises(FFTMatvecValueError, match=r"bias: expected Cout = 2 values .*\(3,\)"):
        spectral_conv(x, w, 6, np.ones(3))
    with pytest.raises(FFTMatvecTypeError, match="bias: expected real values"):
        spectral_conv(x, w, 6, np.ones(2, complex))


@pytest.mark.parametrize("method", ["fft", "dft"])
def test_output_keeps_the_input_precision(rng, method):
    x, w, b = _rand(rng, (2, 3, 12, 10), 4, (6, 8))
    want = dense_reference(x, w, (6, 8), b)
    for dtype, tol in ((np.float16, 2e-3), (np.float32, 1e-5), (np.float64, 1e-12)):
        got = spectral_conv(x.astype(dtype), w, (6, 8), b, method=method)
        assert got.dtype == dtype
        want_d = dense_reference(x.astype(dtype).astype(np.float64), w, (6, 8), b)
        np.testing.assert_allclose(got.astype(np.float64), want_d, rtol=0,
                                   atol=tol * np.abs(want).max())


@pytest.mark.parametrize("method", ["fft", "dft"])
def test_empty_batch(xp, rng, method):
    _, w, b = _rand(rng, (1, 3, 12, 10), 4, (6, 8))
    x = xp.zeros((0, 3, 12, 10), dtype=np.float32)
    y = spectral_conv(x, xp.asarray(w), (6, 8), xp.asarray(b), method=method)
    assert y.shape == (0, 4, 12, 10) and y.dtype == np.float32 and type(y) is type(x)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("method", ["fft", "dft"])
def test_torch_empty_batch_has_zero_gradients(rng, method):
    from fftmatvec.fno import SpectralConv

    layer = SpectralConv(3, 4, (6, 8), method=method, dtype=torch.float64)
    x = torch.zeros((0, 3, 12, 10), dtype=torch.float64, requires_grad=True)
    y = layer(x)
    assert y.shape == (0, 4, 12, 10) and y.dtype == torch.float64
    y.sum().backward()
    assert x.grad.shape == x.shape
    for p in (layer.weight, layer.bias):
        assert p.grad is not None and p.grad.shape == p.shape and not p.grad.abs().any()


def test_torch_bad_arguments_are_named():
    from fftmatvec import FFTMatvecTypeError
    from fftmatvec.fno import SpectralConv, spectral_conv_torch

    bad = [(dict(in_channels=0), FFTMatvecValueError, "in_channels: expected a positive int"),
           (dict(out_channels=2.5), FFTMatvecTypeError, "out_channels: expected a positive int"),
           (dict(n_modes=(6.5, 8)), FFTMatvecTypeError, "n_modes: expected an int or a sequence"),
           (dict(n_modes=(0, 8)), FFTMatvecValueError, "n_modes: expected 1 to 3 positive"),
           (dict(method="fast"), FFTMatvecValueError, "method: expected one of"),
           (dict(compute_dtype=torch.int8), FFTMatvecTypeError, "compute_dtype: expected"),
           (dict(dtype=torch.float16), FFTMatvecTypeError, "dtype: the parameters are float32"),
           (dict(init_std=0.0), FFTMatvecValueError, "init_std: expected a positive number"),
           (dict(graphs="yes"), FFTMatvecValueError, "graphs")]
    for change, error, message in bad:
        args = dict(in_channels=3, out_channels=4, n_modes=(6, 8)) | change
        with pytest.raises(error, match=message):
            SpectralConv(**args)
    layer = SpectralConv(3, 4, (6, 8))
    for x in (torch.ones((2, 3, 12, 10), dtype=torch.int64),
              torch.randn((2, 3, 12, 10), dtype=torch.complex64)):
        with pytest.raises(FFTMatvecTypeError, match=f"x: expected a real floating tensor .*got "
                                                     f"{x.dtype}"):
            layer(x)
    with pytest.raises(FFTMatvecTypeError, match="weight: expected a complex tensor"):
        spectral_conv_torch(torch.randn(2, 3, 12, 10), layer.weight.detach().real, (6, 8))
    with pytest.raises(FFTMatvecValueError, match=r"bias: expected Cout = 4 values"):
        spectral_conv_torch(torch.randn(2, 3, 12, 10), layer.weight, (6, 8), torch.ones(5))


@pytest.mark.parametrize("method", ["fft", "dft"])
def test_torch_func_transforms(method):
    """torch.func's grad, vmap, jvp, jacrev and functional_call, and forward-mode AD, give what
    autograd and a loop give (under them the layer is the chain of torch operations)."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(7)
    layer = SpectralConv(3, 4, (5, 6), method=method, dtype=torch.float64)
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 4, 7, 8, dtype=torch.float64)

    def loss(params, x):
        return (torch.func.functional_call(layer, params, (x,)) * g).sum()

    params = {k: v.detach() for k, v in layer.named_parameters()}
    (layer(x) * g).sum().backward()
    gp, gx = torch.func.grad(loss, argnums=(0, 1))(params, x.detach())
    for name, p in layer.named_parameters():
        torch.testing.assert_close(gp[name], p.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx, x.grad, rtol=1e-12, atol=1e-12)

    xs = torch.randn(3, 2, 3, 7, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(torch.func.vmap(layer)(xs), torch.stack([layer(v) for v in xs]),
                                   rtol=1e-12, atol=1e-12)
        v = torch.randn_like(x)
        y, ty = torch.func.jvp(layer, (x.detach(),), (v,))
        torch.testing.assert_close(ty, layer(v) - layer(torch.zeros_like(v)), rtol=1e-10,
                                   atol=1e-10)
        import torch.autograd.forward_ad as fwad

        with fwad.dual_level():  # forward-mode AD outside torch.func
            tangent = fwad.unpack_dual(layer(fwad.make_dual(x.detach(), v))).tangent
        torch.testing.assert_close(tangent, ty, rtol=1e-12, atol=1e-12)
    small = SpectralConv(1, 1, (2, 4), method=method, dtype=torch.float64)
    xj = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    jac = torch.func.jacrev(small)(xj)
    assert jac.shape == (1, 1, 3, 4, 1, 1, 3, 4)
    basis = torch.eye(12, dtype=torch.float64).reshape(12, 1, 1, 3, 4)
    with torch.no_grad():
        cols = torch.stack([small(e) - small(torch.zeros_like(e)) for e in basis], dim=-1)
    torch.testing.assert_close(jac.reshape(12, 12), cols.reshape(12, 12), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("functional", [False, True])
def test_torch_compile_keeps_the_call_opaque(functional):
    """Under torch.compile the layer is one eager step of the compiled model: dynamo does not
    trace its planning (no warnings from it), outputs and gradients as eager."""
    import warnings

    from fftmatvec.fno import SpectralConv, spectral_conv_torch

    torch.manual_seed(3)
    layer = SpectralConv(4, 5, (6, 6), method="dft")
    if functional:
        def model(x):
            return torch.relu(spectral_conv_torch(x, layer.weight, (6, 6), layer.bias)) * 2
    else:
        model = torch.nn.Sequential(layer, torch.nn.ReLU(), torch.nn.Linear(16, 3))
    x = torch.randn(2, 4, 16, 16, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(model, backend="aot_eager")(x2)
        got.sum().backward()
    assert not [w for w in caught if "fftmatvec" in str(w.message) + str(w.filename)]
    g_compiled = x2.grad.clone()
    layer.zero_grad()
    want = model(x)
    want.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(g_compiled, x.grad, rtol=1e-6, atol=1e-6)


def test_torch_layer_pickles_and_copies():
    """torch.save of a whole model, pickling (multiprocessing) and deepcopy (EMA copies)."""
    import copy
    import io
    import pickle

    from fftmatvec.fno import SpectralConv

    model = torch.nn.Sequential(SpectralConv(3, 4, (6, 8), method="dft"), torch.nn.GELU())
    x = torch.randn(2, 3, 12, 10)
    want = model(x)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    copies = [torch.load(buf, weights_only=False), pickle.loads(pickle.dumps(model)),
              copy.deepcopy(model)]
    for other in copies:
        assert type(other[0]) is SpectralConv and other[0].method == "dft"
        assert other[0].weight.data_ptr() != model[0].weight.data_ptr()
        assert torch.equal(other(x), want)


def test_torch_layer_pickles_without_its_memo():
    """A layer's memo of its forwards (launches, graphs: not picklable) is left out of its
    pickle and its deep copies; a layer pickled before the memo existed loads with one."""
    import copy
    import pickle

    from fftmatvec.fno import SpectralConv

    layer = SpectralConv(3, 4, (6, 8), method="dft")
    x = torch.randn(2, 3, 12, 10)
    want = layer(x)
    layer._fast[x.shape] = lambda *args: None  # stands for a kept launch
    old = SpectralConv.__new__(SpectralConv)  # unpickled from a state without the memo
    old.__setstate__({k: v for k, v in layer.__dict__.items() if k != "_fast"})
    for other in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer), old):
        assert other._fast == {} and torch.equal(other(x), want)
    assert x.shape in layer._fast


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
def test_torch_layer_memo_gives_way_to_hooks():
    """A layer's call takes its memo (a stand-in for a kept launch here) ahead of
    ``torch.nn.Module``'s call only where that call would go straight to ``forward``: its
    hooks, every module's hooks, ``Module.compile`` and ``torch.jit`` tracing each send the
    call through ``torch.nn.Module``, whose hooks then see the memo's output and give it
    their input."""
    from torch.nn.modules import module as nn_module

    from fftmatvec.fno import SpectralConv
    from fftmatvec.fno._layer import _plain_call

    layer = SpectralConv(3, 4, (6, 8), method="dft")
    x = torch.randn(2, 3, 12, 10)
    got = []

    def kept(torch_, lay, xin):  # the memo's entry: records its input, gives a constant
        got.append(xin)
        return torch.full((2, 4, 12, 10), 7.0)

    assert _plain_call(layer)
    layer._fast[x.shape] = kept
    assert torch.equal(layer(x), torch.full((2, 4, 12, 10), 7.0)) and got[-1] is x
    assert torch.equal(layer(x, output_shape=None), torch.full((2, 4, 12, 10), 7.0))
    hooks = [  # (register one, the output with it, the factor of the input it hands on)
        (lambda: layer.register_forward_hook(lambda mod, inp, out: out * 2), 14.0, 1.0),
        (lambda: layer.register_forward_pre_hook(lambda mod, inp: (inp[0] * 3,)), 7.0, 3.0),
        (lambda: nn_module.register_module_forward_hook(
            lambda mod, inp, out: out + 1 if mod is layer else None), 8.0, 1.0),
        (lambda: nn_module.register_module_forward_pre_hook(lambda mod, inp: None), 7.0, 1.0),
        (lambda: layer.register_full_backward_hook(lambda *args: None), 7.0, 1.0),
        (lambda: layer.register_full_backward_pre_hook(lambda *args: None), 7.0, 1.0),
        (lambda: nn_module.register_module_full_backward_hook(lambda *args: None), 7.0, 1.0),
    ]
    for register, value, factor in hooks:
        handle = register()
        try:
            assert not _plain_call(layer)
            assert torch.equal(layer(x), torch.full((2, 4, 12, 10), value))
            assert torch.equal(got[-1], x * factor)
        finally:
            handle.remove()
    assert _plain_call(layer)
    assert layer(x).eq(7.0).all()
    seen = []

    def traced(t):
        seen.append(_plain_call(layer))
        return t * 2

    torch.jit.trace(traced, x, check_trace=False)  # under tracing: torch.nn.Module's way
    assert seen == [False] and _plain_call(layer)
    layer.compile(backend="eager")  # a compiled call: torch.nn.Module's way
    assert not _plain_call(layer)
    del layer._fast[x.shape]


def test_numpy_api_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, numpy as np; import fftmatvec.fno as F; "
            "F.spectral_conv(np.ones((1, 2, 8)), np.ones((2, 2, 3), complex), 4); "
            "assert 'torch' not in sys.modules; F.SpectralConv; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_layer_repr():
    from fftmatvec.fno import SpectralConv

    assert repr(SpectralConv(3, 4, (6, 8))) == "SpectralConv(3, 4, n_modes=(6, 8), bias=True)"
    layer = SpectralConv(3, 4, 16, bias=False, compute_dtype=torch.bfloat16, graphs=False)
    assert repr(layer) == ("SpectralConv(3, 4, n_modes=(16,), bias=False, "
                           "compute_dtype=torch.bfloat16, graphs=False)")


@pytest.mark.parametrize("method", ["fft", "dft"])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_torch_matches_reference(rng, shape, cout, n_modes, method):
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = _rand(rng, shape, cout, n_modes)
    got = spectral_conv_torch(torch.tensor(x), torch.tensor(w), n_modes, torch.tensor(b),
                              method=method)
    assert got.dtype == torch.float64
    want = dense_reference(x, w, n_modes, b)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_torch_mode_checks_each_signature(rng):
    """The torch layer's mode checks, cached per call signature, still answer each one: the
    same result for n_modes as an int, a tuple or a list, the error for a bad one every time."""
    from fftmatvec import FFTMatvecTypeError
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = _rand(rng, (2, 3, 16, 12), 2, (6, 8))
    xt, wt = torch.tensor(x), torch.tensor(w)
    want = spectral_conv_torch(xt, wt, (6, 8))
    for n_modes in ((6, 8), [6, 8], np.array([6, 8])):
        assert torch.equal(spectral_conv_torch(xt, wt, n_modes), want)
    for _ in range(2):
        with pytest.raises(FFTMatvecValueError, match="weight: expected shape"):
            spectral_conv_torch(xt, wt, (6, 10))
        with pytest.raises(FFTMatvecValueError, match="x: expected 4 dimensions"):
            spectral_conv_torch(xt[0], wt, [6, 8])
        with pytest.raises(FFTMatvecTypeError, match="n_modes: expected an int or a sequence"):
            spectral_conv_torch(xt, wt, 6.5j)


@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_gradcheck(rng, shape, cout, n_modes):
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = (torch.tensor(a, requires_grad=True) for a in _rand(rng, shape, cout, n_modes))
    assert torch.autograd.gradcheck(
        lambda x, w, b: spectral_conv_torch(x, w, n_modes, b, method="fft"), (x, w, b))


@pytest.mark.parametrize("method", ["fft", "dft"])
@pytest.mark.parametrize("shape,cout,n_modes", CASES)
def test_gradgradcheck(rng, shape, cout, n_modes, method):
    """Second derivatives (a backward under create_graph=True), in x, the weight and the bias."""
    from fftmatvec.fno import spectral_conv_torch

    x, w, b = (torch.tensor(a, requires_grad=True) for a in _rand(rng, shape, cout, n_modes))
    assert torch.autograd.gradgradcheck(
        lambda x, w, b: spectral_conv_torch(x, w, n_modes, b, method=method), (x, w, b))


@pytest.mark.parametrize("method", ["fft", "dft"])
@pytest.mark.parametrize("shape,n_modes", [((3, 4, 32), 12), ((2, 4, 15, 18), (15, 18)),
                                           ((2, 3, 8, 9, 10), (4, 6, 6))])
def test_second_derivatives_match_neuralop(shape, n_modes, method):
    """A loss on the first derivatives, as a physics-informed one on dy/dx (and a penalty on
    dL/dW), differentiated again: the same as neuraloperator's, in float32."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(sum(shape) + len(method))
    ref = _neuralop()(shape[1], 5, n_modes)
    ours = SpectralConv.from_neuralop(ref, method=method)
    x = torch.randn(shape, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    g = torch.randn((shape[0], 5) + shape[2:])
    u = torch.randn(shape)
    grads = []
    for layer, xx, w in ((ref, x, ref.weight.tensor), (ours, x2, ours.weight)):
        gx, gw = torch.autograd.grad((layer(xx) * g).sum(), (xx, w), create_graph=True)
        ((gx * u).sum() + (gw.abs() ** 2).sum()).backward()
        grads.append((gx, gw, xx.grad, w.grad))
    for a, b in zip(*grads):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5


@pytest.mark.parametrize("shape,n_modes", [((3, 4, 32), 12), ((2, 4, 16, 17), (8, 10)),
                                           ((2, 4, 15, 18), (15, 18)),
                                           ((2, 3, 8, 9, 10), (4, 6, 6))])
def test_from_neuralop(shape, n_modes):
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(sum(shape))
    ref = _neuralop()(shape[1], 5, n_modes)
    ours = SpectralConv.from_neuralop(ref)
    x = torch.randn(shape, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y_ref, y = ref(x), ours(x2)
    g = torch.randn_like(y)
    (y_ref * g).sum().backward()
    (y * g).sum().backward()

    def close(a, b):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5

    close(y, y_ref)
    close(x2.grad, x.grad)
    close(ours.weight.grad, ref.weight.tensor.grad)
    close(ours.bias.grad, ref.bias.grad)


@pytest.mark.parametrize("n_modes,shape", [(12, (3, 4, 32)), ((8, 9), (2, 4, 16, 17)),
                                           ((4, 6, 5), (2, 4, 8, 9, 10)), ((6, 1), (2, 4, 8, 5))])
def test_to_neuralop(n_modes, shape):
    """A layer of ours as neuraloperator's: the same output, and back again the same weight."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(len(shape))
    ours = SpectralConv(4, 3, n_modes)
    theirs = ours.to_neuralop()
    x = torch.randn(shape)
    with torch.no_grad():
        y, y_ref = ours(x), theirs(x)
    assert float((y - y_ref).abs().max() / y_ref.abs().max()) < 1e-5
    back = SpectralConv.from_neuralop(theirs)
    assert torch.equal(back.weight, ours.weight) and torch.equal(back.bias, ours.bias)
    assert back.modes == ours.modes


@pytest.mark.parametrize("n_modes,max_n_modes,later", [
    ((8, 8), (12, 12), None), ((9, 7), (12, 12), None), ((8, 8), (12, 12), (6, 6)),
    ((8, 8), (12, 12), (9, 9)), ((5,), (9,), None)])
def test_from_neuralop_with_more_modes_stored_than_used(n_modes, max_n_modes, later):
    """A neuraloperator layer whose weight holds max_n_modes but uses n_modes (set at
    construction or later, incremental training) is copied as it computes."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(len(n_modes) + (later or (0,))[0])
    ref = _neuralop()(4, 3, n_modes, max_n_modes=max_n_modes)
    if later is not None:
        ref.n_modes = later
    ours = SpectralConv.from_neuralop(ref)
    x = torch.randn((2, 4) + (24,) * len(n_modes))
    y_ref, y = ref(x), ours(x)
    assert float((y - y_ref).abs().max() / y_ref.abs().max()) < 1e-5


@pytest.mark.parametrize("method", ["fft", "dft"])
@pytest.mark.parametrize("n_modes,grid", [
    ((16,), (10,)), ((16,), (1,)), ((16,), (2,)), ((12, 12), (9, 14)), ((12, 12), (11, 30)),
    ((12, 12), (30, 7)), ((8, 6, 8), (5, 4, 6)), ((9, 8), (6, 20)), ((8, 8), (20, 20))])
def test_inputs_with_fewer_frequencies_than_the_modes(method, n_modes, grid):
    """On an input grid holding fewer frequencies than the modes on an axis, the layer uses
    the part of its weight that fits, as neuraloperator's does: output and gradients within
    1e-5 of its layer's, the weight's gradient zero outside that part; the functions still
    refuse such an input."""
    from fftmatvec.fno import SpectralConv, spectral_conv_torch

    torch.manual_seed(sum(grid) + len(n_modes))
    ref = _neuralop()(3, 4, n_modes)
    ours = SpectralConv.from_neuralop(ref, method=method)
    x = torch.randn((2, 3) + grid, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    y_ref, y = ref(x), ours(x2)
    g = torch.randn_like(y_ref)
    (y_ref * g).sum().backward()
    (y * g).sum().backward()
    for a, b in ((y, y_ref), (x2.grad, x.grad), (ours.weight.grad, ref.weight.tensor.grad),
                 (ours.bias.grad, ref.bias.grad)):
        a, b = a.detach(), b.detach()
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= 1e-5 * float(b.abs().max())
    room = grid[:-1] + (grid[-1] // 2 + 1,)
    if any(r < m for r, m in zip(room, ours.modes)):
        assert (ours.weight.grad == 0).any()
        with pytest.raises(FFTMatvecValueError, match="n_modes: .*more than its"):
            spectral_conv_torch(x2, ours.weight, n_modes)


ON_CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA/ROCm device for torch")])


@pytest.mark.parametrize("device", ["cpu", ON_CUDA])
@pytest.mark.parametrize("method", ["fft", "dft"])
@pytest.mark.parametrize("n_modes,grid", [((8, 8), (20, 24)), ((12,), (40,))])
def test_drop_in_for_neuralop_fno(method, n_modes, grid, device):
    """As neuraloperator's FNO's conv_module, loading that FNO's checkpoint: the same model,
    outputs and gradients within 1e-5 in float32."""
    _neuralop()  # skips where neuraloperator does not import
    # neuraloperator's channel MLPs and skips are convolutions, which cuDNN runs in TF32 by
    # default (errors near 1e-4 in both models): IEEE float32 for this float32 comparison,
    # through PyTorch's public context manager, which restores the flags on exit
    with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False):
        _compare_with_neuralop_fno(method, n_modes, grid, device)


def _compare_with_neuralop_fno(method, n_modes, grid, device):
    import functools

    from fftmatvec.fno import SpectralConv
    from neuralop.models import FNO

    torch.manual_seed(len(grid))
    kw = dict(n_modes=n_modes, in_channels=2, out_channels=1, hidden_channels=16, n_layers=3)
    ref = FNO(**kw).to(device)
    ours = FNO(**kw, conv_module=functools.partial(SpectralConv, method=method)).to(device)
    assert all(type(c) is SpectralConv for c in ours.fno_blocks.convs)
    ours.load_state_dict(ref.state_dict())  # neuraloperator's "weight.tensor" keys
    x = torch.randn((3, 2) + grid, device=device)
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    ys = [model(xx) for model, xx in zip((ref, ours), xs)]
    g = torch.randn_like(ys[0])
    for y in ys:
        (y * g).sum().backward()
    grads = [dict(model.named_parameters()) for model in (ref, ours)]
    pairs = [(ys[1], ys[0]), (xs[1].grad, xs[0].grad)]
    for name, p in grads[1].items():
        pairs.append((p.grad, grads[0].get(name, grads[0].get(name + ".tensor")).grad))
    assert len(pairs) == 2 + len(grads[0])
    for a, b in pairs:
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5
    ours.n_modes = n_modes  # what FNO's n_modes setter does: the same modes are accepted


def test_neuralop_options_it_does_not_implement_are_refused():
    from fftmatvec.fno import SpectralConv

    for key, value in (("factorization", "tucker"), ("complex_data", True),
                       ("separable", True), ("resolution_scaling_factor", 2),
                       ("fno_block_precision", "mixed"), ("fft_norm", "backward"),
                       ("max_n_modes", (12, 12))):
        with pytest.raises(FFTMatvecValueError, match=key):
            SpectralConv(3, 4, (8, 8), **{key: value})
    with pytest.raises(TypeError, match="unexpected keyword argument 'modes'"):
        SpectralConv(3, 4, (8, 8), modes=3)
    layer = SpectralConv(3, 4, (8, 8), rank=0.5, implementation="factorized",
                         fixed_rank_modes=False, decomposition_kwargs={}, max_n_modes=(8, 8))
    x = torch.randn(2, 3, 16, 16)
    assert layer.transform(x) is x and layer.transform(x, output_shape=(16, 16)) is x
    torch.testing.assert_close(layer(x, output_shape=(16, 16)), layer(x))
    with pytest.raises(FFTMatvecValueError, match="output_shape: the output is on the input's"):
        layer(x, output_shape=(32, 32))
    with pytest.raises(FFTMatvecValueError, match="output_shape"):
        layer.transform(x, output_shape=(32, 32))
    with pytest.raises(FFTMatvecValueError, match="n_modes: the weight holds the modes"):
        layer.n_modes = (6, 6)


@pytest.mark.parametrize("shape,n_modes", [((4, 8, 64), 32), ((2, 6, 24, 30), (12, 16)),
                                           ((2, 4, 10, 12, 14), (6, 6, 8))])
def test_float32_gradients_match_autograd_of_reference(shape, n_modes):
    """Ours in float32 against PyTorch's autograd of an rfftn / einsum / irfftn reference."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(len(shape) * 7 + shape[-1])
    layer = SpectralConv(shape[1], 5, n_modes)
    modes = layer.modes
    d = len(modes)
    x = torch.randn(shape, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    wr = layer.weight.detach().clone().requires_grad_(True)

    def reference(x, w):
        X = torch.fft.rfftn(x, dim=tuple(range(-d, 0)), norm="forward")
        idx = [torch.as_tensor((np.arange(m) - m // 2) % n) for n, m in zip(shape[2:-1], modes)]
        for a, ix in enumerate(idx):
            X = X.index_select(2 + a, ix)
        X = X[..., : modes[-1]]
        Y = torch.einsum("bi...,io...->bo...", X, w)
        out = X.new_zeros((shape[0], 5) + tuple(shape[2:-1]) + (shape[-1] // 2 + 1,))
        grids = torch.meshgrid(*idx, indexing="ij") if idx else ()
        out[(slice(None), slice(None)) + tuple(grids) + (slice(0, modes[-1]),)] = Y
        if d > 1:
            out = torch.fft.ifftn(out, dim=tuple(range(2, 1 + d)), norm="forward")
        return torch.fft.irfft(out, n=shape[-1], dim=-1, norm="forward")

    y = layer(x)
    y_ref = reference(xr, wr) + layer.bias.detach()
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    for a, b in ((y, y_ref), (x.grad, xr.grad), (layer.weight.grad, wr.grad)):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device for torch")
@pytest.mark.parametrize("shape,n_modes", [((4, 8, 100), 40), ((2, 6, 85, 85), (12, 12)),
                                           ((2, 4, 16, 16, 16), (8, 8, 8))])
@pytest.mark.parametrize("method", ["fft", "dft"])
def test_cuda_tensors_match_cpu(shape, n_modes, method):
    """On the device: the output and gradients equal the CPU path's, and stay on the device."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(shape[-1])
    cpu = SpectralConv(shape[1], 6, n_modes, method="fft", dtype=torch.float64)
    gpu = SpectralConv(shape[1], 6, n_modes, device="cuda", method=method)
    with torch.no_grad():
        gpu.weight.copy_(cpu.weight)
        gpu.bias.copy_(cpu.bias)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    xg = x.detach().float().cuda().requires_grad_(True)
    y, yg = cpu(x), gpu(xg)
    assert yg.is_cuda
    g = torch.randn_like(y)
    (y * g).sum().backward()
    (yg * g.float().cuda()).sum().backward()
    for a, b in ((yg, y), (xg.grad, x.grad), (gpu.weight.grad, cpu.weight.grad)):
        a, b = a.detach().cpu(), b.detach()
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device for torch")
@pytest.mark.parametrize("shape,n_modes", [((4, 8, 128), 64), ((2, 6, 64, 64), (16, 16))])
@pytest.mark.parametrize("graphs", [True, False])
def test_cuda_second_derivatives_match_cpu(shape, n_modes, graphs):
    """On the device, with and without the CUDA graphs (whose forward lends its buffer to the
    backward): a loss on dL/dx and dL/dW differentiated again equals the CPU path's, and a
    first-order step after it still equals the CPU's (the lent buffer was not left held)."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(shape[-1])
    cpu = SpectralConv(shape[1], 6, n_modes, method="fft", dtype=torch.float64)
    gpu = SpectralConv(shape[1], 6, n_modes, device="cuda", method="dft", graphs=graphs)
    with torch.no_grad():
        gpu.weight.copy_(cpu.weight)
        gpu.bias.copy_(cpu.bias)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    g = torch.randn((shape[0], 6) + shape[2:], dtype=torch.float64)
    u = torch.randn(shape, dtype=torch.float64)
    got = []
    for layer, xx, gg, uu in ((cpu, x, g, u), (gpu, x.detach().float().cuda().requires_grad_(True),
                                              g.float().cuda(), u.float().cuda())):
        gx, gw = torch.autograd.grad((layer(xx) * gg).sum(), (xx, layer.weight),
                                     create_graph=True)
        ((gx * uu).sum() + (gw.abs() ** 2).sum()).backward()
        first = torch.autograd.grad((layer(xx) * gg).sum(), layer.weight)[0]
        got.append([t.detach().cpu().double() for t in (gx, gw, xx.grad, layer.weight.grad,
                                                        first)])
    for b, a in zip(*got):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-5
