"""``sglang-backends show NAME``: load one backend and show its contract."""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from cliff.show import ShowOne

import sglang_backends
from sglang_backends._core import console
from sglang_backends._core.findings import shadowed_text, unmet_text
from sglang_backends._core.processes import StopSignals, stopping_what_it_starts
from sglang_backends._core.selection import unknown_backend
from sglang_backends._operators.commands.base import (
    ENABLED,
    SelectionOptions,
    builtin_row,
    plugin_row,
)
from sglang_backends._operators.commands.listing import BACKEND_COLUMNS
from sglang_backends.errors import UnknownBackendError

#: list's columns (the rows are the same), then what loading the backend tells, then
#: what the metadata foretells.
FIELDS = (
    *BACKEND_COLUMNS,
    "API version",
    "Has detector",
    "Requires model path",
    "Summary",
    "Load seconds",
    "Unmet requirements",
    "Shadowed copies",
)


class ShowBackend(SelectionOptions, ShowOne):
    """Load one serve backend, as serve would, and show what it declares.

    The plugin is imported and its factory called in this process, exactly as
    "serve --model-type NAME" would; use "check" to load plugins in isolation.
    Whatever the plugin prints while loading goes to stderr, so "-f json"
    output stays clean; whatever processes it starts are killed before show
    answers, as check kills them.

    Fields:
      Status
          enabled, or, for a built-in on a machine without SGLang, what to
          install (as list and check show it)
      API version
          the contract version the backend declares (must be 1)
      Has detector
          whether it takes part in --model-type auto
      Requires model path
          whether serve insists on --model-path
      Summary
          first line of the factory's docstring
      Load seconds
          time to import the plugin and call its factory
      Unmet requirements
          each Requires-Dist of the plugin's distribution that what is
          installed does not meet, with what is installed
          ("sglang==0.5.22 (installed: 0.5.23); torch==2.14.1 (not
          installed)"); empty when all are met (and for a built-in)
      Shadowed copies
          each later copy of the plugin's distribution on the module search
          path, with its version and path: the first copy is the one used,
          the others are never loaded; empty when there is one

    An unknown name gives one line on stderr (with the closest name, if one
    is close) and exit status 2, as bad configuration does; a disabled or
    duplicate name, or a plugin that fails to load, one line and exit status 1;
    that line ends with the distribution's unmet requirements, if any.
    A built-in (llm, diffusion) on a machine without SGLang is shown, its
    Status saying what serving with it needs, and exit status 0, as list
    and check show it.

    Examples::

      sglang-backends show omni
      sglang-backends show sglang-omni:omni -f json
      sglang-backends show diffusion -c "Has detector" -f value
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "name",
            metavar="NAME",
            help="a backend name as listed by 'sglang-backends list', or DIST:NAME to pick "
            "one provider of a duplicate name",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Sequence[str], Sequence[Any]]:
        # The settings and inventory, read and warned of once.
        settings, inventory = self.inventory(parsed_args)
        registry = sglang_backends.ServeBackendRegistry.from_settings(settings, inventory=inventory)
        started = time.perf_counter()
        # Stop signals watched, a plugin's own KeyboardInterrupt is its failed load, as in serve.
        with _output_to_stderr(), stopping_what_it_starts(adopt=True), StopSignals():
            try:
                registered = registry.get(parsed_args.name)
            except UnknownBackendError:
                # serve's values but auto, which names no backend to show
                names = inventory.available_names
                raise unknown_backend(parsed_args.name, names, inventory, selected=True) from None
            seconds = round(time.perf_counter() - started, 4)
            backend = registered.backend
            plugin = registry.plugin_of(registered)
            # Already imported by registry.get(): this is a lookup, not a second import.
            documented = backend.run if plugin is None else plugin.entry_point.load()
        if plugin is None:
            head = builtin_row(registered.name, backend)
            foretold: tuple[str | None, str | None] = (None, None)
        else:
            # registry.get() refuses any other status.
            head = plugin_row(plugin, ENABLED)
            foretold = (unmet_text(plugin), shadowed_text(plugin))
        # Its function's docstring, not partial's own.
        while isinstance(documented, functools.partial):
            documented = documented.func
        doc = (inspect.getdoc(documented) or "").strip()
        summary = doc.splitlines()[0] if doc else None
        values = (
            *head,
            backend.api_version,
            backend.detect is not None,
            backend.requires_model_path,
            summary,
            seconds,
            *foretold,
        )
        [safe] = self.safe_rows(parsed_args, [values])
        return FIELDS, safe


@contextlib.contextmanager
def _output_to_stderr() -> Iterator[None]:
    """Send what plugin code prints (``print`` or file descriptor 1) to stderr meanwhile."""
    console.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        console.flush()
        os.dup2(saved, 1)
        os.close(saved)
