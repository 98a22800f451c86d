"""The gRPC connection flags as gRPC core's channel arguments: what is set, and what stays unset."""

from __future__ import annotations

import pytest

from conch.cli.limit_flags import grpc_connection_limits
from conch.cli.main import build_parser
from conch.frontends.grpc.grpc_options import GrpcConnectionLimits, grpc_server_options


def test_the_flags_and_their_variables_set_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_GRPC_MAX_CONNECTION_AGE_SECS", "300")
    args = build_parser().parse_args(["serve", "--grpc-max-concurrent-streams", "64"])
    assert grpc_connection_limits(args) == GrpcConnectionLimits(
        max_concurrent_streams=64, max_connection_age_secs=300
    )


def test_the_ping_interval_and_the_grace_reach_grpc_core() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--grpc-min-ping-interval-secs", "30",
            "--grpc-max-connection-age-secs", "600",
            "--grpc-max-connection-age-grace-secs", "45",
        ]
    )  # fmt: skip
    options = dict(grpc_server_options(False, connection=grpc_connection_limits(args)))
    assert options["grpc.http2.min_ping_interval_without_data_ms"] == 30_000
    assert options["grpc.max_connection_age_grace_ms"] == 45_000


def test_the_defaults_bound_streams_and_ping_but_never_age_a_connection() -> None:
    options = dict(grpc_server_options(reuse_port=False))
    assert options["grpc.max_concurrent_streams"] == 1024
    assert options["grpc.keepalive_time_ms"] == 60_000
    assert options["grpc.http2.ping_timeout_ms"] == options["grpc.keepalive_timeout_ms"] == 20_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert "grpc.max_connection_age_ms" not in options


def test_an_age_without_grace_lets_open_calls_finish_however_long() -> None:
    aged = dict(GrpcConnectionLimits(max_connection_age_secs=600).options())
    graced = dict(
        GrpcConnectionLimits(max_connection_age_secs=600, max_connection_age_grace_secs=30).options()
    )
    assert aged["grpc.max_connection_age_ms"] == 600_000 and "grpc.max_connection_age_grace_ms" not in aged
    assert graced["grpc.max_connection_age_grace_ms"] == 30_000


def test_zero_streams_is_no_limit_and_a_keepalive_of_zero_is_refused() -> None:
    assert "grpc.max_concurrent_streams" not in dict(GrpcConnectionLimits(max_concurrent_streams=0).options())
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--grpc-keepalive-time-secs", "0"])
