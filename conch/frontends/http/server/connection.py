"""One client connection: httptools parses its bytes, each request becomes an :class:`Exchange` whose
app runs as one task, answers go back in order, and conch's per-client limits hold.

The limits (``conch serve --http-*``, docs/security.md): a head over ``max_header_bytes`` or
``max_headers`` gets a 431; a head not complete ``slow_client_timeout_secs`` after its first byte (or
after the connection opened) a 408, and so does a body from which no byte came for that long; a
connection over ``max_connections`` a 503; each with ``Connection: close``. An answer sent before its
request's body has all arrived (a refused body) closes the connection, so a body that never ends
cannot hold it. Time limits are checked by the server's once-a-tick sweep (:meth:`check_time`), not
by a timer per request: arming and cancelling two timers per request cost more than the checks.

Requests pipelined on one connection are answered one after another, in order; while one is being
answered, reading stops once the next has arrived.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools

from conch.frontends.http.server.exchange import HIGH_WATER, Exchange
from conch.frontends.http.server.heads import refusal

if TYPE_CHECKING:
    from conch.frontends.http.server.server import HttpServer

log = logging.getLogger("conch.frontends.http.server")

#: How long a refused connection is read (and its bytes dropped) before it closes: closing at once,
#: with the client's request still unread, makes the kernel answer it with a reset, which a client
#: may report instead of the refusal.
LINGER_SECS = 1.0
_ASGI = {"version": "3.0", "spec_version": "2.3"}

# What the parser is in the middle of, for the time limits.
_IDLE, _HEAD, _BODY = 0, 1, 2


class HttpConnection(asyncio.Protocol):
    """The protocol of one HTTP/1.1 connection."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.limits = server.limits
        self.outbox = server.outbox
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.client: tuple[str, int] | None = None
        self.address: tuple[str, int] | None = None
        #: The exchange whose request the parser is reading; the one being answered; those waiting.
        self.parsing: Exchange | None = None
        self.answering: Exchange | None = None
        self.waiting: deque[Exchange] = deque()
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self.phase = _HEAD
        self.since = self.loop.time()
        self.refused = False
        self._stop_parsing = False
        self._held_for_body = self._held_for_queue = False
        self.write_paused = False
        self._drain: asyncio.Future[None] | None = None

    # asyncio's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCP transport
        self.client = _address(transport.get_extra_info("peername"))
        self.address = _address(transport.get_extra_info("sockname"))
        connections = self.server.connections
        connections.add(self)
        if len(connections) > self.limits.max_connections:
            self.refuse(
                503,
                f"the server holds its {self.limits.max_connections} connections already "
                "(--http-max-connections); retry later",
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        for exchange in (self.answering, self.parsing, *self.waiting):
            if exchange is not None:
                exchange.lose()
        self.waiting.clear()
        self._release_drain()

    def data_received(self, data: bytes) -> None:
        if self.refused or self._stop_parsing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # An upgrade (WebSocket, h2c) is not served: the request is answered as plain HTTP/1.1,
            # and the connection closes after it, since what follows is not HTTP/1.1.
            self._stop_parsing = True
            if self.parsing is not None:
                self.parsing.keep_alive = False
        except httptools.HttpParserError as exc:
            log.warning("Invalid HTTP request received.")
            self.refuse(400, f"the request is not valid HTTP/1.1 ({_reason(exc)})")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._release_drain()

    def _release_drain(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    async def drained(self) -> None:
        """Returns once the transport takes writes again (or the connection is gone)."""
        if not self.write_paused or self.transport.is_closing():
            return
        if self._drain is None:
            self._drain = self.loop.create_future()
        await self._drain

    # httptools' side.

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._head_bytes = 0
        if self.phase != _HEAD:  # the first request's head is timed from the connection's opening
            self.phase = _HEAD
            self.since = self.loop.time()

    def on_url(self, url: bytes) -> None:
        if self._count_head(len(url)):
            self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._count_head(len(name) + len(value)):
            return
        if len(self._headers) >= self.limits.max_headers:
            self.refuse(
                431,
                f"the request has more than {self.limits.max_headers} headers "
                "(--http-max-headers); send fewer",
            )
            return
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        parser = self.parser
        try:
            url = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            self.refuse(400, "the request's target is not a valid URL")
            return
        raw_path: bytes = url.path or b"/"
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path, encoding="latin-1")
        http_version = parser.get_http_version()
        scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": http_version,
            "server": self.address,
            "client": self.client,
            "scheme": "http",
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
        }
        expect_continue = http_version == "1.1" and _expects_continue(self._headers)
        exchange = Exchange(self, scope, parser.should_keep_alive(), expect_continue)
        self.parsing = exchange
        self.phase = _BODY
        self.since = self.loop.time()
        if self.answering is None:
            self._start(exchange)
        else:
            self.waiting.append(exchange)
            self._hold_for_queue(True)

    def on_body(self, body: bytes) -> None:
        exchange = self.parsing
        if exchange is None or self.refused:
            return
        self.since = self.loop.time()
        exchange.add_body(body)
        if exchange.buffered > HIGH_WATER and not self._held_for_body:
            self._held_for_body = True
            self._update_reading()

    def on_message_complete(self) -> None:
        exchange = self.parsing
        if exchange is None or self.refused:
            return
        self.parsing = None
        self.phase = _IDLE
        self.since = self.loop.time()
        exchange.end_body()

    # The exchanges' side.

    def _start(self, exchange: Exchange) -> None:
        self.answering = exchange
        self.loop.create_task(exchange.run(self.server.app))

    def write(self, data: bytes) -> None:
        """Writes ``data`` now, after the answers waiting in the outbox (one may be this connection's)."""
        if not self.transport.is_closing():
            self.outbox.flush()
            self.transport.write(data)

    def write_last(self, data: bytes) -> None:
        """An answer's last bytes: sent with the other answers of this pass of the loop (see outbox),
        or now when no other request is being answered, as none would go with it."""
        if self.server.running > 1:
            if not self.transport.is_closing():
                self.outbox.put(self.transport, data)
        else:
            self.write(data)

    def close(self) -> None:
        if not self.transport.is_closing():
            self.outbox.flush()
            self.transport.close()

    def body_read(self) -> None:
        """The app has taken the buffered body: read on, if reading stopped for it."""
        if self._held_for_body:
            self._held_for_body = False
            self._update_reading()

    def answered(self, exchange: Exchange) -> None:
        """``exchange``'s answer is complete: the next request's turn, or the connection's end."""
        self.server.answered(self, exchange)
        if exchange is not self.answering or self.transport.is_closing():
            return
        self.answering = None
        if not exchange.body_complete or not exchange.keep_alive or self.server.stopping:
            # A body still arriving after its answer (a refused one) is not read on, see the module doc.
            self.close()
            return
        if self.waiting:
            self._start(self.waiting.popleft())
            if not self.waiting:
                self._hold_for_queue(False)
        elif self.parsing is None:
            self.since = self.loop.time()  # idle from now

    def _hold_for_queue(self, hold: bool) -> None:
        if hold != self._held_for_queue:
            self._held_for_queue = hold
            self._update_reading()

    def _update_reading(self) -> None:
        if self.transport.is_closing():
            return
        if self._held_for_body or self._held_for_queue:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    # Limits.

    def _count_head(self, size: int) -> bool:
        """Adds ``size`` bytes to the head; False (and the connection refused) once over the limit."""
        if self.refused:
            return False
        self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            self.refuse(
                431,
                f"the request line and headers are larger than {self.limits.max_header_bytes} bytes "
                "(--http-max-header-bytes); send smaller headers",
            )
            return False
        return True

    def check_time(self, now: float) -> None:
        """The server's sweep: cuts off a head or body that stalled, or a connection idle too long."""
        if self.refused or self.transport.is_closing():
            return
        waited = now - self.since
        limits = self.limits
        if self.phase == _HEAD:
            if waited > limits.slow_client_timeout_secs:
                self.refuse(
                    408,
                    "the request's line and headers did not arrive within "
                    f"{limits.slow_client_timeout_secs:g} s (--http-slow-client-timeout-secs)",
                )
        elif self.phase == _BODY:
            if waited <= limits.slow_client_timeout_secs:
                return
            if self._held_for_body or self._held_for_queue:  # the server stopped reading, not the client
                self.since = now
                return
            exchange = self.parsing
            if exchange is not None:
                exchange.lose()  # the app waiting for the rest of the body hears a disconnect
                if exchange.head_sent:
                    self.close()
                    return
            self.refuse(
                408,
                f"no byte of the request body arrived for {limits.slow_client_timeout_secs:g} s "
                "(--http-slow-client-timeout-secs)",
            )
        elif self.answering is None and not self.waiting and waited > limits.idle_timeout_secs:
            self.close()

    def refuse(self, status: int, message: str) -> None:
        """Answers ``status`` with ``message`` and closes the connection, after a lingering read."""
        self.refused = True
        transport = self.transport
        if transport.is_closing():
            return
        self.write(refusal(status, message, self.server.clock.date_header()))
        self.server.refused(self, status)
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.loop.call_later(LINGER_SECS, self.close)

    def shutdown(self) -> None:
        """The server is stopping: an idle connection closes now, a busy one after its answer."""
        if self.answering is None:
            self.close()


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None


def _expects_continue(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"expect":
            return value.lower() == b"100-continue"
    return False


def _reason(exc: Exception) -> str:
    """The parser's complaint, without anything of the request's bytes."""
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    return text.split(":")[0][:80] or type(exc).__name__
