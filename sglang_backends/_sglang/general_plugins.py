"""SGLang's general (hardware and hook) plugins: run once per process, before a backend.

They are found from package metadata; SGLang, which loads them, is imported only
when one would load, by the rules the commands show
(:func:`sglang_backends._core.findings.general_plugins`: ``SGLANG_PLUGINS`` and
``SGLANG_PLATFORM``, as SGLang filters them).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from sglang_backends._core.discovery import InstalledDistribution, distributions
from sglang_backends._core.findings import RUNS, general_plugins
from sglang_backends._core.names import GENERAL_PLUGINS_GROUP
from sglang_backends._sglang.installed import import_sglang, sglang_installed
from sglang_backends.errors import BackendLoadError, describe

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
_done = False


def run_general_plugins(installed: Iterable[InstalledDistribution] | None = None) -> bool:
    """Run SGLang's general plugins once per process, unless none would load; then log
    one line naming them (``NAME (DIST)``), the seconds they took and how to skip them.

    :param installed: the distributions to look for them in (a survey's), by default all.
    :returns: whether SGLang's loader ran in this call.
    :raises BackendLoadError: SGLang's loader raised.
    """
    global _done
    with _lock:
        if _done:
            return False
        _done = True
        found = general_plugins(distributions() if installed is None else installed, sglang=True)
        running = [general.plugin for general in found if general.status == RUNS]
        if not running:
            LOG.debug("No SGLang general plugin to load")
            return False
        if not sglang_installed():
            LOG.debug("General plugins are installed, but SGLang, which loads them, is not")
            return False
        started = time.perf_counter()
        # Before 0.5.12 the module does not exist; anything else is a fault.
        plugins = import_sglang(
            "sglang.srt.plugins",
            "SGLang's general plugins were not loaded: %s",
            errors=(ImportError,),
        )
        if plugins is None:
            return False
        load = getattr(plugins, "load_plugins", None)
        if not callable(load):
            LOG.debug("This SGLang release has no sglang.srt.plugins.load_plugins")
            return False
        try:
            load()
        except Exception as exc:
            failed = f"SGLang's general plugins ({GENERAL_PLUGINS_GROUP}) failed to load"
            raise BackendLoadError(f"{failed}: {describe(exc)}") from exc
        # They can take seconds (smg-grpc-servicer's: 14 s): say whose, and how to skip them.
        shown = ", ".join(f"{plugin.name} ({plugin.provider})" for plugin in running)
        LOG.info(
            "Ran SGLang's general plugins in %.2f s: %s; SGLANG_PLUGINS=none skips them",
            time.perf_counter() - started,
            shown,
        )
        return True
