"""``conch release start|status|promote|rollback|pause|resume|approve|readmit|gate`` from a terminal or CI.

Every subcommand but ``gate`` is one call of the server's release API (:mod:`conch.client.releases`);
``gate`` reads Prometheus as every replica's ``judge: prometheus`` gate does, with the same queries and
the same limits (:func:`conch.release.gate.limits_of`), so a person or a CI step sees the judgement the
replicas reach. ``start`` parses ``release.yaml`` here with the server's own rules before it sends
anything: a typo is named with its field at once, and a server in the middle of a release is not
bothered by a file that could never start one.

Exit codes, the same for every subcommand: 0 done (``gate``: no check failed); 1 the server refused
(its message on stderr), could not be reached, or ``gate`` found a check failed; 2 bad arguments or an
unreadable file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.arguments import at_least
from conch.client.releases import DEFAULT_URL, ReleaseClient, ReleaseRefused, ServerUnreachable
from conch.release.state import ACTIONS

if TYPE_CHECKING:
    from conch.release.spec import ReleaseSpec

USAGE_ERROR = 2
REFUSED = 1
ACTION_HELP = {
    "promote": "approve the current step: go to the next one now (or promote after the last)",
    "rollback": "stop the release: the candidate's weight goes to 0 at once; it is rejected everywhere",
    "pause": "hold the step's traffic as it is, unjudged, until resume or promote",
    "resume": "run the paused step again, judged from now on",
}


_AS_HELP = (
    "who you are, for a server without --auth jwt (recorded, not verified); with a token the server "
    "takes its sub"
)


class _Refusal(Exception):
    """A message for stderr and the exit code that goes with it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "release",
        help="start, watch, approve or stop a model release on a running server",
        description="Drive a staged release (canary steps, shadow, quality gate) through a running "
        "server's /v2/models/{m}/release API; see conch docs releases.",
    )
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--url",
        default=os.environ.get("CONCH_URL", DEFAULT_URL),
        help=f"the server's HTTP address (CONCH_URL, default {DEFAULT_URL})",
    )
    server.add_argument(
        "--token",
        default=os.environ.get("CONCH_TOKEN", ""),
        help="a bearer token for a server with --auth jwt; changes need the admin scope (CONCH_TOKEN)",
    )
    server.add_argument(
        "--ca-cert",
        default=os.environ.get("CONCH_CA_CERT", ""),
        help="for an https:// --url: the CA certificates (PEM) that sign the server's (CONCH_CA_CERT)",
    )
    server.add_argument("--json", action="store_true", help="print the status JSON instead of a table")
    server.add_argument("model", metavar="MODEL", help="the model being released")
    steps = parser.add_subparsers(dest="release_command", required=True, metavar="SUBCOMMAND")
    start = steps.add_parser(
        "start", parents=[server], help="start a release from a release.yaml file (- for stdin)"
    )
    start.add_argument("file", metavar="FILE", help="a release.yaml path, or - to read it from stdin")
    start.set_defaults(run=_run(_start))
    status = steps.add_parser("status", parents=[server], help="the release's state, gate checks and events")
    status.set_defaults(run=_run(lambda client, args: client.status(args.model)))
    for action in ACTIONS:
        acted = steps.add_parser(action, parents=[server], help=ACTION_HELP[action])
        acted.set_defaults(run=_run(_act(action)))
    approve = steps.add_parser(
        "approve", parents=[server], help="approve the current step (a step with approvals: N needs N)"
    )
    approve.add_argument("--as", dest="identity", default="", help=_AS_HELP)
    approve.set_defaults(run=_run(lambda client, args: client.signed(args.model, "approve", args.identity)))
    readmit = steps.add_parser(
        "readmit", parents=[server], help="let a version a rollback rejected serve and be released again"
    )
    readmit.add_argument("version", type=at_least(1), metavar="VERSION", help="the rejected version")
    readmit.add_argument("--as", dest="identity", default="", help=_AS_HELP)
    readmit.set_defaults(
        run=_run(lambda client, args: client.signed(args.model, "readmit", args.identity, args.version))
    )
    _add_gate(steps)


def _add_gate(steps: Any) -> None:
    gate = steps.add_parser(
        "gate",
        help="the judgement every replica's prometheus gate reaches now",
        description="Judge a release step from Prometheus, summed over every replica, with the limits of "
        "--file's gate (or the defaults). Exit 0 when no check failed, 1 when one did.",
    )
    gate.add_argument("model", metavar="MODEL", help="the model being released")
    gate.add_argument(
        "--prometheus", metavar="URL", help="Prometheus's address (default: --file's gate.prometheus_url)"
    )
    gate.add_argument("--baseline", type=at_least(1), metavar="N", help="default: --file's baseline")
    gate.add_argument("--candidate", type=at_least(1), metavar="N", help="default: --file's candidate")
    gate.add_argument(
        "--window", type=_duration, default="10m", help="the traffic to judge: the last 90s, 10m, 1h..."
    )
    gate.add_argument("--file", metavar="FILE", help="a release.yaml whose gate gives the limits")
    gate.set_defaults(run=_gate)


def _run(
    call: Callable[[ReleaseClient, argparse.Namespace], dict[str, Any]],
) -> Callable[[argparse.Namespace], int]:
    """``run`` of a server subcommand: ``call(client, args)`` answers a status, printed for a person."""

    def run(args: argparse.Namespace) -> int:
        try:
            client = ReleaseClient(args.url, token=args.token, ca_cert=args.ca_cert)
        except ValueError as exc:
            return _fail(f"--url {exc}", USAGE_ERROR)
        except OSError as exc:  # ssl.SSLError included: a --ca-cert that cannot be read or is not PEM
            return _fail(f"--ca-cert {args.ca_cert}: {exc.strerror or exc}", USAGE_ERROR)
        try:
            status = call(client, args)
        except _Refusal as exc:
            return _fail(str(exc), exc.exit_code)
        except ReleaseRefused as exc:
            return _fail(exc.message, REFUSED)
        except ServerUnreachable as exc:
            return _fail(str(exc), REFUSED)
        if args.json:
            print(json.dumps(status, indent=2))
        else:
            from conch.cli.release_table import console, print_status

            print_status(status, console())
        return 0

    return run


def _act(action: str) -> Callable[[ReleaseClient, argparse.Namespace], dict[str, Any]]:
    return lambda client, args: client.act(args.model, action)


def _start(client: ReleaseClient, args: argparse.Namespace) -> dict[str, Any]:
    from conch.release.spec import spec_to_json

    return client.start(args.model, spec_to_json(_read_spec(args.file)))


def _read_spec(file: str) -> ReleaseSpec:
    """The release spec in ``file`` (``-``: stdin), checked with the server's rules; bad: exit 2."""
    from conch.core.errors import InvalidArgumentError
    from conch.release.spec import spec_from_yaml

    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _Refusal(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}", USAGE_ERROR) from None
    try:
        return spec_from_yaml(text, "stdin" if file == "-" else file)
    except InvalidArgumentError as exc:
        raise _Refusal(exc.message, USAGE_ERROR) from None


def _gate(args: argparse.Namespace) -> int:
    from conch.cli.release_table import console, print_judgement
    from conch.release.gate import limits_of
    from conch.release.prometheus_judge import (
        PrometheusClient,
        PrometheusUnavailableError,
        prometheus_figures,
    )
    from conch.release.sequential import LatencyLooks
    from conch.release.sequential_gate import judge_sequentially
    from conch.release.spec import GateSpec, format_duration

    try:
        spec = None if args.file is None else _read_spec(args.file)
    except _Refusal as exc:
        return _fail(str(exc), exc.exit_code)
    gate = GateSpec() if spec is None else spec.gate
    url: str | None = args.prometheus or gate.prometheus_url
    baseline: int | None = args.baseline or (spec.baseline if spec else None)
    candidate: int | None = args.candidate or (spec.candidate if spec else None)
    if url is None or baseline is None or candidate is None:
        given = (("--prometheus", url), ("--baseline", baseline), ("--candidate", candidate))
        missing = ", ".join(flag for flag, value in given if value is None)
        return _fail(f"release gate needs {missing} (or a --file that gives them)", USAGE_ERROR)
    limits = limits_of(gate)
    try:
        figures = prometheus_figures(
            PrometheusClient(url),
            args.model,
            str(baseline),
            str(candidate),
            args.window,
            gate.drift_threshold,
        )
    except PrometheusUnavailableError as exc:
        return _fail(exc.message, REFUSED)
    judgement = judge_sequentially(figures, limits, LatencyLooks())
    title = (
        f"Gate of {args.model} from Prometheus at {url}, the last {format_duration(args.window)}: "
        f"version {baseline} to version {candidate}"
    )
    print_judgement(title, (str(baseline), str(candidate)), figures, limits, judgement, console())
    return REFUSED if judgement.failed else 0


def _duration(text: str) -> float:
    from conch.core.errors import InvalidArgumentError
    from conch.release.spec import parse_duration

    try:
        return parse_duration(text, "--window")
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _fail(message: str, exit_code: int) -> int:
    print(f"conch: {message}", file=sys.stderr)
    return exit_code
