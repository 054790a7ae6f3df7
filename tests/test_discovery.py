"""Discovery reads package metadata, never stevedore's on-disk entry-point cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from sglang_backends import ServeBackendRegistry
from sglang_backends._core.discovery import discover, split_qualified_name
from sglang_backends._core.selection import designates
from sglang_backends._sglang.builtins import default_builtins


def run_python(site, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a fresh interpreter that sees *site*."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**site.environ(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_discover_records_distribution_version_and_target_of_its_group_alone(site, install_backend):
    module = install_backend("omni-runtime", "omni", version="2.3")
    install_backend("zed-runtime", "dup")
    install_backend("acme-runtime", "dup")
    site.install("tools", entry_points={"tool": "tools:main"}, group="console_scripts")
    found = discover()
    assert "tool" not in found
    (omni,) = found["omni"]
    assert (omni.name, omni.target, omni.distribution, omni.version) == (
        "omni",
        f"{module}:factory",
        "omni-runtime",
        "2.3",
    )
    assert omni.entry_point.dist.name == "omni-runtime"
    assert [p.distribution for p in found["dup"]] == ["acme-runtime", "zed-runtime"]
    assert module not in sys.modules


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("omni", (None, "omni")),
        ("omni-runtime:omni", ("omni-runtime", "omni")),
        (":omni", (None, ":omni")),
        ("a:b:omni", ("a", "b:omni")),  # a distribution name holds no colon; a name may
    ],
)
def test_split_qualified_name(text, expected):
    assert split_qualified_name(text) == expected


@pytest.mark.parametrize(
    ("text", "designated"),
    [
        ("omni", True),
        ("Omni_Runtime:omni", True),  # DIST compared as PEP 503 normalizes it
        ("omni-runtime:omni", True),
        ("zed-runtime:omni", False),
        ("omni-runtime:other", False),
        ("other", False),
    ],
)
def test_one_rule_says_which_plugin_a_name_designates(install_backend, text, designated):
    install_backend("omni-runtime", "omni")
    (omni,) = discover()["omni"]
    assert designates(text, omni) is designated


#: Warms stevedore's on-disk entry-point cache through its public manager, as any
#: stevedore user in the environment would (it imports every plugin of the group).
WARM_STEVEDORE_CACHE = """
    import stevedore
    warm = stevedore.ExtensionManager("sglang.serve_backends").names()
"""


def test_entry_points_rewritten_in_place_are_seen_by_a_new_registry(
    site, install_backend, tmp_path, preinstalled
):
    """Even with stevedore's cache warm: it keys it by 128 s mtime buckets, so a same-path
    rewrite stays unseen there; a registry already built keeps what it saw."""
    install_backend("omni-runtime", "one")
    result = run_python(
        site,
        WARM_STEVEDORE_CACHE
        + f"""
    import importlib, json, pathlib, sys
    from sglang_backends import ServeBackendRegistry
    from sglang_backends._sglang.builtins import default_builtins

    from sglang_backends.testing import write_distribution

    first = ServeBackendRegistry(default_builtins())
    before = first.available_names
    write_distribution({str(site.path)!r}, "late-runtime", entry_points={{"late": "late:f"}})
    info = next(pathlib.Path({str(site.path)!r}).glob("omni_runtime-*.dist-info"))
    (info / "entry_points.txt").write_text(
        "[sglang.serve_backends]\\ntwo = omni_runtime_one_plugin:factory\\n"
    )
    importlib.invalidate_caches()
    stale = stevedore.ExtensionManager("sglang.serve_backends").names()
    registry = ServeBackendRegistry(default_builtins())
    after = registry.available_names
    print(json.dumps([before, warm, stale, after, registry.get("two").name, first.available_names]))
    """,
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    assert result.returncode == 0, result.stderr
    before, warm, stale, after, loaded, kept = json.loads(result.stdout)
    # The subprocess sees the same environment, so the same installed backends.
    assert before == ["llm", "diffusion", *sorted({"one", *preinstalled})]
    # stevedore still lists the old names
    assert [name for name in warm if name not in preinstalled] == ["one"]
    assert [name for name in stale if name not in preinstalled] == ["one"]
    assert after == ["llm", "diffusion", *sorted({"late", "two", *preinstalled})]
    assert loaded == "two"
    assert kept == before


@pytest.mark.parametrize(
    "corruption",
    [b"[]", b"{}", b"null", b'{"groups": 5}', b"\xff\xfe not utf-8", b"{truncated"],
    ids=["list", "empty", "null", "wrong-shape", "bad-utf8", "truncated"],
)
def test_corrupted_stevedore_cache_does_not_break_the_registry(
    site, install_backend, tmp_path, corruption, preinstalled
):
    if sys.executable.startswith("/tmp"):
        # stevedore's documented rule: no cache for an interpreter under /tmp.
        pytest.skip("stevedore keeps no cache for an interpreter under /tmp: nothing to corrupt")
    install_backend("omni-runtime", "omni", detect="return ServeBackendDetection.MATCH")
    cache = tmp_path / "cache"
    warmed = run_python(site, WARM_STEVEDORE_CACHE, XDG_CACHE_HOME=str(cache))
    assert warmed.returncode == 0, warmed.stderr
    files = [path for path in (cache / "python-entrypoints").iterdir() if path.is_file()]
    assert files
    for path in files:
        path.write_bytes(corruption)
    result = run_python(
        site,
        """
        import json
        from sglang_backends import ServeBackendRegistry, ServeRequest
        from sglang_backends._sglang.builtins import default_builtins

        registry = ServeBackendRegistry(default_builtins())
        names = registry.available_names
        loaded = registry.get("omni")
        detected = registry.auto_detect(ServeRequest(argv=(), model_path="m"))
        print(json.dumps([names, loaded.distribution, detected.name]))
        """,
        XDG_CACHE_HOME=str(cache),
    )
    assert result.returncode == 0, result.stderr
    names, dist, detected = json.loads(result.stdout)
    assert names == ["llm", "diffusion", *sorted({"omni", *preinstalled})]
    assert dist == "omni-runtime"
    assert detected == "omni"
    assert all(path.read_bytes() == corruption for path in files)


def test_a_distribution_with_malformed_entry_points_is_skipped_with_a_warning(
    site, install_backend, registry_warnings, preinstalled
):
    install_backend("omni-runtime", "omni")
    info = site.install("broken-meta", entry_points={"x": "x:y"})
    (info / "entry_points.txt").write_text("[sglang.serve_backends]\njunk without equals\n")
    registry = ServeBackendRegistry(default_builtins())
    assert registry.available_names == ("llm", "diffusion", *sorted({"omni", *preinstalled}))
    assert registry.get("omni").distribution == "omni-runtime"
    messages = [r.getMessage() for r in registry_warnings.records]
    assert len([m for m in messages if str(info) in m]) == 1
    assert messages[0] == (
        f"Ignoring the entry points of distribution broken-meta at {info}: its entry_points.txt "
        "cannot be read (line 2, 'junk without equals', has no '=')"
    )


def _break_metadata(info, how: str) -> None:
    if how == "not-utf8":
        (info / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: caf\xe9\nVersion: 1.0\n")
    elif how == "no-metadata":
        (info / "METADATA").unlink()
    elif how == "no-name":
        (info / "METADATA").write_text("Metadata-Version: 2.1\nVersion: 1.0\n")
    elif how == "metadata-fifo":
        (info / "METADATA").unlink()
        os.mkfifo(info / "METADATA")
    elif how == "entry-points-fifo":
        (info / "entry_points.txt").unlink()
        os.mkfifo(info / "entry_points.txt")
    else:
        (info / "entry_points.txt").write_bytes(b"[sglang.serve_backends]\n\xff\xfe = x:y\n")


@pytest.mark.parametrize("how", ["not-utf8", "no-metadata", "no-name"])
def test_a_distribution_whose_metadata_is_unreadable_still_serves_its_entry_points(
    site, install_backend, registry_warnings, preinstalled, how
):
    """As upstream, which finds entry points by the dist-info directory, not its METADATA."""
    install_backend("omni-runtime", "omni")
    install_backend("cafe-runtime", "cafe")
    broken = site.path / "cafe_runtime-1.0.dist-info"
    _break_metadata(broken, how)
    registry = ServeBackendRegistry(default_builtins())
    assert registry.available_names == (
        "llm",
        "diffusion",
        *sorted({"cafe", "omni", *preinstalled}),
    )
    assert registry.get("cafe").distribution == "cafe_runtime"  # loadable by name
    messages = [r.getMessage() for r in registry_warnings.records]
    (plugin,) = discover()["cafe"]
    assert plugin.provider == f"cafe_runtime (metadata unreadable: {broken})"
    assert plugin.version is None
    about = [m for m in messages if str(broken) in m]
    assert len(about) == 1, messages
    assert about[0].startswith(
        f"Using the entry points of the distribution at {broken} under the name 'cafe_runtime': "
        "its METADATA is unreadable ("
    )


def test_a_distribution_whose_entry_points_are_unreadable_is_skipped_with_one_warning(
    site, install_backend, registry_warnings, preinstalled
):
    install_backend("omni-runtime", "omni")
    broken = site.install("cafe-runtime", entry_points={"cafe": "cafe:factory"})
    _break_metadata(broken, "entry-points-not-utf8")
    install_backend("zed-runtime", "zed")
    registry = ServeBackendRegistry(default_builtins())
    assert registry.available_names == (
        "llm",
        "diffusion",
        *sorted({"omni", "zed", *preinstalled}),
    )
    assert registry.get("zed").distribution == "zed-runtime"
    messages = [r.getMessage() for r in registry_warnings.records]
    about = [m for m in messages if str(broken) in m]
    assert len(about) == 1, messages
    assert about[0].startswith(
        f"Ignoring the entry points of distribution cafe-runtime at {broken}: "
        "its entry_points.txt cannot be read (UnicodeDecodeError: "
    )


COMMANDS_OVER_A_FIFO = [
    ("list", "-f", "json", "-c", "Name", "-c", "Distribution"),  # a table shortens a long path
    ("serve", "--help"),
    ("serve", "org/model", "--model-type", "good"),
    ("detect", "org/model"),
]


@pytest.mark.parametrize("how", ["metadata-fifo", "entry-points-fifo"])
@pytest.mark.parametrize("args", COMMANDS_OVER_A_FIFO, ids=lambda args: " ".join(args[:2]))
def test_a_fifo_in_a_dist_info_blocks_no_command(site, install_backend, how, args):
    """Opening a FIFO for reading waits for a writer: it is never opened (stat first)."""
    from clitools import run_cli

    install_backend("good-runtime", "good")
    install_backend("cafe-runtime", "cafe")
    broken = site.path / "cafe_runtime-1.0.dist-info"
    _break_metadata(broken, how)
    result = run_cli(site, *args, timeout=60)  # a blocked read would time out
    assert "Traceback" not in result.stderr
    assert result.returncode == 0, result.stderr
    assert len([line for line in result.stderr.splitlines() if str(broken) in line]) == 1
    if args[0] == "list":
        listed = {row["Name"]: row["Distribution"] for row in json.loads(result.stdout)}
        assert listed["good"] == "good-runtime"
        if how == "metadata-fifo":
            assert listed["cafe"] == f"cafe_runtime (metadata unreadable: {broken})"
        else:
            assert "cafe" not in listed


def test_a_plugin_whose_metadata_is_unreadable_is_served_and_named_by_its_directory(
    site, install_backend
):
    from clitools import run_cli

    install_backend("cafe-runtime", "cafe")
    broken = site.path / "cafe_runtime-1.0.dist-info"
    _break_metadata(broken, "metadata-fifo")
    result = run_cli(site, "serve", "org/model", "--model-type", "cafe", timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"'cafe' (from cafe_runtime (metadata unreadable: {broken}))" in result.stderr
    assert "built-in" not in result.stderr
    helped = run_cli(site, "serve", "--help", timeout=60)
    rows = [" ".join(line.split()) for line in helped.stdout.splitlines()]
    assert f"cafe from cafe_runtime (metadata unreadable: {broken})" in rows


def test_list_and_serve_work_past_a_distribution_whose_metadata_is_not_utf8(site, install_backend):
    from clitools import run_cli

    install_backend("omni-runtime", "omni")
    broken = site.install("cafe-runtime", entry_points={"cafe": "cafe:factory"})
    _break_metadata(broken, "not-utf8")
    listed = run_cli(site, "list", "-f", "value", "-c", "Name")
    assert listed.returncode == 0, listed.stderr
    assert "omni" in listed.stdout.split()
    assert str(broken) in listed.stderr and "Traceback" not in listed.stderr
    served = run_cli(site, "serve", "--model-type", "other", "--help")
    assert served.returncode == 2
    lines = served.stderr.splitlines()
    assert lines[-1].startswith("sglang-backends serve: error: Unknown serve backend 'other'")
    assert [line for line in lines if str(broken) in line]
    assert "Traceback" not in served.stderr


def _zipped(source, archive):
    """*archive*, a zip of every file below *source*, named relative to it."""
    import zipfile

    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                zipped.write(path, path.relative_to(source).as_posix())
    return archive


def _egg(root, dist: str, name: str, *, zipped: bool = False):
    """A ``.egg`` (a directory, or a zip) under *root* providing backend *name*."""
    from conftest import backend_module

    module = f"{dist}_plugin".replace("-", "_")
    egg = root / f"{dist.replace('-', '_')}-1.0-py3.egg"
    info = egg / "EGG-INFO"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text(f"Metadata-Version: 1.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[sglang.serve_backends]\n{name} = {module}:factory\n")
    (egg / f"{module}.py").write_text(backend_module())
    if not zipped:
        return egg
    import shutil

    archive = _zipped(egg, root / f"{egg.name}.zip")
    shutil.rmtree(egg)
    return archive.rename(egg)


@pytest.mark.parametrize("form", ["dist-info in a zip", "zipped egg"])
def test_a_plugin_inside_a_zip_on_pythonpath_is_listed_and_served(site, tmp_path, form):
    """As importlib.metadata (and so SGLang's registry) finds it."""
    from clitools import run_cli
    from conftest import backend_module

    if form == "zipped egg":
        archive = _egg(tmp_path, "zipped-runtime", "zipped", zipped=True)
    else:
        source = tmp_path / "zip-source"
        from sglang_backends.testing import write_distribution

        write_distribution(
            source,
            "zipped-runtime",
            entry_points={"zipped": "zipped_plugin:factory"},
            modules={"zipped_plugin.py": backend_module()},
        )
        archive = _zipped(source, tmp_path / "plugins.zip")
    env = {"PYTHONPATH": os.pathsep.join([str(archive), site.environ()["PYTHONPATH"]])}
    listed = run_cli(site, "list", "-f", "value", "-c", "Name", "-c", "Distribution", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "zipped zipped-runtime" in listed.stdout.splitlines()
    served = run_cli(site, "serve", "org/model", "--model-type", "zipped", env=env)
    assert served.returncode == 0, served.stderr
    assert "'zipped' (from zipped-runtime)" in served.stderr


def test_two_egg_directories_are_two_distributions(tmp_path, monkeypatch):
    for dist, name in (("first-runtime", "first"), ("second-runtime", "second")):
        monkeypatch.syspath_prepend(str(_egg(tmp_path, dist, name)))
    found = discover()
    assert [p.distribution for p in found["first"]] == ["first-runtime"]
    assert [p.distribution for p in found["second"]] == ["second-runtime"]
    registry = ServeBackendRegistry(default_builtins())
    assert registry.get("second").distribution == "second-runtime"


def test_a_plugin_without_a_distribution_name_is_named_by_its_target_in_progress(
    tmp_path, monkeypatch, caplog
):
    """An egg whose PKG-INFO is gone has no name: progress names the plugin by its target
    while it loads and while it detects, never as a built-in.
    """
    from conftest import backend_module

    from sglang_backends import ServeRequest

    egg = _egg(tmp_path, "nameless-runtime", "nameless")
    (egg / "EGG-INFO" / "PKG-INFO").unlink()
    detector = backend_module(detect="return ServeBackendDetection.NO_MATCH")
    (egg / "nameless_runtime_plugin.py").write_text(detector)
    monkeypatch.syspath_prepend(str(egg))
    (plugin,) = discover()["nameless"]
    assert plugin.distribution is None
    assert f"Using the entry points of the distribution at {egg / 'EGG-INFO'} without a name: " in (
        caplog.text
    )
    events: list[tuple[str, str]] = []
    registry = ServeBackendRegistry(default_builtins(), enabled=["nameless"])
    registry.explain(ServeRequest("m", ()), progress=lambda *event: events.append(event))
    told = [event for event in events if "nameless" in event[1]]
    target = "'nameless' (nameless_runtime_plugin:factory)"
    assert told == [(e, target) for e in ("loading", "loaded", "detecting", "detected")], events


def test_an_egg_info_directory_is_a_distribution(site):
    """As ``setup.py develop`` leaves it: PKG-INFO, not METADATA."""
    info = site.path / "legacy_runtime.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy-runtime\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text("[sglang.serve_backends]\nlegacy = legacy:factory\n")
    (plugin,) = discover()["legacy"]
    assert (plugin.distribution, plugin.version, plugin.problem) == ("legacy-runtime", "0.9", None)


def test_a_later_copy_of_a_distribution_is_shadowed_and_kept(site, tmp_path, monkeypatch):
    """One normalized name is one distribution, the first on sys.path, as importlib.metadata."""
    from sglang_backends._core.discovery import distributions
    from sglang_backends.testing import write_distribution

    site.install("Omni_Runtime", entry_points={"first": "omni_first:factory"})
    later = tmp_path / "later"
    write_distribution(later, "omni-runtime", entry_points={"second": "omni_second:factory"})
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])
    found = discover()
    assert "first" in found and "second" not in found
    first = found["first"][0].installed
    (installed,) = [d for d in distributions() if d.location == first.location]
    assert [d.metadata["Name"] for d in installed.shadowed] == ["omni-runtime"]


def test_a_distribution_of_another_finder_is_served(monkeypatch):
    """A finder's own Distribution (as editable installs add) is read through its API alone."""
    import importlib.abc
    import importlib.metadata
    import pathlib

    from conftest import backend_module

    files = {
        "METADATA": "Metadata-Version: 2.1\nName: finder-runtime\nVersion: 3.0\n",
        "entry_points.txt": "[sglang.serve_backends]\nfound = finder_plugin:factory\n",
    }

    class FinderDistribution(importlib.metadata.Distribution):
        def read_text(self, filename):
            return files.get(filename)

        def locate_file(self, path):
            return pathlib.Path(path)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            return None  # its module is imported already

        def find_distributions(self, context=None):
            if context is None or context.name in (None, "finder-runtime"):
                yield FinderDistribution()

    module = type(sys)("finder_plugin")
    exec(backend_module(), module.__dict__)
    monkeypatch.setitem(sys.modules, "finder_plugin", module)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    (plugin,) = discover()["found"]
    assert (plugin.distribution, plugin.version) == ("finder-runtime", "3.0")
    registered = ServeBackendRegistry(default_builtins()).get("found")
    assert registered.distribution == "finder-runtime"


@pytest.mark.parametrize(
    "group", ["sglang.serve_backend", "sglang_serve_backends", "SGLang.Serve-Backends"]
)
def test_entry_points_in_a_misspelt_group_are_warned_about_once(site, registry_warnings, group):
    """No host reads them, so the plugin is silently missing: say so, with the group meant."""
    info = site.install("typo-rt", entry_points={"typo": "typo:factory"}, group=group)
    registry = ServeBackendRegistry(default_builtins())
    assert "typo" not in registry
    messages = [r.getMessage() for r in registry_warnings.records if str(info) in r.getMessage()]
    assert messages == [
        f"Ignoring the entry points of distribution typo-rt at {info} in group {group!r}, "
        "which nothing reads; did you mean 'sglang.serve_backends'?"
    ]


@pytest.mark.parametrize(
    "header",
    [
        "Metadata-Version: 2.1\nName: torch\x85x\nVersion: 1.0\n",
        "Metadata-Version: 2.1\nName: ab-runtime\nVersion: 1.0\u2028Requires-Dist: nope\n",
        "metadata-version: 2.1\nname: lc-runtime\nversion: 1.0\n",
        "Metadata-Version: 2.1\r\nName: crlf-runtime  \r\nVersion:\t3.0\r\n",
        "Metadata-Version: 2.1\nnot a header\nName: hidden-runtime\nVersion: 1.0\n",
    ],
    ids=["nel", "line-separator", "lower-case", "crlf", "header-block-ends"],
)
def test_metadata_headers_are_read_as_importlib_reads_them(site, install_backend, header):
    """Name and Version are read from the header alone, but as the email parser behind
    ``dist.metadata`` reads them: a NEL or U+2028 ends no line, names are case-blind, a
    line that is no header ends the block (then, as for any METADATA naming none, the
    directory names it). Else one distribution could pass for another, in the
    Distribution column and in advice."""
    install_backend("odd-runtime", "odd")
    (info,) = site.path.glob("odd_runtime-*.dist-info")
    (info / "METADATA").write_bytes(header.encode())
    import importlib.metadata

    dist = importlib.metadata.PathDistribution(info)
    (plugin,) = discover()["odd"]
    named = dist.metadata.get("Name")
    expected = (named, dist.version) if named else ("odd_runtime", None)
    assert (plugin.distribution, plugin.version) == expected
