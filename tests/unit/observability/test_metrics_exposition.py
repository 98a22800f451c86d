"""The metrics page: Triton's counters typed under bare names, the rest as prometheus_client writes it."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from conch.core.types import ExecutionTiming
from conch.observability.exposition import TritonCounter, metrics_app, render
from conch.observability.metrics import create_registry
from conch.observability.statistics import ModelStatistics
from tests.integration.metrics_scrape import TRITON_COUNTERS

ODD_NAME = 'back\\slash "quoted"\nnew line'


class Families(Collector):
    """A collector of families built in the test, counting how often it is collected."""

    def __init__(self, *families: Metric) -> None:
        self._families = families
        self.collected = 0

    def collect(self) -> Iterator[Metric]:
        self.collected += 1
        yield from self._families


def served_statistics() -> ModelStatistics:
    stats = ModelStatistics(ODD_NAME, "1")
    for _ in range(3):
        stats.record_success(request_ns=2_500_000, queue_ns=500_000)
    stats.record_failure(request_ns=1000, reason="REJECTED")
    stats.record_execution(batch_size=6, requests=3, timing=ExecutionTiming(10_000, 2_000_000, 30_000))
    return stats


def test_a_triton_counter_is_typed_counter_under_its_bare_name() -> None:
    counter = TritonCounter(
        "nv_inference_count", "Number of inferences performed", labels=["model", "version"]
    )
    counter.add_metric(["m", "1"], 12)
    assert render(Families(counter)).decode() == (
        "# HELP nv_inference_count Number of inferences performed\n"
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1"} 12.0\n'
    )


def test_label_values_and_help_text_are_escaped() -> None:
    counter = TritonCounter("nv_inference_count", 'a \\ in "help"\nsecond line', labels=["model"])
    counter.add_metric([ODD_NAME], 1)
    text = render(Families(counter)).decode()
    assert '# HELP nv_inference_count a \\\\ in "help"\\nsecond line\n' in text
    assert 'nv_inference_count{model="back\\\\slash \\"quoted\\"\\nnew line"} 1.0\n' in text
    # prometheus_client's parser, written apart from this writer, reads the original name back.
    (family,) = text_string_to_metric_families(text)
    assert family.documentation == 'a \\ in "help"\nsecond line'
    assert family.samples[0].labels == {"model": ODD_NAME}


def test_the_collector_writes_every_triton_counter_without_total() -> None:
    text = render(create_registry(lambda: [served_statistics()])).decode()
    for name, expected in (
        ("nv_inference_request_success", 3),
        ("nv_inference_count", 6),
        ("nv_inference_exec_count", 1),
        ("nv_inference_request_duration_us", 7500),
        ("nv_inference_compute_infer_duration_us", 6000),
    ):
        assert f"# TYPE {name} counter\n" in text
        assert f'{name}{{model="back\\\\slash \\"quoted\\"\\nnew line",version="1"}} {expected:.1f}\n' in text
    for name in TRITON_COUNTERS:
        assert f"# TYPE {name} counter\n" in text
        assert f"{name}_total" not in text
    assert "# TYPE nv_inference_pending_request_count gauge\n" in text
    assert "# TYPE conch_inference_request_duration_seconds histogram\n" in text
    # prometheus_client's own counter keeps its name and suffix.
    assert "# TYPE process_cpu_seconds_total counter\n" in text


def test_gauges_and_histograms_are_written_exactly_as_prometheus_client_writes_them() -> None:
    def families() -> list[Metric]:
        histogram = HistogramMetricFamily("conch_inference_batch_size", "Rows", labels=["model"])
        histogram.add_metric([ODD_NAME], [("1", 1), ("2", 3), ("+Inf", 4)], sum_value=7)
        gauge = GaugeMetricFamily("nv_inference_pending_request_count", "Pending", labels=["model"])
        gauge.add_metric([ODD_NAME], 2)
        return [histogram, gauge]

    assert render(Families(*families())) == generate_latest(Families(*families()))


def test_a_scrape_collects_the_registry_once() -> None:
    # Collecting twice would also restart the CPU utilisation window between the two halves.
    counter = TritonCounter("nv_inference_count", "Inferences", labels=[])
    counter.add_metric([], 1)
    gauge = GaugeMetricFamily("nv_cpu_utilization", "CPU", value=0.5)
    families = Families(counter, gauge)
    render(families)
    assert families.collected == 1


def get(accept: str | None = None, accept_encoding: str | None = None) -> tuple[dict[bytes, bytes], bytes]:
    """One request to the metrics app: the reply's headers and body."""
    headers = [
        (name, value.encode())
        for name, value in ((b"accept", accept), (b"accept-encoding", accept_encoding))
        if value is not None
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    app = metrics_app(create_registry(lambda: [served_statistics()]))
    asyncio.run(app({"type": "http", "method": "GET", "path": "/metrics", "headers": headers}, receive, send))
    start, body = sent
    assert start["status"] == 200
    return dict(start["headers"]), body["body"]


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text",
        "text/plain; version=1.0.0",
    ],
)
def test_the_app_answers_text_0_0_4_whatever_is_asked(accept: str | None) -> None:
    headers, body = get(accept)
    assert headers[b"content-type"] == b"text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE nv_inference_request_success counter\n" in body
    assert b"# EOF" not in body


def test_the_app_gzips_when_the_scraper_accepts_it() -> None:
    headers, body = get(accept_encoding="gzip")
    assert headers[b"content-encoding"] == b"gzip"
    assert b"# TYPE nv_inference_request_success counter\n" in gzip.decompress(body)
    plain_headers, _ = get()
    assert b"content-encoding" not in plain_headers
