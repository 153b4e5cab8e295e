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


# the public modules whose ``__all__`` the hint tests walk; the last two adapt optional libraries
_PUBLIC = ["fftmatvec", "fftmatvec.io", "fftmatvec.inverse", "fftmatvec.distributed",
           "fftmatvec.tuning", "fftmatvec.fno", "fftmatvec.blocks", "fftmatvec.backend",
           "fftmatvec.torch", "fftmatvec.pylops"]
_OPTIONAL = {"fftmatvec.torch", "fftmatvec.pylops"}


def _public_functions():
    """``(qualified name, function)`` of every public function of the public modules and every
    public method of their public classes (``__init__`` and ``__call__`` included, with those
    inherited from the package's own base classes, class and static methods and property
    getters), each once."""
    import importlib
    import inspect

    found, seen = [], set()

    def add(name, f):
        if f is not None and f not in seen:
            seen.add(f)
            found.append((name, f))

    for name in _PUBLIC:
        try:
            module = importlib.import_module(name)
        except ImportError:
            if name in _OPTIONAL:
                continue
            raise
        for attr in module.__all__:
            try:
                obj = getattr(module, attr)
            except ImportError:  # fftmatvec.fno.SpectralConv without PyTorch
                continue
            if inspect.isfunction(obj):
                add(f"{name}.{attr}", obj)
            elif inspect.isclass(obj):
                for klass in obj.__mro__:
                    if not klass.__module__.startswith("fftmatvec"):
                        continue  # torch.nn.Module, pylops.LinearOperator, object
                    for key, member in vars(klass).items():
                        if key.startswith("_") and key not in ("__init__", "__call__"):
                            continue
                        if isinstance(member, (staticmethod, classmethod)):
                            member = member.__func__
                        elif isinstance(member, property):
                            member = member.fget
                        if inspect.isfunction(member):
                            add(f"{name}.{attr}.{key}", member)
    return found


def _missing_hints(f) -> list[str]:
    """The parameters of ``f`` without a hint, and ``"return"`` where its return lacks one;
    ``self``/``cls``, ``*args``/``**kwargs`` and underscore parameters are exempt."""
    import inspect

    sig = inspect.signature(f)
    missing = [p.name for p in sig.parameters.values()
               if p.name not in ("self", "cls") and not p.name.startswith("_")
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               and p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def test_hint_checker_flags_what_lacks_a_hint():
    """The checker of the next test sees a missing parameter or return hint, and exempts only
    ``self``, ``*args``/``**kwargs`` and underscore parameters."""

    def partly(a: int, b, *args, _private=None, **kwargs):
        return a

    def whole(self, a: int, *args: int, _private=None, **kwargs: int) -> int:
        return a

    assert _missing_hints(partly) == ["b", "return"]
    assert _missing_hints(whole) == []


def test_public_api_is_fully_hinted():
    """py.typed promises hints: every parameter and return of the public functions and methods
    has one."""
    functions = _public_functions()
    assert len(functions) > 100
    lacking = {name: miss for name, f in functions if (miss := _missing_hints(f))}
    assert not lacking, f"public functions or methods without hints: {lacking}"


def test_public_type_hints_resolve():
    """Every hint of the public functions and methods names something that exists (with
    postponed annotations a typo surfaces only here)."""
    import typing

    for name, f in _public_functions():
        try:
            typing.get_type_hints(f)
        except Exception as exc:  # a NameError or TypeError names the hint at fault
            raise AssertionError(f"{name}: its hints do not resolve: {exc!r}") from exc
