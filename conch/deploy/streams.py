"""A ``streams.yaml`` in the pods: a ConfigMap holding it, its mount, ``conch serve --streams``, the
broker's password from a Secret, and a digest that rolls the pods when the file changes.

The password reaches ``conch serve`` where the file says it reads it: the Secret's ``password`` key as
the variable ``password_env`` names, or as the file ``password_file`` names (the Secret mounted there,
readable by conch's group only). Never as a value in a manifest. A ``tls_ca_file`` is the same
Secret's ``ca.crt`` key, mounted at that path, so the pods trust the broker the file was written for.

Why a digest: conch reads the streams file when it starts, so a changed file deployed again must start
new pods. The file's digest in the pod template's annotations changes with it, and Argo CD's sync then
rolls the Deployment, as ``release.yaml`` files do (``conch/deploy/releases.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import PurePosixPath
from typing import Any

from conch.deploy.manifests import Manifest, register
from conch.deploy.settings import DeploySettings

#: Where the ConfigMap is mounted, and the key (file) ``conch serve --streams`` reads there.
STREAMS_FOLDER = "/etc/conch/streams"
STREAMS_KEY = "streams.yaml"
#: The pod template annotation whose change rolls the pods when the streams file changes.
STREAMS_DIGEST_ANNOTATION = "conch.dev/streams-sha256"
#: The Secret's keys (``--stream-secret``): the broker's password, and its user's name when it has one.
PASSWORD_KEY = "password"
USERNAME_KEY = "username"
#: The Secret's key holding the CA bundle of a ``rediss://`` broker (``tls_ca_file``).
CA_KEY = "ca.crt"


def streams_name(settings: DeploySettings) -> str:
    return f"{settings.name}-streams"


def streams_digest(settings: DeploySettings) -> str | None:
    if settings.streams is None:
        return None
    return hashlib.sha256(settings.streams.text.encode()).hexdigest()


def streams_arguments(settings: DeploySettings) -> list[str]:
    """``conch serve``'s arguments for the streams: none without ``--streams``."""
    return ["--streams", f"{STREAMS_FOLDER}/{STREAMS_KEY}"] if settings.streams else []


def streams_environment(settings: DeploySettings) -> list[dict[str, Any]]:
    """The broker's password as ``password_env``'s variable, by reference to ``--stream-secret``."""
    if settings.streams is None or not settings.stream_secret or not settings.streams.password_env:
        return []
    reference = {"name": settings.stream_secret, "key": PASSWORD_KEY}
    return [{"name": settings.streams.password_env, "valueFrom": {"secretKeyRef": reference}}]


def streams_volumes(settings: DeploySettings) -> list[dict[str, Any]]:
    if settings.streams is None:
        return []
    found: list[dict[str, Any]] = [{"name": "streams", "configMap": {"name": streams_name(settings)}}]
    for name, (_, items) in _secret_folders(settings).items():
        secret = {"secretName": settings.stream_secret, "items": items, "defaultMode": 0o440}
        found.append({"name": name, "secret": secret})
    return found


def streams_mounts(settings: DeploySettings) -> list[dict[str, Any]]:
    if settings.streams is None:
        return []
    found = [{"name": "streams", "mountPath": STREAMS_FOLDER, "readOnly": True}]
    for name, (folder, _) in _secret_folders(settings).items():
        found.append({"name": name, "mountPath": folder, "readOnly": True})
    return found


def _secret_folders(settings: DeploySettings) -> dict[str, tuple[str, list[dict[str, str]]]]:
    """The Secret's keys ``conch serve`` reads as files (the password, the CA), grouped by the folder
    they are mounted in: volume name to (folder, items)."""
    streams = settings.streams
    if streams is None or not settings.stream_secret:
        return {}
    files = [(PASSWORD_KEY, streams.password_file), (CA_KEY, streams.tls_ca_file)]
    folders: dict[str, list[dict[str, str]]] = {}
    for key, path in files:
        if path:
            folders.setdefault(str(PurePosixPath(path).parent), []).append(
                {"key": key, "path": PurePosixPath(path).name}
            )
    return {
        f"stream-secret-{index}" if index else "stream-secret": folder
        for index, folder in enumerate(folders.items())
    }


def unserved_stream_models(settings: DeploySettings, models: list[str]) -> list[str]:
    """The models the streams file names that the repository does not hold, sorted."""
    if settings.streams is None:
        return []
    return sorted({source.model for source in settings.streams.streams} - set(models))


def streams_config_map(settings: DeploySettings) -> Manifest | None:
    if settings.streams is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": streams_name(settings),
            "namespace": settings.namespace,
            "labels": dict(settings.labels),
        },
        "data": {STREAMS_KEY: settings.streams.text},
    }


register("streams-config.yaml", streams_config_map)
