"""Sphinx configuration for sglang-backends."""

project = "sglang-backends"
copyright = "sglang-backends authors"
author = "sglang-backends authors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "stevedore.sphinxext",
    "cliff.sphinxext",
    "oslo_config.sphinxext",
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
intersphinx_mapping = {}

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "sglang-backends"
