"""The sections of the kernel source that a run-time compile builds one at a time.

CPU only: the source is run through a C preprocessor (the machine's ``cpp``), once whole, as the
build compiles it, and once per ``FFTMATVEC_SECTION``, as the run-time compile does. Every entry
point must lie in exactly one section, the one ``kernels.section_of`` names for it: a kernel the
loader looked for in another section would be missing at run time, on the GPU only.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from fftmatvec import kernels

CPP = shutil.which("cpp")
ENTRY = re.compile(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(')
SECTION = re.compile(r"^#define FFTMATVEC_SECTION_(\w+) (\d+)$", re.M)


def entry_points(source: str, *defines: str) -> list[str]:
    """The extern "C" entry points ``source`` defines, preprocessed with ``defines``."""
    out = subprocess.run([CPP, "-P", "-x", "c++", "-std=c++17", *(f"-D{d}" for d in defines)],
                         input=source, capture_output=True, text=True, check=True).stdout
    return ENTRY.findall(out)


@pytest.mark.skipif(CPP is None, reason="no C preprocessor (cpp) on this machine")
@pytest.mark.parametrize("mma", [True, False], ids=["sm_80+", "others"])
def test_sections_partition_the_entry_points(mma):
    source = kernels.kernel_source()
    base = ("FFTMATVEC_MMA",) if mma else ()
    whole = entry_points(source, *base)
    assert len(whole) > 100 and len(set(whole)) == len(whole)
    sections = dict(SECTION.findall(source))
    assert len(set(sections.values())) == len(sections), "two sections share a number"
    seen = []
    for name, number in sections.items():
        found = entry_points(source, *base, f"FFTMATVEC_SECTION={number}")
        wrong = [n for n in found if kernels.section_of(n) != name]
        assert not wrong, f"section {name} defines {wrong[:3]}, which section_of places elsewhere"
        if mma:
            assert found, f"section {name} is empty"
        seen += found
    assert sorted(seen) == sorted(whole), "some entry points are in no section, or in two"


def test_section_of_names():
    assert kernels.section_of("reduce_serial_c64_c128") == "MISC"
    assert kernels.section_of("rfft_pad_f64_f32_f64_c128_r8") == "ROWFFT_F64_C128"
    assert kernels.section_of("irfft_unpad_c64_f32_f32_f64_r10") == "ROWFFT_F32_C64"
    assert kernels.section_of("sbgemv_irfft_c128_c64_f64_f64_f32_n10") == "FUSED_C128_C64_F64"
    assert kernels.section_of("sbgemvs_c32h_c64_c64_r4_v2") == "GEMV_C32H"
    assert kernels.section_of("sbgemmp_c64dmma_c128_c128_m2_v2_w2x4_k4_s4") == "MMA_C64DMMA"
    for bad in ("no_such_kernel", "sbgemv", "rfft_pad_f64", ""):
        with pytest.raises(kernels.KernelLoadError, match="no GPU kernel is named"):
            kernels.section_of(bad)
    assert kernels.has_function("no_such_kernel") is False
