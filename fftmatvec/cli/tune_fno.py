"""``fftmatvec tune-fno``: time the ways to run FNO layer signatures on this device and write
the fastest to the FNO tuning table the layers read (docs/fno.md, "Tuned choices")."""

from __future__ import annotations

from . import positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "tune-fno", help="tune the FNO layer's choices for layer signatures (needs PyTorch)",
        description="Time the built-in choice of each FNO layer signature against the FFT path "
                    "and the DFT chain with each plan key forced, with and without CUDA graphs; "
                    "write the fastest to an FNO tuning table.")
    p.add_argument("cases", nargs="+", metavar="CASE",
                   help="B,C,GRID,MODES or B,CIN,COUT,GRID,MODES, GRID and MODES like 64x64 "
                        "(MODES as n_modes: both signs on all but the last axis)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="the layer's input and weight dtype (default: float32)")
    p.add_argument("--compute-dtype", choices=("bfloat16", "float16"), default=None,
                   help="16-bit storage in the GEMMs (default: the input's precision)")
    p.add_argument("--inference", action="store_true",
                   help="time a forward under torch.no_grad (default: a forward and backward)")
    p.add_argument("--repeat", type=positive_int, default=20, help="calls a time (default 20)")
    p.add_argument("--rounds", type=positive_int, default=5,
                   help="times each candidate is timed, in turn with the others (default 5)")
    p.add_argument("--device", default=None,
                   help="a torch device (default: the current CUDA device, else cpu)")
    p.add_argument("--out", metavar="FILE", default=None,
                   help="the table (default: the user's cache file of the device's "
                        "architecture, which the layers read)")
    p.add_argument("--force", action="store_true", help="measure entries already in the table")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..fno import _tuning
    from ..fno._torch import _torch

    torch = _torch()  # a clear error where PyTorch is missing
    cases = [_tuning.parse_case(c) for c in args.cases]
    device = torch.device(args.device) if args.device else None
    out = args.out
    if out is None:
        dev = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        out = _tuning.cache_table(_tuning.device_arch(dev.type, dev.index or 0))
    print(f"tuning {len(cases)} FNO layer signature(s) into {out}", flush=True)
    _tuning.tune(cases, device=device, dtype=args.dtype, compute_dtype=args.compute_dtype,
                 grad=not args.inference, repeat=args.repeat, rounds=args.rounds, out=out,
                 force=args.force, progress=lambda e: print(_tuning.describe(e), flush=True))
    return 0
