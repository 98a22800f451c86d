"""What one HTTP client may hold of the server: connections, the request head's size and time.

uvicorn's httptools protocol buffers a request's URL and headers without bound and waits for them
forever, so a client sending a header a byte at a time (slowloris), or a megabyte of headers, holds
memory and a connection for as long as it likes. :func:`limited_protocol` is that protocol with the
limits of ``conch serve``'s ``--http-*`` flags, checked as the bytes arrive: a head over
``max_header_bytes`` or ``max_headers`` gets a 431, a head not complete ``slow_client_timeout_secs``
after its first byte (or after the connection opened) a 408, and so does a body from which no byte
came for that long (a slow POST); a connection over ``max_connections`` gets a 503; each with
``Connection: close``. A response sent before its request's body has all arrived (a
refused body, such as one over the body limit) closes the connection, so a body that never ends
cannot keep it.

The body size and JSON depth are the application's (:class:`~conch.frontends.http.app.HttpFrontend`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from conch.frontends.http.limits import HttpLimits


def limited_protocol(limits: HttpLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class with ``limits`` (uvicorn's ``Config(http=...)`` takes it)."""

    class LimitedHttpToolsProtocol(_LimitedProtocol):
        pass

    LimitedHttpToolsProtocol.limits = limits
    return LimitedHttpToolsProtocol


class _LimitedProtocol(HttpToolsProtocol):
    limits: HttpLimits = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refuse(
                503,
                f"the server holds its {self.limits.max_connections} connections already "
                "(--http-max-connections); retry later",
            )
            return
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        self._stop_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        if self._head_timer is None:
            self._start_head_timer()

    def on_url(self, url: bytes) -> None:
        if self._count_head(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._count_head(len(name) + len(value)):
            return
        if len(self.headers) >= self.limits.max_headers:
            self._refuse(
                431,
                f"the request has more than {self.limits.max_headers} headers "
                "(--http-max-headers); send fewer",
            )
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._stop_head_timer()
        super().on_headers_complete()
        self._start_body_timer()

    def on_body(self, body: bytes) -> None:
        if not self._refused and self.cycle is not None:
            self._start_body_timer()
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._stop_body_timer()
        if not self._refused and self.cycle is not None:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        # A response to a request whose body is still arriving (refused, say, for its size): reading
        # the rest would let a body that never ends hold the connection for ever.
        if self.cycle is not None and self.cycle.more_body and not self.transport.is_closing():
            self.transport.close()
        super().on_response_complete()

    def _count_head(self, size: int) -> bool:
        """Adds ``size`` bytes to the head; False (and the connection refused) once over the limit."""
        if self._refused:
            return False
        self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            self._refuse(
                431,
                f"the request line and headers are larger than {self.limits.max_header_bytes} bytes "
                "(--http-max-header-bytes); send smaller headers",
            )
            return False
        return True

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.slow_client_timeout_secs, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        self._refuse(
            408,
            f"the request's line and headers did not arrive within {self.limits.slow_client_timeout_secs:g} "
            "s (--http-slow-client-timeout-secs)",
        )

    def _start_body_timer(self) -> None:
        self._stop_body_timer()
        self._body_timer = self.loop.call_later(self.limits.slow_client_timeout_secs, self._body_too_slow)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_too_slow(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.response_complete:
            return
        if self.flow.read_paused:  # the server stopped reading (the app is behind): not the client's fault
            self._start_body_timer()
            return
        # The app waiting for the rest of the body hears a disconnect, and its answer goes nowhere.
        cycle.disconnected = True
        cycle.message_event.set()
        if cycle.response_started:
            self.transport.close()
            return
        self._refuse(
            408,
            f"no byte of the request body arrived for {self.limits.slow_client_timeout_secs:g} s "
            "(--http-slow-client-timeout-secs)",
        )

    def _refuse(self, status: int, message: str) -> None:
        """Answers ``status`` with ``message`` as V2's ``{"error": ...}`` and closes the connection."""
        self._refused = True
        self._stop_head_timer()
        self._stop_body_timer()
        if self.transport.is_closing():
            return
        body = b'{"error":"' + message.replace('"', "'").encode("ascii", "replace") + b'"}'
        reason = _REASONS[status]
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n"
        )
        if status == 503:
            head += "retry-after: 1\r\n"
        self.transport.write(head.encode("ascii") + b"\r\n" + body)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        # A lingering close: closing at once, with the client's request still unread, would make the
        # kernel answer its bytes with a reset, which a client may report instead of this answer.
        self.transport.write_eof()
        self.loop.call_later(_LINGER_SECS, self.transport.close)


#: How long a refused connection is read (and its bytes dropped) before it closes.
_LINGER_SECS = 1.0

_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}
