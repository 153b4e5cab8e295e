"""Translate the CUDA C++ kernels of ``hip_kernels/`` to HIP.

The build runs this (through ``scripts/hipify.py``) to make the source that ``hipcc`` compiles
and that the package installs for hiprtc; the kernel loader may run it on ROCm too. It uses the
standard library only, because the build loads this file by path before the package's
dependencies exist.

The translator knows exactly the CUDA API that the kernels use (the tables below) and refuses
anything else that looks like CUDA, naming the identifier, the file and the line: passing an
unknown name through would only fail later, in ``hipcc`` or hiprtc, far from its cause.
When ``hipify-perl`` (ROCm's translator) is available it runs first, and this module then maps
what it leaves and checks the result the same way.

What is translated: code, ``#define`` bodies and ``#include`` lines. What is left alone:
comments, string literals (inline PTX) and the other directives (``#if``, ``#ifdef``,
``#elif``, ``#pragma``, ...), so that platform branches such as
``#if defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)`` keep working as written.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

try:  # inside the package
    from ._errors import FFTMatvecValueError as _ErrorBase
except ImportError:  # loaded by path at build time
    _ErrorBase = ValueError

__all__ = [
    "HipifyError",
    "HEADERS",
    "IDENTIFIERS",
    "DROP_MASK",
    "hipify",
    "hipify_file",
    "run_hipify_perl",
]

RUNTIME_HEADER = "hip/hip_runtime.h"

# Header names, as written between <> or "" after #include. RUNTIME_HEADER goes to the top;
# None drops the include (its names are translated below). HIP headers are included only
# outside hiprtc (#ifndef __HIPCC_RTC__), which has them built in.
HEADERS: dict[str, str | None] = {
    "cuda_runtime.h": RUNTIME_HEADER,
    "cuda_runtime_api.h": RUNTIME_HEADER,
    "hip/hip_runtime.h": RUNTIME_HEADER,  # as hipify-perl writes it
    "cuda_fp16.h": "hip/hip_fp16.h",
    "math_constants.h": None,
}

# Warp-synchronous intrinsics whose CUDA form takes a lane mask first: HIP has the mask-less
# form (a wavefront of 32 or 64 lanes runs in lock step). __ballot_sync is left out on purpose:
# HIP's __ballot returns 64 bits, so a kernel must not rely on it.
DROP_MASK: dict[str, str] = {
    "__shfl_sync": "__shfl",
    "__shfl_up_sync": "__shfl_up",
    "__shfl_down_sync": "__shfl_down",
    "__shfl_xor_sync": "__shfl_xor",
}

# Plain renames. The CUDART_* constants come from math_constants.h, which HIP lacks.
IDENTIFIERS: dict[str, str] = {
    "CUDART_INF_F": "__builtin_huge_valf()",
    "CUDART_INF": "__builtin_huge_val()",
    "CUDART_NAN_F": '__builtin_nanf("")',
    "CUDART_NAN": '__builtin_nan("")',
}

# What counts as CUDA: prefixes of CUDA API names, CUDA-only intrinsics, *_sync intrinsics.
_CUDA_NAME = re.compile(
    r"(?:cuda|CUDA|cu[A-Z]|cub$|cublas|cufft|curand|cusparse|cusolver|cudnn|nvcuda|nvrtc"
    r"|NVRTC|__nv_|__cuda|__CUDA|__NVCC|__nvvm|__syncwarp$|__activemask$|__nanosleep$"
    r"|__\w+_sync$)"
)
_CUDA_HEADER = re.compile(r"^(?:cuda|cu[A-Z]|cub/|cublas|cufft|curand|cusparse|cusolver|cudnn"
                          r"|nvrtc|nvToolsExt|cooperative_groups|mma\.h|crt/|nv/|sm_\d)")
_IDENT = re.compile(r"(?<!\w)[A-Za-z_]\w*")
_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(\w*)")
_RAW_STRING = re.compile(r'"([^ ()\\\t\n]{0,16})\(')
_DIGIT_SEPARATOR = re.compile(r"(?<![\w.])\d[\w.]*$")
_INCLUDE = re.compile(r'^([ \t]*#[ \t]*include[ \t]*)([<"])([^>"]+)[>"](.*)$')


def _guarded(header: str) -> str:
    # hiprtc has the HIP headers built in and fails on their files (redefinitions).
    return f"#ifndef __HIPCC_RTC__\n#include <{header}>\n#endif\n"


_RUNTIME_BLOCK = _guarded(RUNTIME_HEADER)


class HipifyError(_ErrorBase):
    """The CUDA source uses something this translator has no HIP form for."""


def _blank(text: str) -> str:
    """``text`` with comments and string/char literals blanked out, newlines kept.

    Positions and line numbers in the result are those of ``text``, so what is found in the
    result can be edited in ``text``.
    """
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == '"' and i > 0 and text[i - 1] == "R" and _RAW_STRING.match(text, i):
            delim = _RAW_STRING.match(text, i).group(1)
            j = text.find(f"){delim}\"", i)
            j = n if j < 0 else j + len(delim) + 2
        elif c == '"' or (c == "'" and not _DIGIT_SEPARATOR.search(text[max(0, i - 64):i])):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            i += 1
            continue
        for k in range(i, j):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _directives(code: str):
    """(start, end, name) of each preprocessor directive, continuation lines included."""
    pos, start, name = 0, None, ""
    for line in code.splitlines(keepends=True):
        if start is None:
            m = _DIRECTIVE.match(line)
            if m:
                start, name = pos, m.group(1)
        pos += len(line)
        if start is not None and not line.rstrip("\r\n").rstrip(" \t").endswith("\\"):
            yield start, pos - len(line) + len(line.rstrip("\r\n")), name
            start = None
    if start is not None:
        yield start, pos, name


def _first_argument_end(code: str, open_paren: int) -> int | None:
    """Position after the first top-level comma (and blanks) of the call at ``open_paren``."""
    depth = 0
    for j in range(open_paren, len(code)):
        ch = code[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return None
        elif ch == "," and depth == 1:
            j += 1
            while j < len(code) and code[j] in " \t":
                j += 1
            return j
    return None


def hipify(text: str, *, filename: str = "<source>", add_runtime_header: bool = True,
           include=None) -> str:
    """Translate one CUDA C++ source text to HIP.

    Parameters
    ----------
    text : str
        CUDA C++ source.
    filename : str
        The source's name, for error messages and ``#line`` directives.
    add_runtime_header : bool
        Put ``#include <hip/hip_runtime.h>`` at the top, guarded by ``#ifndef __HIPCC_RTC__``:
        ``hipcc`` needs it, hiprtc provides the runtime itself. It is put there anyway when the
        source includes ``cuda_runtime.h``.
    include : callable, optional
        ``include(name, line)`` for each ``#include "name"`` that is not a CUDA header: returns
        the text to put in place of that line (e.g. the translated header) or None to keep it.

    Returns
    -------
    str
        The HIP source, with the line numbers of ``text`` (a ``#line`` follows any header).

    Raises
    ------
    HipifyError
        On any CUDA header or identifier with no known translation, or a mask-taking intrinsic
        not called with its arguments; the message lists every one with its file and line.
    """
    code = _blank(text)
    edits: list[tuple[int, int, str]] = []
    errors: list[str] = []
    skip: list[tuple[int, int]] = []
    needs_runtime = add_runtime_header
    for a, b, name in _directives(code):
        if name == "define":
            continue  # the body is code
        skip.append((a, b))
        m = _INCLUDE.match(text[a:b]) if name == "include" else None
        if m is None:
            continue  # conditionals and the other directives are left alone
        header, quoted = m.group(3), m.group(2) == '"'
        if header in HEADERS:
            new = HEADERS[header]
            if new == RUNTIME_HEADER:
                needs_runtime = True
                new = None
            if new is not None:  # guarded as the runtime header is, line numbers kept
                new = _guarded(new) + f'#line {_line_of(text, a) + 1} "{filename}"'
            edits.append((a, b, new or ""))
        elif _CUDA_HEADER.match(header):
            errors.append(f"{filename}:{_line_of(text, a)}: no HIP translation for the CUDA "
                          f"header {header!r}")
        elif quoted and include is not None:
            new = include(header, _line_of(text, a))
            if new is not None:
                edits.append((a, b, new))
    directive = 0
    for m in _IDENT.finditer(code):
        while directive < len(skip) and skip[directive][1] <= m.start():
            directive += 1
        if directive < len(skip) and skip[directive][0] <= m.start():
            continue
        ident = m.group()
        where = f"{filename}:{_line_of(text, m.start())}"
        if ident in DROP_MASK:
            j = m.end()
            while j < len(code) and code[j] in " \t\r\n":
                j += 1
            arg_end = _first_argument_end(code, j) if code.startswith("(", j) else None
            if arg_end is None:
                errors.append(f"{where}: {ident} must be called with a lane mask first, e.g. "
                              f"{ident}(0xffffffffu, v, 1)")
            else:
                # Keep the newlines of what goes, and so the line numbers.
                newlines = "\n" * text.count("\n", m.start(), arg_end)
                edits.append((m.start(), arg_end, DROP_MASK[ident] + "(" + newlines))
        elif ident in IDENTIFIERS:
            edits.append((m.start(), m.end(), IDENTIFIERS[ident]))
        elif _CUDA_NAME.match(ident):
            errors.append(f"{where}: no HIP translation for the CUDA identifier {ident!r}")
    if errors:
        known = ", ".join([*HEADERS, *DROP_MASK, *IDENTIFIERS])
        raise HipifyError("cannot hipify:\n  " + "\n  ".join(errors)
                          + f"\nThe translator (fftmatvec/_hipify.py) knows: {known}.")
    out = text
    for a, b, new in sorted(edits, reverse=True):
        out = out[:a] + new + out[b:]
    if needs_runtime:
        out = _RUNTIME_BLOCK + f'#line 1 "{filename}"\n' + out
    return out


def run_hipify_perl(path: str | Path, exe: str = "hipify-perl") -> str:
    """``hipify-perl``'s translation of the file ``path``.

    The unguarded ``#include "hip/hip_runtime.h"`` that ``hipify-perl`` puts on a first line of
    its own is taken out again, so that line numbers stay those of the source; :func:`hipify`
    puts the guarded one.

    Raises
    ------
    HipifyError
        When ``hipify-perl`` exits with an error.
    """
    path = Path(path)
    res = subprocess.run([exe, "-quiet-warnings", str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        raise HipifyError(f"{exe} failed on {path.name} (exit {res.returncode}):\n{res.stderr}")
    first, _, rest = res.stdout.partition("\n")
    if "hip/hip_runtime.h" in first and first != path.read_text().partition("\n")[0]:
        return rest
    return res.stdout


def hipify_file(path: str | Path, *, add_runtime_header: bool = True,
                hipify_perl: str | None = None) -> str:
    """Translate the CUDA file ``path`` and, inlined, the local headers it includes.

    The result is one self-contained HIP source, as hiprtc needs: each ``#include "x.cuh"``
    naming a file next to its includer is replaced by that file's translation (the first time;
    later includes of it become empty), between ``#line`` directives, so that compiler messages
    name the original files and lines.

    Parameters
    ----------
    path : str or Path
        The CUDA translation unit, e.g. ``hip_kernels/fftmatvec_kernels.cu``.
    add_runtime_header : bool
        As in :func:`hipify`.
    hipify_perl : str, optional
        Path of ``hipify-perl``, to run on each file before :func:`hipify`.

    Raises
    ------
    HipifyError
        As :func:`hipify`; also when ``hipify-perl`` fails.
    """
    seen: set[Path] = set()

    def translate(file: Path, header: bool) -> str:
        seen.add(file)
        text = run_hipify_perl(file, hipify_perl) if hipify_perl else file.read_text()
        # '#pragma once' has no meaning (and draws a warning) once inlined.
        text = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", "", text, flags=re.M)

        def include(name: str, line: int) -> str | None:
            target = (file.parent / name).resolve()
            if not target.is_file():
                return None
            if target in seen:
                return f"/* {name}: included above */"
            body = translate(target, False).rstrip("\n")
            return f'#line 1 "{name}"\n{body}\n#line {line + 1} "{file.name}"'

        return hipify(text, filename=file.name, add_runtime_header=header, include=include)

    path = Path(path).resolve()
    body = translate(path, add_runtime_header)
    if not body.startswith(_RUNTIME_BLOCK):
        body = f'#line 1 "{path.name}"\n{body}'
    via = " after hipify-perl" if hipify_perl else ""
    return f"// Generated from {path.name} by fftmatvec/_hipify.py{via}; do not edit.\n{body}"
