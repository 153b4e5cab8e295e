"""The data-space posterior: offline factor of ``H_d = F Γpr F^T + Γnoise``, online answers.

For the linear Gaussian problem ``d = F m + e``, ``m ~ N(m_pr, Γpr)``, ``e ~ N(0, Γnoise)``,

.. math::

    m_{post} = m_{pr} + Γ_{pr} F^T H_d^{-1} (d - F m_{pr}), \\qquad
    Γ_{post} = Γ_{pr} - Γ_{pr} F^T H_d^{-1} F Γ_{pr}, \\qquad
    H_d = F Γ_{pr} F^T + Γ_{noise},

with ``H_d`` of size ``(Nd Nt)^2``. Offline, :meth:`DataSpacePosterior.factor` forms ``H_d``
from batched products ``F (Γpr (F^T E))`` over blocks of observation unit vectors ``E`` and
factors it (Cholesky, ``H_d = L L^T``); online, :meth:`~DataSpacePosterior.mean` answers a new
observation with one triangular solve pair, one adjoint product and one prior application.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _memory
from .._typing import Array, PathLike
from ..distributed.operator import DistributedBlockToeplitz
from .._errors import FFTMatvecFileError, FFTMatvecTypeError, FFTMatvecValueError
from ..operator import BlockToeplitz, _resolve_precision
from ..precision import PrecisionConfig
from ._checks import data_batch, noise_variances, param_vector
from ._maps import Maps
from .priors import as_prior

__all__ = ["DataSpacePosterior"]

FORMAT = "fftmatvec-data-space-posterior"  # the ``format`` attribute of a saved factor
VERSION = 1
# Columns of H_d per batched product at most: larger batches gain nothing on the CPU and
# only grow the temporaries.
_MAX_BATCH = 2048
# Sensor chunks of the block columns: the lower triangle of (chunks x chunks) blocks is
# computed, about (chunks + 1) / (2 chunks) of the forward products' Khat reads of the whole
# matrix. On a GPU (bandwidth-bound products) at most _CHUNKS; on the CPU, whose stage 3 loses
# efficiency on thin products, chunks of at least _CPU_CHUNK_SENSORS sensors.
_CHUNKS = 8
_CPU_CHUNK_SENSORS = 8
# Relative agreement of the probe values (a prior and an operator product) between a saved
# factor and the operator and prior it is loaded with.
_PROBE_RTOL = 1e-5


# ------------------------------------------------------------------------------------------
# Leaf functions: the dense linear algebra on NumPy (SciPy) or CuPy (cupyx)
# ------------------------------------------------------------------------------------------
def _cholesky(xp, H):
    """Lower Cholesky factor of the symmetric ``H`` (overwritten on the CPU)."""
    if xp is np:
        import scipy.linalg

        return scipy.linalg.cholesky(H, lower=True, overwrite_a=True, check_finite=False)
    return xp.linalg.cholesky(H)


def _solve_triangular(xp, L, B, trans: bool):
    """``L^{-1} B`` (``L^{-T} B`` with ``trans``) for the lower-triangular ``L``."""
    if xp is np:
        import scipy.linalg

        return scipy.linalg.solve_triangular(L, B, lower=True, trans=1 if trans else 0,
                                             check_finite=False)
    import cupyx.scipy.linalg

    return cupyx.scipy.linalg.solve_triangular(L, B, lower=True, trans=1 if trans else 0)


def _cho_inverse(xp, L):
    """``H^{-1} = L^{-T} L^{-1}`` from the lower Cholesky factor ``L`` of ``H`` (a triangular
    solve with the identity and one matrix product: faster here than LAPACK's ``potri``)."""
    Linv = _solve_triangular(xp, L, xp.eye(L.shape[0]), False)
    return Linv.T @ Linv


def _clock(xp) -> float:
    """``perf_counter`` after the device's queued work (GPU) is done."""
    import time

    if xp is not np:
        xp.cuda.get_current_stream().synchronize()
    return time.perf_counter()


def _free_memory(xp) -> int | None:
    if xp is np:
        return _memory.available_memory()
    return int(xp.cuda.runtime.memGetInfo()[0])


def _progress(total: int, desc: str, show):
    """A tqdm bar on stderr; ``show=None`` shows it only when stderr is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="col", leave=False, file=sys.stderr,
                disable=None if show is None else not show)


def _probe_vectors(nm, nd, nt, xp):
    """Two fixed pseudo-random vectors ``(1, Nm, Nt)`` and ``(1, Nd, Nt)``."""
    rng = np.random.default_rng(20251207)
    return (xp.asarray(rng.standard_normal((1, nm, nt))),
            xp.asarray(rng.standard_normal((1, nd, nt))))


class DataSpacePosterior:
    """Gaussian posterior of a linear inverse problem, through the data-space Hessian.

    Parameters
    ----------
    F : BlockToeplitz or DistributedBlockToeplitz
        The parameter-to-observable map, ``(Nd*Nt, Nm*Nt)``.
    prior : object with ``matmat``, or LinearOperator
        The prior covariance ``Γpr`` (:func:`~fftmatvec.inverse.priors.as_prior`):
        :class:`~fftmatvec.inverse.DiagonalPrior`,
        :class:`~fftmatvec.inverse.SeparablePrior`, any object whose ``matmat(X)`` applies
        an SPD covariance to ``(k, Nm, Nt)`` batches, or a SciPy/cupyx ``LinearOperator`` of
        shape ``(Nm*Nt, Nm*Nt)``.
    noise : float or (Nd, Nt) array
        Noise variances (``Γnoise`` is diagonal).
    prior_mean : (Nm, Nt) array, optional
        ``m_pr``; zero by default.
    precision : str, optional
        Precision of the products that form ``H_d`` (five letters, or ``"auto"`` with
        ``rtol``); by default ``F``'s own. The online products use ``F`` as given.
    rtol : float, optional
        With ``precision="auto"`` (or alone): the fastest configuration whose product error is
        within ``rtol`` (the tuning tables, else the a-priori model).
    batch : int, optional
        Columns of ``H_d`` per batched product; by default sized to a quarter of the free
        memory (host or device), at most 2048.
    chunks : int, optional
        Sensor chunks of the block columns (one process): the lower triangle of
        ``chunks x chunks`` blocks is formed, about ``(chunks + 1) / (2 chunks)`` of the forward
        products' ``Khat`` reads of the whole matrix; 1 forms every column with the whole
        operator. More chunks read less but make thinner products. Default: 8 on a GPU; on
        the CPU chunks of at least 8 sensors (at most 8 chunks).

    Raises
    ------
    FFTMatvecTypeError
        ``F`` or ``prior`` of the wrong type; arrays on the wrong device.
    FFTMatvecValueError
        Bad shapes or values (noise ``<= 0``, prior of the wrong size, ``batch < 1``).

    Notes
    -----
    Where things live: ``H_d``'s Cholesky factor ``L`` and ``H_d^{-1}`` (each ``(Nd Nt)^2``
    float64, 0.8 GB for ``Nd Nt = 10^4``) on the operator's device; with a ``DistributedBlockToeplitz`` a copy on
    every rank (its device), so ``16 (Nd Nt)^2`` bytes must fit on one rank, and about twice
    that while ``H_d`` is formed and inverted (``Nd Nt`` up to about 30,000 on an 80 GB GPU),
    and every rank answers
    :meth:`mean` from global vectors. With one process the block columns are sensor chunks and
    only the lower triangle of blocks is formed: the adjoint of chunk ``J``'s unit vectors
    reads only chunk ``J``'s ``Khat`` and the forward only chunks ``I >= J`` (per-chunk
    operators that together hold one more ``Khat`` while :meth:`factor` runs). On a grid
    every block column is a product of the whole operator, whose batches the operator splits
    across its replica groups (``ProcessGrid(comm, replicas=R)``).
    """

    def __init__(self, F: BlockToeplitz | DistributedBlockToeplitz, prior: Any,
                 noise: float | Array, *,
                 prior_mean: Array | None = None, precision: str | PrecisionConfig | None = None,
                 rtol: float | None = None, batch: int | None = None,
                 chunks: int | None = None) -> None:
        self._maps = Maps(F)
        self._maps.agree("DataSpacePosterior", lambda: self._setup(
            F, prior, noise, prior_mean, precision, rtol, batch, chunks))
        self.chol = None  # the lower Cholesky factor of H_d, after factor() or load()
        self._inverse = None  # H_d^{-1} from it, for the online mean
        self.factor_info: dict = {}

    def _setup(self, F, prior, noise, prior_mean, precision, rtol, batch, chunks):
        """Check and keep the arguments (on a grid: on every rank, failing on all together)."""
        xp, nd, nm, nt = self._maps.xp, F.nd, F.nm, F.nt
        self.xp, self.nd, self.nm, self.nt = xp, nd, nm, nt
        self.F = F
        self.prior = as_prior(prior, nm, nt, xp)
        self.noise = noise_variances(noise, nd, nt, xp)
        self.prior_mean = (xp.zeros((nm, nt)) if prior_mean is None
                           else param_vector(prior_mean, "prior_mean", nm, nt, xp))
        if batch is not None and (isinstance(batch, bool)
                                  or not isinstance(batch, (int, np.integer)) or batch < 1):
            raise FFTMatvecValueError(f"batch must be a positive integer, got {batch!r}")
        self.batch = None if batch is None else int(batch)
        if chunks is None:
            chunks = _CHUNKS if xp is not np else max(1, min(_CHUNKS, nd // _CPU_CHUNK_SENSORS))
        if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
            raise FFTMatvecValueError(f"chunks must be a positive integer, got {chunks!r}")
        self.chunks = int(chunks)
        if precision is None and rtol is None:
            self.precision = self._maps.precision
        else:
            p = "auto" if precision is None else precision
            letters, _, _, _ = _resolve_precision(xp, p, rtol, nm, nd, nt)
            self.precision = PrecisionConfig(letters).letters
            if self._maps.distributed:  # a grid runs in its own precision only: refuse here
                self._maps.with_precision(self.precision)

    @property
    def n_data(self) -> int:
        """``Nd * Nt``: the order of ``H_d``."""
        return self.nd * self.nt

    @property
    def batch_size(self) -> int:
        """Columns of ``H_d`` per batched product: ``batch`` if given, else sized to a quarter of
        the free memory (host or device) less ``H_d``'s, at most 2048."""
        return self._batch_size()

    def _batch_size(self) -> int:
        if self.batch is not None:
            return min(self.batch, self.n_data)
        per_col = 8 * self.nt * (6 * self.nm + 6 * self.nd)  # a column's vectors and spectra
        free = _free_memory(self.xp)
        if free is None:
            return min(256, self.n_data)
        room = max(free // 4 - 2 * 8 * self.n_data**2, per_col)
        return int(max(1, min(_MAX_BATCH, self.n_data, room // per_col)))

    # ---- offline ---------------------------------------------------------------------------
    def factor(self, *, progress: bool | None = None) -> DataSpacePosterior:
        """Form ``H_d = F Γpr F^T + Γnoise`` and its Cholesky factor.

        Parameters
        ----------
        progress : bool, optional
            Show a progress bar (tqdm, on stderr); by default only when stderr is a terminal.

        Returns
        -------
        self

        Raises
        ------
        FFTMatvecMemoryError
            ``H_d`` does not fit in the host memory (CPU operator).
        FFTMatvecValueError
            ``H_d`` is not positive definite (a prior that is not SPD, or products in a
            precision too coarse for the noise level).

        Notes
        -----
        Cost: ``Nd Nt`` columns in batches of ``batch``; each batch is one adjoint product of a
        sensor chunk, one prior application and the forward products of the chunks at and
        below it (in ``ddddd`` sharing one FFT of their input: ``Maps.forward_chunks``). With
        ``C`` chunks and a batch no wider than a chunk's ``Nd Nt / C`` columns, the ``Khat``
        bytes read are ``(1/C + (C + 1) / (2 C)) Nd Nt / batch`` times one ``Khat``, against
        ``2 Nd Nt / batch`` for whole columns (0.69 of it for ``C = 8``); a batch is never wider
        than its chunk, so a batch wider than ``Nd Nt / C`` reads more. Then
        ``(Nd Nt)^3 / 3`` flops of Cholesky and about ``2 (Nd Nt)^3 / 3`` of forming ``H_d^{-1}``
        for :meth:`mean`.
        """
        xp, maps, n, nt = self.xp, self._maps, self.n_data, self.nt
        if xp is np:
            maps.agree("factor", lambda: _memory.require_memory(  # H_d, its triangle, a transpose
                3 * 8 * n * n, f"the data-space Hessian (Nd*Nt = {n})"))
        k = self._batch_size()
        chunks = maps.sensor_chunks(self.chunks)
        subs = maps.chunk_operators(chunks, self.precision)
        full = None if subs is not None else maps.with_precision(self.precision)
        t0 = _clock(xp)
        H = xp.empty((n, n))
        H.fill(np.nan)  # poisoned: an entry of the lower triangle never written fails below
        bytes_read = 0
        with _progress(n, "H_d", progress) as bar:
            for J in range(len(chunks)):
                a, b = chunks[J]
                for c0 in range(a * nt, b * nt, k):
                    c1 = min(c0 + k, b * nt)
                    cols = xp.arange(c0, c1)
                    E = xp.zeros((c1 - c0, b - a, nt))
                    E[xp.arange(c1 - c0), (cols // nt) - a, cols % nt] = 1.0
                    if subs is not None:
                        X = subs[J].rmatmat(E)
                        bytes_read += subs[J].khat_nbytes
                    else:
                        Efull = xp.zeros((c1 - c0, self.nd, nt))
                        Efull[:, a:b] = E
                        X = full.adjoint(Efull)
                    X = self.prior.matmat(X)
                    if subs is not None:
                        for I, Y in enumerate(maps.forward_chunks(subs[J:], X), start=J):
                            r0, r1 = chunks[I]
                            bytes_read += subs[I].khat_nbytes
                            H[r0 * nt:r1 * nt, c0:c1] = Y.reshape(c1 - c0, -1).T
                    else:
                        Y = full.forward(X)
                        H[a * nt:, c0:c1] = Y[:, a:].reshape(c1 - c0, -1).T
                    bar.update(c1 - c0)
        del subs
        if full is not None:
            bytes_read = full.bytes_read
        H = xp.tril(H)
        if not bool(xp.isfinite(H).all()):
            raise FFTMatvecValueError("the data-space Hessian has NaN or Inf entries (the prior "
                                      "returned them, or a block was not computed)")
        H += xp.tril(H, -1).T
        H[xp.arange(n), xp.arange(n)] += self.noise.reshape(-1)
        t1 = _clock(xp)
        try:
            L = _cholesky(xp, H)
        except np.linalg.LinAlgError:
            L = None
        if L is None or not bool(xp.isfinite(xp.diagonal(L)).all()):
            raise FFTMatvecValueError(
                "the data-space Hessian F Γpr F^T + Γnoise is not positive definite: the prior "
                f"is not SPD, or the products' precision {self.precision!r} is too coarse for the "
                "noise variances")
        t2 = _clock(xp)
        self.chol = L
        self._inverse = _cho_inverse(xp, L)
        t3 = _clock(xp)
        self.factor_info = {"batch": k, "chunks": len(chunks), "precision": self.precision,
                            "khat_bytes_read": int(bytes_read), "form_seconds": t1 - t0,
                            "cholesky_seconds": t2 - t1, "inverse_seconds": t3 - t2}
        return self

    def _need_factor(self):
        if self.chol is None:
            raise FFTMatvecValueError(
                "the posterior is not factored: call factor() or load() first")

    def _hinv(self, R):
        """``H_d^{-1}`` applied to the columns of ``R`` ``(n, k)``."""
        xp = self.xp
        return _solve_triangular(xp, self.chol, _solve_triangular(xp, self.chol, R, False), True)

    # ---- online ----------------------------------------------------------------------------
    def mean(self, d_obs: Array) -> Array:
        """The posterior mean (MAP point) ``m_pr + Γpr F^T H_d^{-1} (d_obs - F m_pr)``.

        Parameters
        ----------
        d_obs : (Nd, Nt), (Nd*Nt,) or (k, Nd, Nt) array
            Observations (global vectors, on every rank of a grid), on ``F``'s device.

        Returns
        -------
        (Nm, Nt) or (k, Nm, Nt) float64 array

        Notes
        -----
        One product with ``H_d^{-1}`` (formed from the Cholesky factor by :meth:`factor` or
        :meth:`load`: a matrix-vector product reads its ``8 (Nd Nt)^2`` bytes once at memory
        bandwidth, where a triangular solve pair reads the factor twice at a fraction of it;
        the forward error is that of the solve, about ``cond(H_d)`` times the unit roundoff),
        one adjoint product and one prior application; one more forward product with a
        nonzero prior mean.
        """
        self._need_factor()
        xp, maps = self.xp, self._maps
        D, batched = maps.agree("mean", lambda: data_batch(d_obs, "d_obs", self.nd, self.nt, xp))
        k = D.shape[0]
        if bool(xp.any(self.prior_mean != 0)):
            D = D - maps.forward(xp.broadcast_to(self.prior_mean, (k, self.nm, self.nt)).copy())
        W = D.reshape(k, -1) @ self._inverse  # rows (H_d^{-1} d)^T: H_d^{-1} is symmetric
        M = self.prior.matmat(maps.adjoint(W.reshape(k, self.nd, self.nt)))
        M = M + self.prior_mean
        return M if batched else M[0]

    def covariance_matmat(self, X: Array) -> Array:
        """``Γpost X = Γpr X - Γpr F^T H_d^{-1} F Γpr X``.

        Parameters
        ----------
        X : (Nm, Nt), (Nm*Nt,) or (k, Nm, Nt) array

        Returns
        -------
        float64 array of ``X``'s shape (``(Nm, Nt)`` for a flat vector)
        """
        self._need_factor()
        xp, maps = self.xp, self._maps
        def check():
            if getattr(X, "ndim", 0) == 3:
                return xp.stack([param_vector(x, "X", self.nm, self.nt, xp) for x in X]), True
            return param_vector(X, "X", self.nm, self.nt, xp)[None], False

        P, batched = maps.agree("covariance_matmat", check)
        k = P.shape[0]
        G = self.prior.matmat(P)
        W = self._hinv(maps.forward(G).reshape(k, -1).T)
        Z = xp.ascontiguousarray(W.T).reshape(k, self.nd, self.nt)
        out = G - self.prior.matmat(maps.adjoint(Z))
        return out if batched else out[0]

    def variance(self, times: Sequence[int] | None = None, *,
                 progress: bool | None = None) -> Array:
        """The pointwise posterior variance ``diag(Γpost)``.

        Parameters
        ----------
        times : sequence of int, optional
            Time steps to compute; all by default.
        progress : bool, optional
            Progress bar (tqdm); by default only on a terminal.

        Returns
        -------
        (Nm, Nt) float64 array, or (Nm, len(times)) with ``times``

        Notes
        -----
        ``diag(Γpr) - diag(Γpr F^T H_d^{-1} F Γpr)``, the cheaper of two ways:

        * parameter unit vectors: for each wanted entry ``e``, ``|L^{-1} F Γpr e|^2``;
          ``Nm T`` columns (``T`` times), each a forward product, a prior application and
          ``(Nd Nt)^2`` flops of triangular solve: ``Nm T (Nd Nt)^2`` flops in all;
        * data unit vectors (all times): ``B = Γpr F^T L^{-T}``, whose rows' squared norms
          are the reduction; ``Nd Nt`` columns, each an adjoint product and a prior
          application, plus ``(Nd Nt)^3`` flops of triangular solves and ``diag(Γpr)``.

        Both cost about as much as :meth:`factor` or more; ask for the times you need.
        """
        self._need_factor()
        xp, nm, nt, n = self.xp, self.nm, self.nt, self.n_data

        def check():
            if times is None:
                return list(range(nt))
            sel = [int(t) for t in times]
            if not sel or any(t < 0 or t >= nt for t in sel):
                raise FFTMatvecValueError(f"times must be a non-empty list of steps in [0, {nt}), "
                                          f"got {list(times)!r}")
            return sel

        sel = self._maps.agree("variance", check)
        k = self._batch_size()
        if times is None and nm * nt > n:
            return self._variance_by_data(k, progress)
        cols = [(j, t) for t in sel for j in range(nm)]
        out = xp.empty((nm, len(sel)))
        out.fill(np.nan)
        where = {t: i for i, t in enumerate(sel)}
        with _progress(len(cols), "variance", progress) as bar:
            for c0 in range(0, len(cols), k):
                blk = cols[c0:c0 + k]
                jj = xp.asarray([j for j, _ in blk])
                tt = xp.asarray([t for _, t in blk])
                E = xp.zeros((len(blk), nm, nt))
                E[xp.arange(len(blk)), jj, tt] = 1.0
                G = self.prior.matmat(E)
                prior_var = G[xp.arange(len(blk)), jj, tt]
                V = _solve_triangular(xp, self.chol,
                                      self._maps.forward(G).reshape(len(blk), -1).T, False)
                cc = xp.asarray([where[t] for _, t in blk])
                out[jj, cc] = prior_var - (V * V).sum(axis=0)
                bar.update(len(blk))
        return out

    def _variance_by_data(self, k, progress):
        xp, n = self.xp, self.n_data
        acc = xp.zeros((self.nm, self.nt))
        with _progress(n, "variance", progress) as bar:
            for c0 in range(0, n, k):
                c1 = min(c0 + k, n)
                E = xp.zeros((n, c1 - c0))
                E[xp.arange(c0, c1), xp.arange(c1 - c0)] = 1.0
                Z = _solve_triangular(xp, self.chol, E, True)  # columns of L^{-T}
                B = self.prior.matmat(self._maps.adjoint(
                    xp.ascontiguousarray(Z.T).reshape(c1 - c0, self.nd, self.nt)))
                acc += (B * B).sum(axis=0)
                bar.update(c1 - c0)
        return self.prior.diagonal() - acc

    def sample(self, n: int, rng: np.random.Generator, d_obs: Array | None = None) -> Array:
        """Posterior samples, by perturbing the prior and the data (Matheron's rule).

        ``s = x - Γpr F^T H_d^{-1} (F x + e)`` with ``x ~ N(0, Γpr)``, ``e ~ N(0, Γnoise)``
        is distributed as ``N(0, Γpost)``; the mean given ``d_obs`` is added to it.

        Parameters
        ----------
        n : int
            Number of samples, ``>= 1``.
        rng : numpy.random.Generator
            Source of the white noise (drawn on the host, then moved to the device).
        d_obs : (Nd, Nt) array, optional
            Observations: samples of ``m | d_obs``. Without them, samples of the deviation
            from the posterior mean, ``N(0, Γpost)``.

        Returns
        -------
        (n, Nm, Nt) float64 array
        """
        self._need_factor()

        def check():
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
                raise FFTMatvecValueError(f"n must be a positive integer, got {n!r}")
            if not isinstance(rng, np.random.Generator):
                raise FFTMatvecTypeError(f"rng must be a numpy.random.Generator, got "
                                         f"{type(rng).__name__}")

        self._maps.agree("sample", check)
        xp, maps, nm, nd, nt = self.xp, self._maps, self.nm, self.nd, self.nt
        X = self.prior.sqrt_matmat(xp.asarray(rng.standard_normal((n, nm, nt))))
        e = xp.sqrt(self.noise) * xp.asarray(rng.standard_normal((n, nd, nt)))
        W = self._hinv((maps.forward(X) + e).reshape(n, -1).T)
        S = X - self.prior.matmat(maps.adjoint(xp.ascontiguousarray(W.T).reshape(n, nd, nt)))
        if d_obs is not None:
            S = S + self.mean(d_obs)
        return S

    # ---- files -----------------------------------------------------------------------------
    def _probes(self):
        """``(<v, Γpr v>, <u, F v>)`` for two fixed vectors: they tie a saved factor to the
        prior and the operator it was formed with."""
        xp = self.xp
        v, u = _probe_vectors(self.nm, self.nd, self.nt, xp)
        gv = self.prior.matmat(v)
        fv = self._maps.forward(v)
        return float(xp.vdot(v.ravel(), gv.ravel())), float(xp.vdot(u.ravel(), fv.ravel()))

    def save(self, path: PathLike, *, overwrite: bool = False) -> None:
        """Write the factor to an HDF5 file, atomically (a temporary, then a rename).

        Parameters
        ----------
        path : str or os.PathLike
        overwrite : bool
            Replace an existing file.

        Raises
        ------
        FFTMatvecFileError
            The file exists (without ``overwrite``), is a folder, or cannot be written.

        Notes
        -----
        On a grid only rank 0 writes; every rank returns when the file is complete.
        """
        self._need_factor()
        path = os.fspath(path)
        probes = self._probes()
        comm = self._maps.comm
        exc = None
        if comm is None or comm.rank == 0:
            try:
                self._write(path, overwrite, probes)
            except Exception as e:  # on a grid: raised on every rank below
                exc = e
        if comm is not None:
            from ..distributed.comm import sync

            sync(comm, "DataSpacePosterior.save", exc, f"(rank {comm.rank})")
        elif exc is not None:
            raise exc

    def _write(self, path, overwrite, probes):
        from .. import _writes  # h5py, imported when a file is written

        if os.path.isdir(path):
            raise FFTMatvecFileError(path, f"cannot write {path!r}: it is a directory")
        if os.path.lexists(path) and not overwrite:
            raise FFTMatvecFileError(path, f"{path!r} exists (pass overwrite=True to replace it)")
        xp = self.xp
        host = (lambda a: a) if xp is np else xp.asnumpy
        L, noise, m_pr = host(self.chol), host(self.noise), host(self.prior_mean)
        nbytes = L.nbytes + noise.nbytes + m_pr.nbytes
        with _writes.atomic_file(path, nbytes) as tmp:
            with _writes.h5_create(tmp, nbytes) as f:
                f.attrs["format"] = FORMAT
                f.attrs["version"] = np.int32(VERSION)
                f.attrs["shape"] = np.array([self.nd, self.nm, self.nt], dtype=np.int64)
                f.attrs["precision"] = self.precision
                f.attrs["probe_prior"], f.attrs["probe_operator"] = probes
                f.create_dataset("cholesky", data=L)
                f.create_dataset("noise", data=noise)
                f.create_dataset("prior_mean", data=m_pr)

    @classmethod
    def load(cls, path: PathLike, F: BlockToeplitz | DistributedBlockToeplitz, prior: Any,
             noise: float | Array) -> DataSpacePosterior:
        """A factored posterior from a file written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
        F, prior, noise
            As for the constructor: the operator, prior and noise the factor was formed with.

        Raises
        ------
        FFTMatvecFileError
            Missing or malformed file, or one that disagrees with ``F``'s shape, with
            ``noise``, or with ``prior`` and ``F`` themselves (probe products).
        """
        import h5py

        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FFTMatvecFileError(path, f"posterior file {path!r} does not exist")
        try:
            f = h5py.File(path, "r")
        except OSError:
            raise FFTMatvecFileError(path, f"{path!r} is not an HDF5 file") from None
        with f:
            if f.attrs.get("format") != FORMAT or "cholesky" not in f:
                raise FFTMatvecFileError(path, f"{path!r} is not a data-space posterior file "
                                               f"(format {f.attrs.get('format')!r})")
            shape = tuple(int(s) for s in f.attrs["shape"])
            if shape != (F.nd, F.nm, F.nt):
                raise FFTMatvecFileError(
                    path, f"{path!r} holds a posterior of (Nd, Nm, Nt) = {shape}, but F has "
                          f"{(F.nd, F.nm, F.nt)}")
            n = F.nd * F.nt
            if f["cholesky"].shape != (n, n):
                raise FFTMatvecFileError(path, f"{path!r}: cholesky has shape "
                                               f"{f['cholesky'].shape}, expected {(n, n)}")
            post = cls(F, prior, noise, prior_mean=F.xp.asarray(f["prior_mean"][...]),
                       precision=str(f.attrs["precision"]))
            saved_noise = f["noise"][...]
            host_noise = post.noise if post.xp is np else post.xp.asnumpy(post.noise)
            if not np.allclose(saved_noise, host_noise, rtol=1e-12, atol=0):
                raise FFTMatvecFileError(path, f"{path!r} was formed with other noise variances "
                                               "than the noise given")
            probes = post._probes()
            for name, saved, now in zip(("prior", "operator"),
                                        (f.attrs["probe_prior"], f.attrs["probe_operator"]),
                                        probes):
                if not math.isclose(float(saved), now, rel_tol=_PROBE_RTOL):
                    raise FFTMatvecFileError(
                        path, f"{path!r} was formed with another {name}: its probe product was "
                              f"{float(saved):.12g}, the {name} given gives {now:.12g}")
            post.chol = F.xp.asarray(f["cholesky"][...])
            post._inverse = _cho_inverse(post.xp, post.chol)
        post.factor_info = {"loaded_from": path, "precision": post.precision}
        return post
