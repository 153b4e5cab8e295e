"""The block Toeplitz operator distributed over a ``pr x pc`` process grid.

Rank ``(r, c)`` holds the kernel block ``K[rows(r), cols(c), :]`` as a local
:class:`~fftmatvec.BlockToeplitz`, and a slice of each vector (:mod:`.layout`)::

    forward   m slices --all-gather in column c--> m[cols(c)] --local F--> partial d[rows(r)]
              --reduce-scatter in row r--> d slices
    adjoint   d slices --all-gather in row r--> d[rows(r)] --local F^T--> partial m[cols(c)]
              --reduce-scatter in column c--> m slices
    normal    m slices --gather in column--> local F --all-reduce in row--> W, local F^T
              --reduce-scatter in column--> m slices   (the observation vector never gathered)

Gathers travel in stage 1's precision, reductions in stage 5's (``s`` halves the bytes).

Overlap: a batch of ``k`` right-hand sides is cut into chunks run as a software pipeline
with non-blocking collectives: while chunk ``i`` is computed, the gather of chunk ``i+1`` and
the reduction of chunk ``i-1`` are in flight (on the CPU, MPI is driven between the five
stages; on a GPU the chunk's stages are queued and the transport drives MPI while the host
waits for them, :mod:`.comm`). The normal operator runs its two halves skewed by one chunk, so the all-reduce of one
chunk overlaps the forward half of the next. Every rank starts the collectives of each
communicator in the same static order. ``overlap=False`` runs the whole batch as one chunk:
gather, compute, reduce (the baseline the benchmark compares with). One vector is one chunk.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .. import _scaling, backend
from .._errors import FFTMatvecDistributedError, FFTMatvecTypeError, FFTMatvecValueError
from ..operator import (BlockToeplitz, _OperatorBase, _check_dtype, _fingerprint,
                        _resolve_precision)
from ..precision import PrecisionConfig
from .comm import make_transport, sync
from .grid import ProcessGrid
from .layout import Layout

__all__ = ["DistributedBlockToeplitz", "DistributedNormalOperator"]

_SPACES = ("param", "obs")


# ------------------------------------------------------------------------------------------
# The kernel argument: a matrix path, a global array, or a callable (rows, cols) -> block
# ------------------------------------------------------------------------------------------
def _kernel_kind(kernel) -> str:
    if isinstance(kernel, (str, os.PathLike)):
        return "path"
    if callable(kernel) and not hasattr(kernel, "shape"):
        return "callable"
    if isinstance(kernel, np.ndarray) or backend.is_cupy_array(kernel):
        return "array"
    raise FFTMatvecTypeError(
        "kernel must be a matrix path, a NumPy/CuPy (Nd, Nm, Nt) array or a callable "
        f"(rows, cols) -> block, got {type(kernel).__name__}")


def _kernel_sizes(kind: str, kernel, shape) -> tuple:
    """``(nd, nm, nt)`` and a token that must agree across ranks."""
    if kind == "path":
        from .. import io

        info = io.matrix_info(kernel)
        return (info.nd, info.nm, info.nt), ("path", info.nd, info.nm, info.nt, info.checksum)
    if kind == "callable":
        if shape is None:
            raise FFTMatvecValueError("a callable kernel needs shape=(Nd, Nm, Nt)")
        if len(shape) != 3 or not all(isinstance(n, (int, np.integer)) and n > 0 for n in shape):
            raise FFTMatvecValueError(f"shape must be three positive integers, got {shape!r}")
        return tuple(int(n) for n in shape), ("callable",) + tuple(int(n) for n in shape)
    if kernel.ndim != 3:
        raise FFTMatvecValueError(
            f"kernel must be a 3-D array (Nd, Nm, Nt), got shape {kernel.shape}")
    if shape is not None and tuple(shape) != tuple(kernel.shape):
        raise FFTMatvecValueError(f"shape={tuple(shape)} contradicts the kernel's {kernel.shape}")
    if kernel.dtype.kind != "f":
        raise FFTMatvecTypeError(f"kernel must be real floating point, got {kernel.dtype}")
    xp = backend.get_array_module(kernel)
    # every rank must have passed the same global array: compare a fingerprint of its bytes
    return tuple(int(n) for n in kernel.shape), ("array", tuple(kernel.shape), str(kernel.dtype),
                                                 _fingerprint(xp, kernel))


def _load_block(kind: str, kernel, rows, cols, nt: int, xp):
    rs, cs = slice(*rows), slice(*cols)
    want = (rows[1] - rows[0], cols[1] - cols[0], nt)
    if kind == "path":
        from .. import io

        block = io.load_matrix(kernel, rows=rs, cols=cs)
    elif kind == "callable":
        block = kernel(rs, cs)
        if not hasattr(block, "shape") or tuple(block.shape) != want:
            got = getattr(block, "shape", type(block).__name__)
            raise FFTMatvecValueError(
                f"the kernel callable returned {got} for rows={rows[0]}:{rows[1]}, "
                f"cols={cols[0]}:{cols[1]}; expected a block of shape {want}")
    else:
        block = kernel[rs, cs]
    if xp is np:
        return np.ascontiguousarray(backend.cupy.asnumpy(block) if backend.is_cupy_array(block)
                                    else block)
    return xp.ascontiguousarray(xp.asarray(block))


def _array_module(device, kernel):
    if device is None:
        return backend.cupy if backend.is_cupy_array(kernel) else np
    if device == "cpu":
        return np
    if device == "gpu":
        if not backend.gpu_available():
            raise FFTMatvecValueError("device='gpu': no GPU is available (CuPy missing or none seen)")
        return backend.cupy
    raise FFTMatvecValueError(f"device must be 'cpu', 'gpu' or None, got {device!r}")


# ------------------------------------------------------------------------------------------
# The operator
# ------------------------------------------------------------------------------------------
class _Distributed:
    """Shared parts: vector checks, distribute/collect, dot/norm, the product driver."""

    @property
    def xp(self):
        """The array module (``numpy`` or ``cupy``) of the local slices."""
        return self._xp

    def _where(self) -> str:
        return f"(grid row {self.coords[0]}, col {self.coords[1]})"

    def _check_local(self, x, space, name, batched, check_finite):
        n = self._n_own[space]
        X, flat, check = _OperatorBase._check_vector(self, x, n, name, batched, check_finite)
        if check and X.size and not math.isfinite(float(self._xp.abs(X).max())):
            raise _scaling.not_finite_error(name)
        return X, flat

    def _drive(self, what, x, space_in, name, batched, check_finite, mode):
        """Check locally, agree on the batch size, run the pipeline, sync its errors."""
        exc, X, flat, k = None, None, False, 0
        try:
            X, flat = self._check_local(x, space_in, name, batched, check_finite)
            k = int(X.shape[0])
        except Exception as e:  # raised on every rank at the sync point below
            exc = e
        base = self.grid.base_comm
        kmax, kneg = sync(base, what, exc, self._where(), values=(k, -k))
        if kmax != -kneg:
            raise FFTMatvecDistributedError(
                f"{what}: the ranks passed batches of different sizes (from {-kneg} to {kmax} "
                f"vectors); every rank must pass its slices of the same k vectors")
        Y, exc = self._run(mode, X)
        sync(base, what, exc, self._where())
        if batched:
            return Y
        return Y.reshape(-1) if flat else Y[0]

    # ---- vectors ---------------------------------------------------------------------------
    def local_range(self, space: str) -> tuple[int, int]:
        """Global ``(start, stop)`` of the rows of ``space`` this rank owns."""
        return self.layout.owned(_space(space), *self.coords)

    def local_shape(self, space: str) -> tuple[int, int]:
        """Shape ``(n_own, Nt)`` of this rank's slice of a vector of ``space``."""
        return (self._n_own[_space(space)], self.nt)

    def distribute(self, v, space: str = "param"):
        """This rank's slice of the global vector ``v``: ``(N, Nt)``, ``(N*Nt,)`` or a batch
        ``(k, N, Nt)`` (``N`` = Nm for ``"param"``, Nd for ``"obs"``), same form back."""
        space = _space(space)
        n, nt = self.layout.size(space), self.nt
        a, b = self.local_range(space)
        xp = backend.get_array_module(v, name="v")
        if v.shape == (n * nt,):
            return xp.array(v.reshape(n, nt)[a:b].reshape(-1), copy=True)
        if v.ndim in (2, 3) and v.shape[-2:] == (n, nt):
            return xp.array(v[..., a:b, :], copy=True)
        raise FFTMatvecValueError(
            f"v must have shape ({n}, {nt}), ({n * nt},) or (k, {n}, {nt}) for space "
            f"{space!r}, got {v.shape}")

    def collect(self, v_local, space: str = "param"):
        """The global vector (or batch) on every rank from every rank's slice (collective)."""
        from mpi4py.util import dtlib

        space = _space(space)
        xp = self._xp
        exc, X, flat = None, None, False
        try:
            X, flat = self._check_local(v_local, space, "v_local",
                                        getattr(v_local, "ndim", 0) == 3, False)
            k = X.shape[0]
        except Exception as e:
            exc, k = e, 0
        kmax, kneg = sync(self.grid.base_comm, "collect", exc, self._where(), values=(k, -k))
        if kmax != -kneg:
            raise FFTMatvecDistributedError("collect: the ranks passed batches of different sizes")
        n, nt = self.layout.size(space), self.nt
        send = np.ascontiguousarray(_host(X).transpose(1, 0, 2), dtype=self.dtype)
        recv = np.empty((n, k, nt), dtype=self.dtype)
        pr, pc = self.grid.shape
        counts, displs = [], []
        for q in range(self.grid.size):
            a, b = self.layout.owned(space, q % pr, q // pr)
            counts.append((b - a) * k * nt)
            displs.append(a * k * nt)
        self.grid.base_comm.Allgatherv(send, [recv, counts, displs, dtlib.from_numpy_dtype(recv.dtype)])
        out = xp.asarray(np.ascontiguousarray(recv.transpose(1, 0, 2)))
        if X.ndim == 3 and getattr(v_local, "ndim", 0) == 3:
            return out
        return out.reshape(-1) if flat else out[0]

    def dot(self, a, b) -> float:
        """Global ``<a, b>`` of two distributed vectors of the same space (collective)."""
        from mpi4py import MPI

        xp = self._xp
        local = xp.vdot(a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64))
        buf = np.array([float(local)])
        self.grid.base_comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return float(buf[0])

    def norm(self, a) -> float:
        """Global 2-norm of a distributed vector (collective)."""
        return math.sqrt(max(self.dot(a, a), 0.0))

    def as_pylops_mpi(self):
        """This operator as a ``pylops_mpi.MPILinearOperator`` on ``DistributedArray``
        vectors whose local arrays are this package's slices (see :mod:`.pylops`)."""
        from .pylops import as_pylops_mpi

        return as_pylops_mpi(self)


class DistributedBlockToeplitz(_Distributed):
    """``F`` of shape ``(Nd*Nt, Nm*Nt)`` over a process grid; every rank a block of the kernel
    and a slice of each vector.

    Parameters
    ----------
    grid : ProcessGrid
        The ranks; a grid without a shape gets the cost model's choice for this kernel.
    kernel : str/PathLike, (Nd, Nm, Nt) array, or callable
        A matrix path (each rank reads only its block with
        :func:`fftmatvec.io.load_matrix`), the global kernel (the same on every rank; checked),
        or ``kernel(rows, cols)`` returning ``K[rows, cols, :]`` for two slices.
    precision : str, default ``"ddddd"``
        Five letters as for :class:`~fftmatvec.BlockToeplitz`; also sets the wire dtypes.
        ``"auto"``: the fastest configuration within ``rtol`` for the global shape
        (docs/tuning.md), chosen once on rank 0 and used, with its tuned plan, on every rank;
        ``precision_source`` says where it came from.
    rtol : float, optional
        Only with ``precision="auto"`` (default 1e-6).
    shape : (Nd, Nm, Nt), optional
        Required with a callable kernel.
    dtype : float64 (default) or float32
        Interface dtype of the local slices.
    fft_len : int, optional
    device : {None, "cpu", "gpu"}
        None: the GPU for a CuPy kernel, else the CPU. On a GPU, rank binds to
        :meth:`ProcessGrid.device_id`.
    transport : {None, "mpi", "nccl"}
        None: NCCL for GPU operators when ``cupy.cuda.nccl`` works on every rank and every
        rank has a GPU of its own, MPI otherwise (ranks sharing a GPU: MPI, host-staged unless
        the MPI library is GPU-aware); ``transport.reason`` says why. ``"nccl"`` on ranks
        sharing a GPU raises on every rank.
    overlap : bool, default True
        Pipeline chunks of a batch (see the module's notes); False: one chunk,
        compute-then-communicate.
    chunks : int, optional
        Most chunks a batch is cut into (default 4 with overlap).

    Raises
    ------
    FFTMatvecDistributedError
        On every rank, when construction failed on any (a bad file, a callable's wrong block,
        different kernels or sizes on different ranks), naming the ranks and causes.
    FFTMatvecValueError
        The grid does not fit the sizes (more process rows than sensors or columns than
        parameters), on every rank before any block is read.
    """

    def __init__(self, grid, kernel, precision="ddddd", *, shape=None, dtype=None, fft_len=None,
                 device=None, transport=None, overlap=True, chunks=None, rtol=None):
        if not isinstance(grid, ProcessGrid):
            raise FFTMatvecTypeError(f"grid must be a ProcessGrid, got {type(grid).__name__}")
        comm = grid.comm
        where = f"(rank {grid.rank})"
        exc, token = None, None
        try:
            kind = _kernel_kind(kernel)
            self._xp = _array_module(device, kernel if kind == "array" else None)
            self.dtype = _check_dtype(dtype)
            auto = isinstance(precision, str) and precision.strip().lower() == "auto"
            if not auto:
                _resolve_precision(self._xp, precision, rtol, 1, 1, 1)  # rtol only with auto
            self.precision = None if auto else PrecisionConfig(precision)
            if chunks is not None and (isinstance(chunks, bool) or not isinstance(
                    chunks, (int, np.integer)) or chunks < 1):
                raise FFTMatvecValueError(f"chunks must be a positive integer, got {chunks!r}")
            (nd, nm, nt), token = _kernel_sizes(kind, kernel, shape)
        except Exception as e:
            exc = e
        sync(comm, "DistributedBlockToeplitz", exc, where)
        seen = comm.allgather((token, f"auto rtol={rtol!r}" if auto else self.precision.letters,
                               str(self.dtype), self._xp is np, bool(overlap), chunks, fft_len,
                               transport))
        if len(set(map(repr, seen))) > 1:
            detail = "; ".join(f"rank {q}: {s[0][:4]}, precision {s[1]}, dtype {s[2]}"
                               for q, s in enumerate(seen))
            raise FFTMatvecDistributedError(
                "DistributedBlockToeplitz: the ranks passed different kernels or settings "
                f"(each rank must pass the same ones): {detail}")
        self.nd, self.nm, self.nt = nd, nm, nt
        # precision="auto": one choice for the whole problem, made on rank 0 (the tuning
        # table's entry nearest the global shape) and sent to every rank with its plan
        self.precision_source, self._plan = "explicit", None
        if auto:
            choice, exc = None, None
            if grid.rank == 0:
                try:
                    choice = _resolve_precision(self._xp, "auto", rtol, nm, nd, nt)
                except Exception as e:
                    exc = e
            sync(comm, "DistributedBlockToeplitz", exc, where)
            letters, self.precision_source, _, self._plan = comm.bcast(choice, root=0)
            self.precision = PrecisionConfig(letters)
        # the grid shape is fixed (and checked to fit) before any block is read
        self.grid = grid.resolve(nd, nm, nt, self.precision)
        self.layout = Layout(nd, nm, *self.grid.shape)
        self.coords = self.grid.coords
        r, c = self.coords
        self.rows, self.cols = self.layout.rows(r), self.layout.cols(c)
        self._n_own = {"param": _len(self.layout.param_range(r, c)),
                       "obs": _len(self.layout.obs_range(r, c))}
        self.overlap = bool(overlap)
        # one rank communicates nothing: chunks would only cut its batch (measured on a CPU:
        # (512, 64, 256), k = 8, 113 ms in 4 chunks against 81 ms in one)
        default = 4 if self.overlap and self.grid.size > 1 else 1
        self.chunks = int(chunks) if chunks is not None else default
        self._device = None
        self._wire = (self.precision.pad_dtype, self.precision.reduce_dtype)
        self.transport = None
        exc = None
        try:
            if self._xp is not np:
                dev = backend.cupy.cuda.Device(self.grid.device_id())
                dev.use()
                self._device = dev
            block = _load_block(kind, kernel, self.rows, self.cols, nt, self._xp)
            self._op = BlockToeplitz(block, self.precision, dtype=self.dtype, fft_len=fft_len,
                                     plan=self._plan or None)
            self.fft_len, self.nf = self._op.fft_len, self._op.nf
            if transport not in (None, "mpi", "nccl"):
                raise FFTMatvecValueError(
                    f"transport must be 'mpi', 'nccl' or None, got {transport!r}")
        except Exception as e:
            exc = e
        sync(comm, "DistributedBlockToeplitz", exc, self._where())
        exc = None
        try:  # after the sync: choosing NCCL compares the ranks' devices (a collective)
            with self._on_device():
                self.transport = make_transport(self._xp, transport, self.grid.base_comm)
        except Exception as e:
            exc = e
        sync(comm, "DistributedBlockToeplitz", exc, self._where())
        # counts of the collectives: param slices in the column, obs slices in the row
        self._param_counts = [_len(t) for t in self.layout.param_ranges_in_col(c)]
        self._obs_counts = [_len(t) for t in self.layout.obs_ranges_in_row(r)]
        self._exc = None

    # ---- shapes ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """Global shape ``(Nd*Nt, Nm*Nt)``."""
        return (self.nd * self.nt, self.nm * self.nt)

    @property
    def local_operator(self) -> BlockToeplitz:
        """This rank's block ``K[rows, cols, :]`` as a single-process operator."""
        return self._op

    def __repr__(self) -> str:
        return (f"DistributedBlockToeplitz(nd={self.nd}, nm={self.nm}, nt={self.nt}, "
                f"grid={self.grid.rows}x{self.grid.cols}, precision='{self.precision}', "
                f"transport={getattr(self.transport, 'name', None)})")

    # ---- products --------------------------------------------------------------------------
    def matvec(self, m, *, check_finite=True):
        """``F m`` on distributed vectors: ``m`` is this rank's parameter slice
        ``(n_param, Nt)`` or flat; returns its observation slice in the same form."""
        return self._drive("matvec", m, "param", "m", False, check_finite, "forward")

    def rmatvec(self, d, *, check_finite=True):
        """``F^T d``: ``d`` this rank's observation slice; returns its parameter slice."""
        return self._drive("rmatvec", d, "obs", "d", False, check_finite, "adjoint")

    def matmat(self, M, *, check_finite=True):
        """``F`` on a batch: ``M`` is ``(k, n_param, Nt)``, the same ``k`` on every rank."""
        return self._drive("matmat", M, "param", "M", True, check_finite, "forward")

    def rmatmat(self, D, *, check_finite=True):
        """``F^T`` on a batch ``(k, n_obs, Nt)``."""
        return self._drive("rmatmat", D, "obs", "D", True, check_finite, "adjoint")

    def __matmul__(self, x):
        return self.matmat(x) if getattr(x, "ndim", None) == 3 else self.matvec(x)

    def normal(self, weight=None) -> "DistributedNormalOperator":
        """``F^T W F`` with ``W`` diagonal: None, a scalar, the global ``(Nd, Nt)`` weight, or
        this rank's observation slice of it."""
        return DistributedNormalOperator(self, weight)

    # ---- the pipeline ----------------------------------------------------------------------
    def _local(self, x, adjoint: bool, pending):
        """The local five stages on ``x`` ``(kc, n, Nt)``; on the CPU, MPI is driven between
        stages so that the chunks' collectives progress meanwhile."""
        op = self._op

        def poll():
            for p in pending:
                p.test()

        if self._xp is np:
            # the powers of two of BlockToeplitz._apply's host path: the input's scale in
            # stage 1's cast, the kernel's and the input's undone in stage 5's
            s = 0
            if op._scaled:
                s = _scaling.scale_exponent(float(np.abs(x).max()) if x.size else 0.0,
                                            x.dtype.itemsize)
            y = op.broadcast_and_pad(x, scale_exp=s)
            poll()
            y = op.fft(y)
            poll()
            y = op.sbgemv(y, adjoint)
            poll()
            y = op.ifft(y)
            poll()
            return op.unpad_and_reduce(y, exponent=op._kexp - s if op._scaled else 0)
        return op._apply(self._xp.ascontiguousarray(x), adjoint)

    def _compute(self, adjoint: bool, n_out: int, weight=None):
        """A pipeline compute step on the wire layout ``(n, kc, Nt)``; a failure is kept for
        the next sync point and zeros go on, so the other ranks' collectives complete."""
        xp = self._xp

        def step(data, pending):
            kc = data.shape[1]
            try:
                if weight is not None:
                    data = data.astype(self.dtype, copy=False) * weight[:, None, :]
                y = self._local(data.transpose(1, 0, 2), adjoint, pending)
                return y.transpose(1, 0, 2)
            except Exception as e:
                if self._exc is None:
                    self._exc = e
                return xp.zeros((n_out, kc, self.nt), dtype=self.dtype)

        return step

    def _steps(self, mode: str, weight=None):
        t, (w1, w5) = self.transport, self._wire
        row, col = self.grid.row_comm, self.grid.col_comm
        nd_r, nm_c = _len(self.rows), _len(self.cols)
        pc, oc = self._param_counts, self._obs_counts
        if mode == "forward":
            comms = [lambda a: t.allgatherv(col, a, pc, w1),
                     lambda a: t.reduce_scatter(row, a, oc, w5)]
            return comms, [self._compute(False, nd_r)]
        if mode == "adjoint":
            comms = [lambda a: t.allgatherv(row, a, oc, w1),
                     lambda a: t.reduce_scatter(col, a, pc, w5)]
            return comms, [self._compute(True, nm_c)]
        # normal: the all-reduce keeps the observation rows of the process row on each rank
        comms = [lambda a: t.allgatherv(col, a, pc, w1),
                 lambda a: t.allreduce(row, a, w5),
                 lambda a: t.reduce_scatter(col, a, pc, w5)]
        return comms, [self._compute(False, nd_r), self._compute(True, nm_c, weight)]

    def _run(self, mode: str, X, weight=None):
        """Run the product's pipeline on the checked local input ``X`` ``(k, n, Nt)`` (None on
        a rank whose check failed: zeros of the right size take its place). Returns
        ``(Y, exception or None)``."""
        self._exc = None
        xp = self._xp
        space_in = "obs" if mode == "adjoint" else "param"
        space_out = "param" if mode in ("adjoint", "normal") else "obs"
        n_in, n_out = self._n_own[space_in], self._n_own[space_out]
        with self._on_device():
            if X is None:
                X = xp.zeros((1, n_in, self.nt), dtype=self.dtype)
            k = X.shape[0]
            bounds = _chunk_bounds(k, self.chunks if self.overlap else 1)
            comms, computes = self._steps(mode, weight)
            n, s = len(bounds), len(computes)
            pend: dict = {}
            wire_in = lambda i: X[bounds[i][0]:bounds[i][1]].transpose(1, 0, 2)  # noqa: E731
            pend[(0, 0)] = comms[0](wire_in(0))
            # step t: start chunk t+1's gather, then compute stage j on chunk t-j
            for t in range(n + s - 1):
                if t + 1 < n:
                    pend[(0, t + 1)] = comms[0](wire_in(t + 1))
                for j in range(s):
                    i = t - j
                    if 0 <= i < n:
                        data = pend.pop((j, i)).wait()
                        data = computes[j](data, list(pend.values()))
                        pend[(j + 1, i)] = comms[j + 1](data)
            Y = xp.empty((k, n_out, self.nt), dtype=self.dtype)
            for i, (a, b) in enumerate(bounds):
                Y[a:b] = pend.pop((s, i)).wait().transpose(1, 0, 2)
        return Y, self._exc

    def _on_device(self):
        import contextlib

        return contextlib.nullcontext() if self._device is None else self._device


class DistributedNormalOperator(_Distributed):
    """``F^T W F`` of a :class:`DistributedBlockToeplitz`, parameter slices in and out."""

    def __init__(self, op: DistributedBlockToeplitz, weight=None):
        self._parent = op
        for name in ("_xp", "dtype", "nt", "grid", "layout", "coords", "_n_own", "_device"):
            setattr(self, name, getattr(op, name))
        self.nm = op.nm
        exc, w = None, None
        xp, nd_r = op._xp, _len(op.rows)
        try:
            w = self._check_weight(weight)
        except Exception as e:
            exc = e
        sync(op.grid.base_comm, "normal", exc, self._where())
        if isinstance(w, tuple):  # this rank's obs slice: gather the row's rows once
            w = op.transport.allgatherv(op.grid.row_comm, w[1], op._obs_counts,
                                        self.dtype).wait()
        self._weight = None if w is None else xp.asarray(w, dtype=self.dtype).reshape(nd_r, op.nt)

    def _check_weight(self, weight):
        op = self._parent
        xp = op._xp
        if weight is None:
            return None
        if np.isscalar(weight) or (isinstance(weight, np.ndarray) and weight.ndim == 0):
            if isinstance(weight, (bool, np.bool_, str, bytes)):
                raise FFTMatvecTypeError(f"weight must be a real number or array, got {weight!r}")
            w = float(weight)
            if not math.isfinite(w) or w < 0:
                raise FFTMatvecValueError(f"weight must be finite and >= 0, got {weight!r}")
            return xp.full((_len(op.rows), op.nt), w, dtype=op.dtype)
        wxp = backend.get_array_module(weight, name="weight")
        if wxp is not xp:
            raise FFTMatvecTypeError("weight must live where the operator does (NumPy vs CuPy)")
        if not bool(xp.isfinite(weight).all()) or bool((weight < 0).any()):
            raise FFTMatvecValueError("weight must be finite and >= 0 everywhere")
        if weight.shape == (op.nd, op.nt):
            return weight[op.rows[0]:op.rows[1]]
        if weight.shape == op.local_shape("obs"):
            return ("local", weight)
        raise FFTMatvecValueError(
            f"weight must be a scalar, the global ({op.nd}, {op.nt}) weight or this rank's "
            f"slice {op.local_shape('obs')}, got shape {weight.shape}")

    @property
    def shape(self) -> tuple[int, int]:
        n = self.nm * self.nt
        return (n, n)

    def matvec(self, m, *, check_finite=True):
        """``F^T W F m`` on this rank's parameter slice."""
        return self._drive("normal", m, "param", "m", False, check_finite, "normal")

    rmatvec = matvec  # symmetric

    def matmat(self, M, *, check_finite=True):
        return self._drive("normal", M, "param", "M", True, check_finite, "normal")

    rmatmat = matmat

    def _run(self, mode, X):
        return self._parent._run("normal", X, self._weight)

    def __repr__(self) -> str:
        return f"DistributedNormalOperator({self._parent!r})"


def _len(t) -> int:
    return t[1] - t[0]


def _space(space) -> str:
    if space not in _SPACES:
        raise FFTMatvecValueError(f"space must be 'param' or 'obs', got {space!r}")
    return space


def _host(a):
    return a if isinstance(a, np.ndarray) else backend.cupy.asnumpy(a)


def _chunk_bounds(k: int, chunks: int) -> list[tuple[int, int]]:
    from .layout import block_partition

    return [t for t in block_partition(k, min(k, chunks)) if t[1] > t[0]]

