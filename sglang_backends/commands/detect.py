"""``sglang-backends detect [MODEL] [ARGS...]``: explain automatic detection for a request."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from cliff.lister import Lister

from sglang_backends.commands._base import SelectionOptions
from sglang_backends.commands.check import _positive

__all__ = ["COLUMNS", "DetectBackend"]

COLUMNS = ("Backend", "Distribution", "Verdict", "Seconds", "Detail")


def _split_request(parser: argparse.ArgumentParser, args: Sequence[str]) -> list[str]:
    """Insert ``--`` before the first argument that is not one of detect's own options.

    Everything from there on is the serve command line, options included,
    so ``detect --model-path X --tp 2`` needs no ``--``.
    """
    args = list(args)
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            return args
        name, sep, _ = token.partition("=")
        action = parser._option_string_actions.get(name) if token.startswith("-") else None
        if action is None:
            return [*args[:index], "--", *args[index:]]
        if sep:
            index += 1
        elif action.nargs in (None, "?"):
            index += 2
        elif isinstance(action.nargs, int):
            index += 1 + action.nargs
        else:
            index += 1
    return args


def _culprits(job: dict[str, Any], records: Iterable[Any], timeout: float) -> str:
    """Load the enabled plugins one per process to name those that hang or crash."""
    from sglang_backends.commands._isolation import default_jobs, run_many
    from sglang_backends.selection import PluginStatus

    names = sorted({r.plugin.name for r in records if r.status is PluginStatus.ENABLED})
    jobs = [{**job, "action": "load", "name": name} for name in names]
    results = run_many(jobs, timeout=min(timeout, 10.0), concurrency=default_jobs())
    found = [
        f"{name!r} ({result.failure}: {result.detail})"
        for name, result in zip(names, results, strict=True)
        if result.failure is not None
    ]
    if not found:
        return "Run 'sglang-backends check' to find the plugin at fault."
    return f"Loaded one by one, these plugins hang or crash: {'; '.join(found)}."


class _RequestParser(argparse.ArgumentParser):
    """A parser that takes everything after detect's own options as the request."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if args is not None:
            args = _split_request(self, args)
        return super().parse_known_args(args, namespace)


class DetectBackend(SelectionOptions, Lister):
    """Explain which backend "serve MODEL --model-type auto" would choose, and why.

    Runs every enabled backend's detector on the request, as serve does, and
    shows each verdict and its time, then a final row with the selection:

      match        the detector claims the request
      no_match     the detector declines it
      unknown      the detector cannot tell (claims nothing)
      no detector  the backend is selectable only by name
      error        loading the plugin or its detector failed (Detail says why)
      timeout      the detector did not answer within detect_timeout
      selected     final row: the one backend that matched
      fallback     final row: nothing matched, so llm is used
      ambiguous    final row: several matched; serve would refuse (exit 1)

    The request is what you would pass to serve: a positional MODEL becomes
    --model-path MODEL, and --model-path/--model are read; --model-type is
    ignored. Everything after detect's own options is the request, so put
    detect's options (-f, --config-file, ...) first. Plugins are loaded in a
    separate process bounded by --timeout, so a plugin that hangs or crashes
    at import cannot hang detect.

    Examples:
      sglang-backends detect /models/sd-turbo
      sglang-backends detect -f json --model-path org/model --tp 2
      sglang-backends detect --detect-timeout 2 -- org/model --trust-remote-code
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.__class__ = type("DetectParser", (_RequestParser, type(parser)), {})
        parser.add_argument(
            "--detect-timeout",
            metavar="SECONDS",
            type=_positive,
            help="seconds each detector may take; overrides detect_timeout",
        )
        parser.add_argument(
            "--timeout",
            metavar="SECONDS",
            type=_positive,
            default=60.0,
            help="seconds loading every plugin and detecting may take in all before detect "
            "gives up (default: 60)",
        )
        parser.add_argument(
            "request",
            metavar="[MODEL] [ARGS ...]",
            nargs=argparse.REMAINDER,
            help="the serve command line: a model path or hub id and serve's arguments",
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[Sequence[str], Iterable[Sequence[Any]]]:
        import dataclasses

        from sglang_backends.commands._isolation import run_isolated
        from sglang_backends.dispatch import AUTO, normalize, parse_host_options
        from sglang_backends.errors import ServeBackendError

        tokens = list(parsed_args.request)
        if tokens and tokens[0] == "--":
            tokens = tokens[1:]
        host = parse_host_options(tokens)
        request = normalize(host.argv)
        if host.model_type is not None and host.model_type != AUTO:
            self.app.LOG.warning(
                "detect explains automatic detection; ignoring --model-type %s", host.model_type
            )
        if host.config_files or host.config_dirs:
            self.app.LOG.warning(
                "--config-file/--config-dir inside the request are ignored; "
                "give them before the request, as detect's own options"
            )

        survey = self.survey(parsed_args)
        settings = survey.selection.settings
        if parsed_args.detect_timeout is not None:
            settings = dataclasses.replace(settings, detect_timeout=parsed_args.detect_timeout)

        job = {
            "action": "explain",
            "argv": list(request.argv),
            "model_path": request.model_path,
            "positional": request.model_path_is_positional,
            "enabled": None if settings.enabled is None else list(settings.enabled),
            "disabled": list(settings.disabled),
            "detect_timeout": settings.detect_timeout,
            "load_timeout": settings.load_timeout,
        }
        worker = run_isolated(job, timeout=parsed_args.timeout)
        if worker.failure is not None:
            raise ServeBackendError(
                f"Automatic detection did not complete: {worker.detail}. "
                f"{_culprits(job, survey.records, parsed_args.timeout)}"
            )
        result = worker.result or {}
        if not result.get("ok"):
            raise ServeBackendError(str(result.get("error")))

        rows: list[tuple[Any, ...]] = [
            (o["name"], o["distribution"], o["verdict"], round(o["seconds"], 4), o["detail"])
            for o in result["outcomes"]
        ]
        seconds = round(result["seconds"], 4)
        if result["selected"] is None:
            matches = ", ".join(result["matches"])
            detail = (
                f"several backends matched: {matches}; serve refuses to guess. "
                "Select one with --model-type BACKEND"
            )
            rows.append((None, None, "ambiguous", seconds, detail))
            self.app.LOG.warning("No selection: %s", detail)
            self.failed = True
        elif result["fallback"]:
            detail = "no backend claimed the request; llm is the fallback"
            rows.append((result["selected"], None, "fallback", seconds, detail))
            self.app.LOG.warning("Selected: %s (%s)", result["selected"], detail)
        else:
            detail = "the only backend whose detector matched"
            selected = next(o for o in result["outcomes"] if o["name"] == result["selected"])
            rows.append((result["selected"], selected["distribution"], "selected", seconds, detail))
            self.app.LOG.warning("Selected: %s (%s)", result["selected"], detail)
        return COLUMNS, rows
