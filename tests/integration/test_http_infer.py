"""Inference over V2 REST with tritonclient.http, checked against onnxruntime on the same model files.

Covers JSON and the binary tensor extension in both directions, every V2 datatype, several inputs
and outputs, output selection, request ids, compressed bodies and the bundled example models.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from tritonclient.utils import triton_to_np_dtype

from tests.fixtures.onnx_models import (
    ONNX_TYPES,
    add_sub_model,
    identity_model,
    multi_dtype_model,
    write_repository,
)
from tests.integration.conftest import EXAMPLES
from tests.integration.server_process import ServerProcess

TEXTS = [
    "",
    "plain ascii",
    "héllo wörld",
    "日本語のテキスト",
    "conch 🐚",
    "tab\tnew\nline",
    'quote " and \\',
    "ß" * 100,
]


def identity_name(datatype: str) -> str:
    return f"identity-{datatype.lower()}"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = {
        identity_name(datatype): (identity_model(onnx_type), None)
        for datatype, onnx_type in ONNX_TYPES.items()
    }
    models["add-sub"] = (add_sub_model(), None)
    models["multi-dtype"] = (multi_dtype_model(), None)
    root = write_repository(tmp_path_factory.mktemp("infer") / "models", models)
    for example in ("iris-pipeline", "digits-mlp"):
        shutil.copytree(EXAMPLES / example, root / example)
    return root


@pytest.fixture(scope="module", params=["in-process", "proxies"])
def server(
    start_server: Callable[..., ServerProcess], repository: Path, request: pytest.FixtureRequest
) -> ServerProcess:
    """The repository served by one process, and by two proxy processes in front of the model
    process (``--proxies 2``): every test runs against both."""
    return start_server(repository, "--proxies", "2" if request.param == "proxies" else "0")


@pytest.fixture(scope="module")
def onnxruntime_run(repository: Path) -> Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Runs ``<model>/1/model.onnx`` of the served repository directly in onnxruntime: the reference."""
    sessions: dict[str, ort.InferenceSession] = {}

    def run(model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if model not in sessions:
            sessions[model] = ort.InferenceSession(str(repository / model / "1" / "model.onnx"))
        session = sessions[model]
        names = [output.name for output in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))

    return run


def sample(datatype: str) -> np.ndarray:
    """A [2, 4] tensor that includes the extremes of ``datatype``."""
    dtype = triton_to_np_dtype(datatype)
    if datatype == "BYTES":
        values = np.array([text.encode() for text in TEXTS], dtype=np.object_)
    elif datatype == "BOOL":
        values = np.array([True, False, False, True, True, True, False, False])
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = np.array([info.min, info.max, 0, 1, 7, info.max - 1, info.min + 1, 42], dtype=dtype)
    else:
        finfo = np.finfo(dtype)
        values = np.array([0.0, -0.0, 1.5, -2.25, finfo.max, finfo.min, finfo.tiny, 1 / 3], dtype=dtype)
    return values.reshape(2, 4)


def as_text(array: np.ndarray) -> np.ndarray:
    """BYTES outputs come back as bytes (binary) or str (JSON); compare them as str."""
    return np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(array)


def make_input(name: str, array: np.ndarray, datatype: str, binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


@pytest.mark.parametrize("binary_out", [True, False], ids=["binary-out", "json-out"])
@pytest.mark.parametrize("binary_in", [True, False], ids=["binary-in", "json-in"])
@pytest.mark.parametrize("datatype", list(ONNX_TYPES))
def test_every_datatype_round_trips(
    http_client: httpclient.InferenceServerClient,
    onnxruntime_run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
    datatype: str,
    binary_in: bool,
    binary_out: bool,
) -> None:
    data = sample(datatype)
    model = identity_name(datatype)
    result = http_client.infer(
        model,
        [make_input("INPUT0", data, datatype, binary_in)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)],
    )
    output = result.get_output("OUTPUT0")
    assert (output["datatype"], output["shape"]) == (datatype, [2, 4])
    assert ("parameters" in output) == binary_out
    received = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        expected = onnxruntime_run(model, {"INPUT0": as_text(data)})["OUTPUT0"]
        np.testing.assert_array_equal(as_text(received), expected)
        np.testing.assert_array_equal(as_text(received), as_text(data))
    else:
        expected = onnxruntime_run(model, {"INPUT0": data})["OUTPUT0"]
        assert received.dtype == expected.dtype
        np.testing.assert_array_equal(received, expected)
        np.testing.assert_array_equal(received, data)


def test_two_inputs_two_outputs_mixing_binary_and_json(
    http_client: httpclient.InferenceServerClient,
    onnxruntime_run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
) -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((3, 16)).astype(np.float32) for _ in range(2))
    result = http_client.infer(
        "add-sub",
        [make_input("INPUT0", a, "FP32", binary=True), make_input("INPUT1", b, "FP32", binary=False)],
        outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
        ],
    )
    assert result.get_output("OUTPUT0")["parameters"] == {"binary_data_size": 3 * 16 * 4}
    assert len(result.get_output("OUTPUT1")["data"]) == 3 * 16
    expected = onnxruntime_run("add-sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected["OUTPUT1"])


def test_all_outputs_are_binary_when_none_is_named(http_client: httpclient.InferenceServerClient) -> None:
    # With no outputs listed, tritonclient asks for binary_data_output: true.
    ones = np.ones((1, 16), dtype=np.float32)
    result = http_client.infer(
        "add-sub", [make_input("INPUT0", ones, "FP32"), make_input("INPUT1", ones, "FP32")]
    )
    response = result.get_response()
    assert [o["name"] for o in response["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert all("binary_data_size" in o["parameters"] for o in response["outputs"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * ones)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 0 * ones)


def test_outputs_of_several_datatypes_and_a_batch_only_output(
    http_client: httpclient.InferenceServerClient,
    onnxruntime_run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
) -> None:
    a = np.arange(12, dtype=np.int32).reshape(4, 3)
    b = np.linspace(-1.0, 1.0, 8).reshape(4, 2)
    result = http_client.infer(
        "multi-dtype", [make_input("A", a, "INT32"), make_input("B", b, "FP64", binary=False)]
    )
    expected = onnxruntime_run("multi-dtype", {"A": a, "B": b})
    np.testing.assert_array_equal(result.as_numpy("A_PLUS_ONE"), expected["A_PLUS_ONE"])
    np.testing.assert_array_equal(result.as_numpy("B_DOUBLE"), expected["B_DOUBLE"])
    # B_SUM is [N] in the graph; auto-complete gives it dims [1] + reshape [], so clients get [N, 1].
    assert expected["B_SUM"].shape == (4,)
    assert result.get_output("B_SUM")["shape"] == [4, 1]
    np.testing.assert_array_equal(result.as_numpy("B_SUM"), expected["B_SUM"].reshape(4, 1))
    assert result.get_output("A_PLUS_ONE")["datatype"] == "INT32"
    assert result.get_output("B_SUM")["datatype"] == "FP64"


def test_only_the_requested_outputs_come_back_in_the_requested_order(
    http_client: httpclient.InferenceServerClient,
) -> None:
    a, b = np.full((2, 16), 5, dtype=np.float32), np.full((2, 16), 3, dtype=np.float32)
    inputs = [make_input("INPUT0", a, "FP32"), make_input("INPUT1", b, "FP32")]
    only_difference = http_client.infer(
        "add-sub", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
    )
    assert [o["name"] for o in only_difference.get_response()["outputs"]] == ["OUTPUT1"]
    assert only_difference.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(only_difference.as_numpy("OUTPUT1"), a - b)

    reversed_order = [httpclient.InferRequestedOutput("OUTPUT1"), httpclient.InferRequestedOutput("OUTPUT0")]
    both = http_client.infer("add-sub", inputs, outputs=reversed_order)
    assert [o["name"] for o in both.get_response()["outputs"]] == ["OUTPUT1", "OUTPUT0"]
    np.testing.assert_array_equal(both.as_numpy("OUTPUT0"), a + b)


def test_request_id_is_echoed(http_client: httpclient.InferenceServerClient) -> None:
    ones = np.ones((1, 4), dtype=np.float32)
    named = http_client.infer("identity-fp32", [make_input("INPUT0", ones, "FP32")], request_id="order-66")
    assert named.get_response()["id"] == "order-66"
    assert (named.get_response()["model_name"], named.get_response()["model_version"]) == (
        "identity-fp32",
        "1",
    )
    anonymous = http_client.infer("identity-fp32", [make_input("INPUT0", ones, "FP32")])
    assert "id" not in anonymous.get_response()


def test_plain_json_request_with_nested_data(server: ServerProcess) -> None:
    rows = [[float(i + 16 * r) for i in range(16)] for r in range(2)]
    body = {
        "id": "nested",
        "inputs": [
            {"name": "INPUT0", "shape": [2, 16], "datatype": "FP32", "data": rows},
            {"name": "INPUT1", "shape": [2, 16], "datatype": "FP32", "data": [[1.0] * 16, [2.0] * 16]},
        ],
        "outputs": [{"name": "OUTPUT0"}],
    }
    reply = server.request("POST", "/v2/models/add-sub/infer", json.dumps(body).encode())
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in reply.headers
    response = reply.json()
    assert response["id"] == "nested"
    (output,) = response["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("OUTPUT0", "FP32", [2, 16])
    expected = np.array(rows, dtype=np.float32) + np.array([[1.0], [2.0]], dtype=np.float32)
    assert output["data"] == expected.ravel().tolist()  # V2 JSON output data is flat, row-major


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_compressed_request_bodies(
    http_client: httpclient.InferenceServerClient,
    onnxruntime_run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
    algorithm: str,
    binary: bool,
) -> None:
    a = np.arange(64, dtype=np.float32).reshape(4, 16)
    b = np.full((4, 16), 0.5, dtype=np.float32)
    inputs = [make_input("INPUT0", a, "FP32", binary), make_input("INPUT1", b, "FP32", binary)]
    result = http_client.infer("add-sub", inputs, request_compression_algorithm=algorithm)
    expected = onnxruntime_run("add-sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected["OUTPUT1"])


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_response_compression_request_still_decodes(
    http_client: httpclient.InferenceServerClient, server: ServerProcess, algorithm: str
) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    inputs = [make_input("INPUT0", a, "FP32"), make_input("INPUT1", a, "FP32")]
    result = http_client.infer("add-sub", inputs, response_compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)

    # tritonclient decodes either way, so the raw reply shows that the server did compress.
    body = {
        "inputs": [
            {"name": f"INPUT{i}", "shape": [2, 16], "datatype": "FP32", "data": a.ravel().tolist()}
            for i in range(2)
        ]
    }
    reply = server.request(
        "POST", "/v2/models/add-sub/infer", json.dumps(body).encode(), {"Accept-Encoding": algorithm}
    )
    assert reply.status == 200
    assert reply.headers.get("content-encoding") == algorithm
    assert int(reply.headers["content-length"]) == len(reply.body)
    decoded = {"gzip": gzip.decompress, "deflate": zlib.decompress}[algorithm](reply.body)
    assert len(reply.body) < len(decoded), "a compressed answer is smaller than the JSON it holds"
    assert json.loads(decoded)["outputs"][1]["data"] == [0.0] * 32


def test_binary_answers_are_labelled_octet_stream_and_json_answers_json(server: ServerProcess) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    inputs = [
        {"name": f"INPUT{i}", "shape": [2, 16], "datatype": "FP32", "data": a.ravel().tolist()}
        for i in range(2)
    ]
    binary = server.request(
        "POST",
        "/v2/models/add-sub/infer",
        json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode(),
    )
    plain = server.request("POST", "/v2/models/add-sub/infer", json.dumps({"inputs": inputs}).encode())

    assert binary.status == 200
    assert binary.headers["content-type"] == "application/octet-stream"
    header_length = int(binary.headers["inference-header-content-length"])
    header = json.loads(binary.body[:header_length])
    sizes = [output["parameters"]["binary_data_size"] for output in header["outputs"]]
    assert sizes == [2 * 16 * 4, 2 * 16 * 4]
    output0 = np.frombuffer(binary.body[header_length : header_length + sizes[0]], dtype=np.float32)
    np.testing.assert_array_equal(output0.reshape(2, 16), 2 * a)
    assert plain.status == 200
    assert plain.headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in plain.headers


def test_concurrent_requests_each_get_their_own_answer(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url, concurrency=4) as client:
        pending = []
        for k in range(8):
            a = np.full((1, 16), k, dtype=np.float32)
            inputs = [make_input("INPUT0", a, "FP32"), make_input("INPUT1", a, "FP32")]
            pending.append((k, client.async_infer("add-sub", inputs, request_id=str(k))))
        for k, request in pending:
            result = request.get_result()
            assert result.get_response()["id"] == str(k)
            np.testing.assert_array_equal(
                result.as_numpy("OUTPUT0"), np.full((1, 16), 2 * k, dtype=np.float32)
            )


def test_example_iris_pipeline_matches_onnxruntime(
    http_client: httpclient.InferenceServerClient,
    onnxruntime_run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
) -> None:
    flowers = np.array(  # sepal length, sepal width, petal length, petal width (cm): 2 of each species
        [
            [5.1, 3.5, 1.4, 0.2],
            [4.9, 3.0, 1.4, 0.2],
            [7.0, 3.2, 4.7, 1.4],
            [6.4, 3.2, 4.5, 1.5],
            [6.3, 3.3, 6.0, 2.5],
            [5.8, 2.7, 5.1, 1.9],
        ],
        dtype=np.float32,
    )
    result = http_client.infer("iris-pipeline", [make_input("input", flowers, "FP32")])
    expected = onnxruntime_run("iris-pipeline", {"input": flowers})
    np.testing.assert_array_equal(result.as_numpy("label"), expected["label"].reshape(-1, 1))
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), expected["probabilities"], rtol=1e-5, atol=1e-7
    )
    assert result.as_numpy("label").ravel().tolist() == [0, 0, 1, 1, 2, 2]


def test_example_digits_mlp_matches_onnxruntime(
    http_client: httpclient.InferenceServerClient,
    onnxruntime_run: Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]],
) -> None:
    digits = load_digits()
    pixels = digits.data[:16].astype(np.float32)  # 16 images of 8x8 intensities 0..16
    result = http_client.infer(
        "digits-mlp",
        [make_input("pixels", pixels, "FP32", binary=False)],
        outputs=[httpclient.InferRequestedOutput("label"), httpclient.InferRequestedOutput("probabilities")],
    )
    expected = onnxruntime_run("digits-mlp", {"pixels": pixels})
    assert result.get_output("label")["shape"] == [16, 1]
    np.testing.assert_array_equal(result.as_numpy("label"), expected["label"].reshape(16, 1))
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), expected["probabilities"], rtol=1e-5, atol=1e-7
    )
    assert result.as_numpy("label").ravel().tolist() == digits.target[:16].tolist()
