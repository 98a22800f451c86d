"""A circuit breaker per model version, with resilience4j's count-based semantics.

A version that keeps failing should fail fast (503, or the fallback) instead of holding every caller for
its full timeout, and should get traffic back on its own once it recovers. This module decides when; it
has no clock, no event loop, no logging and no metrics. Every method takes ``now`` (seconds of a
monotonic clock, ``time.monotonic()`` in the driver), so the rules are tested with a fake clock, and each
state change is handed to ``on_transition`` and counted in ``transitions`` for the driver to log and
export.

The rules, as resilience4j's ``CircuitBreaker`` with a ``COUNT_BASED`` sliding window:

- **Closed**: every call passes. The outcomes of the last ``window_calls`` calls are kept. Once at least
  ``minimum_calls`` are in the window, the circuit opens when the failure rate (server failures / calls)
  is at or above ``failure_rate_threshold``, or, with ``slow_call_ms`` set, when the slow-call rate
  (calls that took longer than ``slow_call_ms``, failed or not / calls) is at or above
  ``slow_call_rate_threshold``.
- Client errors (4xx: a malformed request, an unknown input, a rate limit) are the caller's fault. They
  never count, not even as calls, so a flood of bad requests neither opens a circuit nor dilutes the
  failure rate of good ones.
- **Open**: every call is refused, for ``open_seconds``. The first call after that moves the circuit to
  half-open (there is no timer: as in resilience4j without ``automaticTransitionFromOpenToHalfOpen``).
- **Half-open**: ``half_open_calls`` probe calls pass, the rest are refused. As resilience4j does, and
  unlike Hystrix's single probe, the breaker waits for *all* ``half_open_calls`` probe outcomes before it
  decides; it does not reopen at the first failed probe. Then, over the probes only: a failure rate or
  slow-call rate at or above its threshold opens the circuit again for another ``open_seconds``;
  otherwise it closes, with an empty window.
- Each transition starts afresh: opening clears the window, closing starts an empty one.

The driver records every allowed call exactly once. A call that did not run or was cancelled because
its caller went away is recorded as :attr:`CallOutcome.CLIENT_ERROR`, which in half-open hands its probe
permit back. A probe that is never recorded holds its permit for ever (resilience4j's issue #903): the
driver's inference timeout bounds that. Outcomes that arrive while the circuit is open, or in half-open
beyond the permits handed out, belong to calls allowed before the last transition and are dropped.

One breaker serves one event loop: it is not thread-safe.
"""

from __future__ import annotations

import enum
import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import ConchError, InvalidArgumentError, did_you_mean
from conch.observability.circuit_metrics import BreakerFigures


class CircuitState(enum.IntEnum):
    """A circuit's state; the value is what the ``conch_circuit_state`` gauge shows."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2

    @property
    def label(self) -> str:
        """The state's name in metric labels and log fields: ``closed``, ``open``, ``half_open``."""
        return self.name.lower()


class CallOutcome(enum.Enum):
    """How one call through the breaker ended."""

    SUCCESS = "success"
    FAILURE = "failure"  # the server's fault: a 5xx, a model or device error, a timeout
    CLIENT_ERROR = "client_error"  # the caller's fault (4xx), or the call never ran: not a call at all

    @classmethod
    def of(cls, error: Exception | None) -> CallOutcome:
        """The outcome of a call that raised ``error`` (``None``: it succeeded).

        A :class:`ConchError` below 500 is the caller's; anything else, including an unexpected
        exception, is the server's.
        """
        if error is None:
            return cls.SUCCESS
        if isinstance(error, ConchError) and error.kind.http_status < 500:
            return cls.CLIENT_ERROR
        return cls.FAILURE


@dataclass(frozen=True)
class CircuitBreakerSettings:
    """One breaker's thresholds; the defaults are resilience4j's, tuned for a server.

    Out-of-range values raise :class:`InvalidArgumentError` naming the ``circuit_breaker.*`` key, so a
    bad ``config.pbtxt`` fails its model's load with a message saying what to fix.
    """

    failure_rate_threshold: float = 0.5
    minimum_calls: int = 20
    window_calls: int = 100
    slow_call_ms: float | None = None  # None: slow calls are not counted
    slow_call_rate_threshold: float = 1.0
    open_seconds: float = 30.0
    half_open_calls: int = 5

    def __post_init__(self) -> None:
        problem = _out_of_range(_values_of(self), IN_PARAMETERS)
        if problem is not None:
            raise problem


@dataclass(frozen=True)
class KeyNames:
    """How a message names a breaker setting: as a model's ``parameters`` key (``IN_PARAMETERS``), or
    as a key of ``conch serve --circuit-breaker-config`` (``noun`` and ``prefix`` empty)."""

    noun: str = ""
    prefix: str = ""

    def key(self, name: str) -> str:
        return f"'{self.prefix}{name}'"

    def first(self, name: str) -> str:
        return f"{self.noun}{self.key(name)}"


def _values_of(settings: CircuitBreakerSettings) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in fields(CircuitBreakerSettings)}


def _out_of_range(settings: dict[str, Any], names: KeyNames) -> InvalidArgumentError | None:
    """What is wrong with ``settings`` (field name to value), named as ``names`` says; None when every
    value is in range."""

    def wrong(name: str, value: object, allowed: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{names.first(name)} must be {allowed}, got {value}")

    for name in ("failure_rate_threshold", "slow_call_rate_threshold"):
        if not 0 < settings[name] <= 1:  # NaN fails this too
            return wrong(name, settings[name], "a rate above 0 and at most 1")
    for name in ("minimum_calls", "window_calls", "half_open_calls"):
        if settings[name] < 1:
            return wrong(name, settings[name], "a whole number of calls, at least 1")
    if settings["minimum_calls"] > settings["window_calls"]:
        return InvalidArgumentError(
            f"{names.first('minimum_calls')} ({settings['minimum_calls']}) must be at most "
            f"{names.key('window_calls')} ({settings['window_calls']}): the window holds the calls counted"
        )
    slow = settings["slow_call_ms"]
    if slow is not None and not (math.isfinite(slow) and slow > 0):
        return wrong("slow_call_ms", slow, "milliseconds above 0, or 'off'")
    if not (math.isfinite(settings["open_seconds"]) and settings["open_seconds"] > 0):
        return wrong("open_seconds", settings["open_seconds"], "seconds above 0")
    return None


@dataclass(frozen=True)
class Transition:
    """One state change, for the driver to log and count.

    ``failure_rate`` and ``slow_call_rate`` are the figures over the calls that decided it (the window,
    or the probes); ``None`` for the timed move from open to half-open.
    """

    from_state: CircuitState
    to_state: CircuitState
    at: float
    failure_rate: float | None = None
    slow_call_rate: float | None = None


class CircuitBreaker:
    """The state of one model version's circuit, changed only by :meth:`allow` and :meth:`record`."""

    def __init__(
        self,
        settings: CircuitBreakerSettings,
        on_transition: Callable[[Transition], None] | None = None,
    ) -> None:
        self.settings = settings
        self.on_transition = on_transition
        self.transitions: Counter[CircuitState] = Counter()
        self._state = CircuitState.CLOSED
        self._opened_at = 0.0
        # (failed, slow) per counted call; closed: the sliding window, half-open: the probes.
        self._calls: deque[tuple[bool, bool]] = deque(maxlen=settings.window_calls)
        self._failures = 0
        self._slow = 0
        self._probes_out = 0  # half-open permits handed out and not yet recorded

    @property
    def state(self) -> CircuitState:
        """The state last decided; an open circuit whose wait is over stays open until the next call."""
        return self._state

    def allow(self, now: float) -> bool:
        """Whether a call may pass now; ``False`` means fail fast (503) or take the fallback."""
        if self._state is CircuitState.OPEN:
            if now - self._opened_at < self.settings.open_seconds:
                return False
            self._move(CircuitState.HALF_OPEN, now)
        if self._state is CircuitState.HALF_OPEN:
            if self._probes_out + len(self._calls) >= self.settings.half_open_calls:
                return False
            self._probes_out += 1
        return True

    def record(self, now: float, outcome: CallOutcome, seconds: float) -> None:
        """Count the outcome of an allowed call that took ``seconds``, and change state if it decides."""
        if self._state is CircuitState.OPEN:
            return
        if self._state is CircuitState.HALF_OPEN:
            if self._probes_out == 0:
                return
            self._probes_out -= 1
        if outcome is CallOutcome.CLIENT_ERROR:
            return
        slow_ms = self.settings.slow_call_ms
        self._count(outcome is CallOutcome.FAILURE, slow_ms is not None and seconds * 1000 > slow_ms)
        enough = (
            self.settings.minimum_calls
            if self._state is CircuitState.CLOSED
            else self.settings.half_open_calls
        )
        if len(self._calls) < enough:
            return
        failure_rate, slow_rate = self._failures / len(self._calls), self._slow / len(self._calls)
        # With slow_call_ms off no call is slow, and a slow rate of 0 is below every threshold.
        if (
            failure_rate >= self.settings.failure_rate_threshold
            or slow_rate >= self.settings.slow_call_rate_threshold
        ):
            self._move(CircuitState.OPEN, now, failure_rate, slow_rate)
        elif self._state is CircuitState.HALF_OPEN:
            self._move(CircuitState.CLOSED, now, failure_rate, slow_rate)

    def figures(self, model: str, version: str) -> BreakerFigures:
        """This breaker's state and transitions as the metrics show them."""
        transitions = {to.label: self.transitions[to] for to in CircuitState}
        return BreakerFigures(model, version, self.state.value, transitions)

    def _count(self, failed: bool, slow: bool) -> None:
        if len(self._calls) == self._calls.maxlen:
            old_failed, old_slow = self._calls[0]
            self._failures -= old_failed
            self._slow -= old_slow
        self._calls.append((failed, slow))
        self._failures += failed
        self._slow += slow

    def _move(
        self,
        to: CircuitState,
        now: float,
        failure_rate: float | None = None,
        slow_rate: float | None = None,
    ) -> None:
        transition = Transition(self._state, to, now, failure_rate, slow_rate)
        self._state = to
        if to is CircuitState.OPEN:
            self._opened_at = now
        size = self.settings.half_open_calls if to is CircuitState.HALF_OPEN else self.settings.window_calls
        self._calls = deque(maxlen=size)
        self._failures = self._slow = self._probes_out = 0
        self.transitions[to] += 1
        if self.on_transition is not None:
            self.on_transition(transition)


PREFIX = "circuit_breaker."
ENABLED_KEY = PREFIX + "enabled"
#: How a model's config names its breaker settings: ``parameters 'circuit_breaker.window_calls'``.
IN_PARAMETERS = KeyNames("parameters ", PREFIX)


def settings_from_config(
    config: mc.ModelConfig, defaults: CircuitBreakerSettings, *, on_by_default: bool = False
) -> CircuitBreakerSettings | None:
    """A model version's breaker settings from its ``parameters``, or ``None`` when it has no breaker.

    ``defaults`` are the server's ``--circuit-breaker-*`` flags, and ``on_by_default`` its
    ``--circuit-breaker`` flag. The rule: ``circuit_breaker.enabled`` (``true``/``false``) decides when
    the model sets it; otherwise the model has a breaker when the server turns breakers on, or when the
    model sets any ``circuit_breaker.*`` key (setting a threshold means wanting the breaker). Every key is
    checked even when the breaker ends up off, so a typo never waits for the day it is turned on.
    """
    keys = [key for key in config.parameters if key.startswith(PREFIX)]
    values = {key: config.parameters[key].string_value for key in keys if key != ENABLED_KEY}
    settings = settings_with(defaults, values)
    if ENABLED_KEY in config.parameters:
        enabled = _parse_flag(ENABLED_KEY, config.parameters[ENABLED_KEY].string_value)
    else:
        enabled = on_by_default or bool(keys)
    return settings if enabled else None


def settings_with(
    defaults: CircuitBreakerSettings, values: dict[str, str], names: KeyNames | None = None
) -> CircuitBreakerSettings:
    """``defaults`` with ``values`` (each key, as ``names`` writes it, to its text) in their place,
    checked; a wrong key or value raises InvalidArgumentError naming it as ``names`` does."""
    names = names or IN_PARAMETERS
    settings = {f.name for f in fields(CircuitBreakerSettings)}
    overrides: dict[str, Any] = {}  # field name -> parsed value
    for key, text in values.items():
        name = key.removeprefix(names.prefix)
        if not key.startswith(names.prefix) or name not in settings:
            known = [f"{names.prefix}{known}" for known in ("enabled", *sorted(settings))]
            raise InvalidArgumentError(f"unknown {names.noun}key '{key}'{did_you_mean(key, known)}")
        overrides[name] = _parse(name, text, names)
    problem = _out_of_range(_values_of(defaults) | overrides, names)
    if problem is not None:
        raise problem
    return replace(defaults, **overrides)


def _parse(name: str, text: str, names: KeyNames) -> float | int | None:
    value = text.strip()
    if name == "slow_call_ms" and value.lower() == "off":
        return None
    whole = name in ("minimum_calls", "window_calls", "half_open_calls")
    try:
        return int(value) if whole else float(value)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise InvalidArgumentError(f"{names.first(name)} must be {kind}, got '{text}'") from None


def _parse_flag(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"parameters '{key}' must be true or false, got '{text}'")
    return value == "true"
