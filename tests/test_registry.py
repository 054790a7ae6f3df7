"""The registry's listing, selection, validation and enabled/disabled rules.

Every plugin here is a real installed distribution (a dist-info directory on
``sys.path``); whether a plugin was imported is read from ``sys.modules``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import pytest

from sglang_backends import (
    BackendConflictError,
    BackendLoadError,
    BackendTypeError,
    ConfigurationError,
    DisabledBackendError,
    ServeBackend,
    ServeBackendDetection,
    ServeBackendError,
    ServeBackendRegistry,
    ServeRequest,
    UnknownBackendError,
)
from sglang_backends._core.selection import PluginStatus
from sglang_backends._core.settings import Settings
from sglang_backends._sglang import builtins as host
from sglang_backends._sglang.builtins import default_builtins

# -- listing -------------------------------------------------------------------


def test_available_names_lists_builtins_in_order_then_plugins_sorted(install_backend, preinstalled):
    modules = [install_backend(f"dist-{name}", name) for name in ("zeta", "alpha", "mid")]
    builtins = {
        "second": ServeBackend(api_version=1, run=print),
        "first": ServeBackend(api_version=1, run=print),
    }
    registry = ServeBackendRegistry(builtins)
    plugins = sorted({"zeta", "alpha", "mid", *preinstalled})
    assert registry.available_names == ("second", "first", *plugins)
    assert registry.builtin_names == ("second", "first")
    assert not [m for m in modules if m in sys.modules]


def test_plugins_reports_each_entry_point_with_its_status(install_backend, preinstalled):
    install_backend("ok-dist", "ok")
    install_backend("dup-a", "dup")
    install_backend("dup-b", "dup")
    install_backend("off-dist", "off")
    registry = ServeBackendRegistry(default_builtins(), disabled=["off"])
    statuses = [
        (r.plugin.name, r.plugin.distribution, r.status)
        for r in registry.plugins
        if r.plugin.name not in preinstalled
    ]
    assert statuses == [
        ("dup", "dup-a", PluginStatus.DUPLICATE),
        ("dup", "dup-b", PluginStatus.DUPLICATE),
        ("off", "off-dist", PluginStatus.DISABLED),
        ("ok", "ok-dist", PluginStatus.ENABLED),
    ]


# -- get -----------------------------------------------------------------------


def test_get_imports_only_the_selected_plugin_and_memoises(install_backend):
    wanted = install_backend("omni-runtime", "omni")
    other = install_backend("other-runtime", "other")
    registry = ServeBackendRegistry(default_builtins())
    loaded = registry.get("omni")
    assert (loaded.name, loaded.distribution) == ("omni", "omni-runtime")
    assert wanted in sys.modules
    assert other not in sys.modules
    assert registry.get("omni") is loaded
    assert registry.get("omni-runtime:omni") is loaded
    assert sys.modules[wanted].CALLS == 1


def test_builtins_are_returned_without_distribution():
    builtins = default_builtins()
    registry = ServeBackendRegistry(builtins)
    assert registry.get("llm").backend is builtins["llm"]
    loaded = registry.get("diffusion")  # a lazy built-in: built by its factory, once
    assert loaded.backend.run is host.run_diffusion
    assert registry.get("diffusion") is loaded
    assert loaded.distribution is None


def test_loaded_backends_are_returned_while_another_plugin_loads(install_backend):
    source = (
        "import threading\n"
        "from sglang_backends import ServeBackend\n"
        "ENTERED, GATE = threading.Event(), threading.Event()\n"
        "def factory():\n"
        "    ENTERED.set()\n"
        "    GATE.wait(10)\n"
        "    return ServeBackend(api_version=1, run=print)\n"
    )
    module = install_backend("gated-runtime", "gated", source=source)
    registry = ServeBackendRegistry(default_builtins())
    loader = threading.Thread(target=registry.get, args=("gated",))
    loader.start()
    try:
        entered = None
        for _ in range(200):  # until the factory runs (or 10 s pass)
            # The module is in sys.modules while its body still runs: ENTERED may not exist yet.
            entered = getattr(sys.modules.get(module), "ENTERED", None)
            if entered is not None and entered.is_set():
                break
            time.sleep(0.05)
        assert entered is not None and entered.is_set()
        assert registry.get("llm").name == "llm"
        assert loader.is_alive()  # the factory was still running
    finally:
        gate = getattr(sys.modules.get(module), "GATE", None)
        if gate is not None:
            gate.set()
        loader.join(10)
    assert registry.get("gated").name == "gated"


def test_unknown_name_lists_available_values(install_backend, preinstalled):
    install_backend("omni-runtime", "omni")
    registry = ServeBackendRegistry(default_builtins())
    with pytest.raises(ValueError) as info:
        registry.get("x")
    plugins = ", ".join(sorted({"omni", *preinstalled}))
    assert str(info.value) == (
        f"Unknown serve backend 'x'. Available values: auto, llm, diffusion, {plugins}."
    )
    assert isinstance(info.value, UnknownBackendError)
    assert isinstance(info.value, ServeBackendError)


@pytest.mark.parametrize("name", ["auto", "nope-dist:omni", "omni-runtime:llm"])
def test_reserved_and_unprovided_qualified_names_are_unknown(install_backend, name):
    install_backend("omni-runtime", "omni")
    with pytest.raises(UnknownBackendError, match=r"^Unknown serve backend"):
        ServeBackendRegistry(default_builtins()).get(name)


def test_auto_asked_of_get_is_unknown_as_upstream_words_it_without_offering_itself(
    preinstalled,
):
    """``auto`` is among the values listed, as upstream lists it; it is not a closest name."""
    with pytest.raises(UnknownBackendError) as info:
        ServeBackendRegistry(default_builtins()).get("auto")
    plugins = "".join(f", {name}" for name in sorted(preinstalled))
    assert str(info.value) == (
        f"Unknown serve backend 'auto'. Available values: auto, llm, diffusion{plugins}."
    )


@pytest.mark.parametrize("name", [5, None, b"omni"])
def test_a_name_that_is_no_string_is_unknown_as_upstream_says(install_backend, name):
    """Upstream looks any value up and answers unknown: so does get(), without a suggestion."""
    install_backend("omni-runtime", "omni")
    with pytest.raises(UnknownBackendError) as info:
        ServeBackendRegistry(default_builtins())[name]
    assert str(info.value).startswith(f"Unknown serve backend {name!r}. Available values: auto,")


# -- reserved names and duplicates ---------------------------------------------


@pytest.mark.parametrize("name", ["llm", "diffusion", "auto"])
def test_plugin_cannot_replace_a_builtin_or_auto(install_backend, name):
    module = install_backend("sneaky-runtime", name)
    with pytest.raises(RuntimeError, match="cannot replace") as info:
        ServeBackendRegistry(default_builtins())
    assert isinstance(info.value, BackendConflictError)
    assert "sneaky-runtime" in str(info.value)
    assert name in str(info.value)
    assert module not in sys.modules


def test_disabled_conflicting_plugin_does_not_raise(install_backend, preinstalled):
    module = install_backend("sneaky-runtime", "llm")
    install_backend("omni-runtime", "omni")
    registry = ServeBackendRegistry(default_builtins(), enabled=["omni"])
    assert registry.available_names == ("llm", "diffusion", "omni")
    assert registry.get("llm").distribution is None
    registry = ServeBackendRegistry(default_builtins(), disabled=["llm"])
    assert registry.available_names == ("llm", "diffusion", *sorted({"omni", *preinstalled}))
    assert module not in sys.modules


def test_builtin_named_auto_is_a_value_error():
    with pytest.raises(ValueError, match="auto") as info:
        ServeBackendRegistry({"auto": ServeBackend(api_version=1, run=print)})
    assert isinstance(info.value, ConfigurationError)
    with pytest.raises(ConfigurationError, match="auto"):  # Settings given directly too
        ServeBackendRegistry.from_settings(
            Settings(), {"auto": ServeBackend(api_version=1, run=print)}
        )


@pytest.mark.parametrize("same_target", [False, True], ids=["own-targets", "same-target"])
def test_two_providers_of_one_name_raise_before_importing_either(
    install_backend, same_target, preinstalled
):
    if same_target:
        first = install_backend("zed-runtime", "omni", module="shared_omni")
        second = install_backend("acme-runtime", "omni", module="shared_omni")
    else:
        first = install_backend("zed-runtime", "omni")
        second = install_backend("acme-runtime", "omni")
    registry = ServeBackendRegistry(default_builtins())
    assert registry.available_names == ("llm", "diffusion", *sorted({"omni", *preinstalled}))
    with pytest.raises(RuntimeError) as info:
        registry.get("omni")
    assert "Multiple distributions register serve backend 'omni': acme-runtime, zed-runtime." in (
        str(info.value)
    )
    assert isinstance(info.value, BackendConflictError)
    assert info.value.providers == ("acme-runtime", "zed-runtime")
    assert first not in sys.modules
    assert second not in sys.modules

    picked = registry.get("zed-runtime:omni")
    assert picked.distribution == "zed-runtime"
    assert registry.get("zed_runtime:omni") is picked  # names compare normalized
    assert registry.get("acme-runtime:omni").distribution == "acme-runtime"


def test_plugin_of_names_the_entry_point_a_backend_was_loaded_from(install_backend):
    install_backend("zed-runtime", "omni", module="zed_omni")
    install_backend("acme-runtime", "omni", module="acme_omni")
    registry = ServeBackendRegistry(default_builtins())
    plugin = registry.plugin_of(registry.get("zed-runtime:omni"))
    assert plugin is not None
    assert (plugin.distribution, plugin.target) == ("zed-runtime", "zed_omni:factory")
    assert registry.plugin_of(registry.get("llm")) is None


# -- factory validation --------------------------------------------------------

BROKEN = {
    "import-error": (
        "raise ImportError('needs libfoo')",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: needs libfoo",
        ImportError,
    ),
    "multi-line": (
        "raise ImportError('needs libfoo\\n  and libbar')",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: needs libfoo and libbar",
        ImportError,
    ),
    "sys-exit": (
        "import sys; sys.exit(3)",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: "
        "plugin called sys.exit(3) while loading",
        SystemExit,
    ),
    "assert": (
        "assert False, 'bad setup'",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: AssertionError: bad setup",
        AssertionError,
    ),
    "not-callable": (
        "",
        "{module}:CALLS",
        "Failed to load serve backend 'broken' from broken-runtime: "
        "the entry point must resolve to a callable factory",
        TypeError,
    ),
    "missing-attr": (
        "",
        "{module}:nothing_here",
        "Failed to load serve backend 'broken' from broken-runtime: "
        "module 'broken_plugin' has no attribute 'nothing_here'",
        AttributeError,
    ),
    "malformed-target": (
        "",
        "not a target!!",
        "Failed to load serve backend 'broken' from broken-runtime: malformed entry point "
        "target 'not a target!!'; expected 'module:attribute'",
        ValueError,
    ),
    "syntax-error": (
        "def oops(:",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: invalid syntax",
        SyntaxError,
    ),
    "factory-raises": (
        "def factory():\n    raise OSError('no GPU here')",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: no GPU here",
        OSError,
    ),
    "factory-exits": (
        "def factory():\n    raise SystemExit('bye')",
        None,
        "Failed to load serve backend 'broken' from broken-runtime: "
        "plugin called sys.exit('bye') while loading",
        SystemExit,
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_plugin_is_a_runtime_error_naming_backend_and_distribution(
    site, install_backend, case, caplog
):
    """Said once, in one line: stevedore's own logger says nothing."""
    caplog.set_level(logging.DEBUG, logger="stevedore")
    prelude, target, message, cause = BROKEN[case]
    module = "broken_plugin"
    source = "CALLS = 0\ndef factory():\n    return None\n" + prelude + "\n"
    install_backend(
        "broken-runtime",
        "broken",
        module=module,
        source=source,
        target=target and target.format(module=module),
    )
    registry = ServeBackendRegistry(default_builtins())
    with pytest.raises(RuntimeError) as info:
        registry.get("broken")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, BackendLoadError)
    assert (info.value.name, info.value.distribution) == ("broken", "broken-runtime")
    assert isinstance(info.value.__cause__, BaseException)
    chain = info.value.__cause__
    assert isinstance(chain, cause) or isinstance(chain.__cause__, cause)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(
    ("returned", "type_name"),
    [("None", "NoneType"), ("{'api_version': 1}", "dict"), ("object()", "object")],
)
def test_factory_returning_something_else_is_a_type_error(install_backend, returned, type_name):
    source = f"def factory():\n    return {returned}\n"
    install_backend("odd-runtime", "odd", source=source)
    with pytest.raises(TypeError) as info:
        ServeBackendRegistry(default_builtins()).get("odd")
    assert isinstance(info.value, BackendTypeError)
    assert f"Serve backend 'odd' factory returned {type_name};" in str(info.value)
    assert "odd-runtime" in str(info.value)


def test_other_api_version_is_a_runtime_error(install_backend):
    install_backend("future-runtime", "future", api_version=2)
    with pytest.raises(RuntimeError) as info:
        ServeBackendRegistry(default_builtins()).get("future")
    assert isinstance(info.value, BackendLoadError)
    message = str(info.value)
    assert message.startswith("Serve backend 'future' from future-runtime uses API version 2;")
    assert message.endswith("requires version 1.")


def test_failed_load_is_not_memoised_as_success(install_backend):
    module = install_backend("flaky-runtime", "flaky", prelude="raise ImportError('first try')")
    registry = ServeBackendRegistry(default_builtins())
    for _ in range(2):
        with pytest.raises(BackendLoadError, match="first try"):
            registry.get("flaky")
    assert module not in sys.modules


# -- enabled / disabled --------------------------------------------------------


def test_disabled_plugin_is_never_imported_nor_listed(install_backend, preinstalled):
    off = install_backend("off-runtime", "off", detect="return ServeBackendDetection.MATCH")
    on = install_backend("on-runtime", "on")
    registry = ServeBackendRegistry(default_builtins(), disabled=["off"])
    assert registry.available_names == ("llm", "diffusion", *sorted({"on", *preinstalled}))
    with pytest.raises(ValueError) as info:
        registry.get("off")
    assert isinstance(info.value, DisabledBackendError)
    assert str(info.value) == (
        "Serve backend 'off' from off-runtime is disabled by the disabled list; "
        "remove it from that list to use it."
    )
    from sglang_backends import ServeRequest

    assert registry.auto_detect(ServeRequest(argv=(), model_path="m")).name == "llm"
    assert off not in sys.modules
    assert on in sys.modules  # auto detection did load the enabled one


def test_plugin_outside_enabled_list_is_never_imported(install_backend):
    off = install_backend("off-runtime", "off", detect="return ServeBackendDetection.MATCH")
    install_backend("on-runtime", "on")
    registry = ServeBackendRegistry(default_builtins(), enabled=["on"])
    assert registry.available_names == ("llm", "diffusion", "on")
    with pytest.raises(DisabledBackendError, match="is not enabled by the enabled list; add it"):
        registry.get("off")
    from sglang_backends import ServeRequest

    assert registry.auto_detect(ServeRequest(argv=(), model_path="m")).name == "llm"
    assert off not in sys.modules


def test_a_dist_name_in_a_list_is_offered_its_backend_name(install_backend, registry_warnings):
    """The lists take backend names: ``on-runtime:on`` there selects nothing, and says which
    name was meant."""
    install_backend("on-runtime", "on")
    registry = ServeBackendRegistry(default_builtins(), enabled=["on-runtime:on"])
    assert registry.available_names == ("llm", "diffusion")
    [message] = [
        r.getMessage() for r in registry_warnings.records if r.name.startswith("sglang_backends")
    ]
    # Not "not installed": it is, and the list's form is the slip.
    assert (
        "'on-runtime:on' in the enabled list: it takes names, not DIST:NAME; did you mean 'on'?"
    ) in message


def test_empty_enabled_list_allows_no_plugin(install_backend):
    install_backend("on-runtime", "on")
    registry = ServeBackendRegistry(default_builtins(), enabled=[])
    assert registry.available_names == ("llm", "diffusion")


def test_selection_naming_an_uninstalled_plugin_warns(
    install_backend, registry_warnings, preinstalled
):
    install_backend("on-runtime", "on")
    ServeBackendRegistry(default_builtins(), enabled=["on", "ghost"], disabled=["phantom"])
    messages = [
        r.getMessage() for r in registry_warnings.records if r.name.startswith("sglang_backends")
    ]
    assert len(messages) == 2
    assert "'ghost' in the enabled list is not installed" in messages[0]
    assert "'phantom' in the disabled list is not installed" in messages[1]
    installed = ", ".join(sorted({"on", *preinstalled}))
    assert all(m.endswith(f"Installed plugins: {installed}") for m in messages)


def test_selection_naming_installed_plugins_does_not_warn(install_backend, registry_warnings):
    install_backend("on-runtime", "on")
    install_backend("off-runtime", "off")
    ServeBackendRegistry(default_builtins(), enabled=["on"], disabled=["off"])
    assert not registry_warnings.records


@pytest.mark.parametrize("option", ["detect_timeout", "load_timeout"])
@pytest.mark.parametrize(
    "value", [0, -1, float("inf"), float("nan"), 1e10, 10**400, True, b"5", None]
)
def test_invalid_timeout_is_refused(option, value):
    # 1e10 s is past what a thread may wait (threading.TIMEOUT_MAX): refused, not an OverflowError;
    # so is an int too large for a float. A bool, or bytes float() would read, is no number.
    with pytest.raises(ConfigurationError, match=option):
        ServeBackendRegistry(default_builtins(), **{option: value})


@pytest.mark.parametrize(
    "selection", [{"enabled": "omni"}, {"disabled": "omni"}, {"preferred": "omni"}]
)
def test_a_single_string_selection_is_refused(selection):
    with pytest.raises(TypeError, match="collection of backend names, not a string"):
        ServeBackendRegistry(default_builtins(), **selection)
    with pytest.raises(ConfigurationError, match="collection of backend names, not a string"):
        ServeBackendRegistry.from_settings(Settings(**selection))


def test_lazy_builtin_is_built_on_first_use_only_once():
    calls = []

    def diffusion_factory():
        calls.append(1)
        return ServeBackend(
            api_version=1,
            run=lambda request: None,
            detect=lambda request: ServeBackendDetection.MATCH,
        )

    registry = ServeBackendRegistry(
        {
            "llm": ServeBackend(api_version=1, run=lambda request: None),
            "diffusion": diffusion_factory,
        }
    )
    assert registry.available_names[:2] == ("llm", "diffusion")
    assert calls == []  # listing builds nothing
    request = ServeRequest(argv=("--model-path", "m"), model_path="m")
    assert registry.auto_detect(request).name == "diffusion"
    assert registry.get("diffusion") is registry.get("diffusion")
    assert registry.get("diffusion").distribution is None
    assert calls == [1]


def test_failing_lazy_builtin_is_a_load_error_and_claims_nothing(registry_warnings):
    def broken():
        raise ImportError("no module named sglang")

    registry = ServeBackendRegistry(
        {"llm": ServeBackend(api_version=1, run=lambda request: None), "diffusion": broken}
    )
    with pytest.raises(BackendLoadError, match=r"built-in serve backend 'diffusion'.*sglang"):
        registry.get("diffusion")
    request = ServeRequest(argv=("--model-path", "m"), model_path="m")
    report = registry.explain(request)
    assert report.selected == "llm"
    outcome = next(o for o in report.outcomes if o.name == "diffusion")
    assert outcome.verdict.value == "error"
    assert "no module named sglang" in (outcome.detail or "")
