"""``conch deploy monitoring``'s output folder: the PrometheusRule, the same rules as a plain Prometheus
rules file, and the Grafana dashboard.

Why the plain file beside the PrometheusRule: ``promtool check rules`` and ``promtool test rules`` read
rules files, not Kubernetes objects, and a Prometheus outside Kubernetes loads it with ``rule_files``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conch.core.version import VERSION
from conch.deploy.monitoring.alerts import DEFAULT_RUNBOOK_BASE, DEFAULT_SELECTOR, rule_groups
from conch.deploy.monitoring.rule import prometheus_rule
from conch.deploy.monitoring.thresholds import AlertThresholds

PROMETHEUS_RULE_FILE = "prometheusrule.yaml"
RULES_FILE = "rules.yaml"
DASHBOARD_FILE = "dashboard.json"


@dataclass(frozen=True)
class MonitoringFile:
    path: Path
    what: str


def _yaml(document: dict[str, Any]) -> str:
    header = f"# Written by conch {VERSION} (conch deploy monitoring); re-run it rather than editing.\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


def write_monitoring(
    folder: Path,
    thresholds: AlertThresholds,
    *,
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
    selector: str = DEFAULT_SELECTOR,
    name: str = "conch",
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[MonitoringFile]:
    """Write the three files into ``folder`` (created), replacing what is there."""
    from conch.deploy.monitoring.dashboard import dashboard  # the SDK loads only when a board is made

    folder.mkdir(parents=True, exist_ok=True)
    rule = prometheus_rule(
        thresholds,
        name=name,
        namespace=namespace,
        labels=labels,
        runbook_base=runbook_base,
        selector=selector,
    )
    written = [
        (PROMETHEUS_RULE_FILE, _yaml(rule), "PrometheusRule (monitoring.coreos.com/v1)"),
        (RULES_FILE, _yaml(rule_groups(thresholds, runbook_base, selector)), "Prometheus rules file"),
        (DASHBOARD_FILE, json.dumps(dashboard(), indent=2, sort_keys=True) + "\n", "Grafana dashboard"),
    ]
    files = []
    for filename, text, what in written:
        path = folder / filename
        path.write_text(text, encoding="utf-8")
        files.append(MonitoringFile(path, what))
    return files
