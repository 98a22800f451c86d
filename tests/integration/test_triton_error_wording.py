"""Errors begin with Triton's own words, over tritonclient HTTP and gRPC, against a real conch serve.

Scripts written against Triton match on its messages (``"unexpected shape for input"``...), so where
Triton's message for a case is known conch's message starts with it, word for word, and conch's hint
on how to fix the call follows. The prefixes below come from Triton's sources (core's
``infer_request.cc``, ``model.cc``, ``model_repository_manager.cc``; server's ``common.cc`` and
``grpc/infer_handler.cc``). HTTP status codes stay conch's own (404 for an unknown model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import ADD_SUB_CONFIG, add_sub_model, write_repository

# Either tritonclient module: both name their InferInput and InferRequestedOutput alike.
Client = Any
Module = Any


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    return write_repository(root, {"simple": (add_sub_model(), ADD_SUB_CONFIG.replace("{name}", "simple"))})


def make_input(module: Module, name: str, array: np.ndarray, shape: list[int] | None = None) -> Any:
    """An input holding ``array``; ``shape`` (if given) is declared instead of the array's own."""
    tensor = module.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    if shape is not None:
        tensor.set_shape(shape)  # tritonclient keeps the data: a shape the bytes do not fill
    return tensor


def good_inputs(module: Module, rows: int = 1) -> list[Any]:
    return [make_input(module, n, np.ones((rows, 16), dtype=np.float32)) for n in ("INPUT0", "INPUT1")]


@dataclass
class Case:
    """One bad call: what to send and the exact start of the error message."""

    id: str
    send: Callable[[Client, Module], Any]
    prefix: str


ONE_ROW = np.ones((1, 16), dtype=np.float32)

CASES = [
    Case(
        "unknown-model",
        lambda c, m: c.infer("nope", good_inputs(m)),
        "Request for unknown model: 'nope' is not found",
    ),
    Case(
        "unknown-version",
        lambda c, m: c.infer("simple", good_inputs(m), model_version="9"),
        "Request for unknown model: 'simple' version 9 is not found",
    ),
    Case(
        "bad-version-string",
        lambda c, m: c.infer("simple", good_inputs(m), model_version="v1"),
        "failed to get model version from specified version string 'v1'",
    ),
    Case(
        "unexpected-shape",
        lambda c, m: c.infer(
            "simple",
            [make_input(m, n, np.ones((1, 15), dtype=np.float32)) for n in ("INPUT0", "INPUT1")],
        ),
        "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]",
    ),
    Case(
        "byte-size-mismatch",
        lambda c, m: c.infer(
            "simple",
            [
                make_input(m, "INPUT0", ONE_ROW),
                make_input(m, "INPUT1", np.ones((1, 8), dtype=np.float32), shape=[1, 16]),
            ],
        ),
        "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 32",
    ),
    Case(
        "unknown-input",
        lambda c, m: c.infer("simple", [*good_inputs(m), make_input(m, "INPUT7", ONE_ROW)]),
        "unexpected inference input 'INPUT7' for model 'simple'",
    ),
    Case(
        "missing-input",
        lambda c, m: c.infer("simple", [make_input(m, "INPUT0", ONE_ROW)]),
        "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing "
        "required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    Case(
        "wrong-datatype",
        lambda c, m: c.infer("simple", [make_input(m, "INPUT0", ONE_ROW), _fp64_input(m, "INPUT1")]),
        "inference input 'INPUT1' data-type is 'FP64', but model 'simple' expects 'FP32'",
    ),
    Case(
        "batch-too-large",
        lambda c, m: c.infer("simple", good_inputs(m, rows=9)),
        "inference request batch-size must be <= 8 for 'simple'",
    ),
    Case(
        "unknown-output",
        lambda c, m: c.infer("simple", good_inputs(m), outputs=[m.InferRequestedOutput("OUTPUT9")]),
        "unexpected inference output 'OUTPUT9' for model 'simple'",
    ),
]


def _fp64_input(module: Module, name: str) -> Any:
    tensor = module.InferInput(name, [1, 16], "FP64")
    tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float64))
    return tensor


STATUS = {"unknown-model": "404", "unknown-version": "404"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_http_error_starts_with_tritons_words(
    http_client: httpclient.InferenceServerClient, case: Case
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        case.send(http_client, httpclient)

    message = caught.value.message()
    assert message.startswith(case.prefix), message
    assert caught.value.status() == STATUS.get(case.id, "400")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_grpc_error_starts_with_tritons_words(
    grpc_client: grpcclient.InferenceServerClient, case: Case
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        case.send(grpc_client, grpcclient)

    message = caught.value.message()
    assert message.startswith(case.prefix), message
    expected = "StatusCode.NOT_FOUND" if case.id in STATUS else "StatusCode.INVALID_ARGUMENT"
    assert caught.value.status() == expected


def test_conch_keeps_its_hint_after_tritons_words(http_client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as caught:
        CASES[3].send(http_client, httpclient)

    assert "; -1 is any size, and the first dimension is the batch (1 to 8 rows)" in caught.value.message()


def test_grpc_raw_and_typed_contents_together(grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    # tritonclient never mixes the two, so the raw service message is built here.
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(ONE_ROW.tobytes())
    request.inputs[0].contents.fp32_contents.extend([1.0] * 16)

    with pytest.raises(Exception) as caught:
        grpc_stub.ModelInfer(request)

    details = caught.value.details()  # type: ignore[attr-defined]
    assert details.startswith(
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"
    ), details
