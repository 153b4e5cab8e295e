"""``fftmatvec tune``: measure time and error of the precisions on this device and write the
tuning table that ``precision="auto"`` reads (docs/tuning.md)."""

from __future__ import annotations

import sys

import numpy as np

from .. import backend
from .._errors import FFTMatvecError, FFTMatvecValueError
from . import positive_int


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
    p.add_argument("--matrix", metavar="PATH", help="the user's kernel (.npy of shape (nd, nm, nt))")
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


def _shapes(args):
    if args.shapes:
        with open(args.shapes) as f:
            return [tuple(int(v) for v in ln.split()) for ln in f if ln.strip()]
    if not (len(args.nm) == len(args.nd) == len(args.nt)) or not args.nm:
        raise FFTMatvecValueError("give --nm, --nd, --nt the same number of times (or --shapes)")
    return list(zip(args.nm, args.nd, args.nt))


def run(args) -> int:
    import os

    from tqdm import tqdm

    from ..tuning import sweep, table as tb

    xp = np
    if args.device != "cpu" and backend.cupy is not None:
        try:
            if backend.cupy.cuda.runtime.getDeviceCount() > 0:
                xp = backend.cupy
        except Exception:  # noqa: BLE001 - no usable GPU
            if args.device == "gpu":
                raise
    precs = sweep.all_precisions() if args.precisions == "all" else args.precisions.split(",")
    ops = args.ops.split(",")
    for op in ops:
        if op not in tb.OPS:
            raise FFTMatvecValueError(f"--ops: expected {', '.join(tb.OPS)}, got {op!r}")
    nrhs = [int(k) for k in args.nrhs.split(",")]
    user = None if args.inputs is None else [np.load(args.inputs)]
    if args.matrix:
        K0 = np.load(args.matrix)
        shapes = [(K0.shape[1], K0.shape[0], K0.shape[2])]
    else:
        shapes = _shapes(args)
    table = tb.load_table(args.out) if os.path.exists(args.out) else tb.new_table(
        sweep.device_info(xp))
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
        K = xp.asarray(K0 if args.matrix else rng.standard_normal((nd, nm, nt)) / np.sqrt(nm))
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
