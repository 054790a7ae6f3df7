"""SGLang as the host: the built-ins, SGLang's general plugins and help note.

Without SGLang, and with a stand-in ``sglang`` distribution really installed
(``sglang_standin``) that records each call, run through the real console
script. Differential tests against real SGLang are in ``tests/differential/``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys

import pytest
from clitools import run_cli
from servetools import run_serve
from sglang_standin import (
    FORK,
    NOTE,
    events,
    install_fork,
    install_general_plugin,
    install_light_plugin,
    install_sglang,
    names,
    remove_diffusion_support,
)

from sglang_backends import ServeBackendDetection, ServeRequest
from sglang_backends._core.discovery import discover
from sglang_backends._core.names import GENERAL_PLUGINS_GROUP
from sglang_backends._sglang.builtins import (
    default_builtins,
    detect_diffusion_offline,
    diffusion_backend,
    run_diffusion,
    run_llm,
)
from sglang_backends._sglang.fork import sglang_unusable
from sglang_backends._sglang.installed import (
    BUILTIN_NOTES,
    DIFFUSION_INSTALL_HINT,
    sglang_installed,
)
from sglang_backends.errors import BackendLoadError

# What the host does first when it uses SGLang, as sglang serve does on import.
QUIET = ["import sglang", "suppress_noisy_warnings"]
DIFFUSERS_INDEX = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0"}


def _model_dir(root, name="tiny-diffusion", files=(("model_index.json", DIFFUSERS_INDEX),)):
    model = root / name
    model.mkdir()
    for filename, content in files:
        text = content if isinstance(content, str) else json.dumps(content)
        (model / filename).write_text(text)
    return model


def test_default_builtins_import_nothing_and_diffusion_is_lazy():
    builtins = default_builtins()
    assert list(builtins) == ["llm", "diffusion"]
    assert list(BUILTIN_NOTES) == list(builtins)  # the general help's list of them
    assert builtins["llm"].run is run_llm and builtins["llm"].detect is None
    assert builtins["diffusion"] is diffusion_backend


def test_without_sglang_diffusion_detects_offline():
    if sglang_installed():
        pytest.skip("SGLang is installed here")
    backend = diffusion_backend()
    assert backend.run is run_diffusion and backend.detect is detect_diffusion_offline
    assert backend.api_version == 1 and backend.requires_model_path


def test_offline_diffusion_detector_follows_sglangs_local_rule(tmp_path):
    modular = {"_class_name": "ModularPipeline", "_diffusers_version": "0.35.0"}
    cases = {
        _model_dir(tmp_path): ServeBackendDetection.MATCH,
        _model_dir(tmp_path, "modular", [("modular_model_index.json", modular)]): (
            ServeBackendDetection.MATCH
        ),
        _model_dir(tmp_path, "empty-index", [("model_index.json", {})]): (
            ServeBackendDetection.NO_MATCH
        ),
        # The first index present decides, as in SGLang.
        _model_dir(
            tmp_path,
            "both",
            [("model_index.json", {"_class_name": "X"}), ("modular_model_index.json", modular)],
        ): ServeBackendDetection.NO_MATCH,
        _model_dir(tmp_path, "list-index", [("model_index.json", ["_diffusers_version"])]): (
            ServeBackendDetection.NO_MATCH
        ),
        _model_dir(tmp_path, "broken", [("model_index.json", "{not json")]): (
            ServeBackendDetection.UNKNOWN
        ),
        _model_dir(tmp_path, "llama", [("config.json", {"model_type": "llama"})]): (
            ServeBackendDetection.NO_MATCH
        ),
        tmp_path / "tiny-diffusion" / "model_index.json": ServeBackendDetection.UNKNOWN,
        "stabilityai/sdxl-turbo": ServeBackendDetection.UNKNOWN,
        "": ServeBackendDetection.UNKNOWN,
        None: ServeBackendDetection.UNKNOWN,
        "x" * 5000: ServeBackendDetection.UNKNOWN,
        "bad\0path": ServeBackendDetection.UNKNOWN,
    }
    for path, verdict in cases.items():
        request = ServeRequest(argv=(), model_path=None if path is None else str(path))
        assert detect_diffusion_offline(request) is verdict, path


# -- without SGLang ----------------------------------------------------------


@pytest.fixture
def without_sglang(site):
    if sglang_installed():
        pytest.skip("SGLang is installed here")
    return site.environ()


@pytest.mark.parametrize(
    ("args", "backend", "install"),
    [
        (["org/model"], "'llm'", "pip install sglang"),
        (["--model-type", "llm", "--help"], "'llm'", "pip install sglang"),
        (
            ["org/model", "--model-type", "diffusion"],
            "'diffusion'",
            'pip install "sglang[diffusion]"',
        ),
    ],
)
def test_without_sglang_says_what_to_install(without_sglang, args, backend, install):
    result = run_serve(args, without_sglang, console_script=True)
    assert result.returncode == 1
    assert len(result.error_lines) == 1 and "Traceback" not in result.stderr
    line = result.error_lines[0]
    assert f"The {backend} backend needs SGLang" in line and line.endswith(install)


def test_without_sglang_diffusion_help_is_the_install_hint_and_no_note(without_sglang):
    result = run_serve(["--model-type", "diffusion", "--help"], without_sglang, console_script=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == DIFFUSION_INSTALL_HINT + "\n"


def test_without_sglang_general_help_has_no_note(without_sglang):
    result = run_serve(["--help"], without_sglang, console_script=True)
    assert result.returncode == 0, result.stderr
    assert "cookbook" not in result.stdout.lower()


def test_without_sglang_auto_detects_a_local_diffusers_model(without_sglang, tmp_path):
    result = run_serve([str(_model_dir(tmp_path))], without_sglang, console_script=True)
    assert result.returncode == 1
    assert "Selected serve backend 'diffusion' (built-in)" in result.stderr
    assert 'pip install "sglang[diffusion]"' in result.error_lines[0]


# -- with the stand-in SGLang -------------------------------------------------


@pytest.fixture
def sglang_env(site, tmp_path):
    """The stand-in SGLang and a light plugin installed; returns (environment, event log)."""
    install_sglang(site)
    install_light_plugin(site)
    log = tmp_path / "sglang-events.jsonl"
    env = site.environ()
    env["SGLANG_STANDIN_LOG"] = str(log)
    env.pop("SGLANG_PLUGINS", None)
    if discover(GENERAL_PLUGINS_GROUP):
        # General plugins installed in this environment (beside a real
        # SGLang) are left out: only the tests' own plugin is allowed.
        env["SGLANG_PLUGINS"] = "hooks"
    return env, log


def serve(args, env, **kwargs):
    result = run_serve(args, env, console_script=True, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


def test_general_plugins_run_once_before_a_plugin_backend(site, sglang_env):
    env, log = sglang_env
    install_general_plugin(site)
    serve(["org/model", "--model-type", "light", "--tp", "2"], env)
    assert names(log) == [*QUIET, "load_plugins", "general plugin", "run light"]


def test_general_plugins_run_before_detection_and_the_llm_server(site, sglang_env):
    env, log = sglang_env
    install_general_plugin(site)
    serve(["org/model", "--tp", "2"], env)
    recorded = names(log)
    assert recorded[:4] == [*QUIET, "load_plugins", "general plugin"]
    assert recorded.count("load_plugins") == 1
    assert recorded.count("suppress_noisy_warnings") == 1  # once, however often SGLang is used
    assert recorded.index("get_is_diffusion_model") > recorded.index("general plugin")
    assert recorded[-2:] == ["prepare_server_args", "run_server"]
    assert events(log)[-1]["server_args"] == {"model_path": "org/model", "tp": 2}


def test_serve_names_the_general_plugins_it_ran_their_time_and_how_to_skip_them(site, sglang_env):
    env, log = sglang_env
    install_general_plugin(site)
    site.install(  # a name with a terminal escape: the line goes through serve's logging
        "odd-plugin",
        entry_points={"od\x1bd": "hooks_general_plugin:register"},
        group=GENERAL_PLUGINS_GROUP,
    )
    env = {**env, "SGLANG_PLUGINS": "hooks,od\x1bd"}
    result = serve(["org/model", "--model-type", "light"], env)
    [line] = [line for line in result.stderr.splitlines() if "general plugins" in line]
    assert re.fullmatch(
        r"Ran SGLang's general plugins in \d+\.\d\d s: hooks \(hooks-plugin\), "
        r"od\\x1bd \(odd-plugin\); SGLANG_PLUGINS=none skips them",
        line,
    ), line
    assert "\x1b" not in result.stderr
    assert names(log).count("general plugin") == 2

    skipped = serve(["org/model", "--model-type", "light"], {**env, "SGLANG_PLUGINS": "none"})
    assert "general plugins" not in skipped.stderr


def test_failing_general_plugins_are_one_line_and_nothing_runs(site, sglang_env):
    env, log = sglang_env
    install_general_plugin(site)
    env = {**env, "SGLANG_STANDIN_PLUGINS_FAIL": "1"}
    result = run_serve(["org/model", "--model-type", "light"], env, console_script=True)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.error_lines == [
        "sglang-backends serve: error: SGLang's general plugins (sglang.srt.plugins) failed "
        "to load: hook target sglang.srt.nowhere not found"
    ]
    assert "run light" not in names(log)


def test_a_conflict_is_refused_before_any_general_plugin_runs(site, sglang_env):
    """As in ``sglang serve``: its registry is built, refusing the conflict, before
    ``load_plugins``."""
    env, log = sglang_env
    install_general_plugin(site)
    site.install("clash-runtime", entry_points={"llm": "light_runtime:light"})
    result = run_serve(["org/model", "--model-type", "light"], env, console_script=True)
    assert result.returncode != 0
    [line] = result.error_lines
    assert line.endswith("cannot replace reserved or built-in backends: llm (from clash-runtime)")
    assert "load_plugins" not in names(log)
    assert "general plugin" not in names(log)


def test_run_general_plugins_is_once_per_process(site, sglang_env):
    env, log = sglang_env
    install_general_plugin(site)
    code = (
        "from sglang_backends._sglang.general_plugins import run_general_plugins as run\n"
        "print(run(), run())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]
    assert names(log).count("load_plugins") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--model-type", "light", "--help"],
        ["--model-type", "llm", "-h"],
        ["--model-type", "diffusion", "--help"],
    ],
)
def test_help_runs_no_general_plugin(site, sglang_env, args):
    env, log = sglang_env
    install_general_plugin(site)
    serve(args, env)
    assert "load_plugins" not in names(log)
    assert "general plugin" not in names(log)


def test_without_a_general_plugin_sglang_is_not_imported(sglang_env):
    env, log = sglang_env
    serve(["org/model", "--model-type", "light"], env)
    assert names(log) == ["run light"]


def test_a_general_plugin_outside_sglang_plugins_allow_list_is_skipped(site, sglang_env):
    env, log = sglang_env
    install_general_plugin(site, "hooks")
    serve(["org/model", "--model-type", "light"], {**env, "SGLANG_PLUGINS": "other, more"})
    assert names(log) == ["run light"]
    log.unlink()
    serve(["org/model", "--model-type", "light"], {**env, "SGLANG_PLUGINS": "other,hooks"})
    assert names(log) == [*QUIET, "load_plugins", "general plugin", "run light"]


def test_a_general_plugin_of_a_platform_sglang_platform_did_not_pick_is_skipped(site, sglang_env):
    """As list shows it: SGLang skips it, so serve neither imports SGLang nor names it."""
    env, log = sglang_env
    install_general_plugin(site, "hooks")
    (info,) = site.path.glob("hooks_plugin-*.dist-info")
    with open(info / "entry_points.txt", "a", encoding="utf-8") as stream:
        stream.write("\n[sglang.srt.platforms]\nhooksplat = hooks_general_plugin:register\n")
    result = serve(["org/model", "--model-type", "light"], {**env, "SGLANG_PLATFORM": "other"})
    assert names(log) == ["run light"]
    assert "general plugins" not in result.stderr
    listed = run_cli(site, "list", env={**env, "SGLANG_PLATFORM": "other"})
    assert "skipped: its distribution's platform is not SGLANG_PLATFORM" in listed.stdout


def test_targeted_help_ends_with_sglangs_note(sglang_env):
    env, _ = sglang_env
    result = serve(["--model-type", "light", "--help"], env)
    assert result.stdout == f"light backend help\n\n{NOTE}\n"


def test_llm_help_is_sglangs_server_help_then_the_note(sglang_env):
    env, log = sglang_env
    result = serve(["--model-type", "llm", "--help"], env)
    assert result.stdout.startswith("usage: sglang serve")
    assert result.stdout.endswith(f"\n\n{NOTE}\n")
    assert "run_server" not in names(log)


def test_diffusion_help_is_its_parser_help_then_the_note(sglang_env):
    env, _ = sglang_env
    result = serve(["--model-type", "diffusion", "--help"], env)
    assert result.stdout.startswith("usage: sglang-backends serve [-h] [--model-path MODEL_PATH]")
    assert "SGLang Diffusion Model Serving" in result.stdout
    assert result.stdout.endswith(f"\n\n{NOTE}\n")


def test_diffusion_help_without_diffusion_support_is_the_hint_then_the_note(site, sglang_env):
    env, _ = sglang_env
    remove_diffusion_support(site)
    result = serve(["--model-type", "diffusion", "--help"], env)
    assert result.stdout == f"{DIFFUSION_INSTALL_HINT}\n\n{NOTE}\n"


def test_general_help_ends_with_the_note(sglang_env):
    env, _ = sglang_env
    result = serve(["--help"], env)
    assert result.stdout.endswith(f"  sglang-backends serve --model-type NAME --help\n\n{NOTE}\n")


def test_a_help_that_exits_gets_no_note(sglang_env):
    env, _ = sglang_env
    result = serve(["--model-type", "exiting", "--help"], env)
    assert result.stdout.startswith("usage: exiting")
    assert NOTE not in result.stdout


def test_diffusion_detection_is_sglangs(sglang_env, tmp_path):
    env, log = sglang_env
    serve(["hub/org/stand-in-diffusion", "--num-gpus", "2"], env)
    assert events(log)[-1] == {
        "event": "execute_serve_cmd",
        "model_path": "hub/org/stand-in-diffusion",
        "num_gpus": 2,
        "rest": [],
        "explicit": ["model_path"],
    }
    assert names(log)[-2:] == ["apply_plugin_hooks", "execute_serve_cmd"]


def test_a_registered_native_pipeline_selects_diffusion(sglang_env, tmp_path):
    env, log = sglang_env
    weights = tmp_path / "flux3"
    weights.mkdir()
    serve(["--model-path", str(weights), "--pipeline-class-name", "StandInNativePipeline"], env)
    last = events(log)[-1]
    assert last["event"] == "execute_serve_cmd"
    assert last["explicit"] == []  # --model-path given as an option, not positionally
    assert last["rest"] == ["--pipeline-class-name", "StandInNativePipeline"]


def test_an_empty_index_is_not_a_diffusion_model(sglang_env, tmp_path):
    env, log = sglang_env
    serve([str(_model_dir(tmp_path, files=[("model_index.json", {})]))], env)
    assert names(log)[-1] == "run_server"


def test_sglangs_import_is_loading_not_detection_time(sglang_env, tmp_path):
    env, log = sglang_env
    conf = tmp_path / "serve.conf"
    conf.write_text("[serve_backends]\ndetect_timeout = 1\n")
    env = {**env, "SGLANG_STANDIN_IMPORT_DELAY": "3"}
    model = _model_dir(tmp_path)
    result = run_serve([str(model), "--config-file", str(conf)], env, console_script=True)
    assert result.returncode == 0, result.stderr
    assert "Selected serve backend 'diffusion' (built-in)" in result.stderr
    assert names(log)[-1] == "execute_serve_cmd"


def test_a_directory_named_sglang_is_not_sglang(tmp_path, monkeypatch):
    (tmp_path / "sglang").mkdir()  # a namespace package: no __init__.py
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.find_spec("sglang")
    if spec is not None and spec.origin is not None:
        pytest.skip("a real sglang package comes first on the path here")
    assert not sglang_installed()


def _with_plugins(site, tmp_path):
    """The light and the general plugin (``hooks``) on *site*: its environment, allowing
    only ``hooks`` of the general plugins, and the stand-in's event log."""
    install_light_plugin(site)
    install_general_plugin(site)
    log = tmp_path / "sglang-events.jsonl"
    env = site.environ()
    env["SGLANG_STANDIN_LOG"] = str(log)
    env["SGLANG_PLUGINS"] = "hooks"
    return env, log


def test_an_older_sglang_gets_what_its_release_provides(site, tmp_path):
    install_sglang(site, older=True)
    env, log = _with_plugins(site, tmp_path)

    served = serve(["org/model", "--model-type", "light"], env)
    assert names(log)[-1] == "run light"
    assert "load_plugins" not in names(log) and "not loaded" not in served.stderr

    assert serve(["--model-type", "light", "--help"], env).stdout == "light backend help\n"

    bare = tmp_path / "bare"
    bare.mkdir()
    serve([str(bare), "--pipeline-class-name", "StandInNativePipeline"], env)
    assert names(log)[-1] == "run_server"  # no native pipeline check before 0.5.23

    served = serve(["hub/org/stand-in-diffusion"], env)
    assert names(log)[-1] == "execute_serve_cmd"
    assert "apply_plugin_hooks" not in names(log) and "failed to import" not in served.stderr


# -- beside a fork: an sglang package without the serve-backend API ----------


@pytest.fixture
def fork_env(site, tmp_path):
    """A fork of SGLang (sglang-kt) first on the path, a light and a general plugin."""
    install_fork(site)
    return _with_plugins(site, tmp_path)


def test_a_fork_without_the_serve_backend_api_is_not_sglang(fork_env):
    assert not sglang_installed()
    assert "sglang" not in sys.modules
    assert sglang_unusable() == (
        f"the installed 'sglang' package (from {FORK} 0.7.2) lacks SGLang's serve-backend "
        "API (sglang.cli.serve_backends, SGLang 0.5.18 or later)"
    )


def test_an_editable_fork_is_named_by_its_declared_top_level_package(fork_env, site):
    """An editable install lists a ``.pth`` in its RECORD, not the package; its
    ``top_level.txt`` (which ``importlib.metadata.packages_distributions`` reads) names it."""
    [info] = site.path.glob("sglang_kt-*.dist-info")
    (info / "RECORD").write_text("__editable__.sglang_kt-0.7.2.pth,,\n", encoding="utf-8")
    (info / "top_level.txt").write_text("sglang\n", encoding="utf-8")
    assert sglang_unusable() == (
        f"the installed 'sglang' package (from {FORK} 0.7.2) lacks SGLang's serve-backend "
        "API (sglang.cli.serve_backends, SGLang 0.5.18 or later)"
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--model-type", "light", "--help"], ["--model-type", "diffusion", "--help"]],
)
def test_help_beside_a_fork_imports_nothing_of_it(fork_env, args):
    env, log = fork_env
    result = serve(args, env)
    assert names(log) == []  # not even `import sglang`
    assert "cookbook" not in result.stdout.lower()


def test_a_plugin_beside_a_fork_is_served_without_importing_it(fork_env):
    env, log = fork_env
    serve(["org/model", "--model-type", "light"], env)
    assert names(log) == ["run light"]  # no general plugin: SGLang, which runs them, is absent


@pytest.mark.parametrize("args", [["org/model", "--model-type", "llm"], ["org/model"]])
def test_llm_beside_a_fork_names_it_and_advises_no_install_over_it(fork_env, args):
    env, log = fork_env
    result = run_serve(args, env, console_script=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.error_lines
    assert (
        "The 'llm' backend needs SGLang, but the installed 'sglang' package (from "
        f"{FORK} 0.7.2) lacks SGLang's serve-backend API"
    ) in line
    assert line.endswith(
        f"installing SGLang here would overwrite {FORK}'s 'sglang' package, so install it in "
        "an environment of its own: python -m venv sglang-env && sglang-env/bin/pip install sglang"
    )
    assert names(log) == []


def test_list_beside_a_fork_does_not_advise_installing_sglang_over_it(site, fork_env):
    env, log = fork_env
    listed = run_cli(site, "list", "-f", "json", "-c", "Name", "-c", "Status", env=env)
    assert listed.returncode == 0, listed.stderr
    statuses = {row["Name"]: row["Status"] for row in json.loads(listed.stdout)}
    for name in ("llm", "diffusion"):
        assert statuses[name] == (
            "needs SGLang (the installed 'sglang' package lacks SGLang's serve-backend API: "
            f"see serve --model-type {name})"
        )
    # The general plugin ``hooks`` too: SGLang runs it, and SGLang is not to go over the fork.
    assert statuses["hooks"] == (
        "needs SGLang, which runs it (the installed 'sglang' package lacks SGLang's "
        "serve-backend API: see serve --model-type llm)"
    )
    assert names(log) == []


def test_the_general_help_beside_a_fork_does_not_advise_installing_sglang_over_it(fork_env):
    env, log = fork_env
    shown = serve(["--help"], env).stdout
    assert "pip install" not in shown
    assert (
        "  llm        built-in, SGLang's LLM server (the installed 'sglang' package lacks "
        "SGLang's serve-backend API: see serve --model-type llm)"
    ) in shown.splitlines()
    assert names(log) == []


def test_an_sglang_before_the_serve_backend_api_is_told_to_upgrade(site):
    install_fork(site, "sglang", "0.5.17")
    with pytest.raises(BackendLoadError) as refused:
        run_llm(ServeRequest(argv=("org/model",), model_path="org/model"))
    assert str(refused.value) == (
        "The 'llm' backend needs SGLang, but the installed 'sglang' package (from sglang "
        "0.5.17) lacks SGLang's serve-backend API (sglang.cli.serve_backends, SGLang 0.5.18 or "
        "later); upgrade it with: pip install -U sglang"
    )
    assert "sglang" not in sys.modules


# -- the help note, read without importing SGLang -----------------------------

NOTE_SOURCES = {
    "constant": ('COOKBOOK_EPILOG = "See the cookbook."\n', "See the cookbook.", False),
    "f-string": (
        'COOKBOOK_URL = "https://example.org/cookbook"\n'
        "COOKBOOK_EPILOG = (\n"
        '    f"Its page at {COOKBOOK_URL} carries the "\n'
        '    "recommended command."\n'
        ")\n",
        "Its page at https://example.org/cookbook carries the recommended command.",
        False,
    ),
    # Not evaluable statically: SGLang is imported, and its value used.
    "missing name": (
        'from sglang.cli.urls import COOKBOOK_URL\nCOOKBOOK_EPILOG = f"See {COOKBOOK_URL}."\n',
        "See https://example.org/imported.",
        True,
    ),
    "non-literal": (
        'COOKBOOK_EPILOG = "see the cookbook.".capitalize()\n',
        "See the cookbook.",
        True,
    ),
}


@pytest.mark.parametrize("case", list(NOTE_SOURCES))
def test_the_help_note_is_read_without_importing_sglang_when_it_is_literal(
    site, tmp_path, monkeypatch, caplog, case
):
    from sglang_backends._sglang.note import help_note

    source, expected, imports = NOTE_SOURCES[case]
    monkeypatch.setenv("SGLANG_STANDIN_LOG", str(tmp_path / "events.jsonl"))
    install_sglang(site)
    (site.path / "sglang" / "cli" / "main.py").write_text(source)
    (site.path / "sglang" / "cli" / "urls.py").write_text(
        'COOKBOOK_URL = "https://example.org/imported"\n'
    )
    caplog.set_level(logging.DEBUG, logger="sglang_backends._sglang.note")
    assert help_note() == expected
    assert ("sglang" in sys.modules) is imports
    fallback = [r for r in caplog.records if "Importing sglang.cli.main" in r.getMessage()]
    assert [r.levelno for r in fallback] == ([logging.DEBUG] if imports else [])


def test_a_help_note_file_that_is_not_regular_is_never_opened(site, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_STANDIN_LOG", str(tmp_path / "events.jsonl"))
    install_sglang(site)
    main = site.path / "sglang" / "cli" / "main.py"
    main.unlink()
    os.mkfifo(main)
    # Neither read nor imported (an import would block as well): no note, no hang.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sglang_backends._sglang.note import help_note; print(help_note())",
        ],
        env=site.environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "None\n"), result.stderr


def test_without_sglang_there_is_no_note_and_nothing_is_imported(site):
    from sglang_backends._sglang.note import help_note

    assert help_note() is None
    assert "sglang" not in sys.modules
