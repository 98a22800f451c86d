"""``conch serve`` refuses impossible settings, from a flag or from its ``CONCH_*`` variable, before it
loads anything: exit status 2 and a message that names the flag."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def serve(flags: list[str], environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(environ or {})},
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--busy-poll-us", "-1"], "argument --busy-poll-us: must be at least 0, got -1"),
        (["--grpc-acceptors", "-1"], "argument --grpc-acceptors: must be at least 0, got -1"),
        (["--workers", "0"], "argument --workers: must be at least 1, got 0"),
        (["--http-port", "eighty"], "argument --http-port: expected a whole number, got 'eighty'"),
        (["--workers", "2", "--proxies", "2"], "conch: --proxies replaces --workers; use one of them"),
        (["--grpc-port", "8000"], "conch: --http-port and --grpc-port are both 8000; give each its own port"),
        (
            ["--http-port", "9100", "--metrics-port", "9100", "--proxies", "2"],
            "conch: --http-port and --metrics-port are both 9100",
        ),
        (["--log-verbose", "-1"], "argument --log-verbose: must be at least 0, got -1"),
        (
            ["--http-trusted-proxies", "10.0.0.0/8,ingress"],
            "argument --http-trusted-proxies: 'ingress' is not an IP address or network",
        ),
        (["--server-name", " "], "argument --server-name: expected a name of printable characters, got ' '"),
        (
            ["--log-level", "loud"],
            "argument --log-level: expected one of debug, info, warning, error, critical (or verbose, "
            "which is debug), got 'loud'",
        ),
    ],
)
def test_an_impossible_flag_is_refused(flags: list[str], message: str) -> None:
    done = serve(flags)

    assert done.returncode == 2
    assert message in done.stderr


def test_ports_of_zero_may_repeat_as_each_listener_gets_its_own() -> None:
    # Refused for another reason (the folder is not there), after the ports passed.
    done = serve(["/no/such/folder", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"])

    assert done.returncode == 2
    assert "is not a folder" in done.stderr and "port" not in done.stderr


def test_an_impossible_environment_value_is_refused_as_its_flag_would_be() -> None:
    done = serve([], {"CONCH_GRPC_ACCEPTORS": "-3"})

    assert done.returncode == 2
    assert "argument --grpc-acceptors: must be at least 0, got -3" in done.stderr


def test_an_unknown_log_level_in_the_environment_is_refused_as_its_flag_would_be() -> None:
    done = serve([], {"CONCH_LOG_LEVEL": "chatty"})

    assert done.returncode == 2
    assert "argument --log-level: expected one of debug, info, warning, error, critical" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_port_names_the_flag_and_the_variable_that_move_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve(
            ["--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--metrics-port", str(port)],
            {"CONCH_PROXIES": "0"},
        )

    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} (metrics): Address already in use" in done.stderr
    assert "choose another port with --metrics-port N (or CONCH_METRICS_PORT=N)" in done.stderr
