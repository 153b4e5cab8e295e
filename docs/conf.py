"""Sphinx configuration of the fftmatvec documentation.

Built by ``python -m sphinx -W -b html docs docs/_build`` from the repository root (see
building.md). The package is imported from the source tree, so the API reference documents the
code next to this folder; the gallery (``examples/``) runs on the CPU during the build.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("MPLBACKEND", "Agg")

import fftmatvec  # noqa: E402

project = "fftmatvec"
author = "The fftmatvec developers"
copyright = "2026, The fftmatvec developers"
version = release = fftmatvec.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
# docs/_build is the output
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip"]

# -- API reference: one page per public module, its members those of its __all__ -------------
autosummary_generate = True
autosummary_ignore_module_all = False
autosummary_imported_members = False
autodoc_default_options = {"members": True, "inherited-members": False, "show-inheritance": True}
# a name that the package exports at its top level is documented there only; the pages of the
# subpackages that export it too link to it (see _templates/autosummary/fm_module.rst)
autosummary_context = {"top_level": sorted(fftmatvec.__all__)}
autodoc_typehints = "none"  # numpydoc's Parameters section says the types
numpydoc_show_class_members = False  # the class template lists them
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
add_module_names = False


# -- Markdown pages (MyST) -------------------------------------------------------------------
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# -- Gallery ---------------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "abort_on_example_error": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "show_memory": False,
    "min_reported_time": 1,
}

# -- HTML ------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"fftmatvec {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 5,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# the top-level pages have no sub-pages to list beside them; the API and gallery pages do
html_sidebars = {"*": []}
html_static_path = ["_static"]
html_css_files = ["fftmatvec.css"]
html_show_sourcelink = False


def _hide_private_parameters(app, what, name, obj, options, signature, return_annotation):
    """Drop keyword parameters whose names start with ``_`` (internal) from signatures."""
    if signature:
        signature = re.sub(r",\s*_\w+(?:\s*:\s*[^=,)]+)?\s*=\s*[^,)]*(?=[,)])", "", signature)
        signature = re.sub(r",\s*\*\s*\)$", ")", signature)  # a bare * left with nothing after it
    return signature, return_annotation


def setup(app):
    app.connect("autodoc-process-signature", _hide_private_parameters)
