"""The releases' figures at scrape time: weights, states, shadow comparisons, drift and rollbacks.

``conch_shadow_*``, ``conch_release_answers_total`` and ``conch_release_server_errors_total`` use
exactly the names and the drift buckets that ``gate.judge: prometheus`` queries
(:mod:`conch.release.prometheus_judge`), so every replica judges from what every replica exposes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from conch.release.prometheus_judge import DRIFT_SCORE_BUCKETS
from conch.release.state import ReleaseState

if TYPE_CHECKING:
    from conch.release.controller import ReleaseController


class ReleaseCollector(Collector):
    """Reads one server's release controller when Prometheus scrapes."""

    def __init__(self, releases: ReleaseController) -> None:
        self._releases = releases

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
        for model, held in sorted(self._releases.releases.items()):
            for version, share in sorted(held.release.weights().items()):
                weight.add_metric([model, str(version)], share)
            for each in ReleaseState:
                state.add_metric([model, each.value], 1 if held.release.state is each else 0)
            compared.add_metric([model], held.compared)
            agreements.add_metric([model], held.agreements)
            dropped.add_metric([model], held.dropped)
            rollbacks.add_metric([model], held.rollbacks)
            for version in (held.release.baseline, held.release.spec.candidate):
                answers.add_metric([model, str(version)], held.answers[version])
                server_errors.add_metric([model, str(version)], held.server_errors[version])
            cumulative, buckets = 0, []
            for bound, count in zip([*DRIFT_SCORE_BUCKETS, float("inf")], held.drift_buckets, strict=True):
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
        book, served = self._releases.book, self._releases.repository.models
        for model in sorted(set(book.models()) | served.keys()):
            flags = dict.fromkeys(served[model].versions, 0) if model in served else {}
            flags |= dict.fromkeys(book.of(model).rejected, 1)
            for version, flag in sorted(flags.items()):
                rejected.add_metric([model, str(version)], flag)
        return rejected
