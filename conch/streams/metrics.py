"""The ``conch_stream_*`` families, read from each stream's :class:`StreamState` at scrape time.

- ``conch_stream_lag{model,stream}``: the group's pending and not yet delivered entries (every
  replica reports the group's figure: take ``max`` over replicas, not ``sum``);
- ``conch_stream_records_total{model,stream,outcome}``: ``result`` or ``dead_letter``, acknowledged;
- ``conch_stream_dead_letters_total{model,stream,reason}``: by the short class of the reason;
- ``conch_stream_latency_seconds{model,stream}``: ingestion timestamp to result written;
- ``conch_stream_broker_up{stream}``: 1 while the broker answers this stream's consumer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from conch.streams.record import CONTRACT, INFERENCE, MALFORMED, POISON, TOO_LARGE, UNKNOWN_MODEL
from conch.streams.state import StreamState

OUTCOMES = ("result", "dead_letter")
REASONS = (POISON, CONTRACT, MALFORMED, TOO_LARGE, UNKNOWN_MODEL, INFERENCE)


class StreamCollector(Collector):
    """Exposes every stream this process reads."""

    def __init__(self, states: Callable[[], list[StreamState]]) -> None:
        self._states = states

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "stream"]
        lag = GaugeMetricFamily(
            "conch_stream_lag", "Entries of the input stream pending or not yet delivered", labels=labels
        )
        records = CounterMetricFamily(
            "conch_stream_records", "Input records acknowledged, by outcome", labels=[*labels, "outcome"]
        )
        dead = CounterMetricFamily(
            "conch_stream_dead_letters",
            "Records written to the dead-letter stream",
            labels=[*labels, "reason"],
        )
        latency = HistogramMetricFamily(
            "conch_stream_latency_seconds",
            "Time from a record's ingestion timestamp to its result written",
            labels=labels,
        )
        up = GaugeMetricFamily(
            "conch_stream_broker_up", "Whether the stream's broker answers", labels=["stream"]
        )
        for state in self._states():
            pair = [state.model, state.stream]
            if state.lag is not None:
                lag.add_metric(pair, state.lag)
            for outcome in OUTCOMES:
                records.add_metric([*pair, outcome], state.records[outcome])
            for reason in REASONS:
                dead.add_metric([*pair, reason], state.dead_letters[reason])
            latency.add_metric(pair, state.latency.cumulative(), state.latency.sum)
            up.add_metric([state.stream], 1 if state.broker_up else 0)
        yield from (lag, records, dead, latency, up)
