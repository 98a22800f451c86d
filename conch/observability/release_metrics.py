"""The releases' figures at scrape time: weights, states, shadow comparisons, drift and rollbacks.

``conch_shadow_*``, ``conch_release_answers_total`` and ``conch_release_server_errors_total`` use
exactly the names and the drift buckets that ``gate.judge: prometheus`` queries
(:mod:`conch.release.prometheus_judge`), so every replica judges from what every replica exposes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class ReleaseFigures:
    """One model's release as its metrics show it (:mod:`conch.release.metric_figures` reads them)."""

    model: str
    #: Version to the percent of unversioned requests it gets.
    weights: Mapping[int, float]
    #: Every release state's name to 1 for the current one, 0 for the others.
    states: Mapping[str, int]
    compared: int
    agreements: int
    dropped: int
    rollbacks: int
    #: Baseline and candidate to the answers the gate counts, and their server errors.
    answers: Mapping[int, int]
    server_errors: Mapping[int, int]
    #: The drift score histogram: each bucket's upper bound (the last +Inf) and count (not cumulative).
    drift_bounds: tuple[float, ...]
    drift_counts: tuple[int, ...]
    drift_sum: float


#: Every model with a release, its figures.
Releases = Callable[[], Iterable[ReleaseFigures]]
#: Model to version to 1 for a version a rollback rejected and nobody re-admitted, 0 for one served.
RejectedVersions = Callable[[], Mapping[str, Mapping[int, int]]]


class ReleaseCollector(Collector):
    """Reads one server's releases when Prometheus scrapes."""

    def __init__(self, releases: Releases, rejected: RejectedVersions) -> None:
        self._releases = releases
        self._rejected_versions = rejected

    def collect(self) -> Iterator[Metric]:
        weight = GaugeMetricFamily(
            "conch_release_weight",
            "Percent of unversioned requests a release sends to a version",
            labels=["model", "version"],
        )
        state = GaugeMetricFamily(
            "conch_release_state",
            "1 for a release's current state, 0 for the others",
            labels=["model", "state"],
        )
        compared = CounterMetricFamily(
            "conch_shadow_compared", "Requests compared on both versions", labels=["model"]
        )
        agreements = CounterMetricFamily(
            "conch_shadow_agreements", "Compared requests whose predictions agreed", labels=["model"]
        )
        dropped = CounterMetricFamily(
            "conch_shadow_dropped", "Shadow copies dropped because too many were running", labels=["model"]
        )
        rollbacks = CounterMetricFamily("conch_release_rollbacks", "Releases rolled back", labels=["model"])
        answers = CounterMetricFamily(
            "conch_release_answers",
            "Answers of a release's version the gate counts, shadow copies included",
            labels=["model", "version"],
        )
        server_errors = CounterMetricFamily(
            "conch_release_server_errors",
            "Of those answers, the server errors",
            labels=["model", "version"],
        )
        drift = HistogramMetricFamily(
            "conch_shadow_drift_score",
            "1 - cosine of the two versions' float outputs, per compared request",
            labels=["model"],
        )
        for held in self._releases():
            model = held.model
            for version, share in sorted(held.weights.items()):
                weight.add_metric([model, str(version)], share)
            for name, flag in held.states.items():
                state.add_metric([model, name], flag)
            compared.add_metric([model], held.compared)
            agreements.add_metric([model], held.agreements)
            dropped.add_metric([model], held.dropped)
            rollbacks.add_metric([model], held.rollbacks)
            for version, count in held.answers.items():
                answers.add_metric([model, str(version)], count)
                server_errors.add_metric([model, str(version)], held.server_errors[version])
            cumulative, buckets = 0, []
            for bound, count in zip(held.drift_bounds, held.drift_counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            drift.add_metric([model], buckets, held.drift_sum)
        yield from (weight, state, compared, agreements, dropped, rollbacks, answers, server_errors, drift)
        yield self._rejected()

    def _rejected(self) -> Metric:
        """``conch_model_version_rejected``: 1 per version a rollback rejected and nobody re-admitted,
        0 for each version served."""
        rejected = GaugeMetricFamily(
            "conch_model_version_rejected",
            "1 for a version a release rolled back, kept out of serving until re-admitted; 0 for one served",
            labels=["model", "version"],
        )
        for model, flags in sorted(self._rejected_versions().items()):
            for version, flag in sorted(flags.items()):
                rejected.add_metric([model, str(version)], flag)
        return rejected
