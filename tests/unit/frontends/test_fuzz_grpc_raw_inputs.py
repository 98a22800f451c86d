"""The raw inputs split off a large ModelInferRequest's bytes (``frontends/grpc/raw_inputs``), with
protobuf's own parser as the judge: the split parses to the same message, and bytes protobuf refuses
are never taken for a request."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from conch.core.errors import InvalidArgumentError
from conch.frontends.grpc import raw_inputs
from conch.frontends.grpc.infer_codec import decode_request, parse_request
from tests.unit.frontends.test_fuzz_grpc_decoder import infer_requests
from tests.unit.fuzzing import FUZZ

#: Fields protobuf keeps as unknown: a varint, a fixed64, a fixed32 and a length-delimited one.
UNKNOWN_FIELDS = st.lists(
    st.sampled_from([b"\xa0\x06\x96\x01", b"\xa9\x06" + bytes(8), b"\xad\x06" + bytes(4), b"\xa2\x06\x02ab"]),
    max_size=3,
)


def _whole(rest: bytes, found: list[memoryview]) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest.FromString(rest)
    message.raw_input_contents.extend(bytes(v) for v in found)
    return message


@FUZZ
@given(infer_requests(), UNKNOWN_FIELDS)
def test_a_request_splits_into_the_same_message(message: pb.ModelInferRequest, unknown: list[bytes]) -> None:
    data = message.SerializeToString() + b"".join(unknown)
    parts = raw_inputs.split(data)
    assert parts is not None
    rest, found = parts
    assert [bytes(v) for v in found] == list(message.raw_input_contents)
    assert not pb.ModelInferRequest.FromString(rest).raw_input_contents
    assert _whole(rest, found) == pb.ModelInferRequest.FromString(data)


@FUZZ
@given(st.binary(max_size=300))
def test_bytes_protobuf_refuses_are_never_split_into_a_request(data: bytes) -> None:
    parts = raw_inputs.split(data)
    try:
        expected = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        if parts is not None:  # the scan followed it: the rest must then be what protobuf refuses
            with pytest.raises(DecodeError):
                pb.ModelInferRequest.FromString(parts[0])
        return
    if parts is not None:
        assert _whole(*parts) == expected


def test_a_large_request_decodes_its_inputs_from_views_of_the_call_bytes() -> None:
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    message = pb.ModelInferRequest(model_name="m", id="7")
    message.inputs.add(name="IMAGE", datatype="FP32", shape=image.shape)
    message.inputs.add(name="SCALE", datatype="FP32", shape=[1])
    message.raw_input_contents.extend([image.tobytes(), np.float32(2).tobytes()])
    data = message.SerializeToString()
    parsed, split_off = parse_request(data)
    assert split_off is not None and len(data) >= raw_inputs.SPLIT_FROM_BYTES
    assert not parsed.raw_input_contents  # protobuf did not copy them
    request = decode_request(parsed, None, split_off)
    np.testing.assert_array_equal(request.inputs[0].data, image)
    assert request.inputs[1].data.tolist() == [2.0]
    assert request.id == "7"


def test_a_small_request_is_parsed_whole() -> None:
    message = pb.ModelInferRequest(model_name="m", raw_input_contents=[b"\x00" * 16])
    parsed, split_off = parse_request(message.SerializeToString())
    assert split_off is None and list(parsed.raw_input_contents) == [b"\x00" * 16]


def test_a_large_truncated_request_is_refused_in_protobufs_words() -> None:
    message = pb.ModelInferRequest(model_name="m", raw_input_contents=[bytes(200_000)])
    with pytest.raises(InvalidArgumentError, match=r"not a valid inference\.ModelInferRequest"):
        parse_request(message.SerializeToString()[:-10])
