"""The HTTP server of one port: its listening sockets, its connections, the time-limit sweep, the
access log and a graceful stop."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any

from conch.frontends.http.limits import HttpLimits
from conch.frontends.http.server.admission import admit, near_cap
from conch.frontends.http.server.connection import HttpConnection
from conch.frontends.http.server.heads import Clock
from conch.frontends.http.server.outbox import Outbox
from conch.frontends.http.server.peers import TrustedProxies
from conch.frontends.http.server.sweep import check_time, evict, holding
from conch.frontends.tls import TlsFiles

if TYPE_CHECKING:
    from conch.frontends.http.server.exchange import Exchange

#: ``--access-log``'s records (see :mod:`conch.observability.access_log`).
ACCESS_LOGGER = "conch.http.access"
#: How long a stopping server waits for the answers still being written (a stream, say).
STOP_GRACE_SECS = 5.0
_BACKLOG = 2048

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
        self.proxies = TrustedProxies(self.limits.trusted_proxies, self.limits.client_ip_header)
        #: One record per answer on :data:`ACCESS_LOGGER` (off by default: a record per request,
        #: health probes and scrapes included, costs the event loop a formatted line each).
        self.access_log = access_log
        self.clock = Clock()
        self.connections: set[HttpConnection] = set()
        #: Connections refused (or closing) that still read for a moment: they hold no slot.
        self.lingering = 0
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
        """None when ``newcomer`` may be held (another client's slowest request may make room for it,
        :mod:`admission`), else why it is refused."""
        cap = self.limits.max_connections
        if not near_cap(len(self.connections) - self.lingering + 1, cap):
            return None
        now = asyncio.get_running_loop().time()
        others = [holding(each, now) for each in self.connections if not each.refused]
        verdict = admit(newcomer.identity, others, cap)
        if verdict.evict is not None:
            evict(verdict.evict)
        if verdict.admitted:
            return None
        return f"{verdict.reason}: the server holds at most {cap} (--http-max-connections); retry later"

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
