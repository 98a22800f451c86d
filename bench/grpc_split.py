"""``python -m bench.grpc_split [MODEL ...]``: a design candidate for gRPC, measured, not yet in conch.

Why: with one process, conch's event loop thread does all of Python's gRPC work (about 0.2 ms of a
core per call, see ``bench.grpc_floor``) plus decoding, batching and encoding, and it is the
bottleneck at 32 gRPC clients. Here a separate frontend process owns the gRPC port and only moves
bytes: a generic handler takes each unary call's raw request, writes it to the model process over a
Unix socket (length, call id, method), and returns the raw reply. The model process parses the
protobuf and runs conch's own servicer (``InferenceServicer``) on the benchmark repository, so the
work done per call is conch's; only where it runs changes.

Prints perf_analyzer's throughput and p50 at concurrency 1 and 32 for each model (default: tiny mlp).
Streaming calls are not forwarded; this is a measurement, not a server.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
import uvloop
from google.protobuf import message_factory
from tritonclient.grpc import service_pb2 as pb

from bench.grpc_floor import _wait_listening
from bench.loadgen import run_perf_analyzer
from bench.models import write_conch_repository
from bench.servers import Ports

HEADER = struct.Struct("<IIB")  # payload length, call id, method index (request) or status (reply)
SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
UNARY = [m for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """What the servicer's methods use of a gRPC context: ``abort``."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


def model_process(repository: Path, socket_path: str) -> None:
    from conch.frontends.grpc.servicer import InferenceServicer
    from conch.repository.model_repository import ModelRepository
    from conch.server import InferenceServer

    sys.setswitchinterval(0.0005)
    models = ModelRepository(repository)
    models.load_all()
    servicer = InferenceServicer(InferenceServer(models))
    requests = [message_factory.GetMessageClass(m.input_type) for m in UNARY]

    async def answer(writer: asyncio.StreamWriter, call: int, method: int, payload: bytes) -> None:
        try:
            handler = getattr(servicer, UNARY[method].name)
            reply, status = (
                (await handler(requests[method].FromString(payload), _Context())).SerializeToString(),
                0,
            )
        except _Aborted as exc:
            reply, status = exc.details.encode(), exc.code.value[0]
        writer.write(HEADER.pack(len(reply), call, status) + reply)

    async def serve_frontend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            length, call, method = HEADER.unpack(await reader.readexactly(HEADER.size))
            payload = await reader.readexactly(length)
            asyncio.get_running_loop().create_task(answer(writer, call, method, payload))

    async def main() -> None:
        server = await asyncio.start_unix_server(serve_frontend, socket_path)
        await server.serve_forever()

    uvloop.run(main())


def frontend_process(address: str, socket_path: str) -> None:
    codes = {code.value[0]: code for code in grpc.StatusCode}

    async def main() -> None:
        while not os.path.exists(socket_path):
            await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_unix_connection(socket_path)
        waiting: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        calls = iter(range(1, 2**32))

        async def read_replies() -> None:
            while True:
                length, call, status = HEADER.unpack(await reader.readexactly(HEADER.size))
                waiting.pop(call).set_result((status, await reader.readexactly(length)))

        def forward(method: int) -> grpc.RpcMethodHandler:
            async def handler(request: bytes, context: Any) -> bytes:
                call = next(calls)
                waiting[call] = asyncio.get_running_loop().create_future()
                writer.write(HEADER.pack(len(request), call, method) + request)
                status, reply = await waiting[call]
                if status:
                    await context.abort(codes[status], reply.decode())
                return reply

            return grpc.unary_unary_rpc_method_handler(handler)

        reading = asyncio.get_running_loop().create_task(read_replies())
        handlers = {m.name: forward(i) for i, m in enumerate(UNARY)}
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()
        reading.cancel()

    uvloop.run(main())


def main() -> None:
    models = sys.argv[1:] or ["tiny", "mlp"]
    address = Ports().grpc_address
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        socket_path = str(Path(folder) / "model.sock")
        repository = write_conch_repository(Path(folder) / "models")
        processes = [
            spawn.Process(target=model_process, args=(repository, socket_path), daemon=True),
            spawn.Process(target=frontend_process, args=(address, socket_path), daemon=True),
        ]
        for process in processes:
            process.start()
        try:
            _wait_listening(address)
            for model in models:
                for concurrency in (1, 32):
                    result = run_perf_analyzer(model, address, concurrency, 4, Path(folder))
                    print(
                        f"split frontend, {model} c={concurrency}: {result.throughput:,.0f}/s, "
                        f"p50 {result.p50_ms:.3f} ms {result.failure or ''}",
                        flush=True,
                    )
        finally:
            for process in processes:
                process.terminate()
                process.join()


if __name__ == "__main__":
    main()
