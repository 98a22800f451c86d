"""Finds the models of a Triton-style repository and loads each served version.

A model that fails (unparsable config, wrong name, a file that is not ONNX, a config that disagrees
with the graph) is kept as UNAVAILABLE with its reason; it never stops the others from loading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends import onnxruntime as ort_backend
from conch.backends.placement import instance_placements
from conch.core.errors import ConchError, NotFoundError, did_you_mean
from conch.repository import autocomplete, config_validation
from conch.repository.config import fields_set_in_text, parse_config
from conch.repository.model import Model, ModelState, ModelVersion
from conch.repository.version_policy import select_versions, version_folders
from conch.repository.warmup import run_warmup
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepositoryOptions:
    """Server-wide settings that shape how models are completed."""

    default_max_batch_size: int = autocomplete.DEFAULT_MAX_BATCH_SIZE
    #: Cores this process's models may use for their default thread counts (None: the machine's).
    cpu_cores: int | None = None


class ModelRepository:
    """The models under one repository folder, by name."""

    def __init__(self, root: Path, options: RepositoryOptions | None = None) -> None:
        self.root = root
        self.options = options or RepositoryOptions()
        self.models: dict[str, Model] = {}

    def load_all(self) -> None:
        """Load every model folder; failures are recorded on the model, not raised."""
        folders = sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not folders:
            # Served as it is (an empty index, and ready), but someone pointed the server at the wrong
            # folder far more often than they meant to serve nothing.
            log.warning(
                "model repository %s has no model folders, so no model is served; a model is a folder "
                "<name>/ holding config.pbtxt and/or numeric version folders such as <name>/1/model.onnx",
                self.root,
            )
        for folder in folders:
            log.info("loading model '%s'", folder.name)
            self.models[folder.name] = self._load_model(folder)

    def model(self, name: str) -> Model:
        """The model called ``name``, or a 404 in Triton's words with the closest served names."""
        found = self.models.get(name)
        if found is None:
            raise NotFoundError(
                f"Request for unknown model: '{name}' is not found{did_you_mean(name, self.models)}"
            )
        return found

    def not_ready(self) -> list[str]:
        """Each model or version that is not READY, with its reason in brief: ``'x' version 1 (why)``."""
        lines = []
        for name, model in sorted(self.models.items()):
            if not model.versions:
                lines.append(f"'{name}' ({_brief(model.reason or 'no version')})")
            lines += [
                f"'{name}' version {number} ({_brief(version.reason or version.state.value)})"
                for number, version in sorted(model.versions.items())
                if not version.ready
            ]
        return lines

    @property
    def all_ready(self) -> bool:
        """Every model has at least one version and every served version is READY (strict readiness)."""
        return all(m.versions and all(v.ready for v in m.versions.values()) for m in self.models.values())

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index: one entry per version, or per model when it has none."""
        entries: list[dict[str, Any]] = []
        for name, model in sorted(self.models.items()):
            if not model.versions and not ready_only:
                entries.append({"name": name, "version": "", "state": "UNAVAILABLE", "reason": model.reason})
            for number, version in sorted(model.versions.items()):
                if ready_only and not version.ready:
                    continue
                entries.append(
                    {
                        "name": name,
                        "version": str(number),
                        "state": version.state.value,
                        "reason": version.reason,
                    }
                )
        return entries

    def close(self) -> None:
        """Stop every scheduler and its instances' worker threads."""
        for model in self.models.values():
            for version in model.versions.values():
                if version.scheduler is not None:
                    version.scheduler.close()

    def _load_model(self, folder: Path) -> Model:
        model = Model(folder.name)
        try:
            config, fields = self._read_config(folder)
            autocomplete.complete_defaults(config, folder.name)
            config_validation.check_identity(config, folder.name)
        except ConchError as exc:
            model.reason = exc.message
            log.error("model '%s' is UNAVAILABLE: %s", folder.name, exc.message)
            return model
        numbers = select_versions(config.version_policy, version_folders(folder))
        if not numbers:
            model.reason = "no version folder matches the version policy"
            log.error("model '%s' is UNAVAILABLE: %s", folder.name, model.reason)
        for number in numbers:
            model.versions[number] = self._load_version(folder, number, config, fields)
        return model

    @staticmethod
    def _read_config(folder: Path) -> tuple[mc.ModelConfig, set[str]]:
        path = folder / "config.pbtxt"
        if not path.exists():
            return mc.ModelConfig(), set()
        text = path.read_text(encoding="utf-8", errors="replace")
        config = parse_config(text)
        return config, fields_set_in_text(config, text)

    def _load_version(
        self, folder: Path, number: int, base: mc.ModelConfig, fields: set[str]
    ) -> ModelVersion:
        config = mc.ModelConfig()
        config.CopyFrom(base)
        version = ModelVersion(folder.name, number, config)
        version.max_batch_size_completed = "max_batch_size" not in fields
        model_file = folder / str(number) / config.default_model_filename
        try:
            if not model_file.is_file():
                raise NotFoundError(f"version {number} has no {config.default_model_filename}")
            placements = instance_placements(config)
            cores = self.options.cpu_cores
            session = ort_backend.open_session(model_file, config, placements[0], cores)
            signature = ort_backend.read_signature(session)
            autocomplete.complete_from_signature(
                config, signature, fields, self.options.default_max_batch_size
            )
            config_validation.check_against_signature(config, signature)
            sessions = [session] + [
                ort_backend.open_session(model_file, config, p, cores) for p in placements[1:]
            ]
            instances = [ort_backend.OnnxRuntimeInstance(s, config) for s in sessions]
            run_warmup(list(instances), config, folder)
            version.scheduler = create_scheduler(
                config, InstancePool(list(instances), f"{folder.name}-{number}"), version.statistics
            )
        except ConchError as exc:
            version.reason = exc.message
            log.error("model '%s' version %d is UNAVAILABLE: %s", folder.name, number, exc.message)
            return version
        version.state = ModelState.READY
        wanted_gpus = sum(p.gpu for p in placements)
        if wanted_gpus and not ort_backend.gpu_available():
            version.statistics.gpu_fallback_instances = wanted_gpus
            log.warning(
                "model '%s' version %d asks for %d GPU instance(s) but this ONNX Runtime has no CUDA "
                "provider (install onnxruntime-gpu); they run on the CPU",
                folder.name,
                number,
                wanted_gpus,
            )
        log.info("model '%s' version %d is READY (%s)", folder.name, number, ", ".join(map(str, placements)))
        return version


#: Characters of a load failure that a one-line summary keeps; the repository index has the whole reason.
BRIEF_REASON_CHARS = 160


def _brief(reason: str) -> str:
    first_line = reason.splitlines()[0] if reason else reason
    if len(first_line) <= BRIEF_REASON_CHARS:
        return first_line
    return first_line[: BRIEF_REASON_CHARS - 1].rstrip() + "…"
