"""Per-client rate limits, Triton's restricted APIs and the in-flight cap, against a real server."""

from __future__ import annotations

import concurrent.futures
import json
import time
import urllib.request
from collections.abc import Callable

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import identity_model, write_repository
from tests.integration.server_process import ServerProcess

INFER_BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
).encode()


#: A model's own limit: 10 requests a second after a burst of 1, so a bucket refills every 0.1 s.
STEADY = """
parameters [
  { key: "client_rate_limit" value: { string_value: "10" } },
  { key: "client_burst" value: { string_value: "1" } }
]
"""


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    repository = write_repository(
        tmp_path_factory.mktemp("limits") / "models",
        {
            "iris": (identity_model(TensorProto.FLOAT), None),
            "steady": (identity_model(TensorProto.FLOAT), STEADY),
        },
    )
    return start_server(
        repository,
        "--client-rate-limit", "0.5",
        "--client-burst", "2",
        "--http-restricted-api", "model-repository:admin-key=s3cret",
        "--grpc-restricted-protocol", "model-repository,statistics:admin-key=s3cret",
        env={"CONCH_MAX_IN_FLIGHT": "64"},
    )  # fmt: skip


def infer(server: ServerProcess, client: str) -> tuple[int, dict[str, str]]:
    reply = server.request("POST", "/v2/models/iris/infer", INFER_BODY, {"x-client-id": client})
    return reply.status, reply.headers


def test_a_client_over_its_rate_gets_429_with_the_headers_and_another_is_unaffected(
    server: ServerProcess,
) -> None:
    statuses = [infer(server, "alice")[0] for _ in range(2)]
    status, headers = infer(server, "alice")
    assert statuses == [200, 200] and status == 429
    assert int(headers["retry-after"]) >= 1
    assert headers["ratelimit-policy"] == '"default";q=2;w=4'
    assert headers["ratelimit"].startswith('"default";r=0;t=')
    assert infer(server, "bob")[0] == 200
    ok_headers = infer(server, "carol")[1]
    assert ok_headers["ratelimit"] == '"default";r=1;t=2'


def test_grpc_over_the_rate_is_resource_exhausted(server: ServerProcess) -> None:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        headers = {"x-client-id": "dave"}
        client.infer("iris", [tensor], headers=headers)
        client.infer("iris", [tensor], headers=headers)
        with pytest.raises(InferenceServerException) as refused:
            client.infer("iris", [tensor], headers=headers)
    assert refused.value.status() == str(grpc.StatusCode.RESOURCE_EXHAUSTED)


def test_restricted_apis_need_their_header(server: ServerProcess) -> None:
    refused = server.request("POST", "/v2/repository/index", headers={"x-client-id": "erin"})
    assert refused.status == 403
    assert refused.json()["error"] == "This API is restricted, expecting header 'admin-key'"
    allowed = server.request(
        "POST", "/v2/repository/index", headers={"admin-key": "s3cret", "x-client-id": "fay"}
    )
    assert allowed.status == 200
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as unavailable:
            client.get_model_repository_index(headers={"x-client-id": "gus"})
        assert unavailable.value.status() == str(grpc.StatusCode.UNAVAILABLE)
        assert "expecting header 'admin-key'" in unavailable.value.message()
        client.get_model_repository_index(headers={"admin-key": "s3cret", "x-client-id": "hal"})


def test_refusals_are_counted_by_model_and_client_class(server: ServerProcess) -> None:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        page = reply.read().decode()
    assert 'conch_rate_limited_total{client_class="header",model="iris"} 2.0' in page
    assert 'conch_requests_total{code="429",protocol="http"} 1.0' in page
    assert 'conch_requests_total{code="RESOURCE_EXHAUSTED",protocol="grpc"} 1.0' in page
    assert "alice" not in page


def test_the_in_flight_cap_sheds_with_503(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A Python model holds the first request for a second; the second finds the server at its cap."""
    root = tmp_path_factory.mktemp("capped") / "models"
    (root / "slow" / "1").mkdir(parents=True)
    (root / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (root / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    server = start_server(root, "--max-in-flight", "1")
    body = json.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [1]}]}).encode()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(server.request, "POST", "/v2/models/slow/infer", body)
        time.sleep(0.4)
        second = server.request("POST", "/v2/models/slow/infer", body)
        assert first.result().status == 200
    assert second.status == 503
    assert second.headers["retry-after"] == "1"
    assert "--max-in-flight" in second.json()["error"]


SLOW_CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [{ name: "IN", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "OUT", data_type: TYPE_FP32, dims: [1] }]
"""

SLOW_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(1.0)
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", each)]) for each in inputs]
"""


def test_one_client_sending_past_many_refills_gets_the_rate_and_no_more(server: ServerProcess) -> None:
    """Requests one after another for 1.2 s: about 12 refill periods of the model's bucket. (Last: its
    refusals would change the counts the test above reads.)"""
    statuses: list[int] = []
    began = time.monotonic()
    while time.monotonic() - began < 1.2 and len(statuses) < 2000:
        reply = server.request("POST", "/v2/models/steady/infer", INFER_BODY, {"x-client-id": "steady"})
        statuses.append(reply.status)
    elapsed = time.monotonic() - began

    allowed = statuses.count(200)
    assert set(statuses) == {200, 429}
    assert statuses.count(429) >= 5, "the client did not send past the rate: nothing was judged"
    # The burst, then 10 a second over the time the server saw: the first and last trips aside, within 4.
    assert abs(allowed - (1 + 10 * elapsed)) <= 4, (allowed, elapsed, len(statuses))
