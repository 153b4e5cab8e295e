"""A 2-D advection-diffusion equation with a time-dependent source, observed at point sensors.

The model is the linear time-invariant system

.. math::

    \\partial_t u - \\kappa \\Delta u + v \\cdot \\nabla u + \\lambda u = B m(t)
    \\quad \\text{on } (0, 1)^2, \\qquad u = 0 \\text{ on the boundary}, \\qquad u(0) = 0,

with a divergence-free vortex ``v = U (sin(pi x) cos(pi y), -cos(pi x) sin(pi y))``. Space is
discretised by finite differences on the ``n x n`` interior nodes (5-point diffusion, first-order
upwind advection: an M-matrix, so the scheme keeps a positive source positive), time by backward
Euler with step ``dt``. The parameter ``m`` is a source field, piecewise constant on a coarse
``ns x ns`` grid of source cells (``B`` spreads cell ``j`` over the fine nodes inside it), one
value per cell and time step. ``Nd`` point sensors read the state at grid nodes (``C``).

Time stepping (``A = I + dt L``, ``L`` the spatial operator)::

    u_{-1} = 0,   A u_t = u_{t-1} + dt B m_t,   d_t = C u_t,   t = 0, ..., Nt - 1

so the source at step ``s`` reaches the observations of every step ``t >= s``, including ``s``
itself (implicit scheme), and the parameter-to-observable map is block lower-triangular Toeplitz
with kernel

    K[:, :, l] = dt C A^{-(l+1)} B,   l = 0, ..., Nt - 1

exactly the convention of :class:`fftmatvec.BlockToeplitz`. The discrete adjoint marches
backwards with ``A^T``::

    w_{Nt} = 0,   A^T w_t = w_{t+1} + C^T d_t,   (F^T d)_t = dt B^T w_t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .._errors import FFTMatvecValueError

__all__ = [
    "AdvectionDiffusion",
    "advection_diffusion_matrix",
    "vortex_velocity",
    "source_prolongation",
    "sensor_nodes",
    "sensor_matrix",
]


def vortex_velocity(x, y, speed: float = 1.0):
    """The divergence-free single vortex of stream function ``(U/pi) sin(pi x) sin(pi y)``.

    Parameters
    ----------
    x, y : arrays of the same shape
        Coordinates in ``[0, 1]``.
    speed : float
        Peak speed ``U``.

    Returns
    -------
    vx, vy : arrays of the shape of ``x``
        ``vx = U sin(pi x) cos(pi y)``, ``vy = -U cos(pi x) sin(pi y)``; the normal component
        vanishes on the boundary of the unit square.
    """
    px, py = np.pi * np.asarray(x), np.pi * np.asarray(y)
    return speed * np.sin(px) * np.cos(py), -speed * np.cos(px) * np.sin(py)


def advection_diffusion_matrix(
    n: int, kappa: float, speed: float, decay: float = 0.0
) -> sp.csr_matrix:
    """The spatial operator ``L = -kappa Laplacian + v . grad + decay`` on ``n x n`` interior nodes.

    Parameters
    ----------
    n : int
        Interior nodes per side; spacing ``h = 1/(n+1)``, node ``(iy, ix)`` at
        ``((ix+1) h, (iy+1) h)``, flat index ``iy*n + ix`` (row-major, so ``u.reshape(n, n)`` is an
        image with ``y`` down the rows).
    kappa : float
        Diffusivity, ``> 0``.
    speed : float
        Peak speed of the vortex (:func:`vortex_velocity`).
    decay : float, default 0
        First-order decay rate, ``>= 0``.

    Returns
    -------
    (n*n, n*n) scipy.sparse.csr_matrix
        5-point diffusion, first-order upwind advection, homogeneous Dirichlet boundary. Its
        diagonal is positive, its off-diagonal entries are ``<= 0`` and its row sums ``>= 0``: an
        M-matrix, so ``I + dt L`` is invertible for every ``dt > 0``.

    Raises
    ------
    FFTMatvecValueError
        ``n < 2``, ``kappa <= 0`` or ``decay < 0``.
    """
    if n < 2:
        raise FFTMatvecValueError(f"n must be >= 2, got {n}")
    if not kappa > 0:
        raise FFTMatvecValueError(f"kappa must be > 0, got {kappa}")
    if not decay >= 0:
        raise FFTMatvecValueError(f"decay must be >= 0, got {decay}")
    h = 1.0 / (n + 1)
    coord = h * np.arange(1, n + 1)
    X, Y = np.meshgrid(coord, coord)  # (iy, ix)
    vx, vy = vortex_velocity(X, Y, speed)
    iy, ix = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    idx = iy * n + ix

    diag = np.full((n, n), 4.0 * kappa / h**2 + decay)
    rows, cols, vals = [], [], []
    # Neighbour (dy, dx): diffusion -kappa/h^2; upwind advection -|v|/h from the upstream side.
    for dy, dx, v in ((0, -1, vx), (0, 1, -vx), (-1, 0, vy), (1, 0, -vy)):
        # v > 0 here means the flow comes from this neighbour (upstream): it enters the stencil.
        upstream = np.maximum(v, 0.0) / h
        diag += upstream
        coef = -kappa / h**2 - upstream
        jy, jx = iy + dy, ix + dx
        inside = (jy >= 0) & (jy < n) & (jx >= 0) & (jx < n)  # outside: Dirichlet zero, dropped
        rows.append(idx[inside])
        cols.append((jy * n + jx)[inside])
        vals.append(coef[inside])
    rows.append(idx.ravel())
    cols.append(idx.ravel())
    vals.append(diag.ravel())
    N = n * n
    L = sp.coo_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(N, N)
    )
    return L.tocsr()


def source_prolongation(n: int, ns: int) -> sp.csr_matrix:
    """``B``: spread a source that is piecewise constant on ``ns x ns`` cells over the fine nodes.

    Parameters
    ----------
    n : int
        Fine interior nodes per side (as :func:`advection_diffusion_matrix`).
    ns : int
        Source cells per side; cell ``(cy, cx)`` covers ``[cx/ns, (cx+1)/ns) x [cy/ns, (cy+1)/ns)``
        and has flat index ``cy*ns + cx``.

    Returns
    -------
    (n*n, ns*ns) scipy.sparse.csr_matrix
        One 1 per row: the cell that holds the node.

    Raises
    ------
    FFTMatvecValueError
        ``ns < 1`` or ``ns > n`` (a cell without a node would be invisible to the model).
    """
    if not 1 <= ns <= n:
        raise FFTMatvecValueError(f"ns must be in [1, n={n}], got {ns}")
    h = 1.0 / (n + 1)
    cell = np.minimum((h * np.arange(1, n + 1) * ns).astype(np.int64), ns - 1)  # per 1-D node
    cy, cx = np.meshgrid(cell, cell, indexing="ij")
    col = (cy * ns + cx).ravel()
    N = n * n
    return sp.csr_matrix((np.ones(N), (np.arange(N), col)), shape=(N, ns * ns))


def sensor_nodes(n: int, nd: int, seed: int = 0) -> np.ndarray:
    """Flat indices of ``nd`` distinct sensor nodes, spread over the domain (a jittered lattice).

    Parameters
    ----------
    n : int
        Fine interior nodes per side.
    nd : int
        Number of sensors, ``1 <= nd <= n*n``.
    seed : int
        Seed of the jitter.

    Returns
    -------
    (nd,) int64 array
        Distinct flat node indices (``iy*n + ix``), in lattice order.
    """
    if not 1 <= nd <= n * n:
        raise FFTMatvecValueError(f"nd must be in [1, {n * n}], got {nd}")
    rng = np.random.default_rng(seed)
    k = math.ceil(math.sqrt(nd))
    rows = math.ceil(nd / k)
    centres = [((i + 0.5) / k, (j + 0.5) / rows) for j in range(rows) for i in range(k)][:nd]
    xy = np.array(centres) + rng.uniform(-0.3, 0.3, size=(nd, 2)) / np.array([k, rows])
    ij = np.clip(np.rint(xy * (n + 1)).astype(np.int64) - 1, 0, n - 1)  # (ix, iy) of the node
    chosen: list[int] = []
    taken: set[int] = set()
    for ix, iy in ij:
        node = int(iy * n + ix)
        if node in taken:  # collision on a coarse grid: take the nearest free node
            d2 = (np.arange(n * n) % n - ix) ** 2 + (np.arange(n * n) // n - iy) ** 2
            d2[list(taken)] = np.iinfo(np.int64).max
            node = int(np.argmin(d2))
        taken.add(node)
        chosen.append(node)
    return np.array(chosen, dtype=np.int64)


def sensor_matrix(n: int, nodes) -> sp.csr_matrix:
    """``C``: the ``(Nd, n*n)`` selection matrix that reads the state at ``nodes``."""
    nodes = np.asarray(nodes, dtype=np.int64)
    nd = nodes.size
    return sp.csr_matrix((np.ones(nd), (np.arange(nd), nodes)), shape=(nd, n * n))


@dataclass
class AdvectionDiffusion:
    """The discretised system, its factorised time stepper, and its parameter-to-observable map.

    Parameters
    ----------
    n : int
        Fine interior nodes per side (state dimension ``n*n``).
    ns : int
        Source cells per side (``Nm = ns*ns`` parameters per time step).
    nd : int
        Number of point sensors.
    nt : int
        Number of time steps.
    t_final : float, default 1
        Length of the time window; ``dt = t_final / nt``.
    kappa : float, default 0.005
        Diffusivity.
    speed : float, default 1
        Peak speed of the vortex.
    decay : float, default 0.1
        First-order decay rate.
    seed : int, default 0
        Seed of the sensor placement.

    Attributes
    ----------
    A : (N, N) scipy.sparse.csc_matrix
        ``I + dt L``, the backward-Euler matrix, factorised once with ``splu``.
    B : (N, Nm) scipy.sparse.csr_matrix
        Source prolongation.
    C : (Nd, N) scipy.sparse.csr_matrix
        Sensor selection.
    sensors : (Nd,) int array
        Flat node index of each sensor.
    dt : float
        Time step.
    """

    n: int
    ns: int
    nd: int
    nt: int
    t_final: float = 1.0
    kappa: float = 0.005
    speed: float = 1.0
    decay: float = 0.1
    seed: int = 0
    A: sp.csc_matrix = field(init=False, repr=False)
    B: sp.csr_matrix = field(init=False, repr=False)
    C: sp.csr_matrix = field(init=False, repr=False)
    sensors: np.ndarray = field(init=False, repr=False)
    dt: float = field(init=False)

    def __post_init__(self):
        if self.nt < 1:
            raise FFTMatvecValueError(f"nt must be >= 1, got {self.nt}")
        if not self.t_final > 0:
            raise FFTMatvecValueError(f"t_final must be > 0, got {self.t_final}")
        self.dt = self.t_final / self.nt
        L = advection_diffusion_matrix(self.n, self.kappa, self.speed, self.decay)
        self.A = (sp.identity(self.n * self.n, format="csr") + self.dt * L).tocsc()
        self.B = source_prolongation(self.n, self.ns)
        self.sensors = sensor_nodes(self.n, self.nd, self.seed)
        self.C = sensor_matrix(self.n, self.sensors)
        self._lu = spla.splu(self.A)
        self._Bt = self.B.T.tocsr()
        self._Ct = self.C.T.tocsr()

    # ---- sizes ---------------------------------------------------------------------------
    @property
    def n_state(self) -> int:
        """State dimension ``N = n*n``."""
        return self.n * self.n

    @property
    def nm(self) -> int:
        """Parameters per time step, ``ns*ns``."""
        return self.ns * self.ns

    @property
    def h(self) -> float:
        """Fine grid spacing."""
        return 1.0 / (self.n + 1)

    def sensor_xy(self) -> np.ndarray:
        """``(Nd, 2)`` coordinates ``(x, y)`` of the sensors."""
        iy, ix = np.divmod(self.sensors, self.n)
        return self.h * np.stack([ix + 1, iy + 1], axis=1).astype(float)

    def source_cell_centres(self) -> np.ndarray:
        """``(Nm, 2)`` coordinates ``(x, y)`` of the source-cell centres, flat index ``cy*ns+cx``."""
        c = (np.arange(self.ns) + 0.5) / self.ns
        X, Y = np.meshgrid(c, c)
        return np.stack([X.ravel(), Y.ravel()], axis=1)

    # ---- one step ------------------------------------------------------------------------
    def step(self, u, f):
        """One backward-Euler step: solve ``A u_new = u + dt f``.

        Parameters
        ----------
        u : (N,) or (N, k) array
            State(s) at the previous step.
        f : (N,) or (N, k) array
            Source(s) on the fine grid at the new step.
        """
        return self._lu.solve(np.ascontiguousarray(u + self.dt * f))

    def step_adjoint(self, w, g):
        """One adjoint step: solve ``A^T w_new = w + g``."""
        return self._lu.solve(np.ascontiguousarray(w + g), trans="T")

    # ---- the parameter-to-observable map by direct time stepping -------------------------
    def forward(self, m, progress=None) -> np.ndarray:
        """``F m`` by marching the PDE: ``Nt`` sparse triangular solve pairs.

        Parameters
        ----------
        m : (Nm, Nt) array
            Source, one value per source cell and step.
        progress : callable, optional
            Called with no argument after every step.

        Returns
        -------
        (Nd, Nt) float64 array
            Sensor readings ``d_t = C u_t``.
        """
        m = self._check(m, self.nm, "m")
        d = np.empty((self.nd, self.nt))
        u = np.zeros(self.n_state)
        for t in range(self.nt):
            u = self.step(u, self.B @ m[:, t])
            d[:, t] = self.C @ u
            if progress is not None:
                progress()
        return d

    def adjoint(self, d, progress=None) -> np.ndarray:
        """``F^T d`` by marching the adjoint PDE backwards in time.

        Parameters
        ----------
        d : (Nd, Nt) array
            Observation-space vector.
        progress : callable, optional
            Called with no argument after every step.

        Returns
        -------
        (Nm, Nt) float64 array
        """
        d = self._check(d, self.nd, "d")
        out = np.empty((self.nm, self.nt))
        w = np.zeros(self.n_state)
        for t in range(self.nt - 1, -1, -1):
            w = self.step_adjoint(w, self._Ct @ d[:, t])
            out[:, t] = self.dt * (self._Bt @ w)
            if progress is not None:
                progress()
        return out

    def kernel_method(self, method: str = "auto") -> str:
        """Resolve ``"auto"`` to ``"adjoint"`` (``Nd <= Nm``) or ``"forward"``."""
        if method == "auto":
            return "adjoint" if self.nd <= self.nm else "forward"
        if method not in ("adjoint", "forward"):
            raise FFTMatvecValueError(
                f"method must be 'auto', 'adjoint' or 'forward', got {method!r}"
            )
        return method

    def kernel(self, progress=None, method: str = "auto", workers: int = 1) -> np.ndarray:
        """The block-Toeplitz kernel ``K[i, j, l] = dt (C A^{-(l+1)} B)[i, j]``.

        Parameters
        ----------
        progress : callable, optional
            Called as ``progress(k)`` after ``k`` more single-right-hand-side solves; there are
            ``Nt * min(Nd, Nm)`` in all (``Nt * Nd`` or ``Nt * Nm`` for a forced ``method``).
        method : {"auto", "adjoint", "forward"}
            ``"adjoint"``: march ``Nd`` adjoint solves (one per sensor) together;
            ``"forward"``: march ``Nm`` forward solves (one per source cell) together;
            ``"auto"``: whichever has fewer right-hand sides.
        workers : int, default 1
            Processes sharing the right-hand sides. Each rebuilds and factorises the system
            (cheap next to the solves) and marches its columns through all ``Nt`` steps;
            SuperLU's solves are serial, so this is the way to use a node's cores. Worker
            processes are started with ``spawn`` (safe after a GPU context exists).

        Returns
        -------
        (Nd, Nm, Nt) float64 array
        """
        method = self.kernel_method(method)
        ncols = self.nd if method == "adjoint" else self.nm
        K = np.empty((self.nd, self.nm, self.nt))
        workers = max(1, min(int(workers), ncols))
        if workers == 1:
            _kernel_columns(self, method, np.arange(ncols), K, progress)
            return K

        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # A few chunks per worker keep the progress bar moving and the load balanced.
        chunks = np.array_split(np.arange(ncols), min(ncols, 4 * workers))
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                 initargs=(self.parameters(),)) as pool:
            futures = [pool.submit(_worker_columns, method, cols) for cols in chunks]
            for fut in as_completed(futures):
                cols, block = fut.result()
                if method == "adjoint":
                    K[cols] = block
                else:
                    K[:, cols] = block
                if progress is not None:
                    progress(len(cols) * self.nt)
        return K

    def parameters(self) -> dict:
        """The constructor arguments, enough to rebuild this system elsewhere."""
        return dict(n=self.n, ns=self.ns, nd=self.nd, nt=self.nt, t_final=self.t_final,
                    kappa=self.kappa, speed=self.speed, decay=self.decay, seed=self.seed)

    def _check(self, a, rows: int, name: str) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        if a.shape != (rows, self.nt):
            raise FFTMatvecValueError(f"{name} must have shape ({rows}, {self.nt}), got {a.shape}")
        return a


def _kernel_columns(problem: AdvectionDiffusion, method: str, cols, out, progress=None):
    """March the kernel columns ``cols`` (sensors or source cells) through all lags.

    ``out`` receives their block of the kernel: ``(len(cols), Nm, Nt)`` for ``"adjoint"``
    (``K[cols]``), ``(Nd, len(cols), Nt)`` for ``"forward"`` (``K[:, cols]``).
    """
    cols = np.asarray(cols)
    lu, dt = problem._lu, problem.dt
    if method == "adjoint":
        W = problem._Ct[:, cols].toarray()  # (N, c): w_l = A^{-T (l+1)} C^T e_i
        for lag in range(problem.nt):
            W = lu.solve(W, trans="T")
            out[:, :, lag] = dt * (problem._Bt @ W).T
            if progress is not None:
                progress(len(cols))
    else:
        V = dt * problem.B[:, cols].toarray()  # (N, c): v_l = dt A^{-(l+1)} B e_j
        for lag in range(problem.nt):
            V = lu.solve(V)
            out[:, :, lag] = problem.C @ V
            if progress is not None:
                progress(len(cols))


_WORKER_PROBLEM: AdvectionDiffusion | None = None


def _init_worker(params: dict) -> None:
    global _WORKER_PROBLEM
    _WORKER_PROBLEM = AdvectionDiffusion(**params)


def _worker_columns(method: str, cols):
    p = _WORKER_PROBLEM
    shape = (len(cols), p.nm, p.nt) if method == "adjoint" else (p.nd, len(cols), p.nt)
    block = np.empty(shape)
    _kernel_columns(p, method, cols, block)
    return cols, block
