"""The Prometheus endpoint after known traffic over HTTP and gRPC, as Triton's ``L0_metrics`` checks it.

Each test scrapes before and after the requests it sends and checks the difference, so the tests
do not depend on one another's traffic. Counters must match what was sent exactly; durations must
grow; histograms must agree with the counters; host gauges must match what psutil sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import ONNX_TYPES, add_sub_model, identity_model, write_repository
from tests.integration.metrics_scrape import HISTOGRAMS, TRITON_COUNTERS, Scrape, scrape
from tests.integration.server_process import ServerProcess

MODELS = ("add-sub", "idle", "waiting")
#: Requests to "waiting" stay queued for a second, long enough to see them in the pending gauge.
WAITING_CONFIG = """
name: "waiting"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 1000000 }
"""
REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(
        tmp_path_factory.mktemp("metrics") / "models",
        {
            "add-sub": (add_sub_model(), None),
            "idle": (identity_model(ONNX_TYPES["FP32"]), None),
            "waiting": (add_sub_model(), WAITING_CONFIG),
        },
    )
    return start_server(root)


Client = httpclient.InferenceServerClient | grpcclient.InferenceServerClient


def add_sub_inputs(input_type: Any, a: np.ndarray, b: np.ndarray) -> list[Any]:
    """INPUT0 and INPUT1 as ``input_type``: tritonclient.http's or tritonclient.grpc's InferInput."""
    inputs = [input_type("INPUT0", list(a.shape), "FP32"), input_type("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def infer_add_sub(client: Client, rows: int, seed: int, model: str = "add-sub") -> None:
    """One add-sub request of ``rows`` rows, with its answer checked against numpy."""
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((rows, 16)).astype(np.float32) for _ in range(2))
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    result = client.infer(model, add_sub_inputs(module.InferInput, a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def value(snapshot: Scrape, name: str, model: str = "add-sub", **labels: str) -> float:
    return snapshot.value(name, model=model, version="1", **labels)


def test_triton_counters_are_typed_counters_under_their_bare_names(server: ServerProcess) -> None:
    snapshot = scrape(server.metrics_url)
    for name in TRITON_COUNTERS:
        assert snapshot.families[name].type == "counter"
        assert f"# TYPE {name} counter\n" in snapshot.text
        assert f"{name}_total" not in snapshot.text
        assert snapshot.samples(name, model="add-sub"), name
    assert snapshot.families["nv_inference_pending_request_count"].type == "gauge"
    for name in HISTOGRAMS:
        assert snapshot.families[name].type == "histogram"
    # prometheus_client's own counters keep their suffix.
    assert "# TYPE process_cpu_seconds_total counter\n" in snapshot.text


@pytest.mark.parametrize(
    "accept",
    [
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",  # what Prometheus 2 sends
        "text/plain; version=1.0.0",
    ],
)
def test_the_page_is_text_0_0_4_whatever_the_scraper_asks_for(server: ServerProcess, accept: str) -> None:
    snapshot = scrape(server.metrics_url, accept)  # it checks the Content-Type
    assert "# TYPE nv_inference_request_success counter\n" in snapshot.text
    assert "nv_inference_request_success_total" not in snapshot.text
    assert "# EOF" not in snapshot.text
    assert value(snapshot, "nv_inference_request_success") >= 0


def test_counts_after_known_successes_and_rejections_over_http_and_grpc(
    server: ServerProcess,
    http_client: httpclient.InferenceServerClient,
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    before = scrape(server.metrics_url)
    for seed in range(5):
        infer_add_sub(http_client, rows=3, seed=seed)
    for seed in range(4):
        infer_add_sub(grpc_client, rows=2, seed=seed)
    too_short = np.zeros((1, 8), dtype=np.float32)
    for _ in range(2):
        with pytest.raises(InferenceServerException) as http_error:
            http_client.infer("add-sub", add_sub_inputs(httpclient.InferInput, too_short, too_short))
        assert http_error.value.status() == "400"
    integers = np.zeros((1, 16), dtype=np.int32)
    wrong_type = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in wrong_type:
        tensor.set_data_from_numpy(integers)
    with pytest.raises(InferenceServerException) as grpc_error:
        grpc_client.infer("add-sub", wrong_type)
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
    after = scrape(server.metrics_url)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests, rows = 5 + 4, 5 * 3 + 4 * 2
    assert grew("nv_inference_request_success") == requests
    assert grew("nv_inference_request_failure", reason="REJECTED") == 3
    for reason in ("CANCELED", "BACKEND", "OTHER"):
        assert grew("nv_inference_request_failure", reason=reason) == 0
    assert grew("nv_inference_count") == rows
    # Sequential requests cannot share a batch: one execution each.
    assert grew("nv_inference_exec_count") == requests
    assert grew("conch_inference_request_duration_seconds_count") == requests
    assert grew("conch_inference_queue_duration_seconds_count") == requests
    assert grew("conch_inference_batch_size_count") == requests
    assert grew("conch_inference_batch_size_sum") == rows
    assert value(after, "nv_inference_pending_request_count") == 0


def test_durations_grow_with_every_request(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    before = scrape(server.metrics_url)
    for seed in range(3):
        infer_add_sub(http_client, rows=1, seed=seed)
    after = scrape(server.metrics_url)

    def grew(name: str) -> float:
        return value(after, name) - value(before, name)

    assert grew("nv_inference_request_duration_us") > 0
    assert grew("nv_inference_compute_infer_duration_us") > 0
    for name in (
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert grew(name) >= 0
    # End to end includes the model run; 1 us of slack for the truncation to whole microseconds.
    assert grew("nv_inference_request_duration_us") >= grew("nv_inference_compute_infer_duration_us") - 1
    assert grew("conch_inference_request_duration_seconds_sum") > 0


def test_histograms_agree_with_the_counters(
    server: ServerProcess, grpc_client: grpcclient.InferenceServerClient
) -> None:
    for seed in range(3):
        infer_add_sub(grpc_client, rows=seed + 1, seed=seed)
    snapshot = scrape(server.metrics_url)
    for model in MODELS:
        success = value(snapshot, "nv_inference_request_success", model)
        executions = value(snapshot, "nv_inference_exec_count", model)
        for histogram, count in (
            ("conch_inference_request_duration_seconds", success),
            ("conch_inference_queue_duration_seconds", success),
            ("conch_inference_batch_size", executions),
        ):
            buckets = snapshot.buckets(histogram, model=model, version="1")
            assert buckets[-1] == (float("inf"), count)
            assert [n for _, n in buckets] == sorted(n for _, n in buckets), f"{histogram} is not cumulative"
            assert value(snapshot, f"{histogram}_count", model) == count
        assert value(snapshot, "conch_inference_batch_size_sum", model) == value(
            snapshot, "nv_inference_count", model
        )
        # The same observations in seconds and in truncated microseconds.
        for histogram, counter in (
            ("conch_inference_request_duration_seconds", "nv_inference_request_duration_us"),
            ("conch_inference_queue_duration_seconds", "nv_inference_queue_duration_us"),
        ):
            seconds = value(snapshot, f"{histogram}_sum", model)
            assert abs(seconds * 1e6 - value(snapshot, counter, model)) < 2
    assert value(snapshot, "nv_inference_request_success") >= 3


def test_metrics_and_the_statistics_extension_both_count_the_requests_sent(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    def statistics() -> dict[str, Any]:
        stats: dict[str, Any] = server.request("GET", "/v2/models/add-sub/stats").json()["model_stats"][0]
        return stats

    before, stats_before = scrape(server.metrics_url), statistics()
    started = time.perf_counter()
    for seed in range(4):
        infer_add_sub(http_client, rows=2, seed=seed)
    round_trips_us = (time.perf_counter() - started) * 1e6
    too_short = np.zeros((1, 8), dtype=np.float32)
    for _ in range(3):
        with pytest.raises(InferenceServerException):
            http_client.infer("add-sub", add_sub_inputs(httpclient.InferInput, too_short, too_short))
    after, stats_after = scrape(server.metrics_url), statistics()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    def stats_grew(pick: Callable[[dict[str, Any]], int]) -> int:
        return pick(stats_after) - pick(stats_before)

    sent, rejected, rows = 4, 3, 4 * 2
    assert (
        grew("nv_inference_request_success")
        == stats_grew(lambda s: s["inference_stats"]["success"]["count"])
        == sent
    )
    assert grew("nv_inference_request_failure", reason="REJECTED") == rejected
    assert sum(grew("nv_inference_request_failure", reason=r) for r in REASONS) == rejected
    assert stats_grew(lambda s: s["inference_stats"]["fail"]["count"]) == rejected
    assert grew("nv_inference_count") == stats_grew(lambda s: s["inference_count"]) == rows
    assert grew("nv_inference_exec_count") == stats_grew(lambda s: s["execution_count"]) == sent
    # The server's time for the four successes lies within the client's round trips.
    assert 0 < grew("nv_inference_request_duration_us") <= round_trips_us
    assert 0 < stats_grew(lambda s: s["inference_stats"]["success"]["ns"]) / 1000 <= round_trips_us


def test_pending_gauge_counts_requests_waiting_in_the_queue(server: ServerProcess) -> None:
    def one_request(seed: int) -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            infer_add_sub(client, rows=1, seed=seed, model="waiting")

    threads = [threading.Thread(target=one_request, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    seen: list[float] = []
    deadline = time.monotonic() + 0.8  # the queue delay is 1 s: all three must be pending before it ends
    while time.monotonic() < deadline:
        seen.append(value(scrape(server.metrics_url), "nv_inference_pending_request_count", "waiting"))
        if seen[-1] == 3:
            break
        time.sleep(0.02)
    for thread in threads:
        thread.join(timeout=10)
    assert seen[-1] == 3, f"pending gauge readings: {seen}"
    after = scrape(server.metrics_url)
    assert value(after, "nv_inference_pending_request_count", "waiting") == 0
    assert value(after, "nv_inference_request_success", "waiting") == 3
    # The three waited together for the queue delay and ran as one batch.
    assert value(after, "nv_inference_exec_count", "waiting") == 1
    assert value(after, "conch_inference_queue_duration_seconds_sum", "waiting") > 3 * 0.5


def test_idle_model_reports_zeros(server: ServerProcess) -> None:
    snapshot = scrape(server.metrics_url)
    for name in TRITON_COUNTERS:
        for sample in snapshot.samples(name, model="idle", version="1"):
            assert sample.value == 0, sample
    assert value(snapshot, "nv_inference_pending_request_count", "idle") == 0
    assert value(snapshot, "conch_inference_batch_size_count", "idle") == 0


def test_label_values_name_the_loaded_models(
    server: ServerProcess, http_client: httpclient.InferenceServerClient
) -> None:
    with pytest.raises(InferenceServerException):
        http_client.infer(
            "no-such-model", add_sub_inputs(httpclient.InferInput, *[np.zeros((1, 16), np.float32)] * 2)
        )
    snapshot = scrape(server.metrics_url)
    for name in (*TRITON_COUNTERS, "nv_inference_pending_request_count", *HISTOGRAMS):
        labelled = {(s.labels["model"], s.labels["version"]) for s in snapshot.families[name].samples}
        assert labelled == {(model, "1") for model in MODELS}, name
    reasons = {s.labels["reason"] for s in snapshot.samples("nv_inference_request_failure", model="add-sub")}
    assert reasons == set(REASONS)


def test_host_gauges_match_the_machine(server: ServerProcess) -> None:
    snapshot = scrape(server.metrics_url)
    total = snapshot.value("nv_cpu_memory_total_bytes")
    used = snapshot.value("nv_cpu_memory_used_bytes")
    assert total == psutil.virtual_memory().total
    assert 0 < used <= total
    for _ in range(3):  # utilisation is measured between scrapes: read it more than once
        assert 0 <= scrape(server.metrics_url).value("nv_cpu_utilization") <= 1
    assert snapshot.value("process_resident_memory_bytes") > 0
    assert snapshot.value("process_open_fds") > 0


def visible_gpus() -> int:
    """How many GPUs NVML sees here; the server runs on this machine, so it must see as many."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver or no device: the server has no GPU to report either
        return 0


def test_gpu_families_appear_only_with_a_gpu(server: ServerProcess) -> None:
    snapshot = scrape(server.metrics_url)
    gpu_families = {name for name in snapshot.families if name.startswith("nv_gpu_")}
    gpus = visible_gpus()
    if gpus == 0:
        assert gpu_families == set()
        return
    assert gpu_families == {"nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"}
    for name in gpu_families:
        assert len({s.labels["gpu_uuid"] for s in snapshot.families[name].samples}) == gpus
    for sample in snapshot.families["nv_gpu_utilization"].samples:
        assert 0 <= sample.value <= 1
