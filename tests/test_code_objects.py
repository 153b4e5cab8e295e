"""Which prebuilt code object the loader takes: only one that the build's manifest lists with the
hash of the kernel sources the package holds (CPU only: the device is faked).

A code object built from other sources, as in a source checkout whose kernels changed after its
code objects were built, would run kernels whose arguments may no longer match those the Python
side passes; it is passed over with a warning, or refused under ``FFTMATVEC_KERNELS=prebuilt``.
"""

from __future__ import annotations

import importlib.metadata
import json
import warnings
from pathlib import Path

import pytest

from fftmatvec import backend, kernels

CUBIN = f"{kernels.MODULE_NAME}.sm_90.cubin"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A fake package: kernel sources, a code-object folder with one cubin, an sm_90 device."""
    src = tmp_path / "hip_kernels"
    src.mkdir()
    (src / f"{kernels.MODULE_NAME}.cu").write_text(
        '#include "a.cuh"\nextern "C" __global__ void k() {}\n')
    (src / "a.cuh").write_text("#pragma once\n")
    code = tmp_path / "_kernels"
    code.mkdir()
    (code / CUBIN).write_bytes(b"\x7fELF")
    monkeypatch.setattr(kernels, "_CODE_DIR", code)
    monkeypatch.setattr(kernels, "source_dir", lambda: src)
    monkeypatch.setattr(kernels, "_passed_over", set())
    monkeypatch.setattr(backend, "is_hip", lambda: False)
    monkeypatch.setattr(backend, "device_arch", lambda: "sm_90")
    monkeypatch.delenv("FFTMATVEC_KERNELS", raising=False)
    return src, code


def write_manifest(code: Path, sha: str, files=(CUBIN,)) -> None:
    objects = [{"file": f, "vendor": "cuda", "arch": f.split(".")[-2]} for f in files]
    (code / "manifest.json").write_text(json.dumps({"format": 1, "sources_sha256": sha,
                                                    "code_objects": objects}))


def loaded(expect_warning: str | None):
    """The loader's choice, with the one warning it should give (None: no warning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = kernels._code_object()
    got = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if expect_warning is None:
        assert got == []
    else:
        assert len(got) == 1 and expect_warning in got[0], got
    return path


def test_hash_covers_every_source_by_name(tree):
    src, _ = tree
    first = kernels.sources_sha256()
    assert first == kernels.sources_sha256(src) and len(first) == 64
    (src / "notes.txt").write_text("not a source")
    assert kernels.sources_sha256() == first
    (src / "a.cuh").write_text("#pragma once\n// changed\n")
    second = kernels.sources_sha256()
    assert second != first
    (src / "b.cuh").write_text("")
    assert kernels.sources_sha256() not in (first, second)


def test_object_built_from_these_sources_is_loaded(tree):
    _, code = tree
    write_manifest(code, kernels.sources_sha256())
    assert loaded(None) == code / CUBIN
    assert kernels.has_mma_kernels()


def test_object_built_from_other_sources_is_passed_over_once(tree):
    src, code = tree
    write_manifest(code, kernels.sources_sha256())
    (src / "a.cuh").write_text("#pragma once\n#define CHANGED 1\n")
    assert loaded("built from other kernel sources") is None
    assert loaded(None) is None  # warned once a code object
    # where the kernels are compiled, the device's own architecture decides
    assert kernels.has_mma_kernels()


@pytest.mark.parametrize("case", ["no manifest", "unlisted", "unreadable"])
def test_object_without_a_record_is_passed_over(tree, case):
    _, code = tree
    if case == "unlisted":
        other = f"{kernels.MODULE_NAME}.sm_80.cubin"
        write_manifest(code, kernels.sources_sha256(), files=(other,))
    elif case == "unreadable":
        (code / "manifest.json").write_text("{not json")
    expect = "does not list it" if case == "unlisted" else "no readable manifest.json"
    assert loaded(expect) is None


def test_prebuilt_only_refuses_a_stale_object(tree, monkeypatch):
    src, code = tree
    write_manifest(code, "0" * 64)
    monkeypatch.setenv("FFTMATVEC_KERNELS", "prebuilt")
    with pytest.raises(kernels.KernelLoadError, match=r"sm_90\.cubin is not loaded: it was built "
                                                      r"from other kernel sources"):
        kernels._code_object()
    monkeypatch.setenv("FFTMATVEC_KERNELS", "jit")
    assert loaded(None) is None


def test_installed_manifest_records_the_installed_sources():
    # The installed distribution, not the checkout that `python -m pytest` puts first on sys.path.
    try:
        files = {str(f): f for f in importlib.metadata.files("fftmatvec") or []}
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("fftmatvec is not installed")
    manifest = files.get("fftmatvec/_kernels/manifest.json")
    source = files.get(f"fftmatvec/hip_kernels/{kernels.MODULE_NAME}.cu")
    if manifest is None or source is None:
        pytest.skip("the installed package has no kernel build")
    recorded = json.loads(Path(manifest.locate()).read_text())["sources_sha256"]
    assert recorded == kernels.sources_sha256(Path(source.locate()).parent)


def test_passed_over_warning_points_at_the_caller(tree):
    """The warning names the line that asked for the kernels, not the loader's."""
    _, code = tree
    write_manifest(code, "0" * 64)
    with pytest.warns(RuntimeWarning, match="is not loaded") as caught:
        kernels.has_mma_kernels()
    assert [w.filename for w in caught] == [__file__]
