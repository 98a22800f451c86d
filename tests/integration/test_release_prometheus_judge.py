"""``judge: prometheus`` against a real Prometheus scraping two replicas: one judgement for both.

Each replica here is conch's metrics exposition (:func:`conch.observability.exposition.render` over
the real :class:`InferenceStatisticsCollector`) plus the release's answer and shadow families under
the names the gate reads, served on its own port. Both replicas report the same traffic, so the sums
over replicas are twice one replica's; Prometheus's ``increase()`` extrapolates to the window's edges,
so counts are checked as ratios, which extrapolation keeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client import Histogram as PromHistogram

from conch.observability.exposition import CONTENT_TYPE, render
from conch.observability.metrics import InferenceStatisticsCollector
from conch.observability.statistics import ModelStatistics
from conch.release.gate import GateLimits, judge
from conch.release.prometheus_judge import (
    DRIFT_SCORE_BUCKETS,
    PrometheusClient,
    PrometheusUnavailableError,
    prometheus_figures,
)
from tests.integration.prometheus_server import PROMETHEUS, running_prometheus
from tests.integration.server_process import free_port

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed")
pytestmark = [pytestmark, pytest.mark.prometheus]  # the programs this file drives

MODEL = "iris"
LIMITS = GateLimits(
    min_requests=200,
    max_error_rate_increase=0.01,
    max_p95_increase=0.2,
    min_agreement=0.995,
    max_drift_fraction=0.01,
)


class Replica:
    """One replica's metrics: a model with a baseline and a candidate version, and shadow counters."""

    def __init__(self) -> None:
        self.versions = {v: ModelStatistics(name=MODEL, version=v) for v in ("1", "2")}
        self.registry = CollectorRegistry()
        self.registry.register(InferenceStatisticsCollector(lambda: list(self.versions.values())))
        self.compared = Counter("conch_shadow_compared", "", ["model"], registry=self.registry)
        self.agreements = Counter("conch_shadow_agreements", "", ["model"], registry=self.registry)
        self.answers = Counter("conch_release_answers", "", ["model", "version"], registry=self.registry)
        self.errors = Counter("conch_release_server_errors", "", ["model", "version"], registry=self.registry)
        self.drift = PromHistogram(
            "conch_shadow_drift_score", "", ["model"], buckets=DRIFT_SCORE_BUCKETS, registry=self.registry
        )
        for family in (self.compared, self.agreements, self.drift):
            family.labels(MODEL)  # the series exist, at 0, from the first scrape
        for version in self.versions:
            self.answers.labels(MODEL, version)
            self.errors.labels(MODEL, version)
        self.lock = threading.Lock()
        self.port = free_port()
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with replica.lock:
                    body = render(replica.registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, version: str, count: int, seconds: float, server_errors: int = 0) -> None:
        with self.lock:
            stats = self.versions[version]
            for _ in range(count):
                stats.success.add(int(seconds * 1e9))
                stats.request_seconds.observe(seconds)
            stats.failures_by_reason["BACKEND"] = stats.failures_by_reason.get("BACKEND", 0) + server_errors
            self.answers.labels(MODEL, version).inc(count + server_errors)
            self.errors.labels(MODEL, version).inc(server_errors)

    def shadow(self, agreed: int, drifts: list[float]) -> None:
        with self.lock:
            self.compared.labels(MODEL).inc(len(drifts))
            self.agreements.labels(MODEL).inc(agreed)
            for score in drifts:
                self.drift.labels(MODEL).observe(score)


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[Replica]]:
    started = [Replica(), Replica()]
    yield started
    for replica in started:
        replica.server.shutdown()


@pytest.fixture(scope="module")
def prometheus(
    replicas: list[Replica], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusClient]:
    targets = [f"127.0.0.1:{replica.port}" for replica in replicas]
    with running_prometheus(tmp_path_factory.mktemp("prometheus-release"), targets) as url:
        yield PrometheusClient(url)


def wait_for(client: PrometheusClient, promql: str, expected: float, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = client.query(promql)
        if result and float(result[0]["value"][1]) == expected:
            return
        time.sleep(0.25)
    pytest.fail(f"{promql} did not reach {expected}")


def test_both_replicas_read_one_failing_judgement(
    prometheus: PrometheusClient, replicas: list[Replica]
) -> None:
    wait_for(prometheus, 'count(conch_shadow_compared_total{model="iris"} == 0)', 2)  # scraped at zero
    start = time.time()
    time.sleep(2.5)  # at least two scrapes at zero, so increase() starts from there
    for replica in replicas:
        replica.answer("1", 300, seconds=0.003)  # all in (0.0025, 0.005]: P95 0.004875 after interpolation
        replica.answer("2", 270, seconds=0.03, server_errors=30)  # 10% errors, P95 0.04875
        replica.shadow(agreed=190, drifts=[0.01] * 190 + [0.3] * 5 + [0.5] * 5)
    wait_for(prometheus, 'sum(nv_inference_request_success{model="iris",version="2"})', 540)
    wait_for(prometheus, 'sum(conch_shadow_compared_total{model="iris"})', 400)
    time.sleep(1.5)  # one more scrape of both, so the window's last samples hold the final counts
    at = time.time()

    figures = prometheus_figures(
        prometheus, MODEL, "1", "2", window_s=at - start + 1, drift_threshold=0.3, at=at
    )

    assert figures.baseline.requests > 600 * 0.9
    assert figures.baseline.server_errors == 0
    assert figures.candidate.server_errors / figures.candidate.requests == pytest.approx(0.10, rel=0.02)
    assert figures.baseline.p95_s == pytest.approx(0.004875, rel=1e-6)
    assert figures.candidate.p95_s == pytest.approx(0.04875, rel=1e-6)
    assert figures.agreements / figures.compared == pytest.approx(0.95, rel=0.02)
    assert figures.drift_scored == pytest.approx(figures.compared, rel=1e-9)
    assert figures.drifted / figures.drift_scored == pytest.approx(0.025, rel=0.02)  # the 0.3s do not drift

    judgement = judge(figures, LIMITS)
    assert judgement.ready
    assert [check.name for check in judgement.failures] == [
        "error_rate_increase",
        "p95_increase",
        "agreement",
        "drift_fraction",
    ]
    # A second replica judging at the same instant reads the same figures: the same decision.
    assert prometheus_figures(prometheus, MODEL, "1", "2", at - start + 1, 0.3, at=at) == figures


def test_a_bad_query_is_reported_with_prometheus_reason(prometheus: PrometheusClient) -> None:
    with pytest.raises(PrometheusUnavailableError, match="parse error"):
        prometheus.query("sum(")
