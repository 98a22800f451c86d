"""The model process's side of ``conch serve --proxies N``: start the proxy processes, let
them answer once the models are loaded, and stop them.

The proxies run in sessions of their own: a signal to the server's process group (Ctrl-C) must not
kill them under answers still being written; they stop when this process tells them to, or when its
socket closes. A proxy that dies stops the server with an error, so an orchestrator restarts the
whole of it (as with ``--workers``; both are watched by :class:`conch.runtime.children.Children`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from conch.frontends.grpc.call_admission import stream_admission
from conch.frontends.grpc.grpc_options import GrpcConnectionLimits
from conch.frontends.grpc.grpc_server import served_methods
from conch.frontends.grpc.servicer import InferenceServicer
from conch.frontends.http.limits import HttpLimits
from conch.frontends.tls import TlsSettings
from conch.observability import tracing
from conch.runtime.children import Children
from conch.runtime.hub import ProxyHub
from conch.runtime.proxy import EXIT_CANNOT_LISTEN_GRPC, EXIT_CANNOT_LISTEN_HTTP
from conch.runtime.settings import cannot_listen

if TYPE_CHECKING:
    from conch.gateway.gateway import Gateway
    from conch.observability.gateway_metrics import AnswerCodes
    from conch.observability.inference_log import InferenceLog
    from conch.runtime.settings import ServeSettings
    from conch.server import InferenceServer

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 10.0


class ProxyStartError(Exception):
    """A proxy process did not come up; the message says why (a taken port, usually)."""


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    """What each proxy process is started with (from the serve flags)."""

    host: str
    http_port: int
    grpc_port: int
    #: False when the gateway, inference logs or traces are on: every request is then relayed.
    decode_here: bool
    grpc_acceptors: int
    grpc_max_message_bytes: int
    grpc_connection_limits: GrpcConnectionLimits
    http_limits: HttpLimits
    access_log: bool
    busy_poll_us: int
    tls: TlsSettings


class ProxyProcesses:
    """``count`` proxy processes linked to ``hub``."""

    def __init__(self, hub: ProxyHub, settings: ProxySettings, count: int) -> None:
        self.hub = hub
        self.settings = settings
        self.count = count
        self._folder = tempfile.TemporaryDirectory(prefix="conch-proxies-")
        self._children: Children | None = None

    async def start(self) -> None:
        """Start every proxy and wait until each has bound the ports and connected."""
        path = str(Path(self._folder.name) / "model.sock")
        self.hub.listen(path)
        level = logging.getLogger().getEffectiveLevel()
        fmt = "json" if _json_logging() else "text"
        each = self.settings
        children = self._children = Children("proxy process", self._exited)
        arguments = [
            sys.executable, "-m", "conch.runtime.proxy",
            "--socket", path, "--host", each.host,
            "--http-port", str(each.http_port), "--grpc-port", str(each.grpc_port),
            "--decode-here", str(int(each.decode_here)),
            "--grpc-acceptors", str(each.grpc_acceptors),
            "--grpc-max-message-bytes", str(each.grpc_max_message_bytes),
            "--grpc-connection-limits", json.dumps(dataclasses.asdict(each.grpc_connection_limits)),
            "--http-limits", json.dumps(dataclasses.asdict(each.http_limits)),
            "--access-log", str(int(each.access_log)),
            "--busy-poll-us", str(each.busy_poll_us),
            "--tls", json.dumps(dataclasses.asdict(each.tls)),
            "--log-level", str(level), "--log-format", fmt,
        ]  # fmt: skip
        for _ in range(self.count):
            children.adopt(os.posix_spawn(sys.executable, arguments, os.environ, setsid=True))
        connected = asyncio.ensure_future(self.hub.connected(self.count))
        exited = asyncio.ensure_future(children.exited.wait())
        done, _ = await asyncio.wait(
            {connected, exited}, timeout=_START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        exited.cancel()
        if connected in done:
            return
        connected.cancel()
        codes = list(children.codes.values())
        await self.stop()
        for code, port, what in (
            (EXIT_CANNOT_LISTEN_HTTP, each.http_port, "HTTP"),
            (EXIT_CANNOT_LISTEN_GRPC, each.grpc_port, "gRPC"),
        ):
            if code in codes:
                raise ProxyStartError(cannot_listen(each.host, port, what))
        if not codes:
            raise ProxyStartError(f"the proxy processes did not connect within {_START_TIMEOUT_S:g} s")
        raise ProxyStartError(f"a proxy process did not start (exit status {codes[0]})")

    def open(self) -> None:
        """Let the proxies answer: the models are loaded."""
        self.hub.open()

    async def stop(self) -> None:
        """Tell the proxies to stop, wait for them, and remove what they left in shared memory."""
        self.hub.close()
        if self._children is not None:
            await self._children.stop(None, _STOP_TIMEOUT_S)
        self.hub.forget()
        self._folder.cleanup()

    def _exited(self, pid: int, code: int) -> None:
        """Report a proxy's exit while the server is not stopping."""
        if self.hub.opened and not self.hub.stopping:
            log.error("proxy process %d exited (status %d)", pid, code)
            self.hub.lost.set()


def _json_logging() -> bool:
    from conch.observability.log_format import JsonFormatter

    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def proxies_for(
    settings: ServeSettings,
    count: int,
    server: InferenceServer,
    codes: AnswerCodes,
    gateway: Gateway | None,
    journal: InferenceLog | None,
) -> ProxyProcesses:
    """``count`` proxy processes for ``server``, their relayed gRPC calls answered by
    the same handlers (gateway, counters, inference log) as the in-process gRPC server's. The hub's
    HTTP app is set once the server has built it."""
    servicer = InferenceServicer(server, stream_admission(gateway) if gateway is not None else None)
    servicer.inference_log = journal
    hub = ProxyHub(server, None, served_methods(servicer, codes.grpc, gateway), codes)
    decode_here = gateway is None and journal is None and tracing.tracer is None
    proxy = ProxySettings(
        host=settings.host,
        http_port=settings.http_port,
        grpc_port=settings.grpc_port,
        decode_here=decode_here,
        grpc_acceptors=settings.grpc_acceptors,
        grpc_max_message_bytes=settings.grpc_max_message_bytes,
        grpc_connection_limits=settings.grpc_connection_limits,
        # Each proxy holds its share of the connection cap: the kernel spreads connections
        # evenly, not exactly, so the cap holds to within one share.
        http_limits=dataclasses.replace(
            settings.http_limits,
            max_connections=-(-settings.http_limits.max_connections // count),
        ),
        access_log=settings.request_log.access_log,
        busy_poll_us=settings.busy_poll_us,
        tls=settings.tls,
    )
    return ProxyProcesses(hub, proxy, count)
