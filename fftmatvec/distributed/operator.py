"""The block Toeplitz operator distributed over a ``pr x pc`` process grid.

Rank ``(r, c)`` holds the kernel block ``K[rows(r), cols(c), :]`` as one local
:class:`~fftmatvec.BlockToeplitz` operator (its rows and columns in the pipeline's order
below), and a slice of each vector (:mod:`.layout`)::

    forward   m slices --all-gather in column c--> m[cols(c)] --local F--> partial d[rows(r)]
              --reduce-scatter in row r--> d slices
    adjoint   d slices --all-gather in row r--> d[rows(r)] --local F^T--> partial m[cols(c)]
              --reduce-scatter in column c--> m slices
    normal    m slices --gather in column--> local F --all-reduce in row--> W, local F^T
              --reduce-scatter in column--> m slices   (the observation vector never gathered)

Gathers travel in stage 1's precision, reductions in stage 5's (``s`` halves the bytes).

Overlap: the block pipeline
---------------------------
A product is memory-bound on reading the local ``Khat``, so the work is cut into kernel
blocks, never into right-hand sides: every element of ``Khat`` is read once per product (once
per half of the normal operator) however many chunks there are, and a batch goes through the
pipeline whole. The parameter slice of every rank of process column ``c`` is cut into the same
number of pieces (:func:`.layout.chunk_pieces`); parameter chunk ``j`` is the ``j``-th piece of
every one, so its all-gather can start at once and brings a known set of local columns. The
sensors are cut the same way along the observation slices of process row ``r``. Rank ``(r, c)``
holds one :class:`~fftmatvec.BlockToeplitz` of its whole block with its rows and columns in
chunk-major order (each chunk's rows of every rank, rank after rank: the collectives' order),
so that block ``(i, j)`` (sensor chunk ``i``, parameter chunk ``j``) is one contiguous block of
its ``Khat``, and runs the steps of :func:`.schedule.schedule` with the stage-level building
blocks of :mod:`fftmatvec.blocks`::

    forward   start the gathers of every x_j; at x_j's first block: wait for it, pad + FFT it
              (once); stage 3 of every block (i, j) into y_i's spectrum (the first block
              writes it, the others add); when y_i is complete: inverse FFT + unpad, and its
              reduce-scatter in the row started while the next chunks are computed
    adjoint   the mirror: gathers of the d_i in the row, the blocks transposed accumulating
              into x_j's spectrum, reduce-scatter of each complete x_j in the column
    normal    the forward half with an all-reduce of each complete y_i in the row; the
              adjoint half on W y_i as the all-reduces bring them (no gather), reduce-scatter
              of each complete x_j in the column

No FFT is repeated: each input chunk is transformed once, each output chunk inverted once.
Gather ``j`` is waited for only when block ``j`` is first needed, so the gathers of later
chunks move while earlier blocks are computed, and the reduction of a complete chunk moves
while the next chunks are. The forward and adjoint run output chunk after output chunk (each
output's reduction starts early) where the reduction moves at least as many bytes as the
gather, else input chunk after input chunk (each gather waited for late); the normal operator
runs both halves output after output. Every rank starts the collectives of each communicator
in the same order (the gathers first, then the reductions in chunk order). On the CPU, MPI is
driven between the steps; on a GPU the steps are queued on the compute stream and the
transport starts each collective behind an event (host-staged MPI: on its helper thread, which
waits for the staging copy, posts the collective and copies the result back, while the calling
thread queues the next blocks; :mod:`.comm`). The product waits for every collective, in
order, before its closing sync point.

The number of chunks of each axis is :func:`.schedule.choose_chunks`'s: the product's time
predicted from the bytes of each step at the device's bandwidth, the host's time to issue
each step (:data:`.schedule.HOST_STEP`) and each collective's
latency-bandwidth time on the network's model (the emulated network's, else
:data:`.schedule.NETWORK` of the device), for the ``batch`` the operator is built for, summed
over a forward and an adjoint product (one cut serves both: the chunk-major ``Khat`` is cut
once); an axis is cut only where its communicator has more than one rank. ``chunks`` forces a
count; ``overlap=False`` (or one chunk an axis) runs gather, compute, reduce (the baseline the
benchmark compares with).

Scaling (:mod:`fftmatvec._scaling`): the spectra of an output chunk's blocks are summed, so all
the input chunks of a half share one power of two, the same on every rank (a rank's scaled
input goes to the others on the wire): from the largest magnitude of the input over every rank
(as the single-process product takes it from the whole input), for the normal operator's
second half from the bound ``max|W| max|x| max|K| max(Nd, Nm) Nt`` of its input. The input is
scaled before its gather, each output on its reduction's wire by the same kind of bound (a
float32 wire neither over- nor underflows), undone after the reduction. On the CPU the ranks
agree on the magnitude before the product; on a GPU the product runs on the input as given
while the magnitude's reduction lands in host memory, the ranks agree on it at the closing
sync point, and only an input outside the window runs again, scaled (the host does not wait
for the device before the product). Each rank's stored ``Khat`` keeps its own power of two
(and, with ``h``, its own column scales), undone in stage 5 before the reduction.
"""

from __future__ import annotations

import math
import os

from typing import Any, Callable, Literal

import numpy as np
from numpy.typing import DTypeLike

from .. import _scaling, backend
from .._typing import Array, PathLike
from .._errors import FFTMatvecDistributedError, FFTMatvecTypeError, FFTMatvecValueError
from ..operator import (BlockToeplitz, _OperatorBase, _check_dtype, _fingerprint,
                        _resolve_precision)
from ..blocks import _stage3_unchecked, ifft_unpad, pad_fft
from ..precision import PrecisionConfig
from .comm import make_transport, sync
from .emulated import MachineModel
from .grid import ProcessGrid
from .layout import Layout

__all__ = ["DistributedBlockToeplitz", "DistributedNormalOperator"]

_SPACES = ("param", "obs")
# the exponent of a zero magnitude (below any other, far from overflowing a sum of a few)
_NO_EXPONENT = -(1 << 40)


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
    def xp(self) -> Any:
        """The array module (``numpy`` or ``cupy``) of the local slices."""
        return self._xp

    def _on_device(self):
        import contextlib

        return contextlib.nullcontext() if self._device is None else self._device

    def _where(self) -> str:
        replica = f"replica {self.grid.replica}, " if self.grid.replicas > 1 else ""
        return f"({replica}grid row {self.coords[0]}, col {self.coords[1]})"

    def _check_local(self, x, space, name, batched, check_finite):
        n = self._n_own[space]
        if batched and self.grid.replicas > 1 and getattr(x, "ndim", 0) == 3 \
                and x.shape[0] == 0:  # a replica given none of a batch smaller than R
            return self._empty_share(x, n, name), False, (0.0, False)
        X, flat, check = _OperatorBase._check_vector(self, x, n, name, batched, check_finite)
        # the largest magnitude, for the finiteness check and the input's scale: on the host
        # a float; on a device a reduction queued now, its value read later
        amax = 0.0 if not X.size else _scaling.ops_for(self._xp).measure(X)
        return X, flat, (amax, check)

    def _check_real_slice(self, x, name: str) -> None:
        """Raise unless ``x`` is a real floating-point array of the operator's array module."""
        xp = backend.get_array_module(x, name=name)
        if xp is not self._xp:
            raise FFTMatvecTypeError(
                f"{name} must be a {self._xp.__name__} array, as the operator's slices are, "
                f"got a {xp.__name__} one")
        if x.dtype.kind != "f":
            raise FFTMatvecTypeError(
                f"{name} must be real floating point (float32 or float64), got dtype {x.dtype}")

    def _empty_share(self, x, n, name):
        """A replica's empty share ``(0, n, Nt)`` of a batch, checked as a batch is."""
        self._check_real_slice(x, name)
        if x.shape[1:] != (n, self.nt):
            raise FFTMatvecValueError(f"{name} must have shape (k, {n}, {self.nt}), got {x.shape}")
        return x.astype(self.dtype, copy=False)

    def _agree(self, what, exc, k, name, e: int = _NO_EXPONENT):
        """A sync point that also agrees on the batch: raise on every rank if ``exc`` is set on
        any, or if the ranks of a replica passed different batch sizes, or every replica none.
        Returns the batch size of each replica, in replica order, and the largest of the
        ranks' exponents ``e``."""
        R, g = self.grid.replicas, self.grid.replica
        values = [e]
        for i in range(R):  # per replica: the largest and minus the smallest k of its ranks
            values += [k if i == g else -1, -k if i == g else -(1 << 62)]
        got = sync(self.grid.base_comm, what, exc, self._where(), values=values)
        e, got = got[0], got[1:]
        ks = []
        for i in range(R):
            hi, lo = got[2 * i], -got[2 * i + 1]
            if hi != lo:
                where = f" in replica {i}" if R > 1 else ""
                raise FFTMatvecDistributedError(
                    f"{what}: the ranks passed batches of different sizes (from {lo} to {hi} "
                    f"vectors{where}); every rank of a replica must pass its slices of the same "
                    f"k vectors (those distribute gives it)")
            ks.append(hi)
        if not any(ks):
            raise FFTMatvecValueError(
                f"{name} must hold at least one vector: every replica's batch is empty")
        return ks, e

    def _drive(self, what, x, space_in, name, batched, check_finite, mode):
        """Check locally, agree on the batch size, run the pipeline, sync its errors. A
        replica given none of a batch (fewer vectors than replicas) computes nothing.

        The input's scale (the module's notes) needs its largest magnitude over every rank.
        Where :attr:`_measure_first` (on the CPU, where it is at hand, and wherever the
        scaling has no window: column scales), the ranks agree on it with the batch size,
        before the product. Else (a GPU) the product is queued on the input as given while
        the magnitude's reduction lands in host memory; the ranks agree on it at the closing
        sync point, and only an input outside the window runs again, scaled: the host never
        waits for the device before the product. Either way a rank whose input is not finite
        (``check_finite``) raises on every rank."""
        exc, X, flat, k, amax = None, None, False, 0, (0.0, False)
        first = self._measure_first
        e = _NO_EXPONENT
        try:
            X, flat, amax = self._check_local(x, space_in, name, batched, check_finite)
            k = int(X.shape[0])
            if first:
                e = _checked_exponent(amax, name)
        except Exception as err:  # raised on every rank at the sync point below
            exc = err
        _, e = self._agree(what, exc, k, name, e)
        scales = self._scales(e) if first else (0, 0, 0, 0)
        Y, exc = self._product(mode, X, k, scales)
        if not first:
            mine = _NO_EXPONENT
            try:
                if k:
                    mine = _checked_exponent(amax, name)
            except Exception as err:
                exc = exc if exc is not None else err
            e = sync(self.grid.base_comm, what, exc, self._where(), values=(mine,))[0]
            scales, exc = self._scales(e), None
            if not any(scales):
                return self._shaped(Y, batched, flat)
            Y, exc = self._product(mode, X, k, scales)  # outside the window: again, scaled
        sync(self.grid.base_comm, what, exc, self._where())
        return self._shaped(Y, batched, flat)

    def _product(self, mode, X, k: int, scales):
        """``(Y, exception or None)`` of :meth:`_run`; an empty output on a replica with no
        vector of the batch."""
        if k:
            return self._run(mode, X, scales=scales)
        space_out = "param" if mode in ("adjoint", "normal") else "obs"
        with self._on_device():
            return self._xp.empty((0, self._n_own[space_out], self.nt), dtype=self.dtype), None

    @staticmethod
    def _shaped(Y, batched: bool, flat: bool):
        if batched:
            return Y
        return Y.reshape(-1) if flat else Y[0]

    # ---- vectors ---------------------------------------------------------------------------
    def local_range(self, space: Literal["param", "obs"]) -> tuple[int, int]:
        """Global ``(start, stop)`` of the rows of ``space`` this rank owns."""
        return self.layout.owned(_space(space), *self.coords)

    def local_shape(self, space: Literal["param", "obs"]) -> tuple[int, int]:
        """Shape ``(n_own, Nt)`` of this rank's slice of a vector of ``space``."""
        return (self._n_own[_space(space)], self.nt)

    def distribute(self, v: Array, space: Literal["param", "obs"] = "param") -> Array:
        """This rank's slice of the global vector ``v``: ``(N, Nt)``, ``(N*Nt,)`` or a batch
        ``(k, N, Nt)`` (``N`` = Nm for ``"param"``, Nd for ``"obs"``), same form back.

        With ``R`` replicas a batch is split across them: replica ``g`` gets the vectors
        ``block_partition(k, R)[g]`` (the first ``k % R`` replicas one more; a replica gets
        ``(0, n, Nt)`` where ``k < R``), and each of its ranks its slice of each. A single
        vector is held whole by every replica. Collective: a wrong ``v`` or ``space`` on any
        rank raises on every rank."""
        exc, out = None, None
        try:
            out = self._slice_of(v, _space(space))
        except Exception as e:  # raised on every rank at the sync point below
            exc = e
        sync(self.grid.base_comm, "distribute", exc, self._where())
        return out

    def _slice_of(self, v, space: str):
        n, nt = self.layout.size(space), self.nt
        a, b = self.local_range(space)
        xp = backend.get_array_module(v, name="v")
        if v.shape == (n * nt,):
            return xp.array(v.reshape(n, nt)[a:b].reshape(-1), copy=True)
        if v.ndim == 3 and v.shape[-2:] == (n, nt):
            from .layout import block_partition

            k0, k1 = block_partition(v.shape[0], self.grid.replicas)[self.grid.replica]
            return xp.array(v[k0:k1, a:b, :], copy=True)
        if v.ndim == 2 and v.shape == (n, nt):
            return xp.array(v[a:b], copy=True)
        raise FFTMatvecValueError(
            f"v must have shape ({n}, {nt}), ({n * nt},) or (k, {n}, {nt}) for space "
            f"{space!r}, got {v.shape}")

    def collect(self, v_local: Array, space: Literal["param", "obs"] = "param") -> Array:
        """The global vector (or batch) on every rank from every rank's slice (collective).

        A batch comes back whole: every replica's share, in replica order (the converse of
        :meth:`distribute`); a single vector from the slices of this rank's replica."""
        from mpi4py.util import dtlib

        if self.grid.size != self.grid.base_comm.Get_size():
            raise FFTMatvecValueError(
                "collect: an emulated grid (transport='emulated') has no other ranks to gather "
                "from; use this rank's slice")
        xp = self._xp
        batched = getattr(v_local, "ndim", 0) == 3
        exc, X, flat, k = None, None, False, 0
        try:
            space = _space(space)
            X, flat, _ = self._check_local(v_local, space, "v_local", batched, False)
            k = X.shape[0]
        except Exception as e:  # raised on every rank at the sync point below
            exc = e
        ks, _ = self._agree("collect", exc, k, "v_local")
        grid = self.grid
        comm, groups = ((grid.base_comm, range(grid.replicas)) if batched
                        else (grid.replica_comm, [grid.replica]))
        n, nt = self.layout.size(space), self.nt
        pr = grid.shape[0]
        send = np.ascontiguousarray(_host(X).transpose(1, 0, 2), dtype=self.dtype)
        counts, displs, offset = [], [], 0
        for g in groups:  # the ranks of each replica, in the communicator's order
            for q in range(grid.group_size):
                a, b = self.layout.owned(space, q % pr, q // pr)
                counts.append((b - a) * ks[g] * nt)
                displs.append(offset + a * ks[g] * nt)
            offset += n * ks[g] * nt
        recv = np.empty(offset, dtype=self.dtype)
        comm.Allgatherv(send, [recv, counts, displs, dtlib.from_numpy_dtype(recv.dtype)])
        parts, offset = [], 0
        for g in groups:  # each replica's block (n, k_g, Nt) to (k_g, n, Nt)
            size = n * ks[g] * nt
            parts.append(recv[offset:offset + size].reshape(n, ks[g], nt).transpose(1, 0, 2))
            offset += size
        out = xp.asarray(np.ascontiguousarray(np.concatenate(parts, axis=0)))
        if batched:
            return out
        return out.reshape(-1) if flat else out[0]

    def _check_slices(self, what, *arrays):
        """Check that ``arrays`` are this rank's slices of vectors (or batches) of one space,
        all of one shape, on the operator's array module; raise on every rank if any rank's
        are not (collective)."""
        exc = None
        try:
            shapes = []
            for i, a in enumerate(arrays):
                self._check_real_slice(a, "ab"[i] if len(arrays) > 1 else "a")
                shapes.append(a.shape)
            if len(set(shapes)) > 1:
                raise FFTMatvecValueError(
                    f"a and b must have the same shape, got {shapes[0]} and {shapes[1]}")
            ok = []
            for space in _SPACES:
                n = self._n_own[space]
                ok += [(n, self.nt), (n * self.nt,)]
            shape = shapes[0]
            if shape not in ok and not (len(shape) == 3 and shape[1:] in ok[0::2]):
                raise FFTMatvecValueError(
                    f"{'a and b' if len(arrays) > 1 else 'a'} must be this rank's slice of a "
                    f"vector: shape {ok[0]} or {ok[1]} (parameters), {ok[2]} or {ok[3]} "
                    f"(observations), or a batch (k, n, {self.nt}) of either, got {shape}")
        except Exception as e:  # raised on every rank at the sync point below
            exc = e
        sync(self.grid.base_comm, what, exc, self._where())

    def dot(self, a: Array, b: Array) -> float:
        """Global ``<a, b>`` of two distributed vectors (or batches: the sum over their
        vectors) of the same space (collective)."""
        self._check_slices("dot", a, b)
        return self._dot_checked(a, b)

    def _dot_checked(self, a, b) -> float:
        """The sum over the ranks of a replica (a single vector, which every replica holds),
        or over every rank (a batch, split across the replicas)."""
        from mpi4py import MPI

        xp = self._xp
        local = xp.vdot(a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64))
        buf = np.array([float(local)])
        comm = self.grid.base_comm if a.ndim == 3 else self.grid.replica_comm
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return float(buf[0])

    def norm(self, a: Array) -> float:
        """Global 2-norm of a distributed vector (collective)."""
        self._check_slices("norm", a)
        return math.sqrt(max(self._dot_checked(a, a), 0.0))

    def as_pylops_mpi(self) -> Any:
        """This operator as a ``pylops_mpi.MPILinearOperator`` on ``DistributedArray``
        vectors whose local arrays are this package's slices (see :mod:`.pylops`)."""
        from .pylops import as_pylops_mpi

        return as_pylops_mpi(self)


class DistributedBlockToeplitz(_Distributed):
    """``F`` of shape ``(Nd*Nt, Nm*Nt)`` over a process grid; every rank a block of the kernel
    and a slice of each vector.

    With ``R`` replicas (:class:`ProcessGrid`), each replica group holds the whole operator
    over its own ``pr x pc`` grid: :meth:`matmat` and :meth:`rmatmat` of a batch compute each
    replica's share of the right-hand sides at once (:meth:`distribute` splits a batch,
    :meth:`collect` joins it), while a single vector is held and computed by every replica.

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
    batch : int, default 1
        Right-hand sides per product the layout is chosen for, where ``grid`` leaves its
        replicas to the cost model (:func:`~fftmatvec.distributed.model.choose_layout`): one
        vector gives one replica, a batch may give ``R > 1`` replica groups, each holding the
        whole operator over its own grid and computing its share of every batch; the block
        pipeline's chunks are chosen for it too.
    memory : float, optional
        Bytes of ``Khat`` one rank may hold, for the same choice (each replica holds a whole
        ``Khat``); None: no bound.
    shape : (Nd, Nm, Nt), optional
        Required with a callable kernel.
    dtype : float64 (default) or float32
        Interface dtype of the local slices.
    fft_len : int, optional
    device : {None, "cpu", "gpu"}
        None: the GPU for a CuPy kernel, else the CPU. On a GPU, rank binds to
        :meth:`ProcessGrid.device_id`.
    transport : {None, "mpi", "nccl", "emulated"}
        None: NCCL for GPU operators when ``cupy.cuda.nccl`` works on every rank and every
        rank has a GPU of its own, MPI otherwise (ranks sharing a GPU: MPI, host-staged unless
        the MPI library is GPU-aware); ``transport.reason`` says why. ``"nccl"`` on ranks
        sharing a GPU raises on every rank. ``"emulated"``: on a communicator of one rank, run
        the rank ``virtual_coords`` of the grid ``virtual_grid``, its collectives replaced by
        communication-shaped work under the machine model ``network``
        (:mod:`fftmatvec.distributed.emulated`): for measuring overlap without the machine.
    network : MachineModel or str, optional
        With ``transport="emulated"`` only: the machine model, or a shipped model's name
        (``"frontier"``, ``"h100"``).
    virtual_grid : (int, int), optional
        With ``transport="emulated"`` only: ``(rows, cols)`` of the grid emulated (``grid``
        must then have one rank; its shape is ignored).
    virtual_coords : (int, int), default (0, 0)
        With ``transport="emulated"`` only: the virtual rank emulated.
    overlap : bool, default True
        Run the block pipeline (the module's notes): the local block cut into blocks of
        sensors and parameters aligned with the collectives' slices, one chunk's
        communication moving while the next is computed. False: the whole block at once,
        compute-then-communicate.
    chunks : int or (int, int), optional
        Force the chunks per axis (sensors, parameters), so at most ``chunks**2`` blocks on a
        2-D grid (for benchmarks and tests); an axis whose communicator has one rank is not
        cut. A pair ``(sensor_chunks, param_chunks)`` cuts both axes so, whatever the grid
        (on one rank: the pipeline's own cost, nothing to communicate). Default: the cost
        model's choice (:func:`~fftmatvec.distributed.schedule.choose_chunks`) for ``batch``
        vectors, at most :data:`~fftmatvec.distributed.schedule.MAX_CHUNKS` an axis.
    min_chunk : int, default 16
        Fewest sensors or parameters of a chunk, on average: an axis of ``n`` local rows is
        cut into at most ``n // min_chunk`` chunks (each block's stage 3 is a product of that
        many rows, and each chunk costs a few launches).

    Raises
    ------
    FFTMatvecDistributedError
        On every rank, when construction failed on any (a bad file, a callable's wrong block,
        different kernels or sizes on different ranks), naming the ranks and causes.
    FFTMatvecValueError
        The grid does not fit the sizes (more process rows than sensors or columns than
        parameters), on every rank before any block is read.
    """

    def __init__(self, grid: ProcessGrid,
                 kernel: PathLike | Array | Callable[[slice, slice], Array],
                 precision: str | PrecisionConfig = "ddddd", *,
                 shape: tuple[int, int, int] | None = None, dtype: DTypeLike = None,
                 fft_len: int | None = None, device: Literal["cpu", "gpu"] | None = None,
                 transport: Literal["mpi", "nccl", "emulated"] | None = None,
                 overlap: bool = True, chunks: int | None = None, min_chunk: int = 16,
                 rtol: float | None = None, batch: int = 1, memory: float | None = None,
                 network: MachineModel | str | None = None,
                 virtual_grid: tuple[int, int] | None = None,
                 virtual_coords: tuple[int, int] = (0, 0)) -> None:
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
            pair = isinstance(chunks, (tuple, list)) and len(chunks) == 2
            for name, value in (("chunks", chunks), ("min_chunk", min_chunk), ("batch", batch)):
                for v in (value if name == "chunks" and pair else (value,)):
                    if v is not None and (isinstance(v, bool) or not isinstance(
                            v, (int, np.integer)) or v < 1):
                        what = "or a pair of them " if name == "chunks" else ""
                        raise FFTMatvecValueError(
                            f"{name} must be a positive integer {what}got {value!r}")
            if memory is not None and (isinstance(memory, bool) or not isinstance(
                    memory, (int, float, np.integer, np.floating)) or not memory > 0
                    or not math.isfinite(memory)):
                raise FFTMatvecValueError(
                    f"memory must be a positive number of bytes or None, got {memory!r}")
            (nd, nm, nt), token = _kernel_sizes(kind, kernel, shape)
            emulated = _check_emulation(transport, network, virtual_grid, virtual_coords, grid)
        except Exception as e:
            exc = e
        sync(comm, "DistributedBlockToeplitz", exc, where)
        seen = comm.allgather((token, f"auto rtol={rtol!r}" if auto else self.precision.letters,
                               str(self.dtype), self._xp is np, bool(overlap), chunks, min_chunk,
                               fft_len, transport, batch, memory))
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
        self.grid = grid.resolve(nd, nm, nt, self.precision, batch=int(batch or 1),
                                 memory=None if memory is None else float(memory))
        if emulated:
            from .emulated import VirtualGrid

            self.grid = VirtualGrid(self.grid, virtual_grid, virtual_coords).check(nd, nm)
        self.layout = Layout(nd, nm, *self.grid.shape)
        self.coords = self.grid.coords
        r, c = self.coords
        self.rows, self.cols = self.layout.rows(r), self.layout.cols(c)
        self._n_own = {"param": _len(self.layout.param_range(r, c)),
                       "obs": _len(self.layout.obs_range(r, c))}
        self.overlap = bool(overlap)
        self.chunks = (None if chunks is None else tuple(int(v) for v in chunks) if pair
                       else int(chunks))
        self.min_chunk = int(min_chunk if min_chunk is not None else 16)
        # counts of the collectives: param slices in the column, obs slices in the row; the
        # chunks of both axes (rank r is row r of its column's communicator, c column c of its
        # row's)
        self._param_counts = [_len(t) for t in self.layout.param_ranges_in_col(c)]
        self._obs_counts = [_len(t) for t in self.layout.obs_ranges_in_row(r)]
        pr, pc = self.grid.shape
        cs, cp = self._chunk_counts(int(batch or 1), transport, network)
        if not isinstance(self.chunks, tuple):  # an axis whose communicator has one rank
            cs, cp = (cs if pc > 1 else 1), (cp if pr > 1 else 1)
        self._pcut = _chunks(self._param_counts, r, cp, self.min_chunk)
        self._scut = _chunks(self._obs_counts, c, cs, self.min_chunk)
        self._steps: dict = {}  # direction -> the schedule's steps (fixed by the cut)
        self._device = None
        self._wire = (self.precision.pad_dtype, self.precision.reduce_dtype)
        self.transport = None
        exc, kexp = None, _NO_EXPONENT
        try:
            if self._xp is not np:
                dev = backend.cupy.cuda.Device(self.grid.device_id())
                dev.use()
                self._device = dev
            block = _load_block(kind, kernel, self.rows, self.cols, nt, self._xp)
            kexp = _exponent(_kernel_amax(self._xp, block))
            self._op = self._chunk_major_operator(block, fft_len)
            self._natural = None
            del block
            self.fft_len, self.nf = self._op.fft_len, self._op.nf
            # column scales (``h``): the exponents of each parameter chunk's rows, (n_j, 1)
            cols = self._op._cols
            with self._on_device():
                self._col_exps = None if cols is None else [
                    self._xp.asarray(cols[a:b, None]) for a, b in (p.span for p in self._pcut)]
        except Exception as e:
            exc = e
        # agreed by every rank: the bound on a product's magnitude that its output's wire and
        # the normal operator's second half are scaled by, |F x| <= max|x| max|K| max(nd, nm)
        # nt (max|K| over every rank's block), and the window of the input's scale, the
        # narrowest of the ranks' (a rank with column scales has none): one rank's scaled
        # input goes to the others on the wire
        window = self._op._window if exc is None else 0
        kexp, window = sync(comm, "DistributedBlockToeplitz", exc, self._where(),
                            values=(kexp, -window))
        self._kernel_exp, self._window = kexp + _exponent(float(max(nd, nm) * nt)), -window
        # where the ranks agree on the input's magnitude before a product (_drive)
        self._measure_first = self._xp is np or self._window == 0
        exc = None
        try:  # after the sync: choosing NCCL compares the ranks' devices (a collective)
            with self._on_device():
                self.transport = make_transport(self._xp, transport, self.grid.base_comm,
                                                network)
        except Exception as e:
            exc = e
        sync(comm, "DistributedBlockToeplitz", exc, self._where())
        self._exc = None

    def _chunk_counts(self, batch: int, transport, network) -> tuple[int, int]:
        """``(sensor chunks, parameter chunks)`` asked of the block pipeline: one each without
        overlap, ``chunks`` each where given, else :func:`.schedule.choose_chunks`'s choice
        for ``batch`` vectors on this grid (the least summed time of a forward and an adjoint
        product: :data:`.schedule.OPERATOR_DIRECTIONS`), under the emulated network's
        model or :data:`.schedule.NETWORK` of the device, at :data:`.schedule.BANDWIDTH`. The
        choice is rank ``(0, 0)``'s on every rank: the ranks of a row (a column) must cut
        their sensors (parameters) alike, for their collectives are chunk by chunk."""
        from .schedule import (BANDWIDTH, HOST_STEP, MAX_CHUNKS, NETWORK, OPERATOR_DIRECTIONS,
                               choose_chunks)

        if not self.overlap:
            return 1, 1
        if isinstance(self.chunks, tuple):
            return self.chunks
        if self.chunks is not None:
            return self.chunks, self.chunks
        if self.grid.group_size == 1:
            return 1, 1
        where = "cpu" if self._xp is np else "gpu"
        net = network if transport == "emulated" else NETWORK[where]
        return choose_chunks(self.nd, self.nm, self.nt, batch, self.precision, self.grid.shape,
                             net, BANDWIDTH[where], OPERATOR_DIRECTIONS, order=None,
                             coords=(0, 0), max_chunks=MAX_CHUNKS, min_chunk=self.min_chunk,
                             host=HOST_STEP[where])

    def _chunk_major_operator(self, block, fft_len) -> BlockToeplitz:
        """The operator of the local block with its sensors and parameters in chunk-major
        order (chunk 0's rows of every rank of the communicator, rank after rank, then chunk
        1's, ...): every chunk a contiguous range :attr:`_Chunk.span` of it, every block
        ``(i, j)`` of the pipeline one contiguous block of its ``Khat`` (rows
        ``scut[i].span``, columns ``pcut[j].span``), its rows in the collectives' order. One
        chunk an axis is the block's own order."""
        xp = self._xp
        opts = dict(dtype=self.dtype, fft_len=fft_len, plan=self._plan or None)
        rows = [rg for ch in self._scut for rg in ch.ranges]
        cols = [rg for ch in self._pcut for rg in ch.ranges]
        if len(rows) > 1:
            block = _take(xp, block, rows, 0)
        if len(cols) > 1:
            block = _take(xp, block, cols, 1)
        return BlockToeplitz(xp.ascontiguousarray(block), self.precision, **opts)

    def close(self) -> None:
        """End the transport's helper thread, if it has one (host-staged MPI on a GPU: the
        notes of :mod:`.comm`), after the collectives pending; a later product makes
        another. Not collective."""
        close = getattr(self.transport, "close", None)
        if close is not None:
            close()

    # ---- shapes ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """Global shape ``(Nd*Nt, Nm*Nt)``."""
        return (self.nd * self.nt, self.nm * self.nt)

    @property
    def local_operator(self) -> BlockToeplitz:
        """This rank's block ``K[rows, cols, :]`` as a single-process operator. Where the block
        pipeline cuts the block (:attr:`blocks` other than ``(1, 1)``) the pipeline's operator
        holds it in chunk-major order; this one, in the block's own order, is built on first
        use from its kernel: an operator of its own, with another ``Khat``."""
        if self._natural is None:
            if self.blocks == (1, 1):
                self._natural = self._op
            else:
                xp = self._xp
                with self._on_device():
                    block = self._op._kernel
                    for axis, cut in ((0, self._scut), (1, self._pcut)):
                        order = np.concatenate([np.arange(a, b) for ch in cut
                                                for a, b in ch.ranges])
                        block = xp.take(block, xp.asarray(np.argsort(order)), axis=axis)
                    self._natural = BlockToeplitz(block, self.precision, dtype=self.dtype,
                                                  fft_len=self.fft_len, plan=self._plan or None)
        return self._natural

    @property
    def blocks(self) -> tuple[int, int]:
        """``(sensor chunks, parameter chunks)`` of the block pipeline; ``(1, 1)``: the whole
        block in one piece."""
        return (len(self._scut), len(self._pcut))

    @property
    def khat_nbytes(self) -> int:
        """Bytes of this rank's stored ``Khat`` (one, however many blocks the pipeline has)."""
        return self._op.khat_nbytes

    def __repr__(self) -> str:
        return (f"DistributedBlockToeplitz(nd={self.nd}, nm={self.nm}, nt={self.nt}, "
                f"grid={self.grid.rows}x{self.grid.cols}, precision='{self.precision}', "
                f"transport={getattr(self.transport, 'name', None)})")

    # ---- products --------------------------------------------------------------------------
    def matvec(self, m: Array, *, check_finite: bool = True) -> Array:
        """``F m`` on distributed vectors: ``m`` is this rank's parameter slice
        ``(n_param, Nt)`` or flat; returns its observation slice in the same form."""
        return self._drive("matvec", m, "param", "m", False, check_finite, "forward")

    def rmatvec(self, d: Array, *, check_finite: bool = True) -> Array:
        """``F^T d``: ``d`` this rank's observation slice; returns its parameter slice."""
        return self._drive("rmatvec", d, "obs", "d", False, check_finite, "adjoint")

    def matmat(self, M: Array, *, check_finite: bool = True) -> Array:
        """``F`` on a batch: ``M`` is ``(k, n_param, Nt)``, the same ``k`` on every rank."""
        return self._drive("matmat", M, "param", "M", True, check_finite, "forward")

    def rmatmat(self, D: Array, *, check_finite: bool = True) -> Array:
        """``F^T`` on a batch ``(k, n_obs, Nt)``."""
        return self._drive("rmatmat", D, "obs", "D", True, check_finite, "adjoint")

    def __matmul__(self, x):
        return self.matmat(x) if getattr(x, "ndim", None) == 3 else self.matvec(x)

    def normal(self, weight: float | Array | None = None) -> DistributedNormalOperator:
        """``F^T W F`` with ``W`` diagonal: None, a scalar, the global ``(Nd, Nt)`` weight, or
        this rank's observation slice of it."""
        return DistributedNormalOperator(self, weight)

    # ---- the pipeline ----------------------------------------------------------------------
    def _scales(self, e: int) -> tuple[int, ...]:
        """``(in, out)`` powers of two of each half (the module's notes): its input's from
        the input's largest magnitude (``< 2**e`` over every rank), its output's on the wire
        from the bound ``|F x| <= max|x| max|K| max(Nd, Nm) Nt`` (the product's own scale
        undone after the reduction, so a reduced wire neither over- nor underflows)."""
        return self._half_scales(e, 0)

    def _half_scales(self, e: int, *more: int) -> tuple[int, ...]:
        """``(in_0, out_0, in_1, out_1, ...)`` of halves whose inputs' magnitudes are below
        ``2**e`` times ``2**more[h]`` for half ``h``."""
        if e == _NO_EXPONENT:
            return (0, 0) * len(more)
        window, wire = self._window, _WIRE_WINDOW[np.dtype(self._wire[1]).itemsize]
        out = ()
        for half, extra in enumerate(more):
            bound = e + extra
            # a measured input within the operator's window, as a single-process product's; a
            # bound (the second half's input) within twice it, whose values and their sums in
            # a reduced stage still fit float32
            out += (_scale(bound, self.dtype, window * (1 + half)),
                    _scale(bound + self._kernel_exp, self.dtype, wire))
        return out

    def _stage3(self, xhat, yhat, i: int, j: int, adjoint: bool, beta: int):
        """Stage 3 of block ``(i, j)`` (sensor chunk ``i``, parameter chunk ``j``) of the
        local ``Khat``: :func:`fftmatvec.blocks.stage3_block` on the block's rows and columns
        of the chunk-major operator, into (``beta=0``) or added to (``beta=1``) ``yhat``,
        without its argument checks (the pipeline made ``xhat`` and ``yhat`` itself)."""
        (i0, i1), (j0, j1) = self._scut[i].span, self._pcut[j].span
        return _stage3_unchecked(self._op, xhat, yhat, i0, i1, j0, j1, adjoint, beta)

    def _pad_fft(self, x, exp):
        """Stages 1 and 2 of an input chunk ``x`` ``(k, n, Nt)`` times ``2**exp`` (an int, or
        ``(n, 1)`` ints: a forward's column scales), exact in the interface dtype before
        stage 1's cast: :func:`fftmatvec.blocks.pad_fft`."""
        if _nonzero(exp):
            x = self._xp.ldexp(x, exp)
        return pad_fft(self._op, x)

    def _ifft_unpad(self, yhat, exp):
        """Stages 4 and 5 of an output chunk's spectrum (:func:`fftmatvec.blocks.ifft_unpad`,
        which undoes the stored ``Khat``'s scale), times ``2**exp`` (an int, or ``(n, 1)``
        ints: an adjoint's column scales): ``(k, n, Nt)`` in the interface dtype."""
        y = ifft_unpad(self._op, yhat)
        if _nonzero(exp):
            self._xp.ldexp(y, exp, out=y)
        return y

    def _kept(self, run, make):
        """``run()``, or on a failure ``make()`` (zeros of the result's size) with the failure
        kept for the next sync point: the rank's collectives go on with zeros, so the other
        ranks' complete."""
        try:
            return run()
        except Exception as e:
            if self._exc is None:
                self._exc = e
            return make()

    def _input(self, x, weight, chunk, exp: int = 0):
        """A chunk's input from the wire ``(n, k, Nt)`` to ``(k, n, Nt)``, contiguous, times the
        weight's rows where given (the normal operator's second half) and ``2**exp``."""
        xp = self._xp

        def run():
            v = x
            if weight is not None:
                w = _take(xp, weight, chunk.ranges, 0)
                v = v.astype(self.dtype, copy=False) * (xp.ldexp(w, exp) if exp else w)[:, None]
            elif exp:
                v = xp.ldexp(v.astype(self.dtype, copy=False), exp)
            return xp.ascontiguousarray(v.transpose(1, 0, 2), dtype=self.dtype)

        return self._kept(run, lambda: xp.zeros((x.shape[1], x.shape[0], self.nt), self.dtype))

    def _schedule(self, mode: str) -> tuple:
        """The steps of a ``mode`` product: :func:`.schedule.schedule` on this rank's cut in
        the order of :func:`.schedule.pipeline_order`, made once per direction (functions of
        the sizes, the grid, the precision and the cut, fixed at construction)."""
        steps = self._steps.get(mode)
        if steps is None:
            from .schedule import pipeline_order, schedule

            order = pipeline_order(self.nd, self.nm, self.grid.shape, self.precision, mode,
                                   self.coords)
            steps = self._steps[mode] = tuple(schedule(len(self._scut), len(self._pcut), mode,
                                                       order))
        return steps

    def _run(self, mode: str, X, weight=None, scales=(0, 0, 0, 0)):
        """Run the product's block pipeline, step after step of :func:`.schedule.schedule`, on
        the checked local input ``X`` ``(k, n, Nt)`` (None on a rank whose check failed: zeros
        of the right size take its place); ``scales``: the powers of two of each half's input
        and of its output on the wire (:meth:`_scales`). Returns ``(Y, exception or None)``."""
        self._exc = None
        xp, op, t = self._xp, self._op, self.transport
        w1, w5 = self._wire
        space_in = "obs" if mode == "adjoint" else "param"
        space_out = "param" if mode in ("adjoint", "normal") else "obs"
        n_in, n_out = self._n_own[space_in], self._n_own[space_out]
        cut = {"sensor": self._scut, "param": self._pcut}
        # parameters move within the process column, sensors within the process row
        comm = {"sensor": self.grid.row_comm, "param": self.grid.col_comm}
        # host-staged GPU collectives: the output's chunks are assembled in host memory and
        # copied to the device once
        on_host = (xp is not np and t.staging == "host"
                   and comm["param" if mode != "forward" else "sensor"].Get_size() > 1)
        kw = {"device": False} if on_host else {}
        steps = self._schedule(mode)
        cd = op.precision.complex_dtype("ifft")
        cols = self._col_exps
        s_in, s_out = scales[0::2], scales[1::2]
        # what the second half's input, the first half's output from the wire, is scaled by
        s_mid = s_in[1] - s_out[0] if mode == "normal" else 0

        def exps(half, axis, idx):
            """The powers of two of an input chunk's stage 1 and of an output chunk's stage 5
            (from the half's input scale to its output's): on a parameter chunk with its
            column scales (a forward's input, an adjoint's output)."""
            e = s_out[half] - s_in[half]
            if cols is None or axis != "param":
                return 0, e
            return cols[idx], cols[idx] + e

        with self._on_device():
            if X is None:
                X = xp.zeros((1, n_in, self.nt), dtype=self.dtype)
            k = X.shape[0]
            if on_host:
                import cupyx

                Y = cupyx.empty_pinned((k, n_out, self.nt), dtype=self.dtype)
            else:
                Y = xp.empty((k, n_out, self.nt), dtype=self.dtype)
            # pending collectives, inputs from the wire, input spectra, output spectra being
            # summed and complete outputs, each by (half, axis, chunk); blocks run per input
            pend, data, spectra, acc, outs, used = {}, {}, {}, {}, {}, {}
            drain = getattr(t, "drain", None)
            failed = None
            try:
                for step in steps:
                    kind, half = step.kind, step.half
                    if kind == "block":
                        i, j, adj = step.sensor, step.param, step.adjoint
                        (ia, ii), (oa, oi) = ((("sensor", i), ("param", j)) if adj
                                              else (("param", j), ("sensor", i)))
                        ikey, okey = (half, ia, ii), (half, oa, oi)
                        beta = int(okey in acc)
                        if not beta:
                            acc[okey] = xp.empty((k, _len(cut[oa][oi].span), self.nf), dtype=cd)
                        self._kept(lambda: self._stage3(spectra[ikey], acc[okey], i, j, adj, beta),
                                   lambda: acc[okey].fill(0) if not beta else None)
                        used[ikey] = used.get(ikey, 0) + 1
                        if used[ikey] == len(cut[oa]):  # the input's last block
                            del spectra[ikey]
                    else:
                        axis, idx = step.chunk
                        ch, key = cut[axis][idx], (half, axis, idx)
                        n = _len(ch.span)
                        if kind == "gather":  # the input on the wire already scaled
                            a, b = ch.mine
                            x = X[:, a:b] if not s_in[0] else xp.ldexp(X[:, a:b], s_in[0])
                            pend[key] = t.allgatherv(comm[axis], x.transpose(1, 0, 2),
                                                     ch.counts, w1)
                        elif kind in ("gather_wait", "allreduce_wait"):
                            # gathers and all-reduces start in the first half
                            wire = w1 if kind == "gather_wait" else w5
                            got = self._kept(pend.pop((0, axis, idx)).wait,
                                             lambda: xp.zeros((n, k, self.nt), wire))
                            data[key] = self._input(got, weight if half else None, ch,
                                                    s_mid if half else 0)
                        elif kind == "fft":
                            x, e = data.pop(key), exps(half, axis, idx)[0]
                            spectra[key] = self._kept(
                                lambda: self._pad_fft(x, e),
                                lambda: xp.zeros((k, n, self.nf),
                                                 op.precision.complex_dtype("fft")))
                        elif kind == "ifft":
                            yh, e = acc.pop(key), exps(half, axis, idx)[1]
                            outs[key] = self._kept(lambda: self._ifft_unpad(yh, e),
                                                   lambda: xp.zeros((k, n, self.nt), self.dtype))
                        elif kind == "reduce":
                            pend[key] = t.reduce_scatter(comm[axis],
                                                         outs.pop(key).transpose(1, 0, 2),
                                                         ch.counts, w5, **kw)
                        elif kind == "allreduce":
                            pend[key] = t.allreduce(comm[axis],
                                                    outs.pop(key).transpose(1, 0, 2), w5)
                        else:  # reduce_wait: this rank's rows of the output chunk, unscaled
                            a, b = ch.mine
                            ym = np if on_host else xp  # Y in pinned host memory, or not
                            Y[:, a:b] = self._kept(pend.pop(key).wait,
                                                   lambda: ym.zeros((b - a, k, self.nt), w5)
                                                   ).transpose(1, 0, 2)
                            if s_out[half]:
                                ym.ldexp(Y[:, a:b], -s_out[half], out=Y[:, a:b])
                    # start the collectives whose data the device has written, move those in flight
                    t.progress()
            finally:
                # every collective has been waited for (unless a step raised): the helper
                # thread, if any, holds none once this returns, so no other thread calls MPI
                failed = drain() if drain is not None else None
            if failed is not None and self._exc is None:
                self._exc = failed
            if on_host:
                Y = xp.asarray(Y)
        return Y, self._exc


class DistributedNormalOperator(_Distributed):
    """``F^T W F`` of a :class:`DistributedBlockToeplitz`, parameter slices in and out."""

    def __init__(self, op: DistributedBlockToeplitz,
                 weight: float | Array | None = None) -> None:
        self._parent = op
        for name in ("_xp", "dtype", "nt", "grid", "layout", "coords", "_n_own", "_device",
                     "_measure_first"):
            setattr(self, name, getattr(op, name))
        self.nm = op.nm
        exc, w = None, None
        xp, nd_r = op._xp, _len(op.rows)
        try:
            w = self._check_weight(weight)
        except Exception as e:
            exc = e
        local = int(isinstance(w, tuple))
        wmax = 0.0
        if exc is None and w is not None:
            wa = w[1] if isinstance(w, tuple) else w
            wmax = float(xp.abs(wa).max()) if wa.size else 0.0
        most, least, self._weight_exp = sync(op.grid.base_comm, "normal", exc, self._where(),
                                             values=(local, -local, _exponent(wmax)))
        if w is None:
            self._weight_exp = 1  # W = I: largest magnitude 1 < 2**1
        if most != -least:  # the gather below needs every rank of a row, or none
            raise FFTMatvecDistributedError(
                "normal: some ranks passed the weight as their slice of the observation "
                "vector, others as the global (Nd, Nt) weight or a scalar; every rank must "
                "pass it in the same form")
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

    def matvec(self, m: Array, *, check_finite: bool = True) -> Array:
        """``F^T W F m`` on this rank's parameter slice."""
        return self._drive("normal", m, "param", "m", False, check_finite, "normal")

    rmatvec = matvec  # symmetric

    def matmat(self, M: Array, *, check_finite: bool = True) -> Array:
        return self._drive("normal", M, "param", "M", True, check_finite, "normal")

    rmatmat = matmat

    def _scales(self, e: int) -> tuple[int, ...]:
        """The first half's scales as the forward product's; the second half's input from the
        bound ``|W F x| <= max|W| max|x| max|K| max(Nd, Nm) Nt`` (it arrives chunk by chunk,
        and every chunk's spectrum must share one scale)."""
        op = self._parent
        return op._half_scales(e, 0, op._kernel_exp + self._weight_exp)

    def _run(self, mode, X, scales=(0, 0, 0, 0)):
        return self._parent._run("normal", X, self._weight, scales)

    def __repr__(self) -> str:
        return f"DistributedNormalOperator({self._parent!r})"


def _check_emulation(transport, network, virtual_grid, virtual_coords, grid) -> bool:
    """Whether the operator emulates a virtual grid (``transport="emulated"``, its
    ``network`` and ``virtual_grid`` given, on one rank); raise on a transport unknown or the
    emulation's arguments given without it."""
    from .comm import TRANSPORTS

    if transport not in TRANSPORTS:
        raise FFTMatvecValueError(
            f"transport must be 'mpi', 'nccl', 'emulated' or None, got {transport!r}")
    if transport != "emulated":
        given = network is not None or virtual_grid is not None
        if given or virtual_coords not in ((0, 0), [0, 0]):
            raise FFTMatvecValueError(
                "network, virtual_grid and virtual_coords go with transport='emulated', got "
                f"transport={transport!r}")
        return False
    from .emulated import machine_model

    machine_model(network)
    if virtual_grid is None:
        raise FFTMatvecValueError("transport='emulated' needs virtual_grid=(rows, cols)")
    if grid.size != 1:
        raise FFTMatvecValueError(
            "transport='emulated' runs one rank of a virtual grid: the communicator must have "
            f"one rank, got {grid.size}")
    return True


def _len(t) -> int:
    return t[1] - t[0]


def _space(space) -> str:
    if space not in _SPACES:
        raise FFTMatvecValueError(f"space must be 'param' or 'obs', got {space!r}")
    return space


def _host(a):
    return a if isinstance(a, np.ndarray) else backend.cupy.asnumpy(a)


class _Chunk:
    """One chunk of an axis of the local block: ``counts`` (rows of each rank of the
    communicator), ``mine`` (this rank's piece of its own slice, ``(start, stop)``),
    ``ranges`` (the chunk's rows of the local block, rank-major: the collective's order) and
    ``span`` (its rows ``(start, stop)`` in the chunk-major order of the pipeline's
    operator)."""

    __slots__ = ("counts", "mine", "ranges", "span")

    def __init__(self, counts, mine, ranges, span):
        self.counts, self.mine, self.ranges, self.span = counts, mine, ranges, span


def _chunks(counts, me: int, chunks: int, minimum: int) -> list[_Chunk]:
    """The chunks of an axis whose rank ``q`` owns ``counts[q]`` rows (:func:`chunk_pieces`),
    for the rank ``me`` of that axis's communicator."""
    from .layout import chunk_pieces

    offs = _starts([(0, n) for n in counts])
    out, start = [], 0
    for pieces in chunk_pieces(counts, chunks, minimum):
        ranges = [(o + a, o + b) for o, (a, b) in zip(offs, pieces) if b > a]
        n = sum(b - a for a, b in ranges)
        out.append(_Chunk([b - a for a, b in pieces], pieces[me], ranges, (start, start + n)))
        start += n
    return out


# binary orders either side of 1 a product's output may reach, by its bound, on a wire of
# float32 (4 bytes) or float64 (8) before the wire is scaled: with the bound's overestimate
# (a few tens of binary orders) the values stay inside each dtype's normal range
_WIRE_WINDOW = {4: 96, 8: 768}


def _checked_exponent(amax, name: str) -> int:
    """:func:`_exponent` of ``amax = (magnitude, check)`` (a float, or a device reduction
    whose value is read now); raise if ``check`` and the magnitude is not finite."""
    a, check = amax
    a = a if isinstance(a, float) else a.value()
    if check and not math.isfinite(a):
        raise _scaling.not_finite_error(name)
    return _exponent(a)


def _exponent(amax: float) -> int:
    """``e`` with ``amax < 2**e`` (``amax >= 2**(e-1)``); :data:`_NO_EXPONENT` for zero, 0
    for NaN or Inf (left unscaled, as :func:`fftmatvec._scaling.scale_exponent` leaves
    them)."""
    if not math.isfinite(amax):
        return 0
    return math.frexp(amax)[1] if amax > 0 else _NO_EXPONENT


def _scale(e: int, dtype, window: int) -> int:
    """:func:`fftmatvec._scaling.scale_exponent` of a magnitude in ``[2**(e-1), 2**e)``."""
    if e == _NO_EXPONENT:
        return 0
    return _scaling.scale_exponent(math.ldexp(0.5, max(-1100, min(1100, e))),
                                   np.dtype(dtype).itemsize, window)


def _nonzero(exp) -> bool:
    """Whether a power of two to apply, an int or an array of them, is not 0."""
    return getattr(exp, "ndim", 0) > 0 or bool(exp)


def _kernel_amax(xp, block) -> float:
    """The largest magnitude of a kernel block, on the host (no temporary of its size)."""
    if not block.size:
        return 0.0
    hi, lo = block.max(), block.min()
    return float(max(float(hi), -float(lo)))


def _starts(ranges) -> list[int]:
    """Where each of ``ranges`` starts once they are laid end to end."""
    out, n = [], 0
    for a, b in ranges:
        out.append(n)
        n += b - a
    return out


def _take(xp, a, ranges, axis: int):
    """The rows ``ranges`` of ``a`` along ``axis``, end to end (a view for one range)."""
    parts = [a[(slice(None),) * axis + (slice(s, e),)] for s, e in ranges]
    return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=axis)
