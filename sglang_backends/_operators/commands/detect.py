"""``sglang-backends detect [MODEL] [ARGS...]``: explain automatic detection for a request."""

from __future__ import annotations

import argparse
import shlex
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cliff.lister import Lister

from sglang_backends._core.detection import AMBIGUITY_WAY_OUT, preferred_note
from sglang_backends._core.inventory import Inventory
from sglang_backends._core.names import AUTO
from sglang_backends._core.progress import InFlight, label
from sglang_backends._core.selection import PluginStatus
from sglang_backends._core.settings import Settings
from sglang_backends._operators.commands.base import (
    DEFAULT_JOBS,
    SelectionOptions,
    detail_cell,
    needs_sglang,
    option_spans,
    positive_seconds,
)
from sglang_backends._operators.worker import Job, run_isolated, run_loads
from sglang_backends._serve.argv import HELP, parse_host_options
from sglang_backends.errors import ServeBackendError

COLUMNS = ("Backend", "Distribution", "Verdict", "Seconds", "Detail")
#: The columns that name a row's backend and its distribution.
_SAID_BY = COLUMNS[:2]


#: Seconds the detecting process gets by default beyond ``load_timeout + detect_timeout``
#: (bounds detection keeps by itself): its start-up.
WORKER_MARGIN = 10.0

#: The least seconds each plugin gets when loaded alone to find why detection did not
#: finish, so that a plugin merely slower than a short --timeout is not blamed.
CULPRIT_TIMEOUT = 10.0

#: How every explanation of an unfinished detection ends, after "Disable it" or the like.
_WAY_OUT = "to detect without it, and report it to its authors."


def _stalled(underway: InFlight, *, crashed: bool) -> str | None:
    """Why detection did not finish, if what was under way tells: the plugin under way when
    the worker *crashed*, or the detectors still running; else ``None``.
    """
    loading = underway.busy["loading"]
    # At most one load among what was under way: name it all, as serve does.
    if crashed and (ended := underway.ended()) and len(loading) <= 1:
        return f"It ended {ended}. Disable the plugin at fault {_WAY_OUT}"
    busy = underway.describe()
    if busy and not loading:
        return (
            f"It was {busy}: a detector that does not return (one holding the GIL defeats "
            f"detect_timeout). Disable it {_WAY_OUT}"
        )
    return None


def _culprits(inventory: Inventory, settings: Settings, timeout: float) -> str:
    """Why detection did not finish within *timeout*: each plugin *inventory* enables
    loaded alone, under *settings*.

    Once every plugin had loaded, loading them again would find nothing wrong;
    while loads were under way, one holding the interpreter makes them all look
    stuck, so each enabled plugin is loaded alone, given ``max(timeout,
    CULPRIT_TIMEOUT)`` seconds, and blamed only if it crashes or does not load.
    """
    enabled = (r.plugin for r in inventory.records if r.status is PluginStatus.ENABLED)
    labels = {plugin.name: label(plugin.name, plugin.provider) for plugin in enabled}
    bound = max(timeout, CULPRIT_TIMEOUT)
    job = Job(action="load", settings=settings)
    loads = run_loads(job, sorted(labels), timeout=bound, concurrency=DEFAULT_JOBS)
    broken = []
    slow = []
    for name, result in loads.items():
        if result.failure == "timeout":
            broken.append(f"{labels[name]} does not load within {bound:g} s (it hangs)")
        elif result.failure is not None:
            broken.append(f"{labels[name]} crashes its interpreter ({result.detail})")
        elif result.seconds > timeout / 2:
            slow.append(f"{name!r} {result.seconds:.1f} s")
    if broken:
        return f"Loaded one by one: {'; '.join(broken)}. Disable it {_WAY_OUT}"
    if slow:
        return (
            f"No plugin hangs or crashes; loaded one by one, these are slow: {', '.join(slow)}. "
            f"Raise --timeout (now {timeout:g} s)."
        )
    return (
        f"Every plugin loads alone within {bound:g} s; raise --timeout (now {timeout:g} s), "
        "or run 'sglang-backends check --contract' to test the detectors."
    )


def _chosen(
    given: str | None, settings: Settings, inventory: Inventory
) -> tuple[str, str | None, str] | None:
    """The backend serve would use by name (``--model-type`` in the request, else the
    configured ``model_type``): its name, distribution and why; ``None`` for ``auto``.

    :raises UnknownBackendError, DisabledBackendError, BackendConflictError: as serve's.
    """
    name = given or settings.model_type
    if name == AUTO:
        return None
    where = "--model-type in the request" if given else settings.describe("model_type")
    origin = None if given else settings.set_in("model_type")
    plugin = inventory.by_name(name, set_in=origin)
    detail = f"serve uses {name!r} by name ({where}), not detection{_fails(name)}"
    return (name, None, detail) if plugin is None else (plugin.name, plugin.distribution, detail)


def _fails(name: str) -> str:
    """``, which needs SGLang (…): serve fails here`` for a built-in that cannot serve here,
    as list, show and check give its status; else empty.
    """
    status = needs_sglang(name)
    return f", which {status}: serve fails here" if status else ""


class _RequestParser(argparse.ArgumentParser):
    """A parser that takes everything after detect's own options as the request.

    It inserts ``--`` before the first argument that is not one of them, so
    ``detect --model-path X --tp 2`` needs no ``--``. Its own options found
    after that point are part of the request; the result's ``misplaced`` lists
    them (each with its values; not ``--help``, nor any after an explicit
    ``--``) and ``corrected`` is the argument list with them moved before the
    request, for the warning. Which arguments are its own options,
    :attr:`span_of` says: set once they are all added, before the request.
    """

    span_of: Callable[[str], int | None]

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        misplaced: list[list[str]] = []
        corrected: list[str] = []
        if args is not None:
            args = list(args)
            # Where the request starts.
            start = None
            # The request's own arguments.
            kept: list[str] = []
            index = 0
            # An explicit -- ends the search.
            while index < len(args) and args[index] != "--":
                span = self.span_of(args[index])
                if span is None or (start is not None and args[index] in HELP.flags):
                    if start is None:
                        start = index
                    kept.append(args[index])
                    span = 1
                elif start is not None:
                    # One of its own options, after the request's start.
                    misplaced.append(args[index : index + span])
                index += span
            if start is not None:
                own = [token for option in misplaced for token in option]
                corrected = [*args[:start], *own, *kept, *args[index:]]
                args.insert(start, "--")
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.misplaced = misplaced
        parsed.corrected = corrected
        return parsed, rest


class DetectBackend(SelectionOptions, Lister):
    """Explain which backend "serve MODEL --model-type auto" would choose, and why.

    Runs every enabled backend's detector on the request, as serve does, and
    shows each verdict and its time, then a final row with the selection.

    Verdict column:
      match
          the detector claims the request
      no_match
          the detector declines it
      unknown
          the detector cannot tell (claims nothing)
      no detector
          the backend is selectable only by name
      error
          loading the plugin or its detector failed (Detail says why)
      timeout
          the detector did not answer within detect_timeout
      selected
          final row: the one backend that matched, or, when several did,
          the first of them in preferred_backends (Detail says so and names
          the others)
      fallback
          final row: nothing matched, so llm is used (exit 0 even where
          it cannot serve, SGLang not installed: Detail says so)
      ambiguous
          final row: several matched and none of them is in
          preferred_backends; serve would refuse (exit 1)
      configured
          final row: the backend serve uses by name, without detection
          (exit 1 if it fails to load)

    Seconds column: on a backend's row, what it took, its import and
    factory (its load) and its detector; on the final row, the whole
    detection, the loads running concurrently.

    When serve would not detect (model_type set in configuration, or
    --model-type in the request), detect says so first, naming where it was
    set and, if that backend fails to load, why: the final row is that
    backend, verdict "configured", and the detectors' rows are for
    information only. A name serve would refuse
    (unknown, disabled) gets serve's message and exit status.

    The request is what you would pass to serve: a positional MODEL becomes
    --model-path MODEL, and --model-path/--model are read. Everything after
    detect's own options is the request, so put detect's options (-f,
    --config-file, ...) first: one of them after MODEL
    is taken as part of the request, with a warning giving the command with
    it moved first. Plugins are loaded in a
    separate process bounded by --timeout, so a plugin that hangs or crashes
    at import cannot hang detect.

    Examples::

      sglang-backends detect /models/sd-turbo
      sglang-backends detect -f json --model-path org/model --tp 2
      sglang-backends detect --detect-timeout 2 -- org/model --trust-remote-code
    """

    command_name = "detect"

    #: argparse's own handler: the parser below copies cliff's options with ``parents``.
    conflict_handler = "error"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        base = super().get_parser(prog_name)
        # The same options in a parser that splits off the request (argparse's ``parents``).
        parser = _RequestParser(
            prog=base.prog,
            description=base.description,
            epilog=base.epilog,
            formatter_class=base.formatter_class,
            parents=[base],
            add_help=False,
        )
        parser.add_argument(
            "--detect-timeout",
            metavar="SECONDS",
            type=positive_seconds,
            help="seconds each detector may take; overrides detect_timeout",
        )
        parser.add_argument(
            "--timeout",
            metavar="SECONDS",
            type=positive_seconds,
            help="seconds loading every plugin and detecting may take in all before detect "
            "gives up (default: load_timeout + detect_timeout + 10, so that it never cuts "
            "short a load or a detector serve would still wait for)",
        )
        # Its own options are all added: those before the request.
        parser.span_of = option_spans(parser)
        parser.add_argument(
            "request",
            metavar="REQUEST",
            nargs=argparse.REMAINDER,
            help="[MODEL] [ARGS ...]: the serve command line, a model path or hub id and "
            "serve's arguments",
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[Sequence[str], Iterable[Sequence[Any]]]:
        # The request, after the -- the parser inserts or was given.
        request = parsed_args.request
        host = parse_host_options(request[1:] if request[:1] == ["--"] else request)
        if parsed_args.misplaced:
            given = ", ".join(" ".join(option) for option in parsed_args.misplaced)
            # The global options, kept.
            before = getattr(self.app.parser, "given", [])
            command = shlex.join(["sglang-backends", *before, "detect", *parsed_args.corrected])
            self.app.LOG.warning(
                f"detect's own options after MODEL are taken as part of the request, "
                f"not as detect's: {given}. If they were meant for detect, run: {command}"
            )
        elif host.config_args:
            self.app.LOG.warning(
                "--config-file/--config-dir inside the request are ignored; "
                "give them before the request, as detect's own options"
            )

        configured, inventory = self.inventory(parsed_args, warn_model_type=False)
        # The backend chosen by name, as serve does before detecting.
        chosen = _chosen(host.model_type, configured, inventory)
        # The registry's settings, for the worker.
        settings = Settings(
            enabled=configured.enabled,
            disabled=configured.disabled,
            detect_timeout=parsed_args.detect_timeout or configured.detect_timeout,
            load_timeout=configured.load_timeout,
            preferred=configured.preferred,
        )
        timeout = parsed_args.timeout or (
            settings.load_timeout + settings.detect_timeout + WORKER_MARGIN
        )
        with tempfile.NamedTemporaryFile(prefix="sglang-backends-detect-") as trace:
            job = Job(action="explain", settings=settings, argv=host.argv, progress=trace.name)
            worker = run_isolated(job, timeout=timeout)
            underway = InFlight().replay(trace.read().decode("utf-8", "replace"))
        result = worker.result
        if chosen is not None and (result is None or result.error is not None):
            # Whether it loads is unknown: what serve uses, before why detect failed.
            self.app.LOG.warning("Configured: %s", chosen[2])
        if result is None:
            crashed = worker.failure == "crashed"
            why = _stalled(underway, crashed=crashed) or _culprits(inventory, settings, timeout)
            raise ServeBackendError(f"Automatic detection did not complete: {worker.detail}. {why}")
        if result.error is not None:
            raise ServeBackendError(result.error)

        rows: list[tuple[Any, ...]] = []
        for o in result.outcomes:
            cell = detail_cell(o.detail, o.name, o.distribution, _SAID_BY)
            rows.append((o.name, o.distribution, o.verdict, round(o.seconds, 4), cell))
        seconds = round(result.seconds, 4)
        # Chosen by name: the detectors' verdicts were for information.
        if chosen is not None:
            name, distribution, detail = chosen
            loaded = (o for o in result.outcomes if (o.name, o.distribution) == chosen[:2])
            failed = next((o for o in loaded if o.verdict == "error"), None)
            if failed is not None and not (failed.detail or "").startswith("detector"):
                detail += f"; it fails to load here, so serve fails: {failed.detail}"
                self.failed = True
            rows.append((name, distribution, "configured", seconds, detail))
            # Said once it is known whether it loads, so that this line says why serve fails.
            self.app.LOG.warning("Configured: %s", detail)
        elif result.selected is None:
            matches = ", ".join(result.matches)
            detail = (
                f"several backends matched: {matches}; serve refuses to guess. {AMBIGUITY_WAY_OUT}"
            )
            rows.append((None, None, "ambiguous", seconds, detail))
            self.app.LOG.warning("No selection: %s", detail)
            self.failed = True
        else:
            name = result.selected
            if result.fallback:
                detail = f"no backend claimed the request; llm is the fallback{_fails(name)}"
            elif len(result.matches) > 1:
                where = configured.set_in("preferred_backends")
                detail = preferred_note(name, result.matches, set_in=where)
            else:
                detail = "the only backend whose detector matched"
            # The fallback, a built-in, has no distribution, as no built-in has.
            distribution = next((o.distribution for o in result.outcomes if o.name == name), None)
            verdict = "fallback" if result.fallback else "selected"
            rows.append((name, distribution, verdict, seconds, detail))
            self.app.LOG.warning("Selected: %s (%s)", name, detail)
        return COLUMNS, self.safe_rows(parsed_args, rows)
