"""Terminal escapes and bidi controls in plugin metadata never reach a terminal raw.

A real installed distribution whose name, version and entry point names carry
an escape sequence, a right-to-left override and the Arabic letter mark; every
line serve, the supervisor and the operator commands write about it must show
them escaped. Which characters are bidi controls is read from :mod:`unicodedata`.
"""

from __future__ import annotations

import subprocess
import sys
import unicodedata

import pytest
from clitools import run_cli
from servetools import run_serve

from sglang_backends._core.console import printable

#: A distribution name that recolours the terminal and reverses what follows.
EVIL = "evil\x1b[31m\u202e\u061cexe.txt"
ESCAPED = "evil\\x1b[31m\\u202e\\u061cexe.txt"
RAW = ("\x1b", "\u202e", "\u061c")

#: The bidirectional classes of the explicit formatting characters (UAX #9, table 4).
EXPLICIT = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"}
#: The strong classes by their long names (PropertyValueAliases.txt): an implicit
#: directional mark is the format character named after its class, ``<class> MARK``.
STRONG = {"L": "LEFT-TO-RIGHT", "R": "RIGHT-TO-LEFT", "AL": "ARABIC LETTER"}


def bidi_controls() -> set[str]:
    """Unicode's Bidi_Control characters, read from :mod:`unicodedata`, which has no such
    property: the explicit formatting characters and the implicit directional marks."""
    found = set()
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) != "Cf":
            continue
        kind = unicodedata.bidirectional(char)
        mark = kind in STRONG and unicodedata.name(char, "") == f"{STRONG[kind]} MARK"
        if kind in EXPLICIT or mark:
            found.add(char)
    return found


def test_every_bidi_control_character_is_escaped():
    controls = bidi_controls()
    # PropList.txt's Bidi_Control, the same 12 since Unicode 6.3: ALM, LRM, RLM,
    # LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI.
    assert sorted(map(ord, controls)) == [
        0x061C, 0x200E, 0x200F, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
        0x2066, 0x2067, 0x2068, 0x2069,
    ]  # fmt: skip
    for char in sorted(controls):
        assert printable(f"a{char}b") == f"a\\u{ord(char):04x}b"


def test_every_character_that_does_not_show_is_escaped():
    """Invisible ones too (a zero-width space, a soft hyphen, a no-break space): a name that
    looks like another's, or blank, cannot pass for it."""
    hidden = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in {"Cc", "Cf", "Zl", "Zp", "Zs"} and code != 0x20
    ]
    assert {"\u200b", "\u00ad", "\ufeff", "\u00a0", "\u2028"} <= set(hidden)
    for char in hidden:
        code = ord(char)
        width = 2 if code < 0x100 else 4 if code < 0x10000 else 8
        mark = {2: "x", 4: "u", 8: "U"}[width]
        assert printable(f"echo{char}") == f"echo\\{mark}{code:0{width}x}"
    assert printable("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"  # letters of any script show


def test_a_carriage_return_in_a_line_is_escaped_not_taken_for_its_end(capsys):
    """serve's note quotes the command to run, whose model path may hold one."""
    from sglang_backends._core import console

    console.note("prog", "run: serve '/m/a b\r' --x\r\nnext")
    assert capsys.readouterr().err.splitlines() == [
        "prog: note: run: serve '/m/a b\\x0d' --x",
        "prog: note: next",
    ]


PLUGIN = """
import os
import signal

from sglang_backends import ServeBackend, ServeBackendDetection


def run(request):
    if request.model_path == "die":
        os.kill(os.getpid(), signal.SIGKILL)


def detect(request):
    if request.model_path == "claim-me":
        return ServeBackendDetection.MATCH
    return ServeBackendDetection.UNKNOWN


def factory():
    return ServeBackend(api_version=1, run=run, detect=detect)
"""


@pytest.fixture
def evil(site):
    site.install(
        EVIL,
        version="6.6\x1b[0m",
        entry_points={"evil": "evil_plugin:factory", "broken\x1b[2J": "evil_missing:factory"},
        modules={"evil_plugin.py": PLUGIN},
    )
    return site


def assert_escaped(text: str) -> None:
    assert not [c for c in RAW if c in text], text
    assert ESCAPED in text, text


@pytest.mark.parametrize(
    ("args", "status", "phrase"),
    [
        (["m", "--model-type", "evil"], 0, "Using serve backend 'evil'"),
        (["claim-me"], 0, "Selected serve backend 'evil'"),
        (["claim-me"], 0, "Skipping automatic detection for serve backend 'broken\\x1b[2J'"),
        (["die", "--model-type", "evil"], 137, "was killed by SIGKILL"),
        (["--debug", "m", "--model-type", "broken\x1b[2J"], 1, "BackendLoadError: Failed"),
    ],
    ids=["using", "selected", "skipping", "supervisor-error", "debug-traceback"],
)
def test_serve_and_its_supervisor_escape_plugin_metadata(evil, args, status, phrase):
    result = run_serve(args, evil.environ(), timeout=60)
    assert result.returncode == status, result.stderr
    [line] = [line for line in result.stderr.splitlines() if phrase in line]
    assert_escaped(line)
    assert not [c for c in RAW if c in result.stderr + result.stdout]


@pytest.mark.parametrize(
    "command",
    [
        ("list",),
        ("show", "evil"),
        ("check", "--timeout", "20"),
        ("detect", "claim-me"),
    ],
)
def test_the_commands_escape_plugin_metadata(evil, command):
    name, *rest = command
    result = run_cli(evil, name, "-f", "table", *rest, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    assert_escaped(result.stdout)
    assert not [c for c in RAW if c in result.stdout + result.stderr]


def test_a_log_file_escapes_plugin_metadata_as_stderr_does(evil, tmp_path):
    """``tail -f`` shows a log file on a terminal: what it records is escaped too."""
    log = tmp_path / "commands.log"
    result = run_cli(evil, "--log-file", str(log), "show", "broken\x1b[2J")
    assert result.returncode == 1, result.stderr
    text = log.read_text(encoding="utf-8")
    assert "broken\\x1b[2J" in text and ESCAPED in text, text
    assert not [c for c in RAW if c in text], text


#: A distribution name with an escape sequence, a bell and a right-to-left override.
RINGING = "ring\x1b]0;x\x07\u202e-rt"
RINGING_ESCAPED = "ring\\x1b]0;x\\x07\\u202e-rt"

#: A detector that holds the GIL ("hog") or ends its process ("end"), as the model says.
SUPERVISED = """
import ctypes
import os

from sglang_backends import ServeBackend, ServeBackendDetection


def detect(request):
    if request.model_path == "hog":
        ctypes.PyDLL(None).sleep(3600)
    if request.model_path == "end":
        os._exit(7)
    return ServeBackendDetection.UNKNOWN


def factory():
    return ServeBackend(api_version=1, run=lambda request: None, detect=detect)
"""


@pytest.mark.parametrize(
    ("model", "status", "phrase"),
    [
        ("hog", 1, "automatic detection did not finish"),
        ("end", 7, "ended with os._exit(7) before a backend was chosen"),
    ],
)
def test_the_supervisors_lines_escape_what_the_backend_process_told(
    site, tmp_path, model, status, phrase
):
    site.install(
        RINGING,
        entry_points={"ringing": "ringing_plugin:factory"},
        modules={"ringing_plugin.py": SUPERVISED},
    )
    conf = tmp_path / "serve.conf"
    conf.write_text(
        "[serve_backends]\nload_timeout = 0.2\ndetect_timeout = 0.2\nstop_timeout = 0.5\n"
    )
    result = run_serve(["--config-file", str(conf), model], site.environ(), timeout=60)
    assert result.returncode == status, result.stderr
    [line] = result.error_lines
    assert phrase in line, line
    assert f"'ringing' ({RINGING_ESCAPED})" in line, line
    assert not [c for c in ("\x1b", "\x07", "\u202e") if c in result.stderr], result.stderr


@pytest.mark.parametrize(
    "args",
    [("serve", "--help"), ("help", "serve")],
    ids=["serve-help", "help-serve"],
)
def test_the_general_help_escapes_plugin_metadata(evil, args):
    result = run_cli(evil, *args, timeout=60)
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("  evil ")]
    assert_escaped(line)
    assert not [c for c in RAW if c in result.stdout + result.stderr]


def test_the_package_writes_to_the_terminal_through_one_writer():
    """Every print or write to stdout or stderr is console.py's; a built-in's run() prints
    its own help line (SGLang's, as upstream does)."""
    import ast
    from pathlib import Path

    import sglang_backends

    root = Path(sglang_backends.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            if called in ("print", "sys.stdout.write", "sys.stderr.write"):
                found.append((path.relative_to(root).as_posix(), called))
    outside = {(name, call) for name, call in found if not name.endswith("console.py")}
    assert outside == {("_sglang/builtins.py", "print")} or outside == {("host.py", "print")}
    assert any(name.endswith("console.py") for name, _ in found)


#: A docstring that would run commands if a shell evaluated it unquoted, and escape sequences.
SHELLISH = """
from sglang_backends import ServeBackend


def factory():
    '''Serves "$(touch {marker})", `touch {marker}`, ${{HOME}} and \\\\ \x1b[2J \u202e.'''
    return ServeBackend(api_version=1, run=lambda request: None)
"""


def test_show_shell_output_is_escaped_and_safe_to_evaluate(site, tmp_path):
    """``show -f shell`` is written to a terminal and meant for ``eval``: the same escaped
    text as ``-f value``, quoted so that evaluating it runs nothing."""
    marker = tmp_path / "evaluated"
    site.install(
        RINGING,
        version="6.6\x1b[0m",
        entry_points={"shellish": "shellish_plugin:factory"},
        modules={"shellish_plugin.py": SHELLISH.format(marker=marker)},
    )
    shell = run_cli(site, "show", "shellish", "-f", "shell")
    value = run_cli(site, "show", "shellish", "-f", "value")
    assert shell.returncode == value.returncode == 0, shell.stderr + value.stderr
    assert not [c for c in ("\x1b", "\x07", "\u202e") if c in shell.stdout], shell.stdout
    script = 'eval "$1"; printf "%s\\n" "$distribution" "$version" "$summary"'
    evaluated = subprocess.run(
        ["sh", "-c", script, "sh", shell.stdout], capture_output=True, text=True, check=True
    )
    assert not marker.exists()
    distribution, version, summary = evaluated.stdout.splitlines()
    shown = value.stdout.splitlines()
    assert [distribution, version, summary] == [shown[2], shown[3], shown[9]]
    assert distribution == RINGING_ESCAPED
    tail = "${HOME} and \\ \\x1b[2J \\u202e."
    assert summary == f'Serves "$(touch {marker})", `touch {marker}`, {tail}'


def test_the_packages_lines_reach_stderr_where_a_plugin_set_sys_stderr_to_none(monkeypatch, capfd):
    """print() would write them to stdout, then flushing None would raise."""
    from sglang_backends._core import console

    monkeypatch.setattr(sys, "stderr", None)
    console.error("prog", "a plugin took stderr")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "prog: error: a plugin took stderr\n")
