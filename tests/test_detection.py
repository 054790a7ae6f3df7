"""Automatic detection: upstream's semantics, concurrent and bounded in time."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from sglang_backends import (
    AmbiguousDetectionError,
    ServeBackend,
    ServeBackendDetection,
    ServeBackendError,
    ServeBackendRegistry,
    ServeRequest,
)
from sglang_backends._core.detection import TimedRun, Verdict
from sglang_backends._sglang.builtins import default_builtins

REQUEST = ServeRequest(argv=("--model-path", "some/model"), model_path="some/model")
MATCH = "return ServeBackendDetection.MATCH"
NO_MATCH = "return ServeBackendDetection.NO_MATCH"
# A Diffusers pipeline index as SGLang recognises it: a JSON object naming the version.
DIFFUSERS_INDEX = '{"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0"}'


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("sglang_backends") and r.levelname == "WARNING"
    ]


def verdicts(report, ignore: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """``(name, verdict)`` in report order, leaving out the backends named in *ignore*."""
    return [(o.name, o.verdict.value) for o in report.outcomes if o.name not in ignore]


def test_nothing_matches_falls_back_to_llm(install_backend, preinstalled):
    install_backend("no-runtime", "no", detect=NO_MATCH)
    install_backend("quiet-runtime", "quiet", detect="return ServeBackendDetection.UNKNOWN")
    install_backend("blind-runtime", "blind")
    registry = ServeBackendRegistry(default_builtins())
    report = registry.explain(REQUEST)
    assert verdicts(report, ignore=preinstalled) == [
        ("diffusion", "unknown"),
        ("blind", "no detector"),
        ("no", "no_match"),
        ("quiet", "unknown"),
    ]
    assert (report.selected, report.fallback, report.matches) == ("llm", True, ())
    chosen = registry.auto_detect(REQUEST)
    assert chosen.name == "llm"
    assert chosen.backend is registry.get("llm").backend


def test_llm_is_never_asked_even_if_it_has_a_detector(preinstalled):
    asked = []

    def llm_detect(request):
        asked.append(request)
        return ServeBackendDetection.MATCH

    builtins = {
        "llm": ServeBackend(api_version=1, run=print, detect=llm_detect),
        "other": ServeBackend(api_version=1, run=print, detect=lambda r: "not a detection"),
    }
    registry = ServeBackendRegistry(builtins)
    assert registry.auto_detect(REQUEST).name == "llm"
    assert asked == []
    outcomes = registry.explain(REQUEST).outcomes
    assert [o.name for o in outcomes if o.name not in preinstalled] == ["other"]


def test_single_match_wins(install_backend):
    install_backend("omni-runtime", "omni", detect=MATCH)
    install_backend("no-runtime", "no", detect=NO_MATCH)
    chosen = ServeBackendRegistry(default_builtins()).auto_detect(REQUEST)
    assert (chosen.name, chosen.distribution) == ("omni", "omni-runtime")


def test_builtin_diffusion_detector_matches_a_local_diffusers_model(tmp_path):
    (tmp_path / "model_index.json").write_text(DIFFUSERS_INDEX)
    request = ServeRequest(argv=(), model_path=str(tmp_path))
    assert ServeBackendRegistry(default_builtins()).auto_detect(request).name == "diffusion"


def test_several_matches_are_an_error_listing_them_in_registry_order(install_backend, tmp_path):
    (tmp_path / "model_index.json").write_text(DIFFUSERS_INDEX)
    install_backend("zed-runtime", "zed", detect=MATCH)
    install_backend("acme-runtime", "acme", detect=MATCH)
    install_backend("no-runtime", "no", detect=NO_MATCH)
    registry = ServeBackendRegistry(default_builtins())
    request = ServeRequest(argv=(), model_path=str(tmp_path))
    with pytest.raises(RuntimeError) as info:
        registry.auto_detect(request)
    assert str(info.value) == (
        "Multiple serve backends matched this request: diffusion, acme, zed. "
        "Select one explicitly with --model-type BACKEND, or list the one to prefer first "
        "in [serve_backends] preferred_backends."
    )
    assert isinstance(info.value, AmbiguousDetectionError)
    assert isinstance(info.value, ServeBackendError)
    assert info.value.matches == ("diffusion", "acme", "zed")
    report = registry.explain(request)
    assert report.ambiguous and report.selected is None and not report.fallback


@pytest.mark.parametrize(
    ("name", "kwargs", "cause"),
    [
        ("loadfail", {"prelude": "raise ImportError('needs libfoo')"}, "needs libfoo"),
        ("exits", {"prelude": "import sys; sys.exit(2)"}, "sys.exit(2)"),
        ("raises", {"detect": "raise OSError('disk gone')"}, "OSError: disk gone"),
        ("quits", {"detect": "raise SystemExit(4)"}, "SystemExit: 4"),
        ("multiline", {"detect": "raise OSError('one\\ntwo')"}, "OSError: one two"),
        ("string", {"detect": "return 'match'"}, "got str"),
        ("none", {"detect": "return None"}, "got NoneType"),
        ("version", {"api_version": 7, "detect": MATCH}, "uses API version 7"),
        ("malformed", {"target": "not a target!!", "detect": MATCH}, "malformed entry point"),
    ],
)
def test_misbehaving_plugin_is_warned_about_and_skipped(
    install_backend, registry_warnings, name, kwargs, cause
):
    install_backend(f"{name}-runtime", name, **kwargs)
    install_backend("omni-runtime", "omni", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins())
    assert registry.auto_detect(REQUEST).name == "omni"
    messages = [m for m in warnings_of(registry_warnings) if repr(name) in m]
    assert len(messages) == 1
    assert messages[0].startswith(f"Skipping automatic detection for serve backend {name!r}")
    assert cause in messages[0]
    assert messages[0].count(f"{name}-runtime") == 1  # the culprit's distribution, once
    outcome = next(o for o in registry.explain(REQUEST).outcomes if o.name == name)
    assert outcome.verdict is Verdict.ERROR
    assert cause in outcome.detail


def test_duplicate_plugin_is_skipped_by_detection(install_backend, registry_warnings):
    first = install_backend("zed-runtime", "dup", detect=MATCH)
    second = install_backend("acme-runtime", "dup", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins())
    assert registry.auto_detect(REQUEST).name == "llm"
    assert any(
        "'dup'" in m and "acme-runtime, zed-runtime" in m for m in warnings_of(registry_warnings)
    )
    assert first not in sys.modules and second not in sys.modules


def test_each_enabled_plugin_is_loaded_once_and_a_disabled_one_never(install_backend):
    alpha = install_backend("a-runtime", "alpha", detect=NO_MATCH)
    beta = install_backend("b-runtime", "beta", detect=NO_MATCH)
    off = install_backend("c-runtime", "gamma", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins(), disabled=["gamma"])
    assert registry.auto_detect(REQUEST).name == "llm"
    assert (sys.modules[alpha].CALLS, sys.modules[beta].CALLS) == (1, 1)
    assert off not in sys.modules
    # Loaded plugins are memoised: a second detection, or a get(), loads nothing more.
    registry.auto_detect(REQUEST)
    assert registry.get("alpha") is registry.get("alpha")
    assert (sys.modules[alpha].CALLS, sys.modules[beta].CALLS) == (1, 1)


def test_detectors_run_concurrently(site, install_backend, preinstalled):
    """Each detector waits for the three others: sequential runs would break the barrier.

    Backends installed in the environment do not take part in the rendezvous;
    they run alongside and are left out of the comparison.
    """
    site.install(
        "rendezvous",
        modules={"rendezvous.py": "import threading\nBARRIER = threading.Barrier(4)\n"},
    )
    detect = (
        "return ServeBackendDetection.NO_MATCH"
        " if __import__('rendezvous').BARRIER.wait(10) >= 0 else None"
    )
    for name in ("a", "b", "c", "d"):
        install_backend(f"{name}-runtime", name, detect=detect)
    report = ServeBackendRegistry(default_builtins()).explain(REQUEST)
    assert verdicts(report, ignore=preinstalled) == [
        ("diffusion", "unknown"),
        *[(n, "no_match") for n in "abcd"],
    ]


def test_hanging_detector_times_out_and_counts_as_unknown(install_backend, registry_warnings):
    install_backend(
        "hang-runtime",
        "hang",
        prelude="import threading\nNEVER = threading.Event()",
        detect="NEVER.wait()",
    )
    install_backend("omni-runtime", "omni", detect=MATCH)
    registry = ServeBackendRegistry(default_builtins(), detect_timeout=0.5)
    started = time.monotonic()
    chosen = registry.auto_detect(REQUEST)
    assert time.monotonic() - started < 0.5 + 2
    assert chosen.name == "omni"
    assert any(
        "'hang'" in m and "did not return within 0.5 s" in m for m in warnings_of(registry_warnings)
    )
    outcome = next(o for o in registry.explain(REQUEST).outcomes if o.name == "hang")
    assert outcome.verdict is Verdict.TIMEOUT


def test_interpreter_exits_promptly_after_a_detector_hangs(site, install_backend, preinstalled):
    install_backend("hang-runtime", "hang", detect="time.sleep(3600)")
    install_backend("omni-runtime", "omni", detect=MATCH)
    code = textwrap.dedent(
        """
        import json
        from sglang_backends import ServeBackendRegistry, ServeRequest
        from sglang_backends._sglang.builtins import default_builtins
        registry = ServeBackendRegistry(default_builtins(), detect_timeout=0.5)
        report = registry.explain(ServeRequest(argv=(), model_path="m"))
        print(json.dumps([[o.name, o.verdict.value] for o in report.outcomes]))
        print(registry.auto_detect(ServeRequest(argv=(), model_path="m")).name)
        """
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=site.environ(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert time.monotonic() - started < 20
    assert result.returncode == 0, result.stderr
    outcomes, chosen = result.stdout.splitlines()
    # The subprocess sees the same environment, so the same installed backends.
    assert [o for o in json.loads(outcomes) if o[0] not in preinstalled] == [
        ["diffusion", "unknown"],
        ["hang", "timeout"],
        ["omni", "match"],
    ]
    assert chosen == "omni"


@pytest.mark.parametrize("delays", [(0.3, 0.0, 0.15, 0.05), (0.0, 0.3, 0.05, 0.15)])
def test_outcome_does_not_depend_on_which_detector_finishes_first(
    install_backend, delays, preinstalled
):
    answers = ("MATCH", "NO_MATCH", "MATCH", "UNKNOWN")
    for name, delay, answer in zip("dcba", delays, answers, strict=True):
        install_backend(
            f"{name}-runtime",
            name,
            detect=f"time.sleep({delay}); return ServeBackendDetection.{answer}",
        )
    registry = ServeBackendRegistry(default_builtins())
    report = registry.explain(REQUEST)
    assert verdicts(report, ignore=preinstalled) == [
        ("diffusion", "unknown"),
        ("a", "unknown"),
        ("b", "match"),
        ("c", "no_match"),
        ("d", "match"),
    ]
    with pytest.raises(AmbiguousDetectionError, match="matched this request: b, d\\."):
        registry.auto_detect(REQUEST)


#: Two detectors: one rewrites the request it is handed, the other looks after it has.
TAMPERING = """
import threading
from sglang_backends import ServeBackend, ServeBackendDetection

TAMPERED = threading.Event()
SEEN = []

def tamper(request):
    object.__setattr__(request, "model_path", "tampered")
    object.__setattr__(request, "argv", ("--tampered",))
    TAMPERED.set()
    return ServeBackendDetection.NO_MATCH

def witness(request):
    TAMPERED.wait(10)
    SEEN.append((request.argv, request.model_path))
    return ServeBackendDetection.NO_MATCH

def tamperer():
    return ServeBackend(api_version=1, run=print, detect=tamper)

def witnesser():
    return ServeBackend(api_version=1, run=print, detect=witness)
"""


def test_each_detector_gets_its_own_copy_of_the_request(site):
    site.install(
        "tampering-runtime",
        entry_points={"tamper": "tampering:tamperer", "witness": "tampering:witnesser"},
        modules={"tampering.py": TAMPERING},
    )
    request = ServeRequest(argv=("--model-path", "some/model"), model_path="some/model")
    report = ServeBackendRegistry(default_builtins()).explain(request)
    assert report.selected == "llm"
    assert __import__("tampering").SEEN == [(request.argv, "some/model")]
    assert request == REQUEST  # the caller's, which the chosen backend gets, is untouched


def test_a_run_that_finished_after_its_bound_overran_however_late_it_is_asked():
    """Asked once it finished (its caller awaited others first), it is still a timeout: the
    outcome never depends on how many other plugins there are."""
    run = TimedRun(lambda: time.sleep(0.3), "late")
    run.run()
    assert run.within(1.0)
    assert not run.within(0.1)
