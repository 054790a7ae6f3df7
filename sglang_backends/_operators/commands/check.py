"""``sglang-backends check``: load every enabled plugin in isolation and validate it."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from cliff.lister import Lister

from sglang_backends._core.discovery import PluginEntryPoint
from sglang_backends._core.findings import (
    distributions_of,
    shadowed_text,
    unmet_clause,
    unmet_text,
)
from sglang_backends._core.inventory import Inventory
from sglang_backends._core.selection import (
    PluginRecord,
    PluginStatus,
    conflict_warning,
    left_out,
    unknown_backend,
)
from sglang_backends._core.settings import Settings
from sglang_backends._operators.commands.base import (
    DEFAULT_JOBS,
    SelectionOptions,
    detail_cell,
    needs_sglang,
    positive_seconds,
)
from sglang_backends._operators.worker import Job, WorkerResult, last_line, run_loads
from sglang_backends.errors import backend_named, did_you_mean

COLUMNS = ("Name", "Origin", "Distribution", "Version", "Result", "Seconds", "Detail")
#: Results that make ``check`` exit with status 1.
FAILURES = frozenset({"error", "timeout", "crashed", "not installed"})
#: The columns that name a row's plugin and its distribution.
_SAID_BY = ("Name", "Distribution")
#: The SGLang column of a row whose plugin was not loaded.
_NOT_LOADED = "not checked: not loaded"


def _jobs(text: str) -> int:
    """An argparse type: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


class CheckBackends(SelectionOptions, Lister):
    """Load every enabled plugin, or the NAMEs given, and validate it; exit 1 if any fails.

    Each plugin is imported in its own short-lived Python process, a few at
    a time (--jobs), each bounded by --timeout: a plugin that hangs, crashes
    the interpreter or exits at import is reported, never inherited, and
    every process it started is killed. The worker runs exactly what serve
    runs (registry.get(NAME), with serve's module search path): import, call
    the factory, check it returned a ServeBackend of API version 1.

    With --contract, that process also runs the plugin-author kit's checks
    (sglang_backends.testing.assert_backend_contract): run(--help) returns
    promptly without starting a server or processes, and the detector
    answers awkward requests without raising. A breach is an error whose
    Detail says what the plugin does wrong. Where SGLang is installed it also
    checks that SGLang's own host accepts the plugin, and an SGLang column
    says so: accepted, refused (Detail says how), or not checked and why
    (SGLang is not installed, the contract broken first, not loaded).

    Result column:
      ok
          loads and honours the contract (built-ins are not loaded)
      error
          import failed, factory raised, wrong type, wrong API version,
          duplicate name or conflict with a built-in; Detail says which and
          names the distribution
      timeout
          still loading after --timeout seconds; the process tree was killed
      crashed
          the interpreter died while loading (abort, os._exit, segfault)
      skipped
          disabled by configuration or --enable/--disable; not loaded
      needs SGLang
          a built-in on a machine without SGLang (as list and show say):
          serving with it fails until SGLang is installed; not a failure
      not installed
          enabled_backends (or --enable) names a plugin no installed
          distribution provides: the service would run without it; Detail
          says where the list was set

    A plugin whose distribution has unmet requirements (Requires-Dist lines
    what is installed does not meet, as list and show give them) keeps the
    Result its load gives; its Detail ends with them, and one WARNING line
    per distribution says so on stderr. So does a distribution found more
    than once on the module search path (the first copy is the one used).

    Exit status: 0 if nothing failed, 1 if a plugin failed or an enabled one is not
    installed, 2 for bad configuration.

    A plugin distribution that installs a console script named sglang gets
    a warning naming it: that replaces SGLang's own sglang command.

    A NAME that no installed plugin provides ends the command with one line
    on stderr (with the closest name, if one is close) and exit status 2.

    Examples::

      sglang-backends check
      sglang-backends check omni --contract
      sglang-backends check --timeout 10 --jobs 2 -f json
      sglang-backends check --enable omni
    """

    command_name = "check"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--timeout",
            metavar="SECONDS",
            type=positive_seconds,
            default=30.0,
            help="seconds one plugin may take to load before it is killed (default: 30)",
        )
        parser.add_argument(
            "--jobs",
            metavar="N",
            type=_jobs,
            default=DEFAULT_JOBS,
            help="plugins loaded at once, each in its own process "
            "(default: the number of CPUs, at most 4)",
        )
        parser.add_argument(
            "--contract",
            action="store_true",
            help="also check that run(--help) returns promptly and the detector never "
            "raises, as the plugin-author kit does",
        )
        parser.add_argument(
            "names",
            metavar="NAME",
            nargs="*",
            help="check only these plugins (a name, or DIST:NAME for one provider)",
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[Sequence[str], Iterable[Sequence[Any]]]:
        settings, inventory = self.inventory(parsed_args)
        names = parsed_args.names
        chosen = _chosen(inventory, names)
        plugins = [record.plugin for record, _ in chosen]
        _warn_of_sglang_scripts(self.app.LOG, plugins)
        unmet = _foretold(self.app.LOG, plugins)
        conflicts = {plugin.name for plugin in inventory.conflicts}
        job = Job(
            action="contract" if parsed_args.contract else "load",
            # A conflict makes every registry fail; set it aside to check the rest.
            settings=Settings(
                enabled=settings.enabled, disabled=tuple(sorted({*settings.disabled, *conflicts}))
            ),
            # The kit bounds each call; a third of the worker's time leaves room to report.
            contract_timeout=parsed_args.timeout / 3,
        )
        to_load = sorted({key for record, key in chosen if record.status.usable})
        results = run_loads(job, to_load, timeout=parsed_args.timeout, concurrency=parsed_args.jobs)
        # A built-in's row: ok, or the SGLang it needs (as list and show say).
        rows: list[tuple[Any, ...]] = [
            (
                name,
                "built-in",
                None,
                None,
                needs_sglang(name) or "ok",
                0.0,
                "built-in; not loaded",
                _NOT_LOADED,
            )
            for name in inventory.builtins
            if not names or name in names
        ]
        for record, key in chosen:
            result, seconds, detail, sglang = _checked(record, results.get(key), inventory)
            clause = unmet.get(record.distribution)
            # Unless the detail ends with the clause already, as a failed load's message does.
            if clause and not detail.endswith(clause):
                detail = f"{detail}; {clause}"
            items = unmet_text(record.plugin) if clause else ""
            cell = detail_cell(detail, record.name, record.distribution, _SAID_BY, items or "")
            head = (record.name, "plugin", record.distribution, record.version)
            rows.append((*head, result, seconds, cell, sglang))
        rows += _not_installed(inventory)
        self.failed = any(row[4] in FAILURES for row in rows)
        # The SGLang column (whether SGLang's own host was asked too) comes with --contract.
        if not parsed_args.contract:
            return COLUMNS, self.safe_rows(parsed_args, [row[:-1] for row in rows])
        return (*COLUMNS, "SGLang"), self.safe_rows(parsed_args, rows)


def _checked(
    record: PluginRecord, worker: WorkerResult | None, inventory: Inventory
) -> tuple[str | None, float, str, str]:
    """Plugin *record*'s Result, Seconds, Detail and SGLang cells, from the *worker* that
    loaded it (``None``: not loaded, as disabled, where the list was set, or claiming a
    built-in name).
    """
    if worker is None and record.status is PluginStatus.DISABLED:
        return "skipped", 0.0, f"{left_out(record.name, inventory)}; not loaded", _NOT_LOADED
    if worker is None:
        return "error", 0.0, conflict_warning(record.plugin), _NOT_LOADED
    seconds = round(worker.seconds, 3)
    result = worker.result
    if result is None:
        detail = (
            f"{backend_named(record.name, record.plugin.provider, start=True)}: {worker.detail}"
        )
        if worker.failure == "crashed" and (last := last_line(worker.stderr)):
            detail += f" (last output: {last})"
        return worker.failure, seconds, detail, _NOT_LOADED
    # With --contract, a load SGLang's host was asked of or not.
    if result.error is not None:
        return "error", seconds, result.error, result.sglang or _NOT_LOADED
    return "ok", seconds, result.detail, result.sglang or "not checked"


def _foretold(log: Any, plugins: Sequence[PluginEntryPoint]) -> dict[str | None, str]:
    """Warn once per distribution of *plugins* with unmet requirements or shadowed copies;
    return the unmet requirements' clause by distribution name.
    """
    unmet: dict[str | None, str] = {}
    for plugin in distributions_of(plugins).values():
        clause = unmet_clause(plugin)
        if clause:
            unmet[plugin.distribution] = clause
            log.warning(f"Serve backend {plugin.name!r}: {clause}")
        shadowed = shadowed_text(plugin)
        if shadowed:
            log.warning(
                f"Distribution {plugin.provider} is on the module search path more than "
                f"once: {plugin.release}, found first, is the one used; later "
                f"copies, never loaded: {shadowed}"
            )
    return unmet


def _not_installed(inventory: Inventory) -> Iterator[tuple[Any, ...]]:
    """A failing row for each name ``enabled_backends`` (or ``--enable``) gives that no
    installed plugin provides, as the inventory warned: a deployment gate must not pass a
    service missing one.
    """
    where = inventory.origins.get("enabled", "the enabled list")
    for name in inventory.not_installed["enabled"]:
        detail = (
            f"enabled by {where}, but no installed distribution provides serve backend "
            f"{name!r}{did_you_mean(name, inventory.installed)}"
        )
        yield (name, "plugin", None, None, "not installed", 0.0, detail, _NOT_LOADED)


def _warn_of_sglang_scripts(log: Any, plugins: Iterable[PluginEntryPoint]) -> None:
    """Warn once per plugin distribution installing a console script named ``sglang``,
    which SGLang reserves for itself; read from ``entry_points.txt``, nothing imported.
    """
    for key, plugin in distributions_of(plugins).items():
        # SGLang's own distribution installs it, as it should.
        if key == "sglang" or plugin.installed is None:
            continue
        try:
            scripts = [
                ep
                for group in ("console_scripts", "gui_scripts")
                for ep in plugin.installed.entry_points(group)
                if ep.name == "sglang"
            ]
        except Exception:  # noqa: BLE001
            # Discovery already warned about unreadable metadata.
            continue
        if scripts:
            log.warning(
                f"Distribution {plugin.distribution_label} (serve backend {plugin.name!r}) "
                f"installs a console script named 'sglang' ({scripts[0].value}): it "
                "replaces SGLang's own 'sglang' command, and uninstalling it removes that "
                "command. SGLang reserves the executable for the sglang distribution; the "
                "plugin should install its script under another name"
            )


def _chosen(inventory: Inventory, names: Sequence[str]) -> list[tuple[PluginRecord, str]]:
    """The records *names* designate (``NAME`` or ``DIST:NAME``), all without names, each
    with the name it is loaded as: ``DIST:NAME`` where that picked its provider.

    :raises UnknownBackendError: a name that is neither a built-in's nor an installed
        plugin's, worded as serve words it, with every such name as the values.
    """
    if not names:
        return [(record, record.name) for record in inventory.records]
    chosen: dict[int, tuple[PluginRecord, str]] = {}
    for name in names:
        found = inventory.designated(name)
        if not found and name not in inventory.builtins:
            values = list(dict.fromkeys([*inventory.builtins, *sorted(inventory.installed)]))
            raise unknown_backend(name, values, inventory)
        # The first DIST:NAME that designates it stays its key.
        for record in found:
            if chosen.get(id(record), (record, record.name))[1] == record.name:
                chosen[id(record)] = (record, name)
    return list(chosen.values())
