"""What Prometheus Operator needs to scrape conch: the ServiceMonitor.

It scrapes the Service's ``metrics`` port (8002) every 15 s, Triton's and conch's families at
``/metrics``; its targets get the Service's name as their ``job``, which the alerts select on. The
PrometheusRule is the monitoring room's (``conch/deploy/monitoring``), which registers
``prometheusrule.yaml`` with ``manifests.register`` when imported.
"""

from __future__ import annotations

from conch.deploy.kubernetes import metadata
from conch.deploy.manifests import Manifest, register
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


register("servicemonitor.yaml", service_monitor)
