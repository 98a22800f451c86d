"""A real Prometheus scrapes conch every second while a paced, known load runs; its queries must agree.

This is how the metrics are used: ``rate()`` over Triton's counters, ``histogram_quantile()`` over
the latency buckets, and the average batch size from two counters. The counters are typed
``counter`` under Triton's bare names (no ``_total``), in the text format 0.0.4 that conch serves
although Prometheus asks for OpenMetrics first; the types Prometheus read are checked in its
``/api/v1/metadata``. Prometheus runs as a subprocess with its configuration and storage under the
test's temporary folder, and is stopped at module end even when a test fails.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.observability.statistics import LATENCY_BUCKETS_S
from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.metrics_scrape import HISTOGRAMS, TRITON_COUNTERS
from tests.integration.prometheus_server import PROMETHEUS, Prometheus
from tests.integration.server_process import ServerProcess

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (make test installs it with apt-get)"
)
pytestmark = [pytestmark, pytest.mark.prometheus]  # the programs this file drives

MODEL = "paced"
RATE = 20  # requests per second
SECONDS = 7
BAD_EVERY = 10  # every tenth request has a wrong shape: a 400, counted as REJECTED
ROWS = 2
GAUGES = (
    "nv_inference_pending_request_count",
    "conch_gpu_fallback_instances",
    "nv_cpu_utilization",
    "nv_cpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes",
)


@dataclass(frozen=True)
class Traffic:
    """What the paced client sent and saw, with wall-clock times comparable to Prometheus's."""

    started: float
    ended: float
    succeeded: int
    rejected: int
    latencies: list[float]


@pytest.fixture(scope="module")
def conch(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(tmp_path_factory.mktemp("prometheus-models"), {MODEL: (add_sub_model(), None)})
    return start_server(root)


def request_inputs(index: int) -> tuple[list[httpclient.InferInput], np.ndarray | None]:
    """Inputs for request ``index`` and its expected OUTPUT0; None for the deliberately bad ones."""
    bad = index % BAD_EVERY == BAD_EVERY - 1
    width = 8 if bad else 16
    a = np.full((ROWS, width), index, dtype=np.float32)
    b = np.arange(ROWS * width, dtype=np.float32).reshape(ROWS, width)
    inputs = [httpclient.InferInput(name, [ROWS, width], "FP32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, None if bad else a + b


@pytest.fixture(scope="module")
def traffic(conch: ServerProcess, prometheus: Prometheus) -> Traffic:
    """RATE requests a second for SECONDS seconds, on a fixed schedule, once Prometheus scrapes conch."""
    selector = f'nv_inference_request_success{{model="{MODEL}"}}'
    prometheus.wait_for(selector, 0)  # a baseline scrape, so increase() and rate() start from zero
    succeeded, rejected, latencies = 0, 0, []
    with httpclient.InferenceServerClient(conch.http_url) as client:
        started = time.time()
        for index in range(RATE * SECONDS):
            time.sleep(max(0.0, started + index / RATE - time.time()))
            inputs, expected = request_inputs(index)
            sent = time.perf_counter()
            try:
                result = client.infer(MODEL, inputs)
            except InferenceServerException as exc:
                assert expected is None and exc.status() == "400", exc
                rejected += 1
                continue
            latencies.append(time.perf_counter() - sent)
            assert expected is not None
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
            succeeded += 1
        ended = time.time()
    assert rejected == RATE * SECONDS // BAD_EVERY
    # Every scrape after the last request sees the final counts.
    prometheus.wait_for(selector, succeeded)
    prometheus.wait_for(f'sum(nv_inference_request_failure{{model="{MODEL}"}})', rejected)
    return Traffic(started, ended, succeeded, rejected, latencies)


def test_prometheus_scrapes_conch(prometheus: Prometheus, traffic: Traffic) -> None:
    assert prometheus.scalar('up{job="conch"}') == 1


def test_prometheus_reads_the_types_conch_declares(prometheus: Prometheus, traffic: Traffic) -> None:
    metadata = prometheus.metadata()
    expected = {
        **dict.fromkeys(TRITON_COUNTERS, "counter"),
        **dict.fromkeys(HISTOGRAMS, "histogram"),
        **dict.fromkeys(GAUGES, "gauge"),
        "process_cpu_seconds_total": "counter",  # prometheus_client's own counter keeps its suffix
    }
    for name, kind in expected.items():
        assert [entry["type"] for entry in metadata.get(name, [])] == [kind], (name, metadata.get(name))
    assert not any(f"{name}_total" in metadata for name in TRITON_COUNTERS)
    # The samples are stored under the same bare names the metadata names.
    assert prometheus.scalar(f'nv_inference_exec_count{{model="{MODEL}"}}') > 0


def test_scraped_totals_equal_what_was_sent(prometheus: Prometheus, traffic: Traffic) -> None:
    labels = f'model="{MODEL}",version="1"'
    assert prometheus.scalar(f"nv_inference_request_success{{{labels}}}") == traffic.succeeded
    assert (
        prometheus.scalar(f'nv_inference_request_failure{{{labels},reason="REJECTED"}}') == traffic.rejected
    )
    assert prometheus.scalar(f"sum(nv_inference_request_failure{{{labels}}})") == traffic.rejected
    assert prometheus.scalar(f"nv_inference_count{{{labels}}}") == traffic.succeeded * ROWS
    assert (
        prometheus.scalar(f"conch_inference_request_duration_seconds_count{{{labels}}}") == traffic.succeeded
    )


def test_rate_matches_the_paced_traffic(prometheus: Prometheus, traffic: Traffic) -> None:
    # A 5 s window that ends 1 s before the traffic did lies wholly inside it.
    at = traffic.ended - 1
    assert at - 5 > traffic.started
    successes = prometheus.scalar(f'rate(nv_inference_request_success{{model="{MODEL}"}}[5s])', at)
    failures = prometheus.scalar(f'sum(rate(nv_inference_request_failure{{model="{MODEL}"}}[5s]))', at)
    sent_successes = RATE * (BAD_EVERY - 1) / BAD_EVERY
    assert 0.6 * sent_successes <= successes <= 1.4 * sent_successes
    assert 0.3 * RATE / BAD_EVERY <= failures <= 2 * RATE / BAD_EVERY


def test_p95_latency_from_the_histogram(prometheus: Prometheus, traffic: Traffic) -> None:
    p95 = prometheus.scalar(
        "histogram_quantile(0.95, sum by (le) "
        f'(rate(conch_inference_request_duration_seconds_bucket{{model="{MODEL}"}}[5s])))',
        traffic.ended - 1,
    )
    assert 0 < p95 < 1
    # The server's time is part of the client's round trip, so the estimate cannot pass the bucket
    # that holds the slowest round trip the client saw.
    slowest = max(traffic.latencies)
    bound = LATENCY_BUCKETS_S[min(bisect.bisect_left(LATENCY_BUCKETS_S, slowest), len(LATENCY_BUCKETS_S) - 1)]
    assert p95 <= bound, f"p95 {p95}s, slowest round trip {slowest}s"


def test_average_batch_size_from_the_counters(prometheus: Prometheus, traffic: Traffic) -> None:
    window = f"{int(time.time() - traffic.started) + 2}s"
    average = prometheus.scalar(
        f'increase(nv_inference_count{{model="{MODEL}"}}[{window}])'
        f' / increase(nv_inference_exec_count{{model="{MODEL}"}}[{window}])'
    )
    # One client, one request at a time: every execution is one request of ROWS rows.
    assert average == pytest.approx(ROWS)
