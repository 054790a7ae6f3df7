"""The plugin-author test kit: the ``serve_backends`` fixture and the contract check."""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from clitools import clean_environ, run_pytest_in

import sglang_backends
from sglang_backends import ServeBackend, ServeBackendDetection, ServeRequest
from sglang_backends.testing import (
    ContractViolation,
    SGLangNotCheckedWarning,
    assert_backend_contract,
    awkward_requests,
)

GOOD = """
import argparse, os
from sglang_backends import ServeBackend, ServeBackendDetection

def run(request):
    parser = argparse.ArgumentParser(prog="good")
    parser.add_argument("--model-path")
    parser.parse_args(list(request.argv))

def detect(request):
    path = request.model_path
    if not path:
        return ServeBackendDetection.UNKNOWN
    try:
        if os.path.isfile(os.path.join(path, "good-marker")):
            return ServeBackendDetection.MATCH
        if os.path.isdir(path):
            return ServeBackendDetection.NO_MATCH
        return ServeBackendDetection.UNKNOWN
    except (OSError, ValueError):
        return ServeBackendDetection.UNKNOWN

def factory():
    return ServeBackend(api_version=1, run=run, detect=detect)
"""


def install(serve_backends, name: str, source: str) -> None:
    serve_backends.install(
        f"{name}-dist",
        entry_points={name: f"{name}_mod:factory"},
        modules={f"{name}_mod.py": source},
    )


def test_fixture_registry_sees_installed_distribution(serve_backends, preinstalled):
    install(serve_backends, "good", GOOD)
    registry = serve_backends.registry()
    assert registry.available_names == ("llm", "diffusion", *sorted({"good", *preinstalled}))
    assert registry.get("good").distribution == "good-dist"


def test_fixture_does_not_leak_between_tests(serve_backends):
    # "good" was installed by the previous test only.
    assert "good" not in serve_backends.registry().available_names


def test_good_installed_backend_passes(serve_backends):
    install(serve_backends, "good", GOOD)
    report = assert_backend_contract("good", registry=serve_backends.registry())
    assert report.detections["no model path"] == "unknown"
    assert report.detections["local directory"] == "no_match"
    assert report.detections["hub id"] == "unknown"


def test_good_factory_object_passes(serve_backends):
    install(serve_backends, "good", GOOD)
    import good_mod

    report = assert_backend_contract(good_mod.factory)
    assert report.backend.api_version == 1
    assert set(report.detections.values()) <= {d.value for d in ServeBackendDetection}


BROKEN = {
    "constant_version": (
        GOOD.replace("api_version=1", "api_version=SERVE_BACKEND_API_VERSION").replace(
            "import ServeBackend,", "import SERVE_BACKEND_API_VERSION, ServeBackend,"
        ),
        "declare it as a literal",
    ),
    "detector_raises": (
        GOOD.replace(
            "path = request.model_path",
            "path = request.model_path\n"
            "    if path and len(path) > 1000:\n        raise ValueError('too long')",
        ),
        "detect() raised ValueError for a request with very long string",
    ),
    "detector_returns_string": (
        GOOD.replace("return ServeBackendDetection.UNKNOWN\n    try", "return 'unknown'\n    try"),
        "detect() returned str for a request with no model path",
    ),
    "help_starts_process": (
        GOOD.replace(
            "    parser.parse_args(list(request.argv))",
            "    import subprocess, sys\n"
            "    global CHILD\n"
            "    CHILD = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "    import time; time.sleep(0.3)\n"
            "    parser.parse_args(list(request.argv))",
        ),
        "left processes running when it returned",
    ),
    "help_hangs": (
        GOOD.replace(
            "    parser.parse_args(list(request.argv))", "    import time; time.sleep(30)"
        ),
        "did not return within 1 s",
    ),
    "wrong_version": (GOOD.replace("api_version=1", "api_version=2"), "uses API version 2"),
}


def test_a_provider_picked_as_dist_name_gets_every_check(serve_backends):
    source, expected = BROKEN["constant_version"]
    install(serve_backends, "good", GOOD)
    serve_backends.install(
        "other-dist", entry_points={"good": "other_mod:factory"}, modules={"other_mod.py": source}
    )
    registry = serve_backends.registry()
    assert_backend_contract("good-dist:good", registry=registry)
    with pytest.raises(ContractViolation, match=expected):
        assert_backend_contract("other-dist:good", registry=registry)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_contract_breaches_are_reported(serve_backends, case):
    source, expected = BROKEN[case]
    install(serve_backends, "bad", source)
    with pytest.raises(ContractViolation, match=expected.replace("(", r"\(").replace(")", r"\)")):
        assert_backend_contract("bad", registry=serve_backends.registry(), timeout=1.0)
    child = getattr(sys.modules.get("bad_mod"), "CHILD", None)
    if child is not None:
        # The kit killed (and reaped) what --help started.
        assert not psutil.pid_exists(child.pid)
        child.wait(timeout=10)


def test_help_that_listens_is_reported(serve_backends):
    source = GOOD.replace(
        "    parser.parse_args(list(request.argv))",
        "    import socket\n"
        "    global SERVER\n"
        "    SERVER = socket.socket()\n"
        "    SERVER.bind(('127.0.0.1', 0))\n"
        "    SERVER.listen()\n",
    )
    install(serve_backends, "listener", source)
    try:
        with pytest.raises(ContractViolation, match="opened listening sockets"):
            assert_backend_contract("listener", registry=serve_backends.registry())
    finally:
        import listener_mod

        server: socket.socket = listener_mod.SERVER
        server.close()


def test_factory_returning_wrong_type_is_reported():
    def factory():
        return {"api_version": 1}

    expected = r"^Serve backend '.*factory' factory returned dict; expected sglang_backends\."
    expected += r"ServeBackend\.$"  # worded as the registry words it
    with pytest.raises(ContractViolation, match=expected):
        assert_backend_contract(factory)


@pytest.mark.parametrize(
    ("raised", "cause"),
    [
        ("SystemExit(3)", "SystemExit: 3"),
        ("GeneratorExit('closed')", "GeneratorExit: closed"),
        ("asyncio.CancelledError()", "CancelledError"),
    ],
)
def test_a_base_exception_from_the_factory_is_a_breach_not_the_end_of_the_run(raised, cause):
    """As the registry takes it: a failed load, not an exit of the test session."""
    import asyncio

    def factory():
        raise eval(raised, {"asyncio": asyncio})

    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract(factory, sglang=False)
    assert str(caught.value).endswith(f"factory' raised {cause}"), caught.value


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no words")


def raise_unprintable(*args):
    raise Unprintable()


@pytest.mark.parametrize(
    ("factory", "breach"),
    [
        (
            raise_unprintable,
            "'test_testing_kit.raise_unprintable' raised Unprintable: <exception str() failed>",
        ),
        (
            lambda: ServeBackend(api_version=1, run=raise_unprintable),
            "run(['--help']) raised Unprintable: <exception str() failed>",
        ),
        (
            lambda: ServeBackend(api_version=1, run=print, detect=raise_unprintable),
            "detect() raised Unprintable for a request with no model path: "
            "<exception str() failed>; detectors must return UNKNOWN instead of raising",
        ),
    ],
    ids=["factory", "run", "detect"],
)
def test_an_exception_whose_message_cannot_be_had_is_still_a_breach(factory, breach):
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract(factory, sglang=False)
    assert str(caught.value).endswith(breach), caught.value


def test_factory_declaring_another_api_version_is_reported_as_the_registry_words_it():
    def factory():
        return ServeBackend(api_version=2, run=print)

    with pytest.raises(ContractViolation) as raised:
        assert_backend_contract(factory)
    assert str(raised.value).endswith(
        "factory' uses API version 2; this sglang-backends release requires version 1."
    )


def test_fixture_registry_takes_the_settings_options(serve_backends):
    registry = serve_backends.registry(disabled=["good"], load_timeout=7, detect_timeout=2)
    assert (registry.load_timeout, registry.detect_timeout) == (7.0, 2.0)
    assert "good" not in registry.available_names


@pytest.mark.parametrize("label", ["enabled", "disabled"])
def test_fixture_registry_refuses_a_string_for_a_list_as_the_registry_does(serve_backends, label):
    from sglang_backends import ServeBackendRegistry
    from sglang_backends.errors import ConfigurationError

    install(serve_backends, "omni", GOOD)
    install(serve_backends, "o", GOOD)
    with pytest.raises(ConfigurationError) as theirs:
        ServeBackendRegistry({}, **{label: "omni"})
    with pytest.raises(ConfigurationError) as ours:
        serve_backends.registry(**{label: "omni"})
    assert str(ours.value) == str(theirs.value)


VERSIONED = """
from sglang_backends import ServeBackend

VERSION = {version!r}

def run(request):
    print("served by", VERSION)

def factory():
    return ServeBackend(api_version=1, run=run)
"""


@pytest.mark.parametrize("versions", [("1.0", "2.0"), ("2.0", "1.0"), ("1.0", "1.0")])
def test_installing_a_distribution_again_replaces_it_as_pip_does(serve_backends, versions):
    old, new = versions
    serve_backends.install(
        "versioned-dist",
        version=old,
        entry_points={"versioned": "versioned_old:factory", "gone": "versioned_old:factory"},
        modules={"versioned_old.py": VERSIONED.format(version=old), "vpkg/__init__.py": ""},
    )
    first = serve_backends.registry()
    assert first.get("versioned").backend.run.__module__ == "versioned_old"
    assert "versioned_old" in sys.modules
    info = serve_backends.install(
        "Versioned.Dist",  # the same distribution, as pip compares names
        version=new,
        entry_points={"versioned": "versioned_new:factory"},
        modules={"versioned_new.py": VERSIONED.format(version=f"new {new}")},
    )
    assert sorted(p.name for p in serve_backends.path.glob("*.dist-info")) == [info.name]
    assert sorted(p.name for p in serve_backends.path.iterdir()) == sorted(
        [info.name, "versioned_new.py"]
    )  # the old module, its bytecode and its package directory went with it
    assert "versioned_old" not in sys.modules  # imported from the old copy: dropped
    registry = serve_backends.registry()
    plugin = registry.plugin_of(registry.get("versioned"))
    assert (plugin.version, plugin.target) == (new, "versioned_new:factory")
    assert "gone" not in registry.available_names
    assert importlib.metadata.version("versioned-dist") == new
    assert first.get("versioned").backend.run.__module__ == "versioned_old"  # kept what it had


# -- the literal api_version, wherever the backend is built -----------------------

TABLE = """
import functools
from sglang_backends import SERVE_BACKEND_API_VERSION, ServeBackend, portable_backend

VERSION = SERVE_BACKEND_API_VERSION

def run(request):
    pass

FACTORIES = {
    "literal": lambda: ServeBackend(api_version=1, run=run),
    "constant": lambda: portable_backend(api_version=VERSION, run=run),
}
literal = FACTORIES["literal"]
constant = FACTORIES["constant"]
bound = functools.partial(ServeBackend, api_version=SERVE_BACKEND_API_VERSION, run=run)
bound_literal = functools.partial(portable_backend, 1, run)
"""


@pytest.mark.parametrize(
    ("name", "given"),
    [("literal", None), ("constant", "VERSION"), ("bound", "SERVE_BACKEND_API_VERSION")],
)
def test_the_literal_api_version_check_reads_lambdas_in_a_table_and_partials(
    serve_backends, name, given
):
    serve_backends.install(
        "table-dist",
        entry_points={"literal": "table_mod:literal", name: f"table_mod:{name}"},
        modules={"table_mod.py": TABLE},
    )
    registry = serve_backends.registry()
    if given is None:
        assert_backend_contract(name, registry=registry, sglang=False)
        return
    with pytest.raises(ContractViolation, match=f"api_version is given as '{given}'"):
        assert_backend_contract(name, registry=registry, sglang=False)


def test_a_partial_factory_object_is_checked_where_it_is_made(serve_backends):
    install(serve_backends, "good", GOOD)
    serve_backends.install("table-dist", modules={"table_mod.py": TABLE})
    import table_mod

    assert_backend_contract(table_mod.bound_literal, sglang=False)
    with pytest.raises(ContractViolation, match="SERVE_BACKEND_API_VERSION"):
        assert_backend_contract(table_mod.bound, sglang=False)


# -- saying what could not be checked ---------------------------------------------


def test_without_sglang_the_kit_warns_and_reports_that_sglang_was_not_checked(serve_backends):
    install(serve_backends, "good", GOOD)
    with pytest.warns(SGLangNotCheckedWarning, match="'good' from good-dist: SGLang's acceptance"):
        report = assert_backend_contract("good", registry=serve_backends.registry())
    assert report.sglang_checked is False
    assert "SGLang is not installed" in (report.sglang_unchecked or "")
    quiet = assert_backend_contract("good", registry=serve_backends.registry(), sglang=False)
    assert quiet.sglang_unchecked == "sglang=False was given"


def test_beside_a_fork_the_kit_reports_sglang_unchecked_naming_the_fork(serve_backends):
    from sglang_standin import FORK, install_fork

    install_fork(serve_backends)
    install(serve_backends, "good", GOOD)
    with pytest.warns(SGLangNotCheckedWarning, match=f"from {FORK} 0.7.2"):
        report = assert_backend_contract("good", registry=serve_backends.registry())
    assert report.sglang_checked is False
    assert f"'sglang' package (from {FORK} 0.7.2) lacks SGLang's serve-backend API" in (
        report.sglang_unchecked or ""
    )
    assert "sglang" not in sys.modules  # nothing of the fork was imported
    with pytest.raises(ContractViolation, match=f"from {FORK} 0.7.2"):
        assert_backend_contract("good", registry=serve_backends.registry(), sglang=True)


def test_check_contract_has_a_column_saying_whether_sglang_was_asked(serve_backends):
    from clitools import run_cli
    from sglang_standin import install_sglang

    install(
        serve_backends,
        "good",
        GOOD.replace("import ServeBackend,", "import portable_backend as ServeBackend,"),
    )
    args = ("check", "--contract", "good", "-f", "json")
    without = run_cli(serve_backends, *args)
    assert without.returncode == 0, without.stderr
    [row] = json.loads(without.stdout)
    assert row["SGLang"] == "not checked: SGLang is not installed"
    install_sglang(serve_backends)
    with_sglang = run_cli(serve_backends, *args)
    assert with_sglang.returncode == 0, with_sglang.stderr
    [row] = json.loads(with_sglang.stdout)
    assert row["SGLang"] == "accepted"


# -- a failing check reads as the plugin's failure, not the kit's source ----------

FAILING_PLUGIN_TESTS = """
from sglang_backends import ServeBackend, ServeBackendDetection
from sglang_backends.testing import assert_backend_contract, assert_stops_cleanly

def detect_wrong_type(request):
    return "yes"

def detect_raising(request):
    raise ValueError("boom")

def run(request):
    pass

def test_wrong_type():
    assert_backend_contract(
        lambda: ServeBackend(api_version=1, run=run, detect=detect_wrong_type), sglang=False
    )

def test_raising():
    assert_backend_contract(
        lambda: ServeBackend(api_version=1, run=run, detect=detect_raising), sglang=False
    )

def failing_factory():
    raise ValueError("boom")

def test_factory_raising():
    assert_backend_contract(failing_factory, sglang=False)

ENDING = (
    "from sglang_backends import ServeBackend\\n"
    "def factory():\\n"
    "    return ServeBackend(api_version=1, run=print)\\n"
)

def test_stopping(serve_backends):
    serve_backends.install("ending-dist", entry_points={"ending": "ending_mod:factory"},
                           modules={"ending_mod.py": ENDING})
    assert_stops_cleanly("ending", ["model"], ready="serving", hosts=["sglang-backends serve"],
                         env=serve_backends.environ())
"""


FAILING_INSTALLED_TESTS = """
from sglang_backends.testing import assert_backend_contract

RAISING = "def factory():\\n    raise ValueError('boom')\\n"
IMPORTING = "import no_such_module_here\\n"
DETECTING = (
    "from sglang_backends import ServeBackend\\n"
    "def detect(request):\\n"
    "    raise KeyError('boom')\\n"
    "def factory():\\n"
    "    return ServeBackend(api_version=1, run=id, detect=detect)\\n"
)

ENTRY_POINTS = {"p": "p_mod:factory"}

def test_raising_factory(serve_backends):
    serve_backends.install("p-dist", entry_points=ENTRY_POINTS, modules={"p_mod.py": RAISING})
    assert_backend_contract("p", registry=serve_backends.registry(), sglang=False)

def test_failing_import(serve_backends):
    serve_backends.install("p-dist", entry_points=ENTRY_POINTS, modules={"p_mod.py": IMPORTING})
    assert_backend_contract("p", registry=serve_backends.registry(), sglang=False)

def test_raising_detector(serve_backends):
    serve_backends.install("p-dist", entry_points=ENTRY_POINTS, modules={"p_mod.py": DETECTING})
    assert_backend_contract("p", registry=serve_backends.registry(), sglang=False)
"""


@pytest.mark.parametrize(
    ("tests", "count"),
    [(FAILING_PLUGIN_TESTS, 4), (FAILING_INSTALLED_TESTS, 3)],
    ids=["factories", "installed"],
)
def test_a_failing_check_is_a_short_failure_without_the_kits_source(tmp_path, tests, count):
    (tmp_path / "test_plugin.py").write_text(tests, encoding="utf-8")
    result = run_pytest_in(tmp_path, "-q")
    assert result.returncode == 1, result.stdout + result.stderr
    report = result.stdout.split(" FAILURES ")[1].split(" short test summary info ")[0]
    failures = report.split("_____ test_")[1:]
    assert len(failures) == count, report
    for failure in failures:
        lines = failure.strip().splitlines()
        assert len(lines) <= 22, failure  # it was 50-60: the kit's frames with their source
        # No frame of the kit, nor of what called plugin code (stevedore, the import
        # system): no path, no source, nothing hidden.
        for caller in ("sglang_backends/", "stevedore/", "importlib", "hidden"):
            assert caller not in failure, failure
        assert "def assert_" not in failure and "def _" not in failure, failure
        assert "ContractViolation: " in failure


INTERRUPTING_PLUGIN_TESTS = """
import pytest
from sglang_backends.testing import ContractViolation, assert_backend_contract

def interrupting():
    raise KeyboardInterrupt

def test_a_factory():
    with pytest.raises(ContractViolation, match="'test_plugin.interrupting' raised KeyboardInt"):
        assert_backend_contract(interrupting, sglang=False)

def test_an_installed_backend(serve_backends):
    source = "def interrupting():\\n    raise KeyboardInterrupt\\n"
    serve_backends.install("ki-dist", entry_points={"ki": "ki_mod:interrupting"},
                           modules={"ki_mod.py": source})
    with pytest.raises(ContractViolation, match="'ki' from ki-dist: plugin code raised Keyb"):
        assert_backend_contract("ki", registry=serve_backends.registry(), sglang=False)

def test_the_session_goes_on():
    pass
"""


def run_pytest(directory) -> subprocess.Popen[str]:
    """pytest started in *directory*, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q"],
        cwd=directory,
        env=clean_environ(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_keyboard_interrupt_from_the_factory_is_a_breach_not_the_end_of_the_session(tmp_path):
    """Raised by the plugin, not by a Ctrl+C: the registry's failed load, the kit's breach."""
    (tmp_path / "test_plugin.py").write_text(INTERRUPTING_PLUGIN_TESTS, encoding="utf-8")
    with run_pytest(tmp_path) as pytest_run:
        output, _ = pytest_run.communicate(timeout=120)
    assert pytest_run.returncode == 0, output
    assert "3 passed" in output, output


SLOW_FACTORY_TESTS = """
import pathlib, time
from sglang_backends.testing import assert_backend_contract

def slow():
    pathlib.Path("loading").touch()
    time.sleep(60)

def test_slow():
    assert_backend_contract(slow, sglang=False)

def test_never_run():
    pathlib.Path("ran-on").touch()
"""


def test_ctrl_c_while_the_kit_loads_a_factory_still_ends_the_session(tmp_path):
    (tmp_path / "test_plugin.py").write_text(SLOW_FACTORY_TESTS, encoding="utf-8")
    with run_pytest(tmp_path) as pytest_run:
        deadline = time.monotonic() + 60
        while not (tmp_path / "loading").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pytest_run.send_signal(signal.SIGINT)
        output, _ = pytest_run.communicate(timeout=30)
    assert pytest_run.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output, output
    assert not (tmp_path / "ran-on").exists(), output


def test_requests_may_be_given_as_awkward_requests_gives_them(tmp_path):
    """A mapping of label to request, as the kit's own awkward_requests returns, is taken by
    label, not read as a sequence of labels."""

    def detect(request):
        return ServeBackendDetection.UNKNOWN

    requests = awkward_requests(str(tmp_path))
    report = assert_backend_contract(
        lambda: ServeBackend(api_version=1, run=lambda request: None, detect=detect),
        requests=requests,
        sglang=False,
    )
    assert report.detections == dict.fromkeys(requests, "unknown")


# -- judged as the hosts judge -----------------------------------------------------


MODULE_LEVEL = """
from sglang_backends import ServeBackendDetection, portable_backend

def run(request):
    pass

def detect(request):
    return ServeBackendDetection.UNKNOWN

BACKEND = portable_backend(api_version=1, run=run, detect=detect)

def factory():
    return BACKEND
"""


def test_a_backend_built_at_import_is_loaded_after_sglangs_contract_as_sglang_serve_does(
    serve_backends,
):
    """``sglang serve`` imports its contract module before any plugin: a backend built at
    module level with portable_backend is SGLang's there, and the kit must see it so."""
    from sglang_standin import install_sglang

    install_sglang(serve_backends)
    install(serve_backends, "early", MODULE_LEVEL)
    report = assert_backend_contract("early", registry=serve_backends.registry(), sglang=True)
    assert report.sglang_checked
    import early_mod

    assert type(early_mod.BACKEND).__module__ == "sglang.cli.serve_backends"


def test_sglangs_refusal_and_the_hint_read_as_one_sentence(serve_backends):
    from sglang_standin import install_sglang

    install_sglang(serve_backends)
    install(serve_backends, "plain", GOOD)
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract("plain", registry=serve_backends.registry())
    assert "expected sglang.cli.serve_backends.ServeBackend; build it with" in str(caught.value)


def test_without_sglang_the_release_needed_is_the_one_that_brought_the_api():
    with pytest.raises(ContractViolation, match=r"\(SGLang 0\.5\.18 or later\)"):
        assert_backend_contract(lambda: ServeBackend(api_version=1, run=print), sglang=True)


@pytest.mark.parametrize("where", ["run", "detect"])
def test_a_call_holding_the_gil_past_the_timeout_is_a_timeout(where):
    """The kit's own wait cannot run while the plugin holds the GIL: the call's own
    seconds decide."""

    def hog(request):
        sum(range(4 * 10**7))  # about half a second in C, holding the GIL throughout
        return ServeBackendDetection.UNKNOWN

    fields = {"run": hog} if where == "run" else {"run": print, "detect": hog}
    with pytest.raises(ContractViolation, match=r"did not return within 0\.05 s"):
        assert_backend_contract(
            lambda: ServeBackend(api_version=1, **fields),
            requests=[("no model path", ServeRequest.from_argv([]))],
            timeout=0.05,
            sglang=False,
        )


STARTS_PROCESSES = """
import subprocess
from sglang_backends import ServeBackend, ServeBackendDetection

STARTED = []
if {at_import}:
    STARTED.append(subprocess.Popen(["sleep", "314"], start_new_session=True))

def run(request):
    pass

def detect(request):
    if {in_detector}:
        STARTED.append(subprocess.Popen(["sleep", "315"]))
    return ServeBackendDetection.UNKNOWN

def factory():
    return ServeBackend(api_version=1, run=run, detect=detect)
"""


@pytest.mark.parametrize("where", ["at_import", "in_detector"])
def test_a_process_the_plugin_leaves_running_is_killed_and_a_breach(serve_backends, where):
    source = STARTS_PROCESSES.format(
        at_import=where == "at_import", in_detector=where == "in_detector"
    )
    install(serve_backends, "spawner", source)
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract("spawner", registry=serve_backends.registry(), sglang=False)
    import spawner_mod

    started = spawner_mod.STARTED
    assert started
    assert str(caught.value).startswith(
        "Serve backend 'spawner' from spawner-dist: left processes running once it was loaded and "
        "asked to "
        f"detect: {sorted(p.pid for p in started)} (killed now); start processes in run() only"
    )
    for process in started:
        assert not psutil.pid_exists(process.pid)  # killed and reaped
        process.wait(timeout=10)


def test_a_help_running_a_helper_command_to_its_end_passes():
    def run(request):
        helper = "import time; time.sleep(0.3); print('usage')"
        subprocess.run([sys.executable, "-c", helper], check=True, capture_output=True)

    report = assert_backend_contract(lambda: ServeBackend(api_version=1, run=run), sglang=False)
    assert report.help_seconds >= 0.3


def test_a_help_setting_a_signal_handler_is_told_why_it_fails_here():
    """Both hosts call run() in the main thread; the check, bounded, in a worker thread."""

    def run(request):
        signal.signal(signal.SIGTERM, lambda *_: None)

    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract(lambda: ServeBackend(api_version=1, run=run), sglang=False)
    assert str(caught.value).endswith(
        "where signal.signal raises; both hosts call it in the main thread: set handlers "
        "after handling --help)"
    )


def test_a_plugin_claiming_a_built_in_name_fails_the_check_naming_it(serve_backends):
    install(serve_backends, "good", GOOD)
    serve_backends.install(
        "squatter-dist", entry_points={"llm": "squat_mod:factory"}, modules={"squat_mod.py": GOOD}
    )
    with pytest.raises(ContractViolation) as caught:
        assert_backend_contract("good", sglang=False)
    message = str(caught.value)
    assert message.startswith(
        "Serve backend 'good' cannot be checked: serve fails for every backend while plugin "
        "'llm' from squatter-dist is installed (Out-of-tree serve backends cannot replace "
        "reserved or built-in backends: llm (from squatter-dist)); uninstall it where the "
        "tests run (pip uninstall squatter-dist), or check with a registry that disables it: "
        "registry=ServeBackendRegistry(disabled=['llm'])"
    ), message
    disabled = sglang_backends.ServeBackendRegistry(disabled=["llm"])
    assert assert_backend_contract("good", registry=disabled, sglang=False).detections


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"requires": "torch>=2"}, "requires must be a sequence of Requires-Dist lines"),
        ({"entry_points": "x = a:f"}, "entry_points must map backend names to module:attr"),
        ({"modules": "x.py"}, "modules must map relative file paths to sources"),
        ({"modules": {"../escape.py": ""}}, "module path '../escape.py' leaves the root"),
        ({"modules": {"/tmp/abs.py": ""}}, "module path '/tmp/abs.py' leaves the root"),
        ({"version": "1.0/../../v"}, "version '1.0/../../v' holds a line break or a path"),
        ({"name": "n\nName: other"}, "name 'n\\nName: other' holds a line break"),
    ],
)
def test_install_refuses_a_string_for_a_collection(serve_backends, options, refusal):
    from sglang_backends.errors import ConfigurationError

    options = {"name": "r-dist", **options}
    with pytest.raises(ConfigurationError) as refused:
        serve_backends.install(**options)
    assert str(refused.value).startswith(refusal)
    assert not list(serve_backends.path.iterdir())  # nothing written
    assert not list(serve_backends.path.parent.glob("escape.py"))


@pytest.mark.parametrize(
    ("requests", "refusal"),
    [
        ("abc", "requests must be (label, ServeRequest) pairs or a mapping of them, not a string"),
        ({"x": ["--model-path", "m"]}, "requests: 'x' is a list, not a ServeRequest"),
        (["abc"], "requests must be (label, ServeRequest) pairs, not 'abc'"),
    ],
)
def test_requests_of_the_wrong_type_are_refused_not_blamed_on_the_plugin(requests, refusal):
    with pytest.raises(TypeError) as caught:
        assert_backend_contract(
            lambda: ServeBackend(api_version=1, run=print, detect=print),
            requests=requests,
            sglang=False,
        )
    assert not isinstance(caught.value, ContractViolation)
    assert str(caught.value) == refusal
