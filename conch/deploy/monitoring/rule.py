"""The alerts as a Prometheus Operator ``PrometheusRule`` (``monitoring.coreos.com/v1``), and the same
rule for ``conch deploy kubernetes``.

The rule's ``spec`` is exactly the plain rules file (:func:`rule_groups`), so what ``promtool`` checks
and tests is what the operator loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from conch.deploy.monitoring.alerts import (
    DEFAULT_RUNBOOK_BASE,
    DEFAULT_SELECTOR,
    DEFAULT_THRESHOLDS,
    rule_groups,
)
from conch.deploy.monitoring.thresholds import AlertThresholds

if TYPE_CHECKING:
    from conch.deploy.settings import DeploySettings


def prometheus_rule(
    thresholds: AlertThresholds = DEFAULT_THRESHOLDS,
    *,
    name: str = "conch",
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
    selector: str = DEFAULT_SELECTOR,
) -> dict[str, Any]:
    """The golden-signal alerts as one PrometheusRule object (a plain dict, ready for YAML).

    ``conch deploy kubernetes`` includes this same object (:func:`kubernetes_prometheus_rule`);
    ``conch deploy monitoring`` writes it with the thresholds of its flags. ``labels`` go on the
    object's metadata: Prometheus Operator loads only the rules its ``ruleSelector`` matches (often
    ``release: <the Helm release>``). ``selector`` holds the label matchers of conch's series.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/name": "conch", **(labels or {})}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": rule_groups(thresholds, runbook_base, selector),
    }


def kubernetes_prometheus_rule(settings: DeploySettings) -> dict[str, Any]:
    """``prometheusrule.yaml`` of ``conch deploy kubernetes``: default thresholds, the deployment's
    name, namespace and labels; its ServiceMonitor's targets have the Service's name as their job and
    the deployment's namespace."""
    selector = f'job="{settings.name}", namespace="{settings.namespace}"'
    return prometheus_rule(
        name=settings.name, namespace=settings.namespace, labels=settings.labels, selector=selector
    )
