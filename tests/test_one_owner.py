"""One owner per rule: a timeout is checked by one rule, worded once, whichever way it comes."""

from __future__ import annotations

import pytest
from clitools import run_cli

from sglang_backends import ServeBackendRegistry
from sglang_backends.errors import ConfigurationError

RULE = "must be a number of seconds from 0.001 to 1e+09"


@pytest.mark.parametrize("value", ["0", "1e10", "nan"])
def test_a_timeout_out_of_range_is_refused_in_the_same_words_everywhere(site, tmp_path, value):
    with pytest.raises(ConfigurationError) as info:
        ServeBackendRegistry(detect_timeout=float(value))
    assert str(info.value) == f"Invalid value {float(value)!r} for detect_timeout: {RULE}"

    for command, flag in (("detect", "--detect-timeout"), ("check", "--timeout")):
        flagged = run_cli(site, command, flag, value, "m")
        assert flagged.returncode == 2, flagged.stderr
        assert f"argument {flag}: invalid value '{value}': {RULE}" in flagged.stderr

    conf = tmp_path / "timeout.conf"
    conf.write_text(f"[serve_backends]\ndetect_timeout = {value}\n")
    configured = run_cli(site, "list", "--config-file", str(conf))
    assert configured.returncode == 2, configured.stderr
    where = f"[serve_backends] detect_timeout in {conf}"
    assert f"Invalid value '{value}' for option {where}: {RULE}" in configured.stderr
    assert "Traceback" not in flagged.stderr + configured.stderr
