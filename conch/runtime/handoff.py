"""Requests and responses across the link between a proxy process and the model process.

A request or response travels as a small dictionary (names, ids, parameters, the outputs asked
for) whose tensors lie in a shared-memory segment of the sender's :class:`SegmentPool` — the
transport the Python backend uses — so a tensor crosses as one copy in and one copy out, and is
never pickled. The receiver copies the tensors out at once (a shadow copy or a sequence's state may
outlive the answer) and the sender takes its segment back.

Tensors of a few kilobytes in all travel as raw bytes inside the message instead: for them a
segment's bookkeeping (take, map, copy out, give back: a message each way) cost more than the
bytes themselves.

Errors travel as their kind, gRPC kind, message and headers, so each proxy answers them with
the same status and words as the in-process server would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conch.backends.python.stub.conch_ipc import (
    NUMPY_OF,
    SegmentPool,
    SegmentReader,
    as_ref,
    deserialize_bytes,
    serialize_bytes,
)
from conch.core.errors import ConchError, ErrorKind
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor

#: Tensors up to this many bytes in all travel inside the message.
INLINE_BYTES = 16 * 1024


def request_message(pool: SegmentPool, request: InferenceRequest) -> dict[str, Any]:
    """``request`` as a message; its inputs inline, or written into one segment of ``pool``."""
    message = _carrying(pool, request.model_name, request.model_version, request.id, request.inputs)
    message["outputs"] = [(o.name, o.binary, o.classification) for o in request.outputs]
    message["parameters"] = request.parameters
    return message


def read_request(message: dict[str, Any], reader: SegmentReader) -> InferenceRequest:
    """The request a :func:`request_message` describes, its inputs copied out of the segment."""
    return InferenceRequest(
        message["model"],
        message["version"],
        message["request_id"],
        _read_tensors(message["segment"], message["tensors"], reader),
        [RequestedOutput(name, binary, classes) for name, binary, classes in message["outputs"]],
        message["parameters"],
    )


def response_message(pool: SegmentPool, response: InferenceResponse) -> dict[str, Any]:
    """``response`` as a message; its outputs inline, or written into one segment of ``pool``."""
    message = _carrying(pool, response.model_name, response.model_version, response.id, response.outputs)
    message["parameters"] = response.parameters
    return message


def read_response(message: dict[str, Any], reader: SegmentReader) -> InferenceResponse:
    """The response a :func:`response_message` describes, its outputs copied out of the segment."""
    outputs = _read_tensors(message["segment"], message["tensors"], reader)
    return InferenceResponse(
        message["model"], message["version"], message["request_id"], outputs, message["parameters"]
    )


def _carrying(
    pool: SegmentPool, model: str, version: str, request_id: str, tensors: list[Tensor]
) -> dict[str, Any]:
    """The part every message has: whose it is, and its tensors."""
    segment, entries = _tensors(pool, tensors)
    return {
        "model": model,
        "version": version,
        "request_id": request_id,
        "segment": segment,
        "tensors": entries,
    }


def _tensors(pool: SegmentPool, tensors: list[Tensor]) -> tuple[str | None, list[tuple[Any, ...]]]:
    """(segment or None, one entry per tensor): (name, datatype, shape, bytes) inline, or
    (reference, datatype) in the segment."""
    if sum(t.data.nbytes for t in tensors) <= INLINE_BYTES:  # an object array's nbytes counts pointers
        inline = [(t.name, t.datatype, t.data.shape, _raw(t.data)) for t in tensors]
        if sum(len(entry[3]) for entry in inline) <= INLINE_BYTES:
            return None, inline
    segment, refs = pool.write([(t.name, t.data) for t in tensors])
    return segment, [(ref, t.datatype) for ref, t in zip(refs, tensors, strict=True)]


def _read_tensors(segment: str | None, entries: list[tuple[Any, ...]], reader: SegmentReader) -> list[Tensor]:
    if segment is None:
        return [
            Tensor(name, datatype, _array(datatype, shape, raw)) for name, datatype, shape, raw in entries
        ]
    refs = [as_ref(ref) for ref, _ in entries]
    arrays = reader.copy_all(refs)
    return [
        Tensor(ref.name, datatype, array)
        for ref, array, (_, datatype) in zip(refs, arrays, entries, strict=True)
    ]


def _raw(data: np.ndarray) -> bytes:
    return serialize_bytes(data) if data.dtype.kind in ("O", "S", "U") else data.tobytes()


def _array(datatype: str, shape: tuple[int, ...], raw: bytes) -> np.ndarray:
    if datatype == "BYTES":
        return deserialize_bytes(raw, shape)
    return np.frombuffer(raw, dtype=NUMPY_OF[datatype]).reshape(shape)


def error_message(exc: ConchError) -> dict[str, Any]:
    """What the other side needs to answer ``exc`` as this side would."""
    grpc_kind = exc.grpc_kind.value if exc.grpc_kind is not None else None
    return {"error": exc.kind.value, "grpc_error": grpc_kind, "message": exc.message, "headers": exc.headers}


def error_of(message: dict[str, Any]) -> ConchError:
    """The error an :func:`error_message` describes, with the same kinds, message and headers."""
    error = ConchError(message["message"], tuple(tuple(h) for h in message["headers"]))  # type: ignore[misc]
    error.kind = ErrorKind(message["error"])
    if message["grpc_error"] is not None:
        error.grpc_kind = ErrorKind(message["grpc_error"])
    return error
