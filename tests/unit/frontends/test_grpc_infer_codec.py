"""The gRPC codec's quick paths give what :mod:`conch.core.codecs` gives, and refuse in its words."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from conch.core import codecs, datatypes
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, SharedMemoryRef, Tensor
from conch.frontends.grpc.infer_codec import decode_request, encode_response, encode_response_bytes

FIXED = [name for name in datatypes.BY_NAME if name != "BYTES"]


def raw_request(datatype: str, shape: list[int], data: bytes) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="IN", datatype=datatype, shape=shape)
    message.raw_input_contents.append(data)
    return message


def refusal(call: object) -> str:
    with pytest.raises(InvalidArgumentError) as caught:
        call()  # type: ignore[operator]
    return caught.value.message


@pytest.mark.parametrize("datatype", FIXED)
def test_a_raw_input_decodes_as_the_codec_decodes_it(datatype: str) -> None:
    data = bytes(range(48))
    shape = [2, 24 // datatypes.from_name(datatype).item_size]
    decoded = decode_request(raw_request(datatype, shape, data)).inputs[0]
    expected = codecs.from_bytes("IN", datatype, tuple(shape), data, "m")
    assert decoded.datatype == datatype
    assert decoded.data.dtype == expected.dtype
    assert decoded.data.shape == expected.shape
    assert decoded.data.tobytes() == expected.tobytes()


def test_a_raw_bytes_input_decodes_its_elements() -> None:
    data = b"".join(len(e).to_bytes(4, "little") + e for e in (b"ab", b""))
    decoded = decode_request(raw_request("BYTES", [2], data)).inputs[0]
    assert decoded.data.tolist() == [b"ab", b""]


def test_a_raw_input_of_the_wrong_size_is_refused_in_the_codec_words() -> None:
    got = refusal(lambda: decode_request(raw_request("FP32", [1, 4], b"\0" * 12)))
    assert got == refusal(lambda: codecs.from_bytes("IN", "FP32", (1, 4), b"\0" * 12, "m"))
    assert "Expected 16, got 12" in got


def test_an_unknown_datatype_is_refused() -> None:
    assert "unsupported datatype 'BF16'" in refusal(lambda: decode_request(raw_request("BF16", [1], b"\0\0")))


@pytest.mark.parametrize("shape", [[1, -1], [-2], [1] * (codecs.MAX_DIMS + 1)])
def test_a_negative_or_too_long_shape_is_refused_in_the_codec_words(shape: list[int]) -> None:
    got = refusal(lambda: decode_request(raw_request("UINT8", shape, b"")))
    assert got == refusal(lambda: codecs.check_shape("IN", shape))


def test_an_empty_shape_is_a_scalar() -> None:
    assert decode_request(raw_request("INT32", [], b"\1\0\0\0")).inputs[0].data.tolist() == 1


def test_requested_outputs_are_kept_and_none_means_every_output() -> None:
    message = raw_request("UINT8", [1], b"\0")
    assert decode_request(message).outputs == []
    message.outputs.add(name="B")
    message.outputs.add(name="A")
    assert decode_request(message).outputs == [RequestedOutput("B"), RequestedOutput("A")]


def test_request_parameters_are_decoded_and_checked() -> None:
    message = raw_request("UINT8", [1], b"\0")
    assert decode_request(message).parameters == {}
    message.parameters["priority"].int64_param = 2
    assert decode_request(message).parameters == {"priority": 2}
    message.parameters["binary_data_output"].bool_param = True
    assert "binary_data_output" in refusal(lambda: decode_request(message))


def _parsed_bytes(
    response: InferenceResponse, request: InferenceRequest | None = None
) -> pb.ModelInferResponse:
    """``encode_response_bytes``' answer as a client's protobuf reads it."""
    return pb.ModelInferResponse.FromString(encode_response_bytes(response, request))


Encoder = Callable[..., pb.ModelInferResponse]

#: Both encoders of a ModelInfer answer: the message (streams) and its bytes (unary calls).
ENCODERS = pytest.mark.parametrize("encode", [encode_response, _parsed_bytes], ids=["message", "bytes"])


@ENCODERS
@pytest.mark.parametrize(
    "data",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2],  # not contiguous
        np.arange(6, dtype=np.float32).reshape(2, 3).T,  # Fortran order
        np.array([True, False]),
        np.array([1.5, -2], dtype=np.float16),
        np.array(7, dtype=np.int32),
        np.array([b"ab", b""], dtype=object),
        np.array(["x", "yz"]),
    ],
)
def test_an_output_goes_out_as_the_codec_writes_it(encode: Encoder, data: np.ndarray) -> None:
    response = InferenceResponse("m", "1", "id", [Tensor.of("OUT", data)])
    message = encode(response)
    assert [o.name for o in message.outputs] == ["OUT"]
    assert tuple(message.outputs[0].shape) == data.shape
    assert message.raw_output_contents[0] == bytes(codecs.to_bytes(data))


@ENCODERS
def test_an_output_asked_into_a_region_gets_an_empty_entry(encode: Encoder) -> None:
    request = InferenceRequest("m", outputs=[RequestedOutput("A", shared_memory=SharedMemoryRef("r", 0, 4))])
    outputs = [Tensor.of("A", np.ones(1, np.float32)), Tensor.of("B", np.ones(1, np.float32))]
    message = encode(InferenceResponse("m", "1", outputs=outputs, parameters={"k": 1}), request)
    assert list(message.raw_output_contents) == [b"", np.ones(1, np.float32).tobytes()]
    assert message.parameters["k"].string_param == "1"


@pytest.mark.parametrize("sizes", [[0], [127, 128], [16_383, 16_384, 1 << 20], [3, 2_097_152, 5]])
def test_the_serialized_answer_is_the_message_protobuf_would_serialize(sizes: list[int]) -> None:
    # Lengths around each varint step (1, 2, 3 and 4 bytes), several outputs, ids and parameters.
    rng = np.random.default_rng(len(sizes))
    outputs = [Tensor.of(f"OUT{i}", rng.integers(0, 255, n, dtype=np.uint8)) for i, n in enumerate(sizes)]
    response = InferenceResponse("model", "3", "request-9", outputs, parameters={"sequence_id": 4})
    expected = encode_response(response)
    assert _parsed_bytes(response) == expected
    assert [bytes(c) for c in _parsed_bytes(response).raw_output_contents] == [
        o.data.tobytes() for o in outputs
    ]
