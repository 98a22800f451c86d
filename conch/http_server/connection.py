"""One client connection: httptools parses its bytes, each request becomes an :class:`Exchange` whose
app runs as one task, answers go back in order, and conch's per-client limits hold.

The limits (``conch serve --http-*``, docs/security.md): a head over ``max_header_bytes`` (chunk
extensions and trailers count with it) or ``max_headers`` gets a 431; a head without a version, or
without exactly one ``Host``, a 400; a request too slow to arrive (:mod:`pace`) a 408; a connection
the server has no room for (:mod:`admission`) a 503; each with ``Connection: close``. An answer sent
before its request's body has all arrived (a refused body) closes the connection, so a body that never
ends cannot hold it. Time limits are checked by the server's once-a-tick sweep (``sweep.py``),
not by a timer per request: arming and cancelling two timers per request cost more than the checks.

Pipelined requests are answered one after another, in order; reading stops once the next has arrived,
and while the transport holds over :data:`WRITE_HIGH_WATER` unsent bytes, when the next request also
waits: a connection holds at most one answer beyond it (200 pipelined requests for 1 MiB answers, none
read, grew the server by 199 MiB when each answer was written at once; ``bench.hostile_clients``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import cast

import httptools

from conch.http_server.exchange import HIGH_WATER, Exchange
from conch.http_server.heads import refusal
from conch.http_server.pace import RequestPace
from conch.http_server.request_heads import (
    expects_continue,
    head_problem,
    http_scope,
    parser_complaint,
    peer_address,
)
from conch.http_server.sides import ServerSide

log = logging.getLogger("conch.http_server")

#: How long (and how much) a refused connection is read, its bytes dropped, before it closes: closing
#: at once, the client's request unread, makes the kernel answer with a reset, which a client may
#: report instead of the refusal; 1 MiB is a request in flight, not what a client streams in 1 s.
LINGER_SECS = 1.0
LINGER_BYTES = 1024 * 1024
#: Unsent answer bytes a connection's transport holds before the connection stops reading and
#: starting its next pipelined request (asyncio's own default).
WRITE_HIGH_WATER = 64 * 1024
#: Framing bytes allowed per chunk of a chunked body (size line, CRLFs); beyond it a chunk's
#: extensions count against the head limit.
_CHUNK_FRAMING = 40

# What the parser is in the middle of, for the time limits.
IDLE, HEAD, BODY = 0, 1, 2


class HttpConnection(asyncio.Protocol):
    """The protocol of one HTTP/1.1 connection."""

    def __init__(self, server: ServerSide) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.limits = server.limits
        self.outbox = server.outbox
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.client: tuple[str, int] | None = None
        self.address: tuple[str, int] | None = None
        #: Who the client is, for its share of the connections: its address, or a trusted proxy's word.
        self.identity = ""
        #: The exchange whose request the parser is reading; the one being answered; those waiting.
        self.parsing: Exchange | None = None
        self.answering: Exchange | None = None
        self.waiting: deque[Exchange] = deque()
        self._url, self._headers = b"", cast(list[tuple[bytes, bytes]], [])
        self.head_bytes = self._header_count = self._chunks = 0
        self.phase = HEAD
        self.since = self.checked = self.loop.time()  # since: when it last became idle (or opened)
        self.pace = RequestPace()
        #: Refused (or closing after an answer that left its body unread): what comes is dropped.
        self.refused = False
        self._pending_refusal: tuple[int, str] | None = None
        self._lingered = 0
        self._held_for_body = self._held_for_queue = False
        self.write_paused = False
        self.unsent, self.write_stuck_since = 0, 0.0
        self._drain: asyncio.Future[None] | None = None

    # asyncio's side.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCP transport
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.client = peer_address(transport.get_extra_info("peername"))
        self.address = peer_address(transport.get_extra_info("sockname"))
        self.identity = self.client[0] if self.client else ""
        refused = self.server.admit(self)
        if refused is not None:
            self.refuse(503, refused)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.forget(self)
        for exchange in (self.answering, self.parsing, *self.waiting):
            if exchange is not None:
                exchange.lose()
        self.waiting.clear()
        self._release_drain()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            self._lingered += len(data)
            if self._lingered > LINGER_BYTES:
                self.transport.close()
            return
        pace = self.pace
        pace.stalled_secs = 0.0
        in_body = self.phase == BODY and self.parsing is not None
        exchange, body_before, chunks_before = self.parsing, pace.body_bytes, self._chunks
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._not_upgraded(data, upgrade)
            return
        except httptools.HttpParserError as exc:
            log.warning("Invalid HTTP request received.")
            self.refuse(400, f"the request is not valid HTTP/1.1 ({parser_complaint(exc)})")
            return
        if in_body and self.parsing is exchange and self.phase == BODY:
            # Bytes of a body that are neither its data nor its chunks' framing: chunk extensions.
            chunks = self._chunks - chunks_before + 1
            extensions = len(data) - (pace.body_bytes - body_before) - _CHUNK_FRAMING * chunks
            if extensions > 0:
                self._count_head(extensions)

    def _not_upgraded(self, data: bytes, upgrade: Exception) -> None:
        """An Upgrade (h2c, WebSocket) is not taken: its request is answered as HTTP/1.1 (RFC 9110 lets a
        server ignore Upgrade), and what follows it is read as HTTP/1.1, by a fresh parser."""
        offset = upgrade.args[0] if upgrade.args and isinstance(upgrade.args[0], int) else len(data)
        self.parser = httptools.HttpRequestParser(self)
        if not self.refused and offset < len(data):
            self.data_received(data[offset:])

    def pause_writing(self) -> None:
        self.write_paused = True
        self.unsent = self.transport.get_write_buffer_size()
        self.write_stuck_since = self.loop.time()
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._release_drain()
        self._update_reading()
        if self.answering is None and self.waiting and not self.transport.is_closing():
            self._next()

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
        self.head_bytes = self._header_count = 0
        if self.phase != HEAD:  # the first request's head is timed from the connection's opening
            self.phase = HEAD
            self.pace.restart()

    def on_url(self, url: bytes) -> None:
        if self._count_head(len(url)):
            self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._count_head(len(name) + len(value)):
            return
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self.refuse(
                431,
                f"the request has more than {self.limits.max_headers} headers "
                "(--http-max-headers); send fewer",
            )
            return
        if self.phase == HEAD:  # after it, a trailer: counted with the head, never shown to the app
            self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        parser = self.parser
        http_version = parser.get_http_version()
        problem = head_problem(http_version, self._headers)
        if problem is not None:
            self.refuse(400, problem)
            return
        client = self.client
        proxies = self.server.trusted_proxies
        if proxies and client is not None:
            named = proxies.client_of(client[0], self._headers)
            self.server.rename(self, named)
            if named != client[0]:
                client = (named, 0)
        method = parser.get_method().decode("ascii")
        scope = http_scope(method, self._url, http_version, self._headers, client, self.address)
        if scope is None:
            self.refuse(400, "the request's target is not a valid URL")
            return
        expect_continue = http_version == "1.1" and expects_continue(self._headers)
        exchange = Exchange(self, scope, parser.should_keep_alive(), expect_continue)
        self.parsing = exchange
        self.phase = BODY
        self.pace.body_secs = self.pace.stalled_secs = 0.0
        self.pace.body_bytes = self._chunks = 0
        if self.answering is None:
            self._start(exchange)
        else:
            self.waiting.append(exchange)
            self._hold_for_queue(True)

    def on_chunk_header(self) -> None:
        self._chunks += 1

    def on_body(self, body: bytes) -> None:
        exchange = self.parsing
        if exchange is None or self.refused:
            return
        self.pace.body_bytes += len(body)
        exchange.add_body(body)
        if exchange.buffered > HIGH_WATER and not self._held_for_body:
            self._held_for_body = True
            self._update_reading()

    def on_message_complete(self) -> None:
        exchange = self.parsing
        if exchange is None or self.refused:
            return
        self.parsing = None
        self.phase = IDLE
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
        if self._pending_refusal is not None and not self.waiting:  # a later request was refused
            self._send_refusal(*self._pending_refusal)
        elif not exchange.body_complete:
            self._linger_close()  # a body still arriving after its answer is not read on (module doc)
        elif not exchange.keep_alive or self.server.stopping:
            self.close()
        else:
            self._next()

    def _next(self) -> None:
        """Starts the next pipelined request, unless the client has yet to take the answers before it."""
        if not self.waiting:
            if self.parsing is None:
                self.since = self.loop.time()  # idle from now
            return
        self.outbox.flush()  # this answer's last bytes too, so that write_paused says if the client reads
        if not self.write_paused:
            self._start(self.waiting.popleft())
            if not self.waiting and not self.refused:
                self._hold_for_queue(False)

    def _hold_for_queue(self, hold: bool) -> None:
        if hold != self._held_for_queue:
            self._held_for_queue = hold
            self._update_reading()

    def _update_reading(self) -> None:
        if self.transport.is_closing():
            return
        if self.held():
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def _count_head(self, size: int) -> bool:
        """Adds ``size`` bytes to the head; False (and the connection refused) once over the limit."""
        if self.refused:
            return False
        self.head_bytes += size
        if self.head_bytes > self.limits.max_header_bytes:
            self.refuse(
                431,
                f"the request line and headers are larger than {self.limits.max_header_bytes} bytes "
                "(--http-max-header-bytes, chunk extensions and trailers included); send smaller headers",
            )
            return False
        return True

    def held(self) -> bool:
        """The server, not the client, stopped this connection's reading (see the module doc)."""
        return self._held_for_body or self._held_for_queue or self.write_paused

    def refuse(self, status: int, message: str) -> None:
        """Answers ``status`` with ``message`` and closes the connection, after a lingering read. The
        request being read never runs; those before it, complete, are answered first."""
        if self.refused:
            return
        self._stop_reading_requests()
        parsing, answering = self.parsing, self.answering
        self.parsing = None
        if parsing is not None:
            parsing.lose()
            if parsing in self.waiting:
                self.waiting.remove(parsing)
        if answering is not None and answering is parsing:
            self.answering = None
            if answering.head_sent:
                self.close()
                return
        elif answering is not None:
            self._pending_refusal = (status, message)
            self._hold_for_queue(True)
            return
        self._send_refusal(status, message)

    def _stop_reading_requests(self) -> None:
        if not self.refused:
            self.refused = True
            self.server.release(self)

    def _send_refusal(self, status: int, message: str) -> None:
        self._pending_refusal = None
        if self.transport.is_closing():
            return
        self.write(refusal(status, message, self.server.clock.date_header()))
        self.server.refused(self, status)
        self._linger_close()

    def _linger_close(self) -> None:
        """Closes after what was written, reading (and dropping) what still comes for a while."""
        self._stop_reading_requests()
        transport = self.transport
        if transport.is_closing():
            return
        self.outbox.flush()
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._held_for_body = self._held_for_queue = False
        transport.resume_reading()
        self.loop.call_later(LINGER_SECS, self.close)

    def shutdown(self) -> None:
        """The server is stopping: an idle connection closes now, a busy one after its answer."""
        if self.answering is None:
            self.close()
