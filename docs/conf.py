"""Sphinx configuration of txdilation's documentation site (build it with ``docs/build``).

The guide pages are the Markdown files of this directory as they are (MyST); the reference
(``reference/``) is generated: the API from the docstrings (autodoc), the command lines from
their parsers and the state diagrams from ``state-diagrams/`` (``_ext/txdilation_docs.py``).
The build treats every warning as an error (``docs/build``, ``tests/test_docs_site.py``).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))  # (a checkout not installed)

project = "txdilation"
author = "the txdilation authors"
copyright = "txdilation's authors"

extensions = ["myst_parser", "sphinx.ext.autodoc", "txdilation_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]

myst_heading_anchors = 4  # the pages link to each other's sections (#lifecycle-and-stopping)
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "alabaster"
html_title = "txdilation"
html_theme_options = {
    "description": "Magic-wormhole's Dilation for Twisted: fast, durable, drop-in"
}
html_static_path = ["_static"]
