"""Prometheus figures of the circuit breakers, read from the breakers at scrape time.

An open circuit changes what is served, so dashboards and alerts need to see it: the state of each
model version's circuit as a gauge, and its transitions as a counter (``rate()`` of the ``to="open"``
series is how often a version trips). The names are conch's own, so unlike Triton's ``nv_*`` counters
the transitions counter carries prometheus_client's ``_total`` suffix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class BreakerFigures:
    """One served version's circuit breaker, as its metrics show it."""

    model: str
    version: str
    #: 0 closed, 1 open, 2 half-open.
    state: int
    #: Each state's label to the times the breaker entered it, every state included (zeros too, so
    #: ``rate()`` sees a version's first trip).
    transitions: Mapping[str, int]


Breakers = Callable[[], Iterable[BreakerFigures]]
"""Returns the figures of every served version that has a breaker."""


class CircuitBreakerCollector(Collector):
    """Exposes ``conch_circuit_state`` and ``conch_circuit_transitions_total`` per model version."""

    def __init__(self, breakers: Breakers) -> None:
        self._breakers = breakers

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "conch_circuit_state",
            "State of the model version's circuit breaker: 0 closed, 1 open, 2 half-open",
            labels=["model", "version"],
        )
        transitions = CounterMetricFamily(
            "conch_circuit_transitions",
            "Circuit breaker state changes, by the state entered",
            labels=["model", "version", "to"],
        )
        for breaker in self._breakers():
            state.add_metric([breaker.model, breaker.version], breaker.state)
            for to, count in breaker.transitions.items():
                transitions.add_metric([breaker.model, breaker.version, to], count)
        yield state
        yield transitions
