"""``conch serve``'s request logging flags: a record per inference, the audit sample, the access log.

Nothing imported here may import gRPC or tritonclient (tests/unit/cli/test_serve_arguments_import.py).
See docs/observability.md for what each writes.
"""

from __future__ import annotations

import argparse
from typing import Any

from conch.cli.arguments import at_least, boolean, fraction
from conch.cli.serve_flags import FlagGroup, setting


def names(text: str) -> tuple[str, ...]:
    """Tensor names, comma-separated (spaces around them ignored)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def request_log_flags(serve: FlagGroup) -> None:
    """What the server logs of each request (see conch docs observability)."""
    setting(
        serve,
        "--log-inferences",
        boolean,
        "false",
        "log one record per inference (request_id, model, version, input_hash, queue/compute/total ms, "
        "status, output summary; never the inputs); gRPC answers then echo x-request-id too",
    )
    setting(
        serve,
        "--log-sample-bodies",
        fraction,
        "0",
        "the share of inferences, from 0 to 1 (0.01: one in a hundred), written whole (request and "
        "responses) to --audit-log; 0: none",
    )
    setting(
        serve,
        "--log-redact",
        names,
        "",
        "tensor names, comma-separated, whose values the audit file never holds: their sha256 stands "
        "in their place",
    )
    setting(serve, "--audit-log", str, "", "the audit file of --log-sample-bodies (JSON lines)")
    setting(
        serve,
        "--audit-log-max-mb",
        at_least(1),
        "100",
        "the audit file is rotated at this size, keeping 3 older files (FILE.1 to FILE.3)",
    )
    setting(
        serve,
        "--access-log",
        boolean,
        "false",
        "log one record per HTTP request (client, method, path, status), through --log-format",
    )


def request_log_settings(args: argparse.Namespace) -> Any:
    """The flags as :class:`~conch.observability.inference_log.RequestLogSettings`; raises ValueError
    with the fix when they do not fit together."""
    from conch.observability.inference_log import RequestLogSettings

    if args.log_sample_bodies > 0 and not args.audit_log:
        raise ValueError("--log-sample-bodies needs --audit-log, the file the sampled bodies go to")
    if args.log_sample_bodies > 0 and args.workers > 1:
        raise ValueError(
            "--audit-log is written by one process, and each of --workers would rotate it on its own; "
            "use --log-sample-bodies without --workers"
        )
    return RequestLogSettings(
        inferences=args.log_inferences,
        sample_bodies=args.log_sample_bodies,
        redact=args.log_redact,
        audit_path=args.audit_log,
        audit_max_mb=args.audit_log_max_mb,
        access_log=args.access_log,
    )
