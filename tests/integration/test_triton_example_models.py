"""The models ``bench.triton_examples`` serves to Triton's client examples load in conch and answer as
those examples check, over tritonclient HTTP and gRPC.

The examples themselves live in Triton's client repository, outside this project; these tests keep
the models they need (``bench/triton_example_models/``) working between runs of the bench.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.triton_examples import CONCH_FLAGS, MODELS
from tests.integration.server_process import ServerProcess


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    return start_server(MODELS, *CONCH_FLAGS)


def test_every_model_loads_and_the_server_calls_itself_triton(server: ServerProcess) -> None:
    index = server.request("POST", "/v2/repository/index").json()
    folders = sorted(path.name for path in MODELS.iterdir() if path.is_dir())

    assert sorted(entry["name"] for entry in index) == folders
    assert all(entry["state"] == "READY" for entry in index), index
    assert server.request("GET", "/v2").json()["name"] == "triton"


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_simple_adds_and_subtracts_as_the_examples_check(server: ServerProcess, module: Any) -> None:
    url = server.http_url if module is httpclient else server.grpc_url
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.full((1, 16), -3, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)

    result = module.InferenceServerClient(url).infer("simple", inputs)

    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)


def test_simple_string_answers_numbers_as_text(server: ServerProcess) -> None:
    text = np.array([str(i).encode() for i in range(16)], dtype=np.object_).reshape(1, 16)
    ones = np.array([b"1"] * 16, dtype=np.object_).reshape(1, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
        httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(text)
    inputs[1].set_data_from_numpy(ones)

    result = httpclient.InferenceServerClient(server.http_url).infer("simple_string", inputs)

    assert result.as_numpy("OUTPUT0").ravel().tolist() == [str(i + 1).encode() for i in range(16)]
    assert result.as_numpy("OUTPUT1").ravel().tolist() == [str(i - 1).encode() for i in range(16)]


def test_a_sequence_with_a_string_id_answers_its_first_value_plus_one(server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    sequence = str(uuid.uuid4())
    values = [20, -7, -5]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for position, value in enumerate(values):
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            client.async_stream_infer(
                "simple_sequence",
                [tensor],
                sequence_id=sequence,
                sequence_start=position == 0,
                sequence_end=position == len(values) - 1,
            )
        got = [answers.get(timeout=30) for _ in values]
        client.stop_stream()

    assert [int(result.as_numpy("OUTPUT")[0, 0]) for result in got] == [21, -7, -5]


def test_repeat_int32_answers_once_per_value_over_a_stream(server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    inputs = [
        grpcclient.InferInput("IN", [3], "INT32"),
        grpcclient.InferInput("DELAY", [3], "UINT32"),
        grpcclient.InferInput("WAIT", [1], "UINT32"),
    ]
    inputs[0].set_data_from_numpy(np.array([100, 101, 102], dtype=np.int32))
    inputs[1].set_data_from_numpy(np.full(3, 1000, dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([1000], dtype=np.uint32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        client.async_stream_infer("repeat_int32", inputs)
        got = [answers.get(timeout=30) for _ in range(3)]
        client.stop_stream()

    assert [int(r.as_numpy("OUT")[0]) for r in got] == [100, 101, 102]
    assert [int(r.as_numpy("IDX")[0]) for r in got] == [0, 1, 2]


def test_densenet_classifies_an_image_with_its_labels(server: ServerProcess) -> None:
    image = np.random.default_rng(1).random((3, 224, 224), dtype=np.float32)
    tensor = grpcclient.InferInput("data_0", [3, 224, 224], "FP32")
    tensor.set_data_from_numpy(image)
    wanted = [grpcclient.InferRequestedOutput("fc6_1", class_count=3)]

    result = grpcclient.InferenceServerClient(server.grpc_url).infer(
        "densenet_onnx", [tensor], outputs=wanted
    )

    classes = [entry.decode().split(":") for entry in result.as_numpy("fc6_1").ravel()]
    scores = [float(score) for score, _, _ in classes]
    assert len(classes) == 3 and scores == sorted(scores, reverse=True)
    assert all(label == f"class {index}" for _, index, label in classes)
