"""Truncated transforms as dense DFT products: the FNO layer as a chain of real GEMMs.

No full-size spectrum is formed. For ``x`` of shape ``(B, C, N_0, ..., N_{d-1})``:

* analysis, last axis: ``x.reshape(-1, N_{d-1}) @ F`` with ``F`` ``(N_{d-1}, 2 m_{d-1})`` the
  cosine and minus sine columns of the kept non-negative frequencies (divided by ``N``), giving
  the real and imaginary parts side by side, layout ``(..., N_{d-2}, 2, m_{d-1})``;
* analysis, axis ``a`` (from ``d-2`` down to 0): the complex product with the kept rows of the
  DFT, both signs in the weight's order, written as one real ``(2 m_a, 2 N_a)`` block matrix
  ``L_a`` whose columns run over ``(n, re/im)``, the layout the previous stage left;
  ``L_a @ X`` with ``X`` viewed as ``(batch, 2 N_a, rest)`` gives ``(batch, 2, m_a, rest)``;
* the channel product per mode: ``(M, B, 2 Cin) @ (M, 2 Cin, 2 Cout)`` with the real block form
  ``[[Re W, Im W], [-Im W, Re W]]`` of every mode's weight;
* synthesis, axis ``a`` from 0 to ``d-2``: ``R_a`` ``(2 N_a, 2 m_a)``, the complex inverse on the
  output bins (neuraloperator's odd-axis shift included), unnormalised;
* synthesis, last axis: ``(..., 2 m_{d-1}) @ A`` with ``A`` the rows ``c_k cos`` and
  ``-c_k sin``, ``c_k`` 1 on the DC (and Nyquist) column, 2 elsewhere: the real inverse with the
  imaginary part of the DC and Nyquist columns dropped.

The bias rides on the mode whose output bins are all zero (a constant over the grid), so it costs
no pass over ``y``; where an odd axis keeps fewer than 3 modes there is no such mode and the bias
is added to ``y``.

The backward is the same chain with the transposed matrices: the analysis structure with
``(A^T, R_a^T)`` maps ``dL/dy`` to the modes, the synthesis structure with ``(L_a^T, F^T)`` maps
the modes back to ``dL/dx``. The functions here take any array module whose arrays have
``reshape`` and ``@`` (NumPy, CuPy, PyTorch); the few backend calls go through :class:`Ops`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

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


def choose_method(batch, cin, cout, spatial, modes) -> str:
    """``"dft"`` while its flops are at most :data:`DFT_FLOP_RATIO` times the FFT's."""
    dft = dft_flops(batch, cin, cout, spatial, modes)
    return "dft" if dft <= DFT_FLOP_RATIO * fft_flops(batch, cin, cout, spatial) else "fft"


# ---------------------------------------------------------------------- the GEMM chains --

class Ops:
    """The backend calls of the chains: a contiguous permute, a concatenation, a matrix."""

    def __init__(self, perm, cat, matrix):
        self.perm, self.cat, self.matrix = perm, cat, matrix


def _left(L, X):
    """``L @ X[b]`` for every ``b`` of ``X`` ``(batch, K, R)``."""
    return L @ X if X.shape[0] > 1 else (L @ X[0])[None]


def analysis_chain(x, last, axes, modes):
    """``x`` ``(B, C, *spatial)`` -> ``(B, C, 2, M)``; ``axes[a]`` ``(2 m_a, 2 N_a)``."""
    B, C, *sp = x.shape
    d = len(sp)
    X = x.reshape(-1, sp[-1]) @ last
    for a in range(d - 2, -1, -1):
        batch = B * C * math.prod(sp[:a])
        X = _left(axes[a], X.reshape(batch, 2 * sp[a], -1))
    return X.reshape(B, C, 2, -1)


def synthesis_chain(Y, axes, last, spatial):
    """``Y`` ``(B, O, 2, M)`` -> ``(B, O, *spatial)``; ``axes[a]`` ``(2 N_a, 2 m_a)``."""
    B, O = Y.shape[:2]
    d = len(spatial)
    for a in range(d - 1):
        batch = B * O * math.prod(spatial[:a])
        Y = _left(axes[a], Y.reshape(batch, 2 * last_modes_of(axes[a]), -1))
    return (Y.reshape(-1, last.shape[0]) @ last).reshape((B, O) + tuple(spatial))


def last_modes_of(R):
    return R.shape[1] // 2


def to_modes_major(ops, X):
    """``(B, C, 2, M)`` -> ``(M, B, 2C)``, rows of the per-mode product."""
    B, C, _, M = X.shape
    return ops.perm(X, (3, 0, 2, 1)).reshape(M, B, 2 * C)


def from_modes_major(ops, Y, cout):
    """``(M, B, 2 Cout)`` -> ``(B, Cout, 2, M)``."""
    M, B, _ = Y.shape
    return ops.perm(Y.reshape(M, B, 2, cout), (1, 3, 2, 0))


def weight_blocks(ops, wr, wi):
    """Real and imaginary parts ``(Cin, Cout, *modes)`` -> ``(M, 2 Cin, 2 Cout)`` blocks."""
    C, O = wr.shape[:2]
    wr = ops.perm(wr.reshape(C, O, -1), (2, 0, 1))
    wi = ops.perm(wi.reshape(C, O, -1), (2, 0, 1))
    return ops.cat([ops.cat([wr, wi], 2), ops.cat([-wi, wr], 2)], 1)


def block_grad(G, cin, cout):
    """``dL/dW`` blocks ``(M, 2 Cin, 2 Cout)`` -> ``(dL/dRe W, dL/dIm W)``, each ``(M, Cin, Cout)``."""
    gr = G[:, :cin, :cout] + G[:, cin:, cout:]
    gi = G[:, :cin, cout:] - G[:, cin:, :cout]
    return gr, gi


class Chain:
    """The matrices of one (spatial, modes) problem in one precision on one device."""

    def __init__(self, ops, spatial, modes):
        sp, md = tuple(spatial), tuple(modes)
        d = len(sp)
        mat = ops.matrix
        self.spatial, self.modes = sp, md
        self.F = mat(analysis_last(sp[-1], md[-1]))
        self.L = [mat(analysis_axis(sp[a], md[a])) for a in range(d - 1)]
        self.R = [mat(synthesis_axis(sp[a], md[a])) for a in range(d - 1)]
        self.A = mat(synthesis_last(sp[-1], md[-1]))
        self.FT = mat(analysis_last(sp[-1], md[-1]).T.copy())
        self.LT = [mat(analysis_axis(sp[a], md[a]).T.copy()) for a in range(d - 1)]
        self.RT = [mat(synthesis_axis(sp[a], md[a]).T.copy()) for a in range(d - 1)]
        self.AT = mat(synthesis_last(sp[-1], md[-1]).T.copy())
        self.bias_mode = bias_mode(sp, md)

    def analysis(self, x):
        return analysis_chain(x, self.F, self.L, self.modes)

    def synthesis(self, Y):
        return synthesis_chain(Y, self.R, self.A, self.spatial)

    def synthesis_adjoint(self, g):
        """``S^T g``: the gradient on the modes ``(B, O, 2, M)`` of ``dL/dy``."""
        return analysis_chain(g, self.AT, self.RT, self.modes)

    def analysis_adjoint(self, gX):
        """``A^T gX``: ``dL/dx`` from the gradient on the modes ``(B, C, 2, M)``."""
        return synthesis_chain(gX, self.LT, self.FT, self.spatial)


def forward(ops, chain, x, wblk, bias, cout):
    """The layer's output ``(B, Cout, *spatial)`` and the modes-major input ``(M, B, 2 Cin)``."""
    Xp = to_modes_major(ops, chain.analysis(x))
    Y = from_modes_major(ops, Xp @ wblk, cout)
    late_bias = bias is not None and chain.bias_mode is None
    if bias is not None and not late_bias:
        Y[:, :, 0, chain.bias_mode] += bias.reshape(1, cout)
    y = chain.synthesis(Y)
    if late_bias:
        y = y + bias.reshape((1, cout) + (1,) * len(chain.spatial))
    return y, Xp
