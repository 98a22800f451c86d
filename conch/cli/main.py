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
from pathlib import Path

from conch.cli.arguments import (
    LOG_LEVELS,
    at_least,
    backend_setting,
    boolean,
    choice,
    count_or_auto,
    log_level,
    ratio,
    server_name,
)
from conch.cli.gateway_flags import gateway_flags, gateway_settings
from conch.cli.limit_flags import limit_flags, limit_settings
from conch.cli.log_flags import request_log_flags, request_log_settings
from conch.cli.serve_flags import (
    backend_flags,
    breaker_defaults,
    model_control_flags,
    port_clash,
    renamed_warnings,
    resilience_flags,
    setting,
    stream_flags,
    streams_config,
)
from conch.cli.tls_flags import tls_flags, tls_settings
from conch.cli.trace_flags import trace_flags, trace_settings
from conch.core.version import VERSION
from conch.frontends.grpc.grpc_options import DEFAULT_ACCEPTORS
from conch.observability.log_format import LOG_FORMATS, configure_logging

TOOLCHAIN_COMMANDS = ("export", "validate", "optimize", "package", "install", "release", "deploy", "docs")


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
    parser.add_argument("--version", action="version", version=f"conch {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve a model repository over HTTP and gRPC",
        description=SERVE_DESCRIPTION,
        usage="conch serve [REPOSITORY] [flags, by group below]",
    )
    serve.add_argument(
        "repository",
        nargs="?",
        default=os.environ.get("CONCH_REPOSITORY", ""),
        help="model repository folder, or s3://[host:port/]bucket/prefix, mirrored into --model-cache-dir "
        "(CONCH_REPOSITORY); default: the bundled example repository",
    )
    models = serve.add_argument_group("Model repository", "where the models come from and how they load")
    ports = serve.add_argument_group("Ports")
    processes = serve.add_argument_group(
        "Processes", "how conch serve uses more cores: --proxies (one model process) or --workers"
    )
    logs = serve.add_argument_group("Logs")
    health = serve.add_argument_group("Health and readiness")
    setting(
        models,
        "--model-cache-dir",
        str,
        "~/.cache/conch/s3",
        "where an s3:// repository is mirrored, one folder per bucket and prefix (see conch docs "
        "object-storage)",
    )
    setting(ports, "--host", str, "0.0.0.0", "address the HTTP, gRPC and metrics ports listen on")
    setting(
        ports,
        "--http-port",
        at_least(0),
        "8000",
        "port of the HTTP/REST API (KServe V2, Triton's extensions)",
    )
    setting(
        ports, "--grpc-port", at_least(0), "8001", "port of the gRPC API (KServe V2 GRPCInferenceService)"
    )
    setting(ports, "--metrics-port", at_least(0), "8002", "port of the Prometheus metrics, at /metrics")
    setting(
        health,
        "--strict-readiness",
        boolean,
        "true",
        "ready only when every model is READY, as Triton; false: ready once the server has started",
    )
    setting(
        ports,
        "--server-name",
        server_name,
        "conch",
        "the name the server metadata (GET /v2, gRPC ServerMetadata) gives; a compatibility switch: "
        "'triton' for clients that check for it (the version stays conch's)",
    )
    setting(
        models,
        "--default-max-batch-size",
        at_least(0),
        "4",
        "max_batch_size given to batching models whose config.pbtxt does not set it (auto-complete)",
    )
    setting(
        processes,
        "--workers",
        at_least(1),
        "1",
        "worker processes sharing the ports; raise it when one process cannot keep up with gRPC or "
        "HTTP traffic",
    )
    setting(
        processes,
        "--proxies",
        count_or_auto,
        "auto",
        "proxy processes that own the HTTP and gRPC ports (SO_REUSEPORT) and decode and encode "
        "inference there, handing tensors to this process's models through shared memory; batches, "
        "model control, shared memory and sequences stay in one model process; 0 serves the ports "
        "from the model process itself; auto: one per usable core from 8 cores, else 0 (see conch "
        "docs tuning)",
        renamed_from="--frontends",
    )
    setting(
        processes,
        "--grpc-relay",
        boolean,
        "false",
        "retired, and ignored with a warning: the model process serves gRPC as fast or faster than a "
        "relay process did; --proxies N spreads gRPC's per-call work over more cores",
    )
    setting(
        logs,
        "--log-level",
        log_level,
        "info",
        f"how much the server logs: {', '.join(LOG_LEVELS)}, in any case; verbose is debug",
    )
    setting(
        logs,
        "--log-verbose",
        at_least(0),
        "0",
        "Triton's verbose logging: any N above 0 logs at debug level, whatever --log-level says",
    )
    setting(
        logs,
        "--log-format",
        choice(LOG_FORMATS),
        "auto",
        "how log records are written: json (one JSON object per line, with each event's fields), text, "
        "or auto (text when stderr is a terminal, else json)",
    )
    setting(
        health,
        "--health-probe-timeout-ms",
        at_least(1),
        "1000",
        "GET /v2/health/deep: milliseconds each READY model has to answer its probe inference (and the "
        "longest event-loop turn) before the server is unhealthy (see conch docs lifecycle)",
    )
    setting(
        health,
        "--health-max-memory-ratio",
        ratio,
        "0.95",
        "GET /v2/health/deep: the share of host memory in use, above 0 and at most 1, beyond which the "
        "server is unhealthy",
    )
    setting(
        health,
        "--health-max-gpu-memory-ratio",
        ratio,
        "0.90",
        "GET /v2/health/deep: the share of each GPU's memory in use (read through NVML), above 0 and at "
        "most 1, beyond which the server is unhealthy",
    )
    setting(
        health,
        "--health-cache-secs",
        at_least(0),
        "5",
        "GET /v2/health/deep: seconds one evaluation is reused, so that probes cannot load the server; "
        "0 evaluates on every call (concurrent calls still share one)",
    )
    model_control_flags(models)
    backend_flags(models)
    request_log_flags(logs)
    trace_flags(serve.add_argument_group("Traces (OpenTelemetry, Triton's trace extension)"))
    resilience_flags(serve.add_argument_group("Resilience: circuit breakers and fallbacks"))
    gateway_flags(serve.add_argument_group("Access: authentication, restricted APIs, rate limits"))
    tls_flags(serve.add_argument_group("TLS"))
    limit_flags(serve.add_argument_group("Connection and request limits"))
    stream_flags(serve.add_argument_group("Streams (Redis Streams)"))
    advanced = serve.add_argument_group(
        "Advanced", "mechanism knobs measured on this project's machines; the defaults suit most servers"
    )
    setting(
        advanced,
        "--busy-poll-us",
        at_least(0),
        "1000",
        "microseconds the event loop keeps polling after the last request in the server is answered, so "
        "that a client's next request is read without a thread wake-up; 0 turns it off "
        "(see conch docs tuning)",
    )
    setting(
        advanced,
        "--grpc-acceptors",
        at_least(0),
        str(DEFAULT_ACCEPTORS),
        "gRPC inference calls the server stands ready to accept at once; 0 accepts them one at a time, as "
        "grpc.aio does (see conch docs tuning)",
    )
    for name in TOOLCHAIN_COMMANDS:
        importlib.import_module(f"conch.cli.{name}_command").add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        exit_code: int = args.run(args)
        return exit_code
    for warning in renamed_warnings(sys.argv[1:] if argv is None else argv, os.environ):
        print(warning, file=sys.stderr)
    clash = port_clash(args)
    if clash is not None:
        print(f"conch: {clash}", file=sys.stderr)
        return 2
    configure_logging(logging.DEBUG if args.log_verbose > 0 else args.log_level, args.log_format, sys.stderr)
    # Before anything imports grpc: gRPC's core reads its experiments once, at import.
    from conch.frontends.grpc.grpc_options import prefer_iomgr_listener

    prefer_iomgr_listener()
    from conch.repository.embedded import embedded_repository
    from conch.runtime.listening import ServeError
    from conch.runtime.model_process import serve
    from conch.runtime.settings import ServeSettings

    if args.repository.startswith("s3://"):
        from conch.repository.object_cache import ObjectStoreRepository
        from conch.repository.object_store import ObjectStoreError

        try:
            store = ObjectStoreRepository.in_cache(args.repository, Path(args.model_cache_dir))
            store.sync()
        except ObjectStoreError as exc:
            print(f"conch: {exc}", file=sys.stderr)
            return exc.exit_status
        repository = store.root
    else:
        repository = Path(args.repository) if args.repository else embedded_repository()
    if not repository.is_dir():
        print(f"conch: model repository '{args.repository}' is not a folder", file=sys.stderr)
        return 2
    try:
        defaults = breaker_defaults(args)
        gateway = gateway_settings(args)
        request_log = request_log_settings(args)
        tls = tls_settings(args)
        streams = streams_config(args)
    except ValueError as exc:
        print(f"conch: {exc}", file=sys.stderr)
        return 2
    settings = ServeSettings(
        repository=repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        strict_readiness=args.strict_readiness,
        server_name=args.server_name,
        default_max_batch_size=args.default_max_batch_size,
        workers=args.workers,
        proxies=args.proxies,
        busy_poll_us=args.busy_poll_us,
        grpc_acceptors=args.grpc_acceptors,
        health_probe_timeout_ms=args.health_probe_timeout_ms,
        health_max_memory_ratio=args.health_max_memory_ratio,
        health_max_gpu_memory_ratio=args.health_max_gpu_memory_ratio,
        health_cache_secs=args.health_cache_secs,
        model_control_mode=args.model_control_mode,
        repository_poll_secs=args.repository_poll_secs,
        load_models=tuple(args.load_model),
        exit_timeout_secs=args.exit_timeout_secs,
        circuit_breaker=args.circuit_breaker,
        circuit_breaker_defaults=defaults,
        fallback_strategy=args.fallback_strategy,
        state_dir=args.state_dir,
        release_store=args.release_store,
        release_store_poll_secs=args.release_store_poll_secs,
        backend_config=tuple(backend_setting(e) if isinstance(e, str) else e for e in args.backend_config),
        gateway=gateway,
        **limit_settings(args),
        tracing=trace_settings(args),
        request_log=request_log,
        tls=tls,
        streams=streams,
    )
    if args.grpc_relay:
        print(
            "conch: warning: --grpc-relay (CONCH_GRPC_RELAY) is retired and ignored: gRPC is served by the "
            "model process, which measured as fast or faster; use --proxies N for more cores. The flag "
            "goes in the next release",
            file=sys.stderr,
        )
    if args.proxies and args.workers > 1:
        print("conch: --proxies replaces --workers; use one of them", file=sys.stderr)
        return 2
    if args.model_control_mode != "none" and args.workers > 1:
        print(
            f"conch: --model-control-mode {args.model_control_mode} changes the models of one process, and "
            "each of --workers loads its own copy; use it without --workers (--proxies N shares one "
            "model process)",
            file=sys.stderr,
        )
        return 2
    if args.load_model and args.model_control_mode != "explicit":
        print("conch: --load-model selects models in --model-control-mode explicit only", file=sys.stderr)
        return 2
    try:
        if args.workers == 1:
            serve(settings)
        else:
            from conch.runtime.replicas import run_workers

            run_workers(settings, args.workers)
    except ServeError as exc:
        print(f"conch: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
