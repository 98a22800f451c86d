"""The Deployment and the Service that serve a model repository with ``conch serve``.

The choices, each for a reason a reader of the YAML can check (``docs/deploy.md`` says more):

- **Probes.** The startup probe asks ``/v2/health/live`` every 5 s for 180 s: conch answers HTTP only
  once the repository is loaded, so live already waits for the load, and a model that cannot load
  keeps the pod out of the Service (readiness) instead of restarting it forever. Readiness asks
  ``/v2/health/ready`` (every model READY, ``--strict-readiness``), or with ``--readiness deep``
  ``/v2/health/deep``, which also runs a probe inference per model. Deep is not the default: under
  saturation the probe inference queues behind traffic, so every replica can miss its timeout at
  once and the Service loses them all; it is safe where models answer well inside
  ``--health-probe-timeout-ms`` at peak. Liveness asks ``/v2/health/live`` only: restarting a pod
  cures a wedged process, not a slow model.
- **Stopping.** On SIGTERM conch turns not-ready and refuses new inferences, so ``preStop`` first
  sleeps :data:`PRE_STOP_SECS` while the endpoints controller takes the pod out of the Service; the
  grace period covers that sleep, ``--exit-timeout-secs`` of draining, and a margin.
- **Filesystem.** The root filesystem is read-only and the user is not root. conch writes only to
  the folders mounted as ``emptyDir`` here, each named by the variable that moves it there.
  ``/dev/shm`` is a memory-backed ``emptyDir``: the Python backend's tensors cross in it, and its
  size counts against the memory limit.
- **CPU.** A CPU request and no limit by default: CFS quotas throttle a server in bursts, which is
  latency; the request already gives the pod its share.
"""

from __future__ import annotations

from typing import Any

from conch.deploy.manifests import Manifest, register
from conch.deploy.quantities import parse_quantity
from conch.deploy.releases import DIGEST_ANNOTATION, digest, releases_name
from conch.deploy.settings import GRPC_PORT, HTTP_PORT, IMAGE_MODELS, METRICS_PORT, DeploySettings
from conch.deploy.streams import (
    STREAMS_DIGEST_ANNOTATION,
    streams_arguments,
    streams_digest,
    streams_environment,
    streams_mounts,
    streams_volumes,
)
from conch.runtime.proxy_count import auto_proxies

#: Seconds ``preStop`` waits before conch sees SIGTERM: the endpoints controller and kube-proxy take a
#: few seconds to stop sending new connections to a terminating pod.
PRE_STOP_SECS = 10
#: Seconds of grace beyond ``preStop`` and ``--exit-timeout-secs``, for the process to exit.
EXIT_MARGIN_SECS = 5
#: The image's non-root user and group (the Dockerfile's ``conch`` user).
RUN_AS = 10001
#: The startup probe's budget: a big model's load and warm-up.
STARTUP_BUDGET_SECS = 180
STARTUP_PERIOD_SECS = 5

#: The release state's folder (an ``emptyDir``: it is lost with the pod).
STATE_FOLDER = "/var/lib/conch/state"
#: Writable folders, as (volume name, mount path, the ``conch serve`` variable that points there).
WRITABLE = [
    ("tmp", "/tmp", None),
    ("s3-cache", "/var/cache/conch/s3", "CONCH_MODEL_CACHE_DIR"),
    ("python-envs", "/var/cache/conch/envs", "CONCH_CACHE_DIR"),
    ("release-state", STATE_FOLDER, "CONCH_STATE_DIR"),
    ("audit-log", "/var/log/conch", None),
]

#: The audit file of ``--log-sample-bodies``, and the most its folder holds: the file and its three
#: rotated copies at ``--audit-log-max-mb`` 100, with room to spare; beyond it the kubelet evicts the pod.
AUDIT_LOG = "/var/log/conch/audit.jsonl"
AUDIT_LOG_LIMIT = "512Mi"
#: Where ``--tls-secret``'s certificate and key are mounted.
TLS_FOLDER = "/etc/conch/tls"


def metadata(settings: DeploySettings, name: str | None = None) -> dict[str, Any]:
    return {"name": name or settings.name, "namespace": settings.namespace, "labels": dict(settings.labels)}


def deployment(settings: DeploySettings) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(settings),
        # No spec.replicas: the HorizontalPodAutoscaler owns the count (minReplicas is --replicas), and a
        # count in Git would be reset on every Argo CD sync.
        "spec": {
            "selector": {"matchLabels": dict(settings.labels)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": template_metadata(settings), "spec": pod_spec(settings)},
        },
    }


def template_metadata(settings: DeploySettings) -> dict[str, Any]:
    found: dict[str, Any] = {"labels": dict(settings.labels)}
    annotations = {}
    if settings.releases:
        annotations[DIGEST_ANNOTATION] = digest(settings.releases)
    streams = streams_digest(settings)
    if streams:
        annotations[STREAMS_DIGEST_ANNOTATION] = streams
    if annotations:
        found["annotations"] = annotations
    return found


def pod_spec(settings: DeploySettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": PRE_STOP_SECS + settings.exit_timeout_secs + EXIT_MARGIN_SECS,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": dict(settings.labels)},
            }
        ],
        "containers": [container(settings)],
        "volumes": volumes(settings),
    }
    if settings.gpus:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return spec


def container(settings: DeploySettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "conch",
        "image": settings.image,
        "args": ["serve", settings.repository_path, *streams_arguments(settings)],
        "env": environment(settings),
    }
    if settings.s3_secret:
        spec["envFrom"] = [{"secretRef": {"name": settings.s3_secret}}]
    spec |= {
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": resources(settings),
        "startupProbe": _probe(
            settings, "/v2/health/live", STARTUP_PERIOD_SECS, STARTUP_BUDGET_SECS // STARTUP_PERIOD_SECS
        ),
        "readinessProbe": readiness_probe(settings),
        "livenessProbe": _probe(settings, "/v2/health/live", 10, 3, timeout=5),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRE_STOP_SECS)]}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": volume_mounts(settings),
    }
    return spec


def environment(settings: DeploySettings) -> list[dict[str, Any]]:
    variables = {
        "CONCH_EXIT_TIMEOUT_SECS": str(settings.exit_timeout_secs),
        "CONCH_LOG_FORMAT": "json",
        # Python and boto3 look under HOME for caches and config; the root filesystem is read-only.
        "HOME": "/tmp",
        "CONCH_PROXIES": pod_frontends(settings.cpu_limit or settings.cpu),
    }
    variables |= {variable: path for _, path, variable in WRITABLE if variable}
    # Rejected versions must stay rejected on every pod and after a restart: a shared store when one is
    # known, else the pod's state folder (conch deploy warns that it is not shared).
    variables["CONCH_RELEASE_STORE"] = settings.shared_release_store or f"{STATE_FOLDER}/verdicts"
    if settings.tls_secret:
        for port in ("HTTP", "GRPC"):
            variables[f"CONCH_{port}_USE_SSL"] = "true"
            variables[f"CONCH_{port}_SERVER_CERT"] = f"{TLS_FOLDER}/tls.crt"
            variables[f"CONCH_{port}_SERVER_KEY"] = f"{TLS_FOLDER}/tls.key"
    # Written only when sampling is on (CONCH_LOG_SAMPLE_BODIES above 0); rotated at 100 MB, 3 kept.
    variables["CONCH_AUDIT_LOG"] = AUDIT_LOG
    plain: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in variables.items()]
    return plain + streams_environment(settings)


def pod_frontends(cpu: str) -> str:
    """``CONCH_PROXIES`` for a pod of ``cpu`` (its CPU limit, else its request): ``--proxies
    auto``'s rule applied to what the pod is given. Without a CPU limit the container sees every
    core of its node, and ``auto`` would start proxies for cores the pod does not get, each
    holding its own memory under the pod's limit."""
    return str(auto_proxies(int(parse_quantity(cpu, "cpu"))))


def resources(settings: DeploySettings) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": settings.cpu, "memory": settings.memory}
    limits: dict[str, Any] = {"memory": settings.memory_limit}
    if settings.cpu_limit:
        limits["cpu"] = settings.cpu_limit
    if settings.gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(settings.gpus)
    return {"requests": requests, "limits": limits}


def readiness_probe(settings: DeploySettings) -> dict[str, Any]:
    if settings.readiness == "deep":
        # Deep health caches one evaluation for --health-cache-secs (5) and bounds each model's probe
        # by --health-probe-timeout-ms (1 s); the probe's own timeout leaves room for both.
        return _probe(settings, "/v2/health/deep", 10, 3, timeout=5)
    return _probe(settings, "/v2/health/ready", 5, 3, timeout=2)


def _probe(
    settings: DeploySettings, path: str, period: int, failures: int, timeout: int = 2
) -> dict[str, Any]:
    """An HTTP probe, over HTTPS with ``--tls-secret`` (the kubelet does not check the certificate)."""
    return {
        "httpGet": {"path": path, "port": "http", "scheme": "HTTPS" if settings.tls_secret else "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def volumes(settings: DeploySettings) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"name": name, "emptyDir": {"sizeLimit": AUDIT_LOG_LIMIT} if name == "audit-log" else {}}
        for name, _, _ in WRITABLE
    ]
    found.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}})
    if settings.models.kind == "pvc":
        found.append({"name": "models", "persistentVolumeClaim": {"claimName": settings.models.location}})
    elif settings.models.kind == "hostpath":
        found.append({"name": "models", "hostPath": {"path": settings.models.location, "type": "Directory"}})
    if settings.releases:
        found.append({"name": "releases", "configMap": {"name": releases_name(settings)}})
    if settings.tls_secret:
        # Readable by conch's group only (fsGroup), not by every user of the pod.
        found.append({"name": "tls", "secret": {"secretName": settings.tls_secret, "defaultMode": 0o440}})
    return found + streams_volumes(settings)


def volume_mounts(settings: DeploySettings) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": name, "mountPath": path} for name, path, _ in WRITABLE]
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if settings.models.kind in ("pvc", "hostpath"):
        mounts.append({"name": "models", "mountPath": IMAGE_MODELS, "readOnly": True})
    mounts += [
        {
            "name": "releases",
            "mountPath": f"{IMAGE_MODELS}/{model}/release.yaml",
            "subPath": model,
            "readOnly": True,
        }
        for model in sorted(settings.releases)
    ]
    if settings.tls_secret:
        mounts.append({"name": "tls", "mountPath": TLS_FOLDER, "readOnly": True})
    return mounts + streams_mounts(settings)


def service(settings: DeploySettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(settings),
        "spec": {
            "selector": dict(settings.labels),
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
                grpc_port(settings),
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def grpc_port(settings: DeploySettings) -> dict[str, Any]:
    port = {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"}
    if not settings.tls_secret:
        # appProtocol tells meshes and gateways the port speaks HTTP/2 in clear text (gRPC); over TLS
        # they negotiate HTTP/2 in the handshake instead.
        port["appProtocol"] = "kubernetes.io/h2c"
    return port


register("deployment.yaml", deployment)
register("service.yaml", service)
