"""The V2 REST inference body, JSON and binary extension, checked against tritonclient's own encoder."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from conch.core import codecs
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from conch.frontends.http import infer_codec
from conch.frontends.http.infer_codec import decode_request, encode_response


def client_body(
    inputs: list[httpclient.InferInput], outputs: list[httpclient.InferRequestedOutput] | None = None
) -> tuple[bytes, int | None]:
    """The body and Inference-Header-Content-Length tritonclient would send (length None: pure JSON)."""
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    return body, json_size


def infer_input(name: str, array: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def body_with(document: dict[str, Any], binary: bytes = b"") -> tuple[bytes, int]:
    header = orjson.dumps(document)
    return header + binary, len(header)


def test_json_request() -> None:
    body = orjson.dumps(
        {
            "id": "42",
            "parameters": {"priority": 1},
            "inputs": [
                {"name": "X", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
                {"name": "S", "datatype": "BYTES", "shape": [1], "data": ["héllo"]},
            ],
            "outputs": [{"name": "Y", "parameters": {"binary_data": True}}, {"name": "Z"}],
        }
    )

    request = decode_request(body, None, "simple", "2")

    assert (request.model_name, request.model_version, request.id) == ("simple", "2", "42")
    assert request.parameters == {"priority": 1}
    x, s = request.inputs
    assert (x.name, x.datatype, x.data.dtype, x.data.tolist()) == ("X", "INT32", np.int32, [[1, 2], [3, 4]])
    assert s.data.tolist() == ["héllo".encode()]
    assert request.outputs == [RequestedOutput("Y", True), RequestedOutput("Z", None)]


def test_binary_request_from_tritonclient_is_decoded_as_views_over_the_body() -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    s = np.array([b"ab", b"", b"\x00\xff"], dtype=object)
    body, header_length = client_body(
        [infer_input("X", x, "FP32", binary=True), infer_input("S", s, "BYTES", binary=True)],
        [httpclient.InferRequestedOutput("Y", binary_data=False)],
    )
    assert header_length is not None

    request = decode_request(body, header_length, "m", "")

    decoded_x, decoded_s = (t.data for t in request.inputs)
    assert np.array_equal(decoded_x, x)
    assert decoded_s.tolist() == s.tolist()
    assert np.shares_memory(decoded_x, np.frombuffer(body, dtype=np.uint8))
    assert request.outputs == [RequestedOutput("Y", False)]


def test_binary_and_json_inputs_mixed() -> None:
    a = np.array([[1, 2, 3]], dtype=np.int64)
    b = np.array([[True, False]])
    body, header_length = client_body(
        [infer_input("A", a, "INT64", binary=False), infer_input("B", b, "BOOL", True)]
    )

    request = decode_request(body, header_length, "m", "")

    assert [t.data.tolist() for t in request.inputs] == [a.tolist(), b.tolist()]


def test_header_length_beyond_the_body() -> None:
    body, header_length = body_with({"inputs": []})

    with pytest.raises(
        InvalidArgumentError, match=f"is {header_length + 1} but the body has only {len(body)}"
    ):
        decode_request(body, header_length + 1, "m", "")


@pytest.mark.parametrize(
    ("sizes", "sent", "message"),
    [
        (
            [8, 8],
            8,
            r"^unexpected size for input 'X1', expecting 8 additional bytes for model 'm': its "
            r"binary_data_size 8 goes past the end of the body \(0 bytes left\)$",
        ),
        (
            [8],
            12,
            "^unexpected additional input data for model 'm': binary_data_size of the inputs adds up to 8 "
            "bytes but the body carries 12 bytes after the JSON header$",
        ),
    ],
    ids=["too-little-data", "too-much-data"],
)
def test_binary_data_size_must_agree_with_the_body(sizes: list[int], sent: int, message: str) -> None:
    inputs = [
        {"name": f"X{i}", "datatype": "INT32", "shape": [size // 4], "parameters": {"binary_data_size": size}}
        for i, size in enumerate(sizes)
    ]
    body, header_length = body_with({"inputs": inputs}, b"\x01" * sent)

    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(body, header_length, "m", "")


def test_binary_size_must_match_the_shape() -> None:
    document = {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 8}}]
    }
    body, header_length = body_with(document, b"\x00" * 8)

    with pytest.raises(
        InvalidArgumentError,
        match=r"^input byte size mismatch for input 'X' for model 'm'\. Expected 12, got 8: FP32 data "
        r"of shape \[3\] takes 12 bytes$",
    ):
        decode_request(body, header_length, "m", "")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "request body is not valid JSON"),
        (b"[]", "request body must be a JSON object"),
        (b"{}", "request has no 'inputs' list"),
        (b'{"inputs": {}}', "'inputs' must be a list"),
        (b'{"inputs": [{"datatype": "FP32"}]}', "must be an object with a 'name'"),
        (b'{"inputs": [{"name": "X", "shape": [1], "data": [1]}]}', "input 'X' has no 'datatype'"),
        (
            b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1]}]}',
            "^Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
            "'shared_memory_region' in 'parameters'. But no field is set",
        ),
        (
            b'{"inputs": [], "outputs": [{"name": "Y", "parameters": {"classification": "two"}}]}',
            "invalid value for 'classification' parameter of output 'Y'",
        ),
    ],
    ids=[
        "not-json",
        "array",
        "no-inputs",
        "inputs-not-list",
        "nameless",
        "no-datatype",
        "no-data",
        "class-count-not-a-number",
    ],
)
def test_malformed_requests(body: bytes, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        decode_request(body, None, "m", "")


def response_with(*outputs: Tensor) -> InferenceResponse:
    return InferenceResponse(model_name="m", model_version="1", id="7", outputs=list(outputs))


SCORES = Tensor("scores", "FP32", np.array([[0.5, 0.25]], dtype=np.float32))
LABELS = Tensor("labels", "BYTES", np.array([[b"cat"], [b"dog"]], dtype=object))


def test_json_response() -> None:
    body, header_length = encode_response(response_with(SCORES, LABELS), InferenceRequest("m"))

    assert header_length is None
    assert orjson.loads(body) == {
        "model_name": "m",
        "model_version": "1",
        "id": "7",
        "outputs": [
            {"name": "scores", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 0.25]},
            {"name": "labels", "datatype": "BYTES", "shape": [2, 1], "data": ["cat", "dog"]},
        ],
    }


def test_binary_data_output_makes_every_output_binary() -> None:
    request = InferenceRequest("m", parameters={"binary_data_output": True})

    body, header_length = encode_response(response_with(SCORES, LABELS), request)

    assert header_length is not None
    header = orjson.loads(body[:header_length])
    assert [o["parameters"]["binary_data_size"] for o in header["outputs"]] == [8, 14]
    assert all("data" not in o for o in header["outputs"])
    assert (
        body[header_length:]
        == SCORES.data.tobytes() + struct.pack("<I", 3) + b"cat" + struct.pack("<I", 3) + b"dog"
    )


def test_per_output_binary_data_overrides_the_default() -> None:
    request = InferenceRequest(
        "m",
        outputs=[RequestedOutput("scores", binary=False), RequestedOutput("labels", binary=True)],
        parameters={"binary_data_output": True},
    )

    body, header_length = encode_response(response_with(SCORES, LABELS), request)

    assert header_length is not None
    scores, labels = orjson.loads(body[:header_length])["outputs"]
    assert scores["data"] == [0.5, 0.25]
    assert labels["parameters"] == {"binary_data_size": 14}


def test_tritonclient_reads_the_binary_response() -> None:
    request = InferenceRequest(
        "m", outputs=[RequestedOutput("scores", binary=True), RequestedOutput("labels")]
    )

    body, header_length = encode_response(response_with(SCORES, LABELS), request)
    result = httpclient.InferenceServerClient.parse_response_body(body, header_length=header_length)

    assert np.array_equal(result.as_numpy("scores"), SCORES.data)
    assert result.as_numpy("labels").tolist() == [["cat"], ["dog"]]  # JSON BYTES come back as str
    assert result.get_response()["id"] == "7"


def test_a_classification_request_is_read_with_its_class_count() -> None:
    output = b'{"name": "Y", "parameters": {"classification": 3, "binary_data": true}}'
    body = b'{"inputs": [], "outputs": [' + output + b"]}"

    request = decode_request(body, None, "m", "")

    assert request.outputs[0].classification == 3
    assert request.outputs[0].binary is True


def fp32_body(data: Any, datatype: str = "FP32", request_id: str = "") -> bytes:
    shape = [1, len(data)] if isinstance(data, list) else [1]
    document: dict[str, Any] = {"inputs": [{"name": "X", "datatype": datatype, "shape": shape, "data": data}]}
    if request_id:
        document["id"] = request_id
    return orjson.dumps(document)


# Each list long enough (40 elements) to be read in one pass when the body has no true or false.
@pytest.mark.parametrize(
    ("bad", "datatype", "message"),
    [
        ("2", "FP32", "input 'X': FP32 data must be numbers"),
        (None, "FP32", "input 'X': FP32 data must be numbers"),
        ({}, "FP64", "input 'X': FP64 data must be numbers"),
        (True, "FP32", "input 'X': FP32 data must be numbers"),
        (False, "INT64", "input 'X': INT64 data must be integers"),
        (2.5, "INT64", "input 'X': INT64 data must be integers"),
        ("3", "INT64", "input 'X': INT64 data must be integers"),
        (0, "BOOL", "input 'X': BOOL data must be true or false"),
    ],
)
def test_json_data_of_the_wrong_kind_is_refused(bad: Any, datatype: str, message: str) -> None:
    data = [1] * 20 + [bad] + [1] * 19

    with pytest.raises(InvalidArgumentError, match=f"^{message}$"):
        decode_request(fp32_body(data, datatype), None, "m", "")


def test_json_floats_mixed_with_integers_and_nested_rows_are_read() -> None:
    rows = [[1, 2.5] * 10, [-3, 0.25] * 10]
    body = orjson.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 20], "data": rows}]})

    (x,) = decode_request(body, None, "m", "").inputs

    assert (x.data.dtype, x.data.tolist()) == (np.float32, rows)


def test_json_int64_data_is_read_exactly() -> None:
    data = [-(2**63), 2**63 - 1] * 20

    (x,) = decode_request(fp32_body(data, "INT64"), None, "m", "").inputs

    assert (x.data.dtype, x.data.tolist()) == (np.int64, [data])


def test_json_ints_past_int32_keep_their_message() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^input 'X': data does not match datatype INT32: "):
        decode_request(fp32_body([2**31] * 40, "INT32"), None, "m", "")


def test_a_true_outside_the_data_leaves_the_data_checked_alike() -> None:
    """ "true" in a string (the id here) makes the decoder check each element; the outcome is the same."""
    (x,) = decode_request(fp32_body([0.5, 1] * 20, request_id="true"), None, "m", "").inputs

    assert x.data.tolist() == [[0.5, 1.0] * 20]
    with pytest.raises(InvalidArgumentError, match="FP32 data must be numbers"):
        decode_request(fp32_body([0.5, "1"] * 20, request_id="true false"), None, "m", "")


@pytest.mark.parametrize(
    ("text", "may"),
    [
        (b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1,2],"data":[1.5,2e-3]}]}', False),
        (b'{"data":[1.5,true]}', True),
        (b'{"data":[false]}', True),
        (b"true", True),
        (b'{"id":"tru fal uuu lll","data":[1]}', False),
        (b'{"id":"' + b"u" * 40 + b'"}', True),
    ],
)
def test_may_hold_booleans(text: bytes, may: bool) -> None:
    assert infer_codec._may_hold_booleans(text) is may


def test_float_data_of_a_body_without_booleans_is_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    element_checks = codecs._checked

    def spy(name: str, *args: Any) -> np.ndarray:
        checked.append(name)
        return element_checks(name, *args)

    monkeypatch.setattr(codecs, "_checked", spy)

    decode_request(fp32_body([0.5] * 40), None, "m", "")
    decode_request(fp32_body([0.5] * 40, request_id="true"), None, "m", "")
    decode_request(fp32_body([0.5] * 8), None, "m", "")

    assert checked == ["X", "X"]  # the body with a true and the short list
