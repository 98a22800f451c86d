"""``prefer_iomgr_listener``: conch turns gRPC's EventEngine listener off unless the operator decided."""

from __future__ import annotations

import pytest

from conch.frontends.grpc.grpc_options import prefer_iomgr_listener


def test_an_unset_environment_gets_the_iomgr_listener() -> None:
    environ: dict[str, str] = {}
    prefer_iomgr_listener(environ)
    assert environ == {"GRPC_EXPERIMENTS": "-event_engine_listener"}


def test_other_experiments_are_kept() -> None:
    environ = {"GRPC_EXPERIMENTS": "tcp_rcv_lowat, -event_engine_fork"}
    prefer_iomgr_listener(environ)
    assert environ["GRPC_EXPERIMENTS"] == "tcp_rcv_lowat,-event_engine_fork,-event_engine_listener"


@pytest.mark.parametrize(
    "decided", ["event_engine_listener", "-event_engine_listener", "x, event_engine_listener"]
)
def test_an_operator_decision_about_the_listener_is_left_alone(decided: str) -> None:
    environ = {"GRPC_EXPERIMENTS": decided}
    prefer_iomgr_listener(environ)
    assert environ["GRPC_EXPERIMENTS"] == decided
