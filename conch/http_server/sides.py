"""What each part of conch's HTTP server asks of the part that holds it, as Protocols.

The server holds connections, and a connection holds exchanges (one request and its answer); each
calls back up (a connection reports to its server, an exchange writes through its connection). The
callers see the holder only through these Protocols, so the modules import downward only: the server
imports the connection, the connection imports the exchange, and neither imports back. Connections
and exchanges pass through these calls as ``Any``: the holder knows their real type.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from conch.frontends.http.limits import HttpLimits
from conch.http_server.heads import Clock
from conch.http_server.outbox import Outbox
from conch.http_server.peers import TrustedProxies


class ServerSide(Protocol):
    """What a connection asks of its server (:class:`conch.http_server.server.HttpServer`)."""

    app: Any
    limits: HttpLimits
    outbox: Outbox
    trusted_proxies: TrustedProxies
    clock: Clock
    stopping: bool
    #: Exchanges running the app now.
    running: int

    def admit(self, newcomer: Any) -> str | None: ...

    def release(self, connection: Any) -> None: ...

    def forget(self, connection: Any) -> None: ...

    def rename(self, connection: Any, identity: str) -> None: ...

    def answered(self, connection: Any, exchange: Any) -> None: ...

    def refused(self, connection: Any, status: int) -> None: ...


class ConnectionSide(Protocol):
    """What an exchange asks of its connection (:class:`conch.http_server.connection.HttpConnection`)."""

    loop: asyncio.AbstractEventLoop
    write_paused: bool

    @property
    def server(self) -> ServerSide: ...

    def write(self, data: bytes) -> None: ...

    def write_last(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def body_read(self) -> None: ...

    def answered(self, exchange: Any) -> None: ...

    async def drained(self) -> None: ...
