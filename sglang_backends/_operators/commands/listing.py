"""``sglang-backends list``: every backend and whether it may be used; imports no plugin."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from cliff.lister import Lister

from sglang_backends._core.discovery import PluginEntryPoint
from sglang_backends._core.findings import NEEDS_SGLANG, general_plugins, unmet_text
from sglang_backends._operators.commands.base import Cell, SelectionOptions, builtin_row, plugin_row
from sglang_backends._sglang.installed import install_hint, sglang_installed

#: What every backend row says of it (``show`` gives the same fields first).
BACKEND_COLUMNS = ("Name", "Origin", "Distribution", "Version", "Target", "Status")
COLUMNS = (*BACKEND_COLUMNS, "Requirements")


class ListBackends(SelectionOptions, Lister):
    """List every serve backend, built-in and plugin, with its status.

    Reads installed package metadata only: no plugin is imported, so this
    works even when a plugin is broken or conflicts with a built-in.

    Columns:
      Name
          the --model-type value
      Origin
          built-in, plugin, or general: one of SGLang's general plugins
          (entry-point group sglang.srt.plugins), which SGLang runs before
          every serve; it is not a backend, so show and check do not take it
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
          uninstalled or disabled). A general plugin's: runs before serve;
          not in SGLANG_PLUGINS (that allow-list leaves it out); skipped
          (its distribution provides a platform SGLANG_PLATFORM did not
          pick); needs SGLang (nothing runs it without SGLang)
      Requirements
          met, or unmet: each Requires-Dist of the distribution that what is
          installed does not meet, with the version installed (markers for
          this interpreter; extras' requirements skipped); empty when its
          metadata is unreadable

    A plugin claiming a built-in name gets a warning saying how to
    resolve it, as the general help gives it.

    Examples::

      sglang-backends list
      sglang-backends list -f json
      sglang-backends list --config-file /etc/sglang-backends/sglang-backends.conf
      sglang-backends list -c Name -c Status -f value
    """

    command_name = "list"

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[Sequence[str], Iterable[Sequence[Any]]]:
        # A conflict is a status here, not an error: the inventory warns of it.
        _, inventory = self.inventory(parsed_args, warn_conflicts=True)
        general = general_plugins(inventory.distributions, sglang=sglang_installed())
        rows = [(*builtin_row(name, b), None) for name, b in inventory.builtins.items()]
        rows += [
            (*plugin_row(r.plugin, r.status.value), _requirements(r.plugin))
            for r in inventory.records
        ]
        # What SGLang needs installed, as llm does: beside a fork, not pip install sglang.
        needs = f"{NEEDS_SGLANG} ({install_hint('llm')})"
        rows += [
            (
                *plugin_row(g.plugin, needs if g.status == NEEDS_SGLANG else g.status, "general"),
                _requirements(g.plugin),
            )
            for g in general
        ]
        return COLUMNS, self.safe_rows(parsed_args, rows)


def _requirements(plugin: PluginEntryPoint) -> Cell | str | None:
    """How ``list`` shows *plugin*'s distribution's requirements (:func:`~sglang_backends.
    _core.findings.unmet_text`, read once per distribution): ``met``, ``unmet: …``, or
    nothing when its metadata could not be read or its distribution is unknown.
    """
    unmet = unmet_text(plugin) if plugin.distribution else None
    if unmet is None:
        return None
    return Cell(f"unmet: {unmet}", items=unmet) if unmet else "met"
