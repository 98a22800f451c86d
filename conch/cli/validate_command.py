"""``conch validate PATH [--json]``: check a model folder or a whole repository before serving or packaging.

Exit codes: 0 when there is no error (warnings and infos allowed), 1 when there is at least one, 2 for a
usage error (the path is missing, or is neither a model folder nor a repository). Progress goes to
stderr; with ``--json`` stdout holds the JSON document and nothing else.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.reference_flag import add_reference_argument, record_reference

if TYPE_CHECKING:
    from conch.core.findings import Finding


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "validate",
        help="check a model folder or repository: config, graph, warm-up, determinism, batch invariance",
        description="Check a model folder (config.pbtxt and/or numeric version folders) or a repository "
        "of them. Exit 0: no errors; 1: errors; 2: usage error. Finding codes: conch docs validation.",
    )
    parser.add_argument("path", type=Path, help="a model folder or a model repository")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")
    parser.add_argument(
        "--release-store",
        default=None,
        help="the release store the servers share, to name the versions a release rejected "
        "(CONCH_RELEASE_STORE; default: .conch-verdicts inside the repository, when it exists)",
    )
    add_reference_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from conch.cli.progress import Steps, stdout_console
    from conch.validation import NotAModelOrRepositoryError, model_folders, validate_model
    from conch.validation.report import as_json, as_table

    try:
        folders = model_folders(args.path)
    except NotAModelOrRepositoryError as exc:
        print(f"conch validate: {exc}", file=sys.stderr)
        return 2
    if args.reference is not None and folders != [args.path]:
        print("conch validate: --reference takes one model folder, not a repository", file=sys.stderr)
        return 2
    findings = []
    with Steps(len(folders), suffix="…", label=f"conch validate {args.path}") as steps:
        for folder in folders:
            steps.step(folder.name)
            findings += validate_model(folder, steps.step)
            steps.advance()
    from conch.validation.rejections import rejection_findings, store_location

    repository = args.path.parent if folders == [args.path] else args.path
    findings += rejection_findings(folders, store_location(repository, args.release_store))
    if args.reference is not None:
        code = _record_reference(args)
        if code:
            return code
    models = [folder.name for folder in folders]
    if args.json:
        print(as_json(models, findings))
    elif stdout_console().is_terminal:
        _print_rich_table(models, findings)
    else:
        print(as_table(models, findings))
    return 1 if any(finding.is_error for finding in findings) else 0


def _record_reference(args: argparse.Namespace) -> int:
    """``--reference``: record the highest version's expected agreement; its line goes to stderr, so
    that ``--json`` keeps stdout for the findings."""
    from conch.validation.agreement_interval import ReferenceError

    try:
        print(record_reference(args.path, None, args.reference, args.release_store), file=sys.stderr)
    except ReferenceError as exc:
        print(f"conch validate: --reference: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_rich_table(models: list[str], findings: list[Finding]) -> None:
    """The findings as a ``rich`` table, each hint under its message, then the summary line."""
    from conch.cli.progress import print_table
    from conch.validation.report import ordered, summary_line

    rows = [
        (f.model, f.severity.value, f.code, f.field, f"{f.message}\nhint: {f.hint}" if f.hint else f.message)
        for f in ordered(findings)
    ]
    if rows:
        print_table(["MODEL", "SEVERITY", "CODE", "FIELD", "MESSAGE"], rows)
    print(summary_line(models, findings))
