"""The tile catalogues of fftmatvec/gpu/rules.py (TILES, WIDE_TILES, STAGED_TILES, ASYNC_TILES,
PIPE_TILES, XREG_TILES with XREG_ND) against the kernel source they copy: the entry points
that hip_kernels/fftmatvec_kernels.cu defines, read off its preprocessed text (the C
preprocessor expands the macros that instantiate the tiles), are exactly those the
catalogues name, family by family. No GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fftmatvec.gpu.rules import (ASYNC_TILES, PIPE_TILES, STAGED_TILES, TILES, WIDE_TILES,
                                 XREG_ND, XREG_TILES)

KERNELS = Path(__file__).parents[1] / "hip_kernels"
CPP = shutil.which("cpp")
IO = [(i, o) for i in ("c128", "c64") for o in ("c128", "c64")]
# an entry point: extern "C" __global__ void [launch bounds] NAME(
ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^()]*\)\s*)?'
                   r'(?:[A-Z_][A-Z0-9_]*(?:\([^()]*\))?\s+)?([A-Za-z_]\w*)\s*\(')


@pytest.fixture(scope="module")
def entry_points() -> set:
    """The entry points of the kernel source with the sm_80+ kernels defined (FFTMATVEC_MMA)."""
    if CPP is None:
        pytest.skip("no C preprocessor (cpp) to expand the kernel source")
    text = subprocess.run([CPP, "-P", "-x", "c++", "-DFFTMATVEC_MMA", f"-I{KERNELS}",
                           str(KERNELS / "fftmatvec_kernels.cu")], capture_output=True,
                          text=True, check=True).stdout
    found = set(ENTRY.findall(text))
    assert len(found) > 100, "the expanded source names too few entry points to be read right"
    return found


def _family(found: set, prefix: str) -> set:
    return {n for n in found if n.startswith(prefix)}


def test_gemv_tiles_match_the_source(entry_points):
    expected = {f"sbgemv_{st}_{i}_{o}_r{rt}_k{kb}_v{v}"
                for st, tiles in TILES.items() for rt, kb, v in tiles for i, o in IO}
    expected |= {f"sbgemv_{st}_{i}_{o}_r{rt}_k1_v{v}_w{w}"
                 for st, tiles in WIDE_TILES.items() for rt, v, w in tiles for i, o in IO}
    got = {n for n in _family(entry_points, "sbgemv_") if not n.startswith("sbgemv_irfft_")}
    assert got == expected, sorted(got ^ expected)[:8]


def test_staged_tiles_match_the_source(entry_points):
    expected = {f"sbgemvs_{st}_{i}_{o}_r{rt}_v{v}"
                for st, tiles in STAGED_TILES.items() for rt, v in tiles for i, o in IO}
    got = _family(entry_points, "sbgemvs_")
    assert got == expected, sorted(got ^ expected)[:8]


def test_async_tiles_match_the_source(entry_points):
    expected = {f"sbgemva_{st}_{i}_{o}_r{t[0]}_y{t[1]}_j{t[2]}_s{t[3]}"
                + (f"_w{t[4]}" if len(t) > 4 else "")
                for st, tiles in ASYNC_TILES.items() for t in tiles for i, o in IO}
    got = _family(entry_points, "sbgemva_")
    assert got == expected, sorted(got ^ expected)[:8]


def test_tensor_core_tiles_match_the_source(entry_points):
    expected = {f"sbgemmp_{st}_{i}_{o}_m{mt}_v{v}_w{wr}x{wf}_k{ks}_s{ns}"
                for st, tiles in PIPE_TILES.items() for mt, v, wr, wf, ks, ns in tiles
                for i, o in IO}
    got = _family(entry_points, "sbgemmp_")
    assert got == expected, sorted(got ^ expected)[:8]


def test_input_in_registers_tiles_match_the_source(entry_points):
    expected = {f"sbgemvx_{st}_{i}_{o}_n{nd}_f{fw}"
                for st, tiles in XREG_TILES.items() for fw in tiles for nd in XREG_ND
                for i, o in IO}
    got = _family(entry_points, "sbgemvx_")
    assert got == expected, sorted(got ^ expected)[:8]
