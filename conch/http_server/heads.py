"""Response heads and body framing, as bytes: what the server writes around an app's answer."""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

#: ``HTTP/1.1 200 OK\r\n`` and the like, made once.
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode("ascii") for s in HTTPStatus}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CHUNKED_END = b"0\r\n\r\n"
#: Statuses that never carry a body, so never a Content-Length the server adds.
_BODILESS = frozenset((204, 304))


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} Unknown\r\n".encode("ascii")


class Clock:
    """The ``Date`` header (RFC 9110 asks an origin server with a clock to send it), made once a second."""

    __slots__ = ("_header", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._header = b""

    def date_header(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._header = f"date: {formatdate(now, usegmt=True)}\r\n".encode("ascii")
        return self._header


class Head:
    """A response's head as written, and how its body is framed."""

    __slots__ = ("chunked", "data", "keep_alive")

    def __init__(self, data: bytes, chunked: bool, keep_alive: bool) -> None:
        self.data = data
        #: The body goes as ``Transfer-Encoding: chunked`` (a streamed answer without a length).
        self.chunked = chunked
        #: The connection stays open after this answer.
        self.keep_alive = keep_alive


def response_head(
    status: int,
    headers: list[tuple[bytes, bytes]],
    body_length: int,
    more_body: bool,
    keep_alive: bool,
    http_version: str,
    date: bytes,
) -> Head:
    """The head for an app's answer: its headers, plus the framing and connection headers it left out.

    An answer sent whole gets a ``Content-Length``; a streamed one without a length is chunked (or,
    for an HTTP/1.0 client, ends when the connection closes). ``Connection: close`` from the app
    closes the connection after the answer.
    """
    parts = [status_line(status)]
    has_length = has_connection = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            has_length = True
        elif lowered == b"connection":
            has_connection = True
            if value.lower() == b"close":
                keep_alive = False
        parts.append(name + b": " + value + b"\r\n")
    chunked = False
    if not has_length and status not in _BODILESS:
        if not more_body:
            parts.append(b"content-length: %d\r\n" % body_length)
        elif http_version == "1.1":
            chunked = True
            parts.append(b"transfer-encoding: chunked\r\n")
        else:
            keep_alive = False
    if not has_connection:
        if not keep_alive:
            parts.append(b"connection: close\r\n")
        elif http_version == "1.0":
            parts.append(b"connection: keep-alive\r\n")
    parts.append(date)
    parts.append(b"\r\n")
    return Head(b"".join(parts), chunked, keep_alive)


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never the empty chunk, which would end it)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def refusal(status: int, message: str, date: bytes) -> bytes:
    """A whole answer the server gives by itself (a limit, a malformed request): V2's ``{"error": ...}``
    and ``Connection: close``; 503 adds ``Retry-After``."""
    body = b'{"error":"' + message.replace("\\", "/").replace('"', "'").encode("ascii", "replace") + b'"}'
    head = status_line(status) + b"content-type: application/json\r\n"
    head += b"content-length: %d\r\nconnection: close\r\n" % len(body)
    if status == 503:
        head += b"retry-after: 1\r\n"
    return head + date + b"\r\n" + body
