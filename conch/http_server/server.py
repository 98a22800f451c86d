"""The HTTP server of one port: its listening sockets, its connections, the time-limit sweep, the
access log and a graceful stop."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from typing import TYPE_CHECKING, Any

from conch.frontends.http.limits import HttpLimits
from conch.frontends.tls import TlsFiles
from conch.http_server.admission import Holding, admit, near_cap
from conch.http_server.connection import HttpConnection
from conch.http_server.heads import Clock
from conch.http_server.outbox import Outbox
from conch.http_server.peers import TrustedProxies
from conch.http_server.sweep import check_time, evict, holding
from conch.observability.access_log import ACCESS_LOGGER

if TYPE_CHECKING:
    from conch.http_server.exchange import Exchange

#: How long a stopping server waits for the answers still being written (a stream, say).
STOP_GRACE_SECS = 5.0
_BACKLOG = 2048

#: ``--access-log``'s records (see :mod:`conch.observability.access_log`).
access_log = logging.getLogger(ACCESS_LOGGER)


class HttpServer:
    """Serves an ASGI ``app`` on listening sockets until :meth:`shutdown`."""

    def __init__(
        self,
        app: Any,
        limits: HttpLimits | None = None,
        access_log: bool = False,
        tls: TlsFiles | None = None,
    ) -> None:
        self.app = app
        #: The port's TLS (off: plain HTTP).
        self.tls = tls or TlsFiles()
        self.limits = limits or HttpLimits()
        #: ``--http-trusted-proxies``: whose client header names the client.
        self.trusted_proxies = TrustedProxies(self.limits.trusted_proxies, self.limits.client_ip_header)
        #: One record per answer on :data:`ACCESS_LOGGER` (off by default: a record per request,
        #: health probes and scrapes included, costs the event loop a formatted line each).
        self.access_log = access_log
        self.clock = Clock()
        self.connections: set[HttpConnection] = set()
        #: Connections refused (or closing) that still read for a moment: they hold no slot.
        self.lingering = 0
        #: The connections that hold a slot, by client (:attr:`HttpConnection.identity`).
        self.clients: Counter[str] = Counter()
        #: Set by :meth:`serve`, on the loop it serves on.
        self.outbox: Outbox = None  # type: ignore[assignment]
        self.stopping = False
        #: Requests whose app is running now: with none but one, its answer has no other to go with.
        self.running = 0
        self._stop = asyncio.Event()
        # Every time limit is seconds long; a sweep a quarter of the shortest apart keeps each within
        # a quarter of its value.
        limits = self.limits
        shortest = min(limits.slow_client_timeout_secs, limits.idle_timeout_secs, limits.write_timeout_secs)
        self._tick_secs = max(0.05, min(1.0, shortest / 4))

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Accepts connections on ``sockets`` (bound and listening) until :meth:`shutdown`, then lets
        the answers being written finish, for :data:`STOP_GRACE_SECS` at most."""
        loop = asyncio.get_running_loop()
        self.outbox = Outbox(loop)
        # A TLS handshake that stalls is a slow client too: it is cut off as a stalled head would be.
        tls: dict[str, Any] = {}
        if self.tls.on:
            tls = {
                "ssl": self.tls.ssl_context(),
                "ssl_handshake_timeout": self.limits.slow_client_timeout_secs,
            }
        listeners = [
            await loop.create_server(lambda: HttpConnection(self), sock=sock, backlog=_BACKLOG, **tls)
            for sock in sockets
        ]
        ticking = loop.call_later(self._tick_secs, self._sweep)
        try:
            await self._stop.wait()
        finally:
            self.stopping = True
            for listener in listeners:
                listener.close()
            for connection in list(self.connections):
                connection.shutdown()
            deadline = loop.time() + STOP_GRACE_SECS
            while self.connections and loop.time() < deadline:
                await asyncio.sleep(0.02)
            for connection in list(self.connections):
                connection.transport.abort()
            ticking.cancel()

    def shutdown(self) -> None:
        """Stop accepting; :meth:`serve` returns once the open answers are written."""
        self._stop.set()

    def _sweep(self) -> None:
        now = asyncio.get_running_loop().time()
        for connection in list(self.connections):
            check_time(connection, now)
        if not self.stopping:
            asyncio.get_running_loop().call_later(self._tick_secs, self._sweep)

    def admit(self, newcomer: HttpConnection) -> str | None:
        """Holds ``newcomer``; None, or why it must be refused (:mod:`admission`). Another client's
        slowest request may give up its slot for it."""
        cap, held = self.limits.max_connections, len(self.connections) - self.lingering
        self.connections.add(newcomer)
        verdict = None
        if near_cap(held + 1, cap):
            verdict = admit(newcomer.identity, self.clients, held, cap, lambda: self._holdings(newcomer))
            if verdict.evict is not None:
                evict(verdict.evict)
        self.clients[newcomer.identity] += 1
        if verdict is None or verdict.admitted:
            return None
        return f"{verdict.reason}: at most {cap} in all (--http-max-connections); retry later"

    def release(self, connection: HttpConnection) -> None:
        """``connection`` is refused or closing: it lingers a moment, holding no slot."""
        self.lingering += 1
        self._let_go(connection.identity)

    def forget(self, connection: HttpConnection) -> None:
        self.connections.discard(connection)
        if connection.refused:
            self.lingering -= 1
        else:
            self._let_go(connection.identity)

    def rename(self, connection: HttpConnection, identity: str) -> None:
        """A trusted proxy named ``connection``'s client: its slot counts as that client's."""
        if identity != connection.identity and not connection.refused:
            self._let_go(connection.identity)
            self.clients[identity] += 1
        connection.identity = identity

    def _let_go(self, identity: str) -> None:
        left = self.clients[identity] - 1
        if left > 0:
            self.clients[identity] = left
        else:
            del self.clients[identity]

    def _holdings(self, newcomer: HttpConnection) -> list[Holding[HttpConnection]]:
        now = asyncio.get_running_loop().time()
        return [holding(each, now) for each in self.connections if each is not newcomer and not each.refused]

    def let_go(self, identity: str) -> None:
        """A connection of ``identity`` no longer holds a slot (refused, closed, or named anew)."""
        left = self.clients[identity] - 1
        if left > 0:
            self.clients[identity] = left
        else:
            del self.clients[identity]

    def answered(self, connection: HttpConnection, exchange: Exchange) -> None:
        if self.access_log:
            scope = exchange.scope
            query = scope["query_string"]
            target = scope["path"] + ("?" + query.decode("latin-1") if query else "")
            access_log.info(
                '%s - "%s %s HTTP/%s" %d',
                _peer(scope["client"]),
                scope["method"],
                target,
                scope["http_version"],
                exchange.status,
            )

    def refused(self, connection: HttpConnection, status: int) -> None:
        if self.access_log:
            access_log.info('%s - "%s %s HTTP/%s" %d', _peer(connection.client), "-", "-", "1.1", status)


def _peer(client: tuple[str, int] | None) -> str:
    """The client as the access log names it: the peer, or the client a trusted proxy named."""
    return f"{client[0]}:{client[1]}" if client else "-"
