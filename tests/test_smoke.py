"""A first end-to-end look at the registry on real installed distributions."""

from sglang_backends import ServeBackendRegistry
from sglang_backends.builtins import default_builtins

PLUGIN = """
from sglang_backends import ServeBackend

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def test_installed_plugin_is_listed_and_loaded(site):
    site.install(
        "omni-runtime",
        entry_points={"omni": "omni_plugin:factory"},
        modules={"omni_plugin.py": PLUGIN},
    )
    registry = ServeBackendRegistry(default_builtins())
    # Other plugins (the echo example) may be installed in the environment too.
    names = registry.available_names
    assert names[:2] == ("llm", "diffusion")
    assert "omni" in names[2:] and list(names[2:]) == sorted(names[2:])
    loaded = registry.get("omni")
    assert loaded.name == "omni"
    assert loaded.distribution == "omni-runtime"
    assert registry.get("omni") is loaded
