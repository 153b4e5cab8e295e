"""Other libraries' arrays and interfaces: DLPack producers in and out (torch tensors, capsules,
array-API producers, JAX arrays), the autograd module (``F.as_torch()``), the PyLops operator
(``F.aspylops()``) and ``BlockToeplitz.from_file``."""

from __future__ import annotations

import numpy as np
import pytest

import fftmatvec as fm
from fftmatvec import FFTMatvecFileError, FFTMatvecTypeError, FFTMatvecValueError, backend

from conftest import dense_btt, rel_err, to_numpy
from h5files import write_fftmatvec_dir, write_native

torch = pytest.importorskip("torch")
pylops = pytest.importorskip("pylops")

SHAPE = (3, 2, 7)  # (Nd, Nm, Nt)
TOL = {np.float64: 1e-12, np.float32: 1e-5}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


# a test that needs CuPy and a CUDA (or ROCm) build of PyTorch
needs_gpu_torch = pytest.mark.skipif(not (backend.gpu_available() and torch.cuda.is_available()),
                                     reason="no GPU with CuPy and a CUDA build of PyTorch")


def _spy(F, seen):
    """Record what the operator's one-vector product receives and returns (the array it
    computes on, the array it hands back) while it runs as before."""
    one = F._one

    def product(v, adjoint, check_finite=True):
        seen["in"] = v
        seen["out"] = one(v, adjoint, check_finite)
        return seen["out"]

    F._one = product
    return seen


# ---- torch tensors on the CPU ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_torch_cpu_products_against_dense(rng, dtype):
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    nd, nm, nt = SHAPE
    F = fm.BlockToeplitz(K, dtype=dtype)
    td = TORCH_DTYPE[dtype]
    m = torch.from_numpy(rng.standard_normal((nm, nt))).to(td)
    d = torch.from_numpy(rng.standard_normal((nd, nt))).to(td)
    M = torch.from_numpy(rng.standard_normal((4, nm, nt))).to(td)
    D = torch.from_numpy(rng.standard_normal((4, nd, nt))).to(td)
    cases = [
        (F.matvec(m), A @ m.double().numpy().ravel(), (nd, nt)),
        (F.matvec(m.reshape(-1)), A @ m.double().numpy().ravel(), (nd * nt,)),
        (F @ m, A @ m.double().numpy().ravel(), (nd, nt)),
        (F.rmatvec(d), A.T @ d.double().numpy().ravel(), (nm, nt)),
        (F.T @ d, A.T @ d.double().numpy().ravel(), (nm, nt)),
        (F.matmat(M), (A @ M.double().numpy().reshape(4, -1).T).T, (4, nd, nt)),
        (F @ M, (A @ M.double().numpy().reshape(4, -1).T).T, (4, nd, nt)),
        (F.rmatmat(D), (A.T @ D.double().numpy().reshape(4, -1).T).T, (4, nm, nt)),
        (F.normal().matvec(m), A.T @ (A @ m.double().numpy().ravel()), (nm, nt)),
    ]
    for y, ref, shape in cases:
        assert isinstance(y, torch.Tensor)
        assert y.dtype == td and y.device.type == "cpu"
        assert tuple(y.shape) == shape
        assert rel_err(y.numpy().reshape(ref.shape), ref) < TOL[dtype]


def test_torch_cpu_is_zero_copy_both_ways(rng):
    nd, nm, nt = SHAPE
    F = fm.BlockToeplitz(rng.standard_normal(SHAPE))
    seen = _spy(F, {})
    m = torch.from_numpy(rng.standard_normal((nm, nt)))
    y = F.matvec(m)
    assert isinstance(seen["in"], np.ndarray)
    assert seen["in"].ctypes.data == m.data_ptr()
    assert isinstance(seen["out"], np.ndarray)
    assert y.data_ptr() == seen["out"].ctypes.data
    d = torch.from_numpy(rng.standard_normal((nd, nt)))
    x = F.rmatvec(d)
    assert seen["in"].ctypes.data == d.data_ptr()
    assert x.data_ptr() == seen["out"].ctypes.data


def test_torch_kernel_is_viewed_not_copied(rng):
    K = rng.standard_normal(SHAPE)
    Kt = torch.from_numpy(K.copy())
    F = fm.BlockToeplitz(Kt, "dsdsd")
    view = F._kernel
    assert isinstance(view, np.ndarray) and view.ctypes.data == Kt.data_ptr()
    m = rng.standard_normal(SHAPE[1:])
    assert rel_err(F.matvec(m).ravel(), dense_btt(K) @ m.ravel()) < 1e-5
    assert F.with_precision("ddddd").precision.letters == "ddddd"  # derives from the view


def test_torch_weight_of_the_normal_operator(rng):
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    w = rng.uniform(0.5, 2.0, (nd, nt))
    N = fm.BlockToeplitz(K).normal(torch.from_numpy(w))
    m = torch.from_numpy(rng.standard_normal((nm, nt)))
    y = N.matvec(m)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    ref = A.T @ (w.ravel() * (A @ m.numpy().ravel()))
    assert rel_err(y.numpy().ravel(), ref) < 1e-12


def test_torch_inputs_refused_with_reasons(rng):
    nd, nm, nt = SHAPE
    F = fm.BlockToeplitz(rng.standard_normal(SHAPE))
    m = torch.from_numpy(rng.standard_normal((nm, nt)))
    with pytest.raises(FFTMatvecTypeError, match=r"m is a torch tensor that requires grad.*"
                                                 r"as_torch.*m\.detach\(\)"):
        F.matvec(m.clone().requires_grad_())
    with pytest.raises(FFTMatvecTypeError, match=r"kernel is a torch tensor that requires grad;"
                                                 r".*no gradient.*kernel\.detach\(\)"):
        fm.BlockToeplitz(torch.randn(SHAPE, dtype=torch.float64, requires_grad=True))
    with pytest.raises(FFTMatvecTypeError, match=r"d is a torch tensor on meta"):
        F.rmatvec(torch.empty((nd, nt), device="meta"))
    with pytest.raises(FFTMatvecTypeError, match=r"M .*cannot be read through DLPack"):
        F.matmat(torch.randn((2, nm, nt)).to(torch.bfloat16))
    with pytest.raises(FFTMatvecTypeError, match=r"m must be real floating point.*int64"):
        F.matvec(torch.arange(nm * nt).reshape(nm, nt))
    with pytest.raises(FFTMatvecValueError, match=r"m must have shape \(2, 7\)"):
        F.matvec(torch.randn((nm + 1, nt), dtype=torch.float64))
    with pytest.raises(FFTMatvecValueError, match=r"m contains NaN"):
        F.matvec(torch.full((nm, nt), float("nan"), dtype=torch.float64))


# ---- other DLPack producers --------------------------------------------------------------------
def test_numpy_dlpack_capsule(rng):
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    F = fm.BlockToeplitz(K)
    m = rng.standard_normal((nm, nt))
    y = F.matvec(m.__dlpack__())
    assert type(y) is np.ndarray and y.dtype == np.float64 and y.shape == (nd, nt)
    assert rel_err(y.ravel(), A @ m.ravel()) < 1e-12
    G = fm.BlockToeplitz(K.__dlpack__())  # a kernel capsule too
    assert rel_err(G.matvec(m).ravel(), A @ m.ravel()) < 1e-12
    used = m.__dlpack__()
    F.matvec(used)
    with pytest.raises(FFTMatvecTypeError, match=r"m is a DLPack capsule that cannot be read "
                                                 r"\(a capsule is read once\)"):
        F.matvec(used)


class _Namespace:
    """A stand-in array library: its arrays wrap NumPy ones and speak DLPack."""

    @staticmethod
    def from_dlpack(x):
        return _Array(np.from_dlpack(x))


class _Array:
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __array_namespace__(self, api_version=None):
        return _Namespace


def test_array_api_producer_gets_its_own_kind_back(rng):
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    F = fm.BlockToeplitz(_Array(K))
    seen = _spy(F, {})
    m = _Array(rng.standard_normal((nm, nt)))
    y = F.matvec(m)
    assert isinstance(y, _Array) and y.a.dtype == np.float64
    assert rel_err(y.a.ravel(), A @ m.a.ravel()) < 1e-12
    assert seen["in"].ctypes.data == m.a.ctypes.data
    assert y.a.ctypes.data == seen["out"].ctypes.data
    D = _Array(rng.standard_normal((3, nd, nt)))
    X = F.rmatmat(D)
    assert isinstance(X, _Array)
    assert rel_err(X.a.reshape(3, -1), (A.T @ D.a.reshape(3, -1).T).T) < 1e-12


def test_jax_arrays_in_and_out(rng):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE).astype(np.float32)
    A = dense_btt(K)
    F = fm.BlockToeplitz(jnp.asarray(K), "sssss", dtype=np.float32)
    seen = _spy(F, {})
    m = jnp.asarray(rng.standard_normal((nm, nt)).astype(np.float32))
    y = F.matvec(m)
    assert isinstance(y, jax.Array) and y.dtype == jnp.float32 and y.shape == (nd, nt)
    assert seen["in"].ctypes.data == m.unsafe_buffer_pointer()  # read without a copy
    assert rel_err(np.asarray(y).ravel(), A @ np.asarray(m, np.float64).ravel()) < 1e-5
    D = jnp.asarray(rng.standard_normal((2, nd, nt)).astype(np.float32))
    X = F.rmatmat(D)
    assert isinstance(X, jax.Array) and X.shape == (2, nm, nt)
    assert rel_err(np.asarray(X).reshape(2, -1),
                   (A.T @ np.asarray(D, np.float64).reshape(2, -1).T).T) < 1e-5


def test_not_an_array_keeps_its_message():
    F = fm.BlockToeplitz(np.ones(SHAPE))
    with pytest.raises(FFTMatvecTypeError, match=r"m must be a numpy.ndarray or cupy.ndarray, "
                                                 r"got builtins.list"):
        F.matvec([[1.0] * 7] * 2)


# ---- autograd ----------------------------------------------------------------------------------
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_as_torch_gradcheck(rng, adjoint, batched):
    F = fm.BlockToeplitz(rng.standard_normal((2, 3, 5)))
    op = F.T if adjoint else F
    layer = op.as_torch()
    n = op.model_shape
    shape = (2,) + n if batched else n
    x = torch.from_numpy(rng.standard_normal(shape)).requires_grad_()
    assert torch.autograd.gradcheck(layer, (x,))
    assert torch.autograd.gradgradcheck(layer, (x,))


def test_as_torch_gradient_is_the_adjoint(rng):
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    layer = fm.BlockToeplitz(K).as_torch()
    m = torch.from_numpy(rng.standard_normal((nm, nt))).requires_grad_()
    d = rng.standard_normal((nd, nt))
    loss = (layer(m) - torch.from_numpy(d)).square().sum()
    loss.backward()
    ref = 2 * A.T @ (A @ m.detach().numpy().ravel() - d.ravel())
    assert m.grad.dtype == torch.float64
    assert rel_err(m.grad.numpy().ravel(), ref) < 1e-12
    # a float32 input to a float64 operator: its gradient comes back float32
    m32 = m.detach().float().requires_grad_()
    layer(m32).sum().backward()
    assert m32.grad.dtype == torch.float32
    assert rel_err(m32.grad.numpy().ravel(), A.T @ np.ones(nd * nt)) < 1e-6
    assert isinstance(layer, torch.nn.Module) and "BlockToeplitz" in repr(layer)
    assert rel_err(layer.T(torch.from_numpy(d)).numpy().ravel(), A.T @ d.ravel()) < 1e-12
    with pytest.raises(FFTMatvecTypeError, match=r"x must be a torch.Tensor, got ndarray"):
        layer(d)


def test_as_torch_inside_torch_compile(rng):
    F = fm.BlockToeplitz(rng.standard_normal(SHAPE))
    layer = F.as_torch()

    def loss(x):
        return torch.sin(layer(x)).square().sum()

    x = torch.from_numpy(rng.standard_normal(SHAPE[1:])).requires_grad_()
    compiled = torch.compile(loss, backend="eager")  # dynamo's tracing, no code generation
    value = compiled(x)
    value.backward()
    grad = x.grad.clone()
    x.grad = None
    ref = loss(x)
    ref.backward()
    assert abs(value.item() - ref.item()) <= 1e-12 * abs(ref.item())
    assert rel_err(grad.numpy(), x.grad.numpy()) < 1e-12


# ---- PyLops ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("which", ["F", "F.T", "normal"])
def test_aspylops_dottest(rng, dtype, rtol, which):
    nd, nm, nt = SHAPE
    F = fm.BlockToeplitz(rng.standard_normal(SHAPE), "ddddd" if dtype == np.float64 else "sssss",
                         dtype=dtype)
    op = {"F": F, "F.T": F.T, "normal": F.normal()}[which]
    P = op.aspylops()
    assert isinstance(P, pylops.LinearOperator)
    assert P.dims == op.model_shape and P.dimsd == op.data_shape
    assert P.dtype == dtype and P.shape == op.shape
    assert pylops.utils.dottest(P, *P.shape, rtol=rtol)
    assert pylops.utils.dottest(P.H, *P.H.shape, rtol=rtol)


def test_aspylops_products_against_dense(rng):
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    P = fm.BlockToeplitz(K).aspylops()
    assert P.dims == (nm, nt) and P.dimsd == (nd, nt)
    m = rng.standard_normal(nm * nt)
    d = rng.standard_normal(nd * nt)
    y = P @ m
    assert y.shape == (nd * nt,) and y.dtype == np.float64
    assert rel_err(y, A @ m) < 1e-12
    assert rel_err(P.H @ d, A.T @ d) < 1e-12
    assert rel_err(P.matvec(m[:, None]), (A @ m)[:, None]) < 1e-12
    X = rng.standard_normal((nm * nt, 3))
    assert rel_err(P.matmat(X), A @ X) < 1e-12
    Y = rng.standard_normal((nd * nt, 3))
    assert rel_err(P.rmatmat(Y), A.T @ Y) < 1e-12
    # PyLops's algebra and solvers on it: a damped least-squares solve
    x = pylops.optimization.basic.cgls(P, A @ m, x0=np.zeros(nm * nt), niter=200, damp=0.0,
                                       tol=1e-14)[0]
    assert rel_err(A @ x, A @ m) < 1e-8
    with pytest.raises(FFTMatvecTypeError, match=r"op must be a BlockToeplitz"):
        from fftmatvec.pylops import PyLopsOperator
        PyLopsOperator(A)


# ---- files -------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["fftmatvec", "native"])
def test_from_file(tmp_path, rng, layout):
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    if layout == "fftmatvec":
        path = write_fftmatvec_dir(str(tmp_path / "m"), K)
    else:
        path = write_native(str(tmp_path / "k.h5"), K)
    F = fm.BlockToeplitz.from_file(path, "dsdsd", dtype=np.float32)
    assert (F.nd, F.nm, F.nt) == SHAPE and F.dtype == np.float32
    assert F.precision.letters == "dsdsd"
    m = rng.standard_normal((nm, nt))
    y = F.matvec(m)
    assert y.dtype == np.float32
    assert rel_err(y.ravel(), dense_btt(K) @ m.ravel()) < 1e-5
    G = fm.BlockToeplitz.from_file(path, rows=[2, 0], cols=slice(1, 2))
    assert rel_err(G.matvec(m[1:2]).ravel(), dense_btt(K[[2, 0]][:, 1:2]) @ m[1]) < 1e-12


def test_from_file_errors(tmp_path, rng):
    path = write_native(str(tmp_path / "k.h5"), rng.standard_normal(SHAPE))
    with pytest.raises(FFTMatvecValueError, match=r"device must be 'cpu' or 'gpu', got 'tpu'"):
        fm.BlockToeplitz.from_file(path, device="tpu")
    with pytest.raises(FFTMatvecFileError):
        fm.BlockToeplitz.from_file(str(tmp_path / "missing.h5"))
    if not backend.gpu_available():
        with pytest.raises(FFTMatvecValueError, match=r"device='gpu': no GPU"):
            fm.BlockToeplitz.from_file(path, device="gpu")


# ---- on a GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_gpu_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_torch_cuda_zero_copy_on_the_callers_stream(rng, dtype):
    cp = backend.cupy
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    Kt = torch.from_numpy(K).cuda()
    F = fm.BlockToeplitz(Kt, dtype=dtype)
    assert F.xp is cp and F._kernel.data.ptr == Kt.data_ptr()
    seen = _spy(F, {})
    stream = torch.cuda.Stream()
    td = TORCH_DTYPE[dtype]
    m = torch.from_numpy(rng.standard_normal((nm, nt))).to(td).cuda()
    one = F._one

    def product(v, adjoint, check_finite=True):
        seen["stream"] = cp.cuda.get_current_stream().ptr
        return one(v, adjoint, check_finite)

    F._one = product
    stream.wait_stream(torch.cuda.current_stream())  # m was written on the default stream
    with torch.cuda.stream(stream):
        y = F.matvec(m)
    stream.synchronize()
    assert seen["stream"] == stream.cuda_stream
    assert isinstance(seen["in"], cp.ndarray) and seen["in"].data.ptr == m.data_ptr()
    assert isinstance(y, torch.Tensor) and y.device == m.device and y.dtype == td
    assert y.data_ptr() == seen["out"].data.ptr
    assert rel_err(y.cpu().numpy().ravel(), A @ m.double().cpu().numpy().ravel()) < TOL[dtype]
    D = torch.from_numpy(rng.standard_normal((3, nd, nt))).to(td).cuda()
    X = F.rmatmat(D)
    assert isinstance(X, torch.Tensor) and X.is_cuda
    assert rel_err(X.cpu().numpy().reshape(3, -1),
                   (A.T @ D.double().cpu().numpy().reshape(3, -1).T).T) < TOL[dtype]


@pytest.mark.gpu
@needs_gpu_torch
def test_torch_cuda_gradcheck(rng):
    F = fm.BlockToeplitz(torch.from_numpy(rng.standard_normal((2, 3, 5))).cuda())
    x = torch.from_numpy(rng.standard_normal((3, 5))).cuda().requires_grad_()
    assert torch.autograd.gradcheck(F.as_torch(), (x,))
    X = torch.from_numpy(rng.standard_normal((2, 2, 5))).cuda().requires_grad_()
    assert torch.autograd.gradcheck(F.T.as_torch(), (X,))


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_cupy_arrays_and_capsules(rng):
    cp = backend.cupy
    nd, nm, nt = SHAPE
    K = rng.standard_normal(SHAPE)
    A = dense_btt(K)
    F = fm.BlockToeplitz(cp.asarray(K))
    m = cp.asarray(rng.standard_normal((nm, nt)))
    y = F.matvec(m)
    assert type(y) is cp.ndarray
    assert rel_err(to_numpy(y).ravel(), A @ to_numpy(m).ravel()) < 1e-12
    seen = _spy(F, {})
    z = F.matvec(m.__dlpack__())  # a bare capsule of GPU memory
    assert type(z) is cp.ndarray and seen["in"].data.ptr == m.data.ptr
    assert rel_err(to_numpy(z).ravel(), A @ to_numpy(m).ravel()) < 1e-12
    P = F.aspylops()
    assert pylops.utils.dottest(P, *P.shape, rtol=1e-12, backend="cupy")


@pytest.mark.gpu
@pytest.mark.skipif(not backend.gpu_available(), reason="no GPU (CuPy missing or no device)")
def test_from_file_on_the_gpu(tmp_path, rng):
    K = rng.standard_normal(SHAPE)
    F = fm.BlockToeplitz.from_file(write_native(str(tmp_path / "k.h5"), K), device="gpu")
    assert F.xp is backend.cupy
    m = backend.cupy.asarray(rng.standard_normal(SHAPE[1:]))
    assert rel_err(to_numpy(F.matvec(m)).ravel(), dense_btt(K) @ to_numpy(m).ravel()) < 1e-12
