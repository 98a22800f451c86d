"""A large ``ModelInferRequest``'s ``raw_input_contents`` taken as views of the call's bytes.

Rule: a request of :data:`SPLIT_FROM_BYTES` or more is scanned field by field at its top level; the
``raw_input_contents`` entries become views of the received bytes and protobuf parses only the rest.
A smaller request, or one the scan cannot follow, is parsed whole by protobuf as before.

Why: protobuf copies the bytes it parses into its own memory, and each read of a ``bytes`` entry
copies it again, so a 602 KB image crossed the server's memory three times before its copy into the
model's shared memory. At 8 gRPC clients those two copies were 6% of the event loop's time.

The views reach :func:`~conch.frontends.grpc.infer_codec.decode_request` through :data:`SPLIT_OFF`,
set for the task that answers the call, with the message they were split from: a message that is not
that one (a stream's, a BLS call's) reads its own field.
"""

from __future__ import annotations

from contextvars import ContextVar

from tritonclient.grpc import service_pb2 as pb

#: Requests smaller than this are parsed whole: a copy of a few KB costs less than the scan.
SPLIT_FROM_BYTES = 64 << 10
_RAW_INPUT_FIELD = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_LENGTH_DELIMITED, _VARINT, _FIXED64, _FIXED32 = 2, 0, 1, 5

#: The message being answered in this task, and the raw inputs split off its bytes.
SPLIT_OFF: ContextVar[tuple[pb.ModelInferRequest, list[memoryview]] | None] = ContextVar(
    "conch_raw_inputs", default=None
)


def split(raw: bytes) -> tuple[bytes, list[memoryview]] | None:
    """The request's bytes without its ``raw_input_contents``, and those entries as views of ``raw``
    in their order; None where a field is malformed (protobuf's own parse then says so)."""
    view = memoryview(raw)
    end = len(view)
    kept: list[memoryview] = []
    found: list[memoryview] = []
    position = 0
    while position < end:
        start = position
        key, position = _varint(view, position)
        wire = key & 7
        if wire == _LENGTH_DELIMITED:
            length, position = _varint(view, position)
            stop = position + length
            if stop > end:
                return None
            if key >> 3 == _RAW_INPUT_FIELD:
                found.append(view[position:stop])
            else:
                kept.append(view[start:stop])
            position = stop
            continue
        if wire == _VARINT:
            _, position = _varint(view, position)
        elif wire == _FIXED64:
            position += 8
        elif wire == _FIXED32:
            position += 4
        else:  # groups, or not a key at all
            return None
        if position > end:
            return None
        kept.append(view[start:position])
    return b"".join(kept), found


def _varint(view: memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it; past the end on a truncated one."""
    value = shift = 0
    end = len(view)
    while position < end and shift < 64:
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return 0, end + 1
