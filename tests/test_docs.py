"""The documentation site covers the public API: every public module is in docs/api.rst."""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import re

import fftmatvec

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Modules with an __all__ that stay out of the API reference on purpose: the GPU path's
# machinery and kernel loading (described in docs/gpu.md and docs/building.md) and the command
# line (described by its --help and docs/files.md).
INTERNAL = {"fftmatvec.cli", "fftmatvec.gpu", "fftmatvec.kernels"}


def _api_modules() -> list[str]:
    """The modules listed in docs/api.rst's autosummary."""
    text = (ROOT / "docs" / "api.rst").read_text(encoding="utf-8")
    return re.findall(r"(?m)^   (fftmatvec(?:\.\w+)*)\s*$", text)


def _public_modules() -> list[str]:
    """Modules of the package, not private, whose __all__ has a name the top level lacks."""
    top = set(fftmatvec.__all__)
    found = ["fftmatvec"]
    for info in pkgutil.iter_modules(fftmatvec.__path__):
        name = f"fftmatvec.{info.name}"
        if info.name.startswith("_") or name in INTERNAL:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:  # a module of an optional dependency not installed
            if (e.name or "").split(".")[0] == "fftmatvec":
                raise
            continue
        if set(getattr(module, "__all__", ())) - top:
            found.append(name)
    return found


def test_api_reference_lists_every_public_module():
    listed = _api_modules()
    assert listed, "docs/api.rst lists no module"
    missing = sorted(set(_public_modules()) - set(listed))
    assert not missing, f"public modules missing from docs/api.rst: {missing}"
    for name in listed:  # and each one listed can be imported
        importlib.import_module(name)


def test_gallery_examples_have_a_title():
    """sphinx-gallery needs a docstring with a title underlined by '=' in each example."""
    examples = sorted((ROOT / "examples").glob("plot_*.py"))
    assert examples
    for path in examples:
        head = path.read_text(encoding="utf-8").split('"""')[1].strip().splitlines()
        assert len(head) >= 2 and set(head[1]) == {"="} and len(head[1]) >= len(head[0]), path.name
