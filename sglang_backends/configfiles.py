"""Configuration files read once, as oslo.config would read them, and never skipped.

Each file (a pipe too, if named; a regular file, if found in a ``--config-dir``) is read
once, bounded (1 MiB), checked to be UTF-8, parsed by oslo.config's parser and copied for
oslo.config to read, so that what it uses and what messages quote are the same bytes. One
that cannot be read is a one-line :class:`~sglang_backends.errors.ConfigurationError`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from oslo_config import cfg

from sglang_backends.errors import ConfigurationError

__all__ = ["Source", "ordered", "parse", "read_sources"]

#: Bytes a configuration file may hold; more is not configuration (``/dev/zero``, say).
_MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Source:
    """One file as read once: its *path* for messages, the private *copy* oslo.config reads,
    and its *sections* as oslo.config's parser gives them (``{section: {option: [values]}}``).
    """

    path: str
    copy: str
    sections: dict[str, dict[str, list[str]]]


def _fail_reading(path: str, exc: OSError, what: str = "file") -> ConfigurationError:
    if isinstance(exc, FileNotFoundError):
        return ConfigurationError(f"Configuration {what} not found: {path}")
    if isinstance(exc, IsADirectoryError):
        return ConfigurationError(
            f"Configuration file {path} is a directory; pass directories with --config-dir"
        )
    if isinstance(exc, NotADirectoryError) and what == "directory":
        return ConfigurationError(
            f"Configuration directory {path} is not a directory; pass files with --config-file"
        )
    return ConfigurationError(f"Configuration {what} {path} is not readable: {exc.strerror}")


def _read_file(path: str, *, in_directory: bool) -> bytes:
    """The bytes of *path*, read once; one found in a directory must be a regular file,
    so that a FIFO dropped there cannot make every command wait.
    """
    try:
        if in_directory and not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigurationError(f"Configuration file {path} is not a regular file")
        with open(path, "rb") as stream:
            data = stream.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail_reading(path, exc) from None
    if len(data) > _MAX_FILE_BYTES:
        raise ConfigurationError(f"Configuration file {path} is larger than 1 MiB")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"Cannot read configuration file {path}: it is not UTF-8 text "
            f"({exc.reason} at byte {exc.start})"
        ) from None
    return data


def parse(path: str, shown: str) -> dict[str, dict[str, list[str]]]:
    """File *path* parsed by oslo.config's own parser; messages name it *shown*."""
    sections: dict[str, dict[str, list[str]]] = {}
    try:
        cfg.ConfigParser(path, sections).parse()
    except cfg.ParseError as exc:
        raise ConfigurationError(
            f"Cannot parse configuration file {shown}: at line {exc.lineno}, "
            f"{exc.msg}: {exc.line!r}"
        ) from None
    return sections


def ordered(files: Sequence[str], dirs: Sequence[str]) -> list[tuple[str, bool]]:
    """Every file's absolute path in oslo.config's order (files, then each directory's
    ``*.conf``), and whether it was found in a directory.
    """
    named = [(os.path.abspath(path), False) for path in files]
    for directory in map(os.path.abspath, dirs):
        try:  # one that cannot be listed is an error, never taken for an empty one
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise _fail_reading(directory, exc, "directory") from None
        named += [
            (os.path.join(directory, n), True) for n in names if n.endswith(".conf") and n[0] != "."
        ]
    return named


def read_sources(files: Sequence[str], dirs: Sequence[str], private: str) -> list[Source]:
    """Read every file once, in :func:`ordered` order, and copy each into *private*, so
    that what oslo.config uses and messages quote are the same bytes.
    """
    sources = []
    for index, (path, in_directory) in enumerate(ordered(files, dirs)):
        copy = os.path.join(private, f"{index}.conf")
        with open(copy, "wb") as stream:
            stream.write(_read_file(path, in_directory=in_directory))
        sources.append(Source(path, copy, parse(copy, path)))
    return sources
