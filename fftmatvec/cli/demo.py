"""``fftmatvec demo``: solve a Bayesian linear inverse problem end to end (see
:mod:`fftmatvec.demo`)."""

from __future__ import annotations

import argparse
import textwrap

from . import positive_int


def register(sub) -> None:
    from ..demo.run import DEFAULT_OUT, SIZES

    sizes = "\n".join(
        f"  {name:<7} {s.n}x{s.n} grid, Nd={s.nd}, Nm={s.nm}, Nt={s.nt}: {s.note}"
        for name, s in SIZES.items()
    )
    description = textwrap.fill(
        "Build the parameter-to-observable map of a 2-D advection-diffusion equation "
        "(time-dependent source field -> point sensors) from marched sparse solves, check the "
        "block-Toeplitz operator against direct time stepping (forward and adjoint), time it "
        "against a PDE forward+adjoint solve pair, and compute the MAP source from noisy "
        "synthetic data by conjugate gradients on F^T Gamma^-1 F + R. Writes a figure, "
        "summary.json, the matrix (native HDF5) and the vectors into --out.",
        width=88,
    )
    p = sub.add_parser(
        "demo",
        help="recover a source in a 2-D advection-diffusion PDE from sensor data (MAP by CG)",
        description=description,
        epilog=f"sizes:\n{sizes}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--size", choices=tuple(SIZES), default="small",
                   help="problem size (default: small)")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="where the operator and CG run; auto: the GPU when one is usable "
                        "(default: auto)")
    p.add_argument("--precision", default="ddddd", metavar="STR",
                   help="precision of the operator in the MAP solve, five letters from d/s "
                        "('h' for stage 3), e.g. dssdd (default: ddddd); the check always also "
                        "reports the ddddd error")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                   help=f"output folder (default: {DEFAULT_OUT})")
    p.add_argument("--seed", type=int, default=0, help="seed of the random vectors and noise")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="processes computing the kernel (default: all available cores for "
                        "medium and large, 1 otherwise)")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..demo.run import run_demo

    run_demo(size=args.size, device=args.device, precision=args.precision, out=args.out,
             seed=args.seed, workers=args.workers, quiet=args.quiet)
    return 0
