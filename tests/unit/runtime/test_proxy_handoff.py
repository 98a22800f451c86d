"""Requests, responses and errors across the link of ``--proxies`` (``conch.runtime.handoff``).

The two sides are two real segment pools and readers over ``/dev/shm``, as in the two processes;
each message goes through the link's own framing (pickled dictionaries), so what is checked is what
crosses the socket.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from conch.backends.python.stub import conch_frames, conch_ipc
from conch.backends.python.stub.conch_ipc import SegmentPool, SegmentReader
from conch.core.errors import ConchError, InvalidArgumentError, RateLimitedError, UnavailableError
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from conch.frontends.grpc.status import status_of
from conch.gateway.restricted import RestrictedApiError
from conch.runtime import handoff


@pytest.fixture
def pool() -> Iterator[SegmentPool]:
    made = SegmentPool(f"conch-test-handoff-{os.getpid()}", 1 << 16, 1 << 16)
    yield made
    made.close()


def across(message: dict[str, object]) -> dict[str, object]:
    """``message`` as the other process reads it off the socket."""
    buffer = bytearray(conch_frames.encode_frame(message))
    (received,) = conch_frames.split_frames(buffer)
    return received


def request_with(*tensors: Tensor) -> InferenceRequest:
    return InferenceRequest(
        "model",
        "2",
        "id-7",
        list(tensors),
        [RequestedOutput("Y", binary=True, classification=3), RequestedOutput("Z")],
        {"sequence_id": 5, "priority": 1, "custom": "x"},
    )


@pytest.mark.parametrize("width", [4, 20_000])  # inside the message, and in a segment
def test_a_request_arrives_whole(pool: SegmentPool, width: int) -> None:
    rng = np.random.default_rng(width)
    x = rng.standard_normal((2, width)).astype(np.float32)
    flags = np.array([True, False, True])
    words = np.array([b"a", b"", "\u00e9t\u00e9".encode()], dtype=object)
    sent = request_with(Tensor("X", "FP32", x), Tensor("F", "BOOL", flags), Tensor("W", "BYTES", words))
    message = handoff.request_message(pool, sent)
    assert (message["segment"] is None) == (width == 4)
    got = handoff.read_request(across(message), SegmentReader())
    if message["segment"] is not None:
        pool.release(message["segment"])  # the sender's segment can be reused: the reader copied
        pool.write([("junk", np.zeros(3 * width, np.float32))])
    assert (got.model_name, got.model_version, got.id, got.parameters) == (
        "model",
        "2",
        "id-7",
        {"sequence_id": 5, "priority": 1, "custom": "x"},
    )
    assert [(o.name, o.binary, o.classification) for o in got.outputs] == [("Y", True, 3), ("Z", None, 0)]
    assert [(t.name, t.datatype, t.shape) for t in got.inputs] == [
        ("X", "FP32", (2, width)),
        ("F", "BOOL", (3,)),
        ("W", "BYTES", (3,)),
    ]
    np.testing.assert_array_equal(got.inputs[0].data, x)
    np.testing.assert_array_equal(got.inputs[1].data, flags)
    assert list(got.inputs[2].data) == list(words)


@pytest.mark.parametrize("rows", [1, 4096])
def test_a_response_arrives_whole(pool: SegmentPool, rows: int) -> None:
    y = np.arange(rows * 4, dtype=np.int64).reshape(rows, 4) - 7
    half = np.full((rows,), 0.5, np.float16)
    sent = InferenceResponse(
        "model", "3", "id-1", [Tensor("Y", "INT64", y), Tensor("H", "FP16", half)], {"fallback_level": "CPU"}
    )
    message = handoff.response_message(pool, sent)
    got = handoff.read_response(across(message), SegmentReader())
    assert (got.model_name, got.model_version, got.id, got.parameters) == (
        "model",
        "3",
        "id-1",
        {"fallback_level": "CPU"},
    )
    assert [(t.name, t.datatype) for t in got.outputs] == [("Y", "INT64"), ("H", "FP16")]
    np.testing.assert_array_equal(got.outputs[0].data, y)
    np.testing.assert_array_equal(got.outputs[1].data, half)


def test_an_empty_tensor_and_no_tensors_travel(pool: SegmentPool) -> None:
    got = handoff.read_request(
        across(
            handoff.request_message(pool, request_with(Tensor("E", "FP32", np.zeros((0, 3), np.float32))))
        ),
        SegmentReader(),
    )
    assert got.inputs[0].shape == (0, 3)
    none = handoff.read_response(
        across(handoff.response_message(pool, InferenceResponse("m", "1"))), SegmentReader()
    )
    assert none.outputs == []


@pytest.mark.parametrize(
    "error",
    [
        InvalidArgumentError("input 'X' has 3 elements; the shape needs 4"),
        RateLimitedError("slow down", (("retry-after", "2"),)),
        UnavailableError("model 'm' is not ready"),
        RestrictedApiError("this API is restricted"),  # its gRPC status differs from its HTTP one
    ],
)
def test_an_error_keeps_its_status_words_and_headers(error: Exception) -> None:
    assert isinstance(error, ConchError)
    got = handoff.error_of(across(handoff.error_message(error)))
    assert got.kind is error.kind
    assert got.message == error.message
    assert got.headers == error.headers
    assert status_of(got) == status_of(error)


def test_long_strings_go_through_a_segment_though_their_array_is_small(pool: SegmentPool) -> None:
    words = np.array([b"x" * 10_000, b"y" * 10_000], dtype=object)  # nbytes counts 2 pointers
    message = handoff.request_message(pool, request_with(Tensor("W", "BYTES", words)))
    assert message["segment"] is not None
    got = handoff.read_request(across(message), SegmentReader())
    assert list(got.inputs[0].data) == list(words)


def test_a_large_segment_is_removed_once_given_back(pool: SegmentPool) -> None:
    pool.largest_kept = 1 << 16
    dropped: list[str] = []
    pool.on_drop = dropped.append
    small, _ = pool.write([("x", np.zeros(16, np.float32))])
    large, _ = pool.write([("y", np.zeros(1 << 16, np.float32))])  # 256 KiB
    assert small is not None and large is not None
    pool.release(small)
    pool.release(large)
    assert dropped == [large]
    assert not (conch_ipc.SHM_DIR / large).exists() and (conch_ipc.SHM_DIR / small).exists()
