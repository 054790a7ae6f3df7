"""The warnings the guides quote are what the program prints; the README only points to them.

Each quoted configuration warning (``Ignoring ...``, a list or
``model_type`` serve would refuse, a check of an unknown name)
is reproduced: the same slip is given to the real console script, with the
plugins the line names installed, and its warning, with the test's file
path replaced by the quoted one, must be the quoted line, option and
plugin lists included.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from clitools import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("doc/source/user/operators.rst", "doc/source/install.rst")

_OPTION = re.compile(
    r"Ignoring unknown option '(?P<name>[^']+)' in \[serve_backends\] of (?P<path>\S+);"
)
_GROUP = re.compile(r"Ignoring unknown group \[(?P<name>[^\]]+)\] in (?P<path>\S+);")
_VARIABLE = re.compile(r"Ignoring unknown environment variable (?P<name>OS_SERVE_BACKEND\w*)")


def _quoted(*starts: str) -> list[tuple[str, str]]:
    """Every quoted line starting with one of *starts*, with the document it is in."""
    lines = []
    for document in DOCUMENTS:
        for line in (ROOT / document).read_text(encoding="utf-8").splitlines():
            if line.strip().startswith(starts or ("Ignoring unknown",)):
                lines.append((document, line.strip()))
    return lines


def test_the_documents_quote_each_kind_of_slip():
    kinds = {
        kind
        for _, line in _quoted()
        for kind, pattern in (("option", _OPTION), ("group", _GROUP), ("variable", _VARIABLE))
        if pattern.match(line)
    }
    assert kinds == {"option", "group", "variable"}


@pytest.mark.parametrize(("document", "line"), _quoted(), ids=lambda value: value[:40])
def test_a_quoted_warning_is_what_the_program_prints(site, tmp_path, document, line):
    conf = tmp_path / "quoted.conf"
    env: dict[str, str] = {}
    quoted_path = None
    if match := _OPTION.match(line):
        conf.write_text(f"[serve_backends]\n{match['name']} = x\n")
        quoted_path = match["path"]
    elif match := _GROUP.match(line):
        conf.write_text(f"[{match['name']}]\nx = 1\n")
        quoted_path = match["path"]
    elif match := _VARIABLE.match(line):
        conf.write_text("[serve_backends]\n")
        env[match["name"]] = "x"
    else:
        pytest.fail(f"{document} quotes a warning this test cannot reproduce: {line}")
    result = run_cli(site, "list", "--config-file", str(conf), env=env)
    assert result.returncode == 0, result.stderr
    printed = [p for p in result.stderr.splitlines() if p.startswith("Ignoring unknown")]
    if quoted_path is not None:
        printed = [p.replace(str(conf), quoted_path) for p in printed]
    assert printed == [line], document


def test_ci_runs_the_readme_test_command():
    """.ci/run runs the tox environments the README's test command names, no more, no less."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [command] = re.findall(r"^pip install tox && tox -e (\S+)$", readme, re.M)
    [ran] = re.findall(r"^python3 -m tox -e (\S+)$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert ran == command
    install = (ROOT / "doc" / "source" / "install.rst").read_text(encoding="utf-8")
    assert f"pip install tox && tox -e {command}" in install


GOOD = """
from sglang_backends import ServeBackend

def factory():
    return ServeBackend(api_version=1, run=lambda request: None)
"""

_NOT_INSTALLED = re.compile(
    r"Serve backend '(?P<name>[^']+)' in the (?P<list>enabled|disabled|preferred) list "
    r"is not installed"
    r".* Installed plugins: (?P<plugins>[^(]+) \(check \[serve_backends\] \w+, set in "
    r"(?P<path>\S+)\)$"
)
_MODEL_TYPE = re.compile(
    r"model_type '(?P<name>[^']+)' \(\[serve_backends\] model_type, set in (?P<path>\S+)\) "
    r"would make serve fail: Unknown serve backend .* Available values: auto, llm, diffusion, "
    r"(?P<plugins>[^.]+)\.$"
)
_CHECKED = re.compile(
    r"Unknown serve backend '(?P<name>[^']+)'.* Available values: llm, diffusion, "
    r"(?P<plugins>[^.]+)\.$"
)


@pytest.mark.parametrize(
    ("document", "line"),
    [
        (document, line)
        for document, line in _quoted("Serve backend '", "model_type '", "Unknown serve backend")
        if "Serve backend '" not in line or "list is not installed" in line
    ],
    ids=lambda value: value[:40],
)
def test_a_quoted_name_warning_is_what_the_program_prints(
    site, tmp_path, preinstalled, document, line
):
    conf = tmp_path / "quoted.conf"
    quoted_path = None
    if match := _NOT_INSTALLED.match(line):
        option = f"{match['list']}_backends"
        conf.write_text(f"[serve_backends]\n{option} = {match['name']}\n")
        args, quoted_path = ["list", "--config-file", str(conf)], match["path"]
    elif match := _MODEL_TYPE.match(line):
        conf.write_text(f"[serve_backends]\nmodel_type = {match['name']}\n")
        args, quoted_path = ["list", "--config-file", str(conf)], match["path"]
    elif match := _CHECKED.match(line):
        args = ["check", match["name"]]
    else:
        pytest.fail(f"{document} quotes a warning this test cannot reproduce: {line}")
    plugins = [name.strip() for name in match["plugins"].split(",")]
    if not set(preinstalled) <= set(plugins):
        pytest.skip(f"this environment has other plugins installed: {preinstalled}")
    for name in sorted(set(plugins) - set(preinstalled)):
        site.install(
            f"{name}-runtime",
            entry_points={name: f"{name}_plugin:factory"},
            modules={f"{name}_plugin.py": GOOD},
        )
    result = run_cli(site, *args)
    printed = [p for p in result.stderr.splitlines() if f"'{match['name']}'" in p]
    if quoted_path is not None:
        printed = [p.replace(str(conf), quoted_path) for p in printed]
    assert printed == [line], document


@pytest.mark.parametrize("document", ["doc/source/user/operators.rst"])
def test_the_sample_configuration_sets_every_option(document):
    """The sample [serve_backends] file of the operator guide names every option, once."""
    from sglang_backends.config import list_opts

    [(_, opts)] = list_opts()

    text = (ROOT / document).read_text(encoding="utf-8")
    sample = text.split("[serve_backends]\n", 1)[1].split("```", 1)[0].split("\n\n.. ", 1)[0]
    names = re.findall(r"^\s*([a-z_]+) = ", sample, re.M)
    assert names == [opt.dest for opt in opts]


@pytest.mark.parametrize("document", ["doc/source/user/operators.rst"])
def test_the_quoted_tables_have_the_commands_columns(document):
    """Every full ``list`` table and ``show`` table quoted has the command's columns or fields."""
    from sglang_backends._operators.commands.listing import COLUMNS
    from sglang_backends._operators.commands.show import FIELDS

    text = (ROOT / document).read_text(encoding="utf-8")
    headers = re.findall(r"^\s*\| Name +\| Origin .*\|$", text, re.M)
    assert headers
    for header in headers:
        columns = tuple(cell.strip() for cell in header.strip().strip("|").split("|"))
        if "Target" in columns:  # list's (check's table has Result instead)
            assert columns == COLUMNS
    for table in re.findall(r"\| Field +\| Value +\|\n(?:.*\n)((?:\s*\|.*\|\n)+)", text):
        fields = [row.strip().strip("|").split("|")[0].strip() for row in table.splitlines()]
        fields = [field for field in fields if not field.startswith("+")]
        if "Load seconds" in fields:  # a full table, not one with -c
            assert tuple(fields) == FIELDS


#: What the README claims, and the benchmark table's cell behind each claim.
README_FIGURES = {
    "0.008×": "0.008",  # noqa: RUF001 - the README's multiplication sign, quoted
    "144 ms": "144",
    "18.4 s": "18375",
    "546 ms": "546",
    "4,034 ms": "4034",
}


def test_the_readme_is_a_landing_page():
    """At most 150 lines; its tables, errors and benchmarks live in doc/, where its links lead."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert not re.findall(r"^\s*\|.*\|\s*$", readme, re.M), "a table: it belongs in doc/"
    assert not re.findall(r"^.*(?:error|warning): .*$", readme, re.M | re.I), "a message"
    links = [link for link in re.findall(r"\]\(([^)]+)\)", readme) if "://" not in link]
    assert {"doc/source/user/operators.rst", "doc/source/user/plugins.rst"} <= set(links)
    assert [link for link in links if not (ROOT / link).is_file()] == []
    benchmarks = (ROOT / "doc" / "source" / "benchmarks.rst").read_text(encoding="utf-8")
    for claim, cell in README_FIGURES.items():
        assert claim in readme
        assert re.search(rf"^\s*- {re.escape(cell)}$", benchmarks, re.M), claim


def test_the_readme_says_what_serve_shares_with_sglang_serve_and_what_not(site):
    """Identical: arguments, routing, targeted help, general plugins; not: the general help."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    landing = readme.split("## Two commands", 1)[0]
    for same in ("**Arguments:**", "**Routing:**", "**Targeted help:**", "**General plugins:**"):
        assert same in landing
    assert "deliberately different: the **general help**" in landing
    assert "exactly as `sglang serve`" not in re.sub(r"\s+", " ", landing)
    # "about 30 lines", with the built-ins and the example installed
    printed = run_cli(site, "serve", "--help", env={"COLUMNS": "80"}).stdout
    assert abs(len(printed.splitlines()) - 30) <= 5, printed


def test_ci_runs_every_declared_python():
    """Each Python setup.cfg declares has a tox environment; the README's command runs them."""
    import configparser

    setup = (ROOT / "setup.cfg").read_text(encoding="utf-8")
    declared = {f"py3{minor}" for minor in re.findall(r"Python :: 3\.(\d+)$", setup, re.M)}
    assert declared == {"py310", "py311", "py312", "py313"}
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    assert tox["tox"]["skip_missing_interpreters"].strip() == "true"
    defined = set()
    for section in tox.sections():
        if match := re.fullmatch(r"testenv:py3\{([\d,]+)\}", section):
            defined |= {f"py3{minor}" for minor in match[1].split(",")}
    assert declared <= defined
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [command] = re.findall(r"^pip install tox && tox -e (\S+)$", readme, re.M)
    envs = command.split(",")
    # py3 runs the whole suite under CI's python3 (3.11); the others each run FOCUSED.
    assert "py3" in envs
    assert declared - set(envs) == {"py311"}
    assert "PYENV_VERSION" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_omni_in_the_documents_is_the_real_sglang_omni():
    """sglang-omni 0.1.9 has no detector: no example detects it, or gives it another source."""
    documents = [ROOT / "README.md", *sorted((ROOT / "doc" / "source").rglob("*.rst"))]
    documents += sorted((ROOT / "sglang_backends" / "commands").glob("*.py"))  # the helps
    claims = ("has a detector", "automatic detection", "detector matched", "matched:", "Selected")
    wrong = []
    for document in documents:
        for line in document.read_text(encoding="utf-8").splitlines():
            if re.search(r"\bomni\b", line) and (
                "omni-runtime" in line or any(claim in line for claim in claims)
            ):
                wrong.append(f"{document.relative_to(ROOT)}: {line.strip()}")
            for version in re.findall(r"sglang-omni (\d[\w.]*)", line):
                if version != "0.1.9":
                    wrong.append(f"{document.relative_to(ROOT)}: {line.strip()}")
    assert wrong == []


def test_no_quoted_table_cell_is_longer_than_a_table_prints_one():
    """A table shortens a cell to :data:`MAX_CELL` characters; a quoted one shows none longer."""
    from sglang_backends._operators.commands.base import MAX_CELL

    guide = (ROOT / "doc/source/user/operators.rst").read_text(encoding="utf-8")
    rows = re.findall(r"^ +\|.*\|$", guide, re.M)
    cells = [cell.strip() for row in rows for cell in row.strip().strip("|").split(" | ")]
    assert cells
    assert [cell for cell in cells if len(cell) > MAX_CELL] == []
