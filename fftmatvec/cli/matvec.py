"""``fftmatvec matvec``: apply F, F^T or F^T F from a matrix file to a vector file.

The work is split into steps that each take what they need explicitly, so that a distributed
version can run the same command under ``mpiexec``/``srun``: :func:`local_blocks` says which
block rows and columns this process owns (all of them on one process), :func:`compute` takes
the loaded kernel block and input block and returns the output block with its timings, and
only the output writer would gather. Nothing lives in module-level state.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from .. import _writes, backend, io
from .._errors import FFTMatvecFileError, FFTMatvecValueError
from ..io import _write as io_write
from . import positive_int

# mode -> (input space, output space, how the product prints)
MODES = {
    "forward": ("param", "obs", "F m"),
    "adjoint": ("obs", "param", "F^T d"),
    "normal": ("param", "param", "F^T F m"),
}


def register(sub) -> None:
    p = sub.add_parser(
        "matvec",
        help="apply F, F^T or F^T F from a matrix file to a vector file",
        description=(
            "Apply the block-triangular Toeplitz matrix in MATRIX (an FFTMatvec matrix directory "
            "or a native .h5 file) to the vector file INPUT and write the vector file OUTPUT "
            "(atomically). Prints the median time of the repeats."
        ),
    )
    p.add_argument("matrix", metavar="MATRIX", help="FFTMatvec matrix directory or native .h5 file")
    p.add_argument("input", metavar="INPUT", help="input vector file (FFTMatvec's vec format)")
    p.add_argument("output", metavar="OUTPUT", help="output vector file, replaced if it exists (never MATRIX or "
                                             "INPUT, nor inside them)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--adjoint", action="store_true", help="apply F^T (INPUT in observation space)")
    which.add_argument("--normal", action="store_true", help="apply F^T F (INPUT in parameter space)")
    p.add_argument("--precision", default="ddddd", metavar="STR",
                   help="five letters, one per stage, from d/s ('h' for stage 3), e.g. dssdd "
                        "(default: ddddd)")
    p.add_argument("--rtol", type=float, default=None, metavar="X",
                   help="with --precision auto: the relative error wanted (default 1e-6)")
    p.add_argument("--repeat", type=positive_int, default=10, metavar="N",
                   help="timed applications after one warm-up (default: 10)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="cpu: NumPy; gpu: CuPy on the current device (default: cpu)")
    p.add_argument("--check", action="store_true",
                   help="also print the relative error against the float64 NumPy path")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="also print the plan the product runs (kernels, FFTs, split-K, graphs), "
                        "and log the package's steps on stderr (-vv: with debugging detail)")
    p.add_argument("--grid", default=None, metavar="RxC",
                   help="run distributed over the MPI ranks (under mpiexec/srun) on an R x C "
                        "process grid, or 'auto' for the cost model's choice (the default "
                        "when launched on more than one rank)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class MatvecRequest:
    """One ``fftmatvec matvec`` invocation."""

    matrix: str
    input: str
    output: str
    mode: str = "forward"
    precision: str = "ddddd"
    repeat: int = 10
    device: str = "cpu"
    check: bool = False
    rtol: float | None = None
    verbose: bool = False
    grid: str | None = None

    @classmethod
    def from_args(cls, args) -> "MatvecRequest":
        mode = "adjoint" if args.adjoint else "normal" if args.normal else "forward"
        grid = getattr(args, "grid", None)
        if grid is None and _launched_ranks() > 1:
            grid = "auto"
        return cls(args.matrix, args.input, args.output, mode, args.precision, args.repeat,
                   args.device, args.check, getattr(args, "rtol", None),
                   bool(getattr(args, "verbose", False)), grid)


@dataclass(frozen=True)
class MatvecResult:
    info: io.MatrixInfo
    output_shape: tuple
    times: list
    rel_err: float | None
    plan: str | None = None
    grid: str | None = None
    precision: str | None = None  # the five letters run (those --precision auto chose)
    precision_source: str | None = None  # where they came from (BlockToeplitz.precision_source)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def run(args) -> int:
    request = MatvecRequest.from_args(args)
    if request.grid is not None:
        from . import matvec_mpi

        result, rank = matvec_mpi.execute(request)
        if rank == 0:
            print(report(request, result))
        return 0
    result = execute(request)
    print(report(request, result))
    return 0


def _launched_ranks() -> int:
    """The number of ranks the launcher started, from its environment (1 when none)."""
    import os

    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def check_request(request: MatvecRequest):
    """The checks every run makes before it reads or computes anything, on one process or on
    every rank of a grid: no path empty, OUTPUT neither MATRIX nor INPUT nor inside them, nor
    a file the output vector may not replace (a matrix file, a missing folder), ``--rtol``
    only with ``--precision auto``, a valid precision string.

    Returns
    -------
    PrecisionConfig or ("auto", rtol)
        The precision to build the operator with.

    Raises
    ------
    FFTMatvecFileError, FFTMatvecValueError
        The first check that fails.
    """
    from ..precision import PrecisionConfig

    _writes.check_not_inside(request.output, {"MATRIX": request.matrix, "INPUT": request.input},
                             "OUTPUT")
    try:
        io_write._check_destination(request.output, io_write._VECTOR_KIND, None)
    except FFTMatvecFileError as exc:
        raise FFTMatvecFileError(exc.path, f"OUTPUT: {exc}") from None
    auto = request.precision.strip().lower() == "auto"
    if request.rtol is not None and not auto:
        raise FFTMatvecValueError(f"--rtol is only for --precision auto, got {request.precision!r}")
    return ("auto", request.rtol) if auto else PrecisionConfig(request.precision)


def execute(request: MatvecRequest) -> MatvecResult:
    """Read, compute, check, write. Raises :class:`~fftmatvec.FFTMatvecError` on bad input."""
    precision = check_request(request)
    xp = _array_module(request.device)
    info = io.matrix_info(request.matrix)
    in_space, out_space, _ = MODES[request.mode]
    rows, cols = local_blocks(info)
    x = read_input(request, info, in_space)
    kernel = io.load_matrix(request.matrix, rows=rows, cols=cols)
    plans: list | None = [] if request.verbose else None
    chosen: dict = {}
    y, times = compute(kernel, x, mode=request.mode, precision=precision, xp=xp,
                       repeat=request.repeat, plans=plans, chosen=chosen)
    err = None
    if request.check:
        y_ref, _ = compute(kernel, x, mode=request.mode, precision="ddddd", xp=np, repeat=0)
        err = relative_error(y, y_ref)
    io.save_vector(request.output, y, out_space,
                   checksum=info.checksum if out_space == "param" else 0)
    return MatvecResult(info, tuple(y.shape), times, err, "\n".join(plans) if plans else None,
                        precision=chosen["precision"], precision_source=chosen["source"])


def local_blocks(info: io.MatrixInfo):
    """Block rows and columns of the kernel this process reads: everything, on one process.

    A process grid would return its ``(rows, cols)`` slices here."""
    return slice(0, info.nd), slice(0, info.nm)


def read_input(request: MatvecRequest, info: io.MatrixInfo, space: str) -> np.ndarray:
    """Read INPUT after checking that its space and shape fit the matrix."""
    _, _, product = MODES[request.mode]
    n = info.nm if space == "param" else info.nd
    vinfo = io.vector_info(request.input)
    want = "a parameter-space" if space == "param" else "an observation-space"
    if vinfo.space != space or vinfo.shape != (n, info.nt):
        got = "a parameter-space" if vinfo.space == "param" else "an observation-space"
        raise FFTMatvecValueError(
            f"INPUT {request.input!r} holds {got} vector of shape {vinfo.shape}, but {product} "
            f"with MATRIX {request.matrix!r} (Nd={info.nd}, Nm={info.nm}, Nt={info.nt}) needs "
            f"{want} vector of shape ({n}, {info.nt})"
        )
    if space == "param" and info.checksum and vinfo.checksum and vinfo.checksum != info.checksum:
        raise FFTMatvecValueError(
            f"INPUT {request.input!r}: checksum {vinfo.checksum} does not match MATRIX "
            f"{request.matrix!r} (checksum {info.checksum})"
        )
    return io.load_vector(request.input, space=space)


def compute(kernel, x, *, mode: str, precision, xp, repeat: int, plans: list | None = None,
            chosen: dict | None = None):
    """Apply the operator built from a kernel block to an input block.

    Parameters
    ----------
    kernel : (nd, nm, Nt) float64 NumPy array
        The kernel block this process owns.
    x : (nm, Nt) or (nd, Nt) float64 NumPy array
        The input block (``(nd, Nt)`` for the adjoint).
    mode : {"forward", "adjoint", "normal"}
    precision : str or PrecisionConfig
    xp : numpy or cupy
        Where to compute.
    repeat : int
        Timed applications after one warm-up; 0 applies once, untimed.
    plans : list, optional
        Receives the plan of each product the mode runs, in words (``F.plan``).
    chosen : dict, optional
        Receives the precision run (``"precision"``: five letters) and where it came from
        (``"source"``: ``F.precision_source``).

    Returns
    -------
    y : float64 NumPy array
        The output block.
    times : list of float
        Seconds per timed application (GPU: device events).
    """
    from ..operator import BlockToeplitz

    if isinstance(precision, tuple):  # ("auto", rtol)
        op = BlockToeplitz(xp.asarray(kernel), "auto", rtol=precision[1])
    else:
        op = BlockToeplitz(xp.asarray(kernel), precision)
    apply = {
        "forward": op.matvec,
        "adjoint": op.rmatvec,
        "normal": op.normal().matvec,
    }[mode]
    if chosen is not None:
        chosen.update(precision=op.precision.letters, source=op.precision_source)
    if plans is not None:
        sides = {"forward": (False,), "adjoint": (True,), "normal": (False, True)}[mode]
        plans.extend(str(op.plan(k=1, adjoint=adj)) for adj in sides)
    xd = xp.asarray(x)
    y = apply(xd)  # also the warm-up
    times = _time(apply, xd, xp, repeat)
    y = backend.cupy.asnumpy(y) if xp is not np else y
    return np.asarray(y, dtype=np.float64), times


def _time(apply, x, xp, repeat: int) -> list:
    times = []
    if xp is np:
        for _ in range(repeat):
            t0 = time.perf_counter()
            apply(x)
            times.append(time.perf_counter() - t0)
        return times
    cuda = backend.cupy.cuda
    start, end = cuda.Event(), cuda.Event()
    for _ in range(repeat):
        start.record()
        apply(x)
        end.record()
        end.synchronize()
        times.append(cuda.get_elapsed_time(start, end) / 1e3)
    return times


def relative_error(y: np.ndarray, y_ref: np.ndarray) -> float:
    """``||y - y_ref|| / ||y_ref||`` (the absolute error when ``y_ref`` is zero)."""
    den = float(np.linalg.norm(y_ref))
    num = float(np.linalg.norm(np.asarray(y, np.float64) - y_ref))
    return num / den if den > 0 else num


def _array_module(device: str):
    if device == "cpu":
        return np
    if not backend.gpu_available():
        raise FFTMatvecValueError(
            "--device gpu: no GPU is available (CuPy is not installed, or it sees no device)"
        )
    return backend.cupy


def _source_words(source: str) -> str:
    """Where an automatic precision came from, in words."""
    if source == "model":
        return ("the a-priori error model (no tuning table for this device; `fftmatvec tune` "
                "makes one)")
    return f"the tuning table {source}"


def report(request: MatvecRequest, result: MatvecResult) -> str:
    info = result.info
    _, out_space, product = MODES[request.mode]
    lines = [
        f"matrix     {request.matrix} ({info.format}): Nd={info.nd} Nm={info.nm} Nt={info.nt}",
        f"product    {product} ({request.mode}), precision {request.precision.lower()}, "
        f"device {request.device}",
        f"time       median {result.median * 1e3:.4g} ms over {len(result.times)} repeats "
        f"(min {min(result.times) * 1e3:.4g} ms)",
    ]
    if result.precision_source not in (None, "explicit"):  # under the product's line
        lines.insert(2, f"precision  {result.precision}, chosen by --precision auto for rtol "
                     f"{1e-6 if request.rtol is None else request.rtol:g} from "
                     f"{_source_words(result.precision_source)}")
    if result.rel_err is not None:
        lines.append(f"rel_err    {result.rel_err:.3e} vs float64 NumPy (ddddd)")
    if getattr(result, "grid", None):
        lines.append(f"grid       {result.grid} process grid (time: the slowest rank)")
    lines.append(f"output     {request.output} ({out_space} space, shape {result.output_shape})")
    if result.plan:
        lines.append("plan       " + result.plan.replace("\n", "\n           "))
    return "\n".join(lines)
