"""Operator commands: ``sglang-backends list|show|check|detect``, on cliff (its ``-f`` and
``-c`` formatters come with them). The application adds them by name: their
``sglang_backends.commands`` entry points are for documentation tools, and a scan of
every entry point would break on an unrelated malformed one. cliff is imported by
:mod:`sglang_backends._operators.app`, not here.
"""
