"""``fftmatvec tune``: measure time and error of the precisions on this device and write the
tuning table that ``precision="auto"`` reads (docs/tuning.md)."""

from __future__ import annotations

import os
import sys

import numpy as np

from .. import backend
from .._errors import FFTMatvecError, FFTMatvecFileError, FFTMatvecTypeError, FFTMatvecValueError
from . import _one_line, positive_int
from .matvec import _array_module

# The device keys a table must share with this device to be added to (versions may differ).
_SAME_DEVICE = ("vendor", "arch", "name")


def register(sub) -> None:
    p = sub.add_parser("tune", help="build a tuning table (time and error of each precision)",
                       description="Sweep the precisions on this device (GPU, else CPU) and "
                                   "write the Pareto fronts to a YAML tuning table.")
    p.add_argument("--nm", type=positive_int, action="append", default=[], metavar="N",
                   help="parameters Nm of a shape to tune; give --nm, --nd and --nt once per "
                        "shape (the i-th of each together)")
    p.add_argument("--nd", type=positive_int, action="append", default=[], metavar="N",
                   help="sensors Nd of a shape to tune (see --nm)")
    p.add_argument("--nt", type=positive_int, action="append", default=[], metavar="N",
                   help="time steps Nt of a shape to tune (see --nm)")
    p.add_argument("--shapes", metavar="FILE",
                   help="a file of shapes to tune, one 'Nm Nd Nt' line each (instead of --nm, "
                        "--nd, --nt)")
    p.add_argument("--matrix", metavar="PATH",
                   help="the user's kernel: a .npy array (nd, nm, nt), a native .h5 file or an "
                        "FFTMatvec matrix directory")
    p.add_argument("--nrhs", default="1", metavar="K[,K...]",
                   help="numbers of right-hand sides to tune each shape for (default 1)")
    p.add_argument("--ops", default="matvec,rmatvec,normal", metavar="OP[,OP...]",
                   help="products to tune, from matvec, rmatvec and normal "
                        "(default: all three)")
    p.add_argument("--precisions", default="all", metavar="P[,P...]",
                   help="precisions to measure, five letters each, e.g. ddddd,dssdd "
                        "(default: all 48)")
    p.add_argument("--repeat", type=positive_int, default=10, metavar="N",
                   help="timed applications of each configuration (default 10)")
    p.add_argument("--n-inputs", type=positive_int, default=3, metavar="N",
                   help="random inputs each error is measured on (default 3)")
    p.add_argument("--inputs", metavar="FILE",
                   help="the user's own input vectors (.npy), measured instead of random ones")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="the YAML tuning table to write; entries already in it are kept and "
                        "not measured again")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also plot time against error of the run's largest shape")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="where to measure; auto: the GPU when CuPy sees one, else the CPU "
                        "(default: auto)")
    p.set_defaults(func=run)


def _one_line_reason(exc: BaseException) -> str:
    """An OS error's reason without its errno and path (the message names the path), else the
    error's text on one line."""
    return getattr(exc, "strerror", None) or _one_line(exc)


def _named(option: str, exc: FFTMatvecError) -> FFTMatvecError:
    """``exc`` with ``option`` in front of its message (same class)."""
    if isinstance(exc, FFTMatvecFileError):
        return FFTMatvecFileError(exc.path, f"{option}: {exc}")
    return type(exc)(f"{option}: {exc}")


def _device(name: str):
    """numpy or cupy: ``--device gpu`` refused without a GPU; ``auto`` the GPU if there is one."""
    if name == "gpu":
        return _array_module("gpu")
    if name == "auto" and backend.gpu_available():
        return backend.cupy
    return np


def _counts(text: str, option: str) -> list[int]:
    """``"1,16"`` -> ``[1, 16]``: positive integers, comma-separated."""
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise FFTMatvecValueError(f"{option}: expected positive integers K[,K...], got {text!r}")
    return counts


def _precisions(text: str) -> list[str]:
    """``"all"`` or a comma list of precision strings, each checked."""
    from ..precision import PrecisionConfig
    from ..tuning import sweep

    if text.strip().lower() == "all":
        return sweep.all_precisions()
    names = [t.strip() for t in text.split(",")]
    if not text.strip() or not all(names):
        raise FFTMatvecValueError(f"--precisions: expected 'all' or a comma list of five-letter "
                                  f"precisions (e.g. ddddd,ddsdd), got {text!r}")
    try:
        return list(dict.fromkeys(PrecisionConfig(t).letters for t in names))  # once each
    except FFTMatvecError as exc:
        raise _named("--precisions", exc) from None


def _shapes(args):
    if args.shapes:
        path = args.shapes
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise FFTMatvecFileError(
                path, f"--shapes {path!r}: cannot read it: {_one_line_reason(exc)}") from None
        shapes = []
        for n, line in enumerate(lines, 1):
            if not line.split():
                continue
            words = line.split()
            if len(words) != 3 or not all(w.isdigit() and int(w) > 0 for w in words):
                raise FFTMatvecValueError(f"--shapes {path!r}, line {n}: expected 'nm nd nt' "
                                          f"(three positive integers), got {line.strip()!r}")
            shapes.append(tuple(int(w) for w in words))
        if not shapes:
            raise FFTMatvecValueError(f"--shapes {path!r}: no 'nm nd nt' line in it")
        return shapes
    if not (len(args.nm) == len(args.nd) == len(args.nt)) or not args.nm:
        raise FFTMatvecValueError("give --nm, --nd, --nt the same number of times (or --shapes)")
    return list(zip(args.nm, args.nd, args.nt))


def _load_npy(path: str, option: str) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise FFTMatvecFileError(path, f"{option} {path!r}: cannot read it as a .npy array: "
                                       f"{_one_line_reason(exc)}") from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        a.close()
        raise FFTMatvecFileError(path, f"{option} {path!r}: expected one array (.npy), got an "
                                       f".npz archive")
    return a


def _load_kernel(path: str) -> np.ndarray:
    """The user's kernel ``(nd, nm, nt)``: a .npy array, or a matrix file as ``matvec`` reads
    it (a native .h5 file or an FFTMatvec matrix directory)."""
    from .. import io
    from ..io._formats import _check_kernel

    if path.lower().endswith(".npy"):
        a = _load_npy(path, "--matrix")
        try:
            return np.asarray(_check_kernel(a), dtype=np.float64)
        except FFTMatvecError as exc:
            raise _named(f"--matrix {path!r}", exc) from None
    try:
        return io.load_matrix(path)
    except FFTMatvecError as exc:
        raise _named("--matrix", exc) from None


def _load_inputs(path: str, shapes, ops, nrhs) -> np.ndarray:
    """The user's vectors (.npy), checked against every shape, op and count they serve."""
    from ..tuning import sweep

    u = _load_npy(path, "--inputs")
    try:
        if u.dtype.kind not in "fiu":
            raise FFTMatvecTypeError(f"expected real values, got dtype {u.dtype}")
        if u.size and not np.isfinite(u).all():
            raise FFTMatvecValueError("it contains NaN or Inf values")
        for s in shapes:
            for op in ops:
                sweep.user_block(u, op, s, max(nrhs))
    except FFTMatvecError as exc:
        raise _named(f"--inputs {path!r}", exc) from None
    return u


def _check_outputs(args) -> None:
    """``--out`` and ``--plot`` writable, neither over an input nor over each other; the plot's
    format one matplotlib writes. Before anything is measured."""
    from .. import _writes

    inputs = {"--matrix": args.matrix, "--inputs": args.inputs, "--shapes": args.shapes}
    _writes.check_not_inside(args.out, inputs, "--out")
    folder = os.path.dirname(os.path.abspath(args.out))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise FFTMatvecFileError(args.out, f"--out {args.out!r}: cannot make its folder "
                                           f"{folder!r}: {_one_line_reason(exc)}") from None
    _writes.check_space(args.out, 0)
    if args.plot is None:
        return
    _writes.check_not_inside(args.plot, dict(inputs, **{"--out": args.out}), "--plot")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise FFTMatvecValueError(f"--plot {args.plot!r}: drawing it needs matplotlib, which is "
                                  f"not installed") from None
    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(args.plot)[1].lstrip(".").lower()
    if ext not in formats:
        raise FFTMatvecValueError(f"--plot {args.plot!r}: expected a file name ending in one of "
                                  f".{', .'.join(sorted(formats))} (e.g. .png), got {ext or 'none'!r}")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.plot))):
        raise FFTMatvecFileError(args.plot, f"--plot {args.plot!r}: its folder does not exist")
    _writes.check_space(args.plot, 0)


def _open_table(path: str, device: dict) -> dict:
    """The table at ``path`` (new if absent), refused if it is another device's."""
    from ..tuning import table as tb

    if not os.path.exists(path):
        return tb.new_table(device)
    try:
        table = tb.load_table(path)
    except FFTMatvecError as exc:
        raise _named("--out", exc) from None
    have = table["device"]
    if any(have[k] != device[k] for k in _SAME_DEVICE):
        raise FFTMatvecValueError(
            f"--out {path!r} is the table of another device, {have['vendor']} {have['arch']} "
            f"({have['name']}); this one is {device['vendor']} {device['arch']} "
            f"({device['name']}): give another --out")
    return table


def run(args) -> int:
    from tqdm import tqdm

    from ..tuning import sweep, table as tb

    # every option and file checked before anything is measured
    xp = _device(args.device)
    precs = _precisions(args.precisions)
    ops = args.ops.split(",")
    for op in ops:
        if op not in tb.OPS:
            raise FFTMatvecValueError(f"--ops: expected {', '.join(tb.OPS)}, got {op!r}")
    nrhs = _counts(args.nrhs, "--nrhs")
    K0 = None if args.matrix is None else _load_kernel(args.matrix)
    shapes = [(K0.shape[1], K0.shape[0], K0.shape[2])] if K0 is not None else _shapes(args)
    user = None if args.inputs is None else [_load_inputs(args.inputs, shapes, ops, nrhs)]
    _check_outputs(args)
    table = _open_table(args.out, sweep.device_info(xp))
    todo = [(s, op, k) for s in shapes for op in ops for k in nrhs
            if tb.find_entry(table, (op,) + s + (k,)) is None]
    est = sum(sweep.estimate_seconds([s], [op], [k], precs, args.repeat, args.n_inputs)
              for s, op, k in todo)
    print(f"tuning {len(todo)} entries x {len(precs)} precisions "
          f"({len(shapes) * len(ops) * len(nrhs) - len(todo)} already in {args.out}); "
          f"estimated {est:.0f} s", flush=True)
    rng = np.random.default_rng(0)
    # on a terminal only (disable=None): no bar in a log file
    bar = tqdm(total=len(todo) * len(precs), unit="config", disable=None, file=sys.stderr)
    for s, op, k in todo:
        nm, nd, nt = s
        K = xp.asarray(K0 if K0 is not None else rng.standard_normal((nd, nm, nt)) / np.sqrt(nm))
        entry = sweep.sweep_shape(K, op, k, precs, args.repeat, args.n_inputs, rng=rng,
                                  user_inputs=user, progress=bar)
        entry.update(_tune_plan(K, entry, op, k, args.repeat, xp))
        table["entries"].append(entry)
        tb.save_table(table, args.out)
        if "plan_time" in entry:
            bar.write(f"{op} {s} k={k}: tuned plan {entry['plan_time'] * 1e3:.3f} ms vs built-in "
                      f"{entry['builtin_plan_time'] * 1e3:.3f} ms "
                      f"(ratio {entry['builtin_plan_time'] / entry['plan_time']:.2f}x)")
    bar.close()
    if args.plot and table["entries"]:
        from ..tuning.plot import plot_entry

        # the largest shape of this run, its first op and fewest right-hand sides
        mine = [e for e in table["entries"] if (e["nm"], e["nd"], e["nt"]) in set(shapes)]
        big = max(mine or table["entries"], key=lambda e: (e["nm"] * e["nd"] * e["nt"],
                                                          e["op"] == ops[0], -e["nrhs"]))
        plot_entry(big, args.plot)
    return 0


def _tune_plan(K, entry, op, k, repeat, xp):
    """On a GPU with the planner: time its candidates for the front's fastest point."""
    if xp is np:
        return {"plan": {}}
    try:
        from ..gpu.plan import candidate_overrides
    except ImportError:
        return {"plan": {}}
    from ..operator import BlockToeplitz
    from ..tuning.sweep import _apply, _time

    p = entry["front"][0]
    X = xp.asarray(np.random.default_rng(1).standard_normal(
        (k, entry["nd"] if op == "rmatvec" else entry["nm"], entry["nt"])))
    F0 = BlockToeplitz(K, p)
    best, best_t, t0 = {}, None, None
    for ov in candidate_overrides(F0, k=k, adjoint=op == "rmatvec"):
        try:
            F = BlockToeplitz(K, p, plan=ov or None)
            t = _time(lambda F=F: _apply(F, op, X), xp, repeat)
        except (FFTMatvecError, RuntimeError):  # a choice this device cannot run
            continue
        if t0 is None:
            t0 = t
        if best_t is None or t < best_t:
            best, best_t = dict(ov), t
    return {"plan": best, "plan_time": float(best_t), "builtin_plan_time": float(t0)}
