"""Truncated transforms as dense DFT products: the FNO layer as a chain of real GEMMs.

No full-size spectrum is formed. For ``x`` of shape ``(B, C, N_0, ..., N_{d-1})``:

* analysis, last axis: ``x.reshape(-1, N_{d-1}) @ F`` with ``F`` ``(N_{d-1}, 2 m_{d-1})`` the
  cosine and minus sine columns of the kept non-negative frequencies (divided by ``N``), giving
  the real and imaginary parts side by side, layout ``(..., N_{d-2}, 2, m_{d-1})``;
* analysis, axis ``a`` (from ``d-2`` down to 0): the complex product with the kept rows of the
  DFT, both signs in the weight's order, written as one real ``(2 m_a, 2 N_a)`` block matrix
  ``L_a`` whose columns run over ``(n, re/im)``, the layout the previous stage left;
  ``L_a @ X`` with ``X`` viewed as ``(batch, 2 N_a, rest)`` gives ``(batch, 2, m_a, rest)``;
* the channel product per mode, a batched complex GEMM: the input made modes-major ``(M, B,
  Cin)`` (one permute, real and imaginary parts side by side, seen as complex) times the
  complex weight ``(M, Cin, Cout)`` read in place, the product permuted into the layout the
  synthesis reads (:func:`mode_product_complex`); for 16-bit storage, which has no complex
  GEMM, the real form ``(M, 2B, Cin) @ (M, Cin, 2 Cout)``: the real parts' rows over the
  imaginary parts' times the complex weight read as real in place (re/im interleaved), the two
  halves combined into the real and imaginary parts of the product while being written in the
  layout the synthesis reads (:func:`mode_product`);
* synthesis, axis ``a`` from 0 to ``d-2``: ``R_a`` ``(2 N_a, 2 m_a)``, the complex inverse on the
  output bins (neuraloperator's odd-axis shift included), unnormalised;
* synthesis, last axis: ``(..., 2 m_{d-1}) @ A`` with ``A`` the rows ``c_k cos`` and
  ``-c_k sin``, ``c_k`` 1 on the DC (and Nyquist) column, 2 elsewhere: the real inverse with the
  imaginary part of the DC and Nyquist columns dropped.

The bias rides on the mode whose output bins are all zero (a constant over the grid), so it costs
no pass over ``y``; where an odd axis keeps fewer than 3 modes there is no such mode and the bias
is added to ``y``. Where the synthesis's last step is a kernel of the paired modes
(:attr:`PairedChain.end_bias`), that kernel adds it to the constant mode as it loads it
(:func:`kernel_bias`), and the channel product's output is left as it is.

A one-axis layer can keep its modes modes-major and split instead, ``(2, M, B, C)``
(:class:`SplitChain`): the analysis ``F^T @ x^T`` writes that layout, the channel product runs on
it as real batched GEMMs (:func:`mode_product_split`), and the synthesis ``Y^T @ A`` reads it:
no permute of the modes. Or, where the row FFT kernels of a one-axis layer or the plane kernels
of a two-axis one run its four transforms, modes-major in complex pairs, ``(M, B, C)`` complex
(:class:`PairedChain`): the kernels write and read that layout, and the channel product is the
one batched complex GEMM on it, in place.

The backward is the same chain with the transposed matrices: the analysis structure with
``(A^T, R_a^T)`` maps ``dL/dy`` to the modes, the synthesis structure with ``(L_a^T, F^T)`` maps
the modes back to ``dL/dx``. The functions here take any array module whose arrays have
``reshape`` and ``@`` (NumPy, CuPy, PyTorch); the few backend calls go through :class:`Ops`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from . import _plan
from ._modes import hermitian_weights, mode_indices

#: ``method="auto"`` takes the DFT products while their flops are at most this many times an
#: FFT pipeline's: GEMMs run near the arithmetic peak, the FFT pipeline near the bandwidth.
DFT_FLOP_RATIO = 8.0


# ---------------------------------------------------------------- matrices (float64, host) --

def _angles(rows, cols, n):
    return 2 * np.pi * (np.outer(rows, cols) % n) / n


@functools.lru_cache(maxsize=128)
def analysis_last(n: int, m: int) -> np.ndarray:
    """``F`` ``(n, 2m)``: ``x @ F`` = [Re, Im] of ``(1/n) sum_w x_w exp(-2 pi i k w / n)``."""
    ang = _angles(np.arange(n), np.arange(m), n)
    return np.concatenate([np.cos(ang), -np.sin(ang)], axis=1) / n


@functools.lru_cache(maxsize=128)
def analysis_axis(n: int, m: int) -> np.ndarray:
    """``L`` ``(2m, 2n)``: rows (re/im, kept mode), columns (grid point, re/im)."""
    f = mode_indices((n, 1), (m, 1))[0]
    ang = _angles(f, np.arange(n), n)
    c, s = np.cos(ang) / n, np.sin(ang) / n      # E = c - i s
    L = np.empty((2, m, n, 2))
    L[0, :, :, 0], L[0, :, :, 1] = c, s          # Re(E z) = c zr + s zi
    L[1, :, :, 0], L[1, :, :, 1] = -s, c         # Im(E z) = c zi - s zr
    return L.reshape(2 * m, 2 * n)


@functools.lru_cache(maxsize=128)
def synthesis_axis(n: int, m: int) -> np.ndarray:
    """``R`` ``(2n, 2m)``: rows (grid point, re/im), columns (re/im, mode); output bins."""
    b = mode_indices((n, 1), (m, 1), output=True)[0]
    ang = _angles(np.arange(n), b, n)
    c, s = np.cos(ang), np.sin(ang)              # G = c + i s
    R = np.empty((n, 2, 2, m))
    R[:, 0, 0], R[:, 0, 1] = c, -s               # Re(G z) = c zr - s zi
    R[:, 1, 0], R[:, 1, 1] = s, c                # Im(G z) = s zr + c zi
    return R.reshape(2 * n, 2 * m)


@functools.lru_cache(maxsize=128)
def synthesis_last(n: int, m: int) -> np.ndarray:
    """``A`` ``(2m, n)``: rows ``c_k cos(2 pi k w / n)`` then ``-c_k sin(2 pi k w / n)``."""
    ang = _angles(np.arange(m), np.arange(n), n)
    c = hermitian_weights(n, m)[:, None]
    return np.concatenate([c * np.cos(ang), -c * np.sin(ang)], axis=0)


def bias_mode(spatial, modes):
    """The flat index of the mode that is constant on the grid (all output bins 0), or None."""
    idx = []
    for b in mode_indices(spatial, modes, output=True)[:-1]:
        hit = np.flatnonzero(b == 0)
        if hit.size == 0:
            return None
        idx.append(int(hit[0]))
    return int(np.ravel_multi_index(tuple(idx) + (0,), tuple(modes)))


# ------------------------------------------------------------------------- the cost rule --

def dft_flops(batch, cin, cout, spatial, modes) -> float:
    """Real flops of the analysis (``cin`` channels) and synthesis (``cout``) GEMM stages."""
    d = len(spatial)
    per = 2.0 * math.prod(spatial) * 2 * modes[-1]
    for a in range(d - 2, -1, -1):
        per += 2.0 * (2 * modes[a]) * (2 * spatial[a]) * math.prod(spatial[:a]) \
            * math.prod(modes[a + 1:])
    return per * batch * (cin + cout)


def fft_flops(batch, cin, cout, spatial) -> float:
    """The textbook ``2.5 N log2 N`` of a real FFT, forward on ``cin`` and inverse on ``cout``."""
    nt = math.prod(spatial)
    return 2.5 * nt * max(math.log2(nt), 1.0) * batch * (cin + cout)


def choose_method(batch: int, cin: int, cout: int, spatial: Sequence[int],
                  modes: Sequence[int]) -> str:
    """``"dft"`` while its flops are at most :data:`DFT_FLOP_RATIO` times the FFT's."""
    dft = dft_flops(batch, cin, cout, spatial, modes)
    return "dft" if dft <= DFT_FLOP_RATIO * fft_flops(batch, cin, cout, spatial) else "fft"


# ---------------------------------------------------------------------- the GEMM chains --

class Ops:
    """The backend calls of the chains: a permuted view, a contiguous permute, a matrix from
    the host, an empty array, and ``a - b``, ``a + b``, ``-a`` written into a strided ``out``
    (``sub(out, a, b)``); for the complex channel product, ``as_complex`` (a contiguous real
    array ending in 2 seen as complex), ``as_real`` (the inverse view) and ``conj_t`` (the
    conjugate transpose of the last two axes); ``matmul(a, b, out)``, a product written into
    a given array (the ends of a chain whose middle is a CUDA graph write and read its
    buffers); ``muladd(out, a, b, sign)``, a product added to (or taken from) ``out`` in place
    (the split channel product: :func:`mode_product_split`)."""

    def __init__(self, view, matrix, empty, sub, add, neg, as_complex=None, as_real=None,
                 conj_t=None, matmul=None, muladd=None):
        self.view, self.matrix, self.empty = view, matrix, empty
        self.sub, self.add, self.neg = sub, add, neg
        self.as_complex, self.as_real, self.conj_t = as_complex, as_real, conj_t
        self.matmul = matmul
        self._muladd = muladd

    def muladd(self, out, a, b, sign):
        """``out += sign * (a @ b)`` for ``sign`` 1 or -1, in place (batched products)."""
        if self._muladd is not None:
            return self._muladd(out, a, b, sign)
        if sign > 0:
            out += a @ b
        else:
            out -= a @ b
        return out

    def perm(self, a, axes):
        out = self.empty(tuple(a.shape[i] for i in axes))
        out[...] = self.view(a, axes)
        return out


def is_complex(a) -> bool:
    """Whether ``a`` (NumPy, CuPy or PyTorch) holds complex values."""
    dt = a.dtype
    flag = getattr(dt, "is_complex", None)
    return bool(flag) if flag is not None else np.dtype(dt).kind == "c"


def _left(L, X):
    """``L @ X[b]`` for every ``b`` of ``X`` ``(batch, K, R)``."""
    return L @ X if X.shape[0] > 1 else (L @ X[0])[None]


def _right(a, last, out=None, matmul=None):
    """``a @ last``, or ``last(a)`` where the last axis runs on kernels (:mod:`._rows`); into
    ``out`` where given (``matmul(a, last, out)`` for a matrix)."""
    if callable(last):
        return last(a, out=out)
    return a @ last if out is None else matmul(a, last, out)


def analysis_start(x, last, plane=None, out=None, matmul=None):
    """The analysis's first step: ``x`` ``(B, C, *spatial)`` through its last axis (``last``)
    or its last two (``plane``, :class:`._rows.Plane`), as rows ``(rows, width)``."""
    sp = x.shape[2:]
    if plane is not None:
        return _right(x.reshape(-1, sp[-2] * sp[-1]), plane, out)
    return _right(x.reshape(-1, sp[-1]), last, out, matmul)


def analysis_rest(X, shape, axes, plane=None):
    """The analysis after :func:`analysis_start`: its rows ``X`` -> ``(B, C, 2, M)`` for an
    input of ``shape``; ``axes[a]`` ``(2 m_a, 2 N_a)``."""
    B, C, *sp = shape
    d = len(sp)
    for a in range(d - 3 if plane is not None else d - 2, -1, -1):
        batch = B * C * math.prod(sp[:a])
        X = _left(axes[a], X.reshape(batch, 2 * sp[a], -1))
    return X.reshape(B, C, 2, -1)


def analysis_chain(x, last, axes, plane=None):
    """``x`` ``(B, C, *spatial)`` -> ``(B, C, 2, M)``; ``axes[a]`` ``(2 m_a, 2 N_a)``;
    ``plane``: where given, the last two axes at once (:class:`._rows.Plane`)."""
    return analysis_rest(analysis_start(x, last, plane), tuple(x.shape), axes, plane)


def synthesis_front(Y, axes, last, spatial, plane=None):
    """The synthesis but its last step: ``Y`` ``(B, O, 2, M)`` -> the rows that step reads;
    ``axes[a]`` ``(2 N_a, 2 m_a)``."""
    B, O = Y.shape[:2]
    d = len(spatial)
    for a in range(d - 1 if plane is None else d - 2):
        batch = B * O * math.prod(spatial[:a])
        Y = _left(axes[a], Y.reshape(batch, axes[a].shape[1], -1))
    return Y.reshape(-1, (last if plane is None else plane).shape[0])


def synthesis_end(T, last, shape, plane=None, out=None, matmul=None):
    """The synthesis's last step: the rows ``T`` of :func:`synthesis_front` through the last
    axis (``last``) or the last two (``plane``) -> ``shape`` ``(B, O, *spatial)``; into
    ``out`` (rows) where given."""
    return _right(T, last if plane is None else plane, out, matmul).reshape(shape)


def synthesis_chain(Y, axes, last, spatial, plane=None):
    """``Y`` ``(B, O, 2, M)`` -> ``(B, O, *spatial)``; ``axes[a]`` ``(2 N_a, 2 m_a)``;
    ``plane``: where given, the last two axes at once (:class:`._rows.Plane`)."""
    shape = tuple(Y.shape[:2]) + tuple(spatial)
    return synthesis_end(synthesis_front(Y, axes, last, spatial, plane), last, shape, plane)


def to_modes_major(ops, X):
    """``(B, C, 2, M)`` -> ``(M, 2B, C)``: per mode, the real parts' rows, then the imaginary."""
    B, C, _, M = X.shape
    return ops.perm(X, (3, 2, 0, 1)).reshape(M, 2 * B, C)


def from_modes_major(ops, Xs):
    """``(M, 2B, C)`` -> ``(B, C, 2, M)``, the inverse of :func:`to_modes_major`."""
    M, B2, C = Xs.shape
    return ops.perm(Xs.reshape(M, 2, B2 // 2, C), (2, 3, 1, 0))


def mode_product(ops, Xs, Wv):
    """``Y = X W`` per mode: ``Xs`` ``(M, 2B, C)``, ``Wv`` ``(M, C, 2O)`` -> ``(B, O, 2, M)``.

    ``Wv`` is the complex weight ``(M, C, O)`` seen as real, re/im interleaved, so no copy of
    it is made. ``Xs @ Wv`` stacks ``P = Re X W~`` over ``Q = Im X W~`` (``W~`` the interleaved
    parts), and ``Re Y = P_re - Q_im``, ``Im Y = P_im + Q_re`` are written straight into the
    layout the synthesis reads.
    """
    M, B2, _ = Xs.shape
    B, O = B2 // 2, Wv.shape[2] // 2
    PQ = (Xs @ Wv).reshape(M, 2, B, O, 2)
    Y = ops.empty((B, O, 2, M))
    Yt = ops.view(Y, (3, 0, 2, 1))
    ops.sub(Yt[:, :, 0], PQ[:, 0, :, :, 0], PQ[:, 1, :, :, 1])
    ops.add(Yt[:, :, 1], PQ[:, 0, :, :, 1], PQ[:, 1, :, :, 0])
    return Y


def mode_product_adjoint(ops, gY, Xs, Wv, need_x=True, need_w=True):
    """Gradients of :func:`mode_product`: ``dL/dXs`` ``(M, 2B, C)`` and ``dL/dWv`` ``(M, C, 2O)``
    (re/im interleaved: ``dL/dRe W + i dL/dIm W`` seen as real) from ``gY`` ``(B, O, 2, M)``."""
    B, O, _, M = gY.shape
    gYt = ops.view(gY, (3, 0, 2, 1))
    gPQ = ops.empty((M, 2, B, O, 2))
    gPQ[:, 0, :, :, 0] = gYt[:, :, 0]
    gPQ[:, 0, :, :, 1] = gYt[:, :, 1]
    gPQ[:, 1, :, :, 0] = gYt[:, :, 1]
    ops.neg(gPQ[:, 1, :, :, 1], gYt[:, :, 0])
    gPQ = gPQ.reshape(M, 2 * B, 2 * O)
    gXs = gPQ @ Wv.swapaxes(-1, -2) if need_x else None
    gWv = Xs.swapaxes(-1, -2) @ gPQ if need_w else None
    return gXs, gWv


#: The plane kernels' transforms (:func:`._rows.plane_set`) by the names of the last axis's
#: transforms they stand for (:func:`._rows.last_axis_set`).
PLANE_NAMES = {"ana": "F", "syn": "A", "synT": "AT", "anaT": "FT"}


class Chain:
    """The matrices of one (spatial, modes) problem in one precision on one device.

    ``last_axis``: where the last axis runs on kernels, the transforms that take the place of
    some of its matrices ``F``, ``A``, ``AT`` and ``FT`` (:func:`._rows.last_axis_set`);
    ``plane``: where the last two axes run on one kernel, the transforms ``ana``, ``syn``,
    ``synT``, ``anaT`` that take the place of those axes' steps in the analysis, the synthesis
    and their adjoints (:func:`._rows.plane_set`)."""

    split = paired = False
    fused = None  # (PairedChain: a one-axis layer's forward in one kernel)
    end_bias = False  # (PairedChain: the bias added by the synthesis's end kernel)

    def __init__(self, ops, spatial, modes, last_axis=None, plane=None):
        sp, md = tuple(spatial), tuple(modes)
        d = len(sp)
        mat = ops.matrix
        self.spatial, self.modes = sp, md
        self.L = [mat(analysis_axis(sp[a], md[a])) for a in range(d - 1)]
        self.R = [mat(synthesis_axis(sp[a], md[a])) for a in range(d - 1)]
        self.LT = [mat(analysis_axis(sp[a], md[a]).T.copy()) for a in range(d - 1)]
        self.RT = [mat(synthesis_axis(sp[a], md[a]).T.copy()) for a in range(d - 1)]
        last = dict(last_axis or {})
        n, m = sp[-1], md[-1]
        self.F = last.get("F") or mat(analysis_last(n, m))
        self.A = last.get("A") or mat(synthesis_last(n, m))
        self.FT = last.get("FT") or mat(analysis_last(n, m).T.copy())
        self.AT = last.get("AT") or mat(synthesis_last(n, m).T.copy())
        self.plane = dict(plane or {})
        # the matrices and steps the kernels replace, and the form each kernel runs in
        self.rows = tuple(sorted(last)) + tuple(f"plane:{k}" for k in sorted(self.plane))
        self.forms = _forms({**last, **self.plane})
        self.forward_ends, self.backward_ends = _end_kernels(
            {**last, **{PLANE_NAMES[k]: t for k, t in self.plane.items()}})
        self.bias_mode = bias_mode(sp, md)
        self._matmul = ops.matmul

    # Each of the four transforms also in two parts, its first (or last) step and the rest,
    # for a CUDA graph of the chain's middle whose ends run outside it (``out``: that step's
    # rows written into the graph's input buffer).

    def analysis_start(self, x, out=None):
        return analysis_start(x, self.F, self.plane.get("ana"), out, self._matmul)

    def analysis_rest(self, X, shape):
        return analysis_rest(X, shape, self.L, self.plane.get("ana"))

    def synthesis_front(self, Y):
        return synthesis_front(Y, self.R, self.A, self.spatial, self.plane.get("syn"))

    def synthesis_end(self, T, shape):
        return synthesis_end(T, self.A, shape, self.plane.get("syn"))

    def synthesis_adjoint_start(self, g, out=None):
        return analysis_start(g, self.AT, self.plane.get("synT"), out, self._matmul)

    def synthesis_adjoint_rest(self, G, shape):
        return analysis_rest(G, shape, self.RT, self.plane.get("synT"))

    def analysis_adjoint_front(self, gX):
        return synthesis_front(gX, self.LT, self.FT, self.spatial, self.plane.get("anaT"))

    def analysis_adjoint_end(self, T, shape):
        return synthesis_end(T, self.FT, shape, self.plane.get("anaT"))

    def constant_mode(self, Y):
        """The real parts of the mode constant over the grid in the modes ``Y`` ``(B, O, 2,
        M)``: a view ``(B, O)`` (:attr:`bias_mode` not None)."""
        return Y[:, :, 0, self.bias_mode]

    def analysis(self, x):
        return analysis_chain(x, self.F, self.L, self.plane.get("ana"))

    def synthesis(self, Y):
        return synthesis_chain(Y, self.R, self.A, self.spatial, self.plane.get("syn"))

    def synthesis_adjoint(self, g):
        """``S^T g``: the gradient on the modes ``(B, O, 2, M)`` of ``dL/dy``."""
        return analysis_chain(g, self.AT, self.RT, self.plane.get("synT"))

    def analysis_adjoint(self, gX):
        """``A^T gX``: ``dL/dx`` from the gradient on the modes ``(B, C, 2, M)``."""
        return synthesis_chain(gX, self.LT, self.FT, self.spatial, self.plane.get("anaT"))


def mode_product_complex(ops, X, Wc):
    """``Y = X W`` per mode in complex arithmetic: ``X`` ``(B, C, 2, M)`` (the analysis's
    layout), ``Wc`` the complex weight ``(M, C, O)`` -> ``Y`` ``(B, O, 2, M)`` and the
    modes-major complex input ``Xc`` ``(M, B, C)``.

    One permute makes ``X`` modes-major with the real and imaginary parts side by side (a
    complex view), one batched complex GEMM multiplies, one permute writes the synthesis's
    layout: three launches and two passes over the mode-sized arrays, where the real form
    (:func:`mode_product`) combines its four real products in two more."""
    Xc = ops.as_complex(ops.perm(X, (3, 0, 1, 2)))
    Y = ops.perm(ops.as_real(Xc @ Wc), (1, 2, 3, 0))
    return Y, Xc


def mode_product_complex_adjoint(ops, gY, Xc, Wc, need_x=True, need_w=True):
    """Gradients of :func:`mode_product_complex`: ``dL/dX`` ``(B, C, 2, M)`` (the layout the
    analysis's adjoint reads) and ``dL/dW`` ``(M, C, O)`` complex, from ``gY`` ``(B, O, 2,
    M)``; a complex gradient is ``dL/dRe + i dL/dIm``, so ``dL/dX = gY W^H``, ``dL/dW = X^H
    gY`` per mode."""
    gYc = ops.as_complex(ops.perm(gY, (3, 0, 1, 2)))
    gX = ops.perm(ops.as_real(gYc @ ops.conj_t(Wc)), (1, 2, 3, 0)) if need_x else None
    gW = ops.conj_t(Xc) @ gYc if need_w else None
    return gX, gW


def _end_kernels(kernels) -> tuple:
    """``(forward_ends, backward_ends)`` of a chain whose kernels (:mod:`._rows`) replace the
    transforms named in ``kernels`` (``F``, ``A``, ``AT``, ``FT``; a plane's by those names):
    the kernels of the forward's first and last steps (the analysis's first, the synthesis's
    last) and of the backward's (the synthesis's adjoint's first, the analysis's adjoint's
    last), whose launches a replay may bind (:func:`._torch_dft.bound_ends`); None for a
    direction where either step is a GEMM."""
    def pair(first, last):
        pair = kernels.get(first), kernels.get(last)
        return None if None in pair else pair

    return pair("F", "A"), pair("AT", "FT")


def _forms(kernels) -> tuple:
    """The form of each kernel of a chain (``variant``: pass or warp form), by the name of what
    it replaces: with :attr:`Chain.rows` what tells two chains of one layer apart."""
    return tuple((k, getattr(t, "variant", "")) for k, t in sorted(kernels.items()))


class SplitChain:
    """The matrices of a one-axis layer whose modes are kept modes-major and split:
    ``(2, M, B, C)``, every mode's ``(B, C)`` matrix of real parts, then every mode's
    imaginary parts.

    ``F^T @ x^T`` (``x`` read once, transposed in the GEMM's operand, not in memory) writes that
    layout, the channel product reads and writes it with real batched GEMMs of the weight split
    into its real and imaginary parts (:func:`mode_product_split`), and ``Y^T @ A`` writes
    ``y``. :class:`Chain`'s layout ``(B, C, 2, M)`` takes a permute of the modes before the
    channel product and one after it; this one none, for a copy of the weight (its real and
    imaginary parts apart), which is the smaller where ``B (Cin + Cout) >= Cin Cout``
    (:func:`split_pays`). The same protocol as :class:`Chain`: the four transforms, each in
    two parts for a CUDA graph of the middle; the backward's transforms with the same two
    matrices on the other side."""

    split, paired = True, False
    fused = None  # (PairedChain: a one-axis layer's forward in one kernel)
    end_bias = False  # (PairedChain: the bias added by the synthesis's end kernel)

    def __init__(self, ops, spatial, modes, last_axis=None):
        (n,), (m,) = tuple(spatial), tuple(modes)
        self.spatial, self.modes = (n,), (m,)
        # the four transforms of the axis: kernels (modes-major, :func:`._rows.last_axis_set`)
        # where given, by the matrix each replaces, else GEMMs with FT (2m, n) and A (2m, n)
        self._kernels = dict(last_axis or {})
        self.FT = ops.matrix(analysis_last(n, m).T.copy())
        self.A = ops.matrix(synthesis_last(n, m))
        self.rows = ("split",) + tuple(sorted(self._kernels))
        self.forms = _forms(self._kernels)
        self.forward_ends, self.backward_ends = _end_kernels(self._kernels)
        self.plane = {}
        self.bias_mode = 0
        self._matmul = ops.matmul

    def _to_modes(self, name, mat, a, out):
        """Rows of ``n`` points (of ``a``) to ``(2m, rows)``: the kernel replacing the matrix
        ``name``, or ``mat @ rows^T``."""
        rows = a.reshape(-1, self.spatial[0])
        kernel = self._kernels.get(name)
        if kernel is not None:
            return kernel(rows, out=out)
        return mat @ rows.T if out is None else self._matmul(mat, rows.T, out)

    def _to_rows(self, name, mat, T, shape):
        """``(2m, rows)`` to ``shape``: the kernel replacing the matrix ``name``, or
        ``T^T @ mat``."""
        kernel = self._kernels.get(name)
        return (kernel(T) if kernel is not None else T.T @ mat).reshape(shape)

    def _modes(self, H, shape):
        return H.reshape(2, self.modes[0], shape[0], shape[1])

    def constant_mode(self, Y):
        """The real parts of mode 0 in the modes ``Y`` ``(2, M, B, O)``: a view ``(B, O)``."""
        return Y[0, 0]

    def analysis_start(self, x, out=None):
        return self._to_modes("F", self.FT, x, out)

    def analysis_rest(self, H, shape):
        return self._modes(H, shape)

    def synthesis_front(self, Y):
        return Y.reshape(2 * self.modes[0], -1)

    def synthesis_end(self, T, shape):
        return self._to_rows("A", self.A, T, shape)

    def synthesis_adjoint_start(self, g, out=None):
        return self._to_modes("AT", self.A, g, out)

    def synthesis_adjoint_rest(self, G, shape):
        return self._modes(G, shape)

    def analysis_adjoint_front(self, gX):
        return gX.reshape(2 * self.modes[0], -1)

    def analysis_adjoint_end(self, T, shape):
        return self._to_rows("FT", self.FT, T, shape)

    def analysis(self, x):
        return self.analysis_rest(self.analysis_start(x), tuple(x.shape))

    def synthesis(self, Y):
        shape = tuple(Y.shape[2:]) + self.spatial
        return self.synthesis_end(self.synthesis_front(Y), shape)

    def synthesis_adjoint(self, g):
        """``S^T g``: the gradient on the modes ``(2, M, B, O)`` of ``dL/dy``."""
        return self.synthesis_adjoint_rest(self.synthesis_adjoint_start(g), tuple(g.shape))

    def analysis_adjoint(self, gX):
        """``A^T gX``: ``dL/dx`` from the gradient on the modes ``(2, M, B, C)``."""
        shape = tuple(gX.shape[2:]) + self.spatial
        return self.analysis_adjoint_end(self.analysis_adjoint_front(gX), shape)


class PairedChain:
    """The matrices of a layer whose modes are kept modes-major in complex pairs: ``(M, B, C)``
    complex, every mode's ``(B, C)`` matrix, its real and imaginary parts side by side.

    All the layer's axes run on one kernel that writes that layout from ``x`` and reads it into
    ``y``: the row FFT kernels of a one-axis layer (:class:`._rows.LastAxis` with
    ``modes_major="paired"``, ``last_axis``) or the plane kernels of a two-axis one
    (:class:`._rows.Plane`, ``plane``). The channel product is then one batched complex GEMM
    that reads and writes it in place (:func:`mode_product_paired`): where :class:`Chain`
    permutes the modes before the product and after it, and :class:`SplitChain` copies the
    weight into its parts and runs four real GEMMs, this chain runs only the two kernels and
    the complex GEMMs (one forward, two backward) and the bias's small steps.
    A transform that no kernel replaces runs as :class:`Chain`'s GEMMs and a permute into (or
    out of) the layout (the chain on the CPU, for its tests). ``product``: the forward's
    channel product on the package's kernel for small batches
    (:class:`._product.ModeProduct`, :meth:`mode_product`). The same protocol as
    :class:`Chain`.

    ``end_bias``: whether the synthesis's last step is a kernel that adds the bias to the
    constant mode as it loads it (the row and plane kernels' inverse transforms,
    :meth:`._rows.LastAxis.takes_bias`, at the chain's :attr:`bias_mode`): a forward whose
    bias that kernel takes (:func:`kernel_bias`) hands it to :meth:`synthesis_end`, and the
    channel product's output is left without it, so that a small layer runs no kernel of its
    own for the bias."""

    split = False
    paired = True

    def __init__(self, ops, spatial, modes, last_axis=None, plane=None, product=None,
                 fused=None):
        sp, md = tuple(spatial), tuple(modes)
        if len(sp) > 2 or (plane and len(sp) != 2) or (last_axis and len(sp) != 1):
            raise ValueError(f"the paired modes take one axis on the row kernels or two on the "
                             f"plane kernels, got {len(sp)} axes with "
                             f"{'the plane kernels' if plane else 'the row kernels'}")
        self.spatial, self.modes = sp, md
        last, plane = dict(last_axis or {}), dict(plane or {})
        self._kernels = {**last, **{PLANE_NAMES[k]: t for k, t in plane.items()}}
        # the GEMMs of the transforms that no kernel replaces
        self._gemms = Chain(ops, sp, md) if len(self._kernels) < 4 else None
        self.rows = (("paired",) + tuple(sorted(last))
                     + tuple(f"plane:{k}" for k in sorted(plane)))
        self.forms = _forms({**last, **plane})
        self.forward_ends, self.backward_ends = _end_kernels(self._kernels)
        self.plane = plane
        self.bias_mode = bias_mode(sp, md)
        end = self._kernels.get("A")
        self.end_bias = (_plan.FNO_END_BIAS and self.bias_mode is not None and end is not None
                         and getattr(end, "bias_mode", None) == self.bias_mode)
        self._M = math.prod(md)
        self._ops = ops
        self._product = product
        self.product = product is not None
        self.fused = fused

    def mode_product(self, X, W):
        """``Y = X W`` per mode (:func:`mode_product_paired`), on the package's kernel
        (``product``: :class:`._product.ModeProduct`) where the planner gave one and it takes
        the arrays."""
        if self._product is not None and self._product.takes(X, W):
            return self._product.run(X, W)
        return mode_product_paired(X, W)

    def _to_modes(self, name, a, out):
        """``a`` ``(B, C, *spatial)`` to the modes ``(M, 2 B C)``: the kernel replacing the
        transform ``name`` (``F`` the analysis, ``AT`` the synthesis's adjoint), or its GEMMs
        and a permute; into ``out`` where given."""
        kernel = self._kernels.get(name)
        if kernel is not None:
            return kernel(a.reshape(-1, math.prod(self.spatial)), out=out)
        gemms = self._gemms
        X = (gemms.analysis if name == "F" else gemms.synthesis_adjoint)(a)  # (B, C, 2, M)
        B, C, _, M = X.shape
        if out is None:
            out = self._ops.empty((M, 2 * B * C))
        out.reshape(M, B * C, 2)[...] = self._ops.view(X.reshape(B * C, 2, M), (2, 0, 1))
        return out

    def _to_rows(self, name, T, shape, bias=None):
        """The modes ``(M, 2 B O)`` to ``shape`` ``(B, O, *spatial)``: the kernel replacing the
        transform ``name`` (``A`` the synthesis, ``FT`` the analysis's adjoint), or a permute
        and its GEMMs; ``bias`` (``(O,)``, :func:`kernel_bias`) added by the kernel to the
        constant mode."""
        kernel = self._kernels.get(name)
        if kernel is not None:
            return (kernel(T) if bias is None else kernel(T, bias=bias)).reshape(shape)
        if bias is not None:
            raise ValueError(f"no kernel of the chain's {name} step takes the bias")
        Y = self._ops.perm(T.reshape(self._M, -1, 2), (1, 2, 0))
        Y = Y.reshape(shape[0], shape[1], 2, self._M)
        gemms = self._gemms
        return (gemms.synthesis if name == "A" else gemms.analysis_adjoint)(Y)

    def _complex(self, H, shape):
        return self._ops.as_complex(H.reshape(self._M, shape[0], shape[1], 2))

    def _pairs(self, Y):
        return self._ops.as_real(Y).reshape(self._M, -1)

    def constant_mode(self, Y):
        """The real parts of the mode constant over the grid in the complex modes ``Y`` ``(M,
        B, O)``: a view ``(B, O)`` (:attr:`bias_mode` not None)."""
        return self._ops.as_real(Y)[self.bias_mode, :, :, 0]

    def analysis_start(self, x, out=None):
        return self._to_modes("F", x, out)

    def analysis_rest(self, H, shape):
        return self._complex(H, shape)

    def synthesis_front(self, Y):
        return self._pairs(Y)

    def synthesis_end(self, T, shape, bias=None):
        """The synthesis's last step; ``bias`` where its kernel adds it (:attr:`end_bias`)."""
        return self._to_rows("A", T, shape, bias)

    def synthesis_adjoint_start(self, g, out=None):
        return self._to_modes("AT", g, out)

    def synthesis_adjoint_rest(self, G, shape):
        return self._complex(G, shape)

    def analysis_adjoint_front(self, gX):
        return self._pairs(gX)

    def analysis_adjoint_end(self, T, shape):
        return self._to_rows("FT", T, shape)

    def analysis(self, x):
        return self.analysis_rest(self.analysis_start(x), tuple(x.shape))

    def synthesis(self, Y, bias=None):
        shape = (Y.shape[1], Y.shape[2]) + self.spatial
        return self.synthesis_end(self.synthesis_front(Y), shape, bias)

    def synthesis_adjoint(self, g):
        """``S^T g``: the gradient on the modes ``(M, B, O)`` (complex) of ``dL/dy``."""
        return self.synthesis_adjoint_rest(self.synthesis_adjoint_start(g), tuple(g.shape))

    def analysis_adjoint(self, gX):
        """``A^T gX``: ``dL/dx`` from the gradient on the modes ``(M, B, C)`` (complex)."""
        shape = (gX.shape[1], gX.shape[2]) + self.spatial
        return self.analysis_adjoint_end(self.analysis_adjoint_front(gX), shape)


def mode_product_paired(X, Wc):
    """``Y = X W`` per mode on the paired modes: ``X`` ``(M, B, C)`` and ``Wc`` ``(M, C, O)``
    complex -> ``Y`` ``(M, B, O)`` complex, one batched complex GEMM."""
    return X @ Wc


def mode_product_paired_adjoint(ops, gY, X, Wc, need_x=True, need_w=True):
    """Gradients of :func:`mode_product_paired` from ``gY`` ``(M, B, O)``: ``dL/dX = gY W^H``
    ``(M, B, C)`` and ``dL/dW = X^H gY`` ``(M, C, O)``, complex."""
    gX = gY @ ops.conj_t(Wc) if need_x else None
    gW = ops.conj_t(X) @ gY if need_w else None
    return gX, gW


#: The layouts of a chain's modes (:func:`make_chain`): ``(B, C, 2, M)`` permuted around the
#: channel product (:class:`Chain`), modes-major split (:class:`SplitChain`), modes-major in
#: complex pairs (:class:`PairedChain`).
LAYOUTS = ("interleaved", "split", "paired")


def make_chain(ops, spatial, modes, device_id, rows=frozenset(), plane=frozenset(),
               layout="interleaved", variant="auto", product=False, fused=False,
               channels=None):
    """The chain of a layer as the planner chose it (:func:`fftmatvec.fno._plan.fno_chain`):
    its row kernels ``rows`` (:func:`._rows.last_axis_set`) and plane kernels ``plane``
    (:func:`._rows.plane_set`) on device ``device_id`` in form ``variant`` (``"direct"``: the
    planes' direct form, the rows' kernels as ``"auto"``), its modes in
    ``layout`` (:data:`LAYOUTS`): :class:`SplitChain`, :class:`PairedChain` or
    :class:`Chain`; ``product``: the paired modes' forward channel product on the package's
    kernel (:class:`._product.ModeProduct`); ``fused``: a forward without gradients of a
    one-axis layer of ``channels`` channels in and out in one kernel
    (:class:`._fused1d.Layer1d`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if product and layout != "paired":
        raise ValueError(f"the channel product's kernel takes the paired modes, got {layout!r}")
    if fused and not (layout == "paired" and "r2c" in rows and "c2r" in rows and channels):
        raise ValueError("the one-kernel layer takes a one-axis layer on the paired modes, "
                         "both transforms on the row kernels, its channels given")
    last = kernel_plane = None
    if rows or plane:
        from ._rows import PAIRED, last_axis_set, plane_set

        major = {"interleaved": False, "split": True, "paired": PAIRED}[layout]
        if rows:  # (the direct form is the planes')
            last = last_axis_set(spatial[-1], modes[-1], device_id, rows, modes_major=major,
                                 variant="auto" if variant == "direct" else variant)
        if plane:
            kernel_plane = plane_set(spatial[-2:], modes[-2:], device_id, plane,
                                     variant=variant,
                                     modes_major=PAIRED if layout == "paired" else False)
    if layout == "split":
        return SplitChain(ops, spatial, modes, last)
    if layout == "paired":
        if product:
            from ._product import ModeProduct

            product = ModeProduct(device_id)
        if fused:
            from ._fused1d import Layer1d

            fused = Layer1d(spatial[-1], modes[-1], int(channels), last["F"], last["A"],
                            device_id)
        return PairedChain(ops, spatial, modes, last, kernel_plane, product or None,
                           fused or None)
    return Chain(ops, spatial, modes, last, kernel_plane)


def split_pays(batch, cin, cout, spatial) -> bool:
    """Whether a layer takes :class:`SplitChain`: one axis, and the weight's copy into its
    real and imaginary parts (``Cin Cout`` per mode) no larger than the permutes it saves
    (the input's and the output's modes, ``B (Cin + Cout)`` per mode)."""
    return len(spatial) == 1 and batch * (cin + cout) >= cin * cout


def split_weight(ops, W):
    """The complex weight ``(M, C, O)`` as real ``(2, M, C, O)``: real parts, imaginary parts."""
    return ops.perm(ops.as_real(W), (3, 0, 1, 2))


def join_weight(ops, gWs):
    """The inverse of :func:`split_weight`: real ``(2, M, C, O)`` -> complex ``(M, C, O)``."""
    return ops.as_complex(ops.perm(gWs, (1, 2, 3, 0)))


def _mT(a):
    return a.swapaxes(-1, -2)


def split_product(ops, a, b, a_sign=1, b_sign=1):
    """``(Re a + i a_sign Im a) @ (Re b + i b_sign Im b)`` per batch, on split operands
    (``a[0]``, ``a[1]`` the real and imaginary parts; ``a_sign`` or ``b_sign`` -1 for a
    conjugate, at most one of them), split: four real batched GEMMs, two of them adding into
    the others' output."""
    out = ops.empty((2,) + tuple(a.shape[1:-1]) + (b.shape[-1],))
    ops.matmul(a[0], b[0], out[0])
    ops.muladd(out[0], a[1], b[1], -a_sign * b_sign)
    if b_sign > 0:  # the imaginary part's positive product first
        ops.matmul(a[0], b[1], out[1])
        ops.muladd(out[1], a[1], b[0], a_sign)
    else:
        ops.matmul(a[1], b[0], out[1])
        ops.muladd(out[1], a[0], b[1], b_sign)
    return out


def mode_product_split(ops, X, Ws):
    """``Y = X W`` per mode in the split layout: ``X`` ``(2, M, B, C)``, ``Ws`` ``(2, M, C, O)``
    (:func:`split_weight`) -> ``Y`` ``(2, M, B, O)``."""
    return split_product(ops, X, Ws)


def mode_product_split_adjoint(ops, gY, X, Ws, need_x=True, need_w=True):
    """Gradients of :func:`mode_product_split` from ``gY`` ``(2, M, B, O)``: ``dL/dX`` ``(2, M,
    B, C)`` and ``dL/dW`` split ``(2, M, C, O)``; as complex gradients (``dL/dRe + i dL/dIm``)
    ``dL/dX = gY W^H``, ``dL/dW = X^H gY`` per mode."""
    gX = split_product(ops, gY, _mT(Ws), b_sign=-1) if need_x else None
    gWs = split_product(ops, _mT(X), gY, a_sign=-1) if need_w else None
    return gX, gWs


def modes_step(ops, chain, X, W, bias):
    """The channel product of the analysis's modes ``X`` ``(B, C, 2, M)``: ``Y`` ``(B, O, 2,
    M)``, the bias added to its constant mode where the layer keeps one (else the caller adds
    it to the output: :func:`late_bias`), and the modes-major input the backward reads. A
    caller whose synthesis's end kernel adds the bias (:func:`kernel_bias`) passes None.

    ``W``: the weight, modes-major: complex ``(M, C, O)`` for the complex channel product
    (:func:`mode_product_complex`, which then gives ``Xc`` ``(M, B, C)``), or the complex weight
    seen as real ``(M, C, 2O)`` for the real one (:func:`mode_product`, giving ``Xs`` ``(M, 2B,
    C)``); ``bias`` ``(O,)``. On a :class:`SplitChain` ``X`` and ``Y`` are ``(2, M, B, C)``
    and ``(2, M, B, O)``, ``W`` complex, and ``X`` itself is what the backward reads
    (:func:`mode_product_split`); on a :class:`PairedChain`, ``X`` and ``Y`` complex ``(M, B,
    C)`` and ``(M, B, O)``, ``W`` complex, ``X`` what the backward reads
    (:func:`mode_product_paired`)."""
    if chain.paired:
        Y, Xs = chain.mode_product(X, W), X
    elif chain.split:
        Y, Xs = mode_product_split(ops, X, split_weight(ops, W)), X
    elif is_complex(W):
        Y, Xs = mode_product_complex(ops, X, W)
    else:
        Xs = to_modes_major(ops, X)
        Y = mode_product(ops, Xs, W)
    if bias is not None and chain.bias_mode is not None:
        mode = chain.constant_mode(Y)  # a view: the bias added in place
        mode += bias.reshape(1, -1)
    return Y, Xs


def kernel_bias(chain, bias):
    """``bias`` ``(O,)`` where the chain's synthesis's end kernel adds it to the constant mode
    (:attr:`PairedChain.end_bias`, and the kernel takes the array as it is:
    :meth:`._rows.LastAxis.takes_bias`, contiguous float32 on its device, read in place), else
    None: then :func:`modes_step` adds it (or :func:`late_bias`). One rule for every path of a
    chain (eager, in a CUDA graph, outside one), so that the bias is added once."""
    if bias is None or not chain.end_bias:
        return None
    return bias if chain._kernels["A"].takes_bias(bias) else None


def late_bias(chain, y, bias):
    """``y`` with the bias added where :func:`modes_step` could not (no constant mode)."""
    if bias is None or chain.bias_mode is not None:
        return y
    return y + bias.reshape((1, -1) + (1,) * len(chain.spatial))


def forward(ops, chain, x, W, bias):
    """The layer's output ``(B, O, *spatial)`` and the modes-major input the backward reads
    (:func:`modes_step`); the bias added by the synthesis's kernel where it takes it
    (:func:`kernel_bias`), else by :func:`modes_step` or :func:`late_bias`."""
    end = kernel_bias(chain, bias)
    if end is not None:  # the synthesis's kernel adds it
        Y, Xs = modes_step(ops, chain, chain.analysis(x), W, None)
        return chain.synthesis(Y, end), Xs
    Y, Xs = modes_step(ops, chain, chain.analysis(x), W, bias)
    return late_bias(chain, chain.synthesis(Y), bias), Xs
