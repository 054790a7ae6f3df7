"""The exceptions this package raises, and the wording of their causes.

Each derives from :class:`ServeBackendError` and from the built-in type SGLang
raises in the same situation (or callers caught before), so code written
against SGLang keeps catching it. Errors carry the backend ``name`` and
``distribution`` and pickle with them (every argument after the message has
a default) to cross processes. ``__all__`` is the exceptions, which the
package exports as they are; :func:`describe`, :func:`describe_typed`,
:func:`describe_raised`, :func:`did_you_mean`, :func:`meant` and :func:`closest`,
the one wording of a cause, :func:`set_in_configuration`, of a configured name,
:func:`refuse_string`, of a string given for a collection, :func:`shortened`, of
plugin code's long text, :func:`option_before_command`, of an option given before a
command name, and
:func:`backend_named`, :func:`load_failed` and :func:`naming_lead`, of the backend
concerned, are internal.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AmbiguousDetectionError",
    "BackendConflictError",
    "BackendLoadError",
    "BackendTypeError",
    "ConfigurationError",
    "DisabledBackendError",
    "ServeBackendError",
    "UnknownBackendError",
]


class ServeBackendError(Exception):
    """Root of this package's errors.

    :param message: the one-line explanation shown to users.
    :param name: the backend concerned, if one is.
    :param distribution: the distribution providing it, if known.
    """

    def __init__(
        self, message: str, *, name: str | None = None, distribution: str | None = None
    ) -> None:
        super().__init__(message)
        self.name = name
        self.distribution = distribution


class BackendConflictError(ServeBackendError, RuntimeError):
    """Several claim one backend name: a usable plugin and a built-in or reserved name, or
    several distributions (:attr:`providers`, sorted) of which none was picked as ``DIST:NAME``.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        distribution: str | None = None,
        providers: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, name=name, distribution=distribution)
        self.providers = tuple(providers)


class UnknownBackendError(ServeBackendError, ValueError):
    """No backend of that name is available."""


class DisabledBackendError(ServeBackendError, ValueError):
    """The backend is installed but excluded by the enabled/disabled lists.

    A sibling of :class:`UnknownBackendError`: the name is right, the configuration says no.
    """


class BackendLoadError(ServeBackendError, RuntimeError):
    """A backend could not be loaded: its plugin failed to import, was not callable, its
    factory raised (whatever it raised, ``SystemExit`` or ``asyncio.CancelledError``
    included) or it declares a contract version this package does not speak; or a
    built-in needs a part of SGLang that is not importable (the message says what to
    install), or SGLang's general plugins failed to load.
    """


class BackendTypeError(ServeBackendError, TypeError):
    """A factory returned something other than a ``ServeBackend``."""


class AmbiguousDetectionError(ServeBackendError, RuntimeError):
    """Several detectors claimed the same request; :attr:`matches`, in registry order."""

    def __init__(self, message: str, *, matches: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.matches = tuple(matches)


class ConfigurationError(ServeBackendError, ValueError, TypeError):
    """Configuration is missing, unreadable or invalid, the message naming the file and
    option; or the registry's arguments are (a built-in named ``auto``, an enabled or
    disabled list given as a string: a ``TypeError`` too); or ``serve``'s command line is
    (exit status 2).
    """


def refuse_string(value: object, wanted: str) -> None:
    """Refuse *value* if it is a string where *wanted* says a collection is (``argv must be a
    sequence of arguments``): iterated, each of its letters would be taken as an item.

    :raises ConfigurationError: ``WANTED, not a string`` (a ``TypeError`` too).
    """
    if isinstance(value, str):
        raise ConfigurationError(f"{wanted}, not a string")


def set_in_configuration(
    exc: UnknownBackendError | DisabledBackendError, origin: str | None, *, flag: bool = True
) -> UnknownBackendError | DisabledBackendError:
    """*exc*, about a ``model_type`` configuration set in *origin*, saying so: the one wording
    of it, for ``serve`` and for ``detect``, which answers what serve would do, and (without
    *flag*, ``--model-type``, to offer instead) for a service's ``select_backend``. *exc*
    itself when no configuration set the name (*origin* ``None``).
    """
    if origin is None:
        return exc
    instead = ", or give --model-type" if flag else ""
    return type(exc)(
        f"{exc} It was set by [serve_backends] model_type in {origin}; correct it there{instead}.",
        name=exc.name,
        distribution=exc.distribution,
    )


def backend_named(
    name: str, provider: str | None = None, *, builtin: bool = False, start: bool = False
) -> str:
    """How a message names serve backend *name*: ``serve backend 'x' from DIST`` with its
    *provider* (a plugin's ``provider``), ``built-in serve backend 'x'`` with *builtin*;
    capitalized to *start* a sentence.
    """
    kind = "built-in serve backend" if builtin else "serve backend"
    named = f"{kind.capitalize() if start else kind} {name!r}"
    return f"{named} from {provider}" if provider else named


def load_failed(name: str, provider: str | None = None, *, builtin: bool = False) -> str:
    """``Failed to load serve backend 'x' from DIST``: how the message of a failed load opens
    (:func:`backend_named` for the rest), before a colon and its cause.
    """
    return f"Failed to load {backend_named(name, provider, builtin=builtin)}"


def naming_lead(text: str, name: str, provider: str | None) -> str:
    """The words *text* opens with that only name plugin *name* from *provider*, as the
    messages word them (:func:`load_failed`, :func:`backend_named`): ``Failed to load
    serve backend 'x' from DIST: ``, ``Serve backend 'x' from DIST ``, ``Serve backend 'x':
    ``; empty when it opens otherwise. What a table row giving both in columns of its own
    need not repeat.
    """
    leads = [f"{load_failed(name, provider)}: "] if provider else []
    for named in {backend_named(name, provider, start=True), backend_named(name, start=True)}:
        leads += [f"{named}: ", f"{named} "]
    return max((lead for lead in leads if text.startswith(lead)), key=len, default="")


#: Characters of a message from plugin code shown in a line; ``--debug`` shows it whole.
_LONGEST = 1000


def _message(exc: BaseException) -> str | None:
    """*exc*'s message on one line; ``None`` when its ``__str__`` raised (plugin code's may).
    A message of plugin code (not this package's own) past 1,000 characters is cut
    there: a line quotes it, maybe several lines do, and a terminal gets each."""
    try:
        text = " ".join(str(exc).split())
    # Any BaseException: a plugin's SystemExit or KeyboardInterrupt in __str__ is not the
    # caller's exit, and the failure being worded matters, not this one.
    except BaseException:  # noqa: BLE001
        return None
    return text if isinstance(exc, ServeBackendError) else shortened(text)


def shortened(text: str) -> str:
    """*text* of plugin code (a message, a ``sys.exit`` value), cut past 1,000 characters."""
    if len(text) <= _LONGEST:
        return text
    left = len(text) - _LONGEST
    return f"{text[:_LONGEST]}… ({left} more characters; --debug shows them)"


def describe(exc: BaseException) -> str:
    """*exc*'s message on one line, or its type name when it has none; typed
    (:func:`describe_typed`) when its message cannot be had."""
    return _message(exc) or describe_typed(exc)


def describe_typed(exc: BaseException, context: str = "") -> str:
    """``Type: message`` on one line, or the type alone when *exc* has no message; a
    *context* follows the type (``Type for a request with X: message``). A message that
    cannot be had is ``<exception str() failed>``, as Python's tracebacks say it.
    """
    text = _message(exc)
    typed = f"{type(exc).__name__}{context}"
    if text is None:
        text = "<exception str() failed>"
    return f"{typed}: {text}" if text else typed


def describe_raised(exc: BaseException, raiser: str) -> str:
    """What *raiser* (``run()``, ``plugin code``) raised, as a failure says it: an exception
    by its message (:func:`describe`), another ``BaseException`` (``CancelledError``) as
    ``RAISER raised Type: message``.
    """
    if isinstance(exc, Exception):
        return describe(exc)
    return f"{raiser} raised {describe_typed(exc)}"


def option_before_command(option: str, command: str | None) -> str:
    """Why *option*, given before the command name *command* (``None``: no command is
    named), is refused there, in one line: the one wording of this slip."""
    if command == "serve":
        return (
            f"{option} is not an option of serve; before serve, only --debug, --config-file "
            "and --config-dir are taken"
        )
    if command is None:
        return f"{option} is not an option of sglang-backends; see sglang-backends --help"
    return (
        f"{option} is not an option of sglang-backends; a command's own options go after "
        f"its name: sglang-backends {command} {option} ..."
    )


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest of *known* to *name*, else a full stop.

    Ends a clause, alike for every slip of a name: ``f"Unknown {name!r}{did_you_mean(...)}"``.
    """
    return meant(closest(name, known))


def meant(close: str | None) -> str:
    """``; did you mean 'x'?`` for the name *close* offered, else a full stop."""
    return f"; did you mean {close!r}?" if close else "."


def closest(name: object, known: Iterable[str]) -> str | None:
    """The one of *known* closest to *name*, if any is close: what :func:`did_you_mean` offers.
    Case is ignored (``ECHO`` is offered ``echo``), but never *name* itself is offered: it
    was refused (``auto`` asked of the registry).
    """
    # With heapq, about a millisecond the contract and the help need not pay.
    import difflib

    # Not a name (``get(None)``): nothing is close to it.
    if not isinstance(name, str):
        return None

    # Each lower-cased name, and the first name it comes from.
    others: dict[str, str] = {}
    for known_name in known:
        if known_name != name:
            others.setdefault(known_name.lower(), known_name)
    close = difflib.get_close_matches(name.lower(), others, n=1)
    return others[close[0]] if close else None
