"""Instance groups end to end: CPU counts, and KIND_GPU falling back to the CPU (the CPU fallback) with a
metric."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.server_process import ServerProcess

GPU_CONFIG = """
name: "on-gpu"
max_batch_size: 8
instance_group [ { count: 2 kind: KIND_GPU } ]
parameters { key: "FALLBACK_STRATEGY" value { string_value: "CPU" } }
"""
CPU_CONFIG = """
name: "two-cpu"
max_batch_size: 8
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(
        tmp_path_factory.mktemp("repo"),
        {"on-gpu": (add_sub_model(), GPU_CONFIG), "two-cpu": (add_sub_model(), CPU_CONFIG)},
    )
    return start_server(Path(root))


def request(model: str, seed: int) -> tuple[list[httpclient.InferInput], np.ndarray]:
    a = np.random.default_rng(seed).random((2, 16), dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [2, 16], "FP32"),
        httpclient.InferInput("INPUT1", [2, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones((2, 16), dtype=np.float32))
    return inputs, a + 1


def infer(client: httpclient.InferenceServerClient, model: str, seed: int) -> None:
    inputs, expected = request(model, seed)
    np.testing.assert_array_equal(client.infer(model, inputs).as_numpy("OUTPUT0"), expected)


def gpu_fallback(server: ServerProcess) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "conch_gpu_fallback_instances":
            return {s.labels["model"]: s.value for s in family.samples}
    raise AssertionError("conch_gpu_fallback_instances is missing")


@pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(),
    reason="describes a machine without the CUDA provider",
)
def test_a_gpu_model_without_cuda_serves_on_the_cpu_and_says_so(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    assert client.is_model_ready("on-gpu")
    infer(client, "on-gpu", seed=1)
    assert gpu_fallback(server) == {"on-gpu": 2.0, "two-cpu": 0.0}
    assert "fallback model=on-gpu version=1 level=CPU reason=gpu_unavailable gpu_instances=2" in server.log()


def test_cpu_instances_serve_concurrent_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    sent = [request("two-cpu", seed) for seed in range(32)]

    pending = [(client.async_infer("two-cpu", inputs), expected) for inputs, expected in sent]

    for handle, expected in pending:
        np.testing.assert_array_equal(handle.get_result().as_numpy("OUTPUT0"), expected)
    assert client.get_model_config("two-cpu")["instance_group"][0]["count"] == 2
    assert "model 'two-cpu' version 1 is READY (CPU, CPU)" in server.log()
