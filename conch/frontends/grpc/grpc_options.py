"""How conch sets up gRPC's core, in one place for the in-process server and the relay.

Nothing here imports ``grpc``: :func:`prefer_iomgr_listener` must run before gRPC's core reads its
configuration, which happens when ``grpc`` is first imported.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: Triton accepts large tensors; gRPC's default 4 MiB limit would refuse a single 1024x1024 FP32 input.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024

#: gRPC core's switch between its EventEngine listener (the default since grpcio 1.6x) and the older
#: iomgr TCP server.
LISTENER_EXPERIMENT = "event_engine_listener"

#: The one method whose calls are accepted several at once (:mod:`conch.frontends.grpc.acceptors`):
#: the others are rare next to inference.
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"

#: How many of its calls the server stands ready to accept at once. Measured on 2 cores at 32 clients:
#: 8 and 32 gave the same calls/s (the empty servicer, ``docs/tuning.md``); each costs one task.
DEFAULT_ACCEPTORS = 8


def grpc_server_options(
    reuse_port: bool, max_message_bytes: int = MAX_MESSAGE_BYTES
) -> list[tuple[str, int]]:
    """``reuse_port`` lets several worker processes listen on the same port; otherwise a port already
    taken is an error rather than silently shared. A call whose request is over ``max_message_bytes``
    (``--grpc-max-message-bytes``) ends with RESOURCE_EXHAUSTED before the servicer sees it."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", int(reuse_port)),
    ]


def prefer_iomgr_listener(environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn off gRPC's EventEngine listener unless ``GRPC_EXPERIMENTS`` already decides about it.

    Why: with the EventEngine listener, each call's bytes are read on EventEngine threads and handed
    to the ``grpc.aio`` poller, one more thread hop per call. With the iomgr listener the poller reads
    them itself. On this project's 2-core machine an empty ``grpc.aio`` servicer went from 0.42 to
    0.34 ms p50 at concurrency 1 and from 4,870 to 5,540 calls/s at concurrency 32
    (``python -m bench.grpc_floor``). Child processes (the relay, workers) inherit the setting.
    """
    names = [name.strip() for name in environ.get("GRPC_EXPERIMENTS", "").split(",") if name.strip()]
    if any(name.lstrip("-") == LISTENER_EXPERIMENT for name in names):
        return
    environ["GRPC_EXPERIMENTS"] = ",".join([*names, f"-{LISTENER_EXPERIMENT}"])
