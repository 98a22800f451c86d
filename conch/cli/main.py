"""``conch serve [REPO]``, the model toolchain (``export``, ``validate``, ``package``, ``install``) and
``conch docs``.

Every ``serve`` flag can also be set as a ``CONCH_*`` environment variable. Each toolchain command lives
in its own ``conch/cli/<name>_command.py`` with ``add_parser(commands)``, which registers the
subcommand and sets ``run`` (``args -> exit code``) as its default.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conch import __version__
from conch.cli.arguments import LOG_LEVELS, at_least, boolean, log_level
from conch.frontends.grpc.grpc_options import DEFAULT_ACCEPTORS

TOOLCHAIN_COMMANDS = ("export", "validate", "package", "install", "docs")


def _setting(
    parser: argparse.ArgumentParser, flag: str, parse: Callable[[str], Any], default: str, help: str
) -> None:
    """A ``conch serve`` flag whose default ``CONCH_<FLAG>`` can set (``--grpc-acceptors``:
    ``CONCH_GRPC_ACCEPTORS``).

    The default stays a string, so argparse parses it with ``parse`` exactly as it parses the flag: a
    bad environment value is refused with the same message and exit status 2.
    """
    variable = "CONCH_" + flag.lstrip("-").replace("-", "_").upper()
    described = f"{help} ({variable}, default {default})".lstrip()
    parser.add_argument(flag, type=parse, default=os.environ.get(variable, default), help=described)


SERVE_DESCRIPTION = (
    "Serve the models of a Triton-style model repository (a folder of <model>/config.pbtxt and "
    "<model>/<version>/model.onnx) over the KServe V2 protocol: HTTP/REST on --http-port (8000), gRPC on "
    "--grpc-port (8001) and Prometheus metrics on --metrics-port (8002), Triton's ports. Every flag can "
    "also be set by the CONCH_* environment variable shown beside it; a flag wins over its variable. "
    "Guides: conch docs (flags in depth: conch docs configuration)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conch", description="A Triton-compatible model server. Guides: conch docs."
    )
    parser.add_argument("--version", action="version", version=f"conch {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="serve a model repository over HTTP and gRPC", description=SERVE_DESCRIPTION
    )
    serve.add_argument(
        "repository",
        nargs="?",
        default=os.environ.get("CONCH_REPOSITORY", ""),
        help="model repository folder (CONCH_REPOSITORY); default: the bundled example repository",
    )
    _setting(serve, "--host", str, "0.0.0.0", "address the HTTP, gRPC and metrics ports listen on")
    _setting(
        serve,
        "--http-port",
        at_least(0),
        "8000",
        "port of the HTTP/REST API (KServe V2, Triton's extensions)",
    )
    _setting(
        serve, "--grpc-port", at_least(0), "8001", "port of the gRPC API (KServe V2 GRPCInferenceService)"
    )
    _setting(serve, "--metrics-port", at_least(0), "8002", "port of the Prometheus metrics, at /metrics")
    _setting(
        serve,
        "--strict-readiness",
        boolean,
        "true",
        "ready only when every model is READY, as Triton; false: ready once the server has started",
    )
    _setting(
        serve,
        "--default-max-batch-size",
        at_least(0),
        "4",
        "max_batch_size given to batching models whose config.pbtxt does not set it (auto-complete)",
    )
    _setting(
        serve,
        "--workers",
        at_least(1),
        "1",
        "worker processes sharing the ports; raise it when one process cannot keep up with gRPC or "
        "HTTP traffic",
    )
    _setting(
        serve,
        "--grpc-relay",
        boolean,
        "false",
        "serve gRPC from a separate relay process, which takes gRPC's per-call work off the model process; "
        "a lone call pays one more hop, and on 2 cores it was no faster under load (see conch docs tuning); "
        "one process only, not with --workers",
    )
    _setting(
        serve,
        "--busy-poll-us",
        at_least(0),
        "1000",
        "microseconds the event loop keeps polling after the last request in the server is answered, so "
        "that a client's next request is read without a thread wake-up; 0 turns it off "
        "(see conch docs tuning)",
    )
    _setting(
        serve,
        "--grpc-acceptors",
        at_least(0),
        str(DEFAULT_ACCEPTORS),
        "gRPC inference calls the server stands ready to accept at once; 0 accepts them one at a time, as "
        "grpc.aio does (see conch docs tuning)",
    )
    _setting(
        serve,
        "--log-level",
        log_level,
        "info",
        f"how much the server logs: {', '.join(LOG_LEVELS)}, in any case; verbose is debug",
    )
    _setting(
        serve,
        "--log-verbose",
        at_least(0),
        "0",
        "Triton's verbose logging: any N above 0 logs at debug level, whatever --log-level says",
    )
    for name in TOOLCHAIN_COMMANDS:
        importlib.import_module(f"conch.cli.{name}_command").add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        exit_code: int = args.run(args)
        return exit_code
    logging.basicConfig(
        level=logging.DEBUG if args.log_verbose > 0 else args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Before anything imports grpc: gRPC's core reads its experiments once, at import.
    from conch.frontends.grpc.grpc_options import prefer_iomgr_listener

    prefer_iomgr_listener()
    from conch import serving

    repository = Path(args.repository) if args.repository else serving.embedded_repository()
    if not repository.is_dir():
        print(f"conch: model repository '{args.repository}' is not a folder", file=sys.stderr)
        return 2
    settings = serving.ServeSettings(
        repository=repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        strict_readiness=args.strict_readiness,
        default_max_batch_size=args.default_max_batch_size,
        workers=args.workers,
        grpc_relay=args.grpc_relay,
        busy_poll_us=args.busy_poll_us,
        grpc_acceptors=args.grpc_acceptors,
    )
    if args.grpc_relay and args.workers > 1:
        print("conch: --grpc-relay serves one process; use it without --workers", file=sys.stderr)
        return 2
    try:
        if args.workers == 1:
            serving.run(settings)
        else:
            from conch.workers import run_workers

            run_workers(settings, args.workers)
    except serving.ServeError as exc:
        print(f"conch: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
