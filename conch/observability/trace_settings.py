"""Triton's trace extension, answered over conch's OpenTelemetry traces: which requests are traced,
changed while the server runs, for the whole server or one model.

Why: ``perf_analyzer --trace-level/--trace-rate/--trace-count`` and tritonclient's
``update_trace_settings`` set these through ``/v2[/models/{m}]/trace/setting`` and gRPC
``TraceSetting``; without the API, perf_analyzer refused to start against conch. The settings mean
here what they mean on Triton in its ``opentelemetry`` trace mode:

- ``trace_level``: ``["TIMESTAMPS"]`` traces (conch's spans are the request's stages and their
  times), ``["OFF"]`` traces nothing. ``TENSORS`` is refused: a span never holds tensor contents.
- ``trace_rate``: one request in N may start a trace, counted per model (or for the server). It thins
  what the OpenTelemetry sampler keeps (``--trace-sample-ratio``, ``OTEL_TRACES_SAMPLER``), which
  decides after it. 1 at start, so the sampler alone decides until a client says otherwise.
- ``trace_count``: how many more traces to take; -1 for no limit. Each trace taken counts it down.
- ``trace_file`` and ``log_frequency`` belong to Triton's trace files. conch exports spans over OTLP
  as they end, so a file is refused (403: no client names a path the server writes, as with
  ``log_file``), and a log frequency other than 0 with a 400.

A model's settings are its own values where a client set them and the server's otherwise; ``null``
(an empty gRPC value) clears one, back to the server's value, or for the server's own settings back
to those it started with. Turning traces on needs an exporter, set when the server starts
(``--trace-otlp-endpoint``): without one the level stays ``OFF`` and a request for more is refused.

These are the rules only; :mod:`conch.observability.tracing` consults them as each request's server
span starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conch.core.errors import InvalidArgumentError, PermissionDeniedError

#: The attribute naming the model on a request's spans (the settings are kept per model by it).
MODEL_ATTRIBUTE = "conch.model.name"
LEVEL, RATE, COUNT = "trace_level", "trace_rate", "trace_count"
FILE, LOG_FREQUENCY, MODE = "trace_file", "log_frequency", "trace_mode"
_KNOWN = (LEVEL, RATE, COUNT, FILE, LOG_FREQUENCY)
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1
NO_EXPORTER = (
    "traces need an exporter, set when conch serve starts: --trace-otlp-endpoint URL (or "
    "OTEL_EXPORTER_OTLP_ENDPOINT); this server was started without one, so trace_level stays OFF"
)


@dataclass
class TraceSetting:
    """The values a model (or the server) set; absent ones are inherited."""

    values: dict[str, Any] = field(default_factory=dict)
    #: Requests seen since the last one that could start a trace (``trace_rate``).
    seen: int = 0


class LiveTraceSettings:
    """The server's trace settings and each model's own, and the decision they make per request."""

    def __init__(self, exporting: bool) -> None:
        #: Whether spans have somewhere to go; without it nothing can be traced.
        self.exporting = exporting
        self._started = {LEVEL: exporting, RATE: 1, COUNT: -1}
        self._server = TraceSetting(dict(self._started))
        self._models: dict[str, TraceSetting] = {}

    # The request path.

    def admits(self, model: str) -> bool:
        """Whether a request to ``model`` may start a trace now (the sampler still decides after)."""
        own = self._models.get(model)
        if own is None:
            return self._admits(self._server, self._server.values)
        counter = own if RATE in own.values else self._server  # a rate of its own, a count of its own
        return self._admits(counter, self._server.values | own.values)

    def _admits(self, counter: TraceSetting, values: Mapping[str, Any]) -> bool:
        if not values[LEVEL] or values[COUNT] == 0:
            return False
        counter.seen += 1
        if counter.seen < values[RATE]:
            return False
        counter.seen = 0
        return True

    def taken(self, model: str) -> None:
        """A trace of ``model`` started: one less to take where a count is set."""
        own = self._models.get(model)
        holder = own if own is not None and COUNT in own.values else self._server
        if holder.values[COUNT] > 0:
            holder.values[COUNT] -= 1

    # The API.

    def settings(self, model: str = "") -> dict[str, Any]:
        """The settings in Triton's JSON form: a model's, or the server's when ``model`` is empty."""
        values = dict(self._server.values)
        own = self._models.get(model) if model else None
        if own is not None:
            values.update(own.values)
        return {
            LEVEL: ["TIMESTAMPS"] if values[LEVEL] else ["OFF"],
            RATE: str(values[RATE]),
            COUNT: str(values[COUNT]),
            MODE: "opentelemetry",
        }

    def update(self, changes: Mapping[str, Any], model: str = "") -> dict[str, Any]:
        """Apply ``changes`` (a value, or None to clear it) and answer the settings that result."""
        parsed = {
            # null resets a known setting; an unknown name is refused whatever its value
            name: None if value is None and name in (*_KNOWN, MODE) else _parse(name, value)
            for name, value in changes.items()
            if name not in (LOG_FREQUENCY, MODE) or _read_only(name, value)
        }
        if parsed.get(LEVEL) and not self.exporting:
            raise InvalidArgumentError(NO_EXPORTER)
        if model:
            own = self._models.setdefault(model, TraceSetting())
            for name, value in parsed.items():
                if value is None:
                    own.values.pop(name, None)
                else:
                    own.values[name] = value
            if not own.values:
                del self._models[model]
        else:
            for name, value in parsed.items():
                self._server.values[name] = self._started[name] if value is None else value
        return self.settings(model)


def _parse(name: str, value: Any) -> Any:
    """A setting's value as conch keeps it, or the error that says what to send instead."""
    if name == FILE:
        raise PermissionDeniedError(
            "conch does not write traces to a file named over the API; it exports spans over OTLP "
            "to the endpoint set when it starts (--trace-otlp-endpoint)"
        )
    if name == LEVEL:
        return _level(value)
    if name == RATE:
        return _whole(name, value, 1, _UINT32_MAX, "1 traces every request the sampler keeps")
    if name == COUNT:
        return _whole(name, value, -1, _INT32_MAX, "-1 for no limit")
    raise InvalidArgumentError(f"unknown trace setting '{name}'; the settings are {', '.join(_KNOWN)}")


def _read_only(name: str, value: Any) -> bool:
    """Checks ``log_frequency`` (only 0) or ``trace_mode`` (only opentelemetry, as a GET answers it, so
    a client may post back what it read); None passes too. False: neither changes anything here."""
    if value is None:
        return False
    if name == MODE:
        if (value[0] if isinstance(value, list) and len(value) == 1 else value) != "opentelemetry":
            raise InvalidArgumentError("conch traces in Triton's opentelemetry trace mode only")
    elif _whole(LOG_FREQUENCY, value, 0, _UINT32_MAX, "") != 0:
        raise InvalidArgumentError(
            "log_frequency applies to Triton's trace files; conch exports each span over OTLP as it "
            "ends, so only 0 is accepted"
        )
    return False


def _level(value: Any) -> bool:
    levels = [value] if isinstance(value, str) else value
    if not isinstance(levels, list) or not levels or not all(isinstance(v, str) for v in levels):
        raise InvalidArgumentError('trace_level must be a list of levels: ["OFF"] or ["TIMESTAMPS"]')
    if "OFF" in levels:
        if len(levels) > 1:
            raise InvalidArgumentError("trace_level OFF cannot be given with another level")
        return False
    unknown = sorted(set(levels) - {"TIMESTAMPS"})
    if unknown:
        raise InvalidArgumentError(
            f"trace_level {', '.join(unknown)} is not served: conch's spans record each stage's "
            'timestamps, never tensor contents; use ["TIMESTAMPS"] or ["OFF"]'
        )
    return True


def _whole(name: str, value: Any, lowest: int, highest: int, hint: str) -> int:
    """A whole number sent as a string (Triton's form) or as a JSON number."""
    number: int | None = None
    if isinstance(value, list) and len(value) == 1:  # gRPC carries every value as a list of strings
        value = value[0]
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) <= 20 and value.strip().lstrip("-").isdigit():
        number = int(value)
    if number is None or not lowest <= number <= highest:
        advice = f" ({hint})" if hint else ""
        raise InvalidArgumentError(
            f"{name} must be a whole number from {lowest} to {highest}{advice}, got {value!r}"[:300]
        )
    return number
