"""``serve``'s way from a request to a running backend: choose, load, check, launch, run.

Imported once a request needs a backend (not for the general help): the
registry and the contract come with it; the supervision stack only to serve.
On Linux the backend runs in a supervised process
(:mod:`sglang_backends._serve.supervise.supervisor`); elsewhere here, and
every descendant is stopped after it.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
from typing import TYPE_CHECKING

from sglang_backends import errors
from sglang_backends._core import console, processes
from sglang_backends._core.detection import (
    MAX_WORKERS,
    DetectionReport,
    preferred_note,
    rounds,
    what_happened,
)
from sglang_backends._core.names import AUTO, FALLBACK_BACKEND, PROG
from sglang_backends._core.selection import not_asked
from sglang_backends._core.settings import Settings
from sglang_backends._serve.argv import ServeArguments, hoisted, request_fields
from sglang_backends._serve.main import guarded
from sglang_backends._sglang.general_plugins import run_general_plugins
from sglang_backends._sglang.installed import sglang_installed
from sglang_backends.contract import RegisteredServeBackend, ServeRequest
from sglang_backends.registry import Progress, ServeBackendRegistry

if TYPE_CHECKING:
    from sglang_backends._serve.supervise.backend import Channel

LOG = logging.getLogger(__name__)

#: Seconds detection may take beyond ``load_timeout + detect_timeout`` before it is ended.
DETECTION_GRACE = 2.0


def _get(
    registry: ServeBackendRegistry, settings: Settings, progress: Progress | None = None
) -> RegisteredServeBackend:
    """``registry.get(settings.model_type)``, its load told to *progress*; an unknown or
    disabled name says where configuration set it.
    """
    try:
        return registry.get(settings.model_type, progress=progress)
    except (errors.UnknownBackendError, errors.DisabledBackendError) as exc:
        raise errors.set_in_configuration(exc, settings.set_in("model_type")) from None


def _describe(registry: ServeBackendRegistry, registered: RegisteredServeBackend) -> str:
    """``'name' (from DIST)`` or ``(built-in)``, escaped (the supervisor prints it)."""
    plugin = registry.plugin_of(registered)
    if plugin is None:
        where = "built-in"
    elif plugin.distribution_label:
        where = f"from {plugin.distribution_label}"
    else:
        where = "from an entry point without distribution metadata"
    return str(console.printable(f"{registered.name!r} ({where})"))


def _run(description: str, registered: RegisteredServeBackend, request: ServeRequest) -> int | None:
    """Call ``run()``: ``None`` once it returns, or the exit status its ``SystemExit``
    or a stop signal asks for; anything else it raises is its failure.
    """
    try:
        registered.backend.run(request)
    except SystemExit as exc:
        return processes.exit_status(exc)
    except BaseException as exc:
        # Any failure of run() is reported, but not the user's Ctrl+C.
        if isinstance(exc, KeyboardInterrupt) and processes.from_signal(exc):
            return 128 + signal.SIGINT
        cause = errors.describe_raised(exc, "run()")
        raise errors.ServeBackendError(f"serve backend {description} failed: {cause}") from exc
    return None


def _launch_here(
    description: str, registered: RegisteredServeBackend, request: ServeRequest, timeout: float
) -> int:
    """Run the backend in this process, then stop every descendant (not Linux)."""
    # psutil, which is never imported in serve's own process on Linux.
    from sglang_backends._core import tree

    tree.become_subreaper()
    # A forced stop (second signal, expired deadline) kills at once: no grace period.
    guard = processes.StopSignals(
        on_signal=processes.log_received,
        timeout=2 * timeout,
        on_force=lambda: tree.stop_tree(tree.descendants, 0),
    )
    status = 0
    failure: errors.ServeBackendError | None = None
    with guard:
        try:
            try:
                status = _run(description, registered, request) or 0
            finally:
                # From here a first signal is only recorded; a second one, or
                # a first one caught in this very window, still ends in cleanup.
                guard.armed = False
        except (KeyboardInterrupt, SystemExit):
            # A stop signal unwound after run(): guard.signum says which.
            pass
        except errors.ServeBackendError as exc:
            failure = exc
        processes.log_swept(tree.stop_tree(tree.descendants, timeout))
    if guard.signum is not None:
        processes.log_stopped(description, guard.signum)
        return 128 + guard.signum
    if failure is not None:
        raise failure
    return status


def _backend(
    host: ServeArguments, settings: Settings, request: ServeRequest, channel: Channel | None = None
) -> int:
    """Choose and load the backend, check the request, then run it: in this process, the
    backend process when *channel* leads to the supervisor.

    Hints follow two slips: serve's options after the model (status 2), and
    the ``llm`` fallback without SGLang.
    """
    # The registry refuses a conflict as upstream's does: before SGLang's hardware and hook
    # plugins run, which it finds in the same distributions.
    registry = ServeBackendRegistry.from_settings(settings)
    run_general_plugins(registry.inventory.distributions)
    detection: DetectionReport | None = None
    why = ""
    progress = channel.progress if channel else None
    if settings.model_type == AUTO:
        if channel is not None:
            # The threads bounding each load and detector need the GIL; the
            # supervisor, another process, keeps the bound whatever a plugin does.
            # Plugins past MAX_WORKERS that all hang are loaded and asked in rounds.
            count = len(registry.available_names) - 1
            times = rounds(count)
            each = f"load_timeout {registry.load_timeout:g} s + detect_timeout "
            each += f"{registry.detect_timeout:g} s"
            if times > 1:
                each = f"({each}) x {times} for {count} plugins, {MAX_WORKERS} at a time"
            bound = times * (registry.load_timeout + registry.detect_timeout)
            channel.deadline(bound + DETECTION_GRACE, f"{each} + {DETECTION_GRACE:g} s")
        detection = registry.explain(request, progress=progress)
        # As auto_detect() does.
        registered = registry.get(detection.choice())
        chosen = "Selected serve backend %s by automatic detection%s"
        if detection.preferred:
            where = settings.set_in("preferred_backends")
            why = f" ({preferred_note(registered.name, detection.matches, set_in=where)})"
    else:
        registered = _get(registry, settings, progress)
        chosen = "Using serve backend %s%s"
        # Where configuration, not --model-type, set it.
        if where := settings.set_in("model_type"):
            why = f", set by [serve_backends] model_type in {where}"
    description = _describe(registry, registered)
    LOG.info(chosen, description, why)
    if registered.backend.requires_model_path and request.model_path is None:
        # As SGLang's usage line names it.
        path = "<model-name-or-path>"
        usage = f"Usage: {PROG} {path} [OPTIONS] or {PROG} --model-path {path} [OPTIONS]"
        raise errors.ConfigurationError(f"serve backend {description} needs a model. {usage}")
    try:
        if channel is None:
            status = _launch_here(description, registered, request, settings.stop_timeout)
        else:
            channel.backend(registered.name, description)
            status = _run(description, registered, request) or 0
    except errors.ServeBackendError as exc:
        if detection is not None and detection.fallback and not sglang_installed():
            why = _unclaimed(registry, request, detection)
            raise type(exc)(f"{why} {exc}") from exc
        raise
    if status == console.EXIT_USAGE and (corrected := hoisted(host)) is not None:
        console.note(
            PROG,
            "serve's own options go before the model; if they were meant for serve, run: "
            + shlex.join([*PROG.split(), *corrected]),
        )
    return status


def _unclaimed(
    registry: ServeBackendRegistry, request: ServeRequest, detection: DetectionReport
) -> str:
    """Why detection fell back to ``llm`` (said only when it cannot run): each plugin by
    what happened to it (declined, failed to load, timed out, duplicate, not enabled).
    """
    reasons = []
    model = request.model_path
    if model is None:
        reasons.append("no model was given")
    elif not os.path.exists(model):
        reasons.append(f"the model path {model!r} is no local file or directory")
    left_out, unasked = not_asked(registry.inventory)
    reasons += left_out
    reasons += [
        what_happened(outcome)
        for outcome in detection.outcomes
        if outcome.name not in registry.builtin_names and outcome.name not in unasked
    ]
    if not registry.plugins:
        reasons.append("no serve backend plugin is installed")
    return f"Automatic detection fell back to {FALLBACK_BACKEND!r}: {'; '.join(reasons)}."


def _request(host: ServeArguments) -> ServeRequest:
    request = ServeRequest(*request_fields(host.argv))
    LOG.debug("Backend request: %r", request)
    return request


def backend_help(host: ServeArguments, settings: Settings) -> int | None:
    """Print the chosen backend's own help (its ``run()``): ``None`` once it returns, or
    the exit status its ``SystemExit`` asks for.
    """
    request = _request(host)
    # Watched, so that a plugin's own KeyboardInterrupt is told from the user's Ctrl+C; the
    # children a plugin starts are killed after, so that none holds the help's output (| less).
    with processes.stopping_what_it_starts(adopt=False), processes.StopSignals():
        registry = ServeBackendRegistry.from_settings(settings)
        registered = _get(registry, settings)
        # The backend prints its own help: no model path check, no cleanup.
        return _run(_describe(registry, registered), registered, request)


def serve(host: ServeArguments, settings: Settings) -> int:
    """Serve the request: in a supervised backend process (Linux), or here."""
    request = _request(host)
    # The supervision stack, which a backend's help does not need.
    from sglang_backends._serve.supervise import supervisor

    if not supervisor.SUPPORTED:
        return _backend(host, settings, request)

    def work(channel: Channel) -> int:
        """The backend process's part: everything from choosing the backend on."""
        return guarded(lambda: _backend(host, settings, request, channel), debug=host.debug)

    return supervisor.supervise(work, stop_timeout=settings.stop_timeout)
