"""The ``fftmatvec`` command.

Each subcommand lives in its own module of this package, which defines ``register(subparsers)``
(adding its parser and setting ``func``); ``main`` wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .._errors import FFTMatvecError

# Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ("info", "matvec", "convert", "demo", "tune")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="fftmatvec",
        description="Fast mixed-precision block-triangular Toeplitz matvecs on CPUs and GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"fftmatvec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except FFTMatvecError as exc:
        print(f"fftmatvec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, KeyboardInterrupt) as exc:
        print(f"fftmatvec {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
