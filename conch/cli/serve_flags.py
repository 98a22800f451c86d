"""The flags of ``conch serve`` beyond the ports and logs: resilience, model control, backends.

Nothing imported here may import gRPC or tritonclient (tests/unit/cli/test_serve_arguments_import.py):
conch sets gRPC's listener experiment before gRPC loads, and parsing the command line comes first.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from conch.cli.arguments import at_least, backend_setting, boolean, choice, ratio
from conch.runtime.variables import variable_of


class FlagGroup(Protocol):
    """Where flags go: ``conch serve``'s parser or one of its titled groups (``--help`` shows them so)."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


def setting(
    parser: FlagGroup,
    flag: str,
    parse: Callable[[str], Any],
    default: str,
    help: str,
    renamed_from: str | None = None,
) -> None:
    """A ``conch serve`` flag whose default ``CONCH_<FLAG>`` can set (``--grpc-acceptors``:
    ``CONCH_GRPC_ACCEPTORS``).

    The default stays a string, so argparse parses it with ``parse`` exactly as it parses the flag: a
    bad environment value is refused with the same message and exit status 2. A flag ``renamed_from``
    an old name keeps taking the old flag (hidden) and the old variable for one release, with the
    warning :func:`renamed_warnings` gives.
    """
    variable = variable_of(flag)
    described = f"{help} ({variable}, default {default or 'none'})".lstrip()
    value = os.environ.get(variable, default)
    if renamed_from is not None:
        described += f"; formerly {renamed_from} ({variable_of(renamed_from)}), read until the next release"
        value = os.environ.get(variable, os.environ.get(variable_of(renamed_from), default))
        RENAMED_FLAGS[renamed_from] = flag
    parser.add_argument(flag, type=parse, default=value, help=described)
    if renamed_from is not None:
        parser.add_argument(
            renamed_from, dest=flag.lstrip("-").replace("-", "_"), type=parse, default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )  # fmt: skip


#: Old flag name to the new one (the old variable is the old flag's ``CONCH_*``).
RENAMED_FLAGS: dict[str, str] = {}


def renamed_warnings(argv: list[str], environ: Mapping[str, str]) -> list[str]:
    """A warning for each renamed flag or variable ``argv`` or ``environ`` still uses."""
    found = []
    for old, new in RENAMED_FLAGS.items():
        used = [old] if any(arg == old or arg.startswith(old + "=") for arg in argv) else []
        used += [variable_of(old)] if variable_of(old) in environ else []
        if used:
            found.append(
                f"conch: warning: {' and '.join(used)} is renamed {new} ({variable_of(new)}); the old name "
                "goes in the next release"
            )
    return found


def port_clash(args: argparse.Namespace) -> str | None:
    """Why the HTTP, gRPC and metrics ports cannot all listen, or None when they can.

    Two of them on one port would not always fail to bind: proxy and worker processes listen with
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
    setting(
        serve,
        "--circuit-breaker-config",
        breaker_pairs,
        "",
        "the server-wide defaults of the circuit_breaker.* keys a model leaves out, as KEY=VALUE pairs "
        "joined by commas: failure_rate_threshold (0.5), minimum_calls (20), window_calls (100), "
        "slow_call_ms (off), slow_call_rate_threshold (1.0), open_seconds (30), half_open_calls (5); see "
        "conch docs lifecycle",
    )
    for flag, parse in LEGACY_BREAKER_FLAGS:  # before --circuit-breaker-config; hidden, for one release
        serve.add_argument(
            flag, type=parse, default=os.environ.get(variable_of(flag)), help=argparse.SUPPRESS
        )
    setting(
        serve,
        "--fallback-strategy",
        fallback_strategy,
        "",
        "what answers when a model cannot: an ordered subset of MODEL, CPU and BUSINESS joined by ->, such "
        "as MODEL->CPU->BUSINESS, for models whose FALLBACK_STRATEGY parameter does not say; empty: none",
    )


#: The flags that set each ``circuit_breaker.*`` default before ``--circuit-breaker-config``: still
#: read (flag or ``CONCH_*`` variable), with a warning, until the next release.
LEGACY_BREAKER_FLAGS: list[tuple[str, Callable[[str], Any]]] = [
    ("--circuit-breaker-failure-rate-threshold", ratio),
    ("--circuit-breaker-minimum-calls", at_least(1)),
    ("--circuit-breaker-window-calls", at_least(1)),
    ("--circuit-breaker-slow-call-ms", at_least(0)),
    ("--circuit-breaker-slow-call-rate-threshold", ratio),
    ("--circuit-breaker-open-seconds", at_least(1)),
    ("--circuit-breaker-half-open-calls", at_least(1)),
]


def breaker_pairs(text: str) -> dict[str, str]:
    """``key=value,key=value`` as key to value text; the keys and values are checked with the model
    parameters' own rules by :func:`breaker_defaults` (importing them here would import gRPC while
    the flags are parsed, before ``conch serve`` sets gRPC's listener)."""
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(
                "expected KEY=VALUE pairs joined by commas, such as open_seconds=10,minimum_calls=50, "
                f"got '{item}'"
            )
        pairs[key.strip()] = value.strip()
    return pairs


def breaker_defaults(args: argparse.Namespace) -> Any:
    """The server-wide breaker settings: ``--circuit-breaker-config`` over the legacy flags over the
    built-in defaults; raises ValueError (with the fix) when a key or a value is wrong."""
    from conch.core.errors import ConchError
    from conch.models.circuit_breaker import CircuitBreakerSettings, KeyNames, settings_with

    legacy = {}
    for flag, _ in LEGACY_BREAKER_FLAGS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            key = flag.removeprefix("--circuit-breaker-").replace("-", "_")
            legacy[key] = "off" if key == "slow_call_ms" and value == 0 else str(value)
    if legacy:
        named = ",".join(f"{key}={value}" for key, value in legacy.items())
        print(
            f"conch: warning: the --circuit-breaker-* flags are deprecated and go in the next release; "
            f"write --circuit-breaker-config {named}",
            file=sys.stderr,
        )
    try:
        return settings_with(CircuitBreakerSettings(), {**legacy, **args.circuit_breaker_config}, KeyNames())
    except ConchError as exc:
        raise ValueError(f"--circuit-breaker-config: {exc.message}") from None


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
