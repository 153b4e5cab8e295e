"""The CUDA -> HIP translation of the kernels, and the code objects the build installs.

CPU only. With ``FFTMATVEC_EXPECT_CODE_OBJECTS`` set (e.g. ``sm_80,sm_90,gfx90a,gfx940``), the
installed package must hold those code objects: that is how CI proves both vendors' builds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from glob import glob
from pathlib import Path

import pytest
import yaml

from fftmatvec import FFTMatvecValueError
from fftmatvec.gpu import (ASYNC_TILES, PIPE_TILES, STAGED_TILES, TILES, WIDE_TILES, XREG_ND,
                            XREG_TILES)
from fftmatvec._hipify import DROP_MASK, HipifyError, hipify, hipify_file

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "hip_kernels" / "fftmatvec_kernels.cu"

# What the translated code must not contain, outside comments, strings and conditionals.
CUDA_LEFT = re.compile(r"\b(?:cuda\w*|CUDA\w*|cu[A-Z]\w*|__nv_\w*|__\w+_sync)\b")
CONDITIONAL = re.compile(r"^\s*#\s*(?:if|ifdef|ifndef|elif|else|endif)\b")
GUARDED_RUNTIME = "#ifndef __HIPCC_RTC__\n#include <hip/hip_runtime.h>\n#endif\n"


def strip_comments_and_strings(text: str) -> str:
    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"'
    return re.sub(pattern, lambda m: "\n" * m.group().count("\n"), text, flags=re.S)


def cuda_left(text: str) -> list[str]:
    lines = strip_comments_and_strings(text).split("\n")
    return [f"{i}: {line.strip()}" for i, line in enumerate(lines, 1)
            if not CONDITIONAL.match(line) and CUDA_LEFT.search(line)]


def line_map(hip: str) -> list[tuple[str, int, str]]:
    """(file, line, text) of every output line that a ``#line`` directive accounts for."""
    out, where = [], None
    for line in hip.split("\n"):
        m = re.match(r'#line (\d+) "([^"]+)"$', line)
        if m:
            where = [m.group(2), int(m.group(1))]
        elif where is not None:
            out.append((where[0], where[1], line))
            where[1] += 1
    return out


needs_sources = pytest.mark.skipif(not KERNELS.is_file(), reason="no hip_kernels/ in this tree")


# ---- the real kernels -------------------------------------------------------------------------

@needs_sources
def test_kernels_hipify_to_one_source_with_no_cuda_left():
    hip = hipify_file(KERNELS)
    assert hip.startswith("// Generated from fftmatvec_kernels.cu")
    assert GUARDED_RUNTIME in hip
    assert cuda_left(hip) == []
    # Self-contained, as hiprtc needs: no local header is included any more.
    assert not re.search(r'^\s*#\s*include\s*"', hip, re.M)


@needs_sources
def test_kernels_keep_their_file_names_and_line_numbers():
    hip = hipify_file(KERNELS)
    files = {p.name: p.read_text().split("\n") for p in KERNELS.parent.glob("*.cu*")}
    included = {name for lines in files.values() for line in lines
                for name in re.findall(r'^\s*#\s*include\s*"([^"]+)"', line)}
    mapped = line_map(hip)
    assert {name for name, _, _ in mapped} == {KERNELS.name} | included
    translated = (*DROP_MASK, "CUDART_", "#include", "#pragma once")
    for name, lineno, text in mapped:
        original = files[name][lineno - 1]
        if not any(t in original for t in translated):
            assert text == original, f"{name}:{lineno}"


@needs_sources
def test_hipify_without_runtime_header_for_hiprtc():
    hip = hipify_file(KERNELS, add_runtime_header=False)
    assert "hip_runtime.h" not in hip
    assert cuda_left(hip) == []


# ---- what is translated, and what is left alone ----------------------------------------------

@pytest.mark.parametrize(
    "cuda, hip",
    [
        ("x = __shfl_down_sync(0xffffffffu, v, 16);", "x = __shfl_down(v, 16);"),
        ("x = __shfl_xor_sync((unsigned)(-1), f(a, b), 1, 32);", "x = __shfl_xor(f(a, b), 1, 32);"),
        ("x = __shfl_up_sync(FULL , v,d);", "x = __shfl_up(v,d);"),
        ("x = __shfl_sync (m, v, 0);", "x = __shfl(v, 0);"),
        ("x = __shfl_down_sync(\n    0xffffffffu,\n    v, 1);", "x = __shfl_down(\n\n    v, 1);"),
        ("float i = CUDART_INF_F;", "float i = __builtin_huge_valf();"),
        ("double n = CUDART_NAN;", 'double n = __builtin_nan("");'),
        ("#define NEG_INF (-CUDART_INF)", "#define NEG_INF (-__builtin_huge_val())"),
        # left alone: comments, strings (inline PTX), conditionals, lookalikes
        ("// cudaMemcpy, __shfl_down_sync(m, v, 1)", None),
        ("/* cuFloatComplex\n   CUDART_PI */", None),
        ('asm("cvt.f32.f16 %0, %1; // cudaFoo" : "=f"(f) : "h"(h));', None),
        ("#if defined(__CUDA_ARCH__) || CUDART_VERSION >= 12000", None),
        ("#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)", None),
        ("int c = 1'000'000; cumsum(x); curve(y); __ldg(p);", None),
        ("#include <stdint.h>", None),
    ],
)
def test_translation(cuda, hip):
    assert hipify(cuda, add_runtime_header=False) == (cuda if hip is None else hip)


@pytest.mark.parametrize("header", ["cuda_fp16.h", '"cuda_fp16.h"'])
def test_fp16_header_is_guarded_for_hiprtc_and_keeps_line_numbers(header):
    name = header if header.startswith('"') else f"<{header}>"
    out = hipify(f"// a\n#include {name}\nint x;\n", filename="k.cu", add_runtime_header=False)
    assert out == ('// a\n#ifndef __HIPCC_RTC__\n#include <hip/hip_fp16.h>\n#endif\n'
                   '#line 3 "k.cu"\nint x;\n')


@pytest.mark.parametrize("line", ["#include <cuda_runtime.h>", '#include "hip/hip_runtime.h"',
                                  "#  include <cuda_runtime_api.h>"])
def test_runtime_header_goes_on_top_once_guarded(line):
    out = hipify(f"{line}\nint x;\n", filename="k.cu", add_runtime_header=False)
    assert out == GUARDED_RUNTIME + '#line 1 "k.cu"\n\nint x;\n'
    assert hipify("int x;\n", filename="k.cu") == GUARDED_RUNTIME + '#line 1 "k.cu"\nint x;\n'


# ---- what is refused --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "code, named",
    [
        ("cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, st);", "'cudaMemcpyAsync'"),
        ("unsigned m = __ballot_sync(0xffffffffu, p);", "'__ballot_sync'"),
        ("__syncwarp();", "'__syncwarp'"),
        ("unsigned m = __activemask();", "'__activemask'"),
        ("cuFloatComplex z;", "'cuFloatComplex'"),
        ("__nv_bfloat16 b;", "'__nv_bfloat16'"),
        ("float p = CUDART_PI_F;", "'CUDART_PI_F'"),
        ("#define CHECK(x) cudaGetLastError()", "'cudaGetLastError'"),
        ("#include <cooperative_groups.h>", "'cooperative_groups.h'"),
        ("#include <cuda/std/complex>", "'cuda/std/complex'"),
        ("auto f = __shfl_down_sync;", "__shfl_down_sync must be called with a lane mask"),
    ],
)
def test_unknown_cuda_is_refused_with_file_and_line(code, named):
    with pytest.raises(HipifyError) as info:
        hipify(f"// line 1\n{code}\n", filename="k.cu")
    assert "k.cu:2: " in str(info.value) and named in str(info.value)
    assert isinstance(info.value, FFTMatvecValueError)


def test_every_unknown_name_is_reported_at_once():
    with pytest.raises(HipifyError) as info:
        hipify("cudaFree(p);\nint x;\n__syncwarp();\n", filename="k.cu")
    assert "k.cu:1: " in str(info.value) and "k.cu:3: " in str(info.value)


def write_tree(tmp_path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path / "main.cu"


def test_headers_are_inlined_once_with_their_names_and_lines(tmp_path):
    main = write_tree(tmp_path, {
        "main.cu": '#include "a.cuh"\n#include "b.cuh"\nint m = __shfl_down_sync(1, v, 2);\n',
        "a.cuh": "#pragma once\n#include <cuda_fp16.h>\nint a;\n",
        "b.cuh": '#pragma once\n#include "a.cuh"\nint b;\n',
    })
    hip = hipify_file(main)
    assert hip.count("int a;") == 1
    assert cuda_left(hip) == []
    assert "#pragma once" not in hip
    lines = {(f, n): text for f, n, text in line_map(hip)}
    assert lines[("a.cuh", 3)] == "int a;"
    assert lines[("b.cuh", 3)] == "int b;"
    assert lines[("main.cu", 3)] == "int m = __shfl_down(v, 2);"


def test_error_in_a_header_names_the_header(tmp_path):
    main = write_tree(tmp_path, {"main.cu": '#include "a.cuh"\n', "a.cuh": "\n\ncudaFoo();\n"})
    with pytest.raises(HipifyError, match=r"a\.cuh:3: .*'cudaFoo'"):
        hipify_file(main)


def test_after_hipify_perl(tmp_path):
    # A stand-in with hipify-perl's habit: an unguarded runtime include on a line of its own.
    perl = tmp_path / "hipify-perl"
    perl.write_text('#!/bin/sh\nfor f; do case "$f" in -*) ;; *) src="$f";; esac; done\n'
                    'echo \'#include "hip/hip_runtime.h"\'\ncat "$src"\n')
    perl.chmod(0o755)
    main = write_tree(tmp_path, {"main.cu": "int x = __shfl_xor_sync(m, v, 1);\n"})
    hip = hipify_file(main, hipify_perl=str(perl))
    assert hip.count("hip_runtime.h") == 1 and GUARDED_RUNTIME in hip
    assert line_map(hip) == [("main.cu", 1, "int x = __shfl_xor(v, 1);"), ("main.cu", 2, "")]


def test_cli(tmp_path):
    script = ROOT / "scripts" / "hipify.py"
    src = write_tree(tmp_path, {"main.cu": "int x = __shfl_sync(m, v, 0);\n"})
    res = subprocess.run([sys.executable, "-I", str(script), str(src), "--hipify-perl", "none"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "__shfl(v, 0)" in res.stdout and GUARDED_RUNTIME in res.stdout
    src.write_text("\ncudaDeviceSynchronize();\n")
    out = tmp_path / "out.hip"
    res = subprocess.run([sys.executable, "-I", str(script), str(src), "-o", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and not out.exists()
    assert "main.cu:2: " in res.stderr and "'cudaDeviceSynchronize'" in res.stderr


# ---- hiprtc, when the HIP runtime library is there (Debian's hipcc brings it) ------------------

HIP_RUNTIME = ctypes.util.find_library("amdhip64")


@needs_sources
@pytest.mark.slow
@pytest.mark.skipif(HIP_RUNTIME is None, reason="no HIP runtime library (libamdhip64)")
def test_hipified_kernels_compile_with_hiprtc():
    lib = ctypes.CDLL(HIP_RUNTIME)
    src = hipify_file(KERNELS).encode()
    prog = ctypes.c_void_p()
    assert lib.hiprtcCreateProgram(ctypes.byref(prog), src, b"fftmatvec_kernels.hip", 0,
                                   None, None) == 0
    opts = [b"--offload-arch=gfx90a", b"-O3", b"-std=c++17"]
    rc = lib.hiprtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.hiprtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    lib.hiprtcGetProgramLog(prog, log)
    lib.hiprtcGetCodeSize(prog, ctypes.byref(size))
    lib.hiprtcDestroyProgram(ctypes.byref(prog))
    assert rc == 0 and size.value > 0, log.value.decode(errors="replace")[-4000:]


# ---- the installed code objects (CI sets FFTMATVEC_EXPECT_CODE_OBJECTS) ------------------------

def device_elf(blob: bytes) -> bytes:
    """The device ELF of a code object: a cubin as it is, an AMD code object's one device entry
    if it is a clang offload bundle (as hipcc --genco writes it)."""
    if not blob.startswith(b"__CLANG_OFFLOAD_BUNDLE__"):
        return blob
    (count,) = struct.unpack_from("<Q", blob, 24)
    pos, elves = 32, []
    for _ in range(count):
        off, size, tlen = struct.unpack_from("<QQQ", blob, pos)
        if blob[pos + 24:pos + 24 + tlen].startswith(b"hip"):
            elves.append(blob[off:off + size])
        pos += 24 + tlen
    assert len(elves) == 1, "expected one device code object in the bundle"
    return elves[0]


def kernel_names(blob: bytes) -> set[str]:
    """Names of the global functions defined in a cubin or an AMD code object (bundle)."""
    blob = device_elf(blob)
    assert blob[:6] == b"\x7fELF\x02\x01", "not a 64-bit little-endian ELF"
    (shoff,) = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize)
                for i in range(shnum)]
    names = set()
    for _, kind, _, _, off, size, link, _, _, entsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strtab = sections[link][4]
        for k in range(size // entsize):
            name, info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", blob, off + k * entsize)
            if info == 0x12 and shndx != 0:  # global, function, defined
                end = blob.index(b"\0", strtab + name)
                names.add(blob[strtab + name:end].decode())
    return names


EXPECTED = [t for t in os.environ.get("FFTMATVEC_EXPECT_CODE_OBJECTS", "").split(",") if t]


@pytest.mark.skipif(not EXPECTED, reason="FFTMATVEC_EXPECT_CODE_OBJECTS is not set")
def test_installed_package_has_the_expected_code_objects():
    # The installed distribution, not the checkout that `python -m pytest` puts first on sys.path.
    files = {str(f): f for f in importlib.metadata.files("fftmatvec") or []}
    manifest_file = files.get("fftmatvec/_kernels/manifest.json")
    assert manifest_file is not None, "fftmatvec/_kernels/manifest.json is not installed"
    manifest = json.loads(manifest_file.read_text())
    listed = {o["arch"]: o["file"] for o in manifest["code_objects"]}
    names = {}
    for tag in EXPECTED:
        ext = "cubin" if tag.startswith("sm_") else "hsaco"
        rel = f"fftmatvec/_kernels/fftmatvec_kernels.{tag}.{ext}"
        assert rel in files, f"{rel} is not installed (manifest: {json.dumps(manifest)})"
        assert listed.get(tag) == Path(rel).name
        names[tag] = kernel_names(Path(files[rel].locate()).read_bytes())
    # Every code object holds the same, non-empty set of extern "C" entry points, except the
    # tensor-core and cp.async kernels (sbgemmp_*, sbgemva_*, sbgemvx_*), which exist in the
    # NVIDIA sm_80+ code objects only.
    def portable(found):
        return {n for n in found if not n.startswith(("sbgemmp_", "sbgemva_", "sbgemvx_"))}

    first = portable(names[EXPECTED[0]])
    assert first and not any(n.startswith("_Z") for n in first)
    # every GEMV tile the engine may launch is there, under the name it asks for
    io = [(i, o) for i in ("c128", "c64") for o in ("c128", "c64")]
    gemv = {f"sbgemv_{st}_{i}_{o}_r{rt}_k{kb}_v{v}"
            for st, tiles in TILES.items() for rt, kb, v in tiles for i, o in io}
    gemv |= {f"sbgemv_{st}_{i}_{o}_r{rt}_k1_v{v}_w{w}"
             for st, tiles in WIDE_TILES.items() for rt, v, w in tiles for i, o in io}
    gemv |= {f"sbgemvs_{st}_{i}_{o}_r{rt}_v{v}"
             for st, tiles in STAGED_TILES.items() for rt, v in tiles for i, o in io}
    assert gemv <= first, f"GEMV tiles missing: {sorted(gemv - first)[:5]}"
    for tag, found in names.items():
        got = portable(found)
        assert got == first, f"{tag} differs from {EXPECTED[0]}: {sorted(got ^ first)[:5]}"
        mma = found - got
        if tag.startswith("sm_") and int(tag[3:].rstrip("a")) >= 80:
            expected = {f"sbgemmp_{st}_{i}_{o}_m{mt}_v{v}_w{wr}x{wf}_k{ks}_s{ns}"
                        for st, tiles in PIPE_TILES.items() for mt, v, wr, wf, ks, ns in tiles
                        for i in ("c128", "c64") for o in ("c128", "c64")}
            expected |= {f"sbgemva_{st}_{i}_{o}_r{t[0]}_y{t[1]}_j{t[2]}_s{t[3]}"
                         + (f"_w{t[4]}" if len(t) > 4 else "")
                         for st, tiles in ASYNC_TILES.items() for t in tiles
                         for i in ("c128", "c64") for o in ("c128", "c64")}
            expected |= {f"sbgemvx_{st}_{i}_{o}_n{nd}_f{fw}"
                         for st, tiles in XREG_TILES.items() for fw in tiles for nd in XREG_ND
                         for i in ("c128", "c64") for o in ("c128", "c64")}
            assert mma == expected, f"{tag}: sm_80+ kernels differ: {sorted(mma ^ expected)[:5]}"
        else:
            assert not mma, f"{tag} has sm_80+ kernels: {sorted(mma)[:5]}"
    hip = files.get("fftmatvec/hip_kernels/fftmatvec_kernels.hip")
    assert hip is not None, "the hipified source is not installed"
    assert cuda_left(hip.read_text()) == []
    # the cuFFT callbacks are compiled at run time, from the installed source
    assert "fftmatvec/hip_kernels/fft_callbacks.cu" in files, "fft_callbacks.cu is not installed"


def llvm_readelf() -> str | None:
    """An llvm-readelf to read AMD code objects' metadata with: on the PATH (also the versioned
    names Debian's LLVM packages install, which its hipcc depends on), or ROCm's."""
    found = shutil.which("llvm-readelf")
    if found:
        return found
    versioned = sorted((p for d in os.environ.get("PATH", "").split(os.pathsep) if d
                        for p in glob(os.path.join(d, "llvm-readelf-[0-9]*"))),
                       key=lambda p: int(re.sub(r"\D", "", p.rsplit("-", 1)[1]) or 0))
    if versioned:
        return versioned[-1]
    rocm = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "llvm" / "bin" / "llvm-readelf"
    return str(rocm) if rocm.exists() else None


def amd_kernel_metadata(elf: bytes, tmp_path: Path, readelf: str) -> dict:
    """The ``amdhsa.kernels`` entries of an AMD code object's metadata note, by kernel name
    (llvm-readelf decodes the note to YAML)."""
    path = tmp_path / "device.elf"
    path.write_bytes(elf)
    out = subprocess.run([readelf, "--notes", str(path)], capture_output=True, text=True,
                         check=True).stdout
    # the YAML document follows the note's heading: "---" (indented), then a line "..."
    match = re.search(r"AMDGPU Metadata:\s*\n\s*---\s*\n(.*?)\n\.\.\.\s*$", out, re.S | re.M)
    assert match, f"no AMDGPU metadata note in {readelf} --notes output: {out[:500]}"
    meta = yaml.safe_load(match.group(1))
    return {k[".name"]: k for k in meta["amdhsa.kernels"]}


AMD_EXPECTED = [t for t in EXPECTED if t.startswith("gfx")]


@pytest.mark.skipif(not AMD_EXPECTED, reason="no AMD code object in FFTMATVEC_EXPECT_CODE_OBJECTS")
def test_installed_amd_code_objects_do_not_spill(tmp_path):
    """No kernel of an installed AMD code object spills registers or uses scratch memory: that
    hardware is not here to time them, and a spill is what would show first in their time."""
    readelf = llvm_readelf()
    assert readelf is not None, ("llvm-readelf not found (hipcc's LLVM installs it): the AMD "
                                 "code objects' metadata cannot be read")
    files = {str(f): f for f in importlib.metadata.files("fftmatvec") or []}
    for tag in AMD_EXPECTED:
        rel = f"fftmatvec/_kernels/fftmatvec_kernels.{tag}.hsaco"
        elf = device_elf(Path(files[rel].locate()).read_bytes())
        meta = amd_kernel_metadata(elf, tmp_path, readelf)
        assert set(meta) == kernel_names(elf), f"{tag}: the metadata and the symbols differ"
        spilling = {name: (k[".vgpr_spill_count"], k[".sgpr_spill_count"],
                           k[".private_segment_fixed_size"])
                    for name, k in meta.items()
                    if k[".vgpr_spill_count"] or k[".sgpr_spill_count"]
                    or k[".private_segment_fixed_size"] or k.get(".uses_dynamic_stack")}
        assert not spilling, (f"{tag}: {len(spilling)} kernels spill (VGPRs, SGPRs, scratch "
                              f"bytes): {sorted(spilling.items())[:5]}")
