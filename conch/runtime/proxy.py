"""A proxy process of ``conch serve --proxies N`` (``python -m conch.runtime.proxy``).

It binds the HTTP and gRPC ports beside the other proxies (``SO_REUSEPORT``: the kernel spreads
connections over them), connects to the model process's socket and, once the model process says
its models are loaded, answers: inference decoded and encoded here, the rest relayed (see
:mod:`conch.runtime.proxy_http` and :mod:`conch.runtime.proxy_grpc`). It stops when the model
process tells it to or goes away, finishing the answers it is writing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
import sys

import uvloop

from conch.frontends.grpc.grpc_options import GrpcConnectionLimits
from conch.frontends.http.limits import HttpLimits
from conch.frontends.tls import TlsSettings
from conch.http_server import HttpServer
from conch.observability.access_log import enable_access_log
from conch.observability.log_format import configure_logging
from conch.runtime import garbage_collection
from conch.runtime.busy_poll import BusyPoll
from conch.runtime.model_link import ModelLink
from conch.runtime.proxy_grpc import create_proxy_grpc
from conch.runtime.proxy_http import ProxyHttpApp

log = logging.getLogger(__name__)

#: Exit statuses when a port cannot be bound (the model process reports which).
EXIT_CANNOT_LISTEN_HTTP, EXIT_CANNOT_LISTEN_GRPC = 3, 4


def shared_port(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that the other proxies bind too."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def run_proxy(args: argparse.Namespace) -> int:
    """Bind, connect, wait for the model process's go, serve until told to stop; the exit status.

    The ports are bound before the models load (as one process binds them), so a taken port is
    reported at once, and connections wait in the kernel's queue until the go.
    """
    limits = HttpLimits(**json.loads(args.http_limits))
    tls = TlsSettings.from_dict(json.loads(args.tls))
    link = ModelLink(_connect(args.socket))
    try:
        http_socket = shared_port(args.host, args.http_port)
    except OSError:
        return EXIT_CANNOT_LISTEN_HTTP
    try:
        grpc_server, model_infer = create_proxy_grpc(
            link,
            f"{args.host}:{args.grpc_port}",
            args.decode_here,
            args.grpc_acceptors,
            args.grpc_max_message_bytes,
            tls.grpc,
            GrpcConnectionLimits(**json.loads(args.grpc_connection_limits)),
        )
    except RuntimeError:
        return EXIT_CANNOT_LISTEN_GRPC
    link.attach()
    app = ProxyHttpApp(link, limits.max_body_bytes, limits.max_json_depth, args.decode_here)
    http = HttpServer(app, limits, args.access_log, tls.http)
    if args.access_log:
        enable_access_log()
    loop = asyncio.get_running_loop()
    if args.busy_poll_us > 0:
        link.poll = BusyPoll(loop, link.in_flight, args.busy_poll_us / 1e6, busy_below=2)
        link.in_flight.on_idle = link.poll.server_idle
    loop.add_signal_handler(signal.SIGTERM, link.closed.set)
    loop.add_signal_handler(signal.SIGINT, lambda: None)  # the model process decides when to stop
    waits = [loop.create_task(link.go.wait()), loop.create_task(link.closed.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()
    if not link.go.is_set():
        link.close()
        return 1
    await grpc_server.start()
    model_infer.start()
    serving = loop.create_task(http.serve(sockets=[http_socket]))
    garbage_collection.settle()
    await link.closed.wait()
    http.shutdown()
    await grpc_server.stop(grace=5)
    await serving
    link.close()
    return 0


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conch.runtime.proxy", description=__doc__)
    parser.add_argument("--socket", required=True, help="the model process's Unix socket")
    parser.add_argument("--host", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--decode-here", type=int, default=1, help="0: relay inference too (gateway on)")
    parser.add_argument("--grpc-acceptors", type=int, default=0)
    parser.add_argument("--grpc-max-message-bytes", type=int, required=True)
    parser.add_argument("--grpc-connection-limits", default="{}", help="GrpcConnectionLimits as JSON")
    parser.add_argument("--http-limits", required=True, help="HttpLimits as JSON")
    parser.add_argument("--access-log", type=int, default=0)
    parser.add_argument("--tls", required=True, help="TlsSettings as JSON (conch.frontends.tls)")
    parser.add_argument(
        "--busy-poll-us", type=int, default=0, help="as conch serve's (conch.runtime.busy_poll)"
    )
    parser.add_argument("--log-level", type=int, default=logging.INFO)
    parser.add_argument("--log-format", default="auto")
    args = parser.parse_args(argv)
    args.decode_here, args.access_log = bool(args.decode_here), bool(args.access_log)
    configure_logging(args.log_level, args.log_format, sys.stderr)
    return uvloop.run(run_proxy(args))


if __name__ == "__main__":
    sys.exit(main())
