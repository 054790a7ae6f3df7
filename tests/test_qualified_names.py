"""Names as they come: ``DIST:NAME`` advice is given only where following it works.

Real installed distributions and the real CLI: every ``e.g. 'DIST:NAME'`` and
``did you mean 'DIST:NAME'?`` that serve, check, detect or show prints is
followed, and must pick the plugin it advises.
"""

from __future__ import annotations

import json
import re

import pytest
from clitools import run_cli
from servetools import run_serve

PLUGIN = """
from sglang_backends import ServeBackend, ServeBackendDetection


def run(request):
    print("SERVED BY {label}")


def detect(request):
    return ServeBackendDetection.MATCH


def factory():
    return ServeBackend(api_version=1, run=run, detect=detect)
"""

#: Advice naming a backend to pick, as every message words it.
ADVICE = re.compile(r"(?:e\.g\. |did you mean )'([^']+)'")


def install(site, dist: str, entries: list[tuple[str, str]]) -> None:
    """Install *dist* registering each ``(name, label)`` of *entries*, a module per label.

    ``entry_points.txt`` is written by hand: one distribution may register a name twice.
    """
    modules = {f"{label}.py": PLUGIN.replace("{label}", label) for _, label in entries}
    info = site.install(dist, entry_points={}, modules=modules)
    lines = "".join(f"{name} = {label}:factory\n" for name, label in entries)
    (info / "entry_points.txt").write_text(f"[sglang.serve_backends]\n{lines}")


def followed(site, advice: str) -> str:
    """Serve with ``--model-type ADVICE``: the label of the plugin that served."""
    result = run_serve(["m", "--model-type", advice], site.environ())
    assert result.returncode == 0, (advice, result.stderr)
    [label] = re.findall(r"SERVED BY (\w+)", result.stdout)
    return label


def advice_in(text: str) -> list[str]:
    return ADVICE.findall(text)


@pytest.fixture
def colons(site):
    """Two providers of a name holding a colon."""
    install(site, "dist-a", [("ns:omni", "alpha")])
    install(site, "dist-b", [("ns:omni", "beta")])
    return site


def test_dist_name_splits_at_the_first_colon(colons):
    assert followed(colons, "dist-a:ns:omni") == "alpha"
    assert followed(colons, "dist-b:ns:omni") == "beta"
    assert followed(colons, "DIST_B:ns:omni") == "beta"  # compared as pip compares names
    shown = run_cli(colons, "show", "-f", "json", "dist-b:ns:omni")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["Distribution"] == "dist-b"
    checked = run_cli(colons, "check", "-f", "json", "dist-a:ns:omni")
    assert checked.returncode == 0, checked.stderr
    assert [(r["Distribution"], r["Result"]) for r in json.loads(checked.stdout)] == [
        ("dist-a", "ok")
    ]


def every_advice(site, name: str) -> dict[str, list[str]]:
    """What each command advises about duplicate *name*: the general help, serve
    --model-type, serve's automatic detection, check, detect and show, by command."""
    env = site.environ()
    serve = run_serve(["m", "--model-type", name], env)
    assert serve.returncode != 0
    auto = run_serve(["m"], env)
    check = run_cli(site, "check", "-f", "json", "-c", "Detail", timeout=60)  # whole cells
    detect = run_cli(site, "detect", "-f", "json", "-c", "Detail", "m", timeout=60)
    show = run_cli(site, "show", name)
    helped = run_cli(site, "serve", "--help")
    backends = helped.stdout.split("backends:\n", 1)[1].split("\n\n", 1)[0]
    return {
        # the general help labels a duplicate as DIST:NAME where that picks it
        "help": [line.split()[0] for line in backends.splitlines() if ":" in line.split()[0]],
        "serve": advice_in(serve.stderr),
        "auto": advice_in(auto.stderr),
        "check": advice_in(check.stdout),
        "detect": advice_in(detect.stdout + detect.stderr),
        "show": advice_in(show.stderr),
    }


def test_advice_for_a_name_with_a_colon_works(colons):
    advice = every_advice(colons, "ns:omni")
    assert all(advice.values()), advice
    for given in {a for found in advice.values() for a in found}:
        assert followed(colons, given) in ("alpha", "beta")


def test_advice_skips_a_distribution_registering_the_name_twice(site):
    install(site, "twice-rt", [("x", "first"), ("x", "second")])
    install(site, "solo-rt", [("x", "solo")])
    advice = every_advice(site, "x")
    assert all(advice.values()), advice
    assert {a for found in advice.values() for a in found} == {"solo-rt:x"}
    assert followed(site, "solo-rt:x") == "solo"


def test_no_advice_when_one_distribution_registers_the_name_twice(site):
    install(site, "twice-rt", [("x", "first"), ("x", "second")])
    advice = every_advice(site, "x")
    assert not any(advice.values()), advice
    result = run_serve(["m", "--model-type", "x"], site.environ())
    [line] = result.stderr.strip().splitlines()
    assert "twice-rt registers serve backend 'x' 2 times: first:factory, second:factory" in line
    picked = run_serve(["m", "--model-type", "twice-rt:x"], site.environ())
    [line] = picked.stderr.strip().splitlines()
    assert "twice-rt registers serve backend 'x' 2 times" in line, line


def test_advice_names_a_distribution_whose_metadata_is_unreadable(site):
    install(site, "plain-rt", [("x", "plain")])
    install(site, "broken-rt", [("x", "broken")])
    [info] = site.path.glob("broken_rt-*.dist-info")
    (info / "METADATA").unlink()
    advice = run_serve(["m", "--model-type", "x"], site.environ())
    given = advice_in(advice.stderr)
    assert given == ["broken_rt:x"], advice.stderr
    assert followed(site, "broken_rt:x") == "broken"


@pytest.mark.parametrize("given", ["wrongdist:echo", "sglang-echo:echo"])
def test_a_wrong_distribution_suggests_the_right_one(site, given):
    """echo comes from sglang-echo-backend, installed with the test environment."""
    result = run_serve(["m", "--model-type", given], site.environ())
    assert result.returncode == 2, result.stderr
    assert advice_in(result.stderr) == ["sglang-echo-backend:echo"], result.stderr
    checked = run_cli(site, "check", given)
    assert checked.returncode == 2
    assert advice_in(checked.stderr) == ["sglang-echo-backend:echo"], checked.stderr
    listed = run_cli(site, "list", env={"OS_SERVE_BACKENDS__MODEL_TYPE": given})
    assert listed.returncode == 0, listed.stderr
    assert advice_in(listed.stderr) == ["sglang-echo-backend:echo"], listed.stderr
