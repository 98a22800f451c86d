"""``judge: prometheus``: the PromQL each replica runs, and the gate's figures read from the API's JSON.

The answers below have the shape of ``/api/v1/query``'s ``data.result`` as Prometheus 2.x returns it
(values as strings, ``NaN`` from a ``histogram_quantile`` without data, ``+Inf`` as a bucket bound).
``tests/integration/test_release_prometheus_judge.py`` runs the same queries on a real Prometheus.
"""

from __future__ import annotations

import math
import socket
from typing import Any

import pytest

from conch.release.gate import GateLimits, judge
from conch.release.prometheus_judge import (
    DRIFT_SCORE_BUCKETS,
    PrometheusClient,
    PrometheusUnavailableError,
    figures_from_prometheus,
    prometheus_queries,
)
from conch.release.sequential import compare_latency

NOW = 1_700_000_000.123


def sample(value: str, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [NOW, value]}


def drift_buckets(cumulative: dict[str, str]) -> list[dict[str, Any]]:
    return [sample(count, le=bound) for bound, count in cumulative.items()]


ANSWERS: dict[str, list[dict[str, Any]]] = {
    "baseline_answers": [sample("600.5")],
    "baseline_server_errors": [sample("0")],
    "baseline_p95": [sample("0.004875")],
    "candidate_answers": [sample("600")],
    "candidate_server_errors": [sample("30")],
    "candidate_p95": [sample("0.04875")],
    "compared": [sample("400")],
    "agreements": [sample("380")],
    "drift_scored": [sample("410")],
    "drift_buckets": drift_buckets({"0.01": "380", "0.25": "380", "0.3": "390", "0.5": "410", "+Inf": "410"}),
    # Latency buckets (cumulative), a factor 2 to 2.5 apart as conch exports them.
    "baseline_latency": drift_buckets({"0.001": "100", "0.0025": "500", "0.005": "600.5", "+Inf": "600.5"}),
    "candidate_latency": drift_buckets({"0.001": "0", "0.0025": "200", "0.005": "560", "+Inf": "570"}),
}


def test_queries_name_conch_metrics_with_model_and_version() -> None:
    queries = prometheus_queries("iris", "1", "2", 90)
    assert queries["baseline_answers"] == (
        'sum(increase(conch_release_answers_total{model="iris",version="1"}[90000ms]))'
    )
    assert queries["candidate_server_errors"] == (
        'sum(increase(conch_release_server_errors_total{model="iris",version="2"}[90000ms]))'
    )
    assert queries["candidate_p95"] == (
        "histogram_quantile(0.95, sum by (le) "
        '(rate(conch_inference_request_duration_seconds_bucket{model="iris",version="2"}[90000ms])))'
    )
    assert queries["compared"] == 'sum(increase(conch_shadow_compared_total{model="iris"}[90000ms]))'
    assert queries["agreements"] == 'sum(increase(conch_shadow_agreements_total{model="iris"}[90000ms]))'
    assert queries["drift_scored"] == 'sum(increase(conch_shadow_drift_score_count{model="iris"}[90000ms]))'
    assert queries["drift_buckets"] == (
        'sum by (le) (increase(conch_shadow_drift_score_bucket{model="iris"}[90000ms]))'
    )
    assert set(queries) == set(ANSWERS)


def test_window_is_whole_milliseconds_and_never_empty() -> None:
    assert "[1500ms]" in prometheus_queries("m", "1", "2", 1.5)["compared"]
    assert "[1ms]" in prometheus_queries("m", "1", "2", 0)["compared"]


def test_a_step_s_first_seconds_are_counted_but_not_timed() -> None:
    queries = prometheus_queries("m", "1", "2", 90, timed_s=85)
    assert "[90000ms]" in queries["candidate_answers"] and "[90000ms]" in queries["compared"]
    assert "[85000ms]" in queries["candidate_p95"] and "[85000ms]" in queries["baseline_latency"]
    settling = prometheus_queries("m", "1", "2", 4, timed_s=-1)
    assert not any(key.endswith(("_p95", "_latency")) for key in settling)
    figures = figures_from_prometheus({key: ANSWERS[key] for key in settling}, drift_threshold=0.3)
    assert figures.candidate.requests == 600 and figures.candidate.server_errors == 30
    assert figures.candidate.p95_s is None and figures.candidate.latency is None


def test_label_values_are_escaped() -> None:
    query = prometheus_queries('we"ird\\name', "1", "2", 10)["compared"]
    assert '{model="we\\"ird\\\\name"}' in query


def test_figures_read_from_the_answers() -> None:
    figures = figures_from_prometheus(ANSWERS, drift_threshold=0.3)
    assert figures.baseline.requests == 600.5
    assert figures.baseline.p95_s == 0.004875
    assert figures.candidate.requests == 600
    assert figures.candidate.server_errors == 30
    assert figures.candidate.p95_s == 0.04875
    assert (figures.compared, figures.agreements, figures.drift_scored) == (400, 380, 410)
    assert figures.drifted == 20  # 410 scored, 390 at or below 0.3
    latency = figures.candidate.latency
    assert latency is not None and figures.baseline.latency is not None
    assert latency.bounds == figures.baseline.latency.bounds == (0.001, 0.0025, 0.005, math.inf)
    assert latency.counts == (0, 200, 360, 10)  # per bucket, from the cumulative counts


def test_the_latency_test_runs_on_the_buckets_at_their_resolution() -> None:
    """The candidate's P95 is in the top bucket (+Inf reads as 5 ms), the baseline's interpolated in
    (2.5 ms, 5 ms]: the test sees a rise, but only as far as one bucket resolves it."""
    figures = figures_from_prometheus(ANSWERS, drift_threshold=0.3)
    assert figures.baseline.latency is not None and figures.candidate.latency is not None
    compared = compare_latency(figures.baseline.latency, figures.candidate.latency, 0.01)
    assert compared is not None
    assert 0 < compared.increase < 1.5, "one bucket is a factor 2: the rise read is below it"


def test_threshold_between_bounds_uses_the_bound_below() -> None:
    figures = figures_from_prometheus(ANSWERS, drift_threshold=0.28)
    assert figures.drifted == 30  # the 0.25 bucket: more requests count as drifting, never fewer


def test_threshold_below_every_bound_counts_all_as_drifting() -> None:
    assert figures_from_prometheus(ANSWERS, drift_threshold=0.001).drifted == 410


def test_no_series_and_nan_mean_no_data() -> None:
    empty: dict[str, list[dict[str, Any]]] = {key: [] for key in ANSWERS}
    empty["baseline_p95"] = [sample("NaN")]
    figures = figures_from_prometheus(empty, drift_threshold=0.3)
    assert figures.baseline.latency is None and figures.candidate.latency is None
    assert figures.baseline.requests == 0
    assert figures.baseline.p95_s is None
    assert figures.candidate.p95_s is None
    assert (figures.compared, figures.drift_scored, figures.drifted) == (0, 0, 0)


def test_the_figures_feed_the_same_judgement() -> None:
    limits = GateLimits(
        min_requests=200,
        max_error_rate_increase=0.01,
        max_p95_increase=0.2,
        min_agreement=0.995,
        max_drift_fraction=0.01,
    )
    judgement = judge(figures_from_prometheus(ANSWERS, drift_threshold=0.3), limits)
    assert [check.name for check in judgement.failures] == [
        "error_rate_increase",
        "p95_increase",
        "agreement",
        "drift_fraction",
    ]


def test_drift_buckets_hold_the_usual_thresholds() -> None:
    assert {0.1, 0.2, 0.3, 0.5, 1.0, 2.0} <= set(DRIFT_SCORE_BUCKETS)
    assert list(DRIFT_SCORE_BUCKETS) == sorted(set(DRIFT_SCORE_BUCKETS))


def test_unreachable_prometheus_is_unavailable() -> None:
    with socket.socket() as sock:  # a port bound and not listening: the connection is refused
        sock.bind(("127.0.0.1", 0))
        client = PrometheusClient(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout_s=2)
        with pytest.raises(PrometheusUnavailableError, match="did not answer"):
            client.query("up")
