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
received array on the operator's device. On a communicator of one rank a collective is a
copy (no MPI call, no staging). :class:`~fftmatvec.distributed.emulated.EmulatedTransport`
(``"emulated"``) stands in for the collectives of a virtual grid on one rank, for
measurement. :func:`make_transport` picks NCCL only where every rank has a
GPU of its own (NCCL refuses two ranks on one device) and says why in ``transport.reason``.

Progress
--------
MPI without a progress thread advances a non-blocking collective only inside MPI calls, and
the ranks must start the collectives of a communicator in the same order. On a GPU the host
never waits for the device to start a collective: a host-staged send queues the copy of the
device buffer to pinned memory on a staging stream of its own (after the compute stream's work
so far, which goes on meanwhile) and records an event behind it (a GPU-aware send records the
event alone); the collective is queued, and started once its event and those of every
collective queued before it have passed (:meth:`MPITransport.progress`, called between the
products of a pipeline). So the host keeps queueing the next chunks' products while earlier
chunks' data reaches host memory, and one chunk's collectives move while the next is
computed. A wait for a collective not yet started starts those before it in order, testing
the collectives in flight meanwhile.

The helper thread
-----------------
Host-staged MPI on a GPU goes further where MPI allows it: one helper thread per transport
(:class:`CollectiveThread`, made at the first collective) takes each collective in the order
the product queues it, waits for its staging copy's event, posts the MPI call, waits for it
and copies the result back to the device on a stream of its own. The calling thread only
queues device work and hands the collectives over; it never waits for the device or for MPI
before the product's end, where it waits for every collective in order. Every rank queues a
communicator's collectives in one order and the one thread posts them in that order, as MPI
requires. Between a product's first collective and its last wait the helper is the only thread
that calls MPI (the calling thread makes no MPI call until it has waited for them all), so
``MPI_THREAD_SERIALIZED`` is enough; ``MPI_THREAD_MULTIPLE`` (mpi4py's default request) is
used the same way. Below ``MPI_THREAD_SERIALIZED`` (``MPI.Query_thread()``) the transport
drives MPI from the calling thread between the steps, as above. A failure in the helper
(waiting for the device, the copy back) is raised by that collective's ``wait()`` after the
collective has run, with zeros sent in place of the data it could not stage, so the other
ranks' collectives complete and the error reaches every rank at the next sync point.
"""

from __future__ import annotations

import collections
import os
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .. import backend
from .._errors import FFTMatvecDistributedError, FFTMatvecValueError

__all__ = ["sync", "Pending", "CollectiveThread", "MPITransport", "NCCLTransport",
           "make_transport", "gpu_aware_mpi", "shared_device", "TRANSPORTS"]

# the values of an operator's ``transport`` argument (None: chosen per the ranks' devices)
TRANSPORTS = (None, "mpi", "nccl", "emulated")


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
    """A collective: ``wait()`` returns its result on the operator's device.

    One of :class:`MPITransport` may be queued and not yet started (``_start`` set: the
    callable that starts it, once the event ``_ready`` has passed); its transport starts it in
    order."""

    __slots__ = ("_req", "_finish", "_keep", "_done", "_value", "_start", "_ready", "_owner")

    def __init__(self, req, finish, keep=(), start=None, ready=None, owner=None):
        self._req, self._finish, self._keep = req, finish, keep
        self._start, self._ready, self._owner = start, ready, owner
        self._done, self._value = False, None

    @property
    def done(self) -> bool:
        """True once waited for."""
        return self._done

    @property
    def started(self) -> bool:
        return self._start is None

    def test(self) -> bool:
        """Drive progress (MPI without a progress thread advances only inside its calls);
        True once the collective has completed (False while it is not started)."""
        if self._done:
            return True
        if self._start is not None:
            return False
        return self._req is None or bool(self._req.Test())

    def wait(self):
        if not self._done:
            if self._owner is not None:
                self._owner.complete(self)
            elif self._req is not None:
                self._req.Wait()
            self._value, self._done = self._finish(), True
            self._keep = ()
        return self._value


def _mpi_type(dtype):
    from mpi4py.util import dtlib

    return dtlib.from_numpy_dtype(np.dtype(dtype))


def _alone(xp, a, dtype) -> Pending:
    """A collective over one rank: ``a`` in the wire dtype (a copy), at once."""
    out = xp.array(a, dtype=dtype, order="C", copy=True)
    return Pending(None, lambda: out)


class CollectiveThread:
    """One helper thread that runs collectives one after another, in the order submitted.

    Transport-independent: a collective is three callables. The thread calls ``ready()``
    (waits until its data may be read), ``start()`` (posts it and returns a request with a
    ``Wait()``, or None), waits for the request, and returns ``finish()`` (its result) through
    the :class:`concurrent.futures.Future` that :meth:`submit` returns. Where ``ready()``
    raises, ``spoil()`` makes the data zeros and the collective is posted all the same (the
    other ranks' collectives complete); its future then raises the failure after the
    collective. The thread is made at the first :meth:`submit` and ends at :meth:`close`
    (or when the object is collected).
    """

    def __init__(self, name: str = "fftmatvec-mpi"):
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._futures: collections.deque = collections.deque()  # submitted, in order

    @property
    def pending(self) -> int:
        """Collectives submitted and not yet finished."""
        return sum(not f.done() for f in self._futures)

    def submit(self, ready, start, finish, spoil=None) -> Future:
        """Queue a collective (the class's notes); returns its future."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        while self._futures and self._futures[0].done():
            self._futures.popleft()
        fut = self._pool.submit(_run_collective, ready, start, finish, spoil)
        self._futures.append(fut)
        return fut

    def drain(self) -> BaseException | None:
        """Wait for every collective submitted, in order; the first failure, or None."""
        first = None
        while self._futures:
            exc = self._futures.popleft().exception()
            if first is None:
                first = exc
        return first

    def close(self) -> None:
        """Wait for the collectives submitted, then end the thread (a later :meth:`submit`
        makes another)."""
        self.drain()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _run_collective(ready, start, finish, spoil):
    """One collective on the helper thread (:class:`CollectiveThread`)."""
    failed = None
    try:
        ready()
    except BaseException as exc:  # post zeros: the other ranks' collectives complete
        failed = exc
        if spoil is not None:
            spoil()
    req = start()
    if req is not None:
        req.Wait()
    if failed is not None:
        raise failed
    return finish()


def _thread_level_allows_helper() -> bool:
    """Whether MPI was initialised with at least ``MPI_THREAD_SERIALIZED`` (the helper thread
    is then the only thread calling MPI while collectives are pending)."""
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_SERIALIZED


class MPITransport:
    """Collectives through mpi4py on NumPy buffers, or CuPy ones (direct or host-staged).

    Every collective takes its input in the layout ``(n, ...)`` with the distributed axis
    first, casts it to the wire dtype ``dtype`` and returns ``(n_total, ...)`` in that dtype.
    On a GPU a collective is queued behind an event and started, in order, once the device has
    written its data (see the module's notes); host-staged, by the helper thread where MPI's
    thread level allows it.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``.
    gpu_aware : bool, optional
        Whether CuPy buffers go to MPI directly; None: :func:`gpu_aware_mpi`.
    reason : str
        Why this transport was chosen (:attr:`reason`).
    helper : bool, optional
        Run the collectives on a helper thread (:class:`CollectiveThread`, the module's
        notes). None: for host-staged CuPy buffers where MPI was initialised with at least
        ``MPI_THREAD_SERIALIZED``, else not (a CPU rank computes on the calling thread and
        waits in MPI; a GPU-aware MPI starts its collectives behind events). True forces it
        on NumPy buffers too (the same thread on the CPU, for tests).

    Raises
    ------
    FFTMatvecValueError
        ``helper=True`` where MPI's thread level is below ``MPI_THREAD_SERIALIZED``.
    """

    name = "mpi"

    def __init__(self, xp, gpu_aware: bool | None = None, reason: str = "",
                 helper: bool | None = None):
        self.xp = xp
        self.direct = xp is np or (gpu_aware_mpi() if gpu_aware is None else bool(gpu_aware))
        self.reason = reason
        self._queue: collections.deque = collections.deque()  # queued, not started, in order
        self._inflight: list = []  # started, not yet seen complete
        self._staging = None  # the host-staged copies' CUDA stream, made at the first
        self._landing = None  # the helper's copies back to the device, its own CUDA stream
        staged = xp is not np and not self.direct
        if helper is None:
            helper = staged and _thread_level_allows_helper()
            if staged and not helper:
                self.reason += ("; MPI's thread level is below MPI_THREAD_SERIALIZED: the "
                                "collectives are driven from the calling thread")
        elif helper and not _thread_level_allows_helper():
            raise FFTMatvecValueError(
                "helper=True needs MPI initialised with at least MPI_THREAD_SERIALIZED, got "
                "a lower level (MPI.Query_thread())")
        self._helper = CollectiveThread() if helper else None
        # the device the helper's copies back run on (the current one at construction)
        self._device_id = xp.cuda.Device().id if helper and staged else None

    @property
    def helper(self) -> bool:
        """Whether the collectives run on the helper thread (the module's notes)."""
        return self._helper is not None

    def drain(self) -> BaseException | None:
        """Wait for every collective handed to the helper thread; the first failure, or
        None (nothing to wait for without the helper: the caller's waits drive MPI)."""
        return None if self._helper is None else self._helper.drain()

    def close(self) -> None:
        """Wait for the collectives pending and end the helper thread, if any."""
        if self._helper is not None:
            self._helper.close()

    @property
    def staging(self) -> str:
        """``"host"`` (NumPy, or CuPy buffers copied through pinned host memory) or
        ``"device"`` (CuPy buffers given to a GPU-aware MPI)."""
        return "device" if self.xp is not np and self.direct else "host"

    @property
    def in_flight(self) -> int:
        """Collectives queued or started and neither waited for nor seen complete by
        :meth:`progress`."""
        helper = 0 if self._helper is None else self._helper.pending
        return len(self._queue) + sum(not p.done for p in self._inflight) + helper

    def _launch(self) -> None:
        """Start the queued collectives, in order, while the first one's event has passed."""
        q = self._queue
        while q and (q[0]._ready is None or q[0]._ready.done):
            p = q.popleft()
            p._req, p._start, p._ready = p._start(), None, None
            self._inflight.append(p)

    def progress(self) -> None:
        """Start the queued collectives whose data is ready, test those in flight once, and
        forget those that have completed."""
        self._launch()
        self._inflight = [p for p in self._inflight if not p.test()]

    def until(self, event) -> None:
        """Return once the device ``event`` has passed, starting and testing the collectives
        meanwhile (with none in flight, a plain wait)."""
        while not event.done:
            self.progress()
            if not self._inflight and not self._queue:
                event.synchronize()
                return

    def complete(self, pend: Pending) -> None:
        """Wait until ``pend`` (one of this transport's) has completed: first start it and
        those queued before it, as their events pass; on a GPU keep starting and testing the
        others meanwhile (a CPU rank waits in MPI: ranks may share its cores)."""
        while not pend.started:
            self.until(self._queue[0]._ready)
            self._launch()
        if self.xp is np:
            if pend._req is not None:
                pend._req.Wait()
            return
        while not pend.test():
            self.progress()

    def _pending(self, start, finish, keep, ready=None, spoil=None) -> Pending:
        """Queue the collective that ``start()`` starts (returning its request) once the
        device event ``ready`` (None: none) and those queued before it have passed; with the
        helper thread, hand it over (``finish()`` runs there too, and ``spoil()`` zeros the
        send buffer if waiting for ``ready`` fails)."""
        if self._helper is not None:
            wait = (lambda: None) if ready is None else ready.synchronize
            fut = self._helper.submit(wait, start, finish, spoil)
            return Pending(None, fut.result, keep)
        pend = Pending(None, finish, keep, start=start, ready=ready, owner=self)
        self._inflight = [p for p in self._inflight if not p.done]
        self._queue.append(pend)
        self._launch()
        return pend

    def _send(self, a, dtype):
        """``(buffer MPI reads, event after which it may, what must stay alive until then)``:
        ``a`` in the wire dtype, contiguous; on a GPU copied to pinned memory unless MPI is
        GPU-aware. Nothing waits for the device."""
        xp = self.xp
        a = xp.ascontiguousarray(a, dtype=dtype)
        if xp is np:
            return a, None, ()
        stream = xp.cuda.get_current_stream()
        if self.direct:
            return a, stream.record(), ()
        import cupyx

        # the copy to host memory on a staging stream of its own, after the compute stream's
        # work so far: the compute stream goes on with the next chunks meanwhile
        if self._staging is None:
            self._staging = xp.cuda.Stream(non_blocking=True)
        staging = self._staging
        staging.wait_event(stream.record())
        host = cupyx.empty_pinned(a.shape, dtype=a.dtype)
        if a.nbytes:
            xp.cuda.runtime.memcpyAsync(host.ctypes.data, a.data.ptr, a.nbytes,
                                        xp.cuda.runtime.memcpyDeviceToHost, staging.ptr)
        if self._helper is None:
            return host, staging.record(), (a,)
        # the helper thread waits for this event: a blocking one yields the CPU meanwhile
        done = xp.cuda.Event(block=True, disable_timing=True)
        done.record(staging)
        return host, done, (a,)

    def _empty(self, shape, dtype):
        if self.xp is not np and self.direct:
            return self.xp.empty(shape, dtype=dtype)
        return np.empty(shape, dtype=dtype)

    def _back(self, a):
        """What gives a collective's result from its receive buffer ``a``: ``a`` itself, or
        ``a`` copied to the device. With the helper thread the device array is made now, on
        the calling thread's stream (after the work queued so far, which the staging copy's
        event covers), and the helper copies into it on a stream of its own and waits for
        the copy, so the calling thread's stream may use it at once."""
        xp = self.xp
        if xp is np or self.direct:
            return lambda: a
        if self._helper is None:
            return lambda: xp.asarray(a)
        out = xp.empty(a.shape, dtype=a.dtype)

        def land():
            with xp.cuda.Device(self._device_id):
                if self._landing is None:
                    self._landing = xp.cuda.Stream(non_blocking=True)
                if a.size:
                    out.set(a, stream=self._landing)
                    self._landing.synchronize()
            return out

        return land

    def _zeros(self, send):
        """What zeros a staged send buffer (a copy in pinned memory), or None where ``send``
        may be the caller's own array."""
        if self.xp is np or self.direct:
            return None
        return lambda: send.fill(0)

    def allgatherv(self, comm, a, counts, dtype) -> Pending:
        """Concatenate every rank's ``a`` (``counts[q]`` rows from rank ``q``) on every rank."""
        if comm.Get_size() == 1:
            return _alone(self.xp, a, dtype)
        rest = a.shape[1:]
        per = int(np.prod(rest, dtype=np.int64))
        send, ready, keep = self._send(a, dtype)
        recv = self._empty((int(sum(counts)),) + tuple(rest), dtype)
        cnt = [int(n) * per for n in counts]
        displs = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(int).tolist()
        return self._pending(
            lambda: comm.Iallgatherv(send, [recv, cnt, displs, _mpi_type(dtype)]),
            self._back(recv), (send, *keep), ready, self._zeros(send))

    def reduce_scatter(self, comm, a, counts, dtype, device: bool = True) -> Pending:
        """Sum ``a`` over the ranks and give rank ``q`` its ``counts[q]`` rows of the sum.
        ``device=False``: a host-staged result stays in host memory (the caller assembles
        several and copies them to the device at once: on a GPU shared by several processes
        each small copy waits for the device to switch between them)."""
        from mpi4py import MPI

        if comm.Get_size() == 1:
            return _alone(self.xp, a, dtype)
        rest = a.shape[1:]
        per = int(np.prod(rest, dtype=np.int64))
        send, ready, keep = self._send(a, dtype)
        recv = self._empty((int(counts[comm.Get_rank()]),) + tuple(rest), dtype)
        cnt = [int(n) * per for n in counts]
        back = self._back(recv) if device else (lambda: recv)
        return self._pending(lambda: comm.Ireduce_scatter(send, recv, cnt, op=MPI.SUM),
                             back, (send, *keep), ready, self._zeros(send))

    def allreduce(self, comm, a, dtype) -> Pending:
        """Sum ``a`` over the ranks, on every rank."""
        from mpi4py import MPI

        if comm.Get_size() == 1:
            return _alone(self.xp, a, dtype)
        send, ready, keep = self._send(a, dtype)
        recv = self._empty(send.shape, dtype)
        return self._pending(lambda: comm.Iallreduce(send, recv, op=MPI.SUM),
                             self._back(recv), (send, *keep), ready, self._zeros(send))


class NCCLTransport:
    """Collectives through NCCL/RCCL (``cupy.cuda.nccl``) on a stream of their own.

    Each MPI communicator gets an NCCL communicator (its unique id broadcast over MPI). The
    stream waits on the compute stream before a collective starts, and ``wait()`` makes the
    compute stream wait on the collective's event: the host never blocks, so one chunk's
    communication runs while the next is computed.
    """

    name = "nccl"

    def __init__(self, xp, reason: str = "", alone: bool = True):
        """``alone``: on a communicator of one rank a collective is a copy (False: through
        NCCL all the same, so that its calls run on one GPU)."""
        if xp is np or not backend.has_cupy:
            raise FFTMatvecValueError("the NCCL transport needs a GPU operator (CuPy)")
        from cupy.cuda import nccl

        self.xp, self._nccl, self.reason, self._alone = xp, nccl, reason, bool(alone)
        self.staging = "device"
        self._comms: dict = {}
        self.stream = xp.cuda.Stream(non_blocking=True)

    def progress(self) -> None:
        """Nothing to drive: NCCL moves on its stream by itself."""

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
        if comm.Get_size() == 1 and self._alone:
            return _alone(self.xp, a, dtype)
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
        if comm.Get_size() == 1 and self._alone:
            return _alone(self.xp, a, dtype)
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
        if comm.Get_size() == 1 and self._alone:
            return _alone(self.xp, a, dtype)
        xp, nccl = self.xp, self._nccl
        nc = self._comm(comm)
        send = xp.ascontiguousarray(a, dtype=dtype)
        out = xp.empty_like(send)
        self._start()
        nc.allReduce(send.data.ptr, out.data.ptr, send.size, self._types(dtype), nccl.NCCL_SUM,
                     self.stream.ptr)
        return self._pending(out, send)


def shared_device(seen) -> str:
    """Given each rank's ``(host, device)``, in rank order: ``""`` when no two ranks have the
    same device, else which two ranks share which device (the first such pair)."""
    first: dict = {}
    for q, key in enumerate(seen):
        key = tuple(key)
        if key in first:
            return f"ranks {first[key]} and {q} share GPU {key[1]} on {key[0]}"
        first[key] = q
    return ""


def _device_key(xp) -> tuple:
    """``(host name, PCI bus id)`` of the current GPU (its id where the bus id is unknown:
    ranks with different visible devices then look alike, which errs towards MPI)."""
    import socket

    dev = xp.cuda.Device()
    try:
        bus = str(xp.cuda.runtime.deviceGetPCIBusId(dev.id))
    except Exception:
        bus = f"device {dev.id}"
    return (socket.gethostname(), bus)


def _nccl_missing() -> str:
    """``""`` when ``cupy.cuda.nccl`` can be used here, else why not."""
    try:
        from cupy.cuda import nccl
    except Exception as exc:
        return f"cupy.cuda.nccl does not import ({type(exc).__name__}: {exc})"
    if not getattr(nccl, "available", True):
        return "CuPy was built without NCCL"
    return ""


def make_transport(xp, transport: str | None, comm=None, network=None):
    """The transport of an operator on ``xp`` (``numpy`` or ``cupy``).

    ``"mpi"``; ``"nccl"``; ``"emulated"`` (the collectives of a virtual grid replaced by
    communication-shaped work under the machine model ``network``: :mod:`.emulated`); or None:
    NCCL for a GPU operator when ``cupy.cuda.nccl`` can be used on every rank and every rank
    has a GPU of its own (NCCL refuses two ranks on one device, ``ncclInvalidUsage``), else
    MPI. The transport's ``reason`` says why. For a GPU
    operator with ``comm`` given, the ranks compare their devices and NCCL's availability (a
    collective: every rank must pass the same ``transport``); ``"nccl"`` then raises on every
    rank where it cannot work, before any NCCL communicator is made.
    """
    if transport not in TRANSPORTS:
        raise FFTMatvecValueError(
            f"transport must be 'mpi', 'nccl', 'emulated' or None, got {transport!r}")
    if transport == "emulated":
        from .emulated import EmulatedTransport

        return EmulatedTransport(xp, network)
    if xp is np:
        if transport == "nccl":
            raise FFTMatvecValueError("the NCCL transport needs a GPU operator (CuPy)")
        return MPITransport(xp, reason="a CPU operator: MPI on NumPy buffers")
    if transport == "mpi":
        return MPITransport(xp, reason="transport='mpi' was asked for")
    missing, shared = _nccl_missing(), ""
    if comm is not None:
        seen = comm.allgather((missing, _device_key(xp)))
        lacking = [q for q, s in enumerate(seen) if s[0]]
        if lacking:
            missing = f"{seen[lacking[0]][0]} on rank(s) {', '.join(map(str, lacking))}"
        shared = shared_device([s[1] for s in seen])
    if transport == "nccl":
        if missing:
            raise FFTMatvecValueError(f"transport='nccl': {missing}")
        if shared:
            raise FFTMatvecValueError(
                f"transport='nccl': {shared}, and NCCL needs a GPU per rank (it refuses two "
                "ranks on one device); use transport='mpi' or None for ranks sharing a GPU")
        return NCCLTransport(xp, reason="transport='nccl' was asked for")
    if missing:
        return MPITransport(xp, reason=f"NCCL cannot be used: {missing}")
    if shared:
        return MPITransport(xp, reason=f"{shared} (NCCL refuses two ranks on one device)")
    return NCCLTransport(xp, reason="every rank has a GPU of its own" if comm is not None
                         else "a GPU operator (devices not compared: no communicator)")
