"""Which version folders of a model are served: Triton's ``version_policy`` (latest, all, specific)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc


def version_folders(model_dir: Path) -> list[int]:
    """Numeric version folders, ascending; names that are not numbers or start with 0 are ignored."""
    versions = []
    for entry in model_dir.iterdir():
        name = entry.name
        if entry.is_dir() and name.isdigit() and not name.startswith("0"):
            versions.append(int(name))
    return sorted(versions)


def next_version(model_dir: Path) -> int:
    """The number a new version of the model gets: one more than the highest version folder (1 for a
    new model)."""
    return max(version_folders(model_dir), default=0) + 1 if model_dir.is_dir() else 1


def select_versions(
    policy: mc.ModelVersionPolicy, available: list[int], rejected: Collection[int] = ()
) -> list[int]:
    """The versions ``policy`` serves out of ``available``; the default policy is ``latest { 1 }``.

    ``rejected`` versions (a release rolled them back) are left out before the policy counts, so
    ``latest { 1 }`` serves the newest version that was not rejected.
    """
    available = [number for number in available if number not in rejected]
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return sorted(available)
    if which == "specific":
        wanted = set(policy.specific.versions)
        return sorted(v for v in available if v in wanted)
    count = policy.latest.num_versions if which == "latest" and policy.latest.num_versions > 0 else 1
    return sorted(available)[-count:]
