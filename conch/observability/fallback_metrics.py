"""``conch_fallback_total{model,version,level,reason}``: the answers a fallback gave, by level and reason.

The router counts each fallback answer in a plain ``Counter``; this collector turns it into the family
at scrape time, so an answer costs one dictionary increment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class FallbackCollector(Collector):
    """Reads ``(model, version, level, reason) -> answers`` when Prometheus scrapes."""

    def __init__(self, counts: Callable[[], Counter[tuple[str, str, str, str]]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "conch_fallback",
            "Answers given by a fallback (MODEL, CPU or BUSINESS), by reason",
            labels=["model", "version", "level", "reason"],
        )
        for labels, answers in sorted(self._counts().items()):
            family.add_metric(list(labels), answers)
        yield family
