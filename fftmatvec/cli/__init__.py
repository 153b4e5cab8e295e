"""The ``fftmatvec`` command.

Each subcommand lives in its own module of this package, which defines ``register(subparsers)``
(adding its parser and setting ``func``); ``main`` wires them together.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
import warnings

from .._errors import FFTMatvecError

# Nothing heavier than the standard library is imported above: ``main`` installs the signal
# handlers first, then imports the subcommands (NumPy, h5py, ...).

# Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ("info", "matvec", "convert", "demo", "tune", "tune_fno")

# The package's logger: library code logs through it (and its children, one per module); the
# command sends it to stderr, at INFO under -v and DEBUG under -vv.
LOGGER = "fftmatvec"


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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                help="what to do; `fftmatvec COMMAND -h` tells more")
    sub.required = True
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    for p in sub.choices.values():
        if p.get_default("verbose") is None:  # matvec has its own -v, which also prints its plan
            p.add_argument("-v", "--verbose", action="count", default=0,
                           help="log the package's steps on stderr (-vv: with debugging detail)")
    return parser


@contextlib.contextmanager
def logging_to_stderr(command: str, verbosity: int):
    """Send the package's log records to stderr while a command runs: warnings always, INFO
    with ``verbosity`` 1 (``-v``), DEBUG with 2 or more (``-vv``); a Python warning is one line
    ``fftmatvec COMMAND: warning: ...``. The logger's level and handlers, and how warnings
    show, are as before afterwards."""
    logger = logging.getLogger(LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"fftmatvec {command}: %(message)s"))
    level = logger.level
    logger.setLevel(logging.WARNING if verbosity <= 0 else
                    logging.INFO if verbosity == 1 else logging.DEBUG)
    logger.addHandler(handler)

    def show(message, category, filename, lineno, file=None, line=None):
        kind = "" if category is UserWarning else f" ({category.__name__})"
        print(f"fftmatvec {command}: warning{kind}: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def install_signal_handlers(command: str) -> None:
    """SIGTERM (what Slurm sends at a time limit) and SIGINT (Ctrl-C): remove the temporaries
    being written, say so in one line on stderr and exit with 128 + the signal number.

    A signal during the few renames that swap a matrix directory's files waits for them to
    end. Processes forked from this one (the demo's workers) get the default action. Installed
    before the subcommands are imported, it also ends a Ctrl-C during those imports."""
    owner = os.getpid()
    prog = f"fftmatvec {command}" if command else "fftmatvec"

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        writes = _writes_if_imported()
        if writes is not None and writes.defer(handler, signum):
            return
        removed = writes.remove_live() if writes is not None else []
        name = signal.Signals(signum).name
        note = f"; removed {len(removed)} unfinished file(s)" if removed else ""
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.write(f"{prog}: interrupted by {name}{note}\n")
            sys.stderr.flush()
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def _writes_if_imported():
    """The package's writer module if this process has imported it (nothing to remove else)."""
    return sys.modules.get(__name__.rpartition(".")[0] + "._writes")


def _first_word(argv: list[str]) -> str | None:
    """The subcommand as typed (the first argument that is not an option), before parsing."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    handlers = threading.current_thread() is threading.main_thread()
    if handlers:  # before the imports, which may take a while on a slow file system
        install_signal_handlers(_first_word(argv) or "")
    parser = build_parser()
    args = parser.parse_args(argv)
    if handlers:
        install_signal_handlers(args.command)
    try:
        with logging_to_stderr(args.command, int(args.verbose)):
            return int(args.func(args) or 0)
    except FFTMatvecError as exc:
        _say(f"fftmatvec {args.command}: error: {_one_line(exc)}")
        return 2
    except MemoryError as exc:
        _say(f"fftmatvec {args.command}: error: out of memory ({_one_line(exc)})")
        return 1
    except OSError as exc:
        _say(f"fftmatvec {args.command}: error: {_one_line(exc)}")
        return 1
    except KeyboardInterrupt:
        writes = _writes_if_imported()
        if writes is not None:
            writes.remove_live()
        _say(f"fftmatvec {args.command}: interrupted by SIGINT")
        return 128 + signal.SIGINT


def _say(line: str) -> None:
    """``line`` on stderr in one write, newline included, so that the lines of MPI ranks that
    share a stderr (mpiexec joins them) never split one another."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
