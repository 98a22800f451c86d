"""``conch serve``'s server-side limits: what one request and one client may hold of the server.

Each has a default that serves every example and benchmark in this repository (see docs/security.md
for what each one stops). Nothing imported here may import gRPC or tritonclient
(tests/unit/test_serve_arguments_import.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from conch.cli.arguments import at_least
from conch.cli.serve_flags import setting
from conch.core.tensor_limits import TensorLimits
from conch.frontends.grpc.grpc_options import MAX_MESSAGE_BYTES
from conch.frontends.http.limits import HttpLimits

_HTTP = HttpLimits()
_TENSORS = TensorLimits()

#: (flag, smallest value, default, meaning); each flag's ``dest`` is the field it sets.
HTTP_LIMIT_FLAGS: list[tuple[str, int, int | float, str]] = [
    (
        "--http-max-body-bytes",
        1,
        _HTTP.max_body_bytes,
        "a request body, after inflating gzip or deflate; more: 400",
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
]


def limit_flags(serve: argparse.ArgumentParser) -> None:
    """The limits' flags (see conch docs security)."""
    for flag, minimum, default, meaning in HTTP_LIMIT_FLAGS:
        setting(serve, flag, at_least(minimum), str(int(default)), meaning)
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


def limit_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The limits as :class:`~conch.serving.ServeSettings` keyword arguments."""
    http = {}
    for flag, *_ in HTTP_LIMIT_FLAGS:
        http[flag.removeprefix("--http-").replace("-", "_")] = getattr(args, flag[2:].replace("-", "_"))
    return {
        "http_limits": HttpLimits(**http),
        "tensor_limits": TensorLimits(args.max_input_elements, args.max_request_elements),
        "grpc_max_message_bytes": args.grpc_max_message_bytes,
    }
