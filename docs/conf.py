"""Sphinx configuration for the sk_deq documentation."""

import os
import sys
import warnings

sys.path.insert(0, os.path.abspath(".."))
import sk_deq  # noqa: E402

project = "sk_deq"
author = "sk_deq maintainers"
copyright = "2026, sk_deq maintainers"
release = sk_deq.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

intersphinx_mapping = {}  # no network at build time

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py|_common\.py",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "plot_gallery": "True",
}

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb", "auto_examples/*.py", "auto_examples/*.zip"]
html_theme = "pydata_sphinx_theme"
html_title = "sk_deq"
html_static_path = ["_static"]
html_theme_options = {"navigation_with_keys": False, "show_prev_next": False}
html_sidebars = {"**": []}

# matplotlib without a display
os.environ.setdefault("MPLBACKEND", "Agg")
warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")
