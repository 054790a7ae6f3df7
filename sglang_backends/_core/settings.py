"""The selection settings every entry point shares, as plain values.

Without configuration (:func:`configured`), ``serve`` and the operator commands use
these defaults without importing oslo.config; otherwise :mod:`sglang_backends.config`
reads every source. No :mod:`dataclasses`, no contract: the general help reads this.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

#: oslo.config's environment form for the ``[serve_backends]`` group.
ENVIRONMENT_PREFIX = "OS_SERVE_BACKENDS__"

#: Seconds a detector may take before it counts as inconclusive (it may ask a model hub).
DEFAULT_DETECT_TIMEOUT = 10.0

#: Seconds a candidate's import and factory may take: 5-10x a cold torch-based import.
DEFAULT_LOAD_TIMEOUT = 300.0

#: The longest timeout: 1e9 s, or a quarter of :data:`threading.TIMEOUT_MAX` (sums still wait).
MAX_TIMEOUT = min(1e9, threading.TIMEOUT_MAX / 4)

#: The shortest detect or load timeout: a millisecond (0 would end every detection at once).
MIN_TIMEOUT = 0.001

#: The deprecated name of ``OS_SERVE_BACKENDS__STOP_TIMEOUT``, read with a warning.
STOP_TIMEOUT_ENV = "SGLANG_BACKENDS_STOP_TIMEOUT"


class Settings(NamedTuple):
    """The ``[serve_backends]`` options (``enabled`` ``None`` allows all) and where they came
    from: ``source`` (for messages), ``located`` (``(option, where)`` for each option
    configuration set; ``None`` when none was read) and ``flag_origins`` (the lists a flag set,
    ``("enabled", "--enable on the command line")`` pairs)."""

    model_type: str = "auto"
    enabled: tuple[str, ...] | None = None
    disabled: tuple[str, ...] = ()
    detect_timeout: float = DEFAULT_DETECT_TIMEOUT
    load_timeout: float = DEFAULT_LOAD_TIMEOUT
    #: Seconds ``serve``'s processes get between SIGTERM and SIGKILL.
    stop_timeout: float = 5.0
    preferred: tuple[str, ...] = ()
    source: str = "defaults"
    located: tuple[tuple[str, str], ...] | None = None
    flag_origins: tuple[tuple[str, str], ...] = ()

    def set_in(self, option: str) -> str | None:
        """Where *option* was set; ``None`` at its default or when no configuration was read."""
        return dict(self.located or ()).get(option)

    def describe(self, option: str) -> str:
        """``[serve_backends] OPTION, set in WHERE`` (or ``(the default)``), for messages."""
        where = self.set_in(option)
        suffix = " (the default)" if where is None else f", set in {where}"
        return f"[serve_backends] {option}{suffix}"

    def list_origins(self) -> dict[str, str]:
        """Where the ``"enabled"``, ``"disabled"`` and ``"preferred"`` lists were set (by a flag,
        or configuration when any was read), for warnings about their names."""
        lists = () if self.located is None else ("enabled", "disabled", "preferred")
        return {x: self.describe(f"{x}_backends") for x in lists} | dict(self.flag_origins)


def configured(config_args: Sequence[str]) -> bool:
    """Whether configuration is in use: ``--config-file``/``--config-dir`` *config_args*,
    an :func:`environment_variables` one (a near miss too, to warn) or :data:`STOP_TIMEOUT_ENV`.
    """
    return bool(config_args or environment_variables()) or STOP_TIMEOUT_ENV in os.environ


def environment_variables() -> list[str]:
    """The ``OS_SERVE_BACKEND*`` environment variables set, sorted: ours and near misses.

    ``OS_SERVE_BACKEND``, not the full :data:`ENVIRONMENT_PREFIX`: ``OS_SERVE_BACKEND__X``
    is a slip too, which configuration warns of.
    """
    return sorted(key for key in os.environ if key.startswith("OS_SERVE_BACKEND"))


def seconds(value: str | float, *, least: float = MIN_TIMEOUT) -> float:
    """*value* (a number or its text) as a timeout, from *least* to :data:`MAX_TIMEOUT` seconds.

    The one rule for every timeout, whichever way it is given: the registry's arguments,
    a command's flags and the typed configuration options all call this.

    :raises ValueError: not a number (NaN included) or out of range; the message states the rule.
    """
    # A bool is no number of seconds, nor are bytes, which float() would read.
    try:
        number = math.nan if isinstance(value, (bool, bytes)) else float(value)
    # None from an empty value; an int past floats.
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    # NaN compares false.
    if not least <= number <= MAX_TIMEOUT:
        raise ValueError(f"must be a number of seconds from {least:g} to {MAX_TIMEOUT:g}")
    return number
