"""Packaging: the version is written once, and the files a wheel and a citation need are there."""

from __future__ import annotations

import pathlib
import re

import pytest

import fftmatvec

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_version_is_written_once():
    """pyproject.toml reads the version from fftmatvec/__init__.py instead of typing it again."""
    project = _pyproject()["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    source = _pyproject()["tool"]["scikit-build"]["metadata"]["version"]
    assert source["provider"] == "scikit_build_core.metadata.regex"
    init = (ROOT / source["input"]).read_text(encoding="utf-8")
    # the regex provider's default pattern: one `__version__ = "..."` line
    found = re.findall(r'(?im)^__version__ *= *([\'"])v?(.+?)\1', init)
    assert [v for _, v in found] == [fftmatvec.__version__]
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc)?\d*(\.dev\d+)?", fftmatvec.__version__)


def test_typed_and_licensed():
    """The wheel ships py.typed (the package's hints are public) and the MIT licence text."""
    assert (ROOT / "fftmatvec" / "py.typed").is_file()
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License")
    assert "Copyright (c) 2026 The fftmatvec developers" in license_text
    assert _pyproject()["project"]["license"] == {"text": "MIT"}


def test_citation_and_changelog():
    """CITATION.cff names the title and licence; the changelog has a section per version."""
    cff = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"(?m)^cff-version: 1\.2\.0$", cff)
    assert re.search(r"(?m)^license: MIT$", cff)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog


def test_public_type_hints_resolve():
    """py.typed promises hints a type checker can read: every hint of the public functions and
    methods names something that exists (with postponed annotations a typo surfaces only here)."""
    import importlib
    import inspect
    import typing

    modules = ["fftmatvec", "fftmatvec.distributed", "fftmatvec.io", "fftmatvec.tuning",
               "fftmatvec.fno", "fftmatvec.backend", "fftmatvec.inverse", "fftmatvec.torch",
               "fftmatvec.pylops"]
    checked = 0
    optional = {"fftmatvec.torch", "fftmatvec.pylops"}  # adapters of optional libraries
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            if name in optional:
                continue
            raise
        for attr in module.__all__:
            obj = getattr(module, attr)
            if name == "fftmatvec.fno" and attr == "SpectralConv":
                continue  # a torch.nn.Module; PyTorch is optional
            functions = [obj] if inspect.isfunction(obj) else [
                f for k, f in vars(obj).items()
                if inspect.isfunction(f) and (not k.startswith("_") or k == "__init__")
            ] if inspect.isclass(obj) else []
            for f in functions:
                typing.get_type_hints(f)
                checked += 1
    assert checked > 20
