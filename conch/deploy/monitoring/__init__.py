"""Alerts and dashboards for a conch deployment: the PrometheusRule, the promtool rules file and the
Grafana dashboard that ``conch deploy monitoring`` writes (``docs/runbooks.md`` has one section per
alert).

``conch deploy kubernetes`` writes the same PrometheusRule: importing this package registers
:func:`~conch.deploy.monitoring.rule.kubernetes_prometheus_rule` as its ``prometheusrule.yaml``.
"""

from __future__ import annotations

from conch.deploy import manifests
from conch.deploy.monitoring.alert_rule import Alert
from conch.deploy.monitoring.alerts import alerts, rule_groups
from conch.deploy.monitoring.rule import kubernetes_prometheus_rule, prometheus_rule
from conch.deploy.monitoring.thresholds import AlertThresholds, thresholds_from

try:  # the placeholder rule registers on import; importing it first keeps it from replacing this one
    import conch.deploy.scraping  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - only while conch/deploy has no scraping module
    if exc.name != "conch.deploy.scraping":
        raise
manifests.register(manifests.PROMETHEUS_RULE_FILE, kubernetes_prometheus_rule)

__all__ = ["Alert", "AlertThresholds", "alerts", "prometheus_rule", "rule_groups", "thresholds_from"]
