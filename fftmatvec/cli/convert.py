"""``fftmatvec convert``: FFTMatvec matrix directory <-> native single file."""

from __future__ import annotations

import os
import sys

from tqdm import tqdm

from .. import _writes, io
from .._errors import FFTMatvecValueError


def register(sub) -> None:
    p = sub.add_parser(
        "convert",
        help="convert a matrix between an FFTMatvec directory and the native .h5 file",
        description=(
            "Convert the matrix SRC (an FFTMatvec matrix directory or a native .h5 file) to DST "
            "in the other layout (or --layout). Every row is validated on the way; DST is "
            "written atomically, a block of rows at a time."
        ),
    )
    p.add_argument("src", metavar="SRC", help="FFTMatvec matrix directory or native .h5 file")
    p.add_argument("dst", metavar="DST", help="destination directory or file")
    p.add_argument("--layout", choices=io.LAYOUTS, default=None,
                   help="layout of DST (default: the other one than SRC's)")
    p.add_argument("--prefix", default=None, metavar="STR",
                   help=f"row-file prefix inside binary/ for an FFTMatvec DST "
                        f"(default: SRC's, else {io.DEFAULT_PREFIX!r})")
    p.add_argument("--force", action="store_true",
                   help="replace an existing DST of the same kind")
    p.set_defaults(func=run)


def run(args) -> int:
    _writes.check_not_inside(args.dst, {"SRC": args.src}, "DST")
    _writes.check_not_inside(args.src, {"DST": args.dst}, "SRC")
    src = io.matrix_info(args.src)
    if os.path.lexists(args.dst) and not args.force:
        raise FFTMatvecValueError(f"DST {args.dst!r} exists; pass --force to replace it")
    # a bar of block rows, on a terminal only (disable=None): none in a log file
    with tqdm(total=src.nd, unit="row", desc="convert", disable=None, file=sys.stderr) as bar:
        dst = io.convert_matrix(args.src, args.dst, layout=args.layout, prefix=args.prefix,
                                overwrite=None if args.force else False, progress=bar.update)
    print(f"{args.src} ({src.format}) -> {args.dst} ({dst.format}): "
          f"Nd={dst.nd} Nm={dst.nm} Nt={dst.nt}, p2q={int(bool(dst.p2q))}, checksum={dst.checksum}")
    return 0
