"""Reading an HTTP request body from ASGI: chunks, size limit, gzip and deflate."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import grpc
import pytest

from conch.core.errors import InvalidArgumentError, TooLargeError
from conch.frontends.grpc.status import status_of
from conch.frontends.http.body import read_body
from conch.frontends.http.replies import refusal

PAYLOAD = b'{"inputs": []}' * 100


def read(body: bytes, encoding: str | None = None, limit: int = 1 << 20, chunk_size: int = 100) -> bytes:
    """Feed ``body`` to ``read_body`` as an ASGI server would: ``http.request`` messages of ``chunk_size``."""
    headers = [(b"content-type", b"application/json")]
    if encoding is not None:
        headers.append((b"content-encoding", encoding.encode("latin-1")))
    scope: dict[str, Any] = {"type": "http", "headers": headers}
    chunks = [body[i : i + chunk_size] for i in range(0, len(body), chunk_size)] or [b""]
    messages = iter(
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    )

    async def receive() -> dict[str, Any]:
        return next(messages)

    return asyncio.run(read_body(scope, receive, limit))


def test_plain_body_in_chunks() -> None:
    assert read(PAYLOAD) == PAYLOAD


def test_empty_body() -> None:
    assert read(b"") == b""


@pytest.mark.parametrize("encoding", ["identity", " Identity "])
def test_identity_encoding(encoding: str) -> None:
    assert read(PAYLOAD, encoding) == PAYLOAD


def test_gzip_body() -> None:
    assert read(gzip.compress(PAYLOAD), "gzip") == PAYLOAD


def test_deflate_body() -> None:
    assert read(zlib.compress(PAYLOAD), "deflate") == PAYLOAD


def test_body_over_the_limit() -> None:
    with pytest.raises(TooLargeError, match="request body is larger than the 1000 byte limit"):
        read(PAYLOAD, limit=1000)


def test_too_large_is_413_over_http_and_resource_exhausted_over_grpc() -> None:
    error = TooLargeError("request body is larger than the 10 byte limit")
    assert refusal(error)[0] == 413
    assert status_of(error) == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read() -> None:
    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    scope: dict[str, Any] = {"type": "http", "headers": [(b"content-length", b"10737418240")]}
    with pytest.raises(TooLargeError, match="request body of 10737418240 bytes"):
        asyncio.run(read_body(scope, receive, 1000))


def test_body_exactly_at_the_limit() -> None:
    assert read(PAYLOAD, limit=len(PAYLOAD)) == PAYLOAD


def test_inflated_body_over_the_limit() -> None:
    """A small gzip body that inflates past the limit is refused, whatever its compressed size."""
    bomb = gzip.compress(b"\x00" * 1_000_000)
    assert len(bomb) < 10_000

    with pytest.raises(TooLargeError, match="inflated request body is larger than the 10000 byte limit"):
        read(bomb, "gzip", limit=10_000)


def test_bad_gzip() -> None:
    with pytest.raises(InvalidArgumentError, match="request body is not valid gzip data"):
        read(b"this is not gzip", "gzip")


def test_truncated_gzip() -> None:
    with pytest.raises(InvalidArgumentError, match="request body is truncated gzip data"):
        read(gzip.compress(PAYLOAD)[:-10], "gzip")


def test_unsupported_encoding() -> None:
    with pytest.raises(InvalidArgumentError, match="unsupported Content-Encoding 'br'; use gzip or deflate"):
        read(PAYLOAD, "br")
