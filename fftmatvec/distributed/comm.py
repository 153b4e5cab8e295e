"""Collectives, their transports, and error propagation.

Errors never hang: every rank reaches the same sync points (:func:`sync`), where one
``Allreduce`` of a flag tells all of them whether any failed; if one did, the messages are
gathered and every rank raises :class:`~fftmatvec._errors.FFTMatvecDistributedError` naming
the ranks and causes. A rank that fails between sync points keeps taking part in the
collectives (with zeros of the right size) until the next one.

Transports
----------
:class:`MPITransport` moves NumPy buffers, or CuPy ones: passed to MPI directly when the MPI
library is GPU-aware (``FFTMATVEC_GPU_AWARE_MPI=1`` or ``0`` decides; else detected from
``MPICH_GPU_SUPPORT_ENABLED=1`` or mpi4py's ``Query_cuda_support``), host-staged when not.
:class:`NCCLTransport` (``cupy.cuda.nccl``) runs the collectives on its own CUDA stream; an
all-gather of unequal slices is a group of broadcasts, a reduce-scatter a group of reduces.
Every collective is non-blocking and returns a :class:`Pending` whose ``wait()`` gives the
received array on the operator's device.
"""

from __future__ import annotations

import os

import numpy as np

from .. import backend
from .._errors import FFTMatvecDistributedError, FFTMatvecValueError

__all__ = ["sync", "Pending", "MPITransport", "NCCLTransport", "make_transport", "gpu_aware_mpi"]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, FFTMatvecDistributedError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def sync(comm, what: str, exc: BaseException | None, where: str = "", values=()) -> list:
    """A sync point: raise on every rank if ``exc`` is set on any, else return the ints
    ``values`` reduced by max over the ranks.

    Parameters
    ----------
    comm : mpi4py communicator
    what : str
        The operation, for the message (``"matvec"``).
    exc : exception or None
        This rank's failure since the last sync point.
    where : str
        This rank's description (its grid coordinates), for the message.
    values : sequence of int
        Small integers to check or agree on; returned as their maximum over the ranks (pass
        ``v`` and ``-v`` to get the max and minus the min at once).
    """
    from mpi4py import MPI

    buf = np.array([0 if exc is None else 1, *values], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
    if buf[0]:
        mine = None if exc is None else (where, _describe(exc))
        seen = comm.allgather(mine)
        errors = {q: f"{s[1]}" for q, s in enumerate(seen) if s is not None}
        lines = "; ".join(f"rank {q}{' ' + seen[q][0] if seen[q][0] else ''}: {m}"
                          for q, m in errors.items())
        err = FFTMatvecDistributedError(f"{what} failed on {len(errors)} of {comm.Get_size()} "
                                        f"rank(s): {lines}", errors)
        if exc is not None:
            raise err from exc
        raise err
    return [int(v) for v in buf[1:]]


def gpu_aware_mpi() -> bool:
    """Whether CuPy buffers may be given to MPI directly (see the module's notes)."""
    env = os.environ.get("FFTMATVEC_GPU_AWARE_MPI", "").strip()
    if env in ("0", "1"):
        return env == "1"
    if env:
        raise FFTMatvecValueError(f"FFTMATVEC_GPU_AWARE_MPI must be 0 or 1, got {env!r}")
    if os.environ.get("MPICH_GPU_SUPPORT_ENABLED", "") == "1":
        return True
    from mpi4py import MPI

    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        try:
            return bool(query())
        except Exception:
            return False
    return False


class Pending:
    """A started collective: ``wait()`` returns its result on the operator's device."""

    __slots__ = ("_req", "_finish", "_keep", "_done", "_value")

    def __init__(self, req, finish, keep=()):
        self._req, self._finish, self._keep = req, finish, keep
        self._done, self._value = False, None

    def test(self) -> None:
        """Drive progress (MPI without a progress thread advances only inside its calls)."""
        if self._req is not None and not self._done:
            self._req.Test()

    def wait(self):
        if not self._done:
            if self._req is not None:
                self._req.Wait()
            self._value, self._done = self._finish(), True
            self._keep = ()
        return self._value


def _mpi_type(dtype):
    from mpi4py.util import dtlib

    return dtlib.from_numpy_dtype(np.dtype(dtype))


class MPITransport:
    """Collectives through mpi4py on NumPy buffers, or CuPy ones (direct or host-staged).

    Every collective takes its input in the layout ``(n, ...)`` with the distributed axis
    first, casts it to the wire dtype ``dtype`` and returns ``(n_total, ...)`` in that dtype.
    """

    name = "mpi"

    def __init__(self, xp, gpu_aware: bool | None = None):
        self.xp = xp
        self.direct = xp is np or (gpu_aware_mpi() if gpu_aware is None else bool(gpu_aware))

    def _send(self, a, dtype):
        xp = self.xp
        a = xp.ascontiguousarray(a, dtype=dtype)
        if xp is np:
            return a
        if self.direct:
            xp.cuda.get_current_stream().synchronize()
            return a
        return backend.cupy.asnumpy(a)

    def _empty(self, shape, dtype):
        if self.xp is not np and self.direct:
            return self.xp.empty(shape, dtype=dtype)
        return np.empty(shape, dtype=dtype)

    def _back(self, a):
        return a if self.xp is np or self.direct else self.xp.asarray(a)

    def allgatherv(self, comm, a, counts, dtype) -> Pending:
        """Concatenate every rank's ``a`` (``counts[q]`` rows from rank ``q``) on every rank."""
        rest = a.shape[1:]
        per = int(np.prod(rest, dtype=np.int64))
        send = self._send(a, dtype)
        recv = self._empty((int(sum(counts)),) + tuple(rest), dtype)
        cnt = [int(n) * per for n in counts]
        displs = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(int).tolist()
        req = comm.Iallgatherv(send, [recv, cnt, displs, _mpi_type(dtype)])
        return Pending(req, lambda: self._back(recv), (send,))

    def reduce_scatter(self, comm, a, counts, dtype) -> Pending:
        """Sum ``a`` over the ranks and give rank ``q`` its ``counts[q]`` rows of the sum."""
        from mpi4py import MPI

        rest = a.shape[1:]
        per = int(np.prod(rest, dtype=np.int64))
        send = self._send(a, dtype)
        recv = self._empty((int(counts[comm.Get_rank()]),) + tuple(rest), dtype)
        req = comm.Ireduce_scatter(send, recv, [int(n) * per for n in counts], op=MPI.SUM)
        return Pending(req, lambda: self._back(recv), (send,))

    def allreduce(self, comm, a, dtype) -> Pending:
        """Sum ``a`` over the ranks, on every rank."""
        from mpi4py import MPI

        send = self._send(a, dtype)
        recv = self._empty(send.shape, dtype)
        req = comm.Iallreduce(send, recv, op=MPI.SUM)
        return Pending(req, lambda: self._back(recv), (send,))


class NCCLTransport:
    """Collectives through NCCL/RCCL (``cupy.cuda.nccl``) on a stream of their own.

    Each MPI communicator gets an NCCL communicator (its unique id broadcast over MPI). The
    stream waits on the compute stream before a collective starts, and ``wait()`` makes the
    compute stream wait on the collective's event: the host never blocks, so one chunk's
    communication runs while the next is computed.
    """

    name = "nccl"

    def __init__(self, xp):
        if xp is np or not backend.has_cupy:
            raise FFTMatvecValueError("the NCCL transport needs a GPU operator (CuPy)")
        from cupy.cuda import nccl

        self.xp, self._nccl = xp, nccl
        self._comms: dict = {}
        self.stream = xp.cuda.Stream(non_blocking=True)

    def _comm(self, comm):
        key = comm.py2f()
        if key not in self._comms:
            nccl = self._nccl
            uid = nccl.get_unique_id() if comm.Get_rank() == 0 else None
            uid = comm.bcast(uid, root=0)
            self._comms[key] = nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank())
        return self._comms[key]

    def _types(self, dtype):
        nccl = self._nccl
        return {np.dtype(np.float32): nccl.NCCL_FLOAT32,
                np.dtype(np.float64): nccl.NCCL_FLOAT64}[np.dtype(dtype)]

    def _start(self):
        xp = self.xp
        ev = xp.cuda.get_current_stream().record()
        self.stream.wait_event(ev)

    def _pending(self, out, send):
        ev = self.stream.record()
        xp = self.xp

        def finish():
            xp.cuda.get_current_stream().wait_event(ev)
            return out

        return Pending(None, finish, (send,))  # send stays alive until the collective ends

    def _operands(self, comm, a, dtype):
        """(NCCL communicator, trailing shape of a row, elements per row, ``a`` contiguous in
        ``dtype``) of a collective over rows of ``a``."""
        rest = a.shape[1:]
        return (self._comm(comm), rest, int(np.prod(rest, dtype=np.int64)),
                self.xp.ascontiguousarray(a, dtype=dtype))

    def allgatherv(self, comm, a, counts, dtype) -> Pending:
        xp, nccl = self.xp, self._nccl
        nc, rest, per, send = self._operands(comm, a, dtype)
        out = xp.empty((int(sum(counts)),) + tuple(rest), dtype=dtype)
        me = comm.Get_rank()
        offs = np.concatenate([[0], np.cumsum([int(n) for n in counts])]).astype(int)
        out[offs[me]:offs[me + 1]] = send  # on the compute stream, before _start's event
        self._start()
        nccl.groupStart()
        for q, n in enumerate(counts):
            if int(n):
                nc.bcast(out[offs[q]:offs[q + 1]].data.ptr, int(n) * per, self._types(dtype), q,
                         self.stream.ptr)
        nccl.groupEnd()
        return self._pending(out, send)

    def reduce_scatter(self, comm, a, counts, dtype) -> Pending:
        xp, nccl = self.xp, self._nccl
        nc, rest, per, send = self._operands(comm, a, dtype)
        me = comm.Get_rank()
        out = xp.empty((int(counts[me]),) + tuple(rest), dtype=dtype)
        self._start()
        off = 0
        nccl.groupStart()
        for q, n in enumerate(counts):
            n = int(n)
            if n:
                dst = out.data.ptr if q == me else send[off:off + n].data.ptr
                nc.reduce(send[off:off + n].data.ptr, dst, n * per, self._types(dtype),
                          nccl.NCCL_SUM, q, self.stream.ptr)
            off += n
        nccl.groupEnd()
        return self._pending(out, send)

    def allreduce(self, comm, a, dtype) -> Pending:
        xp, nccl = self.xp, self._nccl
        nc = self._comm(comm)
        send = xp.ascontiguousarray(a, dtype=dtype)
        out = xp.empty_like(send)
        self._start()
        nc.allReduce(send.data.ptr, out.data.ptr, send.size, self._types(dtype), nccl.NCCL_SUM,
                     self.stream.ptr)
        return self._pending(out, send)


def make_transport(xp, transport: str | None, comm=None):
    """``"mpi"``, ``"nccl"``, or None: NCCL for a GPU operator when ``cupy.cuda.nccl``
    imports and every rank has a GPU of its own (NCCL refuses ranks sharing a device), else
    MPI. Collective when ``transport`` is None on a GPU (the ranks compare their devices)."""
    if transport not in (None, "mpi", "nccl"):
        raise FFTMatvecValueError(f"transport must be 'mpi', 'nccl' or None, got {transport!r}")
    if transport == "mpi" or (transport is None and xp is np):
        return MPITransport(xp)
    if transport is None:
        try:
            from cupy.cuda import nccl

            ok = bool(getattr(nccl, "available", True))
        except Exception:
            ok = False
        if comm is not None:
            import socket

            dev = xp.cuda.Device()
            pci = xp.cuda.runtime.deviceGetPCIBusId(dev.id)
            seen = comm.allgather((ok, socket.gethostname(), pci))
            ok = all(s[0] for s in seen) and len({s[1:] for s in seen}) == len(seen)
        if not ok:
            return MPITransport(xp)
    return NCCLTransport(xp)
