"""``conch serve --grpc-relay``: a separate process owns the gRPC port and relays raw calls.

Why: Python's gRPC server spends 0.1 to 0.2 ms of a core per call, all on the event loop thread of
the process that owns the connection (``python -m bench.grpc_floor``). With the relay, that work runs
in this process while the model process decodes, batches, computes and encodes. Before conch
accepted several calls at once (``conch.frontends.grpc.acceptors``), that made the compute-bound
model faster at 32 gRPC clients on two cores (2,682 against 2,446 mlp calls/s,
``bench/results/2026-11-30-181803.md``). Since then the one process is as fast or faster (3,041
against 2,776/s, ``-192558.md``), and a lone call pays the relay's extra hop (0.53 against 0.38 ms
p50 on the tiny model), so the relay stays opt-in, for machines where measurements favour it.

The relay never parses a unary call: each request's bytes go to the model process over a Unix socket
as one frame (length, call id, method index), and the reply frame carries the response bytes, or a
gRPC status code and message. ``ModelStreamInfer`` is relayed as one ``ModelInfer`` per message.

Start-up: the relay binds the gRPC port, connects to the model process's socket, and starts answering
only when the model process sends :data:`GO` (its models are loaded). It exits when that connection
closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import struct
import sys
from collections.abc import AsyncIterator
from itertools import count
from typing import Any

import grpc
import uvloop
from tritonclient.grpc import service_pb2 as pb

from conch.busy_poll import poll_when_idle
from conch.frontends.grpc.acceptors import CallAcceptors
from conch.frontends.grpc.grpc_options import MODEL_INFER_METHOD, GrpcConnectionLimits, grpc_server_options
from conch.frontends.grpc.infer_codec import stream_error
from conch.frontends.grpc.status import STATUS_BY_NUMBER
from conch.frontends.grpc.streaming import answer_concurrently, one_reply
from conch.frontends.tls import TlsFiles, bind_grpc
from conch.scheduling.scheduler import RequestsInFlight

log = logging.getLogger(__name__)

#: Frame header: payload length, call id, and the method index (request) or gRPC status (reply).
HEADER = struct.Struct("<IIB")
SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
UNARY_METHODS = [m for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]
MODEL_INFER = [m.name for m in UNARY_METHODS].index("ModelInfer")
GO = b"G"
#: Exit status when the gRPC port cannot be bound (the model process reports it).
EXIT_CANNOT_LISTEN = 3

_STREAM_RESPONSE_FIELD = b"\x12"  # ModelStreamInferResponse.infer_response: field 2, length-delimited


class Relay:
    """The calls in flight to the model process, by call id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._waiting: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._ids = count(1)
        #: Calls waiting for their reply (what ``conch.busy_poll`` watches in this process).
        self.in_flight = RequestsInFlight()

    async def call(self, method: int, request: bytes) -> tuple[int, bytes]:
        """Send one call; returns (0, response bytes) or (gRPC status code, message)."""
        call_id = next(self._ids) & 0xFFFFFFFF
        reply = self._waiting[call_id] = asyncio.get_running_loop().create_future()
        self._writer.writelines((HEADER.pack(len(request), call_id, method), request))
        self.in_flight.enter()
        try:
            return await reply
        finally:
            self.in_flight.leave()

    async def read_replies(self) -> None:
        """Resolve each waiting call as its reply arrives; returns when the model process goes away."""
        try:
            while True:
                length, call_id, status = HEADER.unpack(await self._reader.readexactly(HEADER.size))
                payload = await self._reader.readexactly(length)
                waiting = self._waiting.pop(call_id, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result((status, payload))
        except (asyncio.IncompleteReadError, ConnectionError):
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_result((grpc.StatusCode.UNAVAILABLE.value[0], b"the server is stopping"))

    def unary_handler(self, method: int) -> grpc.RpcMethodHandler:
        async def relay(request: bytes, context: Any) -> bytes:
            status, payload = await self.call(method, request)
            if status:
                await context.abort(STATUS_BY_NUMBER[status], payload.decode())
            return payload

        return grpc.unary_unary_rpc_method_handler(relay)

    def stream_handler(self) -> grpc.RpcMethodHandler:
        async def answer(request: bytes) -> bytes:
            status, payload = await self.call(MODEL_INFER, request)
            if status:
                request_id = pb.ModelInferRequest.FromString(request).id
                return bytes(stream_error(request_id, payload.decode()).SerializeToString())
            return _STREAM_RESPONSE_FIELD + _varint(len(payload)) + payload

        async def relay(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
            async for reply in answer_concurrently(requests, one_reply(answer)):
                yield reply

        return grpc.stream_stream_rpc_method_handler(relay)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


async def run_relay(
    address: str,
    socket_path: str,
    busy_poll_us: int = 0,
    acceptors: int = 0,
    tls: TlsFiles | None = None,
    connection_limits: GrpcConnectionLimits | None = None,
) -> int:
    server = grpc.aio.server(options=grpc_server_options(False, connection=connection_limits))
    try:
        bind_grpc(server, address, tls or TlsFiles())
    except RuntimeError:
        return EXIT_CANNOT_LISTEN  # the model process reports it
    reader, writer = await asyncio.open_unix_connection(socket_path)
    relay = Relay(reader, writer)
    if busy_poll_us > 0:
        poll_when_idle(asyncio.get_running_loop(), relay.in_flight, busy_poll_us / 1e6)
    handlers = {m.name: relay.unary_handler(i) for i, m in enumerate(UNARY_METHODS)}
    handlers["ModelStreamInfer"] = relay.stream_handler()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
    model_infer = CallAcceptors(server, MODEL_INFER_METHOD, handlers["ModelInfer"], acceptors)
    if await reader.readexactly(len(GO)) != GO:
        return 1
    await server.start()
    model_infer.start()
    await relay.read_replies()  # until the model process closes the connection
    await server.stop(grace=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conch.frontends.grpc.relay", description=__doc__)
    parser.add_argument("--address", required=True, help="host:port to serve gRPC on")
    parser.add_argument("--socket", required=True, help="the model process's Unix socket")
    parser.add_argument("--busy-poll-us", type=int, default=0, help="as conch serve's (conch.busy_poll)")
    parser.add_argument("--grpc-acceptors", type=int, default=0, help="as conch serve's (acceptors module)")
    parser.add_argument("--tls", default="{}", help="the gRPC port's TlsFiles as JSON (conch.frontends.tls)")
    parser.add_argument("--connection-limits", default="{}", help="GrpcConnectionLimits as JSON")
    args = parser.parse_args(argv)
    tls = TlsFiles(**json.loads(args.tls))
    limits = GrpcConnectionLimits(**json.loads(args.connection_limits))
    try:
        return uvloop.run(
            run_relay(args.address, args.socket, args.busy_poll_us, args.grpc_acceptors, tls, limits)
        )
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
