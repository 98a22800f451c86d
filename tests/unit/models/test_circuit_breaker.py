"""The circuit breaker's rules on a clock the test controls (``now`` in seconds), its settings and metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import text_format
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import (
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from conch.models.circuit_breaker import (
    CallOutcome,
    CircuitBreaker,
    CircuitBreakerSettings,
    CircuitState,
    Transition,
    settings_from_config,
)
from conch.observability.circuit_metrics import BreakerFigures, CircuitBreakerCollector
from conch.observability.exposition import render

CLOSED, OPEN, HALF_OPEN = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN
SUCCESS, FAILURE, CLIENT_ERROR = CallOutcome.SUCCESS, CallOutcome.FAILURE, CallOutcome.CLIENT_ERROR
FAST = 0.010  # seconds a normal call takes


class Driver:
    """The thin driver's part, done by hand: ask, then record each allowed call, on a fake clock."""

    def __init__(self, **settings: Any) -> None:
        self.now = 1_000.0
        self.seen: list[Transition] = []
        self.breaker = CircuitBreaker(CircuitBreakerSettings(**settings), on_transition=self.seen.append)

    def call(self, outcome: CallOutcome, seconds: float = FAST, times: int = 1) -> None:
        """``times`` calls, each allowed first; one that is refused fails the test."""
        for _ in range(times):
            assert self.breaker.allow(self.now), f"call refused in state {self.breaker.state.name}"
            self.breaker.record(self.now, outcome, seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def trip(self) -> None:
        """Open the circuit with the default thresholds."""
        self.call(FAILURE, times=self.breaker.settings.minimum_calls)
        assert self.breaker.state is OPEN

    def to_half_open(self) -> None:
        self.trip()
        self.advance(self.breaker.settings.open_seconds)
        assert self.breaker.allow(self.now)
        assert self.breaker.state is HALF_OPEN


def test_stays_closed_below_minimum_calls() -> None:
    driver = Driver()
    driver.call(FAILURE, times=19)
    assert driver.breaker.state is CLOSED
    assert driver.breaker.allow(driver.now)
    driver.breaker.record(driver.now, FAILURE, FAST)
    assert driver.breaker.state is OPEN


@pytest.mark.parametrize(("failures", "state"), [(9, CLOSED), (10, OPEN)])
def test_opens_when_the_failure_rate_reaches_the_threshold(failures: int, state: CircuitState) -> None:
    driver = Driver()  # 0.5 over at least 20 calls
    driver.call(SUCCESS, times=20 - failures)
    driver.call(FAILURE, times=failures)
    assert driver.breaker.state is state


def test_the_transition_carries_the_figures_that_decided_it() -> None:
    driver = Driver()
    driver.call(SUCCESS, times=10)
    driver.call(FAILURE, times=10)
    assert driver.seen == [Transition(CLOSED, OPEN, driver.now, failure_rate=0.5, slow_call_rate=0.0)]
    assert driver.breaker.transitions == {OPEN: 1}


def test_client_errors_never_count_not_even_as_calls() -> None:
    driver = Driver()
    driver.call(CLIENT_ERROR, times=50)
    assert driver.breaker.state is CLOSED  # not failures
    driver.call(FAILURE, times=10)
    driver.call(CLIENT_ERROR, times=100)  # as calls they would push the failures out of the window
    driver.call(SUCCESS, times=9)
    assert driver.breaker.state is CLOSED
    driver.call(SUCCESS)
    assert driver.breaker.state is OPEN  # 10 failures in 20 calls


def test_slow_calls_open_the_circuit() -> None:
    driver = Driver(slow_call_ms=100, slow_call_rate_threshold=0.25)
    driver.call(SUCCESS, seconds=0.100, times=20)  # at the limit is not slower than it
    assert driver.breaker.state is CLOSED
    driver.call(SUCCESS, seconds=0.101, times=6)  # 6 slow in 26
    assert driver.breaker.state is CLOSED
    driver.call(SUCCESS, seconds=0.250)  # 7 in 27
    assert driver.breaker.state is OPEN
    assert driver.seen[-1].failure_rate == 0.0
    assert driver.seen[-1].slow_call_rate == 7 / 27


def test_a_failed_call_can_be_slow_too() -> None:
    driver = Driver(failure_rate_threshold=1.0, slow_call_ms=100, slow_call_rate_threshold=0.5)
    driver.call(SUCCESS, times=10)
    driver.call(FAILURE, seconds=1.0, times=10)
    assert driver.breaker.state is OPEN
    assert driver.seen[-1].slow_call_rate == 0.5


def test_without_slow_call_ms_no_call_is_slow() -> None:
    driver = Driver(slow_call_rate_threshold=0.1)
    driver.call(SUCCESS, seconds=60.0, times=100)
    assert driver.breaker.state is CLOSED


def test_open_refuses_until_open_seconds_have_passed() -> None:
    driver = Driver(open_seconds=30)
    driver.trip()
    opened = driver.now
    assert not driver.breaker.allow(opened)
    assert not driver.breaker.allow(opened + 29.999)
    assert driver.breaker.state is OPEN
    assert driver.breaker.allow(opened + 30)
    assert driver.breaker.state is HALF_OPEN
    assert driver.seen[-1] == Transition(OPEN, HALF_OPEN, opened + 30)


def test_half_open_permits_exactly_half_open_calls() -> None:
    driver = Driver(half_open_calls=3)
    driver.to_half_open()  # one probe out
    assert driver.breaker.allow(driver.now)
    assert driver.breaker.allow(driver.now)
    assert not driver.breaker.allow(driver.now)
    driver.breaker.record(driver.now, SUCCESS, FAST)  # a recorded probe still takes its place
    assert not driver.breaker.allow(driver.now)
    driver.breaker.record(driver.now, CLIENT_ERROR, FAST)  # a 4xx probe hands its permit back
    assert driver.breaker.allow(driver.now)
    assert not driver.breaker.allow(driver.now)
    assert driver.breaker.state is HALF_OPEN


def test_good_probes_close_the_circuit_with_an_empty_window() -> None:
    driver = Driver()
    driver.to_half_open()
    driver.breaker.record(driver.now, SUCCESS, FAST)
    driver.call(SUCCESS, times=3)
    assert driver.breaker.state is HALF_OPEN  # 4 of 5 probes
    driver.call(FAILURE)  # 1 in 5 is below 0.5
    assert driver.breaker.state is CLOSED
    assert driver.seen[-1] == Transition(HALF_OPEN, CLOSED, driver.now, failure_rate=0.2, slow_call_rate=0.0)
    driver.call(FAILURE, times=19)  # the window starts afresh, so minimum_calls applies again
    assert driver.breaker.state is CLOSED
    driver.call(FAILURE)
    assert driver.breaker.state is OPEN
    assert driver.breaker.transitions == {OPEN: 2, HALF_OPEN: 1, CLOSED: 1}


def test_bad_probes_reopen_the_circuit_after_all_probes_not_the_first_failure() -> None:
    driver = Driver(open_seconds=30)
    driver.to_half_open()
    driver.breaker.record(driver.now, FAILURE, FAST)
    driver.call(FAILURE)
    driver.call(FAILURE)
    assert driver.breaker.state is HALF_OPEN  # resilience4j waits for every probe
    driver.call(SUCCESS, times=2)
    assert driver.breaker.state is OPEN
    assert driver.seen[-1] == Transition(HALF_OPEN, OPEN, driver.now, failure_rate=0.6, slow_call_rate=0.0)
    reopened = driver.now
    assert not driver.breaker.allow(reopened + 29.9)  # a full wait again, from the reopening
    assert driver.breaker.allow(reopened + 30)


def test_slow_probes_reopen_the_circuit() -> None:
    driver = Driver(slow_call_ms=100, slow_call_rate_threshold=0.6)
    driver.to_half_open()
    driver.breaker.record(driver.now, SUCCESS, 0.5)
    driver.call(SUCCESS, seconds=0.5, times=2)
    driver.call(SUCCESS, times=2)
    assert driver.breaker.state is OPEN  # 3 slow in 5 probes


def test_outcomes_of_calls_allowed_before_the_last_transition_are_dropped() -> None:
    driver = Driver(half_open_calls=2)
    driver.trip()
    for _ in range(50):  # late answers of calls that passed while it was closed
        driver.breaker.record(driver.now, SUCCESS, FAST)
    assert driver.breaker.state is OPEN
    driver.advance(30)
    assert driver.breaker.allow(driver.now)  # the first probe
    for _ in range(5):
        driver.breaker.record(driver.now, FAILURE, FAST)
    assert driver.breaker.state is HALF_OPEN  # the probe failed; the other four had no permit
    assert driver.breaker.allow(driver.now)
    assert not driver.breaker.allow(driver.now)
    driver.breaker.record(driver.now, SUCCESS, FAST)
    assert driver.breaker.state is OPEN  # 1 failure in 2 probes


def test_the_window_slides() -> None:
    driver = Driver(window_calls=10, minimum_calls=10)
    driver.call(FAILURE, times=4)
    driver.call(SUCCESS, times=10)  # the 4 failures leave the window
    driver.call(FAILURE, times=4)
    assert driver.breaker.state is CLOSED  # 4 in the last 10
    driver.call(FAILURE)
    assert driver.breaker.state is OPEN  # 5 in the last 10


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, SUCCESS),
        (InvalidArgumentError("bad input"), CLIENT_ERROR),
        (NotFoundError("no such model"), CLIENT_ERROR),
        (UnavailableError("queue full"), FAILURE),
        (InternalError("model failed"), FAILURE),
        (RuntimeError("unexpected"), FAILURE),
    ],
)
def test_outcome_of_an_error(error: Exception | None, outcome: CallOutcome) -> None:
    assert CallOutcome.of(error) is outcome


def config(parameters: dict[str, str]) -> mc.ModelConfig:
    text = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in parameters.items()
    )
    return text_format.Parse('name: "m"\n' + text, mc.ModelConfig())


DEFAULTS = CircuitBreakerSettings()


def test_no_breaker_unless_the_server_or_the_model_asks() -> None:
    assert settings_from_config(config({"other": "1"}), DEFAULTS) is None
    server = CircuitBreakerSettings(open_seconds=5)
    assert settings_from_config(config({}), server, on_by_default=True) == server


def test_any_key_turns_the_breaker_on_and_the_server_fills_the_rest() -> None:
    server = CircuitBreakerSettings(open_seconds=5, slow_call_ms=250)
    result = settings_from_config(config({"circuit_breaker.minimum_calls": "10"}), server)
    assert result == CircuitBreakerSettings(minimum_calls=10, open_seconds=5, slow_call_ms=250)


def test_every_key_is_read() -> None:
    result = settings_from_config(
        config(
            {
                "circuit_breaker.failure_rate_threshold": "0.25",
                "circuit_breaker.minimum_calls": " 8 ",
                "circuit_breaker.window_calls": "40",
                "circuit_breaker.slow_call_ms": "150.5",
                "circuit_breaker.slow_call_rate_threshold": "0.75",
                "circuit_breaker.open_seconds": "2.5",
                "circuit_breaker.half_open_calls": "3",
            }
        ),
        DEFAULTS,
    )
    assert result == CircuitBreakerSettings(0.25, 8, 40, 150.5, 0.75, 2.5, 3)
    assert result is not None and isinstance(result.minimum_calls, int)


def test_slow_call_ms_off_overrides_the_server_default() -> None:
    server = CircuitBreakerSettings(slow_call_ms=250)
    result = settings_from_config(config({"circuit_breaker.slow_call_ms": "OFF"}), server)
    assert result is not None and result.slow_call_ms is None


@pytest.mark.parametrize(
    ("parameters", "on_by_default", "enabled"),
    [
        ({"circuit_breaker.enabled": "false"}, True, False),
        ({"circuit_breaker.enabled": "False", "circuit_breaker.open_seconds": "5"}, False, False),
        ({"circuit_breaker.enabled": " TRUE "}, False, True),
    ],
)
def test_enabled_decides_when_the_model_sets_it(
    parameters: dict[str, str], on_by_default: bool, enabled: bool
) -> None:
    result = settings_from_config(config(parameters), DEFAULTS, on_by_default=on_by_default)
    assert (result is not None) is enabled


RATE = "a rate above 0 and at most 1"
CALLS = "a whole number of calls, at least 1"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("failure_rate_threshold", "half", "must be a number, got 'half'"),
        ("failure_rate_threshold", "0", RATE),
        ("failure_rate_threshold", "-0.1", RATE),
        ("failure_rate_threshold", "1.01", RATE),
        ("failure_rate_threshold", "nan", RATE),
        ("slow_call_rate_threshold", "0", RATE),
        ("slow_call_rate_threshold", "2", RATE),
        ("minimum_calls", "0", CALLS),
        ("minimum_calls", "2.5", "must be a whole number, got '2.5'"),
        ("minimum_calls", "", "must be a whole number"),
        ("minimum_calls", "101", "'circuit_breaker.minimum_calls' (101) must be at most"),
        ("window_calls", "0", CALLS),
        ("window_calls", "10", "'circuit_breaker.window_calls' (10)"),
        ("half_open_calls", "0", CALLS),
        ("half_open_calls", "-3", CALLS),
        ("slow_call_ms", "0", "milliseconds above 0, or 'off'"),
        ("slow_call_ms", "-5", "milliseconds above 0, or 'off'"),
        ("slow_call_ms", "inf", "milliseconds above 0, or 'off'"),
        ("slow_call_ms", "fast", "must be a number"),
        ("open_seconds", "0", "seconds above 0"),
        ("open_seconds", "-1", "seconds above 0"),
        ("open_seconds", "inf", "seconds above 0"),
        ("enabled", "yes", "must be true or false, got 'yes'"),
    ],
)
def test_a_bad_value_names_its_key_and_the_allowed_range(key: str, value: str, message: str) -> None:
    full_key = f"circuit_breaker.{key}"
    with pytest.raises(InvalidArgumentError) as raised:
        settings_from_config(config({full_key: value}), DEFAULTS)
    assert f"'{full_key}'" in raised.value.message
    assert message in raised.value.message


def test_a_bad_value_is_refused_even_when_the_breaker_is_off() -> None:
    parameters = {"circuit_breaker.enabled": "false", "circuit_breaker.open_seconds": "soon"}
    with pytest.raises(InvalidArgumentError) as raised:
        settings_from_config(config(parameters), DEFAULTS)
    assert "'circuit_breaker.open_seconds' must be a number, got 'soon'" in raised.value.message


def test_an_unknown_key_suggests_the_known_one() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        settings_from_config(config({"circuit_breaker.failure_rate": "0.3"}), DEFAULTS)
    assert "unknown parameters key 'circuit_breaker.failure_rate'" in raised.value.message
    assert "did you mean 'circuit_breaker.failure_rate_threshold'" in raised.value.message


def scrape(text: str) -> dict[str, dict[tuple[str, ...], float]]:
    """Each family's samples by label values (sorted by label name), keyed "<type> <sample name>"."""
    families: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sample.labels[name] for name in sorted(sample.labels))
            families.setdefault(f"{family.type} {sample.name}", {})[key] = sample.value
    return families


def served_breakers() -> list[BreakerFigures]:
    healthy = Driver().breaker
    tripped = Driver()
    tripped.to_half_open()
    tripped.breaker.record(tripped.now, FAILURE, FAST)
    tripped.call(FAILURE, times=4)  # five failed probes: open again
    return [healthy.figures("iris", "1"), tripped.breaker.figures("iris", "2")]


@pytest.mark.parametrize("writer", [generate_latest, render])
def test_the_collector_exposes_state_and_transitions(writer: Callable[[CollectorRegistry], bytes]) -> None:
    registry = CollectorRegistry()
    registry.register(CircuitBreakerCollector(served_breakers))
    text = writer(registry).decode()
    families = scrape(text)
    assert families["gauge conch_circuit_state"] == {("iris", "1"): 0.0, ("iris", "2"): 1.0}
    # labels sorted by name: model, to, version
    assert families["counter conch_circuit_transitions_total"] == {
        ("iris", "closed", "1"): 0.0,
        ("iris", "open", "1"): 0.0,
        ("iris", "half_open", "1"): 0.0,
        ("iris", "closed", "2"): 0.0,
        ("iris", "open", "2"): 2.0,
        ("iris", "half_open", "2"): 1.0,
    }
    assert "# TYPE conch_circuit_transitions_total counter" in text


def test_the_collector_shows_a_half_open_circuit_as_2() -> None:
    driver = Driver()
    driver.to_half_open()
    registry = CollectorRegistry()
    registry.register(CircuitBreakerCollector(lambda: [driver.breaker.figures("m", "3")]))
    families = scrape(generate_latest(registry).decode())
    assert families["gauge conch_circuit_state"] == {("m", "3"): 2.0}
