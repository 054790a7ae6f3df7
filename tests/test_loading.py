"""Loading: bounded in time during automatic detection, guarded, one factory call per plugin."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
import traceback

import pytest
from clitools import CLI, clean_environ, run_cli
from conftest import backend_module

from sglang_backends import (
    BackendLoadError,
    ServeBackend,
    ServeBackendRegistry,
    ServeRequest,
)
from sglang_backends._core import loading
from sglang_backends._sglang.builtins import default_builtins

REQUEST = ServeRequest(argv=("--model-path", "some/model"), model_path="some/model")
MATCH = "return ServeBackendDetection.MATCH"


def outcome(report, name):
    return next(o for o in report.outcomes if o.name == name)


def test_by_default_a_heavy_plugin_is_given_minutes_to_load():
    # A cold import of a torch-based runtime takes tens of seconds.
    assert ServeBackendRegistry(default_builtins()).load_timeout >= 120


def test_a_hanging_import_is_skipped_within_load_timeout(install_backend, registry_warnings):
    # A module name of its own: the abandoned import holds that module's import lock
    # for 20 s, and a later test in this process importing the same name would wait.
    install_backend(
        "slow-runtime", "slow", module="hung_import_plugin", prelude="time.sleep(20)", detect=MATCH
    )
    install_backend("quick-runtime", "quick", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins(), load_timeout=1.0, detect_timeout=1.0)
    started = time.perf_counter()
    report = registry.explain(REQUEST)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0 + 1.0 + 4.0  # load_timeout + detect_timeout + a loaded machine
    slow = outcome(report, "slow")
    assert slow.verdict.value == "timeout"
    assert slow.distribution == "slow-runtime"
    assert "slow-runtime" in slow.detail and "load_timeout" in slow.detail
    assert report.selected == "quick"  # a plugin that overran claims nothing
    warnings = [r.getMessage() for r in registry_warnings.records if r.levelname == "WARNING"]
    assert [w for w in warnings if "'slow'" in w and "slow-runtime" in w]


def test_each_outcome_reports_its_own_load_time(install_backend):
    install_backend("late-runtime", "late", prelude="time.sleep(1.0)\nraise ImportError('late')")
    install_backend("early-runtime", "early", prelude="raise ImportError('early')")
    report = ServeBackendRegistry(default_builtins()).explain(REQUEST)
    late, early = outcome(report, "late"), outcome(report, "early")
    assert (late.verdict.value, early.verdict.value) == ("error", "error")
    assert late.seconds >= 0.9
    assert early.seconds < 0.5  # not charged the slow one's time


def test_a_slow_load_is_logged_while_it_runs(install_backend, caplog, monkeypatch):
    from sglang_backends._core import loading

    monkeypatch.setattr(loading, "SLOW_LOAD_NOTICE", 0.3)
    caplog.set_level(logging.INFO, logger="sglang_backends")
    install_backend("heavy-runtime", "heavy", prelude="time.sleep(1.5)", detect=MATCH)
    report = ServeBackendRegistry(default_builtins()).explain(REQUEST)
    assert report.selected == "heavy"  # slow but healthy: loaded, not given up on
    notices = [
        r.getMessage()
        for r in caplog.records
        if r.name == "sglang_backends._core.loading" and "Still loading" in r.getMessage()
    ]
    assert notices and "'heavy'" in notices[0] and "heavy-runtime" in notices[0]


def test_a_lazy_builtin_is_bounded_like_a_plugin(registry_warnings):
    def slow_diffusion() -> ServeBackend:
        time.sleep(5)
        return ServeBackend(api_version=1, run=lambda request: None)

    registry = ServeBackendRegistry(
        {"llm": ServeBackend(api_version=1, run=lambda request: None), "diffusion": slow_diffusion},
        load_timeout=0.5,
    )
    started = time.perf_counter()
    report = registry.explain(REQUEST)
    assert time.perf_counter() - started < 4.0
    assert outcome(report, "diffusion").verdict.value == "timeout"
    assert "built-in" in outcome(report, "diffusion").detail
    assert report.selected == "llm"


@pytest.mark.parametrize(
    ("prelude", "cause"),
    [
        ("import asyncio\nraise asyncio.CancelledError()", "CancelledError"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("raise GeneratorExit('odd')", "GeneratorExit: odd"),
        ("import sys\nsys.exit(4)", "sys.exit(4)"),
    ],
    ids=["cancelled", "keyboard-interrupt", "generator-exit", "exit"],
)
def test_a_base_exception_at_import_is_that_plugins_failure(
    install_backend, registry_warnings, prelude, cause
):
    install_backend("odd-runtime", "odd", prelude=prelude, detect=MATCH)
    install_backend("fine-runtime", "fine", detect=MATCH)
    report = ServeBackendRegistry(default_builtins()).explain(REQUEST)
    odd = outcome(report, "odd")
    assert odd.verdict.value == "error" and cause in odd.detail
    assert report.selected == "fine"


def test_a_base_exception_in_a_factory_is_a_load_error(install_backend):
    source = "import asyncio\ndef factory():\n    raise asyncio.CancelledError('gone')\n"
    install_backend("odd-runtime", "odd", source=source)
    with pytest.raises(BackendLoadError, match=r"'odd' from odd-runtime: .*CancelledError: gone"):
        ServeBackendRegistry(default_builtins()).get("odd")


def test_get_in_the_main_thread_lets_a_keyboard_interrupt_through_as_the_api_reference_says(
    install_backend,
):
    """Nothing watches stop signals here, so it may be the user's Ctrl+C: it propagates."""
    source = "def factory():\n    raise KeyboardInterrupt\n"
    install_backend("odd-runtime", "odd", source=source)
    registry = ServeBackendRegistry(default_builtins())
    with pytest.raises(KeyboardInterrupt):
        registry.get("odd")


UNPRINTABLE = """\
class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no words")
"""


def test_an_exception_whose_message_cannot_be_had_is_still_the_plugins_load_error(
    install_backend,
):
    """Its ``__str__`` raising must not turn the failed load into that RuntimeError."""
    source = UNPRINTABLE + "def factory():\n    raise Unprintable()\n"
    install_backend("mute-runtime", "mute", source=source)
    expected = (
        "Failed to load serve backend 'mute' from mute-runtime: "
        "Unprintable: <exception str() failed>"
    )
    with pytest.raises(BackendLoadError) as raised:
        ServeBackendRegistry(default_builtins()).get("mute")
    assert (str(raised.value), raised.value.distribution) == (expected, "mute-runtime")


def test_a_detector_raising_an_unprintable_exception_is_its_error_outcome(
    install_backend, registry_warnings
):
    source = UNPRINTABLE + backend_module(detect="raise Unprintable()")
    install_backend("mute-runtime", "mute", source=source)
    report = ServeBackendRegistry(default_builtins()).explain(REQUEST)
    mute = outcome(report, "mute")
    assert mute.verdict.value == "error"
    assert mute.detail == "detector raised Unprintable: <exception str() failed>"


REENTRANT = """\
import hub
from sglang_backends import ServeBackend, ServeBackendDetection
CALLS = 0
def factory():
    global CALLS
    CALLS += 1
    hub.REGISTRY.get({wanted!r})
    return ServeBackend(api_version=1, run=lambda r: None, detect=lambda r: {verdict})
"""


def test_a_factory_asking_for_a_sibling_during_detection_runs_it_once(site, install_backend):
    site.install("hub", modules={"hub.py": "REGISTRY = None\n"})
    install_backend(
        "asker-runtime",
        "asker",
        module="asker_plugin",
        source=REENTRANT.format(wanted="sibling", verdict="ServeBackendDetection.NO_MATCH"),
    )
    install_backend(
        "sibling-runtime",
        "sibling",
        module="sibling_plugin",
        source=backend_module(detect="time.sleep(0.2); return ServeBackendDetection.MATCH")
        + "FACTORY_DELAY = 0.5\n",
    )
    import hub
    import sibling_plugin

    registry = ServeBackendRegistry(default_builtins())
    hub.REGISTRY = registry
    assert registry.auto_detect(REQUEST).name == "sibling"
    assert registry.get("sibling") is registry.get("sibling-runtime:sibling")
    assert sibling_plugin.CALLS == 1


def test_a_factory_asking_for_itself_fails_instead_of_hanging(site, install_backend):
    site.install("hub", modules={"hub.py": "REGISTRY = None\n"})
    install_backend(
        "selfish-runtime",
        "selfish",
        module="selfish_plugin",
        source=REENTRANT.format(wanted="selfish", verdict="ServeBackendDetection.MATCH"),
    )
    import hub

    registry = ServeBackendRegistry(default_builtins(), load_timeout=30)
    hub.REGISTRY = registry
    started = time.perf_counter()
    report = registry.explain(REQUEST)
    assert time.perf_counter() - started < 10
    selfish = outcome(report, "selfish")
    assert selfish.verdict.value == "error"
    assert "asked the registry for it while it was loading" in selfish.detail
    with pytest.raises(BackendLoadError, match="asked the registry for it"):
        registry.get("selfish")  # the failure is the plugin's one load: not retried


@pytest.mark.parametrize("wanted", ["selfish", "selfish-runtime:selfish"])
def test_a_factory_asking_for_itself_fails_in_the_words_of_the_plugin_guide(
    site, install_backend, wanted
):
    """Once: the load's failure is not worded again around the same failure."""
    site.install("hub", modules={"hub.py": "REGISTRY = None\n"})
    source = REENTRANT.format(wanted=wanted, verdict="ServeBackendDetection.MATCH")
    install_backend("selfish-runtime", "selfish", module="selfish_plugin", source=source)
    import hub

    registry = ServeBackendRegistry(default_builtins())
    hub.REGISTRY = registry
    with pytest.raises(BackendLoadError) as raised:
        registry.get("selfish")
    assert str(raised.value) == (
        "Failed to load serve backend 'selfish' from selfish-runtime: its factory asked the "
        "registry for it while it was loading"
    )
    assert (raised.value.name, raised.value.distribution) == ("selfish", "selfish-runtime")


def test_concurrent_gets_run_a_factory_once(install_backend):
    """However many threads ask, automatic detection among them: one object, one call."""
    import threading

    module = install_backend("busy-runtime", "busy", prelude="FACTORY_DELAY = 0.3")
    registry = ServeBackendRegistry(default_builtins())
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(registry.get("busy"))) for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    report = registry.explain(REQUEST)
    for thread in threads:
        thread.join()
    assert len(results) == 16 and len({id(r) for r in results}) == 1
    assert outcome(report, "busy").verdict.value == "no detector"
    assert __import__(module).CALLS == 1


def test_serve_says_which_plugin_is_still_loading_and_skips_it(site, install_backend):
    install_backend("slow-runtime", "slow", prelude="time.sleep(60)", detect=MATCH)
    started = time.perf_counter()
    result = run_cli(
        site,
        "serve",
        "some/model",
        # The notice comes after 5 s: 3 s to spare on a busy machine.
        env={"OS_SERVE_BACKENDS__LOAD_TIMEOUT": "8"},
        timeout=60,
    )
    assert time.perf_counter() - started < 40
    lines = result.stderr.splitlines()
    still = [line for line in lines if "Still loading serve backend 'slow'" in line]
    assert still and "slow-runtime" in still[0], result.stderr
    skipped = [line for line in lines if "Skipping automatic detection" in line]
    assert skipped and "'slow'" in skipped[0] and "slow-runtime" in skipped[0]
    assert "did not finish within 8 s (load_timeout)" in skipped[0]
    assert "Traceback" not in result.stderr


def test_the_users_ctrl_c_still_stops_serve_while_a_plugin_loads(site, install_backend):
    install_backend("slow-runtime", "slow", prelude="time.sleep(60)", detect=MATCH)
    environ = clean_environ(site.environ())
    environ["XDG_CACHE_HOME"] = str(site.path.parent / "cache")
    process = subprocess.Popen(
        [CLI, "serve", "some/model"],
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        time.sleep(3)
        assert process.poll() is None
        os.kill(process.pid, signal.SIGINT)
        status = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    assert status == 128 + signal.SIGINT


def test_an_exact_entry_point_name_wins_over_dist_name(site, install_backend):
    install_backend("omni-runtime", "ns:omni", module="ns_omni_plugin")
    registry = ServeBackendRegistry(default_builtins())
    assert "ns:omni" in registry.available_names
    loaded = registry.get("ns:omni")
    assert (loaded.name, loaded.distribution) == ("ns:omni", "omni-runtime")


def test_an_exact_entry_point_name_wins_over_a_real_distribution(site, install_backend):
    install_backend("ns", "omni", module="ns_plugin")
    install_backend("other-runtime", "ns:omni", module="other_plugin")
    registry = ServeBackendRegistry(default_builtins())
    assert registry.get("ns:omni").distribution == "other-runtime"
    assert registry.get("omni").distribution == "ns"


def test_load_timeout_from_settings_reaches_the_registry(monkeypatch):
    from sglang_backends.config import load_settings

    monkeypatch.setenv("OS_SERVE_BACKENDS__LOAD_TIMEOUT", "42")
    settings = load_settings()
    assert settings.load_timeout == 42.0
    assert ServeBackendRegistry.from_settings(settings).load_timeout == 42.0


def test_invalid_load_timeout_in_configuration_is_refused(monkeypatch):
    from sglang_backends.config import load_settings
    from sglang_backends.errors import ConfigurationError

    monkeypatch.setenv("OS_SERVE_BACKENDS__LOAD_TIMEOUT", "0")
    with pytest.raises(ConfigurationError, match=r"\[serve_backends\] load_timeout"):
        load_settings()


def test_detection_does_not_start_serving_a_plugin_that_loaded_late(install_backend):
    """A plugin whose load overran is not a match, even if its detector would match."""
    install_backend("late-runtime", "late", prelude="time.sleep(2)", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins(), load_timeout=0.5)
    assert registry.explain(REQUEST).selected == "llm"


def test_a_load_another_caller_has_claimed_is_awaited_not_timed_out(install_backend):
    """explain() racing get(): a load claimed but not yet started is waited for, within bounds."""
    import threading

    install_backend("racing-runtime", "racing")
    for _ in range(100):  # the window is narrow: give the race many chances
        registry = ServeBackendRegistry(default_builtins())
        thread = threading.Thread(target=registry.get, args=("racing",))
        thread.start()
        report = registry.explain(REQUEST)
        thread.join()
        assert outcome(report, "racing").verdict.value == "no detector"


CYCLE = """\
import time
import hub
from sglang_backends import ServeBackend, ServeBackendDetection
def factory():
    time.sleep(0.3)  # both loads under way before either asks for the other
    hub.REGISTRY.get({wanted!r})
    return ServeBackend(api_version=1, run=lambda r: None, detect=lambda r: {verdict})
"""


@pytest.fixture
def cycle(site, install_backend):
    """Backends ``cya`` and ``cyb``, each of whose factories asks the registry for the other;
    returns a function making the registry they ask."""
    site.install("hub", modules={"hub.py": "REGISTRY = None\n"})
    for name, wanted in (("cya", "cyb"), ("cyb", "cya")):
        source = CYCLE.format(wanted=wanted, verdict="ServeBackendDetection.NO_MATCH")
        install_backend(f"{name}-dist", name, module=f"{name}_plugin", source=source)
    import hub

    def registry(**options):
        hub.REGISTRY = ServeBackendRegistry(default_builtins(), **options)
        return hub.REGISTRY

    return registry


def test_two_factories_asking_for_each_other_from_two_threads_fail_instead_of_hanging(cycle):
    """A wait for a load that waits for this thread never ends: it is refused, as when one
    thread loads both (``get()`` itself is unbounded, so a hang would be for ever)."""
    registry = cycle()
    failures = {}

    def get(name):
        try:
            registry.get(name)
        except BackendLoadError as exc:
            failures[name] = str(exc)

    threads = [threading.Thread(target=get, args=(name,), daemon=True) for name in ("cya", "cyb")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(failures) == ["cya", "cyb"]
    assert all("asked the registry for it while it was loading" in f for f in failures.values())


def test_two_factories_asking_for_each_other_during_detection_are_errors_not_timeouts(
    cycle, registry_warnings
):
    registry = cycle(load_timeout=30)
    report = registry.explain(REQUEST)
    assert {outcome(report, name).verdict.value for name in ("cya", "cyb")} == {"error"}
    with pytest.raises(BackendLoadError, match="asked the registry for it"):
        registry.get("cya")  # at once: the loads ended


def test_a_failed_load_raised_again_and_again_keeps_its_traceback_short(install_backend):
    """The failure is kept, not retried; each raise starts from its own frames."""
    install_backend("flaky-runtime", "flaky", source="def factory():\n    assert False, 'no'\n")
    registry = ServeBackendRegistry(default_builtins())
    depths = []
    for _ in range(50):
        with pytest.raises(BackendLoadError) as raised:
            registry.get("flaky")
        depths.append(len(traceback.extract_tb(raised.value.__traceback__)))
    assert depths[-1] == depths[1], depths


def test_a_caller_awaiting_a_load_another_started_hears_it_is_still_loading(
    install_backend, monkeypatch, caplog
):
    monkeypatch.setattr(loading, "SLOW_LOAD_NOTICE", 0.2)
    install_backend("slow-runtime", "slowpoke", module="slowpoke_plugin", prelude="time.sleep(1)")
    registry = ServeBackendRegistry(default_builtins())
    first = threading.Thread(target=registry.get, args=("slowpoke",), daemon=True)
    first.start()
    time.sleep(0.1)
    with caplog.at_level(logging.INFO, logger="sglang_backends"):
        registry.get("slowpoke")  # awaits the first caller's load
    first.join(10)
    stills = [r for r in caplog.records if r.getMessage().startswith("Still loading")]
    assert len(stills) >= 2, caplog.text  # the first caller's line, and the awaiting one's
