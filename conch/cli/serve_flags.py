"""The flags of ``conch serve`` beyond the ports and logs: resilience, model control, backends.

Nothing imported here may import gRPC or tritonclient (tests/unit/test_serve_arguments_import.py):
conch sets gRPC's listener experiment before gRPC loads, and parsing the command line comes first.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, Protocol

from conch.cli.arguments import at_least, backend_setting, boolean, choice, ratio


class FlagGroup(Protocol):
    """Where flags go: ``conch serve``'s parser or one of its titled groups (``--help`` shows them so)."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


def setting(parser: FlagGroup, flag: str, parse: Callable[[str], Any], default: str, help: str) -> None:
    """A ``conch serve`` flag whose default ``CONCH_<FLAG>`` can set (``--grpc-acceptors``:
    ``CONCH_GRPC_ACCEPTORS``).

    The default stays a string, so argparse parses it with ``parse`` exactly as it parses the flag: a
    bad environment value is refused with the same message and exit status 2.
    """
    variable = "CONCH_" + flag.lstrip("-").replace("-", "_").upper()
    described = f"{help} ({variable}, default {default or 'none'})".lstrip()
    parser.add_argument(flag, type=parse, default=os.environ.get(variable, default), help=described)


def port_clash(args: argparse.Namespace) -> str | None:
    """Why the HTTP, gRPC and metrics ports cannot all listen, or None when they can.

    Two of them on one port would not always fail to bind: frontend and worker processes listen with
    ``SO_REUSEPORT``, so both servers would bind it and the kernel would hand each new client to one
    of them at random, a gRPC client now and then meeting the HTTP server. Port 0 (any free port) may
    repeat: each listener gets its own.
    """
    flags_by_port: dict[int, str] = {}
    for flag, port in (
        ("--http-port", args.http_port),
        ("--grpc-port", args.grpc_port),
        ("--metrics-port", args.metrics_port),
    ):
        if port in flags_by_port:
            return f"{flags_by_port[port]} and {flag} are both {port}; give each its own port"
        if port != 0:
            flags_by_port[port] = flag
    return None


#: Triton's --model-control-mode values (conch.lifecycle.model_control.ControlMode).
CONTROL_MODES = ("none", "poll", "explicit")


def resilience_flags(serve: FlagGroup) -> None:
    """Server-wide circuit-breaker defaults and fallback strategy; a model's parameters override them."""
    setting(
        serve,
        "--circuit-breaker",
        boolean,
        "false",
        "give every model version a circuit breaker (a model turns its own on with any circuit_breaker.* "
        "parameter, or off with circuit_breaker.enabled false; see conch docs lifecycle)",
    )
    for flag, parse, default, meaning in BREAKER_FLAGS:
        setting(serve, flag, parse, default, meaning)
    setting(
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
    from conch.models.circuit_breaker import CircuitBreakerSettings

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
    from conch.models.strategy import parse_strategy

    try:
        parse_strategy(text, "--fallback-strategy")
    except ConchError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def model_control_flags(serve: FlagGroup) -> None:
    """Triton's flags for changing what is served, and for stopping (see conch docs lifecycle)."""
    setting(
        serve,
        "--model-control-mode",
        choice(CONTROL_MODES),
        "none",
        "none: load the repository once at start; poll: load new, changed and removed model folders every "
        "--repository-poll-secs; explicit: load only --load-model at start, then through the load and "
        "unload API (one of " + ", ".join(CONTROL_MODES) + ")",
    )
    setting(
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
    setting(
        serve,
        "--state-dir",
        str,
        "",
        "where releases keep their state across restarts (a volume on Kubernetes); empty: .conch-state "
        "beside the repository folder (see conch docs releases)",
    )
    setting(
        serve,
        "--release-store",
        str,
        "",
        "where every replica and CLI command shares the versions releases rejected, promoted, re-admitted "
        "and approved: a folder, or s3://[host:port/]bucket/prefix; empty: .conch-verdicts inside the "
        "model repository (conch docs releases)",
    )
    setting(
        serve,
        "--release-store-poll-secs",
        at_least(1),
        "5",
        "seconds between two reads of the release store: a version rejected on one replica stops serving "
        "on the others within this",
    )
    setting(
        serve,
        "--exit-timeout-secs",
        at_least(0),
        "30",
        "on SIGTERM or SIGINT, seconds the server keeps its ports open (not ready, refusing new "
        "inferences) for the requests it has to finish before it stops",
    )


def backend_flags(serve: FlagGroup) -> None:
    """Triton's ``--backend-config``: the Python backend's shared memory (conch docs python-backend)."""
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


def stream_flags(serve: FlagGroup) -> None:
    """``--streams``: models fed from a broker's streams as well as by requests (conch docs streams)."""
    setting(
        serve,
        "--streams",
        str,
        "",
        "a streams.yaml naming the broker (redis:// or rediss://) and, for each model, the input stream "
        "read as a consumer group and the results and dead-letter streams written; needs conch[streams] "
        "(see conch docs streams)",
    )


def streams_config(args: argparse.Namespace) -> Any:
    """The ``--streams`` file, read and checked (None without the flag); ValueError says what is wrong."""
    if not args.streams:
        return None
    from pathlib import Path

    from conch.streams.config import load_streams_config

    return load_streams_config(Path(args.streams))
