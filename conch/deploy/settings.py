"""What ``conch deploy kubernetes`` is asked for: flags, a ``deploy.yaml``, and their defaults.

Every setting has one row in :data:`KUBERNETES_SETTINGS`: its flag, the parser that checks it, its
default and its meaning. The CLI makes a flag of each row and ``deploy.yaml`` accepts the flag's name as
a key (``memory-limit: 3Gi``), both read by the same parser, so ``4Gb`` is refused the same way wherever
it is written. A flag wins over the file; the file wins over the default.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conch.core.version import VERSION
from conch.deploy.quantities import QuantityError, cpu_quantity, memory_quantity, scaled_memory
from conch.deploy.streams_file import StreamsFile, streams_file
from conch.release.verdict_store import VERDICTS_FOLDER

#: conch serve's ports (Triton's), the same in every pod.
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
#: Where the image keeps the model repository it was built with (the Dockerfile's MODEL_REPOSITORY).
IMAGE_MODELS = "/models"
#: Memory limit over request when --memory-limit is not given: allocator jitter stays under the limit.
MEMORY_LIMIT_FACTOR = 1.3
#: Where KEDA asks for conch's metrics with --streams and --autoscale-on pending-requests: the Service
#: Prometheus Operator creates for its Prometheus (kube-prometheus-stack installs it in ``monitoring``).
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


class DeploySettingsError(ValueError):
    """A setting that cannot be deployed; the message names it and says what would do."""


@dataclass(frozen=True)
class ModelSource:
    """Where the pod finds the model repository: ``image`` (baked in at /models), ``pvc`` (a claim's
    name), ``hostpath`` (a node's folder) or ``s3`` (an ``s3://`` URI conch mirrors at start)."""

    kind: str
    location: str = ""

    def __str__(self) -> str:
        return {"image": "image", "pvc": f"pvc:{self.location}", "hostpath": f"hostpath:{self.location}",
                "s3": self.location}[self.kind]  # fmt: skip


def model_source(text: str) -> ModelSource:
    if text == "image":
        return ModelSource("image")
    if text.startswith("s3://") and len(text) > len("s3://"):
        return ModelSource("s3", text)
    kind, _, location = text.partition(":")
    if kind == "pvc" and location:
        return ModelSource("pvc", location)
    if kind == "hostpath" and location.startswith("/"):
        return ModelSource("hostpath", location)
    raise argparse.ArgumentTypeError(
        f"'{text}' is not a model source: give image (the repository baked into the image), "
        "pvc:CLAIM (a PersistentVolumeClaim), hostpath:/ABSOLUTE/PATH, or s3://bucket/prefix"
    )


def _quantity(check: Callable[[str, str], str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            return check(str(text), "")
        except QuantityError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "quantity"
    return parse


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(str(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is under {minimum}")
        return value

    parse.__name__ = "count"
    return parse


def _choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in values:
            raise argparse.ArgumentTypeError(f"'{text}' is not one of {', '.join(values)}")
        return text

    parse.__name__ = "choice"
    return parse


@dataclass(frozen=True)
class Setting:
    """One row: ``flag`` (also the ``deploy.yaml`` key, without ``--``), parser, default (None: unset)."""

    flag: str
    parse: Callable[[str], Any]
    default: str | None
    help: str

    @property
    def key(self) -> str:
        return self.flag.removeprefix("--")

    @property
    def attribute(self) -> str:
        return self.key.replace("-", "_")


KUBERNETES_SETTINGS = [
    Setting("--name", str, "conch", "name of the Deployment, Service and every other object"),
    Setting("--namespace", str, "default", "namespace the objects go to"),
    Setting("--image", str, f"conch:{VERSION}", "image the pods run (built from the Dockerfile)"),
    Setting("--models", model_source, "image",
            "where the pods find the repository: image (baked in at /models), pvc:CLAIM, "
            "hostpath:/PATH or s3://bucket/prefix"),
    Setting("--s3-secret", str, None,
            "a Secret whose keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL...) become "
            "the pods' environment, for an s3:// repository; default none"),
    Setting("--tls-secret", str, None,
            "a kubernetes.io/tls Secret (tls.crt, tls.key) the pods serve HTTPS and gRPC over TLS with; the "
            "probes then ask over HTTPS; default none (plain, for an ingress or mesh that ends TLS)"),
    Setting("--replicas", _count(1), "2", "pods, and the autoscaler's minimum"),
    Setting("--max-replicas", _count(1), "10", "the autoscaler's maximum"),
    Setting("--cpu", _quantity(cpu_quantity), "1", "CPU request per pod"),
    Setting("--cpu-limit", _quantity(cpu_quantity), None, "CPU limit per pod; default none (docs: deploy)"),
    Setting("--memory", _quantity(memory_quantity), "2Gi", "memory request per pod"),
    Setting("--memory-limit", _quantity(memory_quantity), None,
            f"memory limit per pod; default {MEMORY_LIMIT_FACTOR} x --memory"),
    Setting("--gpus", _count(0), "0", "nvidia.com/gpu per pod (request and limit)"),
    Setting("--shm-size", _quantity(memory_quantity), None,
            "size of the memory-backed /dev/shm; default 64Mi per Python backend instance, at least 64Mi"),
    Setting("--exit-timeout-secs", _count(0), "30",
            "conch serve --exit-timeout-secs; the pod's grace period is 15 s more"),
    Setting("--readiness", _choice("ready", "deep"), "ready",
            "readiness probe: ready (/v2/health/ready) or deep (/v2/health/deep, see docs)"),
    Setting("--autoscale-on", _choice("cpu", "pending-requests"), "cpu",
            "the autoscaler's metric: cpu, or pending-requests (nv_inference_pending_request_count through "
            "prometheus-adapter); the other is written as a comment"),
    Setting("--target-cpu-percent", _count(1), "70", "the autoscaler's CPU utilisation target"),
    Setting("--target-pending-requests", _count(1), "8", "the autoscaler's pending requests per pod"),
    Setting("--release-store", str, None,
            "where every pod shares the versions releases rejected, promoted and approved (conch serve "
            "--release-store): s3://bucket/prefix or a folder on a shared volume; default: .conch-verdicts "
            "beside an s3:// repository, else each pod's own state folder (not shared: a warning says so)"),
    Setting("--streams", streams_file, None,
            "a streams.yaml (conch serve --streams): shipped in a ConfigMap, and a KEDA ScaledObject on its "
            "streams' lag and the autoscaler's metric replaces the HorizontalPodAutoscaler; default none"),
    Setting("--stream-secret", str, None,
            "a Secret holding the broker's password (key password; key username too when streams.yaml "
            "names a user), given to the pods as password_env or password_file says and to KEDA's "
            "TriggerAuthentication; default none (no password)"),
    Setting("--stream-scale-on", _choice("lag", "pending"), "lag",
            "KEDA's stream metric: lag (entries not yet delivered to the group; Redis 7+) or pending "
            "(delivered, not yet acknowledged)"),
    Setting("--target-stream-lag", _count(1), "100", "stream entries per pod the ScaledObject aims for"),
    Setting("--prometheus-url", str, DEFAULT_PROMETHEUS_URL,
            "the Prometheus KEDA asks for the pending-requests trigger (with --streams and --autoscale-on "
            "pending-requests)"),
]  # fmt: skip


@dataclass(frozen=True)
class DeploySettings:
    """Everything the Kubernetes manifests are built from; ``repository`` is the local folder checked."""

    repository: Path
    name: str
    namespace: str
    image: str
    models: ModelSource
    s3_secret: str | None
    tls_secret: str | None
    replicas: int
    max_replicas: int
    cpu: str
    cpu_limit: str | None
    memory: str
    memory_limit: str
    gpus: int
    shm_size: str
    exit_timeout_secs: int
    readiness: str
    autoscale_on: str
    target_cpu_percent: int
    target_pending_requests: int
    release_store: str | None
    streams: StreamsFile | None
    stream_secret: str | None
    stream_scale_on: str
    target_stream_lag: int
    prometheus_url: str
    #: Each model's ``release.yaml`` text, shipped in a ConfigMap (``conch/deploy/releases.py``); empty
    #: unless the repository is baked into the image (a volume or a bucket holds its own files).
    releases: dict[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": "conch", "app.kubernetes.io/instance": self.name}

    @property
    def shared_release_store(self) -> str | None:
        """The release store every pod shares: ``--release-store``, else beside an ``s3://``
        repository; None when nothing shared is known (each pod keeps its own)."""
        if self.release_store:
            return self.release_store
        if self.models.kind == "s3":
            return f"{self.models.location.rstrip('/')}/{VERDICTS_FOLDER}"
        return None

    @property
    def repository_path(self) -> str:
        """The repository ``conch serve`` is given inside the pod."""
        return self.models.location if self.models.kind == "s3" else IMAGE_MODELS


def read_deploy_file(path: Path) -> dict[str, Any]:
    """``deploy.yaml`` as a mapping of setting keys; unknown keys are refused with the known ones."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeploySettingsError(f"cannot read {path.name}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise DeploySettingsError(f"{path.name} is not YAML: {exc}") from None
    document = {} if document is None else document
    if not isinstance(document, dict):
        raise DeploySettingsError(f"{path.name} must be a mapping of settings, such as 'replicas: 3'")
    known = {setting.key for setting in KUBERNETES_SETTINGS}
    for key in document:
        if key not in known:
            raise DeploySettingsError(
                f"{path.name}: unknown setting '{key}'; known settings: {', '.join(sorted(known))}"
            )
    return document


def _check_stream_secret(streams: StreamsFile | None, secret: str | None) -> None:
    """A Secret exactly when the streams file says where ``conch serve`` reads a password or a CA."""
    if streams is None:
        if secret:
            raise DeploySettingsError(
                "--stream-secret is the broker's password: give --streams streams.yaml too"
            )
        return
    reads = streams.password_env or streams.password_file
    if reads and not secret:
        raise DeploySettingsError(
            f"{streams.filename} reads the broker's password from {reads}: give --stream-secret NAME, the "
            "Secret that holds it under the key 'password'"
        )
    if streams.tls_ca_file and not secret:
        raise DeploySettingsError(
            f"{streams.filename} reads the broker's CA from {streams.tls_ca_file}: give --stream-secret "
            "NAME, the Secret that holds it under the key 'ca.crt' (kubectl create secret generic NAME "
            "--from-file=ca.crt=ca.pem)"
        )
    if secret and not reads and not streams.tls_ca_file:
        raise DeploySettingsError(
            f"--stream-secret {secret}: {streams.filename} does not say where conch reads the password; "
            "add 'password_env: REDIS_PASSWORD' (or 'password_file: /etc/conch/redis/password') to it"
        )


def resolve(
    repository: Path,
    flags: Mapping[str, Any],
    file_values: Mapping[str, Any],
    shm_default: str,
    releases: Mapping[str, str] | None = None,
) -> DeploySettings:
    """The settings: ``flags`` (parsed, None when not given) over ``file_values`` over the defaults."""
    values: dict[str, Any] = {}
    for setting in KUBERNETES_SETTINGS:
        value = flags.get(setting.attribute)
        if value is None and setting.key in file_values:
            raw = file_values[setting.key]
            try:
                value = setting.parse(str(raw))
            except argparse.ArgumentTypeError as exc:
                raise DeploySettingsError(f"deploy.yaml '{setting.key}': {exc}") from None
        if value is None and setting.default is not None:
            value = setting.parse(setting.default)
        values[setting.attribute] = value
    if values["memory_limit"] is None:
        values["memory_limit"] = scaled_memory(values["memory"], MEMORY_LIMIT_FACTOR)
    if values["shm_size"] is None:
        values["shm_size"] = shm_default
    if values["max_replicas"] < values["replicas"]:
        raise DeploySettingsError(
            f"--max-replicas {values['max_replicas']} is under --replicas {values['replicas']}: raise it"
        )
    if values["s3_secret"] and values["models"].kind != "s3":
        raise DeploySettingsError("--s3-secret is for an s3:// repository: give --models s3://bucket/prefix")
    _check_stream_secret(values["streams"], values["stream_secret"])
    shipped = dict(releases or {}) if values["models"].kind == "image" else {}
    return DeploySettings(repository=repository, releases=shipped, **values)
