"""The built-in backends: ``llm`` (the fallback) and ``diffusion``, without and with SGLang."""

from __future__ import annotations

import importlib.util
import json

import pytest
from servetools import read_json, run_serve

from sglang_backends import ServeBackendDetection, ServeRequest
from sglang_backends.builtins import default_builtins, detect_diffusion


def _diffusers_dir(root):
    model = root / "tiny-diffusion"
    model.mkdir()
    (model / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    return model


def test_default_builtins():
    builtins = default_builtins()
    assert list(builtins) == ["llm", "diffusion"]
    assert builtins["llm"].detect is None
    assert builtins["diffusion"].detect is detect_diffusion
    assert all(b.api_version == 1 and b.requires_model_path for b in builtins.values())


def test_diffusion_detector(tmp_path):
    model = _diffusers_dir(tmp_path)
    other = tmp_path / "llama"
    other.mkdir()
    cases = {
        str(model): ServeBackendDetection.MATCH,
        str(other): ServeBackendDetection.NO_MATCH,
        str(model / "model_index.json"): ServeBackendDetection.UNKNOWN,
        "stabilityai/sdxl-turbo": ServeBackendDetection.UNKNOWN,
        None: ServeBackendDetection.UNKNOWN,
    }
    for path, verdict in cases.items():
        assert detect_diffusion(ServeRequest(argv=(), model_path=path)) is verdict, path


@pytest.fixture
def without_sglang(site):
    if importlib.util.find_spec("sglang") is not None:
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
        (["--model-type", "diffusion", "--help"], "'diffusion'", 'pip install "sglang[diffusion]"'),
    ],
)
def test_without_sglang_says_what_to_install(without_sglang, args, backend, install):
    result = run_serve(args, without_sglang)
    assert result.returncode == 1
    assert len(result.error_lines) == 1 and "Traceback" not in result.stderr
    line = result.error_lines[0]
    assert f"The {backend} backend needs SGLang" in line and line.endswith(install)


def test_auto_detects_a_local_diffusers_model(without_sglang, tmp_path):
    result = run_serve([str(_diffusers_dir(tmp_path))], without_sglang)
    assert result.returncode == 1
    assert "Selected serve backend 'diffusion' (built-in)" in result.stderr
    assert 'pip install "sglang[diffusion]"' in result.error_lines[0]


# A stand-in for SGLang's servers: records what the built-ins hand them.
FAKE_SGLANG = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/launch_server.py": """
        import json, os

        def run_server(server_args):
            with open(os.environ["SERVE_RECORD"], "w") as stream:
                json.dump({"server": "llm", "args": server_args}, stream)
        """,
    "sglang/srt/server_args.py": """
        def prepare_server_args(argv):
            return list(argv)
        """,
    "sglang/multimodal_gen/__init__.py": "",
    "sglang/multimodal_gen/runtime/__init__.py": "",
    "sglang/multimodal_gen/runtime/entrypoints/__init__.py": "",
    "sglang/multimodal_gen/runtime/entrypoints/cli/__init__.py": "",
    "sglang/multimodal_gen/runtime/entrypoints/cli/serve.py": """
        import json, os

        def add_multimodal_gen_serve_args(parser):
            parser.add_argument("--model-path")

        def execute_serve_cmd(args, unknown):
            with open(os.environ["SERVE_RECORD"], "w") as stream:
                record = {"server": "diffusion", "model": args.model_path, "rest": unknown}
                json.dump(record, stream)
        """,
}


@pytest.fixture
def fake_sglang(site, tmp_path):
    site.install("sglang", version="0.0.0", modules=FAKE_SGLANG)
    env = site.environ()
    env["SERVE_RECORD"] = str(tmp_path / "record.json")
    return env, tmp_path / "record.json"


def test_llm_hands_argv_to_sglang(fake_sglang):
    env, record = fake_sglang
    result = run_serve(["org/model", "--tp", "2"], env)
    assert result.returncode == 0, result.stderr
    assert read_json(record) == {
        "server": "llm",
        "args": ["--model-path", "org/model", "--tp", "2"],
    }


def test_diffusion_hands_argv_to_sglang(fake_sglang, tmp_path):
    env, record = fake_sglang
    model = _diffusers_dir(tmp_path)
    result = run_serve([str(model), "--num-gpus", "1"], env)
    assert result.returncode == 0, result.stderr
    assert read_json(record) == {
        "server": "diffusion",
        "model": str(model),
        "rest": ["--num-gpus", "1"],
    }
