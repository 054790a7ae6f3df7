"""``sglang-backends list``: every backend and whether it may be used; imports no plugin."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from cliff.lister import Lister

from sglang_backends.commands._base import SelectionOptions, builtin_row, plugin_row

__all__ = ["COLUMNS", "ListBackends"]

COLUMNS = ("Name", "Origin", "Distribution", "Version", "Target", "Status")


class ListBackends(SelectionOptions, Lister):
    """List every serve backend, built-in and plugin, with its status.

    Reads installed package metadata only: no plugin is imported, so this
    works even when a plugin is broken or conflicts with a built-in.

    Columns:
      Name
          the --model-type value
      Origin
          built-in or plugin
      Distribution
          the installed distribution providing it
      Version
          that distribution's version
      Target
          the entry point (module:factory), or the built-in's run function
      Status
          enabled; needs SGLang (a built-in on a machine without SGLang:
          serving with it fails until SGLang is installed; show and check
          say the same); disabled (by enabled_backends/disabled_backends or
          --enable/--disable); duplicate (several distributions register the
          name: select one as DIST:NAME); conflicts with a built-in (a plugin
          may not take a built-in or reserved name: serving fails until it is
          uninstalled or disabled)

    Examples::

      sglang-backends list
      sglang-backends list -f json
      sglang-backends list --config-file /etc/sglang-backends/sglang-backends.conf
      sglang-backends list -c Name -c Status -f value
    """

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[Sequence[str], Iterable[Sequence[Any]]]:
        _, survey = self.survey(parsed_args)
        rows = [builtin_row(name, backend) for name, backend in survey.builtins.items()]
        rows += [plugin_row(record.plugin, record.status.value) for record in survey.records]
        return COLUMNS, self.safe_rows(parsed_args, rows)
