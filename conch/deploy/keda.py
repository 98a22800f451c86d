"""KEDA's ScaledObject for a deployment that reads streams (``--streams``), in place of conch's
HorizontalPodAutoscaler, and the TriggerAuthentication that gives KEDA the broker's password.

One autoscaler per Deployment: KEDA runs its own HPA, and two HPAs on one Deployment overwrite each
other's replica count every 15 s. So with streams ``hpa.yaml`` is not written, and the ScaledObject
carries both loads. It has a ``redis-streams`` trigger per stream read, and the trigger of the metric
the HPA would use (``--autoscale-on``): ``cpu``, or ``prometheus`` over the pending requests, with the
HPA's target and scale-down window. KEDA's HPA follows whichever trigger asks for the most pods, so a
stream backlog and a burst of requests each scale the pods.

Why the group's lag by default (``--stream-scale-on lag``): a conch consumer reads only as far ahead
as its batcher's queue takes, so the pending entries (read, not acknowledged) stop growing once every
replica is busy, however far the stream is behind. The lag counts what no consumer has read yet: it
grows with the backlog. It needs Redis 7 (``XINFO GROUPS``); ``pending`` works on Redis 5.

The ScaledObject names its HPA after the Deployment and asks KEDA to take over an HPA of that name, so
an HPA left by an earlier deploy without streams is adopted, not fought.
"""

from __future__ import annotations

from typing import Any

from conch.deploy.kubernetes import metadata
from conch.deploy.manifests import Manifest, register
from conch.deploy.scaling import PENDING_REQUESTS_METRIC, scale_down_behavior
from conch.deploy.settings import DeploySettings
from conch.deploy.streams import CA_KEY, PASSWORD_KEY, USERNAME_KEY
from conch.deploy.streams_file import StreamsFile

API_VERSION = "keda.sh/v1alpha1"
#: KEDA takes over an existing HPA of ``horizontalPodAutoscalerConfig.name`` instead of refusing.
TRANSFER_HPA_ANNOTATION = "scaledobject.keda.sh/transfer-hpa-ownership"
#: The redis-streams trigger's threshold parameter for each ``--stream-scale-on``.
STREAM_THRESHOLDS = {"lag": "lagCount", "pending": "pendingEntriesCount"}


def authentication_name(settings: DeploySettings) -> str:
    return f"{settings.name}-redis"


def stream_triggers(settings: DeploySettings, streams: StreamsFile) -> list[dict[str, Any]]:
    """A ``redis-streams`` trigger per (stream, consumer group) read; the password by reference."""
    triggers = []
    for stream, group in dict.fromkeys((source.input, source.group) for source in streams.streams):
        found: dict[str, str] = {
            "address": streams.address,
            "databaseIndex": str(streams.database),
            "stream": stream,
            "consumerGroup": group,
            STREAM_THRESHOLDS[settings.stream_scale_on]: str(settings.target_stream_lag),
        }
        if settings.stream_scale_on == "lag":
            # Below it KEDA reports the trigger inactive; it matters only for scaling to zero, which
            # minReplicaCount (at least 1) rules out.
            found["activationLagCount"] = "0"
        if streams.tls:
            found["enableTLS"] = "true"
        trigger: dict[str, Any] = {"type": "redis-streams", "metadata": found}
        if settings.stream_secret:
            trigger["authenticationRef"] = {"name": authentication_name(settings)}
        triggers.append(trigger)
    return triggers


def load_trigger(settings: DeploySettings) -> dict[str, Any]:
    """The HPA's metric as a KEDA trigger, with the HPA's target (``conch/deploy/scaling.py``)."""
    if settings.autoscale_on == "cpu":
        return {
            "type": "cpu",
            "metricType": "Utilization",
            "metadata": {"value": str(settings.target_cpu_percent)},
        }
    # The series prometheus-adapter serves the HPA per pod, summed: KEDA divides by the pods
    # (AverageValue), which is the HPA's average per pod.
    selector = f'job="{settings.name}", namespace="{settings.namespace}"'
    return {
        "type": "prometheus",
        "metadata": {
            "serverAddress": settings.prometheus_url,
            "query": f"sum({PENDING_REQUESTS_METRIC}{{{selector}}})",
            "threshold": str(settings.target_pending_requests),
        },
    }


def scaled_object(settings: DeploySettings) -> Manifest | None:
    if settings.streams is None:
        return None
    found = metadata(settings)
    found["annotations"] = {TRANSFER_HPA_ANNOTATION: "true"}
    return {
        "apiVersion": API_VERSION,
        "kind": "ScaledObject",
        "metadata": found,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": settings.name},
            "minReplicaCount": settings.replicas,
            "maxReplicaCount": settings.max_replicas,
            "advanced": {
                "horizontalPodAutoscalerConfig": {"name": settings.name, "behavior": scale_down_behavior()}
            },
            "triggers": [*stream_triggers(settings, settings.streams), load_trigger(settings)],
        },
    }


def trigger_authentication(settings: DeploySettings) -> Manifest | None:
    """The Secret's keys KEDA passes to the redis-streams triggers: ``password`` where the server reads
    one, ``username`` when the broker URL names a user, and the CA (``ca``) where ``tls_ca_file`` names
    one."""
    streams = settings.streams
    if streams is None or not settings.stream_secret:
        return None
    password = bool(streams.password_env or streams.password_file)
    keys = [(PASSWORD_KEY, PASSWORD_KEY)] if password else []
    keys += [(USERNAME_KEY, USERNAME_KEY)] if streams.username else []
    keys += [("ca", CA_KEY)] if streams.tls_ca_file else []
    return {
        "apiVersion": API_VERSION,
        "kind": "TriggerAuthentication",
        "metadata": metadata(settings, authentication_name(settings)),
        "spec": {
            "secretTargetRef": [
                {"parameter": parameter, "name": settings.stream_secret, "key": key}
                for parameter, key in keys
            ]
        },
    }


def replaced_autoscaler(settings: DeploySettings) -> str:
    return (
        "KEDA's autoscaler, in place of hpa.yaml (not written with --streams): it scales on each\n"
        f"stream's {settings.stream_scale_on} and on {settings.autoscale_on}, whichever asks for more pods. "
        "It needs KEDA 2.11 or later."
    )


register("scaledobject.yaml", scaled_object, preamble=replaced_autoscaler)
register("triggerauthentication.yaml", trigger_authentication)
