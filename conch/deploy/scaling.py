"""How many pods serve, and how many may be away at once: the HorizontalPodAutoscaler and the
PodDisruptionBudget.

The autoscaler scales on CPU by default, since every cluster has the metrics server. Its alternative
scales on ``nv_inference_pending_request_count``, the requests each pod holds in its queues and
instances, read through prometheus-adapter (the adapter rule is in ``docs/deploy.md``): it rises as
soon as a pod falls behind, before latency does, and whatever the model's CPU profile. Whichever is
not active (``--autoscale-on``) is written as comment lines above the active one in ``hpa.yaml``, so
swapping is an edit, and both are validated by the tests. With ``--streams`` KEDA's ScaledObject
(``conch/deploy/keda.py``) carries the same metric beside the streams' lag, and no HPA is written: KEDA
runs its own HPA, and two autoscalers on one Deployment would undo each other's counts.
"""

from __future__ import annotations

from typing import Any

import yaml

from conch.deploy.kubernetes import metadata
from conch.deploy.manifests import Manifest, register
from conch.deploy.settings import DeploySettings

#: The per-pod series prometheus-adapter exposes to the autoscaler (conch's own gauge, summed per pod).
PENDING_REQUESTS_METRIC = "nv_inference_pending_request_count"
#: Seconds of lower recommendations before scaling down: a model's load and warm-up make a new pod
#: expensive, so a short lull must not cost one.
SCALE_DOWN_WINDOW_SECS = 300


def autoscaler(settings: DeploySettings, on: str | None = None) -> Manifest:
    """The HorizontalPodAutoscaler scaling on ``on`` (default ``--autoscale-on``): cpu or pending-requests."""
    on = on or settings.autoscale_on
    if on == "cpu":
        metric = {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": settings.target_cpu_percent},
            },
        }
    else:
        metric = {
            "type": "Pods",
            "pods": {
                "metric": {"name": PENDING_REQUESTS_METRIC},
                "target": {"type": "AverageValue", "averageValue": str(settings.target_pending_requests)},
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(settings),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": settings.name},
            "minReplicas": settings.replicas,
            "maxReplicas": settings.max_replicas,
            "metrics": [metric],
            "behavior": scale_down_behavior(),
        },
    }


def scale_down_behavior() -> dict[str, Any]:
    """The autoscaler's ``behavior``: KEDA's HPA gets the same (``conch/deploy/keda.py``)."""
    return {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_SECS}}


def alternate_autoscaler(settings: DeploySettings) -> str:
    """The autoscaler on the other metric, as comment lines."""
    other = "pending-requests" if settings.autoscale_on == "cpu" else "cpu"
    text = yaml.safe_dump(autoscaler(settings, other), sort_keys=False, width=100)
    intro = f"The same autoscaler on {other} instead (conch deploy kubernetes --autoscale-on {other}); " + (
        "it needs prometheus-adapter's rule from docs/deploy.md." if other != "cpu" else ""
    )
    return "\n".join([intro.strip(), "", *text.splitlines()])


def disruption_budget(settings: DeploySettings) -> Manifest:
    """At most one pod away for a drain or an upgrade; with one replica, one pod may still go (a budget
    of minAvailable 1 on one pod would block every node drain)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(settings),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(settings.labels)}},
    }


def conch_autoscaler(settings: DeploySettings) -> Manifest | None:
    """``hpa.yaml``: the HorizontalPodAutoscaler, unless KEDA's ScaledObject scales the Deployment."""
    return None if settings.streams else autoscaler(settings)


register("hpa.yaml", conch_autoscaler, preamble=alternate_autoscaler)
register("pdb.yaml", disruption_budget)
