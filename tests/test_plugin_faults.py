"""Whatever a plugin raises, or does to its process, is that plugin's fault, named as such.

A real installed distribution, ``culprit-rt``, misbehaves where ``$WHAT`` says
(``PLACE:KIND``: at import, in its factory, its detector or ``run()``); the real
CLI runs in subprocesses. No signal is ever sent: a ``KeyboardInterrupt`` or
``SystemExit`` the plugin raises itself is its failure, not the user's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import run_cli
from servetools import run_serve, single_error

CULPRIT = """
import asyncio
import os
import signal
import sys
from pathlib import Path

from sglang_backends import ServeBackend, ServeBackendDetection

WHAT = os.environ.get("WHAT", "")


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


class Unshowable:
    def __repr__(self):
        raise RuntimeError("no text for you")

    __str__ = __repr__


class Treacherous(Exception):
    # Its message and its repr end the process, were they asked for unguarded.
    def __str__(self):
        raise SystemExit(9)

    __repr__ = __str__


class Interrupting:
    def __str__(self):
        raise KeyboardInterrupt

    __repr__ = __str__


def misbehave(place):
    if not WHAT.startswith(place + ":"):
        return
    kind = WHAT.split(":", 1)[1]
    if kind == "cancel":
        raise asyncio.CancelledError()
    if kind == "interrupt":
        raise KeyboardInterrupt()
    if kind == "generator-exit":
        raise GeneratorExit("closed")
    if kind == "unprintable":
        raise Unprintable()
    if kind == "treacherous":
        raise Treacherous()
    if kind == "replace-exit":
        os._exit = lambda code: None
    if kind == "exit":
        sys.exit(eval(os.environ["CODE"]))
    if kind == "os-exit":
        os._exit(7)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)


misbehave("import")


def run(request):
    misbehave("run")


def detect(request):
    misbehave("detect")
    return ServeBackendDetection.UNKNOWN


def factory():
    misbehave("factory")
    return ServeBackend(api_version=1, run=run, detect=detect)
"""


@pytest.fixture
def culprit(site):
    """``culprit-rt`` installed, beside nothing else but what the environment holds."""
    site.install(
        "culprit-rt",
        entry_points={"culprit": "culprit_plugin:factory"},
        modules={"culprit_plugin.py": CULPRIT},
    )
    return site


def environ(site, what: str, code: str | None = None) -> dict[str, str]:
    """*site*'s environment, the plugin misbehaving as *what* says (``sys.exit(CODE)``)."""
    return {**site.environ(), "WHAT": what, **({"CODE": code} if code is not None else {})}


# -- BaseExceptions -----------------------------------------------------------------

RAISED = [
    ("cancel", "run() raised CancelledError"),
    ("interrupt", "run() raised KeyboardInterrupt"),
    ("generator-exit", "run() raised GeneratorExit: closed"),
]


@pytest.mark.parametrize(("kind", "cause"), RAISED)
def test_a_base_exception_from_run_is_the_backends_failure(culprit, kind, cause):
    result = run_serve(["m", "--model-type", "culprit"], environ(culprit, f"run:{kind}"))
    line = single_error(result, 1)
    assert line.endswith(f"serve backend 'culprit' (from culprit-rt) failed: {cause}"), line


@pytest.mark.parametrize(("kind", "cause"), RAISED)
def test_a_base_exception_from_run_under_help_is_the_backends_failure(culprit, kind, cause):
    result = run_serve(["--model-type", "culprit", "--help"], environ(culprit, f"run:{kind}"))
    line = single_error(result, 1)
    assert line.endswith(f"serve backend 'culprit' (from culprit-rt) failed: {cause}"), line


def test_debug_shows_the_traceback_of_a_base_exception_from_run(culprit):
    result = run_serve(["--debug", "m", "--model-type", "culprit"], environ(culprit, "run:cancel"))
    assert result.returncode == 1, result.stderr
    assert "Traceback" in result.stderr and "CancelledError" in result.stderr


@pytest.mark.parametrize("place", ["import", "factory"])
def test_a_keyboard_interrupt_no_signal_caused_is_a_failed_load_in_serve(culprit, place):
    result = run_serve(["m", "--model-type", "culprit"], environ(culprit, f"{place}:interrupt"))
    line = single_error(result, 1)
    assert "Failed to load serve backend 'culprit' from culprit-rt" in line, line
    assert line.endswith("plugin code raised KeyboardInterrupt"), line


@pytest.mark.parametrize(
    ("what", "cause"),
    [
        ("import:interrupt", "plugin code raised KeyboardInterrupt"),
        ("factory:interrupt", "plugin code raised KeyboardInterrupt"),
        ("factory:generator-exit", "plugin code raised GeneratorExit: closed"),
        ("factory:cancel", "plugin code raised CancelledError"),
    ],
)
def test_check_reports_a_base_exception_as_the_plugins_error_not_a_signal(culprit, what, cause):
    result = run_cli(culprit, "check", "-f", "json", env={"WHAT": what})
    assert result.returncode == 1, result.stderr
    [row] = [row for row in json.loads(result.stdout) if row["Name"] == "culprit"]
    assert row["Result"] == "error", row
    assert row["Detail"].startswith("Failed to load serve backend 'culprit' from culprit-rt")
    assert row["Detail"].endswith(cause), row
    assert "SIGINT" not in row["Detail"]


@pytest.mark.parametrize(
    ("what", "cause"),
    [
        ("import:interrupt", "plugin code raised KeyboardInterrupt"),
        ("factory:interrupt", "plugin code raised KeyboardInterrupt"),
        ("factory:cancel", "plugin code raised CancelledError"),
    ],
)
def test_show_reports_a_base_exception_as_the_plugins_failed_load_not_a_signal(
    culprit, what, cause
):
    """show loads in its own process, as serve does, and tells the two apart as serve does."""
    result = run_cli(culprit, "show", "culprit", env={"WHAT": what})
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"Failed to load serve backend 'culprit' from culprit-rt: {cause}"
    ]


# An exception whose __str__ raises is named by its type, its message as Python's tracebacks say.
UNPRINTABLE = "Unprintable: <exception str() failed>"
UNPRINTABLE_LOAD = f"Failed to load serve backend 'culprit' from culprit-rt: {UNPRINTABLE}"


@pytest.mark.parametrize("place", ["import", "factory"])
def test_an_exception_whose_message_cannot_be_read_is_one_line_naming_its_type(culprit, place):
    env = environ(culprit, f"{place}:unprintable")
    served = run_serve(["m", "--model-type", "culprit"], env)
    assert single_error(served, 1).endswith(UNPRINTABLE_LOAD), served.stderr
    assert "Traceback" not in served.stderr
    shown = run_cli(culprit, "show", "culprit", env={"WHAT": f"{place}:unprintable"})
    assert shown.returncode == 1, shown.stderr
    assert shown.stderr.splitlines() == [UNPRINTABLE_LOAD]
    checked = run_cli(culprit, "check", "-f", "json", env={"WHAT": f"{place}:unprintable"})
    [row] = [row for row in json.loads(checked.stdout) if row["Name"] == "culprit"]
    assert (row["Result"], row["Detail"]) == ("error", UNPRINTABLE_LOAD)


@pytest.mark.parametrize("place", ["import", "factory", "detect", "run"])
def test_an_exception_whose_message_raises_system_exit_is_worded_not_obeyed(culprit, place):
    """A ``__str__`` raising ``SystemExit(9)`` used to end serve with 9, silently."""
    env = environ(culprit, f"{place}:treacherous")
    if place == "detect":
        # Under auto, a warning names it; llm, the fallback, then fails without SGLang.
        result = run_serve(["m"], env)
        assert result.returncode == 1, result.stderr
        [line] = [line for line in result.stderr.splitlines() if "Skipping" in line]
    else:
        line = single_error(run_serve(["m", "--model-type", "culprit"], env), 1)
    assert "'culprit'" in line and "culprit-rt" in line
    assert "Treacherous: <exception str() failed>" in line, line


def test_detection_words_a_detector_whose_exception_cannot_be_worded(culprit):
    detected = run_cli(culprit, "detect", "-f", "json", "m", env={"WHAT": "detect:treacherous"})
    assert detected.returncode == 0, detected.stderr
    [row] = [row for row in json.loads(detected.stdout) if row["Backend"] == "culprit"]
    assert row["Detail"] == "detector raised Treacherous: <exception str() failed>"


def test_a_detector_or_run_raising_an_exception_without_a_readable_message(culprit):
    detected = run_cli(culprit, "detect", "-f", "json", "m", env={"WHAT": "detect:unprintable"})
    assert detected.returncode == 0, detected.stderr
    [row] = [row for row in json.loads(detected.stdout) if row["Backend"] == "culprit"]
    assert (row["Verdict"], row["Detail"]) == ("error", f"detector raised {UNPRINTABLE}")
    served = run_serve(["m", "--model-type", "culprit"], environ(culprit, "run:unprintable"))
    line = single_error(served, 1)
    assert line.endswith(f"serve backend 'culprit' (from culprit-rt) failed: {UNPRINTABLE}"), line


# -- exit statuses ------------------------------------------------------------------


def python_exit_status(code: str) -> int:
    """What Python's own process exits with after ``sys.exit(CODE)``: the oracle."""
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.exit({code})"],
        capture_output=True,
        check=False,
    ).returncode


@pytest.mark.parametrize(
    "code", ["2**32 + 3", "2**31", "256", "-1", "-2**31 - 1", "2**63", "-2**64", "True"]
)
def test_sys_exit_from_run_ends_serve_as_it_ends_python(culprit, code):
    result = run_serve(["m", "--model-type", "culprit"], environ(culprit, "run:exit", code))
    assert result.returncode == python_exit_status(code), result.stderr
    assert result.error_lines == [] and "Traceback" not in result.stderr, result.stderr


def test_sys_exit_with_a_message_from_run_prints_it_and_ends_with_1(culprit):
    result = run_serve(
        ["m", "--model-type", "culprit"], environ(culprit, "run:exit", "'out of memory'")
    )
    assert result.returncode == python_exit_status("'out of memory'") == 1
    assert "out of memory" in result.stderr.splitlines()


@pytest.mark.parametrize("command", [["serve", "m", "--model-type", "culprit"], ["check"]])
def test_a_plugin_replacing_os_exit_never_keeps_a_process_of_ours_from_ending(culprit, command):
    """The backend process, and check's worker, end by the os._exit serve started with:
    the backend process used to run on into the supervisor's code, and fail there."""
    result = run_cli(culprit, *command, env={"WHAT": "import:replace-exit"})
    assert result.returncode == 0, result.stderr
    assert "supervisor" not in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_sys_exit_with_an_object_whose_str_raises_keyboard_interrupt(culprit):
    """As Python ends with a code it cannot print: status 1; not a Ctrl+C's 130."""
    oracle = subprocess.run(
        [sys.executable, "-c", f"{CULPRIT.split('def misbehave')[0]}\nsys.exit(Interrupting())"],
        capture_output=True,
        check=False,
    )
    served = run_serve(
        ["m", "--model-type", "culprit"], environ(culprit, "run:exit", "Interrupting()")
    )
    assert served.returncode == oracle.returncode == 1, served.stderr
    assert "Traceback" not in served.stderr, served.stderr


def test_sys_exit_with_an_object_that_cannot_be_shown(culprit):
    """From run(), as Python ends with it: nothing printed, status 1; while loading, the
    failed load names the object's type."""
    served = run_serve(
        ["m", "--model-type", "culprit"], environ(culprit, "run:exit", "Unshowable()")
    )
    assert served.returncode == 1, served.stderr
    assert "Traceback" not in served.stderr and "no text for you" not in served.stderr
    env = {"WHAT": "factory:exit", "CODE": "Unshowable()"}
    shown = run_cli(culprit, "show", "culprit", env=env)
    assert shown.returncode == 1, shown.stderr
    assert shown.stderr.splitlines() == [
        "Failed to load serve backend 'culprit' from culprit-rt: "
        "plugin called sys.exit(<Unshowable>) while loading"
    ]


# -- the culprit --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "status", "how"),
    [
        ("detect:os-exit", 7, "ended with os._exit(7)"),
        ("detect:sigkill", 137, "was killed by SIGKILL"),
    ],
)
def test_serve_and_detect_name_the_detector_that_ended_the_process(culprit, what, status, how):
    env = environ(culprit, what)
    line = single_error(run_serve(["m"], env), status)
    assert f"the serve backend process {how} before a backend was chosen" in line, line
    assert "while detecting 'culprit' (culprit-rt)" in line, line
    assert "Disable the plugin at fault (disabled_backends)" in line, line
    detect = run_cli(culprit, "detect", "m", env={"WHAT": what})
    assert detect.returncode == 1, detect.stderr
    assert "It ended while detecting 'culprit' (culprit-rt)." in detect.stderr, detect.stderr


@pytest.mark.parametrize("what", ["import:os-exit", "factory:os-exit", "import:sigkill"])
def test_serve_names_the_plugin_whose_load_ended_the_process(culprit, what):
    status = 137 if what.endswith("sigkill") else 7
    line = single_error(run_serve(["m"], environ(culprit, what)), status)
    assert "before a backend was chosen, while loading " in line, line
    assert "'culprit' (culprit-rt)" in line, line
    detect = run_cli(culprit, "detect", "m", env={"WHAT": what})
    assert detect.returncode == 1, detect.stderr
    assert "'culprit' (culprit-rt)" in detect.stderr, detect.stderr


def test_serve_names_the_backend_whose_load_ended_the_process_under_model_type(culprit):
    result = run_serve(["m", "--model-type", "culprit"], environ(culprit, "factory:os-exit"))
    line = single_error(result, 7)
    assert "while loading 'culprit' (culprit-rt); serve stopped the processes it left" in line
    assert "choose a backend with --model-type" not in line  # it was chosen so


def test_the_operator_guide_quotes_serves_line_for_a_detector_ending_the_process(culprit):
    guide = Path(__file__).resolve().parents[1] / "doc/source/user/operators.rst"
    [quoted] = [
        line.strip()
        for line in guide.read_text(encoding="utf-8").splitlines()
        if "ended with os._exit(7) before a backend was chosen" in line
    ]
    assert single_error(run_serve(["m"], environ(culprit, "detect:os-exit")), 7) == quoted


# -- what a factory returns, hostile -------------------------------------------------

HOSTILE_FIELDS = """
from sglang_backends import ServeBackend


class Version:
    def __eq__(self, other):
        raise RuntimeError("cannot compare")

    __ne__ = __eq__

    def __repr__(self):
        raise RuntimeError("cannot show")


class Flag:
    def __bool__(self):
        raise RuntimeError("cannot test")


def version():
    return ServeBackend(api_version=Version(), run=print)


def flag():
    return ServeBackend(api_version=1, run=print, requires_model_path=Flag())
"""


@pytest.mark.parametrize(
    ("name", "cause"), [("version", "cannot compare"), ("flag", "cannot test")]
)
def test_a_backend_whose_fields_raise_is_a_failed_load_in_one_line(site, name, cause):
    """Its fields are plugin code too: read, compared or tested, what they raise is its
    load's failure, named with its distribution, never a traceback."""
    site.install(
        "fields-rt",
        entry_points={name: f"fields_plugin:{name}"},
        modules={"fields_plugin.py": HOSTILE_FIELDS},
    )
    expected = f"Failed to load serve backend {name!r} from fields-rt: {cause}"
    served = run_serve(["/m", "--model-type", name], site.environ())
    assert single_error(served, 1).endswith(expected)
    shown = run_cli(site, "show", name)
    assert (shown.returncode, shown.stderr.strip()) == (1, expected)


def test_a_huge_message_from_a_plugin_is_cut_in_its_line_and_whole_with_debug(site):
    """A line quotes it (maybe several lines: the warning, the fallback, the error): a
    terminal gets the first thousand characters and how many more --debug shows."""
    source = "raise RuntimeError('x' * 5000)\n"
    site.install("huge-rt", entry_points={"huge": "huge_plugin:factory"},
                 modules={"huge_plugin.py": source})  # fmt: skip
    line = single_error(run_serve(["/m", "--model-type", "huge"], site.environ()), 1)
    assert line.endswith(f"from huge-rt: {'x' * 1000}… (4000 more characters; --debug shows them)")
    debugged = run_serve(["--debug", "/m", "--model-type", "huge"], site.environ())
    assert "x" * 5000 in debugged.stderr


def test_a_huge_sys_exit_value_from_a_plugin_is_cut_in_its_line(site):
    """``sys.exit(text)`` while loading is quoted by its repr, cut as a message is."""
    source = "import sys\nsys.exit('x' * 5000)\n"
    site.install("huge-exit", entry_points={"huge": "huge_exit:factory"},
                 modules={"huge_exit.py": source})  # fmt: skip
    line = single_error(run_serve(["/m", "--model-type", "huge"], site.environ()), 1)
    cut = f"sys.exit('{'x' * 999}… (4002 more characters; --debug shows them)) while loading"
    assert line.endswith(f"from huge-exit: plugin called {cut}")


LINGERING = """
import threading
import time

from sglang_backends import ServeBackend

# Not a daemon: Python waits for it before the process can end.
threading.Thread(target=time.sleep, args=(3600,), name="lingering").start()


def factory():
    return ServeBackend(api_version=1, run=lambda request: print("lingering help"))
"""


@pytest.mark.parametrize(
    ("args", "prog"),
    [(["show", "lingering"], "sglang-backends"),
     (["serve", "--model-type", "lingering", "--help"], "sglang-backends serve")],
)  # fmt: skip
def test_a_thread_plugin_code_leaves_running_does_not_keep_a_command_from_ending(site, args, prog):
    """Python would wait for ever; the command waits a grace, then ends naming the thread."""
    site.install("lingering-rt", entry_points={"lingering": "lingering_plugin:factory"},
                 modules={"lingering_plugin.py": LINGERING})  # fmt: skip
    result = run_cli(site, *args, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"{prog}: note: not waiting for threads plugin code left running after 5 s: 'lingering'"
    )
