"""A log-bucketed latency sketch: any quantile within 0.5%, in a few hundred integers.

Latencies go into a log-bucketed sketch (:class:`LatencySketch`, DDSketch's idea): bucket
bounds grow by a factor ``gamma``, so any quantile is known within :data:`LATENCY_RELATIVE_ERROR`
(0.5%) of a true sample value, whatever the distribution and however many requests, in a few hundred
integers; its buckets are also the samples of the sequential latency test. A reservoir would need
thousands of stored values for that; Prometheus's buckets (a factor 2 to 2.5 apart) are much coarser.
"""

from __future__ import annotations

import math

from conch.release.sequential import LatencyHistogram

#: Largest relative error of a quantile read from :class:`LatencySketch`.
LATENCY_RELATIVE_ERROR = 0.005
_GAMMA = (1 + LATENCY_RELATIVE_ERROR) / (1 - LATENCY_RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
#: Latencies are clamped to this range, which bounds the sketch to about 2,200 buckets.
_MIN_SECONDS, _MAX_SECONDS = 1e-6, 3600.0


class LatencySketch:
    """Counts of latencies in buckets ``(gamma**(i-1), gamma**i]``; quantiles within 0.5%."""

    __slots__ = ("_buckets", "count")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0

    def observe(self, seconds: float) -> None:
        """Count one latency."""
        clamped = min(max(seconds, _MIN_SECONDS), _MAX_SECONDS)
        index = math.ceil(math.log(clamped) / _LOG_GAMMA)
        self._buckets[index] = self._buckets.get(index, 0) + 1
        self.count += 1

    def plus(self, other: LatencySketch) -> LatencySketch:
        """A sketch of both sketches' latencies."""
        both = LatencySketch()
        both._buckets = dict(self._buckets)
        for index, count in other._buckets.items():
            both._buckets[index] = both._buckets.get(index, 0) + count
        both.count = self.count + other.count
        return both

    def quantile(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile (the ``ceil(q * count)``-th smallest), None when empty."""
        if self.count == 0:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self._buckets):
            seen += self._buckets[index]
            if seen >= rank:
                break
        # The point of the bucket whose relative distance to both bounds is LATENCY_RELATIVE_ERROR.
        return 2 * _GAMMA**index / (_GAMMA + 1)

    def indices(self) -> tuple[int, int] | None:
        """The lowest and highest bucket index holding a latency, None when empty."""
        return (min(self._buckets), max(self._buckets)) if self._buckets else None

    def histogram(self, low: int, high: int) -> LatencyHistogram:
        """The counts of buckets ``low..high`` as contiguous buckets, for the latency test."""
        bounds = tuple(_GAMMA**index for index in range(low, high + 1))
        counts = tuple(float(self._buckets.get(index, 0)) for index in range(low, high + 1))
        return LatencyHistogram(_GAMMA ** (low - 1), bounds, counts)
