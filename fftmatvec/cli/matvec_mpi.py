"""``fftmatvec matvec --grid RxC`` under mpiexec/srun: the distributed product.

Every rank reads only its kernel block (:class:`~fftmatvec.DistributedBlockToeplitz` with the
matrix path) and takes its slice of the input; the output is collected and written by rank 0.
A failure on any rank (a missing file, a bad grid) is raised on every rank.
"""

from __future__ import annotations

import time

import numpy as np

from .. import io
from .._errors import FFTMatvecDistributedError, FFTMatvecError, FFTMatvecValueError
from .matvec import MODES, MatvecResult, _array_module, check_request, read_input, relative_error


def parse_grid(text: str):
    """``"auto"`` -> (None, None); ``"RxC"`` -> (R, C)."""
    if text.strip().lower() == "auto":
        return None, None
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise FFTMatvecValueError(f"--grid must be RxC (e.g. 2x4) or auto, got {text!r}")
    return int(parts[0]), int(parts[1])


def _agree(comm, exc) -> None:
    """Raise on every rank if any rank failed its checks. The same refusal on every rank (an
    OUTPUT over an input, a bad option) is raised as the serial command raises it; different
    failures as one :class:`~fftmatvec.FFTMatvecDistributedError` naming each rank's."""
    from ..distributed.comm import sync

    try:
        sync(comm, "fftmatvec matvec", exc, f"(rank {comm.Get_rank()})")
    except FFTMatvecDistributedError as err:
        same = len(err.errors) == comm.Get_size() and len(set(err.errors.values())) == 1
        if same and isinstance(exc, FFTMatvecError):
            raise exc from None
        raise


def execute(request):
    """Returns ``(MatvecResult, rank)``; the result's times are the slowest rank's."""
    from mpi4py import MPI

    from ..distributed import DistributedBlockToeplitz, ProcessGrid
    from ..distributed.comm import sync

    comm = MPI.COMM_WORLD
    exc, x, info = None, None, None
    in_space, out_space, _ = MODES[request.mode]
    try:
        auto = isinstance(check_request(request), tuple)  # the serial command's checks
        rows, cols = parse_grid(request.grid)
        xp = _array_module(request.device)
        info = io.matrix_info(request.matrix)
        x = read_input(request, info, in_space)
    except Exception as e:
        exc = e
    _agree(comm, exc)
    grid = ProcessGrid(comm, rows, cols)
    op = DistributedBlockToeplitz(grid, request.matrix, request.precision,
                                  device="cpu" if xp is np else "gpu",
                                  rtol=request.rtol if auto else None)
    apply = {"forward": op.matvec, "adjoint": op.rmatvec,
             "normal": op.normal().matvec}[request.mode]
    xl = xp.asarray(op.distribute(x, in_space))
    y = apply(xl)  # also the warm-up
    times = []
    for _ in range(request.repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        apply(xl)
        if xp is not np:
            xp.cuda.Device().synchronize()
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    y = op.collect(y, out_space)
    y = np.asarray(y.get() if xp is not np else y, dtype=np.float64)
    err, exc = None, None
    if comm.Get_rank() == 0:
        try:
            if request.check:
                from .matvec import compute

                kernel = io.load_matrix(request.matrix)
                y_ref, _ = compute(kernel, x, mode=request.mode, precision="ddddd", xp=np,
                                   repeat=0)
                err = relative_error(y, y_ref)
            io.save_vector(request.output, y, out_space,
                           checksum=info.checksum if out_space == "param" else 0)
        except Exception as e:
            exc = e
    sync(comm, "fftmatvec matvec", exc, "(writing the output)")
    return MatvecResult(info, tuple(y.shape), times or [float("nan")], err,
                        grid=f"{op.grid.rows}x{op.grid.cols}", precision=op.precision.letters,
                        precision_source=op.precision_source), comm.Get_rank()
