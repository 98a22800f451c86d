"""``ModelInferRequest`` to core types and core types to ``ModelInferResponse``.

Inputs come as ``raw_input_contents`` (decoded as views over the received bytes) or as typed
``contents``; outputs always go out as ``raw_output_contents``, as Triton sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from conch.core import codecs, datatypes
from conch.core import reserved_parameters as reserved
from conch.core.classification import class_count
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from conch.frontends.grpc import raw_inputs
from conch.shared_memory.tensors import RegionLeases, shared_memory_ref

_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parse_request(raw: bytes) -> tuple[pb.ModelInferRequest, list[memoryview] | None]:
    """A ModelInfer call's bytes as its message, or a 400 saying they are not one; with the message,
    the raw inputs of a large request as views of ``raw`` (:mod:`.raw_inputs`; the message then has
    none), else None.

    Why here and not in gRPC's own deserialization: a message gRPC fails to parse ends the call
    UNKNOWN with the parser's exception text, and only a handler can answer INVALID_ARGUMENT.
    """
    parts = raw_inputs.split(raw) if len(raw) >= raw_inputs.SPLIT_FROM_BYTES else None
    try:
        if parts is None:
            return pb.ModelInferRequest.FromString(raw), None
        return pb.ModelInferRequest.FromString(parts[0]), parts[1]
    except DecodeError:
        raise InvalidArgumentError(
            "the request is not a valid inference.ModelInferRequest message; send one serialized with "
            "protobuf from the service definition, as tritonclient does"
        ) from None


def decode_request(
    message: pb.ModelInferRequest,
    regions: RegionLeases | None = None,
    split_off: Sequence[bytes | memoryview] | None = None,
) -> InferenceRequest:
    """Core request from a gRPC message; raw and typed contents may not be mixed, as in Triton.

    ``regions`` reads inputs from and holds the outputs' system shared-memory regions (None: refused).
    ``split_off``: the raw inputs :func:`parse_request` split off the message's bytes (None: those
    :data:`.raw_inputs.SPLIT_OFF` holds for this message, else the message's own).
    """
    raw = split_off if split_off is not None else _raw_inputs_of(message)
    inputs = message.inputs
    count = len(inputs)
    if raw and len(raw) != count:
        raise InvalidArgumentError(
            f"raw_input_contents has {len(raw)} entries but the request has {count} inputs"
        )
    request = InferenceRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        parameters=decode_parameters(message.parameters),
    )
    reserved.check_request_parameters(request.parameters, "gRPC")
    # By index: iterating a protobuf repeated field goes through Python's Sequence mixins, which cost
    # more than the decoding of a small tensor.
    for index in range(count):
        item = inputs[index]
        shape = _shape(item)
        if item.parameters:  # most inputs carry none: the map is read only when present
            parameters = decode_parameters(item.parameters)
            reserved.refuse_http_only(item.name, parameters)
            ref = shared_memory_ref(item.name, parameters)
            if ref is not None:
                if item.HasField("contents"):
                    raise InvalidArgumentError(
                        f"unexpected 'content' provided when using shared memory for input tensor "
                        f"'{item.name}' for model '{message.model_name}'; the data is in the region"
                    )
                data = _leases(regions).read_input(item.name, item.datatype, shape, message.model_name, ref)
                request.inputs.append(Tensor(item.name, item.datatype, data))
                continue
        if raw and item.HasField("contents"):
            raise InvalidArgumentError(
                "contents field must not be specified when using raw_input_contents for "
                f"'{item.name}' for model '{message.model_name}'; send every input in "
                "raw_input_contents or every input in typed contents"
            )
        if raw:
            data = codecs.from_bytes(item.name, item.datatype, shape, raw[index], message.model_name)
        else:
            data = _from_contents(item, shape, message.model_name)
        request.inputs.append(Tensor(item.name, item.datatype, data))
    outputs = message.outputs
    if outputs:  # empty: every output, the usual request
        request.outputs = [_requested_output(outputs[i], regions) for i in range(len(outputs))]
    return request


def _raw_inputs_of(message: pb.ModelInferRequest) -> Sequence[bytes | memoryview]:
    held = raw_inputs.SPLIT_OFF.get()
    if held is not None and held[0] is message:
        return held[1]
    return message.raw_input_contents


def _shape(item: pb.ModelInferRequest.InferInputTensor) -> tuple[int, ...]:
    """The input's shape; :func:`codecs.check_shape` words the refusal of a negative or too long one.

    Why not call it on every input: protobuf gives int64 dimensions as ints, so only those two checks
    are left, and one ``min`` does them in C (the loop over the dimensions cost a microsecond a call).
    """
    shape = tuple(item.shape[:])
    if len(shape) > codecs.MAX_DIMS or (shape and min(shape) < 0):
        return codecs.check_shape(item.name, list(shape))
    return shape


def _requested_output(
    item: pb.ModelInferRequest.InferRequestedOutputTensor, regions: RegionLeases | None
) -> RequestedOutput:
    if not item.parameters:
        return RequestedOutput(item.name)
    parameters = decode_parameters(item.parameters)
    reserved.refuse_http_only(item.name, parameters)
    reserved.refuse_output_misuse(item.name, parameters)
    ref = shared_memory_ref(item.name, parameters)
    if ref is not None:
        _leases(regions).check_output(ref)
    count = parameters.get(reserved.CLASSIFICATION)
    classes = 0 if count is None else class_count(item.name, count)
    return RequestedOutput(item.name, classification=classes, shared_memory=ref)


def _leases(regions: RegionLeases | None) -> RegionLeases:
    if regions is None:
        raise InvalidArgumentError("system shared memory is not available to this request")
    return regions


def encode_response(
    response: InferenceResponse, request: InferenceRequest | None = None
) -> pb.ModelInferResponse:
    """A ``ModelInferResponse`` with every output in ``raw_output_contents``.

    An output ``request`` asked into a shared-memory region gets an empty entry there, as in Triton.
    """
    message = _header(response)
    message.raw_output_contents.extend(bytes(raw) for raw in _output_bytes(message, response, request))
    return message


#: The key of one ``raw_output_contents`` entry on the wire: its field number, length-delimited.
_RAW_OUTPUT_FIELD = pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number
_RAW_OUTPUT_KEY = bytes([_RAW_OUTPUT_FIELD << 3 | 2])


def encode_response_bytes(response: InferenceResponse, request: InferenceRequest | None = None) -> bytes:
    """:func:`encode_response`'s message, serialized, with each output's bytes copied once.

    Why not ``SerializeToString``: protobuf copies an output's bytes into the message, then into a
    growing buffer while encoding (again each time the buffer grows), then into the result; a 1 MiB
    echo cost the server 6.0 to 6.9 ms of CPU a call that way and 3.9 to 4.8 framed here. Protobuf
    reads a message's fields in any order and keeps a repeated field's entries in the order they
    come, so the outputs' bytes are framed here and joined behind the rest, which protobuf encodes.
    """
    message = _header(response)
    raws = _output_bytes(message, response, request)  # adds the outputs' metadata to the message
    pieces: list[bytes | memoryview] = [message.SerializeToString()]
    for raw in raws:
        pieces += (_RAW_OUTPUT_KEY, _varint(len(raw)), raw)
    return b"".join(pieces)


def _header(response: InferenceResponse) -> pb.ModelInferResponse:
    """The answer's model, version, id and parameters."""
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    for key, value in response.parameters.items():
        message.parameters[key].string_param = str(value)
    return message


def _output_bytes(
    message: pb.ModelInferResponse, response: InferenceResponse, request: InferenceRequest | None
) -> list[bytes | memoryview]:
    """Each output's name, datatype and shape added to ``message``; their bytes, in the same order
    (empty for an output ``request`` asked into a shared-memory region)."""
    in_regions = _in_regions(request)
    outputs = message.outputs
    found: list[bytes | memoryview] = []
    for tensor in response.outputs:
        data = tensor.data
        outputs.add(name=tensor.name, datatype=tensor.datatype, shape=data.shape)
        found.append(b"" if in_regions and tensor.name in in_regions else codecs.to_bytes(data))
    return found


def _varint(value: int) -> bytes:
    """``value`` as a protobuf base-128 varint (the length of a length-delimited field)."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _in_regions(request: InferenceRequest | None) -> set[str]:
    """The outputs ``request`` asked into shared-memory regions (most requests: none)."""
    if request is None:
        return set()
    return {o.name for o in request.outputs if o.shared_memory is not None}


def stream_error(request_id: str, error: str) -> pb.ModelStreamInferResponse:
    """A failed streamed request's answer. As Triton: the request's id rides along, so a client can
    tell which request failed."""
    return pb.ModelStreamInferResponse(
        error_message=error, infer_response=pb.ModelInferResponse(id=request_id)
    )


def decode_parameters(parameters: Any) -> dict[str, Any]:
    """``map<string, InferParameter>`` as plain Python values."""
    decoded: dict[str, Any] = {}
    if not parameters:
        return decoded
    # By key: ``items()`` is Python's Mapping mixin, a generator that costs more than the lookups.
    for key in parameters:
        value = parameters[key]
        which = value.WhichOneof("parameter_choice")
        decoded[key] = getattr(value, which) if which else None
    return decoded


def _from_contents(
    item: pb.ModelInferRequest.InferInputTensor, shape: tuple[int, ...], model: str
) -> np.ndarray:
    dtype = datatypes.from_name(item.datatype)
    field = _CONTENTS_FIELD.get(dtype.name)
    if field is None:
        raise InvalidArgumentError(
            f"input '{item.name}': {dtype.name} has no typed contents field; send it in raw_input_contents"
        )
    values = getattr(item.contents, field)
    if dtype.name == "BYTES":
        return codecs.from_json(item.name, "BYTES", shape, list(values))
    count = codecs.element_count(shape)
    if len(values) != count:
        raise InvalidArgumentError(
            codecs.byte_size_mismatch(
                item.name, model, dtype.name, shape, count * dtype.item_size, len(values) * dtype.item_size
            )
            + f" ({count} elements; contents has {len(values)})"
        )
    try:
        return np.asarray(list(values), dtype=dtype.numpy).reshape(shape)
    except OverflowError:
        raise InvalidArgumentError(f"input '{item.name}': a value does not fit {dtype.name}") from None
