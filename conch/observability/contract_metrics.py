"""Data contract and data freshness figures, kept per process and read when Prometheus scrapes.

- ``conch_contract_violations_total{model,version,field,rule}``: requests refused by a contract;
- ``conch_contract_unknown_category_total{model,version,field}``: values of a category the encoders
  never saw, served because the pipeline ignores them;
- ``conch_contract_out_of_range_total{model,version,field}``: values outside the training range;
- ``conch_contract_filled_total{model,version,field}``: rows whose missing value took the default;
- ``conch_data_freshness_seconds{model}``: from a request's ingestion timestamp to its answer;
- ``conch_ingestion_timestamp_future_total{model}``: ingestion timestamps ahead of the server's clock.

The server reports a request's :class:`~conch.core.contract_enforcement.ContractOutcome` here; a
request to a model without a contract or lineage reports nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from conch.core.contract_enforcement import ContractOutcome
from conch.observability.statistics import Histogram

#: From a record answered at once (milliseconds) to a backlog drained after an outage (an hour).
FRESHNESS_BUCKETS_S = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    3600.0,
)


class ContractFigures:
    """The process's counts, by label tuple; one dictionary increment per counted event."""

    def __init__(self) -> None:
        self.violations: Counter[tuple[str, str, str, str]] = Counter()
        self.unknown_categories: Counter[tuple[str, str, str]] = Counter()
        self.out_of_range: Counter[tuple[str, str, str]] = Counter()
        self.filled: Counter[tuple[str, str, str]] = Counter()
        self.future: Counter[str] = Counter()
        self.freshness: dict[str, Histogram] = {}

    def outcome(self, model: str, version: str, outcome: ContractOutcome) -> None:
        """Count what enforcing a contract on one request found."""
        for name, rows in outcome.filled.items():
            self.filled[(model, version, name)] += len(rows)
        for name, count in outcome.unknown_categories.items():
            self.unknown_categories[(model, version, name)] += count
        for name, count in outcome.out_of_range.items():
            self.out_of_range[(model, version, name)] += count

    def violation(self, model: str, version: str, field: str, rule: str) -> None:
        self.violations[(model, version, field, rule)] += 1

    def answered(self, model: str, ingested_at: float, now: float) -> float:
        """Record the freshness of an answer to data ingested at ``ingested_at``; returns it (>= 0)."""
        if ingested_at > now:
            self.future[model] += 1
        seconds = max(0.0, now - ingested_at)
        histogram = self.freshness.get(model)
        if histogram is None:
            histogram = self.freshness[model] = Histogram(FRESHNESS_BUCKETS_S)
        histogram.observe(seconds)
        return seconds


#: The serving process's figures (a registry is made per scrape endpoint, figures per process).
FIGURES = ContractFigures()


class ContractCollector(Collector):
    """Turns :data:`FIGURES` (or another :class:`ContractFigures`) into metric families at scrape time."""

    def __init__(self, figures: ContractFigures = FIGURES) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        figures = self._figures
        field_labels = ["model", "version", "field"]
        counters: list[tuple[str, str, list[str], Counter[Any]]] = [
            (
                "conch_contract_violations",
                "Requests refused by their model's data contract, by field and rule",
                [*field_labels, "rule"],
                figures.violations,
            ),
            (
                "conch_contract_unknown_category",
                "Values of a category the fitted encoders never saw, served as the pipeline ignores them",
                field_labels,
                figures.unknown_categories,
            ),
            (
                "conch_contract_out_of_range",
                "Values outside the range seen in training, by field",
                field_labels,
                figures.out_of_range,
            ),
            (
                "conch_contract_filled",
                "Rows whose missing value took the data contract's default, by field",
                field_labels,
                figures.filled,
            ),
        ]
        for name, documentation, labels, counts in counters:
            family = CounterMetricFamily(name, documentation, labels=labels)
            for key, count in sorted(counts.items()):
                family.add_metric(list(key), count)
            yield family
        future = CounterMetricFamily(
            "conch_ingestion_timestamp_future",
            "Requests whose ingestion timestamp was ahead of the server's clock (freshness counted as 0)",
            labels=["model"],
        )
        for model, count in sorted(figures.future.items()):
            future.add_metric([model], count)
        yield future
        freshness = HistogramMetricFamily(
            "conch_data_freshness_seconds",
            "Time from a request's ingestion timestamp to its answer",
            labels=["model"],
        )
        for model, histogram in sorted(figures.freshness.items()):
            freshness.add_metric([model], histogram.cumulative(), histogram.sum)
        yield freshness
