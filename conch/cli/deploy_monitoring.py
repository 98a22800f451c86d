"""``conch deploy monitoring [REPO] -o DIR``: the golden-signal alerts and the Grafana dashboard.

Writes ``prometheusrule.yaml`` (Prometheus Operator), ``rules.yaml`` (the same rules for ``promtool``
or a plain Prometheus) and ``dashboard.json``. Every threshold is a flag (``conch/deploy/monitoring/
thresholds.py``). Given REPO, it is checked first as ``conch deploy kubernetes`` checks it, and nothing
is written if it does not validate. Exit codes as ``conch deploy``'s: 0 written, 1 REPO does not
validate, 2 a usage error (a bad threshold, a REPO that is no repository).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.deploy.monitoring.alerts import DEFAULT_RUNBOOK_BASE, DEFAULT_SELECTOR
from conch.deploy.monitoring.thresholds import THRESHOLD_FLAGS, AlertThresholds

if TYPE_CHECKING:
    from conch.deploy.repository_check import RepositoryFacts


def add_monitoring_target(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "monitoring",
        help="PrometheusRule alerts, a promtool rules file and a Grafana dashboard",
        description="Write prometheusrule.yaml, rules.yaml and dashboard.json: alerts on latency (P95, "
        "P99), failures, traffic day over day, readiness, fallbacks, circuits, rollbacks, queue time, "
        "GPU memory, stream lag, dead letters, the stream broker, contract refusals and out-of-range "
        "values, each linked to its section of docs/runbooks.md (conch docs runbooks).",
    )
    parser.add_argument("repository", type=Path, nargs="?", help="a model repository to check first")
    parser.add_argument("-o", "--output", type=Path, required=True, help="folder the files go to")
    parser.add_argument(
        "--runbook-base-url",
        default=DEFAULT_RUNBOOK_BASE,
        help=f"where your team reads runbooks.md, for the alerts' links (default {DEFAULT_RUNBOOK_BASE})",
    )
    parser.add_argument(
        "--selector",
        default=DEFAULT_SELECTOR,
        help=f'label matchers of conch\'s series in every alert, e.g. \'job="conch", namespace="ml"\' '
        f"(default {DEFAULT_SELECTOR})",
    )
    parser.add_argument("--name", default="conch", help="the PrometheusRule's name (default conch)")
    parser.add_argument("--namespace", default=None, help="the PrometheusRule's namespace (default none)")
    parser.add_argument(
        "--rule-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label the operator's ruleSelector matches, e.g. release=kube-prometheus-stack (repeatable)",
    )
    kinds = {each.name: each.type for each in fields(AlertThresholds)}
    for flag in THRESHOLD_FLAGS:
        duration = kinds[flag.field] == "str"
        parser.add_argument(
            flag.flag,
            dest=flag.field,
            type=str if duration else float,
            metavar="DURATION" if duration else flag.field.rsplit("_", 1)[-1].upper(),
            help=flag.help,
        )
    parser.set_defaults(run=_run_monitoring)


def _run_monitoring(args: argparse.Namespace) -> int:
    from conch.cli.progress import print_table
    from conch.core.errors import InvalidArgumentError
    from conch.deploy.monitoring import thresholds_from
    from conch.deploy.monitoring.alerts import check_selector
    from conch.deploy.monitoring.files import write_monitoring

    labels = {}
    for pair in args.rule_label:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            print(
                f"conch deploy: --rule-label {pair!r} is not KEY=VALUE, e.g. release=prometheus",
                file=sys.stderr,
            )
            return 2
        labels[key] = value
    try:
        thresholds = thresholds_from({flag.field: getattr(args, flag.field) for flag in THRESHOLD_FLAGS})
        check_selector(args.selector)
    except InvalidArgumentError as exc:
        print(f"conch deploy: {exc}", file=sys.stderr)
        return 2
    if args.repository is not None:
        checked = checked_repository(args.repository)
        if isinstance(checked, int):
            return checked
    written = write_monitoring(
        args.output,
        thresholds,
        runbook_base=args.runbook_base_url,
        selector=args.selector,
        name=args.name,
        namespace=args.namespace,
        labels=labels,
    )
    rows = [(str(file.path), file.what) for file in written]
    print_table(("file", "what"), rows, title=f"conch deploy: {len(rows)} monitoring files written")
    return 0


def checked_repository(repository: Path, models: int | None = None) -> RepositoryFacts | int:
    """The facts of ``repository`` once it validates (``models``: how many a bar counts); else the
    exit code, after printing why: 2 when it is no model or repository, 1 with the validator's
    findings. Both ``conch deploy kubernetes`` and ``conch deploy monitoring`` check this way."""
    from conch.cli.progress import Steps
    from conch.deploy.repository_check import check_repository
    from conch.validation import NotAModelOrRepositoryError
    from conch.validation.report import as_table

    try:
        with Steps(models, prefix="conch deploy: ") as steps:
            steps.step(f"checking {repository}")
            facts = check_repository(repository, steps.step, steps.advance if models else None)
    except NotAModelOrRepositoryError as exc:
        print(f"conch deploy: {exc}", file=sys.stderr)
        return 2
    if facts.has_errors:
        print(as_table(facts.models, facts.findings))
        print(
            f"conch deploy: {repository} does not validate; fix the errors above (conch validate checks "
            "it alone), then deploy again. Nothing was written.",
            file=sys.stderr,
        )
        return 1
    return facts
