"""What Prometheus Operator needs to watch conch: the ServiceMonitor, and the place of the alerts.

The ServiceMonitor scrapes the Service's ``metrics`` port (8002) every 15 s, Triton's and conch's
families at ``/metrics``. The PrometheusRule belongs to the monitoring room (``conch/deploy/monitoring``),
which knows the golden-signal alerts: it calls ``manifests.register(PROMETHEUS_RULE_FILE, builder)`` when
imported, replacing :func:`placeholder_prometheus_rule` below, the one alert that needs no thresholds.
"""

from __future__ import annotations

from conch.deploy.kubernetes import metadata
from conch.deploy.manifests import PROMETHEUS_RULE_FILE, Manifest, register
from conch.deploy.settings import DeploySettings

SCRAPE_INTERVAL = "15s"


def service_monitor(settings: DeploySettings) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(settings),
        "spec": {
            "selector": {"matchLabels": dict(settings.labels)},
            "namespaceSelector": {"matchNames": [settings.namespace]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": SCRAPE_INTERVAL}],
        },
    }


def placeholder_prometheus_rule(settings: DeploySettings) -> Manifest:
    """Until the monitoring room registers its rule: conch's scrape target is down."""
    job = settings.name
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(settings),
        "spec": {
            "groups": [
                {
                    "name": "conch-availability",
                    "rules": [
                        {
                            "alert": "ConchTargetDown",
                            "expr": f'up{{job="{job}", namespace="{settings.namespace}"}} == 0',
                            "for": "5m",
                            "labels": {"severity": "critical"},
                            "annotations": {
                                "summary": "A conch pod's metrics cannot be scraped",
                                "description": "{{ $labels.pod }} has not answered /metrics for 5 minutes.",
                            },
                        }
                    ],
                }
            ]
        },
    }


register("servicemonitor.yaml", service_monitor)
register(PROMETHEUS_RULE_FILE, placeholder_prometheus_rule)
