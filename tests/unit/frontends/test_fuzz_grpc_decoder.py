"""Hypothesis fuzzing of the gRPC request decoder (``frontends/grpc/infer_codec.decode_request``): any
``ModelInferRequest`` (typed ``contents`` or ``raw_input_contents``, any shape, datatype and
parameters), and any bytes parsed as one, decodes or is a 4xx saying why."""

from __future__ import annotations

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from conch.frontends.grpc.infer_codec import decode_request
from tests.unit.fuzzing import FUZZ, decodes_or_refuses

DATATYPES = ["BOOL", "UINT8", "INT8", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16", "NOPE", ""]
CONTENT_FIELDS = [
    "bool_contents",
    "int_contents",
    "int64_contents",
    "uint_contents",
    "fp32_contents",
    "bytes_contents",
]


@st.composite
def infer_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", id=draw(st.text(max_size=5)))
    raw = draw(st.booleans())
    for index in range(draw(st.integers(0, 3))):
        tensor = message.inputs.add(name=f"IN{index}", datatype=draw(st.sampled_from(DATATYPES)))
        tensor.shape.extend(draw(st.lists(st.integers(-2, 6), max_size=3)))
        for key, value in draw(
            st.dictionaries(
                st.sampled_from(["shared_memory_region", "x", "binary_data_size"]),
                st.integers(-1, 9),
                max_size=2,
            )
        ).items():
            tensor.parameters[key].int64_param = value
        if raw:
            message.raw_input_contents.append(draw(st.binary(max_size=48)))
            continue
        field = draw(st.sampled_from(CONTENT_FIELDS))
        values = draw(st.lists(st.integers(0, 200), max_size=8))
        if field == "bool_contents":
            getattr(tensor.contents, field).extend(bool(v % 2) for v in values)
        elif field == "bytes_contents":
            getattr(tensor.contents, field).extend(bytes([v]) * v for v in values)
        elif field == "fp32_contents":
            getattr(tensor.contents, field).extend(float(v) for v in values)
        else:
            getattr(tensor.contents, field).extend(values)
    if draw(st.booleans()):
        message.raw_input_contents.append(draw(st.binary(max_size=8)))  # one too many, sometimes
    for name in draw(st.lists(st.sampled_from(["OUT", ""]), max_size=2)):
        output = message.outputs.add(name=name)
        output.parameters["classification"].int64_param = draw(st.integers(-1, 3))
    message.parameters["sequence_id"].int64_param = draw(st.integers(-1, 3))
    return message


@FUZZ
@given(infer_requests())
def test_an_infer_request_decodes_or_is_a_4xx(message: pb.ModelInferRequest) -> None:
    decoded = decodes_or_refuses(lambda: decode_request(message))
    if decoded is not None:
        assert len(decoded.inputs) == len(message.inputs)


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_parse_and_decode_or_are_refused(data: bytes) -> None:
    message = pb.ModelInferRequest()
    try:
        message.ParseFromString(data)
    except DecodeError:
        return  # grpc.aio answers a message that does not parse itself
    decodes_or_refuses(lambda: decode_request(message))
