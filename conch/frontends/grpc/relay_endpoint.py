"""The model process's end of the gRPC relay (``conch serve --grpc-relay``, see ``relay.py``).

It starts the relay process, answers its frames with conch's own :class:`InferenceServicer` (so a
relayed call behaves exactly as an in-process one: same validation, errors and statistics), and stops
it. A relay that cannot bind the gRPC port is reported as a :class:`ServeError`-worthy message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from conch.frontends.grpc.grpc_options import GrpcConnectionLimits
from conch.frontends.grpc.relay import EXIT_CANNOT_LISTEN, GO, HEADER, UNARY_METHODS
from conch.frontends.grpc.relayed_call import Aborted, RelayedContext
from conch.frontends.grpc.servicer import InferenceServicer
from conch.frontends.tls import TlsFiles
from conch.server import InferenceServer

log = logging.getLogger(__name__)

_REQUEST_TYPES = [message_factory.GetMessageClass(m.input_type) for m in UNARY_METHODS]
_CONNECT_TIMEOUT_S = 60.0


class RelayStartError(Exception):
    """The relay process did not come up; the message says why (a taken port, usually)."""


class RelayEndpoint:
    """Starts the relay for ``address`` and answers its calls with ``server``."""

    def __init__(
        self,
        server: InferenceServer,
        address: str,
        busy_poll_us: int = 0,
        acceptors: int = 0,
        tls: TlsFiles | None = None,
        connection_limits: GrpcConnectionLimits | None = None,
    ) -> None:
        servicer = InferenceServicer(server)
        # None: a method InferenceServicer leaves to the generated base class, which answers UNIMPLEMENTED.
        self._handlers: list[Any] = [
            getattr(servicer, m.name) if m.name in vars(InferenceServicer) else None for m in UNARY_METHODS
        ]
        self._address = address
        self._busy_poll_us = busy_poll_us
        self._acceptors = acceptors
        self._tls = tls or TlsFiles()
        self._connection_limits = connection_limits or GrpcConnectionLimits()
        self._folder = tempfile.TemporaryDirectory(prefix="conch-relay-")
        self._connected: asyncio.Future[asyncio.StreamWriter] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._unix_server: asyncio.AbstractServer | None = None
        self._calls: set[asyncio.Task[None]] = set()
        self._stopping = False
        #: Set when the relay went away while the server was not stopping: gRPC is down.
        self.lost = asyncio.Event()

    async def start(self) -> None:
        """Start the relay and wait until it has bound the gRPC port and connected."""
        socket_path = str(Path(self._folder.name) / "relay.sock")
        self._connected = asyncio.get_running_loop().create_future()
        self._unix_server = await asyncio.start_unix_server(self._serve_relay, socket_path)
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "conch.frontends.grpc.relay",
            "--address",
            self._address,
            "--socket",
            socket_path,
            "--busy-poll-us",
            str(self._busy_poll_us),
            "--grpc-acceptors",
            str(self._acceptors),
            "--tls",
            json.dumps(dataclasses.asdict(self._tls)),
            "--connection-limits",
            json.dumps(dataclasses.asdict(self._connection_limits)),
            # Its own session: a signal to the server's process group (Ctrl-C, systemd's stop) must not
            # kill the relay under calls still in flight; it exits when the server closes its socket.
            start_new_session=True,
        )
        connected = asyncio.ensure_future(asyncio.shield(self._connected))
        exited = asyncio.ensure_future(self._process.wait())
        waiting: set[asyncio.Future[Any]] = {connected, exited}
        await asyncio.wait(waiting, timeout=_CONNECT_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        for each in waiting:
            each.cancel()
        if self._connected.done():
            return
        code = self._process.returncode
        await self.stop()
        if code == EXIT_CANNOT_LISTEN:
            raise RelayStartError(f"cannot listen on {self._address} (gRPC)")
        if code is None:
            raise RelayStartError(f"the gRPC relay did not connect within {_CONNECT_TIMEOUT_S:g} s")
        raise RelayStartError(f"the gRPC relay did not start (exit status {code})")

    def open(self) -> None:
        """Let the relay answer calls: the models are loaded."""
        assert self._connected is not None and self._connected.done()
        self._connected.result().write(GO)

    async def stop(self) -> None:
        """Let calls in flight finish (5 s at most, as the in-process server's grace), then close the
        connection (the relay then exits) and wait for the process."""
        self._stopping = True
        if self._calls:
            await asyncio.wait(set(self._calls), timeout=5)
        if self._connected is not None and self._connected.done():
            self._connected.result().close()
        if self._unix_server is not None:
            self._unix_server.close()
        if self._process is not None and self._process.returncode is None:
            try:
                await asyncio.wait_for(self._process.wait(), timeout=5)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        self._folder.cleanup()

    async def _serve_relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._connected is not None
        if self._connected.done():
            writer.close()  # one relay only
            return
        self._connected.set_result(writer)
        try:
            while True:
                length, call_id, method = HEADER.unpack(await reader.readexactly(HEADER.size))
                payload = await reader.readexactly(length)
                task = asyncio.create_task(self._answer(writer, call_id, method, payload))
                self._calls.add(task)
                task.add_done_callback(self._calls.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            if not self._stopping:
                log.error("the gRPC relay process went away; stopping the server so it can be restarted")
                self.lost.set()

    async def _answer(self, writer: asyncio.StreamWriter, call_id: int, method: int, payload: bytes) -> None:
        status, reply = await self._call(method, payload)
        if not writer.is_closing():
            writer.writelines((HEADER.pack(len(reply), call_id, status), reply))

    async def _call(self, method: int, payload: bytes) -> tuple[int, bytes]:
        try:
            request = _REQUEST_TYPES[method].FromString(payload)
        except (IndexError, DecodeError):
            return grpc.StatusCode.INVALID_ARGUMENT.value[0], b"the request is not a valid protobuf message"
        handler = self._handlers[method]
        if handler is None:
            return grpc.StatusCode.UNIMPLEMENTED.value[0], b"Method not implemented!"
        context = RelayedContext()
        try:
            response = await handler(request, context)
        except Aborted:
            outcome = context.outcome()
            return outcome["status"], outcome["details"].encode()
        except Exception:
            log.exception("relayed gRPC call %s failed", UNARY_METHODS[method].name)
            return grpc.StatusCode.INTERNAL.value[0], b"internal server error"
        return 0, response.SerializeToString()
