"""What a deploy needs to know about the repository it ships: that it validates, which models use a
GPU, and how many Python backend instances share ``/dev/shm``.

The checks are ``conch validate``'s (``conch/validation``), run model by model, so a repository that
would not load is stopped here with the same findings, before any manifest is written. The configs are
read as the server reads them (defaults completed: no instance group means one ``KIND_CPU`` instance,
and ``KIND_AUTO`` is CPU too), which is what tells a GPU request that no model would use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import PYTHON_BACKEND
from conch.deploy.releases import release_files
from conch.validation import Finding, model_folders, validate_model
from conch.validation.model_folder import read_model_folder

#: ``/dev/shm`` per Python backend instance when ``--shm-size`` is not given, and the least it gets:
#: each instance's tensors cross in segments that start at 1 MiB (shm-default-byte-size) and grow by
#: 1 MiB steps, and a batch of images or embeddings reaches tens of MiB.
SHM_PER_PYTHON_INSTANCE_MI = 64


@dataclass
class RepositoryFacts:
    models: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    gpu_models: list[str] = field(default_factory=list)
    python_instances: int = 0
    #: Each model's ``release.yaml`` that the server's rules accept (``conch/deploy/releases.py``).
    releases: dict[str, str] = field(default_factory=dict)

    @property
    def has_errors(self) -> bool:
        return any(finding.is_error for finding in self.findings)

    @property
    def shm_size(self) -> str:
        return f"{SHM_PER_PYTHON_INSTANCE_MI * max(1, self.python_instances)}Mi"


def check_repository(
    path: Path, progress: Callable[[str], None], model_checked: Callable[[], None] | None = None
) -> RepositoryFacts:
    """Validate every model of ``path`` (raises ``NotAModelOrRepositoryError`` when it is neither);
    ``progress`` hears each step, ``model_checked`` each model done."""
    facts = RepositoryFacts()
    folders = model_folders(path)
    facts.releases, facts.findings = release_files(folders)
    for folder in folders:
        facts.models.append(folder.name)
        facts.findings += validate_model(folder, progress)
        model, _ = read_model_folder(folder)
        if model is not None:
            _count_devices(facts, folder.name, model.config)
        if model_checked is not None:
            model_checked()
    return facts


def _count_devices(facts: RepositoryFacts, name: str, config: mc.ModelConfig) -> None:
    groups = config.instance_group
    if any(group.kind == mc.ModelInstanceGroup.KIND_GPU for group in groups):
        facts.gpu_models.append(name)
    if config.backend == PYTHON_BACKEND:
        facts.python_instances += sum(group.count for group in groups)


def gpu_warning(facts: RepositoryFacts, gpus: int) -> str | None:
    """A warning when ``gpus`` are requested and no model has a ``KIND_GPU`` instance group."""
    if gpus and not facts.gpu_models:
        return (
            f"warning: --gpus {gpus} asks for a GPU per pod, but no model of the repository has a KIND_GPU "
            "instance group, so the GPU would sit idle: add instance_group [ { kind: KIND_GPU } ] to the "
            "config.pbtxt of the models that should run on it, or drop --gpus"
        )
    return None
