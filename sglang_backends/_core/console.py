"""The one writer of lines to the operator's terminal, and what it escapes.

Package metadata is untrusted: a distribution name, a version, an entry point
or a docstring may carry terminal escape sequences, and so may what plugins
raise. Every line ``serve``, its supervisor and the operator commands write to
a terminal passes through here: :func:`error`, :func:`note` and :func:`say` to
stderr (a traceback too, :func:`printable_traceback`), :func:`show` to stdout,
:func:`terminal_log` for log records, :func:`printable` for what cliff's table
formatters show. A backend's own output (its ``run()``, its
help) is the backend's. It flushes the streams too: :func:`flush` before a
fork or an exit, :func:`run_command` as a command ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

#: How every command (``serve`` and the operator commands) shows a log record on
#: stderr: the message alone, as cliff does, so a warning reads the same
#: whichever command gave it. Each message says what it is about by itself.
LOG_FORMAT = "%(message)s"

#: The exit status of a command that failed.
EXIT_FAILURE = 1
#: The exit status of a command given wrong arguments or configuration (argparse's).
EXIT_USAGE = 2
#: The exit status of a command whose reader went away, as cliff's commands give it:
#: 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13
#: Seconds a command, once done, waits for the threads plugin code left running (Python
#: would wait for ever), before it ends without them.
THREAD_GRACE = 5.0

#: ``os._exit`` as it was before any plugin code ran, for the processes this package ends:
#: a plugin that replaces ``os._exit`` must not keep one of them from ending.
exit_now = os._exit


def printable(value: Any) -> Any:
    """*value* with what does not show escaped (``\\x1b``, ``\\u202e``) if it is a string.

    Package metadata is untrusted: a distribution name, a version, an entry
    point or a docstring may carry terminal escape sequences, characters that
    reorder a line (the bidirectional controls) or that do not show at all (a
    zero-width space). Whatever shows it to a terminal as text passes it through
    here first: every character Python does not count printable
    (:meth:`str.isprintable`: the control, format, separator but the space,
    surrogate, private-use and unassigned ones) is escaped.
    """
    if not isinstance(value, str) or value.isprintable():
        return value
    return "".join(char if char.isprintable() else _escape(char) for char in value)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def error(prog: str, text: object) -> None:
    """Write ``prog: error: text`` to stderr, a line per line of *text*, each escaped and
    its white space folded; nothing when stderr is closed or gone.
    """
    _write(prog, "error", text)


def note(prog: str, text: object) -> None:
    """Write ``prog: note: text`` to stderr, as :func:`error` writes."""
    _write(prog, "note", text)


def say(text: object) -> None:
    """Write *text* to stderr as it is but escaped, a line per line (``sys.exit``'s message,
    a ``--debug`` traceback); nothing when it cannot be made text, as Python prints nothing
    for a ``sys.exit`` object whose ``__str__`` raises.
    """
    try:
        lines = str(text).splitlines()
    # Plugin code's object, whose __str__ may raise anything, SystemExit too.
    except BaseException:  # noqa: BLE001
        return
    _write_lines(printable(line) for line in lines)


def show(text: str) -> None:
    """Write *text* to stdout, each line escaped (a help quoting package metadata)."""
    sys.stdout.write("".join(f"{printable(line)}\n" for line in text.splitlines()))


def _write(prog: str, kind: str, text: object) -> None:
    # Lines end at a newline alone: a carriage return or a form feed (in a model path the
    # line quotes, say) is escaped where it stands, not taken for the end of the line.
    lines = str(text).replace("\r\n", "\n").rstrip("\n").split("\n")
    _write_lines(f"{prog}: {kind}: {printable(_folded(line))}" for line in lines)


def _folded(line: str) -> str:
    """*line* with its runs of spaces and tabs folded to one space, stripped."""
    return " ".join(word for word in line.replace("\t", " ").split(" ") if word)


def _write_lines(lines: Iterable[str]) -> None:
    """The one place this package writes its own lines to stderr; nothing when it is gone.
    Where plugin code set ``sys.stderr`` to ``None``, the process's own stderr still gets
    them (``print`` would write them to stdout)."""
    stream = sys.stderr if sys.stderr is not None else sys.__stderr__
    # No stderr at all (pythonw).
    if stream is None:
        return
    with contextlib.suppress(AttributeError, OSError, ValueError):
        for line in lines:
            print(line, file=stream)
        stream.flush()


def flush() -> None:
    """Flush Python's standard streams, so that output is neither lost nor written twice
    (before a fork or ``os._exit``); nothing when a stream is closed or gone.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()


def run_command(prog: str, step: Callable[[], int]) -> int:
    """Run *step* and flush its output; a gone reader or a full disk ends it as cliff does.

    The standard streams escape what their encoding cannot carry (``PYTHONIOENCODING=ascii``):
    package metadata may hold it. A closed pipe (``serve --help | head -1``) exits with
    :data:`EXIT_BROKEN_PIPE`, silently; any other failure to write (a full
    disk) is one ``prog: error:`` line and status 1. Either way the output left in the
    buffer is dropped, so that the interpreter's own flush at exit cannot fail again.
    A standard stream the caller closed (``>&-``) is the null device (:func:`_null_streams`).
    """
    _null_streams()
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        status = step()
        sys.stdout.flush()
    except OSError as exc:
        _drop_output()
        if isinstance(exc, BrokenPipeError):
            return EXIT_BROKEN_PIPE
        error(prog, _unwritable(exc))
        return EXIT_FAILURE
    _end_without_threads_left(prog, status)
    return status


def _end_without_threads_left(prog: str, status: int) -> None:
    """End the process with *status* when threads plugin code started (a plugin's import
    in ``show``, a backend's ``--help``) outlive :data:`THREAD_GRACE`, naming them: Python
    would wait for them for ever. Return when there are none, or they ended in time.
    """
    names = ", ".join(repr(t.name) for t in threads_left())
    if not names:
        return
    note(
        prog, f"not waiting for threads plugin code left running after {THREAD_GRACE:g} s: {names}"
    )
    logging.shutdown()
    flush()
    exit_now(status)


def threads_left(known: Iterable[object] = ()) -> list[Any]:
    """The non-daemon threads but this one and *known* still running :data:`THREAD_GRACE` s
    from now (each waited for until then): Python would wait for them for ever at exit.
    """
    threads = sys.modules.get("threading")
    if threads is None:
        return []
    ignored = {threads.current_thread(), *known}
    left = [t for t in threads.enumerate() if not t.daemon and t not in ignored]
    deadline = time.monotonic() + THREAD_GRACE
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in left if t.is_alive()]


@contextlib.contextmanager
def writing_output() -> Iterator[None]:
    """Around a command's writing to stdout: a failure to write (a full disk) raised again
    saying so, for the one line that reports it; a closed pipe left as it is.
    """
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        # Said once: the command's end must not fail to flush it again.
        _drop_output()
        raise OSError(_unwritable(exc)) from exc


def _drop_output() -> None:
    """Point stdout at the null device: what is still buffered goes nowhere, so that no
    later flush (the command's end, the interpreter's exit) fails again."""
    # No file descriptor behind stdout.
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def _unwritable(exc: OSError) -> str:
    """A failure to write the output, in one line: the errno alone says not what failed."""
    return f"Cannot write the output: {exc.strerror or exc}"


def _null_streams() -> None:
    """Open the null device on each standard stream the caller closed, which Python leaves
    ``None``: what is written there goes nowhere, as Python's ``print`` lets it, and no file
    the command or a plugin opens later takes that descriptor (nor do their children write
    into it).
    """
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is not None:
            continue
        # The lowest free descriptor: this one, or lower.
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))


def terminal_log(handler: logging.Handler) -> logging.Handler:
    """*handler*, set to show log records as every command shows them on stderr: the
    message alone (:data:`LOG_FORMAT`), escaped (:func:`printable_record`).
    """
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(printable_record)
    return handler


def printable_record(record: logging.LogRecord) -> bool:
    """A logging filter passing each message through :func:`printable`.

    Log lines quote package metadata (a distribution's name, an entry point's
    name or target, a version) and what plugins raised: whatever a handler
    writes to a terminal goes through it, a log file's too (``tail -f`` shows it).
    A traceback keeps its lines, each escaped (see :func:`printable_traceback`).
    """
    record.msg = printable(record.getMessage())
    record.args = None
    if record.exc_info and not record.exc_text:
        record.exc_text = printable_traceback(record.exc_info[1]).rstrip("\n")
    return True


def printable_traceback(exc: BaseException | None) -> str:
    """*exc*'s traceback as :func:`traceback.print_exception` writes it, each line escaped.

    Its messages quote package metadata too; the lines stay lines.
    """
    lines = "".join(traceback.format_exception(exc)).splitlines()
    return "".join(f"{printable(line)}\n" for line in lines)
