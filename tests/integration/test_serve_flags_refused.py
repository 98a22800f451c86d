"""``conch serve`` refuses impossible settings before it loads anything: exit status 2 and a message
that names the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--busy-poll-us", "-1"], "--busy-poll-us must be 0 (off) or more"),
        (["--grpc-acceptors", "-1"], "--grpc-acceptors must be 0 (grpc.aio's own) or more"),
        (["--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_an_impossible_setting_is_refused(flags: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert message in done.stderr
