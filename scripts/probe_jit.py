#!/usr/bin/env python
"""How long a first product waits for run-time compiled kernels (``FFTMATVEC_KERNELS=jit``).

Without a prebuilt code object for the device, the kernels are compiled on first use (NVRTC,
or hiprtc on ROCm) and CuPy caches the result on disk. Each case below runs in a fresh process
with an empty CuPy cache, so it pays the whole compile:

- ``whole source``: one compile of every entry point, as the loader compiled them before it
  compiled by section (``cupy.RawModule`` on the whole source, then one kernel looked up);
- ``<precision> <Nm>x<Nd>x<Nt>``: a new operator's first forward and first adjoint product,
  with the sections it compiled (``kernels.section_of``), checked against the float64 NumPy
  operator;
- ``... again``: the same in a second fresh process sharing the first one's cache: what every
  later run of the program waits for.

Usage: python scripts/probe_jit.py [--cases ddddd:1000x100x1000,...] [--no-whole]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = "ddddd:1000x100x1000,sssss:1000x100x1000,ddhdd:1000x100x1000,ddddd:20000x10x100"

_WHOLE = """
import json, time
import cupy as cp
from fftmatvec import kernels
cp.cuda.Device().synchronize()
t = time.perf_counter()
src, compiler, options, _ = kernels._jit_source()
module = cp.RawModule(code=src, options=options)
module.get_function("reduce_c128_c128")
print(json.dumps({"seconds": time.perf_counter() - t, "sections": ["all"], "err": 0.0}))
"""

_PRODUCT = """
import json, sys, time
import numpy as np
import cupy as cp
import fftmatvec as fm
from fftmatvec import kernels
prec, nm, nd, nt = sys.argv[1], *map(int, sys.argv[2:5])
rng = np.random.default_rng(5)
K, m, d = (rng.standard_normal(s) for s in ((nd, nm, nt), (nm, nt), (nd, nt)))
Kd, md, dd = cp.asarray(K), cp.asarray(m), cp.asarray(d)
cp.cuda.Device().synchronize()
t = time.perf_counter()
F = fm.BlockToeplitz(Kd, prec)
y, z = F @ md, F.T @ dd
cp.cuda.Device().synchronize()
seconds = time.perf_counter() - t
ref = fm.BlockToeplitz(K, "ddddd")
err = max(float(np.linalg.norm(cp.asnumpy(got) - want) / np.linalg.norm(want))
          for got, want in ((y, ref @ m), (z, ref.T @ d)))
sections = sorted(str(s) for (_, s) in kernels._modules)
print(json.dumps({"seconds": seconds, "sections": sections, "err": err}))
"""


def run(code: str, args: list[str], cache: str) -> dict:
    """``code`` in a fresh Python process with the CuPy kernel cache in ``cache`` and run-time
    compiled kernels; its last line of output, as JSON."""
    env = dict(os.environ, CUPY_CACHE_DIR=cache, FFTMATVEC_KERNELS="jit")
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"case {args or 'whole source'} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process"] = time.perf_counter() - t
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=CASES, help="precision:NmxNdxNt,... (default %(default)s)")
    ap.add_argument("--no-whole", action="store_true", help="skip the whole-source compile")
    args = ap.parse_args(argv)

    print(f"{'case':<26} | {'first s':>8} {'process s':>9} | {'again s':>8} | {'rel err':>8} | "
          f"sections compiled", flush=True)
    cases = [] if args.no_whole else [("whole source", _WHOLE, [])]
    for case in args.cases.split(","):
        prec, size = case.split(":")
        cases.append((f"{prec} {size}", _PRODUCT, [prec, *size.split("x")]))
    for name, code, case_args in cases:  # each row as soon as it is measured
        with tempfile.TemporaryDirectory() as cache:
            first = run(code, case_args, cache)
            again = run(code, case_args, cache)["seconds"] if case_args else float("nan")
        print(f"{name:<26} | {first['seconds']:8.1f} {first['process']:9.1f} | {again:8.2f} | "
              f"{first['err']:8.1e} | {len(first['sections'])}: {', '.join(first['sections'])}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
