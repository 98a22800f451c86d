"""HTTP bodies: reading a request body bounded in size, inflating gzip and deflate request bodies,
and compressing a response when the client asks for it with ``Accept-Encoding``."""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from conch.core.errors import InvalidArgumentError, TooLargeError

_GZIP_WBITS = 16 + zlib.MAX_WBITS


async def read_body(
    scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], limit: int
) -> bytes:
    """The whole body, inflated per ``Content-Encoding``; more than ``limit`` bytes is a 413.

    A ``Content-Length`` over the limit is refused before a byte of the body is read; a chunked body
    as soon as its chunks add up to more (the connection then closes: ``server/connection.py``).
    """
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLargeError(_too_large(f"request body of {declared} bytes", limit))
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise TooLargeError(_too_large("request body", limit))
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    encoding = _content_encoding(scope)
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return _inflate(body, _GZIP_WBITS, limit, "gzip")
    if encoding == "deflate":
        return _inflate(body, zlib.MAX_WBITS, limit, "deflate")
    raise InvalidArgumentError(f"unsupported Content-Encoding '{encoding}'; use gzip or deflate")


def _too_large(what: str, limit: int) -> str:
    return (
        f"{what} is larger than the {limit} byte limit (--http-max-body-bytes); send a smaller request "
        "or split the batch"
    )


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1").strip())
    return None


def _content_encoding(scope: dict[str, Any]) -> str:
    return (_header(scope, b"content-encoding") or "").lower()


def _inflate(body: bytes, wbits: int, limit: int, name: str) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidArgumentError(f"request body is not valid {name} data: {exc}") from None
    if len(data) > limit:
        raise TooLargeError(_too_large("inflated request body", limit))
    if not inflater.eof:
        raise InvalidArgumentError(f"request body is truncated {name} data")
    return data


def compress_for(scope: dict[str, Any], body: bytes) -> tuple[bytes, bytes | None]:
    """``body`` gzip- or deflate-compressed if ``Accept-Encoding`` asks for it, with the encoding used."""
    accepted = ""
    for key, value in scope["headers"]:
        if key == b"accept-encoding":
            accepted = value.decode("latin-1").lower()
            break
    if not accepted:  # most clients: no parsing, no generator
        return body, None
    for choice in (part.split(";")[0].strip() for part in accepted.split(",")):
        if choice == "gzip":
            compressor = zlib.compressobj(wbits=_GZIP_WBITS)
            return compressor.compress(body) + compressor.flush(), b"gzip"
        if choice == "deflate":
            return zlib.compress(body), b"deflate"
    return body, None
