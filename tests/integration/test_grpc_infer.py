"""Inference over gRPC: every datatype, several inputs and outputs, typed contents and streaming.

Each answer is compared with what onnxruntime computes when it runs the same model file directly, so
the server adds nothing and loses nothing between the wire and the graph.
"""

from __future__ import annotations

import queue
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from sklearn.datasets import load_digits
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import (
    ONNX_TYPES,
    add_sub_model,
    identity_model,
    multi_dtype_model,
    write_repository,
)
from tests.integration.conftest import EXAMPLES
from tests.integration.server_process import ServerProcess

MODELS: dict[str, onnx.ModelProto] = {
    **{
        f"identity-{datatype.lower()}": identity_model(onnx_type)
        for datatype, onnx_type in ONNX_TYPES.items()
    },
    "add-sub": add_sub_model(),
    "multi-dtype": multi_dtype_model(),
}


SERVING_MODES = {
    "in-process": [],
    "proxies": ["--proxies", "2"],
    "grpc.aio's own acceptance": ["--grpc-acceptors", "0"],
}


@pytest.fixture(scope="module", params=list(SERVING_MODES))
def server(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> ServerProcess:
    """An identity model per datatype, add-sub, multi-dtype (all auto-completed) and digits-mlp; every
    test runs against gRPC served in-process (with its inference calls accepted several at once, and
    one at a time as ``grpc.aio`` accepts them) and through two proxy processes (``--proxies 2``)."""
    root = write_repository(tmp_path_factory.mktemp("grpc-infer"), {n: (m, None) for n, m in MODELS.items()})
    shutil.copytree(EXAMPLES / "digits-mlp", root / "digits-mlp")
    return start_server(root, *SERVING_MODES[request.param])


def run_directly(model: onnx.ModelProto | Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What onnxruntime itself answers, every output by name."""
    source = model if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def sample(datatype: str, shape: tuple[int, ...] = (2, 4)) -> np.ndarray:
    """Deterministic data for ``datatype`` that includes the extremes of the type."""
    count = int(np.prod(shape))
    if datatype == "BOOL":
        return (np.arange(count) % 3 == 0).reshape(shape)
    if datatype == "BYTES":
        words = [b"", b"conch", "\u00e9t\u00e9 \u2603".encode(), b"a" * 300, b"x y", b"0", b"\n\t", b"last"]
        return np.array((words * count)[:count], dtype=np.object_).reshape(shape)
    dtype = grpcclient.triton_to_np_dtype(datatype)
    if datatype.startswith("FP"):
        info = np.finfo(dtype)
        values = [info.min, info.max, -0.0, np.inf, -np.inf, info.tiny, np.nan, -2.25]
    else:
        limits = np.iinfo(dtype)
        values = [limits.min, limits.max, 0, 1, limits.max - 1, limits.min + 1, 7, 100]
    return np.array((values * count)[:count], dtype=dtype).reshape(shape)


def tensor(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    """A tritonclient input holding ``array``; sent in ``raw_input_contents``."""
    item = grpcclient.InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array)
    return item


@pytest.mark.parametrize("datatype", list(ONNX_TYPES))
def test_every_datatype_round_trips_as_onnxruntime_computes_it(
    grpc_client: grpcclient.InferenceServerClient, datatype: str
) -> None:
    data = sample(datatype)
    model = f"identity-{datatype.lower()}"
    result = grpc_client.infer(model, [tensor("INPUT0", data, datatype)])

    output = result.get_output("OUTPUT0")
    assert output.datatype == datatype
    assert list(output.shape) == [2, 4]
    served = result.as_numpy("OUTPUT0")
    # onnxruntime takes and returns string tensors as str; the wire carries UTF-8 bytes.
    feed = np.vectorize(bytes.decode, otypes=[np.object_])(data) if datatype == "BYTES" else data
    expected = run_directly(MODELS[model], {"INPUT0": feed})["OUTPUT0"]
    if datatype == "BYTES":
        expected = np.vectorize(str.encode, otypes=[np.object_])(expected)
    assert served.dtype == data.dtype
    np.testing.assert_array_equal(served, expected)
    if datatype != "BYTES":
        assert served.tobytes() == data.tobytes()  # bit for bit: -0.0 and NaN included


def test_two_inputs_two_outputs(grpc_client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 16), dtype=np.float32)
    b = rng.standard_normal((3, 16), dtype=np.float32)
    result = grpc_client.infer("add-sub", [tensor("INPUT0", a, "FP32"), tensor("INPUT1", b, "FP32")])

    expected = run_directly(MODELS["add-sub"], {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected["OUTPUT1"])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT0", "OUTPUT1"]


def test_a_large_request_arrives_whole(grpc_client: grpcclient.InferenceServerClient) -> None:
    # Over 64 KiB a request's raw inputs are taken as views of the call's bytes, unparsed by protobuf.
    # The model is ONNX Runtime's Identity on strings, which must be UTF-8.
    text = np.array(
        [[b"a" * 70_000, b"", b"b", "\u00e9".encode() * 100_000], [b"c" * 3, b"\xc3\xa9", b"", b"z"]],
        dtype=np.object_,
    )
    result = grpc_client.infer("identity-bytes", [tensor("INPUT0", text, "BYTES")], request_id="large-1")
    assert result.as_numpy("OUTPUT0").tolist() == text.tolist()
    assert result.get_response().id == "large-1"


def test_mixed_datatypes_and_a_batch_only_output_as_n_by_1(
    grpc_client: grpcclient.InferenceServerClient,
) -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.array([[0.5, 1.25], [-3.0, 1e300]], dtype=np.float64)
    result = grpc_client.infer("multi-dtype", [tensor("A", a, "INT32"), tensor("B", b, "FP64")])

    expected = run_directly(MODELS["multi-dtype"], {"A": a, "B": b})
    np.testing.assert_array_equal(result.as_numpy("A_PLUS_ONE"), expected["A_PLUS_ONE"])
    np.testing.assert_array_equal(result.as_numpy("B_DOUBLE"), expected["B_DOUBLE"])
    # The graph's B_SUM is [N]; the auto-completed config shows it as [N, 1], as Triton does.
    assert expected["B_SUM"].shape == (2,)
    assert list(result.get_output("B_SUM").shape) == [2, 1]
    np.testing.assert_array_equal(result.as_numpy("B_SUM"), expected["B_SUM"].reshape(2, 1))
    assert {o.name: o.datatype for o in result.get_response().outputs} == {
        "A_PLUS_ONE": "INT32",
        "B_SUM": "FP64",
        "B_DOUBLE": "FP64",
    }


@pytest.mark.parametrize(
    ("requested", "model"),
    [(["OUTPUT1"], "add-sub"), (["B_SUM"], "multi-dtype"), (["B_DOUBLE", "A_PLUS_ONE"], "multi-dtype")],
)
def test_only_the_requested_outputs_come_back(
    grpc_client: grpcclient.InferenceServerClient, requested: list[str], model: str
) -> None:
    if model == "add-sub":
        inputs = [tensor(n, np.ones((1, 16), dtype=np.float32), "FP32") for n in ("INPUT0", "INPUT1")]
    else:
        inputs = [tensor("A", np.ones((1, 3), np.int32), "INT32"), tensor("B", np.ones((1, 2)), "FP64")]
    outputs = [grpcclient.InferRequestedOutput(name) for name in requested]
    result = grpc_client.infer(model, inputs, outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == requested


def test_request_id_and_version_are_echoed(grpc_client: grpcclient.InferenceServerClient) -> None:
    data = np.ones((1, 4), dtype=np.int64)
    result = grpc_client.infer("identity-int64", [tensor("INPUT0", data, "INT64")], request_id="request-42")
    response = result.get_response()
    assert response.id == "request-42"
    assert response.model_name == "identity-int64"
    assert response.model_version == "1"


def typed_request(
    model: str, datatype: str, shape: list[int], field: str, values: Sequence[object]
) -> service_pb2.ModelInferRequest:
    """A ``ModelInferRequest`` carrying INPUT0 in the typed ``contents`` field instead of raw bytes."""
    request = service_pb2.ModelInferRequest(model_name=model)
    item = request.inputs.add(name="INPUT0", datatype=datatype, shape=shape)
    getattr(item.contents, field).extend(values)
    return request


TYPED_CASES = [
    ("INT8", "int_contents", [-(2**7), 2**7 - 1, 0, -5], np.int8),
    ("INT16", "int_contents", [-(2**15), 2**15 - 1, 0, -5], np.int16),
    ("INT32", "int_contents", [-(2**31), 2**31 - 1, 0, 5], np.int32),
    ("UINT8", "uint_contents", [0, 2**8 - 1, 1, 128], np.uint8),
    ("UINT16", "uint_contents", [0, 2**16 - 1, 1, 2**15], np.uint16),
    ("UINT32", "uint_contents", [0, 2**32 - 1, 1, 2**31], np.uint32),
    ("INT64", "int64_contents", [-(2**63), 2**63 - 1, 0, -5], np.int64),
    ("UINT64", "uint64_contents", [0, 2**64 - 1, 1, 2**63], np.uint64),
    ("FP32", "fp32_contents", [1.5, -0.25, 3.0e38, 0.0], np.float32),
    ("FP64", "fp64_contents", [1.5, -0.25, 1.0e308, 5.0e-324], np.float64),
    ("BOOL", "bool_contents", [True, False, False, True], np.bool_),
]


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"), TYPED_CASES, ids=[c[0] for c in TYPED_CASES]
)
def test_typed_contents_instead_of_raw(
    grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub,
    datatype: str,
    field: str,
    values: list[object],
    dtype: type,
) -> None:
    request = typed_request(f"identity-{datatype.lower()}", datatype, [1, 4], field, values)
    response = grpc_stub.ModelInfer(request)

    (output,) = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == ("OUTPUT0", datatype, [1, 4])
    # Answers always come back in raw_output_contents, as Triton sends them.
    served: np.ndarray = np.frombuffer(response.raw_output_contents[0], dtype=dtype)
    np.testing.assert_array_equal(served, np.array(values, dtype=dtype))


def test_typed_bytes_contents(grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    words = [b"alpha", b"", "\u00fcber".encode(), b"omega"]
    response = grpc_stub.ModelInfer(typed_request("identity-bytes", "BYTES", [1, 4], "bytes_contents", words))
    result = grpcclient.InferResult(response)
    assert result.as_numpy("OUTPUT0").tolist() == [words]


def test_fp16_in_typed_contents_is_rejected(grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    # The protocol has no typed field for FP16: it can only travel in raw_input_contents.
    request = typed_request("identity-fp16", "FP16", [1, 4], "fp32_contents", [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(grpc.RpcError) as caught:
        grpc_stub.ModelInfer(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FP16" in caught.value.details()


def test_typed_contents_with_the_wrong_count_is_rejected(
    grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = typed_request("identity-int32", "INT32", [1, 4], "int_contents", [1, 2, 3])
    with pytest.raises(grpc.RpcError) as caught:
        grpc_stub.ModelInfer(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in caught.value.details()


def test_stream_answers_every_request_and_reports_the_bad_one_on_the_stream(
    server: ServerProcess,
) -> None:
    answers: queue.Queue[tuple[grpcclient.InferResult | None, InferenceServerException | None]] = (
        queue.Queue()
    )
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for index in range(3):
            data = np.full((1, 16), index, dtype=np.float32)
            inputs = [tensor("INPUT0", data, "FP32"), tensor("INPUT1", data, "FP32")]
            client.async_stream_infer("add-sub", inputs, request_id=f"good-{index}")
        bad = [tensor("INPUT0", np.ones((1, 16), np.float32), "FP32")]  # INPUT1 is missing
        client.async_stream_infer("add-sub", bad, request_id="bad")
        client.async_stream_infer(
            "identity-int8", [tensor("INPUT0", sample("INT8"), "INT8")], request_id="last"
        )
        received = [answers.get(timeout=10) for _ in range(5)]
    finally:
        client.stop_stream()
        client.close()

    results = {r.get_response().id: r for r, e in received if r is not None}
    errors = [e for r, e in received if e is not None]
    assert sorted(results) == ["good-0", "good-1", "good-2", "last"]
    for index in range(3):
        np.testing.assert_array_equal(
            results[f"good-{index}"].as_numpy("OUTPUT0"), np.full((1, 16), 2 * index)
        )
    np.testing.assert_array_equal(results["last"].as_numpy("OUTPUT0"), sample("INT8"))
    (error,) = errors
    assert "INPUT1" in (error.message() or "")


def test_stream_error_names_the_failed_request_id(
    grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    # tritonclient's callback only sees the message; the raw stream shows the id Triton sends with it.
    good = typed_request("identity-int32", "INT32", [1, 4], "int_contents", [1, 2, 3, 4])
    good.id = "good"
    bad = typed_request("identity-int32", "INT32", [1, 5], "int_contents", [1, 2, 3, 4, 5])
    bad.id = "bad"
    replies = {reply.infer_response.id: reply for reply in grpc_stub.ModelStreamInfer(iter([good, bad]))}

    assert sorted(replies) == ["bad", "good"]
    assert replies["good"].error_message == ""
    assert [o.name for o in replies["good"].infer_response.outputs] == ["OUTPUT0"]
    assert "INPUT0" in replies["bad"].error_message
    assert not replies["bad"].infer_response.outputs


def test_digits_mlp_predicts_as_onnxruntime(grpc_client: grpcclient.InferenceServerClient) -> None:
    digits = load_digits()
    pixels = digits.data[:8].astype(np.float32)  # (8, 64), intensities 0..16
    outputs = [grpcclient.InferRequestedOutput("label"), grpcclient.InferRequestedOutput("probabilities")]
    result = grpc_client.infer("digits-mlp", [tensor("pixels", pixels, "FP32")], outputs=outputs)

    expected = run_directly(EXAMPLES / "digits-mlp" / "1" / "model.onnx", {"pixels": pixels})
    label = result.as_numpy("label")
    assert label.shape == (8, 1)  # the graph's [N] label, reshaped by the config to [N, 1]
    np.testing.assert_array_equal(label.ravel(), expected["label"])
    np.testing.assert_allclose(result.as_numpy("probabilities"), expected["probabilities"], rtol=1e-5)
    np.testing.assert_array_equal(label.ravel(), digits.target[:8])
