"""``conch serve``'s server-side limits: what one request and one client may hold of the server.

Each has a default that serves every example and benchmark in this repository (see docs/security.md
for what each one stops). Nothing imported here may import gRPC or tritonclient
(tests/unit/cli/test_serve_arguments_import.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from conch.cli.arguments import at_least
from conch.cli.serve_flags import FlagGroup, setting
from conch.core.tensor_limits import TensorLimits
from conch.frontends.grpc.grpc_options import MAX_MESSAGE_BYTES, GrpcConnectionLimits
from conch.frontends.http.limits import HttpLimits, parse_networks

_HTTP = HttpLimits()
_TENSORS = TensorLimits()

#: (flag, smallest value, default, meaning); each flag's ``dest`` is the field it sets.
HTTP_LIMIT_FLAGS: list[tuple[str, int, int | float, str]] = [
    (
        "--http-max-body-bytes",
        1,
        _HTTP.max_body_bytes,
        "a request body, after inflating gzip or deflate; more: 413, before a byte of it is read when its "
        "length is declared",
    ),
    (
        "--http-max-header-bytes",
        1024,
        _HTTP.max_header_bytes,
        "a request's line and headers together; more: 431",
    ),
    ("--http-max-headers", 1, _HTTP.max_headers, "headers in one request; more: 431"),
    (
        "--http-max-connections",
        1,
        _HTTP.max_connections,
        "HTTP connections open at once; one more is answered 503 and closed",
    ),
    (
        "--http-idle-timeout-secs",
        1,
        _HTTP.idle_timeout_secs,
        "seconds an idle keep-alive connection stays open (keep it above a load balancer's idle timeout)",
    ),
    (
        "--http-slow-client-timeout-secs",
        1,
        _HTTP.slow_client_timeout_secs,
        "seconds a request's line and headers may take to arrive, and the most between two pieces of its "
        "body; a slower client gets 408 and is cut off",
    ),
    (
        "--http-max-json-depth",
        2,
        _HTTP.max_json_depth,
        "how deep a JSON body may nest objects and lists (an infer request's tensor data aside); more: 400",
    ),
    (
        "--http-request-timeout-secs",
        1,
        _HTTP.request_timeout_secs,
        "seconds a whole request (line, headers and body) may take to arrive; a slower one gets 408",
    ),
    (
        "--http-min-body-rate",
        1,
        _HTTP.min_body_rate,
        "bytes a second a request body must average once it has been arriving for "
        "--http-slow-client-timeout-secs; a slower one gets 408",
    ),
    (
        "--http-write-timeout-secs",
        1,
        _HTTP.write_timeout_secs,
        "seconds a client may leave its answers unread (no byte taken) before it is cut off",
    ),
]


def limit_flags(serve: FlagGroup) -> None:
    """The limits' flags (see conch docs security)."""
    for flag, minimum, default, meaning in HTTP_LIMIT_FLAGS:
        setting(serve, flag, at_least(minimum), str(int(default)), meaning)
    setting(
        serve,
        "--http-trusted-proxies",
        proxy_list,
        ",".join(_HTTP.trusted_proxies),
        "comma-separated addresses or networks of proxies (an ingress, KServe's 127.0.0.1 sidecar) whose "
        "--http-client-ip-header names the client, for its share of the connections and its rate limit",
    )
    setting(
        serve,
        "--http-client-ip-header",
        str,
        _HTTP.client_ip_header,
        "the header a trusted proxy names the client in (its rightmost address not a trusted proxy)",
    )
    setting(
        serve,
        "--max-input-elements",
        at_least(1),
        str(_TENSORS.max_input_elements),
        "tensor elements one input of an inference request may have; more: 400",
    )
    setting(
        serve,
        "--max-request-elements",
        at_least(1),
        str(_TENSORS.max_request_elements),
        "tensor elements all the inputs of one inference request may have together; more: 400",
    )
    setting(
        serve,
        "--grpc-max-message-bytes",
        at_least(1024),
        str(MAX_MESSAGE_BYTES),
        "the largest gRPC request message; more: RESOURCE_EXHAUSTED",
    )
    grpc_connection_flags(serve)


def proxy_list(text: str) -> tuple[str, ...]:
    """``10.0.0.0/8,127.0.0.1``: the trusted proxies, each checked to be an address or a network."""
    entries = tuple(part.strip() for part in text.split(",") if part.strip())
    try:
        parse_networks(entries)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return entries


def limit_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The limits as :class:`~conch.runtime.settings.ServeSettings` keyword arguments."""
    http = {}
    for flag, *_ in HTTP_LIMIT_FLAGS:
        http[flag.removeprefix("--http-").replace("-", "_")] = getattr(args, flag[2:].replace("-", "_"))
    http["trusted_proxies"] = args.http_trusted_proxies
    http["client_ip_header"] = args.http_client_ip_header
    return {
        "http_limits": HttpLimits(**http),
        "tensor_limits": TensorLimits(args.max_input_elements, args.max_request_elements),
        "grpc_max_message_bytes": args.grpc_max_message_bytes,
        "grpc_connection_limits": grpc_connection_limits(args),
    }


# gRPC connections: streams, keepalive and age (GrpcConnectionLimits says why each default).

_GRPC = GrpcConnectionLimits()

#: (flag, smallest value, default, meaning); the flag without ``--grpc-`` names the field it sets.
GRPC_CONNECTION_FLAGS: list[tuple[str, int, int, str]] = [
    (
        "--grpc-max-concurrent-streams",
        0,
        _GRPC.max_concurrent_streams,
        "calls open at once on one gRPC connection; a client over it waits for one to end; 0: no limit",
    ),
    (
        "--grpc-keepalive-time-secs",
        1,
        _GRPC.keepalive_time_secs,
        "seconds between the server's pings on each gRPC connection, idle or not",
    ),
    (
        "--grpc-keepalive-timeout-secs",
        1,
        _GRPC.keepalive_timeout_secs,
        "seconds a ping waits for its answer; a connection whose peer does not answer is closed",
    ),
    (
        "--grpc-min-ping-interval-secs",
        1,
        _GRPC.min_ping_interval_secs,
        "the shortest time between a client's pings; a client pinging more often is sent GOAWAY",
    ),
    (
        "--grpc-max-connection-age-secs",
        0,
        _GRPC.max_connection_age_secs,
        "seconds a gRPC connection lives before GOAWAY sends new calls to a new one; 0: no limit",
    ),
    (
        "--grpc-max-connection-age-grace-secs",
        0,
        _GRPC.max_connection_age_grace_secs,
        "seconds the calls open on a connection past its age may still take; 0: as long as they need, "
        "so a ModelStreamInfer sequence is never cut",
    ),
]


def grpc_connection_flags(serve: FlagGroup) -> None:
    """The gRPC connection limits' flags."""
    for flag, minimum, default, meaning in GRPC_CONNECTION_FLAGS:
        setting(serve, flag, at_least(minimum), str(default), meaning)


def grpc_connection_limits(args: argparse.Namespace) -> GrpcConnectionLimits:
    """The gRPC connection flags as :class:`GrpcConnectionLimits`."""
    fields = {
        flag.removeprefix("--grpc-").replace("-", "_"): flag[2:].replace("-", "_")
        for flag, *_ in GRPC_CONNECTION_FLAGS
    }
    return GrpcConnectionLimits(**{field: getattr(args, dest) for field, dest in fields.items()})
