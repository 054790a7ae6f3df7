"""Importing the contract is cheap: no stevedore, no importlib.metadata, no registry."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
from clitools import clean_environ, imported_by, serve_in_process

HEAVY = ("stevedore", "importlib.metadata", "sglang")


def imported_after(
    code: str, watched: tuple[str, ...], env: dict[str, str] | None = None
) -> set[str]:
    """Which of *watched* a fresh interpreter has imported after running *code*."""
    loaded, result = imported_by(textwrap.dedent(code), watched, env)
    assert result.returncode == 0, result.stderr
    return set(loaded)


@pytest.mark.parametrize(
    "code",
    [
        "from sglang_backends import ServeBackend, ServeRequest, ServeBackendDetection",
        "from sglang_backends import portable_backend; portable_backend(1, print, print)",
        "from sglang_backends import host_prog, stop_quietly\nwith stop_quietly(): host_prog('x')",
        "import sglang_backends.contract",
        "import sglang_backends.errors",
    ],
)
def test_contract_import_is_lean(code):
    inner = (
        "sglang_backends.registry",
        "sglang_backends._core.discovery",
        "sglang_backends._core.loading",
        "sglang_backends._core.detection",
    )
    assert imported_after(code, (*HEAVY, *inner)) == set()


def test_the_contract_imports_signal_only_to_stop_quietly_and_difflib_never():
    """A plugin imports the contract in every SGLang process: ``signal`` and ``difflib``
    (with ``heapq``) cost it a millisecond each, for what only serving or a misspelt name needs.
    """
    watched = ("signal", "threading", "difflib")
    lean = "import sglang_backends.contract\nfrom sglang_backends import host_prog; host_prog('x')"
    assert imported_after(lean, watched) == set()
    stopping = "from sglang_backends import stop_quietly\nwith stop_quietly(): pass"
    assert imported_after(stopping, watched) == {"signal"}


def test_stop_quietly_outside_the_main_thread_turns_ctrl_c_only():
    """Only the main thread may set a handler: elsewhere SIGTERM's stays as it was."""
    code = """
        import signal, threading
        from sglang_backends import stop_quietly
        seen = []
        def work():
            try:
                with stop_quietly():
                    seen.append(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
                    raise KeyboardInterrupt
            except SystemExit as exc:
                seen.append(exc.code)
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        assert seen == [True, 130], seen
    """
    imported_after(code, ())


def test_the_contract_imports_serves_argument_rules_only_for_from_argv():
    watched = ("sglang_backends._serve.argv",)
    assert imported_after("from sglang_backends import ServeRequest", watched) == set()
    parsed = "from sglang_backends import ServeRequest\nServeRequest.from_argv(['m'])"
    assert imported_after(parsed, watched) == set(watched)


def test_registry_is_imported_on_first_use():
    modules = imported_after(
        "import sglang_backends; sglang_backends.ServeBackendRegistry",
        ("sglang_backends.registry", "stevedore"),
    )
    assert "sglang_backends.registry" in modules
    assert "stevedore" not in modules  # only loading a plugin needs it


def test_listing_in_a_fresh_interpreter_imports_no_plugin_and_no_sglang(site, install_backend):
    module = install_backend("omni-runtime", "omni", prelude="raise SystemExit('imported')")
    modules = imported_after(
        """
        from sglang_backends import ServeBackendRegistry
        from sglang_backends._sglang.builtins import default_builtins
        assert "omni" in ServeBackendRegistry(default_builtins()).available_names
        """,
        (module, "sglang", "stevedore"),
        env=site.environ(),
    )
    assert module not in modules
    assert "sglang" not in modules
    assert "stevedore" not in modules


def test_get_in_a_fresh_interpreter_imports_only_the_selected_plugin(site, install_backend):
    wanted = install_backend("omni-runtime", "omni")
    other = install_backend("other-runtime", "other")
    modules = imported_after(
        """
        from sglang_backends import ServeBackendRegistry
        from sglang_backends._sglang.builtins import default_builtins
        ServeBackendRegistry(default_builtins()).get("omni")
        """,
        (wanted, other, "stevedore"),
        env=site.environ(),
    )
    assert wanted in modules
    assert other not in modules
    assert "stevedore" in modules


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["--help"], 0),
        (["--model-type", "omni", "--help"], 0),
        (["m", "--model-type", "nope"], 2),
        (["--model-type", "omni"], 2),  # no model
        (["m", "--model-type="], 2),
    ],
)
def test_serve_imports_psutil_only_to_supervise(site, install_backend, args, status):
    """Help and errors cost no psutil; in serve's own process it is never imported.

    On Linux the supervisor imports it, in its own process, once something runs, with what
    only the tree's processes use: ctypes (prctl), mmap (the tree's mark), setproctitle.
    Beside SGLang too: a help reads SGLang's closing note without importing it.
    """
    install_backend("omni-runtime", "omni")
    watched = ("psutil", "ctypes", "mmap", "setproctitle")
    loaded, result = imported_by(serve_in_process(args), watched, clean_environ(site.environ()))
    assert result.returncode == status, result.stderr
    assert loaded == []


def test_a_backends_own_help_imports_no_supervision(site, install_backend):
    """``--model-type NAME --help`` runs the backend here: nothing is supervised."""
    install_backend("omni-runtime", "omni")
    watched = (
        "sglang_backends._serve.supervise.supervisor",
        "sglang_backends._serve.supervise.backend",
    )
    env = clean_environ(site.environ())
    loaded, result = imported_by(serve_in_process(["--model-type", "omni", "--help"]), watched, env)
    assert result.returncode == 0, result.stderr
    assert loaded == []


#: What the general help leaves unimported, each deferred by an import inside a function:
#: the contract (``dataclasses`` with ``inspect`` cost about a fifth of its start-up,
#: benchmarks/serve_startup.py), the registry, configuration, the supervisor, the
#: operator commands, and what only an error or a backend needs.
GENERAL_HELP_DEFERS = (
    "dataclasses",
    "sglang_backends.contract",
    "sglang_backends.registry",
    "sglang_backends._core.detection",
    "sglang_backends.config",
    "sglang_backends._serve.supervise.supervisor",
    "sglang_backends._serve.supervise.backend",
    "sglang_backends._operators.commands",
    "cliff",
    "oslo_config",
    "difflib",
    "json",
    "ast",
)


def test_the_general_help_imports_only_what_it_needs(site, install_backend):
    """It needs the backends' names only: nothing beyond what reading them costs anyway
    (Python 3.13's importlib.metadata imports json and ast itself)."""
    install_backend("omni-runtime", "omni")
    env = clean_environ(site.environ())
    floor = imported_after("import argparse, importlib.metadata, logging", GENERAL_HELP_DEFERS)
    watched = [name for name in GENERAL_HELP_DEFERS if name not in floor]
    loaded, result = imported_by(serve_in_process(["--help"]), watched, env)
    assert result.returncode == 0, result.stderr
    assert "omni" in result.stdout
    assert loaded == []


@pytest.mark.parametrize(
    ("args", "deferred"),
    [
        (
            ["list"],
            (
                "sglang_backends.registry",
                "sglang_backends._serve.main",
                "sglang_backends._operators.worker",
                "sglang_backends._operators.commands.check",
                "sglang_backends._operators.commands.detect",
                "sglang_backends._serve.supervise.backend",
                "concurrent.futures",
            ),
        ),
        (
            ["check"],
            (
                "sglang_backends.registry",
                "sglang_backends._core.loading",
                "sglang_backends._serve.supervise.backend",
                "sglang_backends.testing",
                "psutil",
            ),
        ),
        (
            ["detect", "org/model"],
            ("sglang_backends.registry", "sglang_backends._core.loading", "psutil"),
        ),
        (["show", "--help"], ("sglang_backends.registry", "sglang_backends._operators.worker")),
        (["--help"], ("sglang_backends.registry", "psutil")),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_operator_commands_import_only_what_they_use(site, install_backend, args, deferred):
    """Listing loads nothing; check and detect load plugins in workers, never in their own
    process, which so imports neither the registry nor its loader."""
    install_backend("omni-runtime", "omni")
    code = f"from sglang_backends._cli import main\nraise SystemExit(main({args!r}))\n"
    loaded, result = imported_by(code, deferred, clean_environ(site.environ()))
    assert result.returncode == 0, result.stderr
    assert loaded == []


def test_the_pytest_plugin_imports_no_registry_until_a_test_asks():
    """pytest loads it in every session of an environment that has this package: the kit's
    checks, and psutil with them, come when a test first uses one."""
    watched = (
        "sglang_backends.registry",
        "sglang_backends._core.settings",
        "sglang_backends._core.processes",
        "sglang_backends.testing._conformance",
        "sglang_backends.testing._stopping",
        "psutil",
    )
    assert imported_after("import sglang_backends.testing._pytest_plugin", watched) == set()
    used = "from sglang_backends.testing import assert_stops_cleanly"
    assert imported_after(used, watched[-3:]) == set(watched[-3:])


@pytest.mark.parametrize(
    ("args", "env", "reads"),
    [
        (["list"], {}, False),
        (["show", "omni"], {}, False),
        (["list", "--config-file", "{conf}"], {}, True),
        (["list"], {"OS_SERVE_BACKENDS__MODEL_TYPE": "omni"}, True),
        (["list"], {"OS_SERVE_BACKEND__MODEL_TYPE": "omni"}, True),  # a near miss warns
        (["serve", "--model-type", "omni", "--help"], {}, False),
        (["serve", "--config-file", "{conf}", "--help"], {}, True),
        (["serve", "--help"], {"OS_SERVE_BACKENDS__DETECT_TIMEOUT": "3"}, True),
        (["serve", "--help"], {"SGLANG_BACKENDS_STOP_TIMEOUT": "3"}, True),  # deprecated name
    ],
)
def test_serve_and_the_commands_import_oslo_config_only_to_read_configuration(
    site, install_backend, tmp_path, args, env, reads
):
    install_backend("omni-runtime", "omni")
    conf = tmp_path / "serve.conf"
    conf.write_text("[serve_backends]\nmodel_type = omni\n")
    argv = [arg.format(conf=conf) for arg in args]
    code = f"from sglang_backends._cli import main\nraise SystemExit(main({argv!r}))\n"
    watched = ("oslo_config", "cliff")
    loaded, result = imported_by(code, watched, {**clean_environ(site.environ()), **env})
    assert result.returncode == 0, result.stderr
    expected = (["oslo_config"] if reads else []) + ([] if args[0] == "serve" else ["cliff"])
    assert sorted(loaded) == sorted(expected)


def test_configuration_imports_neither_cliff_nor_the_registry():
    """config imports the registry only to build one (registry_from_conf, select_backend)."""
    watched = ("cliff", "sglang_backends.registry", "sglang_backends._core.loading")
    assert imported_after("import sglang_backends.config", watched) == set()


def test_serving_a_plugin_beside_sglang_without_general_plugins_imports_no_sglang(site, tmp_path):
    """SGLang's general plugins would do nothing: ``serve`` must not pay seconds for them.

    The plugin's ``run()`` records, in the process that serves it, which of
    SGLang and itself are imported by then.
    """
    import json
    import subprocess

    from clitools import CLI
    from sglang_standin import install_sglang

    install_sglang(site)
    record = tmp_path / "modules.json"
    site.install(
        "omni-runtime",
        entry_points={"omni": "omni_recorder:factory"},
        modules={
            "omni_recorder.py": f"""
                import json, sys
                from sglang_backends import ServeBackend

                def run(request):
                    watched = ("sglang", "omni_recorder")
                    loaded = sorted(name for name in watched if name in sys.modules)
                    with open({str(record)!r}, "w") as out:
                        json.dump(loaded, out)

                def factory():
                    return ServeBackend(api_version=1, run=run)
            """
        },
    )
    env = clean_environ(site.environ())
    env["SGLANG_STANDIN_LOG"] = str(site.path.parent / "events.jsonl")
    env.pop("SGLANG_PLUGINS", None)
    from sglang_backends._core.discovery import discover

    if discover("sglang.srt.plugins"):  # installed here beside a real SGLang: left out
        env["SGLANG_PLUGINS"] = "none"
    result = subprocess.run(
        [CLI, "serve", "org/model", "--model-type", "omni"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text()) == ["omni_recorder"]


@pytest.mark.parametrize("args", [["--help"], ["--model-type", "omni", "--help"]])
def test_a_help_beside_sglang_prints_its_note_without_importing_it(site, install_backend, args):
    """``sglang serve`` imports SGLang (seconds) for the note; its file is read instead."""
    from sglang_standin import NOTE, install_sglang

    install_sglang(site)
    install_backend("omni-runtime", "omni")
    env = clean_environ(site.environ())
    env["SGLANG_STANDIN_LOG"] = str(site.path.parent / "events.jsonl")
    loaded, result = imported_by(serve_in_process(args), ("sglang",), env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(f"\n{NOTE}\n")
    assert loaded == []


RECORDS_MODULES = """
import json, os, sys
from sglang_backends import ServeBackend, ServeBackendDetection

def run(request):
    watched = ("packaging",)
    loaded = [w for w in watched if any(m == w or m.startswith(w + ".") for m in sys.modules)]
    with open(os.environ["MODULES_RECORD"], "w", encoding="utf-8") as stream:
        json.dump(loaded, stream)

def factory():
    return ServeBackend(
        api_version=1, run=run, detect=lambda request: ServeBackendDetection.MATCH
    )
"""


@pytest.mark.parametrize("args", [["m", "--model-type", "omni"], ["m"]])
def test_serving_a_healthy_plugin_reads_no_requirements(site, tmp_path, args):
    """Reading requirements (packaging) stays off serve's path while nothing fails: the
    backend, running, does not find it imported in its process. (Serve reads which
    general plugins would run from the findings module, which imports no packaging.)
    """
    import json

    site.install(
        "omni-runtime",
        entry_points={"omni": "omni_recorder:factory"},
        modules={"omni_recorder.py": RECORDS_MODULES},
        requires=["stevedore"],
    )
    record = tmp_path / "modules.json"
    env = {**clean_environ(site.environ()), "MODULES_RECORD": str(record)}
    _, result = imported_by(serve_in_process(args), (), env)
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text(encoding="utf-8")) == []


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None,
    reason="SGLang's own general plugins (smg-grpc-servicer) pin their requirements",
)
def test_listing_imports_packaging_only_for_a_requirement_more_than_a_name(site):
    """A requirement that is a bare name needs no parser (packaging costs some 25 ms)."""
    site.install("bare-runtime", entry_points={"bare": "bare_plugin:factory"}, requires=["cliff"])
    code = "from sglang_backends._cli import main\nraise SystemExit(main(['list']))\n"
    env = clean_environ(site.environ())
    loaded, result = imported_by(code, ("packaging",), env)
    assert result.returncode == 0, result.stderr
    assert loaded == []
    site.install("pinned-runtime", entry_points={"pinned": "p:factory"}, requires=["cliff>=1"])
    loaded, result = imported_by(code, ("packaging",), env)
    assert result.returncode == 0, result.stderr
    assert loaded == ["packaging"]
