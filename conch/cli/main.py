"""``conch serve [REPO]`` and the model toolchain (``export``, ``validate``, ``package``, ``install``).

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
from pathlib import Path

from conch import __version__
from conch.frontends.grpc.grpc_options import DEFAULT_ACCEPTORS

TOOLCHAIN_COMMANDS = ("export", "validate", "package", "install")


def _env(name: str, default: str) -> str:
    return os.environ.get(f"CONCH_{name}", default)


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conch", description="A Triton-compatible model server.")
    parser.add_argument("--version", action="version", version=f"conch {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model repository over HTTP and gRPC")
    serve.add_argument(
        "repository",
        nargs="?",
        default=_env("REPOSITORY", ""),
        help="model repository folder (CONCH_REPOSITORY); default: the bundled example repository",
    )
    serve.add_argument("--host", default=_env("HOST", "0.0.0.0"), help="address to bind (CONCH_HOST)")
    serve.add_argument(
        "--http-port", type=int, default=int(_env("HTTP_PORT", "8000")), help="(CONCH_HTTP_PORT)"
    )
    serve.add_argument(
        "--grpc-port", type=int, default=int(_env("GRPC_PORT", "8001")), help="(CONCH_GRPC_PORT)"
    )
    serve.add_argument(
        "--metrics-port", type=int, default=int(_env("METRICS_PORT", "8002")), help="(CONCH_METRICS_PORT)"
    )
    serve.add_argument(
        "--strict-readiness",
        type=_bool,
        default=_bool(_env("STRICT_READINESS", "true")),
        help="ready only when every model is READY, as Triton (CONCH_STRICT_READINESS, default true)",
    )
    serve.add_argument(
        "--default-max-batch-size",
        type=int,
        default=int(_env("DEFAULT_MAX_BATCH_SIZE", "4")),
        help="max_batch_size given to auto-completed batching models (CONCH_DEFAULT_MAX_BATCH_SIZE)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=int(_env("WORKERS", "1")),
        help="worker processes sharing the ports; raise it when one process cannot keep up with gRPC "
        "or HTTP traffic (CONCH_WORKERS, default 1)",
    )
    serve.add_argument(
        "--grpc-relay",
        type=_bool,
        default=_bool(_env("GRPC_RELAY", "false")),
        help="serve gRPC from a separate relay process, which takes gRPC's per-call work off the model "
        "process; a lone call pays one more hop, and on 2 cores it was no faster under load (see "
        "docs/tuning.md); one process only, not with --workers (CONCH_GRPC_RELAY, default false)",
    )
    serve.add_argument(
        "--busy-poll-us",
        type=int,
        default=int(_env("BUSY_POLL_US", "1000")),
        help="microseconds the event loop keeps polling after the last request in the server is "
        "answered, so that a client's next request is read without a thread wake-up; 0 turns it off "
        "(see docs/tuning.md; CONCH_BUSY_POLL_US, default 1000)",
    )
    serve.add_argument(
        "--grpc-acceptors",
        type=int,
        default=int(_env("GRPC_ACCEPTORS", str(DEFAULT_ACCEPTORS))),
        help="gRPC inference calls the server stands ready to accept at once; 0 accepts them one at a "
        "time, as grpc.aio does (see docs/tuning.md; CONCH_GRPC_ACCEPTORS, default %(default)s)",
    )
    serve.add_argument("--log-level", default=_env("LOG_LEVEL", "info"), help="(CONCH_LOG_LEVEL)")
    for name in TOOLCHAIN_COMMANDS:
        importlib.import_module(f"conch.cli.{name}_command").add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        exit_code: int = args.run(args)
        return exit_code
    logging.basicConfig(
        level=args.log_level.upper(),
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
    if args.workers < 1:
        print("conch: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.busy_poll_us < 0:
        print("conch: --busy-poll-us must be 0 (off) or more", file=sys.stderr)
        return 2
    if args.grpc_acceptors < 0:
        print("conch: --grpc-acceptors must be 0 (grpc.aio's own) or more", file=sys.stderr)
        return 2
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
