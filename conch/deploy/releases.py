"""``release.yaml`` files in Git: a ConfigMap of them, mounted where conch reads them, and a digest that
rolls the pods when one changes.

Why: the releases guide wants a release declared in Git before its candidate version is served, and
with Argo CD the manifests' Git tree is the one place a person pushes to. conch reads
``<model>/release.yaml`` when it starts (``conch/release/declarations.py``), so ``conch deploy
kubernetes`` copies each model's file of the local repository into the ConfigMap ``<name>-releases``
(``releases.yaml``), mounts each key over ``<repository>/<model>/release.yaml``, and writes the
digest of all of them into the pod template's annotations. A changed ``release.yaml``, deployed again
and pushed, changes that annotation, so Argo CD's sync starts a rolling update and every new pod
starts the release; one removed rolls it back the same way. A ConfigMap key mounted with ``subPath``
is never updated in a running pod, which is why the digest, not the kubelet, carries the change.

Each file is checked with the server's own rules first (``spec_from_yaml``), so a bad one stops the
deploy with the field named, as ``conch release start`` would.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from conch.core.errors import ConchError
from conch.deploy.manifests import Manifest, register
from conch.deploy.settings import DeploySettings
from conch.validation import Finding, Severity

#: The pod template annotation whose change rolls the pods when a release file changes.
DIGEST_ANNOTATION = "conch.dev/releases-sha256"


def release_files(models: list[Path]) -> tuple[dict[str, str], list[Finding]]:
    """Each model's ``release.yaml`` text, and a finding for each that the server would refuse."""
    # Here, not at the top: the release package brings tritonclient, and ``conch`` builds its parsers
    # (which import this module) before gRPC may load.
    from conch.release.declarations import RELEASE_FILE
    from conch.release.spec import spec_from_yaml

    texts: dict[str, str] = {}
    findings: list[Finding] = []
    for model in models:
        path = model / RELEASE_FILE
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        try:
            spec_from_yaml(text, f"{model.name}/{RELEASE_FILE}")
        except ConchError as exc:
            hint = "fix the field named (conch docs releases lists them), then deploy again"
            findings.append(
                Finding("release-invalid", Severity.ERROR, model.name, RELEASE_FILE, exc.message, hint)
            )
            continue
        texts[model.name] = text
    return texts, findings


def releases_name(settings: DeploySettings) -> str:
    return f"{settings.name}-releases"


def digest(releases: dict[str, str]) -> str:
    hashed = hashlib.sha256()
    for model in sorted(releases):
        hashed.update(f"{model}\0{releases[model]}\0".encode())
    return hashed.hexdigest()


def releases_config_map(settings: DeploySettings) -> Manifest | None:
    if not settings.releases:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": releases_name(settings),
            "namespace": settings.namespace,
            "labels": dict(settings.labels),
        },
        "data": dict(sorted(settings.releases.items())),
    }


register("releases.yaml", releases_config_map)
