"""Which manifests ``conch deploy kubernetes`` writes, and where other rooms plug theirs in.

A manifest is a plain dict (one Kubernetes object) built from the :class:`DeploySettings`; a builder
returns ``None`` when the settings ask for no such object. Each builder writes one file of the output
folder. The core kinds register themselves here (``conch/deploy/kubernetes.py``, ``scaling.py``,
``scraping.py``, ``releases.py``, ``streams.py``, ``keda.py``); the monitoring room
(``conch/deploy/monitoring``) registers ``prometheusrule.yaml`` by calling :func:`register` at import,
so ``conch deploy kubernetes`` writes its golden-signal alerts without this package knowing their rules.

Why a registry rather than a list in the writer: the alerts are the monitoring room's knowledge, and
``conch deploy monitoring`` writes the same PrometheusRule on its own; one builder serves both.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conch.deploy.settings import DeploySettings

Manifest = dict[str, Any]
ManifestBuilder = Callable[["DeploySettings"], Manifest | None]


@dataclass(frozen=True)
class ManifestFile:
    """One output file: its name in the output folder and the builder of its object."""

    filename: str
    build: ManifestBuilder
    #: Text written above the object (``# `` comment lines), e.g. an alternate object to swap in.
    preamble: Callable[[DeploySettings], str] | None = None


_FILES: dict[str, ManifestFile] = {}

#: Modules whose import registers builders (``conch.deploy.monitoring`` registers ``prometheusrule.yaml``).
BUILDER_MODULES = (
    "conch.deploy.kubernetes",
    "conch.deploy.releases",
    "conch.deploy.scaling",
    "conch.deploy.scraping",
    "conch.deploy.streams",
    "conch.deploy.keda",
    "conch.deploy.monitoring",
)

#: The file the monitoring room's PrometheusRule goes to.
PROMETHEUS_RULE_FILE = "prometheusrule.yaml"


def register(
    filename: str, build: ManifestBuilder, preamble: Callable[[DeploySettings], str] | None = None
) -> None:
    """Have ``conch deploy kubernetes`` write ``build(settings)`` to ``filename`` (a later call for the
    same file replaces the earlier one)."""
    _FILES[filename] = ManifestFile(filename, build, preamble)


def manifest_files() -> list[ManifestFile]:
    """Every registered file, after importing the modules that register them."""
    for module in BUILDER_MODULES:
        importlib.import_module(module)
    return list(_FILES.values())


def build_files(settings: DeploySettings) -> list[tuple[str, Manifest, str]]:
    """``(filename, manifest, preamble)`` for every registered file whose builder returns an object."""
    files = []
    for file in manifest_files():
        manifest = file.build(settings)
        if manifest is not None:
            files.append((file.filename, manifest, file.preamble(settings) if file.preamble else ""))
    return files
