"""The router's choices and the fallback rules, on hand-made models and a fake clock (no server)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InternalError, InvalidArgumentError, UnavailableError
from conch.models.circuit_breaker import CircuitBreaker, CircuitBreakerSettings
from conch.models.fallback import (
    FallbackPolicy,
    FallbackReason,
    business_outputs,
    policy_from_config,
)
from conch.models.model import Model, ModelState, ModelVersion
from conch.models.served_models import ServedModels
from conch.models.strategy import FallbackLevel, parse_strategy
from conch.router.router import LOG_EVERY_S, VersionRouter
from conch.scheduling.scheduler import ScheduledRequest

OUTPUTS = (
    'output [ { name: "score" data_type: TYPE_FP32 dims: [ 2 ] }, '
    '{ name: "tag" data_type: TYPE_STRING dims: [ 1 ] } ]'
)
DEFAULT = '{"score": [1, 2], "tag": ["x"]}'


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def business(value: str) -> str:
    """The FALLBACK_BUSINESS_DEFAULT parameter line for ``value`` (JSON)."""
    return f"parameters {{ key: \"FALLBACK_BUSINESS_DEFAULT\" value {{ string_value: '{value}' }} }}"


def config(text: str = "") -> mc.ModelConfig:
    return text_format.Parse(OUTPUTS + "\n" + text, mc.ModelConfig(name="m", max_batch_size=4))


def version(number: int, ready: bool = True, breaker: bool = False, standby: bool = False) -> ModelVersion:
    served = ModelVersion("m", number, config())
    served.state = ModelState.READY if ready else ModelState.UNAVAILABLE
    served.standby = standby
    if breaker:
        served.breaker = CircuitBreaker(
            CircuitBreakerSettings(minimum_calls=2, window_calls=2, open_seconds=5)
        )
    return served


def router_for(*versions: ModelVersion, levels: str = "") -> tuple[VersionRouter, Clock]:
    repository = ServedModels(Path("."))
    model = Model("m", versions={v.version: v for v in versions})
    model.fallback = policy_from_config(
        config(business(DEFAULT)),
        parse_strategy(levels),
    )
    model.max_batch_size = 4
    repository.models["m"] = model
    clock = Clock()
    return VersionRouter(repository, clock), clock


def open_circuit(router: VersionRouter, served: ModelVersion) -> None:
    for _ in range(2):
        route = router.route("m", str(served.version))
        router.record(route, InternalError("boom"), 0.01)


def test_strategies_parse_in_order_and_bad_ones_name_the_level() -> None:
    assert parse_strategy("MODEL->CPU->BUSINESS") == (
        FallbackLevel.MODEL,
        FallbackLevel.CPU,
        FallbackLevel.BUSINESS,
    )
    assert parse_strategy(" business -> model ") == (FallbackLevel.BUSINESS, FallbackLevel.MODEL)
    assert parse_strategy("") == () and parse_strategy("none") == ()
    with pytest.raises(InvalidArgumentError, match="unknown level 'GPU'"):
        parse_strategy("MODEL->GPU")
    with pytest.raises(InvalidArgumentError, match="names MODEL twice"):
        parse_strategy("MODEL->CPU->MODEL")


def test_a_business_default_is_checked_against_the_outputs() -> None:
    with pytest.raises(InvalidArgumentError, match=r"missing: \['tag'\]"):
        policy_from_config(
            config(business('{"score": [1, 2]}')),
            (),
        )
    with pytest.raises(InvalidArgumentError, match="output 'score' needs FP32 values of shape \\[2\\]"):
        policy_from_config(
            config(business('{"score": [1, 2, 3], "tag": ["x"]}')),
            (),
        )
    with pytest.raises(InvalidArgumentError, match="includes BUSINESS but the config has no"):
        policy_from_config(
            config('parameters { key: "FALLBACK_STRATEGY" value { string_value: "BUSINESS" } }'), ()
        )


def test_business_outputs_repeat_one_row_per_request_row() -> None:
    policy = policy_from_config(
        config(business(DEFAULT)),
        (),
    )
    outputs = business_outputs(policy.business_default, rows=3, batching=True)

    np.testing.assert_array_equal(outputs["score"], [[1.0, 2.0]] * 3)
    assert outputs["score"].dtype == np.float32
    assert outputs["tag"].tolist() == [[b"x"]] * 3


def test_the_newest_ready_version_answers_with_no_fallback_mark() -> None:
    router, _ = router_for(version(1), version(2))

    route = router.route("m")

    assert route.version is not None and route.version.version == 2
    assert route.parameters == {} and not router.fallbacks


def test_an_open_circuit_fails_fast_without_a_fallback() -> None:
    newest = version(2, breaker=True)
    router, _ = router_for(version(1), newest)
    open_circuit(router, newest)

    with pytest.raises(
        UnavailableError, match="circuit breaker is open; it lets a few calls through again after 5 s"
    ):
        router.route("m")


def test_an_open_circuit_goes_to_the_last_good_version_then_back_after_recovery() -> None:
    newest = version(2, breaker=True)
    router, clock = router_for(version(1, standby=True), newest, levels="MODEL")
    open_circuit(router, newest)

    during = router.route("m")
    clock.now += 5.1
    probe = router.route("m")

    assert during.version is not None and during.version.version == 1
    assert during.parameters == {"fallback_level": "MODEL", "fallback_reason": "circuit_open"}
    assert probe.version is not None and probe.version.version == 2 and probe.parameters == {}
    assert router.fallbacks[("m", "1", "MODEL", "circuit_open")] == 1


def test_a_request_naming_a_version_never_moves_to_another() -> None:
    newest = version(2, breaker=True)
    router, _ = router_for(version(1), newest, levels="MODEL->BUSINESS")
    open_circuit(router, newest)

    route = router.route("m", "2")

    assert route.version is None and route.level is FallbackLevel.BUSINESS
    assert route.reason is FallbackReason.CIRCUIT_OPEN


def test_with_nothing_ready_business_answers_and_names_why() -> None:
    router, _ = router_for(version(1, ready=False), levels="BUSINESS")

    route = router.route("m")

    assert route.version is None and route.parameters == {
        "fallback_level": "BUSINESS",
        "fallback_reason": "load_failed",
    }
    np.testing.assert_array_equal(route.business_outputs(2)["score"], [[1, 2], [1, 2]])


def test_client_errors_do_not_count_for_the_breaker() -> None:
    newest = version(2, breaker=True)
    router, _ = router_for(newest)
    for _ in range(5):
        router.record(router.route("m"), InvalidArgumentError("bad input"), 0.01)

    assert router.route("m").version is newest


def test_an_ongoing_fallback_is_logged_when_it_starts_then_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    router, clock = router_for(version(1, ready=False), levels="BUSINESS")
    caplog.set_level("WARNING", logger="conch.router.router")

    for _ in range(5):
        router.route("m")
    clock.now += LOG_EVERY_S
    router.route("m")

    records = [r for r in caplog.records if getattr(r, "event", "") == "fallback"]
    assert [r.fields["answers"] for r in records] == [1, 5]  # type: ignore[attr-defined]
    assert router.fallbacks[("m", "", "BUSINESS", "load_failed")] == 6


def test_a_policy_allows_only_its_levels() -> None:
    policy = FallbackPolicy((FallbackLevel.CPU,))
    assert policy.allows(FallbackLevel.CPU) and not policy.allows(FallbackLevel.MODEL)


class GateAnswers:
    """The release side of the router, recording what the gate is told (a 50% release of 1 and 2)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, float, bool, float | None]] = []

    def split(self, model: str) -> tuple[int, int, int] | None:
        return (1, 2, 50)

    def shadow_version(self, model: str, answered: int) -> int | None:
        return None

    def record_answer(
        self,
        model: str,
        version: int,
        seconds: float,
        server_error: bool,
        copy: bool = False,
        execution: float | None = None,
    ) -> None:
        self.answers.append((version, seconds, server_error, execution))

    def compare_copy(self, *args: object) -> None:
        raise AssertionError("no copies in this release")

    def record_dropped(self, model: str) -> None:
        raise AssertionError("no copies in this release")


def test_the_gate_times_a_released_answer_without_its_wait_in_the_shared_line_and_its_execution() -> None:
    repository = ServedModels(Path("."))
    repository.models["m"] = Model("m", versions={1: version(1), 2: version(2)})
    gate = GateAnswers()
    router = VersionRouter(repository, Clock(), gate)
    route = router.route("m", route_key="client-7")
    assert route.released and route.version is not None
    scheduled = ScheduledRequest({}, ["score"], 1, line_wait_ns=30_000_000, execution_ns=5_000_000)
    router.record(route, None, 0.050, scheduled)
    assert gate.answers == [(route.version.version, pytest.approx(0.020), False, pytest.approx(0.005))]
