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
from conch.cli.arguments import (
    LOG_LEVELS,
    at_least,
    backend_setting,
    boolean,
    choice,
    log_level,
    ratio,
    server_name,
)
from conch.frontends.grpc.grpc_options import DEFAULT_ACCEPTORS
from conch.observability.log_format import LOG_FORMATS, configure_logging

TOOLCHAIN_COMMANDS = ("export", "validate", "package", "install", "release", "docs")


def _setting(
    parser: argparse.ArgumentParser, flag: str, parse: Callable[[str], Any], default: str, help: str
) -> None:
    """A ``conch serve`` flag whose default ``CONCH_<FLAG>`` can set (``--grpc-acceptors``:
    ``CONCH_GRPC_ACCEPTORS``).

    The default stays a string, so argparse parses it with ``parse`` exactly as it parses the flag: a
    bad environment value is refused with the same message and exit status 2.
    """
    variable = "CONCH_" + flag.lstrip("-").replace("-", "_").upper()
    described = f"{help} ({variable}, default {default or 'none'})".lstrip()
    parser.add_argument(flag, type=parse, default=os.environ.get(variable, default), help=described)


#: Triton's --model-control-mode values (conch.lifecycle.model_control.ControlMode).
CONTROL_MODES = ("none", "poll", "explicit")

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
        help="model repository folder, or s3://[host:port/]bucket/prefix, mirrored into --model-cache-dir "
        "(CONCH_REPOSITORY); default: the bundled example repository",
    )
    _setting(
        serve,
        "--model-cache-dir",
        str,
        "~/.cache/conch/s3",
        "where an s3:// repository is mirrored, one folder per bucket and prefix (see conch docs "
        "object-storage)",
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
        "--server-name",
        server_name,
        "conch",
        "the name the server metadata (GET /v2, gRPC ServerMetadata) gives; a compatibility switch: "
        "'triton' for clients that check for it (the version stays conch's)",
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
    _setting(
        serve,
        "--log-format",
        choice(LOG_FORMATS),
        "auto",
        "how log records are written: json (one JSON object per line, with each event's fields), text, "
        "or auto (text when stderr is a terminal, else json)",
    )
    _setting(
        serve,
        "--health-probe-timeout-ms",
        at_least(1),
        "1000",
        "GET /v2/health/deep: milliseconds each READY model has to answer its probe inference (and the "
        "longest event-loop turn) before the server is unhealthy (see conch docs lifecycle)",
    )
    _setting(
        serve,
        "--health-max-memory-ratio",
        ratio,
        "0.95",
        "GET /v2/health/deep: the share of host memory in use, above 0 and at most 1, beyond which the "
        "server is unhealthy",
    )
    _setting(
        serve,
        "--health-max-gpu-memory-ratio",
        ratio,
        "0.90",
        "GET /v2/health/deep: the share of each GPU's memory in use (read through NVML), above 0 and at "
        "most 1, beyond which the server is unhealthy",
    )
    _setting(
        serve,
        "--health-cache-secs",
        at_least(0),
        "5",
        "GET /v2/health/deep: seconds one evaluation is reused, so that probes cannot load the server; "
        "0 evaluates on every call (concurrent calls still share one)",
    )
    _model_control_flags(serve)
    _resilience_flags(serve)
    for name in TOOLCHAIN_COMMANDS:
        importlib.import_module(f"conch.cli.{name}_command").add_parser(commands)
    return parser


def _resilience_flags(serve: argparse.ArgumentParser) -> None:
    """Server-wide circuit-breaker defaults and fallback strategy; a model's parameters override them."""
    _setting(
        serve,
        "--circuit-breaker",
        boolean,
        "false",
        "give every model version a circuit breaker (a model turns its own on with any circuit_breaker.* "
        "parameter, or off with circuit_breaker.enabled false; see conch docs lifecycle)",
    )
    for flag, parse, default, meaning in BREAKER_FLAGS:
        _setting(serve, flag, parse, default, meaning)
    _setting(
        serve,
        "--fallback-strategy",
        fallback_strategy,
        "",
        "what answers when a model cannot: an ordered subset of MODEL, CPU and BUSINESS joined by ->, such "
        "as MODEL->CPU->BUSINESS, for models whose FALLBACK_STRATEGY parameter does not say; empty: none",
    )


#: ``--circuit-breaker-*``: the defaults of the ``circuit_breaker.*`` keys (see conch docs lifecycle).
BREAKER_FLAGS: list[tuple[str, Callable[[str], Any], str, str]] = [
    ("--circuit-breaker-failure-rate-threshold", ratio, "0.5", "share of failed calls that opens a circuit"),
    ("--circuit-breaker-minimum-calls", at_least(1), "20", "calls in the window before a circuit may open"),
    ("--circuit-breaker-window-calls", at_least(1), "100", "recent calls the failure rate is taken over"),
    ("--circuit-breaker-slow-call-ms", at_least(0), "0", "a call slower than this counts as slow; 0: off"),
    ("--circuit-breaker-slow-call-rate-threshold", ratio, "1.0", "share of slow calls that opens a circuit"),
    ("--circuit-breaker-open-seconds", at_least(1), "30", "seconds an open circuit refuses calls"),
    ("--circuit-breaker-half-open-calls", at_least(1), "5", "probe calls a half-open circuit lets through"),
]


def breaker_defaults(args: argparse.Namespace) -> Any:
    """The ``--circuit-breaker-*`` flags as settings; raises ValueError (with the fix) when inconsistent."""
    from conch.core.errors import ConchError
    from conch.router.circuit_breaker import CircuitBreakerSettings

    try:
        return CircuitBreakerSettings(
            failure_rate_threshold=args.circuit_breaker_failure_rate_threshold,
            minimum_calls=args.circuit_breaker_minimum_calls,
            window_calls=args.circuit_breaker_window_calls,
            slow_call_ms=args.circuit_breaker_slow_call_ms or None,
            slow_call_rate_threshold=args.circuit_breaker_slow_call_rate_threshold,
            open_seconds=args.circuit_breaker_open_seconds,
            half_open_calls=args.circuit_breaker_half_open_calls,
        )
    except ConchError as exc:
        raise ValueError(exc.message.replace("parameters 'circuit_breaker.", "'--circuit-breaker-")) from None


def fallback_strategy(text: str) -> str:
    """A ``MODEL->CPU->BUSINESS`` strategy, checked here so a typo stops the server before it starts."""
    from conch.core.errors import ConchError
    from conch.router.strategy import parse_strategy

    try:
        parse_strategy(text, "--fallback-strategy")
    except ConchError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def _model_control_flags(serve: argparse.ArgumentParser) -> None:
    """Triton's flags for changing what is served, and for stopping (see conch docs lifecycle)."""
    _setting(
        serve,
        "--model-control-mode",
        choice(CONTROL_MODES),
        "none",
        "none: load the repository once at start; poll: load new, changed and removed model folders every "
        "--repository-poll-secs; explicit: load only --load-model at start, then through the load and "
        "unload API (one of " + ", ".join(CONTROL_MODES) + ")",
    )
    serve.add_argument(
        "--backend-config",
        action="append",
        type=backend_setting,
        default=os.environ.get("CONCH_BACKEND_CONFIG", "").split(),
        metavar="BACKEND,KEY=VALUE",
        help="a backend's setting, as Triton's: python,shm-default-byte-size=N and "
        "python,shm-growth-byte-size=N size the shared memory Python models' tensors cross in; repeat "
        "it for more (CONCH_BACKEND_CONFIG, space-separated; default: 1 MiB each)",
    )
    _setting(
        serve,
        "--repository-poll-secs",
        at_least(1),
        "15",
        "poll mode: seconds between two scans of the model repository",
    )
    serve.add_argument(
        "--load-model",
        action="append",
        default=[name for name in os.environ.get("CONCH_LOAD_MODEL", "").split(",") if name],
        metavar="NAME",
        help="explicit mode: a model to load at start; repeat it for more, or * for every model "
        "(CONCH_LOAD_MODEL, comma-separated; default: none)",
    )
    _setting(
        serve,
        "--state-dir",
        str,
        "",
        "where releases keep their state across restarts (a volume on Kubernetes); empty: .conch-state "
        "beside the repository folder (see conch docs releases)",
    )
    _setting(
        serve,
        "--exit-timeout-secs",
        at_least(0),
        "30",
        "on SIGTERM or SIGINT, seconds the server keeps its ports open (not ready, refusing new "
        "inferences) for the requests it has to finish before it stops",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        exit_code: int = args.run(args)
        return exit_code
    configure_logging(logging.DEBUG if args.log_verbose > 0 else args.log_level, args.log_format, sys.stderr)
    # Before anything imports grpc: gRPC's core reads its experiments once, at import.
    from conch.frontends.grpc.grpc_options import prefer_iomgr_listener

    prefer_iomgr_listener()
    from conch import serving

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
        repository = Path(args.repository) if args.repository else serving.embedded_repository()
    if not repository.is_dir():
        print(f"conch: model repository '{args.repository}' is not a folder", file=sys.stderr)
        return 2
    try:
        defaults = breaker_defaults(args)
    except ValueError as exc:
        print(f"conch: {exc}", file=sys.stderr)
        return 2
    settings = serving.ServeSettings(
        repository=repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        strict_readiness=args.strict_readiness,
        server_name=args.server_name,
        default_max_batch_size=args.default_max_batch_size,
        workers=args.workers,
        grpc_relay=args.grpc_relay,
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
        backend_config=tuple(backend_setting(e) if isinstance(e, str) else e for e in args.backend_config),
    )
    if args.grpc_relay and args.workers > 1:
        print("conch: --grpc-relay serves one process; use it without --workers", file=sys.stderr)
        return 2
    if args.model_control_mode != "none" and args.workers > 1:
        print(
            f"conch: --model-control-mode {args.model_control_mode} changes the models of one process, and "
            "each of --workers loads its own copy; use it without --workers",
            file=sys.stderr,
        )
        return 2
    if args.load_model and args.model_control_mode != "explicit":
        print("conch: --load-model selects models in --model-control-mode explicit only", file=sys.stderr)
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
