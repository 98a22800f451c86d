"""One request and its answer on a connection: the ASGI ``receive`` and ``send`` the app is given.

The body is buffered here as it arrives, so an app that reads it after it has all come (the usual
case: a small body arrives with its head, in the same read) gets it in one message without waiting.
A body the app is slow to read stops the connection's reading above :data:`HIGH_WATER` bytes, so a
client cannot fill the server's memory faster than the app consumes it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from conch.http_server.heads import CHUNKED_END, CONTINUE, chunk, refusal, response_head
from conch.http_server.sides import ConnectionSide

log = logging.getLogger("conch.http_server")

#: Body bytes held for the app before the connection stops reading more.
HIGH_WATER = 256 * 1024
#: Bodies up to this size are joined to their head (one copy, one system call); larger ones go after it.
JOIN_LIMIT = 64 * 1024


class Exchange:
    """A request's scope and body as they arrive, and its answer as the app sends it."""

    __slots__ = (
        "_chunks",
        "_headers",
        "_status",
        "_waiter",
        "body_complete",
        "body_delivered",
        "buffered",
        "chunked",
        "complete",
        "connection",
        "disconnected",
        "expect_continue",
        "head_only",
        "head_sent",
        "keep_alive",
        "scope",
    )

    def __init__(
        self, connection: ConnectionSide, scope: dict[str, Any], keep_alive: bool, expect_continue: bool
    ) -> None:
        self.connection = connection
        self.scope = scope
        self.keep_alive = keep_alive
        #: The client waits for ``100 Continue`` before it sends the body.
        self.expect_continue = expect_continue
        self.head_only = scope["method"] == "HEAD"
        self._chunks: list[bytes] = []
        self.buffered = 0
        self.body_complete = False
        self.body_delivered = False
        self.disconnected = False
        self._waiter: asyncio.Future[None] | None = None
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] | None = None
        self.head_sent = False
        self.chunked = False
        self.complete = False

    # What the connection tells the exchange.

    def add_body(self, data: bytes) -> None:
        self._chunks.append(data)
        self.buffered += len(data)
        self._wake()

    def end_body(self) -> None:
        self.body_complete = True
        self._wake()

    def lose(self) -> None:
        """The client is gone (or was cut off): the app's next ``receive`` hears a disconnect."""
        self.disconnected = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = self.connection.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # The ASGI side.

    async def receive(self) -> dict[str, Any]:
        if not self.body_delivered:
            while not self.disconnected:
                if self._chunks or self.body_complete:
                    chunks, self._chunks = self._chunks, []
                    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    self.buffered = 0
                    self.connection.body_read()
                    self.body_delivered = self.body_complete
                    return {"type": "http.request", "body": body, "more_body": not self.body_complete}
                if self.expect_continue:
                    self.expect_continue = False
                    self.connection.write(CONTINUE)
                await self._wait()
            return {"type": "http.disconnect"}
        while not (self.disconnected or self.complete):
            await self._wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self._headers is not None:
                raise RuntimeError("http.response.start sent twice")
            self._status = int(message["status"])
            self._headers = list(message.get("headers", ()))
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message type {kind!r}")
        if self._headers is None:
            raise RuntimeError("http.response.body before http.response.start")
        if self.complete:
            raise RuntimeError("http.response.body after the response ended")
        body: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        if self.disconnected:
            self.complete = not more
            return
        connection = self.connection
        # An answer's last bytes wait for the end of the loop's pass, sent with the others' (outbox.py).
        write = connection.write if more else connection.write_last
        if not self.head_sent:
            self.head_sent = True
            head = response_head(
                self._status,
                self._headers,
                len(body),
                more,
                self.keep_alive and not connection.server.stopping,
                self.scope["http_version"],
                connection.server.clock.date_header(),
            )
            self.keep_alive, self.chunked = head.keep_alive, head.chunked
            if self.head_only:  # the head a GET would have had, and no body at all
                write(head.data)
            elif not body:
                write(head.data + (CHUNKED_END if self.chunked and not more else b""))
            elif self.chunked:
                write(head.data + chunk(body) + (b"" if more else CHUNKED_END))
            elif len(body) <= JOIN_LIMIT:
                write(head.data + body)
            else:
                write(head.data)
                write(body)
        elif not self.head_only:
            data = body
            if self.chunked:
                data = (chunk(body) if body else b"") + (b"" if more else CHUNKED_END)
            if data:
                write(data)
        if not more:
            self.complete = True
            self._wake()
            connection.answered(self)
        elif connection.write_paused:
            await connection.drained()

    async def run(self, app: Any) -> None:
        """Runs the app on this exchange; an app that fails, or returns without answering, gets a 500
        (or, past its head, a closed connection) and a log record."""
        server = self.connection.server
        server.running += 1
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            log.exception("unhandled error answering %s %s", self.scope["method"], self.scope["path"])
            self._fail()
            return
        finally:
            server.running -= 1
        if not self.complete:
            log.error("no complete answer to %s %s", self.scope["method"], self.scope["path"])
            self._fail()

    def _fail(self) -> None:
        connection = self.connection
        self.keep_alive = False
        if self.complete or self.disconnected:
            return
        if self.head_sent:
            connection.close()
        else:
            self.head_sent = True
            clock = connection.server.clock
            connection.write(refusal(500, "internal server error", clock.date_header()))
            self._status = 500
        self.complete = True
        self._wake()
        connection.answered(self)

    @property
    def status(self) -> int:
        return self._status
