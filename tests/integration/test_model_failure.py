"""A model that fails while running: HTTP 500, gRPC ``INTERNAL``, the failure counted with reason
``BACKEND`` (``docs/protocol.md``, ``docs/metrics.md``), and the server goes on serving.

The model is a Reshape whose target shape is an input: [2, 2] runs, [3, 3] makes onnxruntime fail
inside the graph, after the request passed every check the server makes before running it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import reshape_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

X = [1.0, 2.0, 3.0, 4.0]


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(
        tmp_path_factory.mktemp("failure") / "models", {"target-shape": (reshape_model(), None)}
    )
    return start_server(root)


def http_body(shape: list[int]) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "X", "shape": [4], "datatype": "FP32", "data": X},
                {"name": "SHAPE", "shape": [2], "datatype": "INT64", "data": shape},
            ]
        }
    ).encode()


def grpc_inputs(shape: list[int]) -> list[grpcclient.InferInput]:
    x = grpcclient.InferInput("X", [4], "FP32")
    x.set_data_from_numpy(np.array(X, dtype=np.float32))
    target = grpcclient.InferInput("SHAPE", [2], "INT64")
    target.set_data_from_numpy(np.array(shape, dtype=np.int64))
    return [x, target]


def assert_names_the_model_without_source_paths(message: str) -> None:
    """docs/protocol.md: messages name the model and never contain paths (ONNX Runtime's quote
    /onnxruntime_src/.../reshape_helper.h:91)."""
    assert message.startswith("model 'target-shape' version 1 failed while running: "), message
    assert "requested shape:{3,3}" in message, "ONNX Runtime's own words stay"
    assert "/" not in message, message
    assert not re.search(r"\.(h|cc|cpp):\d", message), message
    assert "[ONNXRuntimeError]" not in message, message


def failures(server: ServerProcess) -> dict[str, float]:
    """nv_inference_request_failure of the model, by reason."""
    samples = scrape(server.metrics_url).samples("nv_inference_request_failure", model="target-shape")
    return {s.labels["reason"]: s.value for s in samples}


def test_a_model_failing_at_run_time_is_a_500_over_http(server: ServerProcess) -> None:
    before = failures(server)

    failed = server.request("POST", "/v2/models/target-shape/infer", http_body([3, 3]))
    answered = server.request("POST", "/v2/models/target-shape/infer", http_body([2, 2]))

    assert failed.status == 500, failed.body
    assert_names_the_model_without_source_paths(failed.json()["error"])
    assert failures(server)["BACKEND"] - before.get("BACKEND", 0) == 1
    assert failures(server)["REJECTED"] == before.get("REJECTED", 0), "a run-time failure is not REJECTED"
    assert answered.status == 200, "the server serves on after the failure"
    assert answered.json()["outputs"][0]["data"] == X
    assert answered.json()["outputs"][0]["shape"] == [2, 2]


def test_a_model_failing_at_run_time_is_internal_over_grpc(server: ServerProcess) -> None:
    before = failures(server)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("target-shape", grpc_inputs([3, 3]))
        answered = client.infer("target-shape", grpc_inputs([4, 1]))

    assert caught.value.status() == "StatusCode.INTERNAL"
    assert_names_the_model_without_source_paths(caught.value.message() or "")
    assert failures(server)["BACKEND"] - before.get("BACKEND", 0) == 1
    np.testing.assert_array_equal(answered.as_numpy("Y"), np.array(X, dtype=np.float32).reshape(4, 1))


def test_statistics_count_the_failures(server: ServerProcess) -> None:
    assert server.request("POST", "/v2/models/target-shape/infer", http_body([1, 3])).status == 500

    stats = server.request("GET", "/v2/models/target-shape/stats").json()["model_stats"][0]["inference_stats"]
    failed = failures(server)["BACKEND"]

    assert failed >= 1
    assert stats["fail"]["count"] == failed
