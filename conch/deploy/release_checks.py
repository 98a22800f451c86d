"""What ``conch deploy kubernetes`` says about releases before it writes the manifests.

- Where rejected versions are remembered: in a store every pod shares (``--release-store``, or beside an
  ``s3://`` repository), or, without one, in each pod's own state folder, which a new pod starts empty,
  so a version a release rolled back could serve again there.
- A ``release.yaml`` judged by ``judge: local`` on more than one replica: each pod judges only its own
  share of the traffic, so the pods can disagree; ``judge: prometheus`` judges all of it everywhere.
- The versions the store records as rejected: no pod will serve them.
"""

from __future__ import annotations

from conch.deploy.settings import DeploySettings
from conch.validation.model_folder import model_folders
from conch.validation.rejections import rejection_findings, store_location


def release_warnings(settings: DeploySettings, releases: dict[str, str]) -> list[str]:
    """One line per thing a person should know before deploying releases with ``settings``."""
    from conch.core.errors import ConchError
    from conch.release.spec import spec_from_yaml

    warnings = []
    if settings.shared_release_store is None:
        warnings.append(
            f"with --models {settings.models} and no --release-store, each pod remembers the versions a "
            "release rejected in its own state folder, which a new pod starts empty: give --release-store "
            "s3://bucket/prefix (or a folder on a volume every pod mounts) so that a rejected version stays "
            "rejected on every pod"
        )
    if settings.replicas > 1:
        for model, text in sorted(releases.items()):
            try:
                judge = spec_from_yaml(text, f"{model}/release.yaml").gate.judge
            except ConchError:
                continue  # the release checks already reported it
            if judge == "local":
                warnings.append(
                    f"{model}/release.yaml uses judge: local on {settings.replicas} replicas: each pod "
                    "judges only its own share of the traffic and the pods may decide differently; set "
                    "gate.judge: prometheus with gate.prometheus_url"
                )
    location = store_location(settings.repository, settings.release_store)
    for finding in rejection_findings(model_folders(settings.repository), location):
        warnings.append(f"{finding.model} {finding.field}: {finding.message}".strip())
    return warnings
