"""Input arrays a Python model keeps after ``execute`` (a cache, a batch accumulator) stay intact for
as long as it holds them, as on Triton, and their memory goes once it drops them.

Inputs are views on a shared-memory segment with no copy; a segment the model still views when
``execute`` returns is handed over to it and the next batch goes elsewhere. Before that rule, a model
keeping every input found 299 of 300 kept arrays overwritten by later requests.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures import python_models as models
from tests.integration.server_process import ServerProcess

REQUESTS = 300
KEEP_LAST = 4

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [
  {{ name: "BROKEN" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "KEPT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "MAPPED" data_type: TYPE_INT32 dims: [ 1 ] }}
]
parameters {{ key: "keep_last" value: {{ string_value: "{keep_last}" }} }}
"""

#: Keeps each request's input (every other one as a strided view of it), and a copy to compare with;
#: BROKEN counts kept arrays that no longer equal their copy, MAPPED the segments the server handed
#: over that this process still maps.
KEEPER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def handed_over_mappings():
    with open("/proc/self/maps") as maps:
        return len({line.split()[-2] for line in maps if "/conch-" in line and "(deleted)" in line})


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.keep_last = int(config["parameters"]["keep_last"]["string_value"])
        self.kept, self.copies = [], []

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            view = value[:, ::2] if len(self.kept) % 2 else value
            self.kept.append(view)
            self.copies.append(view.copy())
            if self.keep_last:
                del self.kept[: -self.keep_last], self.copies[: -self.keep_last]
            broken = sum(not np.array_equal(k, c) for k, c in zip(self.kept, self.copies))
            rows = value.shape[0]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("BROKEN", np.full((rows, 1), broken, np.int32)),
                        pb_utils.Tensor("KEPT", np.full((rows, 1), len(self.kept), np.int32)),
                        pb_utils.Tensor("MAPPED", np.full((rows, 1), handed_over_mappings(), np.int32)),
                    ]
                )
            )
        return responses
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kept-inputs")
    models.write_python_model(root, "keep_all", CONFIG.format(name="keep_all", keep_last=0), KEEPER)
    models.write_python_model(root, "keep_last", CONFIG.format(name="keep_last", keep_last=KEEP_LAST), KEEPER)
    echo = models.ONE_IN_ONE_OUT.format(
        name="echo", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
    )
    models.write_python_model(root, "echo", echo, models.SLEEPY)
    return root


def _value(index: int) -> np.ndarray:
    """Request ``index``'s input: sizes from 1 to 40,000 floats (160 KB), values unique to it."""
    size = (1, 8, 300, 40_000)[index % 4] + index % 7
    return np.arange(size, dtype=np.float32).reshape(1, size) + index * 1e5


def _infer_http(client: httpclient.InferenceServerClient, model: str, value: np.ndarray) -> dict[str, int]:
    tensor = httpclient.InferInput("IN", list(value.shape), "FP32")
    tensor.set_data_from_numpy(value, binary_data=True)
    result = client.infer(model, [tensor])
    return {name: int(result.as_numpy(name)[0, 0]) for name in ("BROKEN", "KEPT", "MAPPED")}


def _infer_grpc(client: grpcclient.InferenceServerClient, model: str, value: np.ndarray) -> dict[str, int]:
    tensor = grpcclient.InferInput("IN", list(value.shape), "FP32")
    tensor.set_data_from_numpy(value)
    result = client.infer(model, [tensor])
    return {name: int(result.as_numpy(name)[0, 0]) for name in ("BROKEN", "KEPT", "MAPPED")}


def _send_all(server: ServerProcess, model: str) -> list[dict[str, int]]:
    """REQUESTS requests of mixed sizes, half over HTTP and half over gRPC, from four threads (so that
    the dynamic batcher puts some in one batch, one segment). tritonclient's HTTP client is not
    thread-safe: each thread has its own clients."""

    def share(first: int) -> list[dict[str, int]]:
        with (
            httpclient.InferenceServerClient(server.http_url) as http,
            grpcclient.InferenceServerClient(server.grpc_url) as grpc,
        ):
            return [
                _infer_grpc(grpc, model, _value(i)) if i % 2 else _infer_http(http, model, _value(i))
                for i in range(first, REQUESTS, 4)
            ]

    with ThreadPoolExecutor(4) as pool:
        return [answer for answers in pool.map(share, range(4)) for answer in answers]


def test_kept_inputs_stay_intact_across_300_requests(server: ServerProcess) -> None:
    answers = _send_all(server, "keep_all")
    assert [answer["BROKEN"] for answer in answers] == [0] * REQUESTS
    last = _infer_grpc(grpcclient.InferenceServerClient(server.grpc_url), "keep_all", _value(7))
    assert last["KEPT"] == REQUESTS + 1
    assert last["BROKEN"] == 0


def test_memory_of_dropped_inputs_is_released(server: ServerProcess) -> None:
    answers = _send_all(server, "keep_last")
    assert all(answer["BROKEN"] == 0 for answer in answers)
    # The model holds KEEP_LAST inputs, each in a segment of its own at most: the rest are unmapped.
    assert max(answer["MAPPED"] for answer in answers[-50:]) <= KEEP_LAST + 1
    assert server.process is not None
    server_segments = list(Path("/dev/shm").glob(f"conch-{server.process.pid}-*"))
    assert len(server_segments) <= 16, "the server keeps only its pool's segments"


def test_a_model_that_keeps_nothing_reuses_its_segment(server: ServerProcess) -> None:
    """The common path: inputs not kept are read in place, and the same segment serves every request."""
    assert server.process is not None
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def segments_after(count: int) -> set[str]:
        for index in range(count):
            tensor = grpcclient.InferInput("IN", [4], "FP32")
            tensor.set_data_from_numpy(np.full(4, index, np.float32))
            np.testing.assert_array_equal(client.infer("echo", [tensor]).as_numpy("OUT"), np.full(4, index))
        return {p.name for p in Path("/dev/shm").glob(f"conch-{server.process.pid}-*")}

    assert segments_after(20) == segments_after(3)
