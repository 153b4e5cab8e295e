#!/usr/bin/env python3
"""Translate the CUDA kernels to one self-contained HIP source.

    python scripts/hipify.py hip_kernels/fftmatvec_kernels.cu -o fftmatvec_kernels.hip

A thin command-line wrapper of ``fftmatvec/_hipify.py``; the build (CMakeLists.txt) runs it.
It loads that module by path, so it needs the standard library only, not the package's
dependencies. ``hipify-perl`` runs first when given or, with ``--hipify-perl auto`` (the
default), when it is on the PATH. Exits with status 1, naming the file, line and identifier,
on any CUDA construct the translator does not know.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path

_MODULE = Path(__file__).resolve().parent.parent / "fftmatvec" / "_hipify.py"


def _load_hipify():
    spec = importlib.util.spec_from_file_location("_fftmatvec_hipify", _MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hipify.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="the CUDA translation unit")
    parser.add_argument("-o", "--output", help="output file (default: standard output)")
    parser.add_argument("--no-runtime-header", action="store_true",
                        help="leave out the #include <hip/hip_runtime.h> put on top")
    parser.add_argument("--hipify-perl", default="auto", metavar="auto|none|PATH",
                        help="run hipify-perl first: auto (if on the PATH), none, or its path")
    args = parser.parse_args(argv)

    hipify = _load_hipify()
    perl = {"auto": shutil.which("hipify-perl"), "none": None}.get(args.hipify_perl,
                                                                   args.hipify_perl)
    try:
        text = hipify.hipify_file(args.source, add_runtime_header=not args.no_runtime_header,
                                  hipify_perl=perl)
    except (hipify.HipifyError, OSError) as exc:
        print(f"hipify.py: error: {exc}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
