"""What the commands foretell from metadata: unmet requirements, general plugins, shadowed
copies, enabled plugins not installed, preferred_backends, and why detection fell back.

Every case installs real distributions (dist-info directories with real ``Requires-Dist``
lines and entry points) and runs the real console script in a subprocess.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from clitools import clean_environ, run_cli
from conftest import backend_module
from servetools import run_serve

from sglang_backends import (
    AmbiguousDetectionError,
    ServeBackend,
    ServeBackendRegistry,
    ServeRequest,
)
from sglang_backends.testing import PluginSite

WELL = backend_module()
BROKEN = "import torch_that_is_not_installed\n" + WELL
OMNI_REQUIRES = (
    "sglang==0.5.22",
    "torch==2.14.1",
    "omni-kernels",  # a bare name, not installed
    "stevedore>=1",  # met: the test environment has it
    "cliff",  # a bare name, installed
    'nothing-like-it>=1; extra == "test"',  # an extra nobody asked for
    'nothing-like-it-either; python_version < "3"',  # false for this interpreter
)
UNMET = (
    "sglang==0.5.22 (installed: 0.5.23); torch==2.14.1 (not installed); "
    "omni-kernels (not installed)"
)
SGLANG_MISSING = importlib.util.find_spec("sglang") is None


def rows(result) -> list[dict[str, object]]:
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def install_omni(site: PluginSite, source: str = WELL) -> None:
    """sglang-omni 0.1.9 as released (its pins), beside SGLang 0.5.23's metadata."""
    site.install("sglang", version="0.5.23")  # metadata only: SGLang itself is not importable
    site.install(
        "sglang-omni",
        version="0.1.9",
        entry_points={"omni": "omni_plugin:factory", "omni-tts": "omni_plugin:factory"},
        modules={"omni_plugin.py": source},
        requires=OMNI_REQUIRES,
    )


# -- requirements ----------------------------------------------------------------


def test_list_shows_each_distribution_s_unmet_requirements(site):
    install_omni(site)
    site.install("fine", entry_points={"fine": "fine_plugin:factory"}, requires=["stevedore"])
    listed = {r["Name"]: r for r in rows(run_cli(site, "list", "-f", "json"))}
    assert listed["omni"]["Requirements"] == f"unmet: {UNMET}"
    assert listed["omni-tts"]["Requirements"] == f"unmet: {UNMET}"
    assert listed["fine"]["Requirements"] == "met"
    assert listed["llm"]["Requirements"] is None


def test_a_requirement_no_tool_could_read_is_never_shown_as_met(site):
    site.install("odd", entry_points={"odd": "odd_plugin:factory"}, requires=["bad spec !!!"])
    listed = {r["Name"]: r for r in rows(run_cli(site, "list", "-f", "json"))}
    assert listed["odd"]["Requirements"] == "unmet: bad spec !!! (not a valid requirement)"


def test_show_gives_the_unmet_requirements_and_check_warns_once_per_distribution(site):
    install_omni(site)
    shown = json.loads(run_cli(site, "show", "omni", "-f", "json").stdout)
    assert shown["Unmet requirements"] == UNMET
    checked = run_cli(site, "check", "-f", "json")
    assert checked.returncode == 0, checked.stderr
    by_name = {r["Name"]: r for r in json.loads(checked.stdout)}
    for name in ("omni", "omni-tts"):
        assert by_name[name]["Result"] == "ok"  # the load decides the Result
        assert by_name[name]["Detail"].endswith(
            f"; unmet requirements of sglang-omni 0.1.9: {UNMET}"
        )
    warnings = [line for line in checked.stderr.splitlines() if "unmet requirements" in line]
    assert warnings == [f"Serve backend 'omni': unmet requirements of sglang-omni 0.1.9: {UNMET}"]


def test_a_failed_load_ends_with_its_distribution_s_unmet_requirements(site):
    install_omni(site, BROKEN)
    clause = f"unmet requirements of sglang-omni 0.1.9: {UNMET}"
    shown = run_cli(site, "show", "omni")
    assert shown.returncode == 1
    assert shown.stderr.strip().splitlines()[-1].endswith(f"; {clause}")
    checked = json.loads(run_cli(site, "check", "omni", "-f", "json").stdout)
    [row] = [r for r in checked if r["Name"] == "omni"]
    assert row["Result"] == "error"
    assert row["Detail"].startswith("Failed to load serve backend 'omni' from sglang-omni: ")
    assert row["Detail"].endswith(f"; {clause}") and row["Detail"].count(clause) == 1
    served = run_serve(["/m", "--model-type", "omni"], site.environ())
    assert served.returncode == 1
    [line] = served.error_lines
    assert line.endswith(f"; {clause}")


def test_a_load_failure_without_unmet_requirements_says_nothing_of_them(site):
    site.install(
        "plain",
        entry_points={"plain": "plain_plugin:factory"},
        modules={"plain_plugin.py": BROKEN},
        requires=["stevedore"],
    )
    shown = run_cli(site, "show", "plain")
    assert shown.returncode == 1
    assert "unmet" not in shown.stderr


# -- general plugins ---------------------------------------------------------------

HOOK = "import pathlib, os\npathlib.Path(os.environ['MARKER']).touch()\ndef run():\n    pass\n"


@pytest.fixture
def hooks(site, tmp_path):
    """Two general plugins, one from a distribution providing a platform, and a marker
    file each writes when imported (nothing may import them).
    """
    site.install(
        "hooky",
        version="2.0",
        entry_points={"hook1": "hooky_mod:run"},
        group="sglang.srt.plugins",
        modules={"hooky_mod.py": HOOK},
    )
    info = site.install(
        "npu-platform",
        version="0.4",
        entry_points={"npu-hooks": "npu_mod:run"},
        group="sglang.srt.plugins",
        modules={"npu_mod.py": HOOK},
    )
    with open(info / "entry_points.txt", "a", encoding="utf-8") as stream:
        stream.write("[sglang.srt.platforms]\nnpu = npu_mod:run\n")
    marker = tmp_path / "imported"
    return site, {"MARKER": str(marker)}, marker


def general(result) -> dict[str, dict[str, object]]:
    return {r["Name"]: r for r in rows(result) if r["Origin"] == "general"}


def test_list_shows_general_plugins_and_whether_serve_runs_them(hooks, tmp_path):
    site, env, marker = hooks
    sglang = PluginSite(tmp_path / "sglang")  # SGLang's package with the serve-backend API
    sglang.install(
        "sglang",
        version="0.5.23",
        modules={"sglang/__init__.py": "", "sglang/cli/serve_backends.py": ""},
    )
    env["PYTHONPATH"] = f"{site.path}:{sglang.path}"

    listed = general(run_cli(site, "list", "-f", "json", env=env))
    assert listed["hook1"] == {
        "Name": "hook1",
        "Origin": "general",
        "Distribution": "hooky",
        "Version": "2.0",
        "Target": "hooky_mod:run",
        "Status": "runs before serve",
        "Requirements": "met",
    }
    assert listed["npu-hooks"]["Status"] == "runs before serve"

    # SGLANG_PLUGINS as SGLang reads it: names stripped, empty ones dropped.
    only = general(run_cli(site, "list", "-f", "json", env={**env, "SGLANG_PLUGINS": " hook1 ,"}))
    assert only["hook1"]["Status"] == "runs before serve"
    assert only["npu-hooks"]["Status"] == "not in SGLANG_PLUGINS"

    # SGLANG_PLATFORM skips the general plugins of another platform's distribution.
    other = general(run_cli(site, "list", "-f", "json", env={**env, "SGLANG_PLATFORM": "cuda"}))
    assert other["hook1"]["Status"] == "runs before serve"
    assert (
        other["npu-hooks"]["Status"]
        == "skipped: its distribution's platform is not SGLANG_PLATFORM"
    )
    assert not marker.exists()


@pytest.mark.skipif(not SGLANG_MISSING, reason="SGLang is installed here")
def test_without_sglang_a_general_plugin_needs_it_and_is_no_backend(hooks):
    site, env, marker = hooks
    listed = general(run_cli(site, "list", "-f", "json", env=env))
    assert listed["hook1"]["Status"] == "needs SGLang, which runs it (pip install sglang)"
    # SGLang's filters say what they leave out, with or without SGLang.
    only = general(run_cli(site, "list", "-f", "json", env={**env, "SGLANG_PLUGINS": "hook1"}))
    assert only["hook1"]["Status"] == "needs SGLang, which runs it (pip install sglang)"
    assert only["npu-hooks"]["Status"] == "not in SGLANG_PLUGINS"
    other = general(run_cli(site, "list", "-f", "json", env={**env, "SGLANG_PLATFORM": "cuda"}))
    assert other["npu-hooks"]["Status"].startswith("skipped: its distribution's platform")
    for command in ("show", "check"):
        refused = run_cli(site, command, "hook1", env=env)
        assert refused.returncode == 2, refused.stderr
    assert not marker.exists()


# -- shadowed copies ----------------------------------------------------------------


def test_a_shadowed_copy_is_shown_and_warned_about_once(site, tmp_path):
    later = PluginSite(tmp_path / "stale")
    for where, version in ((site, "2.0"), (later, "1.0")):
        where.install(
            "omni-runtime",
            version=version,
            entry_points={"omni": "omni_plugin:factory", "omni2": "omni_plugin:factory"},
            modules={"omni_plugin.py": WELL},
        )
    env = {"PYTHONPATH": f"{site.path}:{later.path}"}
    shown = json.loads(run_cli(site, "show", "omni", "-f", "json", env=env).stdout)
    assert shown["Version"] == "2.0"
    assert shown["Shadowed copies"] == f"1.0 at {later.path}"
    checked = run_cli(site, "check", env=env)
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stderr.splitlines() if str(later.path) in line]
    assert warnings == [
        "Distribution omni-runtime is on the module search path more than once: "
        "omni-runtime 2.0, found first, is the one used; later copies, never loaded: "
        f"1.0 at {later.path}"
    ]
    alone = json.loads(run_cli(site, "show", "omni", "-f", "json").stdout)
    assert alone["Shadowed copies"] == ""


# -- fail fast ------------------------------------------------------------------------


def test_check_fails_an_enabled_plugin_that_is_not_installed(site, tmp_path):
    site.install(
        "omni-runtime",
        entry_points={"omni": "omni_plugin:factory"},
        modules={"omni_plugin.py": WELL},
    )
    conf = tmp_path / "gate.conf"
    conf.write_text("[serve_backends]\nenabled_backends = omni, omin, diffusion\n")
    checked = run_cli(site, "check", "--config-file", str(conf), "-f", "json")
    assert checked.returncode == 1, checked.stderr
    by_name = {r["Name"]: r for r in json.loads(checked.stdout)}
    assert by_name["omni"]["Result"] == "ok"
    assert by_name["omin"]["Result"] == "not installed"
    assert by_name["omin"]["Detail"] == (
        f"enabled by [serve_backends] enabled_backends, set in {conf}, but no installed "
        "distribution provides serve backend 'omin'; did you mean 'omni'?"
    )
    assert "diffusion" not in {n for n, r in by_name.items() if r["Result"] == "not installed"}
    flagged = run_cli(site, "check", "--enable", "omni,ghost", "-f", "json")
    assert flagged.returncode == 1
    [ghost] = [r for r in json.loads(flagged.stdout) if r["Name"] == "ghost"]
    assert ghost["Detail"].startswith("enabled by --enable on the command line, ")


# -- preferred_backends ------------------------------------------------------------

MATCH = "return ServeBackendDetection.MATCH"


@pytest.fixture
def matching(install_backend, site):
    for name in ("alpha", "beta", "gamma"):
        install_backend(f"{name}-runtime", name, detect=MATCH if name != "gamma" else None)
    return site


def test_preferred_backends_settles_several_matches_in_its_order(matching):
    builtins = {"llm": ServeBackend(api_version=1, run=lambda request: None)}
    request = ServeRequest(argv=("--model-path", "/m"), model_path="/m")
    chosen = ServeBackendRegistry(builtins, preferred=("gamma", "beta", "alpha")).auto_detect(
        request
    )
    assert chosen.name == "beta"  # gamma did not match: the first listed of the matches wins
    for preferred in ((), ("gamma",)):
        with pytest.raises(AmbiguousDetectionError) as refused:
            ServeBackendRegistry(builtins, preferred=preferred).auto_detect(request)
        assert str(refused.value) == (
            "Multiple serve backends matched this request: alpha, beta. Select one explicitly "
            "with --model-type BACKEND, or list the one to prefer first in [serve_backends] "
            "preferred_backends."
        )


def test_serve_and_detect_say_preferred_backends_chose_and_where_it_was_set(matching, tmp_path):
    conf = tmp_path / "prefer.conf"
    conf.write_text("[serve_backends]\npreferred_backends = beta, alpha\n")
    # Where the list was set comes before the others that matched, in one wording.
    note = f"chosen by preferred_backends, set in {conf}; also matched: alpha"
    served = run_serve(["--config-file", str(conf), "/m"], matching.environ())
    assert served.returncode == 0, served.stderr
    assert (
        f"Selected serve backend 'beta' (from beta-runtime) by automatic detection ({note})"
    ) in served.stderr.splitlines()
    said = run_cli(matching, "detect", "--config-file", str(conf), "/m")
    assert said.returncode == 0, said.stderr
    assert said.stderr.splitlines()[0] == f"Selected: beta ({note})"
    variable = "OS_SERVE_BACKENDS__PREFERRED_BACKENDS"
    detected = run_cli(matching, "detect", "-f", "json", "/m", env={variable: "beta,alpha"})
    assert detected.returncode == 0, detected.stderr
    final = json.loads(detected.stdout)[-1]
    assert (final["Backend"], final["Verdict"]) == ("beta", "selected")
    assert final["Detail"] == (
        f"chosen by preferred_backends, set in environment variable {variable}; also matched: alpha"
    )
    ambiguous = run_cli(matching, "detect", "-f", "json", "/m")
    assert ambiguous.returncode == 1
    assert "preferred_backends" in json.loads(ambiguous.stdout)[-1]["Detail"]


def test_preferred_names_not_installed_are_warned_about_but_built_ins_are_not(matching):
    env = {"OS_SERVE_BACKENDS__PREFERRED_BACKENDS": "alpah,diffusion"}
    listed = run_cli(matching, "list", env=env)
    assert listed.returncode == 0, listed.stderr
    warnings = [line for line in listed.stderr.splitlines() if "preferred" in line]
    assert len(warnings) == 1, listed.stderr
    assert warnings[0].startswith(
        "Serve backend 'alpah' in the preferred list is not installed; did you mean 'alpha'?"
    )
    assert "OS_SERVE_BACKENDS__PREFERRED_BACKENDS" in warnings[0]


# -- true reasons -----------------------------------------------------------------------


@pytest.mark.skipif(not SGLANG_MISSING, reason="SGLang is installed here: llm runs")
def test_the_fallback_error_names_what_happened_to_each_plugin(install_backend, site, tmp_path):
    install_backend("shy-runtime", "shy", detect="return ServeBackendDetection.NO_MATCH")
    install_backend("slow-runtime", "slow", detect="time.sleep(30)")
    install_backend("off-runtime", "off", detect=MATCH)
    install_backend("out-runtime", "out", detect=MATCH)
    install_backend("twin-a", "twin", detect=MATCH, module="twin_a")
    install_backend("twin-b", "twin", detect=MATCH, module="twin_b")
    site.install(
        "broken-runtime",
        entry_points={"broken": "broken_plugin:factory"},
        modules={"broken_plugin.py": BROKEN},
    )
    conf = tmp_path / "serve.conf"
    conf.write_text("[serve_backends]\ndetect_timeout = 1\ndisabled_backends = off,out\n")
    model = tmp_path / "model"
    model.mkdir()
    served = run_serve(["--config-file", str(conf), str(model)], site.environ())
    assert served.returncode == 1
    [line] = served.error_lines
    assert "asked:" not in line
    for reason in (
        "plugin 'shy' from shy-runtime was asked and declined",
        "plugin 'slow' from slow-runtime timed out: detector did not return within 1 s",
        "; failed to load serve backend "
        "'broken' from broken-runtime: No module named 'torch_that_is_not_installed'",
        "plugin 'twin' has duplicate providers (twin-a, twin-b), so none was asked",
        # Those one list leaves out in one clause: a line, not a page.
        "plugins 'off' from off-runtime, 'out' from out-runtime are disabled by "
        f"[serve_backends] disabled_backends, set in {conf}, so they were not asked",
    ):
        assert reason in line, line


def test_detect_warns_of_its_own_options_after_the_model(site, tmp_path):
    conf = tmp_path / "x.conf"
    conf.write_text("[serve_backends]\ndetect_timeout = 3\n")
    result = run_cli(site, "detect", "/m", "--config-file", str(conf), "-f", "json", "--tp", "2")
    assert result.returncode == 0, result.stderr
    assert not result.stdout.lstrip().startswith("[")  # -f json was the request's
    [warning] = [line for line in result.stderr.splitlines() if "own options" in line]
    assert warning == (
        "detect's own options after MODEL are taken as part of the request, not as detect's: "
        f"--config-file {conf}, -f json. If they were meant for detect, run: "
        f"sglang-backends detect --config-file {conf} -f json /m --tp 2"
    )
    # What came before the command name, global, is in the line to run too.
    early = run_cli(site, "--config-file", str(conf), "-v", "detect", "/m", "-f", "json")
    [warning] = [line for line in early.stderr.splitlines() if "own options" in line]
    assert warning.endswith(f"run: sglang-backends --config-file {conf} -v detect -f json /m")
    explicit = run_cli(site, "detect", "-f", "json", "--", "/m", "-f", "x")
    assert explicit.returncode == 0, explicit.stderr
    assert "own options" not in explicit.stderr


def test_a_copy_by_its_directory_name_alone_is_shown_with_the_name_it_has(site):
    """importlib.metadata reads ``vlm-fast-1.0.dist-info`` as distribution ``vlm``, as it
    reads ``vlm-ref-1.0.dist-info``: one hides the other, named as its METADATA names it."""
    for dist in ("vlm-fast", "vlm-ref"):
        info = site.path / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n", encoding="utf-8"
        )
        (info / "entry_points.txt").write_text(
            "[sglang.serve_backends]\nvlm = omni_plugin:factory\n", encoding="utf-8"
        )
    (site.path / "omni_plugin.py").write_text(WELL, encoding="utf-8")
    shown = json.loads(run_cli(site, "show", "vlm", "-f", "json").stdout)
    hidden = ({"vlm-fast", "vlm-ref"} - {shown["Distribution"]}).pop()
    assert shown["Shadowed copies"] == f"1.0 at {site.path} (its METADATA names {hidden})"


def test_a_directory_on_the_path_twice_holds_one_copy_not_two(site):
    """The working directory and its name in PYTHONPATH: the same files, no shadowed copy."""
    site.install("omni-runtime", entry_points={"omni": "omni_plugin:factory"},
                 modules={"omni_plugin.py": WELL})  # fmt: skip
    # python -m puts the working directory first on the path, and PYTHONPATH names it too.
    command = [sys.executable, "-m", "sglang_backends", "show", "omni", "-f", "json"]
    env = clean_environ(site.environ())
    shown = subprocess.run(
        command, cwd=site.path, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(shown.stdout)["Shadowed copies"] == ""
    assert "more than once" not in shown.stderr
