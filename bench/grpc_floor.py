"""``python -m bench.grpc_floor``: how many calls/s Python's gRPC server answers with no work at all.

Why: the figures bound what any Python gRPC frontend can do on this machine, conch included. A
``grpc.aio`` servicer answers the ``tiny`` model's ModelInfer with a fixed response (no model, no
validation), and perf_analyzer drives it at concurrency 1 (the latency floor) and 32 (the throughput
ceiling of one event loop), as ``bench.run`` drives the servers: with gRPC's default EventEngine
listener and with the iomgr listener ``conch serve`` chooses (see ``prefer_iomgr_listener``), and
with ModelInfer calls accepted one at a time (as ``grpc.aio`` does) or several at once (as conch
does, ``conch.frontends.grpc.acceptors``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import uvloop
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from bench.loadgen import LoadResult, run_perf_analyzer
from bench.models import MODELS, model_config
from bench.servers import Ports
from conch.frontends.grpc.grpc_options import DEFAULT_ACCEPTORS, LISTENER_EXPERIMENT
from conch.frontends.grpc.grpc_server import register_servicer


class EmptyServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Just enough of the service for perf_analyzer; ModelInfer returns zeros without computing."""

    def __init__(self) -> None:
        widths = MODELS["tiny"]
        self._config = text_format.Parse(model_config("tiny", widths), mc.ModelConfig())
        self._metadata = pb.ModelMetadataResponse(
            name="tiny",
            versions=["1"],
            platform="onnxruntime_onnx",
            inputs=[
                pb.ModelMetadataResponse.TensorMetadata(name="INPUT0", datatype="FP32", shape=[-1, widths[0]])
            ],
            outputs=[
                pb.ModelMetadataResponse.TensorMetadata(
                    name="OUTPUT0", datatype="FP32", shape=[-1, widths[-1]]
                )
            ],
        )
        self._output = np.zeros((1, widths[-1]), dtype=np.float32).tobytes()

    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: Any) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=True)

    async def ServerMetadata(self, request: Any, context: Any) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="empty", version="0")

    async def ModelMetadata(self, request: Any, context: Any) -> pb.ModelMetadataResponse:
        return self._metadata

    async def ModelConfig(self, request: Any, context: Any) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self._config)

    async def ModelInfer(self, request: Any, context: Any) -> pb.ModelInferResponse:
        response = pb.ModelInferResponse(model_name=request.model_name, model_version="1", id=request.id)
        response.outputs.add(name="OUTPUT0", datatype="FP32", shape=[1, MODELS["tiny"][-1]])
        response.raw_output_contents.append(self._output)
        return response


def _serve(address: str, acceptors: int) -> None:
    async def serve() -> None:
        server = grpc.aio.server()
        servicer = EmptyServicer()
        model_infer = register_servicer(server, servicer, acceptors)  # as conch registers it
        server.add_insecure_port(address)
        await server.start()
        model_infer.start()
        await server.wait_for_termination()

    uvloop.run(serve())


def _wait_listening(address: str, timeout_s: float = 30.0) -> None:
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
            return
        time.sleep(0.1)
    raise SystemExit(f"grpc_floor: nothing listens on {address}")


#: The set-ups compared, as (``GRPC_EXPERIMENTS``, acceptors): gRPC's default listener (EventEngine)
#: and the iomgr one ``conch serve`` chooses; ModelInfer calls accepted one at a time, as ``grpc.aio``
#: does, and several at once, as conch does (``conch.frontends.grpc.acceptors``).
SETUPS = {
    "EventEngine listener, calls accepted one at a time": (LISTENER_EXPERIMENT, 0),
    "iomgr listener, calls accepted one at a time": (f"-{LISTENER_EXPERIMENT}", 0),
    f"iomgr listener, {DEFAULT_ACCEPTORS} acceptors (conch)": (f"-{LISTENER_EXPERIMENT}", DEFAULT_ACCEPTORS),
}


def _measure(experiments: str, acceptors: int, seconds: float) -> dict[int, LoadResult]:
    """The empty servicer in a fresh process started with ``GRPC_EXPERIMENTS=experiments`` (gRPC's core
    reads it once, at import), at concurrency 1 and 32."""
    address = Ports().grpc_address
    environ = os.environ.copy()
    os.environ["GRPC_EXPERIMENTS"] = experiments
    try:
        server = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(address, acceptors), daemon=True
        )
        server.start()
    finally:
        os.environ.clear()
        os.environ.update(environ)
    try:
        _wait_listening(address)
        with tempfile.TemporaryDirectory() as workdir:
            return {c: run_perf_analyzer("tiny", address, c, seconds, Path(workdir)) for c in (1, 32)}
    finally:
        server.terminate()
        server.join()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_floor", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    for setup, (experiments, acceptors) in SETUPS.items():
        for concurrency, result in _measure(experiments, acceptors, args.seconds).items():
            if not result.ok:
                raise SystemExit(f"grpc_floor: {result.failure}")
            print(
                f"empty grpc.aio servicer, {setup}, perf_analyzer c={concurrency}: "
                f"{result.throughput:,.0f} calls/s, p50 {result.p50_ms:.3f} ms, p99 {result.p99_ms:.3f} ms"
            )


if __name__ == "__main__":
    main()
