"""The exceptions this package raises, and the wording of their causes.

Each derives from :class:`ServeBackendError` and from the built-in type SGLang
raises in the same situation (or callers caught before), so code written
against SGLang keeps catching it. Errors carry the backend ``name`` and
``distribution`` and pickle with them (every argument after the message has
a default) to cross processes. ``__all__`` is the exceptions, which the
package exports as they are; :func:`describe`, :func:`describe_typed`,
:func:`did_you_mean`, :func:`meant` and :func:`closest`, the one wording of a cause,
:func:`set_in_configuration`, of a configured name, and :func:`backend_named`,
of the backend concerned, are internal.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AmbiguousDetectionError",
    "BackendAPIVersionError",
    "BackendConflictError",
    "BackendLoadError",
    "BackendTypeError",
    "ConfigurationError",
    "DisabledBackendError",
    "DuplicateBackendError",
    "HostError",
    "PluginCodeError",
    "ReservedNameError",
    "SelectionTypeError",
    "ServeBackendError",
    "UnknownBackendError",
    "UsageError",
]


class ServeBackendError(Exception):
    """Root of this package's errors.

    :param message: the one-line explanation shown to users.
    :param name: the backend concerned, if one is.
    :param distribution: the distribution providing it, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        name: str | None = None,
        distribution: str | None = None,
    ) -> None:
        super().__init__(message)
        self.name = name
        self.distribution = distribution


class ReservedNameError(ServeBackendError, ValueError):
    """A built-in backend was given a reserved name such as ``auto``."""


class BackendConflictError(ServeBackendError, RuntimeError):
    """An installed plugin claims a reserved or built-in backend name."""


class DuplicateBackendError(ServeBackendError, RuntimeError):
    """Several distributions register the same backend name; :attr:`providers`, sorted."""

    def __init__(
        self, message: str, *, name: str | None = None, providers: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message, name=name)
        self.providers = tuple(providers)


class UnknownBackendError(ServeBackendError, ValueError):
    """No backend of that name is available."""


class DisabledBackendError(ServeBackendError, ValueError):
    """The backend is installed but excluded by the enabled/disabled lists.

    A sibling of :class:`UnknownBackendError`: the name is right, the configuration says no.
    """


class BackendLoadError(ServeBackendError, RuntimeError):
    """A plugin failed to import, was not callable, or its factory raised.

    Whatever the plugin raised, ``SystemExit`` or ``asyncio.CancelledError`` included.
    """


class BackendTypeError(ServeBackendError, TypeError):
    """A factory returned something other than a ``ServeBackend``."""


class BackendAPIVersionError(ServeBackendError, RuntimeError):
    """A backend declares a contract version this package does not speak."""


class AmbiguousDetectionError(ServeBackendError, RuntimeError):
    """Several detectors claimed the same request; :attr:`matches`, in registry order."""

    def __init__(self, message: str, *, matches: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.matches = tuple(matches)


class ConfigurationError(ServeBackendError, ValueError):
    """Configuration is missing, unreadable or invalid; the message names the file and option."""


class SelectionTypeError(ServeBackendError, TypeError):
    """An enabled or disabled list was given as a string, not a collection of names."""


class UsageError(ServeBackendError, ValueError):
    """``serve``'s command line itself is wrong (exit status 2)."""


class PluginCodeError(ServeBackendError, RuntimeError):
    """Plugin code raised a ``BaseException`` that is not an ``Exception``, or failed an ``assert``.

    stevedore lets an ``AssertionError`` through its failure callback; the original is the cause.
    A load reports it as the cause of a :class:`BackendLoadError`.
    """


class HostError(ServeBackendError, RuntimeError):
    """SGLang, the host, failed: a built-in backend needs a part of it that is not importable
    (the message says what to install), or its general plugins failed to load.
    """


def set_in_configuration(
    exc: UnknownBackendError | DisabledBackendError, origin: str
) -> UnknownBackendError | DisabledBackendError:
    """*exc*, about a ``model_type`` configuration set in *origin*, saying so: the one wording
    of it, for ``serve`` and for ``detect``, which answers what serve would do.
    """
    return type(exc)(
        f"{exc} It was set by [serve_backends] model_type in {origin}; correct it "
        "there, or give --model-type.",
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


def describe(exc: BaseException) -> str:
    """*exc*'s message on one line, or its type name when it has none."""
    return " ".join(str(exc).split()) or type(exc).__name__


def describe_typed(exc: BaseException) -> str:
    """``Type: message`` on one line, or the type alone when *exc* has no message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest of *known* to *name*, else a full stop.

    Ends a clause, alike for every slip of a name: ``f"Unknown {name!r}{did_you_mean(...)}"``.
    """
    return meant(closest(name, known))


def meant(close: str | None) -> str:
    """``; did you mean 'x'?`` for the name *close* offered, else a full stop."""
    return f"; did you mean {close!r}?" if close else "."


def closest(name: str, known: Iterable[str]) -> str | None:
    """The one of *known* closest to *name*, if any is close: what :func:`did_you_mean` offers."""
    import difflib  # only on the error path

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return close[0] if close else None
