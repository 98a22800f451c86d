"""How conch sets up gRPC's core, in one place for the in-process server and the proxy processes.

Nothing here imports ``grpc``: :func:`prefer_iomgr_listener` must run before gRPC's core reads its
configuration, which happens when ``grpc`` is first imported.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

#: Triton accepts large tensors; gRPC's default 4 MiB limit would refuse a single 1024x1024 FP32 input.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024

#: gRPC core's switch between its EventEngine listener (the default since grpcio 1.6x) and the older
#: iomgr TCP server.
LISTENER_EXPERIMENT = "event_engine_listener"

#: The one method whose calls are accepted several at once (:mod:`conch.frontends.grpc.acceptors`):
#: the others are rare next to inference.
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"

#: How many of its calls the server stands ready to accept at once. Measured on 2 cores at 32 clients:
#: 8 and 32 gave the same calls/s (the empty servicer); each costs one task.
DEFAULT_ACCEPTORS = 8


@dataclass(frozen=True)
class GrpcConnectionLimits:
    """What one gRPC connection may hold of the server, and how long a silent peer keeps it.

    Streams: tritonclient's Python client sends all of a client object's calls over one connection,
    so the cap sits far above the calls one client sends at once (perf_analyzer: about 6 a connection
    at 256 clients). A gRPC client queues calls over it once the connection's SETTINGS arrived; one
    sent before is refused (``UNAVAILABLE``).

    Keepalive: the server pings every connection, with calls or without, every
    ``keepalive_time_secs``; one whose peer does not answer within ``keepalive_timeout_secs`` is
    closed, so a peer that vanished without a FIN (a lost node, a cut NAT entry) holds it about 80 s,
    not gRPC's default two hours. A client may ping every ``min_ping_interval_secs``; one that pings
    more often is sent GOAWAY (``too_many_pings``) on its third offence, as gRPC does.

    Age: off by default. Where set (to spread clients over new replicas), a connection past
    ``max_connection_age_secs`` gets GOAWAY: new calls go to a new connection, the calls open on it
    finish within ``max_connection_age_grace_secs``, and with no grace (0, the default) however long
    they take, so a ``ModelStreamInfer`` sequence is never cut.
    """

    #: Calls open at once on one connection (HTTP/2 ``SETTINGS_MAX_CONCURRENT_STREAMS``); 0: no limit.
    max_concurrent_streams: int = 1024
    keepalive_time_secs: int = 60
    keepalive_timeout_secs: int = 20
    min_ping_interval_secs: int = 10
    #: 0: connections have no maximum age.
    max_connection_age_secs: int = 0
    #: 0: the calls open when a connection reaches its age finish however long they take.
    max_connection_age_grace_secs: int = 0

    def options(self) -> list[tuple[str, int]]:
        """These limits as gRPC core's channel arguments."""
        options = [
            ("grpc.keepalive_time_ms", self.keepalive_time_secs * 1000),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_secs * 1000),
            # gRPC core closes a connection over an unanswered ping only after this one (a minute).
            ("grpc.http2.ping_timeout_ms", self.keepalive_timeout_secs * 1000),
            # Ping idle connections too (dead peers are found where no call would find them), and
            # accept a client's keepalive on an idle channel.
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", self.min_ping_interval_secs * 1000),
            ("grpc.http2.max_ping_strikes", 2),
        ]
        if self.max_concurrent_streams > 0:
            options.append(("grpc.max_concurrent_streams", self.max_concurrent_streams))
        if self.max_connection_age_secs > 0:
            options.append(("grpc.max_connection_age_ms", self.max_connection_age_secs * 1000))
            if self.max_connection_age_grace_secs > 0:
                grace_ms = self.max_connection_age_grace_secs * 1000
                options.append(("grpc.max_connection_age_grace_ms", grace_ms))
        return options


def grpc_server_options(
    reuse_port: bool,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    connection: GrpcConnectionLimits | None = None,
) -> list[tuple[str, int]]:
    """``reuse_port`` lets several worker processes listen on the same port; otherwise a port already
    taken is an error rather than silently shared. A call whose request is over ``max_message_bytes``
    (``--grpc-max-message-bytes``) ends with RESOURCE_EXHAUSTED before the servicer sees it.
    ``connection``: the streams, keepalive and age of each connection (the defaults when None)."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", int(reuse_port)),
        *(connection or GrpcConnectionLimits()).options(),
    ]


def prefer_iomgr_listener(environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn off gRPC's EventEngine listener unless ``GRPC_EXPERIMENTS`` already decides about it.

    Why: with the EventEngine listener, each call's bytes are read on EventEngine threads and handed
    to the ``grpc.aio`` poller, one more thread hop per call. With the iomgr listener the poller reads
    them itself. On this project's 2-core machine an empty ``grpc.aio`` servicer went from 0.42 to
    0.34 ms p50 at concurrency 1 and from 4,870 to 5,540 calls/s at concurrency 32
    (``python -m bench.grpc_floor``). Child processes (workers, frontends) inherit the setting.
    """
    names = [name.strip() for name in environ.get("GRPC_EXPERIMENTS", "").split(",") if name.strip()]
    if any(name.lstrip("-") == LISTENER_EXPERIMENT for name in names):
        return
    environ["GRPC_EXPERIMENTS"] = ",".join([*names, f"-{LISTENER_EXPERIMENT}"])
