"""Differential tests: the same requests to real SGLang's ``sglang serve`` and to ours.

Run with ``tox -e sglang`` (installs ``sglang==0.5.23``, then runs them again
with 0.5.22's package first on ``PYTHONPATH``); skipped unless the real SGLang,
with its ``sglang serve`` registry, is importable. They compare:

* detection: upstream's registry (``sglang.cli.serve``) and ours, built in
  this process, choose the same backend, and the ``diffusion`` detectors
  give the same verdict, on a battery of model directories and flags;
* targeted help: ``--model-type llm|diffusion --help`` print the same text,
  once program names and argparse's choice-set order are normalised; the
  general ``--help`` (ours is our own) ends with the same note;
* general plugins: both run SGLang's ``sglang.srt.plugins`` before the
  backend, after refusing a plugin named like a built-in, and neither runs
  them for ``--help``;
* one plugin, both hosts: both CLIs serve the echo example (built with
  ``portable_backend``) by name and by auto-detection, answer a completion
  and stop on Ctrl+C; the kit checks it against SGLang's own registry; the
  help note is read from SGLang's file without importing SGLang.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import psutil
import pytest

from sglang_backends._core.names import GENERAL_PLUGINS_GROUP
from sglang_backends._sglang.builtins import default_builtins
from sglang_backends.contract import ServeRequest
from sglang_backends.registry import ServeBackendRegistry
from sglang_backends.testing import PluginSite


def _real_sglang() -> bool:
    """Whether SGLang with its ``sglang serve`` registry is installed (found, not imported)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    return (package / "cli" / "serve_backends.py").is_file()


pytestmark = [
    pytest.mark.skipif(
        not _real_sglang(), reason="needs the real SGLang (tox -e sglang installs it)"
    ),
    # SGLang's imports warn about CUDA-only kernels on a CPU machine: not ours to fail on.
    pytest.mark.filterwarnings("ignore"),
]

BIN = Path(sys.executable).parent
UPSTREAM = [str(BIN / "sglang"), "serve"]
OURS = [str(BIN / "sglang-backends"), "serve"]
DIFFUSERS = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0"}
MODULAR = {"_class_name": "ModularPipeline", "_diffusers_version": "0.35.0"}


def _environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_SERVE_BACKENDS__")}
    # No hub access here: SGLang's hub lookup must fail at once, on both sides.
    env.update(HF_HUB_OFFLINE="1", COLUMNS="120", PYTHONWARNINGS="ignore", **extra)
    env.pop("SGLANG_PLUGINS", None)
    return env


@pytest.fixture(scope="module")
def upstream():
    """SGLang's own ``sglang serve`` module, imported once (it imports torch)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SGLang warns about CUDA-only kernels on import
        import sglang.cli.serve as serve

    return serve


def test_the_release_imported_is_the_one_whose_metadata_is_found(upstream):
    """With an older release's package first on PYTHONPATH, both sides see that release."""
    import importlib.metadata

    import sglang

    assert importlib.metadata.version("sglang") == sglang.__version__
    print(f"SGLang {sglang.__version__} from {Path(sglang.__file__).parent}")


def _model(root: Path, name: str, files: dict[str, object]) -> str:
    model = root / name
    model.mkdir()
    for filename, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (model / filename).write_text(text)
    return str(model)


def _battery(root: Path) -> list[tuple[list[str], str | None]]:
    """Command lines (after ``serve``) covering SGLang's detection rules."""
    diffusers = _model(root, "diffusers", {"model_index.json": DIFFUSERS})
    modular = _model(root, "modular", {"modular_model_index.json": MODULAR})
    empty = _model(root, "empty-index", {"model_index.json": {}})
    first = _model(
        root,
        "first-decides",
        {"model_index.json": {"_class_name": "X"}, "modular_model_index.json": MODULAR},
    )
    llama = _model(root, "llama", {"config.json": {"model_type": "llama"}})
    bare = _model(root, "bare-weights", {})
    config = root / "pipeline.json"
    config.write_text(json.dumps({"pipeline_class_name": "FluxPipeline"}))
    # (argv, the backend both must choose, or None where it depends on
    # whether SGLang's diffusion extras are installed).
    return [
        ([diffusers], "diffusion"),
        ([modular], "diffusion"),
        ([empty], "llm"),
        ([first], "llm"),
        ([llama], "llm"),
        ([bare], "llm"),
        (["--model-path", diffusers, "--tp", "2"], "diffusion"),
        ([f"--model={modular}"], "diffusion"),
        ([f"--model-path={empty}"], "llm"),
        ([str(Path(llama) / "config.json")], "llm"),
        (["org/some-llm"], "llm"),
        (["--tp", "2"], "llm"),
        ([bare, "--pipeline-class-name", "FluxPipeline"], None),
        ([bare, "--pipeline=NoSuchPipeline"], "llm"),
        ([bare, "--config", str(config)], None),
    ]


def _upstream_request(upstream, argv: list[str]):
    """What ``sglang serve`` hands its registry for *argv*."""
    name, dispatch = upstream._extract_model_type_override(argv)
    dispatch, positional = upstream._normalize_positional_model_path(dispatch)
    request = upstream.ServeRequest(
        argv=tuple(dispatch),
        model_path=upstream.try_get_model_path(dispatch),
        model_path_is_positional=positional,
    )
    return name, request


def test_detection_matches_upstream(upstream, tmp_path):
    # SGLang's private registry constructor is the reference being compared to.
    theirs = upstream._create_backend_registry()
    ours = ServeBackendRegistry(default_builtins())
    detect_ours = ours.get("diffusion").backend.detect
    detect_theirs = theirs.get("diffusion").backend.detect
    assert detect_ours is not None and detect_theirs is not None
    differences = []
    for argv, expected in _battery(tmp_path):
        _, their_request = _upstream_request(upstream, argv)
        our_request = ServeRequest.from_argv(argv)
        assert (our_request.argv, our_request.model_path, our_request.model_path_is_positional) == (
            their_request.argv,
            their_request.model_path,
            their_request.model_path_is_positional,
        ), argv
        verdicts = (detect_ours(our_request).value, detect_theirs(their_request).value)
        chosen = (ours.auto_detect(our_request).name, theirs.auto_detect(their_request).name)
        if verdicts[0] != verdicts[1] or chosen[0] != chosen[1] or expected not in (None, *chosen):
            differences.append((argv, verdicts, chosen))
    assert differences == []


def test_the_diffusion_detector_is_sglangs_own(upstream):
    detect = ServeBackendRegistry(default_builtins()).get("diffusion").backend.detect
    closure = {cell.cell_contents for cell in detect.__closure__ or ()}
    assert upstream.get_is_diffusion_model in closure
    # 0.5.23 added detection of a native pipeline named on the command line;
    # an older release's detector has no such check, and neither has ours there.
    native = getattr(upstream, "is_registered_native_pipeline", None)
    names = {getattr(cell, "__name__", None) for cell in closure}
    if native is None:
        assert "is_registered_native_pipeline" not in names
    else:
        assert native in closure
    assert detect(ServeRequest(argv=(), model_path=None)).value == "unknown"


_CHOICES = re.compile(r"\{([^{}\s]*,[^{}\s]*)\}")


def normalise_help(text: str) -> str:
    """Help text with program names unified and choice sets sorted, whitespace collapsed.

    argparse prints a choice set in the order SGLang built it, which for a set
    varies between processes; a longer program name re-wraps the usage.
    """
    text = text.replace("sglang-backends serve", "sglang serve")
    text = _CHOICES.sub(lambda m: "{" + ",".join(sorted(m.group(1).split(","))) + "}", text)
    return " ".join(text.split())


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("backend", ["llm", "diffusion"])
def test_targeted_help_matches_upstream(backend):
    args = ["--model-type", backend, "--help"]
    theirs = _run([*UPSTREAM, *args], _environ())
    ours = _run([*OURS, *args], _environ())
    assert theirs.returncode == 0, theirs.stderr
    assert ours.returncode == 0, ours.stderr
    assert normalise_help(ours.stdout) == normalise_help(theirs.stdout)
    assert ours.stdout.rstrip().endswith(theirs.stdout.rstrip().splitlines()[-1])


def test_general_help_ends_with_upstreams_note():
    theirs = _run([*UPSTREAM, "--help"], _environ())
    ours = _run([*OURS, "--help"], _environ())
    assert theirs.returncode == 0 and ours.returncode == 0, (theirs.stderr, ours.stderr)
    note = theirs.stdout.rstrip().splitlines()[-1]
    assert "cookbook" in note
    assert ours.stdout.endswith(f"\n\n{note}\n")


PROBE = """
import json, os

def record(event):
    with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as stream:
        stream.write(event + "\\n")

def general():
    record("general plugin")

def run(request):
    record("run " + " ".join(request.argv))

def backend():
    # SGLang's own class, so that both hosts accept it (as sglang-omni does).
    from sglang.cli.serve_backends import ServeBackend
    return ServeBackend(api_version=1, run=run)
"""


@pytest.fixture
def probe_site(tmp_path):
    """A general plugin and a serve backend ``probe``, both recording to a log."""
    site = PluginSite(tmp_path / "site")
    site.install(
        "probe-general",
        entry_points={"probe": "probe_plugin:general"},
        group=GENERAL_PLUGINS_GROUP,
        modules={"probe_plugin.py": PROBE},
    )
    site.install("probe-backend", entry_points={"probe": "probe_plugin:backend"})
    return site


@pytest.mark.parametrize(
    "args",
    [["org/model", "--model-type", "probe", "--tp", "2"], ["--model-type", "probe", "--help"]],
    ids=["serve", "help"],
)
def test_general_plugins_run_first_as_upstream(probe_site, tmp_path, args):
    logs = {}
    for label, command in (("upstream", UPSTREAM), ("ours", OURS)):
        log = tmp_path / f"{label}.log"
        env = _environ(PYTHONPATH=probe_site.environ()["PYTHONPATH"], PROBE_LOG=str(log))
        result = _run([*command, *args], env)
        assert result.returncode == 0, (label, result.stderr)
        logs[label] = log.read_text().splitlines() if log.exists() else []
    assert logs["ours"] == logs["upstream"]
    if "--help" in args:
        assert logs["ours"] == ["run --help"]  # the backend's help, no general plugin
    else:
        assert logs["ours"] == ["general plugin", "run --model-path org/model --tp 2"]


def test_a_conflict_is_refused_before_the_general_plugins_run_as_upstream(probe_site, tmp_path):
    """Both hosts find the backends (refusing a plugin named like a built-in) first."""
    probe_site.install("clash-backend", entry_points={"llm": "probe_plugin:backend"})
    logs = {}
    for label, command in (("upstream", UPSTREAM), ("ours", OURS)):
        log = tmp_path / f"{label}.log"
        env = _environ(PYTHONPATH=probe_site.environ()["PYTHONPATH"], PROBE_LOG=str(log))
        result = _run([*command, "org/model", "--model-type", "probe"], env)
        assert result.returncode != 0, (label, result.stderr)
        assert "cannot replace reserved or built-in backends: llm" in result.stderr, label
        logs[label] = log.read_text().splitlines() if log.exists() else []
    assert logs == {"upstream": [], "ours": []}


@pytest.mark.parametrize("name", ["org/probe", "my probe", "-probe"])
def test_a_name_with_a_slash_or_a_space_routes_as_upstream(probe_site, tmp_path, name):
    """Upstream leaves every --model-type value to the registry, even one spelled like an
    option (``--model-type -probe``): so do we."""
    probe_site.install("odd-backend", entry_points={name: "probe_plugin:backend"})
    logs = {}
    for label, command in (("upstream", UPSTREAM), ("ours", OURS)):
        log = tmp_path / f"{label}.log"
        env = _environ(PYTHONPATH=probe_site.environ()["PYTHONPATH"], PROBE_LOG=str(log))
        result = _run([*command, "org/model", "--model-type", name], env)
        assert result.returncode == 0, (label, result.stderr)
        logs[label] = log.read_text().splitlines()
    assert logs["ours"] == logs["upstream"] == ["general plugin", "run --model-path org/model"]


# -- one plugin, both hosts: the echo example under both CLIs ------------------

ECHO_MODEL = Path(__file__).resolve().parents[2] / "examples" / "echo-backend" / "models"
ECHO_MODEL = ECHO_MODEL / "echo-tiny"


def _echo_installed() -> None:
    if importlib.util.find_spec("sglang_echo_backend") is None:
        pytest.fail("the echo example is not installed: pip install ./examples/echo-backend")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _http(url: str, body: dict[str, object] | None = None) -> tuple[int, dict[str, object]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


@pytest.mark.parametrize("by", ["name", "detection"])
@pytest.mark.parametrize("cli", ["upstream", "ours"])
def test_both_clis_serve_the_echo_example_until_ctrl_c(tmp_path, cli, by):
    """``sglang serve`` accepts the example (portable_backend) as ``sglang-backends serve`` does."""
    _echo_installed()
    port = _free_port()
    command = UPSTREAM if cli == "upstream" else OURS
    chosen = ["--model-type", "echo"] if by == "name" else []
    log = tmp_path / "stderr"
    with log.open("w+") as err:
        proc = subprocess.Popen(
            [*command, str(ECHO_MODEL), *chosen, "--port", str(port)],
            env=_environ(),
            stdout=err,
            stderr=err,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 300  # upstream imports torch first: slow when loaded
            status = 0
            while status != 200:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                try:
                    status, _ = _http(f"{base}/health")
                except OSError:
                    status = 0
                time.sleep(0.2)
            code, body = _http(f"{base}/v1/completions", {"prompt": "hello both hosts"})
            assert code == 200, body
            assert body["choices"][0]["text"] == "hello both hosts"  # type: ignore[index]
            children = psutil.Process(proc.pid).children(recursive=True)
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        _, alive = psutil.wait_procs(children, timeout=30)
        for leftover in alive:
            leftover.kill()
    output = log.read_text()
    # Both: the example serves within stop_quietly, so SGLang's one process,
    # which has Python's own SIGINT handling, ends with 130 too, not a traceback.
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    assert alive == [], output
    assert "factory returned" not in output and "Skipping automatic detection" not in output


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_kit_stops_the_echo_example_cleanly_under_both_hosts(upstream, tmp_path, signum):
    from sglang_backends.testing import assert_stops_cleanly, installed_hosts

    _echo_installed()
    assert installed_hosts() == ("sglang-backends serve", "sglang serve")
    argv = ["--model-path", str(ECHO_MODEL), "--port", "0"]
    statuses = assert_stops_cleanly(
        "echo", argv, ready="echo: ready", env=_environ(), signum=signum, start_timeout=300
    )
    assert statuses == {"sglang-backends serve": 128 + signum, "sglang serve": 128 + signum}


def test_the_kit_checks_the_echo_example_against_sglangs_own_registry(upstream):
    from sglang_backends.testing import assert_backend_contract
    from sglang_backends.testing._conformance import assert_sglang_accepts

    _echo_installed()
    assert_sglang_accepts("echo")
    assert assert_backend_contract("echo").sglang_checked


def test_the_kit_refuses_a_backend_sglang_would_refuse(upstream, tmp_path):
    from sglang_backends.testing import ContractViolation, PluginSite
    from sglang_backends.testing._conformance import assert_sglang_accepts

    site = PluginSite(tmp_path / "site")
    site.install(
        "ours-only",
        entry_points={"oursonly": "ours_only:factory"},
        modules={
            "ours_only.py": """
                from sglang_backends import ServeBackend

                def factory():
                    return ServeBackend(api_version=1, run=lambda request: None)
            """
        },
    )
    with site.activated(), pytest.raises(ContractViolation, match="portable_backend"):
        assert_sglang_accepts("oursonly")


def test_the_help_note_is_read_from_sglangs_file_without_importing_it(upstream):
    import sglang.cli.main

    code = (
        "import json, sys\n"
        "from sglang_backends._sglang.note import help_note\n"
        "print(json.dumps([help_note(), 'sglang' in sys.modules]))\n"
    )
    result = _run([sys.executable, "-c", code], _environ())
    assert result.returncode == 0, result.stderr
    note, imported = json.loads(result.stdout)
    assert note == sglang.cli.main.COOKBOOK_EPILOG
    assert imported is False
