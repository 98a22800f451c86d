"""Each stream's figures, kept as plain numbers by its consumer and read by the metrics collector and
the status page.

Nothing here talks to a broker: the status page imports this module without redis installed.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from conch.observability.statistics import Histogram

#: Bounds (seconds) of ``conch_stream_latency_seconds``: from ingestion to the result written, which
#: spans a batch's milliseconds to a backlog's minutes.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
#: Seconds of history the status page's records/s is taken over.
RATE_WINDOW_S = 30.0


@dataclass
class StreamState:
    """One input stream read by one model in this process."""

    model: str
    stream: str
    group: str
    results: str
    dead_letter: str
    #: Records answered, by outcome: ``result`` or ``dead_letter``.
    records: Counter[str] = field(default_factory=Counter)
    #: Dead letters by the short class of their reason (``conch.streams.record``'s names).
    dead_letters: Counter[str] = field(default_factory=Counter)
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    #: Pending plus not yet delivered entries of the group, as last read from the broker (None: unknown).
    lag: int | None = None
    broker_up: bool = False
    #: Why reading is paused now ("" when it is not): the batcher's queue, the results stream.
    paused: str = ""
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))

    def answered(self, outcome: str, count: int = 1) -> None:
        """``count`` records acknowledged with ``outcome``."""
        self.records[outcome] += count

    def sample(self, now: float | None = None) -> None:
        """Note the records answered so far, for :meth:`rate` (the consumer calls it every second)."""
        now = time.monotonic() if now is None else now
        self._samples.append((now, sum(self.records.values())))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()

    def rate(self) -> float:
        """Records per second over the last :data:`RATE_WINDOW_S` seconds."""
        if len(self._samples) < 2:
            return 0.0
        (start, first), (end, last) = self._samples[0], self._samples[-1]
        return (last - first) / (end - start) if end > start else 0.0

    def to_json(self) -> dict[str, Any]:
        """What the status page shows: names, lag, rate, outcomes and dead letters by reason."""
        return {
            "model": self.model,
            "stream": self.stream,
            "group": self.group,
            "results": self.results,
            "dead_letter": self.dead_letter,
            "broker_up": self.broker_up,
            "lag": self.lag,
            "records_per_s": round(self.rate(), 2),
            "records": dict(self.records),
            "dead_letters": dict(self.dead_letters),
            "paused": self.paused,
        }


_STATES: WeakKeyDictionary[Any, list[StreamState]] = WeakKeyDictionary()


def stream_states(server: Any) -> list[StreamState]:
    """The streams ``server`` (an :class:`InferenceServer`) reads, in ``streams.yaml``'s order."""
    return _STATES.setdefault(server, [])
