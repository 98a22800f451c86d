"""The trace settings' rules: which requests may start a trace, how a model's own values fall back to
the server's, what clearing does, and what is refused."""

from __future__ import annotations

import pytest

from conch.core.errors import InvalidArgumentError, PermissionDeniedError
from conch.observability.trace_settings import LiveTraceSettings


def admitted(settings: LiveTraceSettings, model: str, requests: int) -> list[bool]:
    return [settings.admits(model) for _ in range(requests)]


def test_a_server_without_an_exporter_admits_nothing_and_refuses_to_turn_on() -> None:
    settings = LiveTraceSettings(exporting=False)
    assert settings.settings()["trace_level"] == ["OFF"]
    assert not any(admitted(settings, "m", 5))
    with pytest.raises(InvalidArgumentError, match="--trace-otlp-endpoint"):
        settings.update({"trace_level": ["TIMESTAMPS"]}, "m")


def test_a_rate_admits_every_nth_request_counted_per_model() -> None:
    settings = LiveTraceSettings(exporting=True)
    settings.update({"trace_rate": "3"})
    settings.update({"trace_rate": 2}, "fast")
    assert admitted(settings, "a", 6) == [False, False, True, False, False, True]
    assert admitted(settings, "fast", 4) == [False, True, False, True]
    assert admitted(settings, "b", 3) == [False, False, True]  # "a" and "b" share the server's count
    settings.update({"trace_count": "5"}, "c")  # a count of its own, the server's rate and its count
    assert admitted(settings, "c", 3) == [False, False, True]


def test_a_count_is_spent_by_the_traces_taken_where_it_is_set() -> None:
    settings = LiveTraceSettings(exporting=True)
    settings.update({"trace_count": "2"}, "m")
    for _ in range(3):
        if settings.admits("m"):
            settings.taken("m")
    assert settings.settings("m")["trace_count"] == "0"
    assert not settings.admits("m")
    assert settings.settings()["trace_count"] == "-1" and settings.admits("other")


def test_a_model_inherits_what_it_did_not_set_and_clearing_returns_to_the_server() -> None:
    settings = LiveTraceSettings(exporting=True)
    settings.update({"trace_level": ["OFF"]}, "quiet")
    settings.update({"trace_rate": "5"})
    assert settings.settings("quiet") == {
        "trace_level": ["OFF"],
        "trace_rate": "5",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
    }
    assert settings.update({"trace_level": None}, "quiet")["trace_level"] == ["TIMESTAMPS"]
    assert settings.update({"trace_rate": None})["trace_rate"] == "1"  # the server's: back to its start


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"trace_file": "/tmp/x"}, PermissionDeniedError),
        ({"trace_level": ["TENSORS"]}, InvalidArgumentError),
        ({"trace_level": []}, InvalidArgumentError),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, InvalidArgumentError),
        ({"trace_rate": "0"}, InvalidArgumentError),
        ({"trace_rate": True}, InvalidArgumentError),
        ({"trace_rate": "4294967296"}, InvalidArgumentError),
        ({"trace_rate": "9" * 5000}, InvalidArgumentError),
        ({"trace_rate": 2.5}, InvalidArgumentError),
        ({"trace_count": "-2"}, InvalidArgumentError),
        ({"log_frequency": "5"}, InvalidArgumentError),
        ({"trace_mode": "triton"}, InvalidArgumentError),
        ({"trace_ratee": None}, InvalidArgumentError),  # an unknown name reset with null (was a 500)
    ],
)
def test_refused_changes_change_nothing(changes: dict[str, object], error: type[Exception]) -> None:
    settings = LiveTraceSettings(exporting=True)
    before = settings.settings()
    with pytest.raises(error):
        settings.update({"trace_rate": "9", **changes})
    assert settings.settings() == before


def test_what_a_get_answers_can_be_posted_back() -> None:
    settings = LiveTraceSettings(exporting=True)
    read = settings.update({"trace_rate": "3"})
    assert settings.update(read) == read
    assert settings.update(read, "m") == read
    assert settings.update({"trace_mode": ["opentelemetry"]}) == read  # as gRPC carries it


def test_a_single_level_string_and_grpc_lists_are_read_as_triton_sends_them() -> None:
    settings = LiveTraceSettings(exporting=True)
    assert settings.update({"trace_level": "OFF", "trace_rate": ["7"], "log_frequency": "0"}) == {
        "trace_level": ["OFF"],
        "trace_rate": "7",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
    }
