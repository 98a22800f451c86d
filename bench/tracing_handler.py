"""CPU per gRPC ``ModelInfer`` handler call on the ``tiny`` model, in one process: the figure that tells
tracing-off from no hooks at all without the noise of sockets, clients and a shared machine.

Run by ``python -m bench.tracing_overhead --handler`` as a script, with ``PYTHONPATH`` naming the tree
whose ``conch`` it measures; ``--traced URL`` turns tracing on (ratio 1.0) to that OTLP/HTTP endpoint.
Prints one line: the best of 5 rounds of 5,000 calls, in microseconds of CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb


class _Context:
    """What the servicer reads of a gRPC call: its metadata; ``abort`` is an error here."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    async def abort(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"the call failed: {args}")


async def handler_us(repository: Path, traced: str) -> float:
    from conch.frontends.grpc.servicer import InferenceServicer
    from conch.lifecycle.loader import LoadOptions, ModelLoader
    from conch.lifecycle.model_control import ControlMode, ControlSettings, ModelControl
    from conch.models.circuit_breaker import CircuitBreakerSettings
    from conch.models.served_models import ServedModels
    from conch.runtime.server_builders import register_backend_builders
    from conch.server import InferenceServer, ServerOptions

    if traced:
        from conch.observability import tracing

        tracing.start(tracing.TraceSettings(endpoint=traced, sample_ratio=1.0), {})
    models = ServedModels(repository)
    options = LoadOptions(
        default_max_batch_size=4,
        cpu_cores=1,
        breaker_defaults=CircuitBreakerSettings(),
        breakers_on=False,
        fallback_levels=(),
    )
    settings = ControlSettings(mode=ControlMode.NONE, poll_secs=15, startup_models=(), drain_timeout_secs=1)
    control = ModelControl(models, ModelLoader(options), settings)
    server = InferenceServer(models, ServerOptions(), control)
    register_backend_builders(control.loader, server, ())
    control.load_startup()
    server.started = True
    servicer = InferenceServicer(server)
    request = pb.ModelInferRequest(model_name="tiny")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    assert tensor.name == "INPUT0"
    request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
    context = _Context()
    for _ in range(2000):  # warm-up: the instance pool settles on running inline
        await servicer.ModelInfer(request, context)
    rounds = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(5000):
            await servicer.ModelInfer(request, context)
        rounds.append((time.process_time() - started) / 5000 * 1e6)
    return min(rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("repository", type=Path)
    parser.add_argument("--traced", default="", help="an OTLP/HTTP traces URL: trace every call")
    args = parser.parse_args()
    print(f"{asyncio.run(handler_us(args.repository, args.traced)):.1f}")


if __name__ == "__main__":
    main()
