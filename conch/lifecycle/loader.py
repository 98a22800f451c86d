"""Builds a servable :class:`Model` from its repository folder: config, sessions, warm-up, schedulers.

Loading is blocking work (ONNX Runtime sessions, warm-up runs), so the lifecycle runs it on a worker
thread while the versions already served keep answering; nothing here touches what is served. A
failure (unparsable config, wrong name, a file that is not ONNX, a config that disagrees with the
graph, a failed warm-up) is recorded on the model or version as UNAVAILABLE with its reason, never
raised, so one broken model never stops the others.

A version whose files and config have not changed since the model was last loaded is reused as it is,
instance threads and statistics included: a reload changes only what changed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends import onnxruntime as ort_backend
from conch.backends.placement import instance_placements
from conch.core.errors import ConchError, NotFoundError
from conch.lifecycle.fingerprint import config_text, version_fingerprint
from conch.observability.events import emit
from conch.observability.model_loads import record_load
from conch.repository import autocomplete, config_validation
from conch.repository.config import fields_set_in_text, parse_config
from conch.repository.model import Model, ModelState, ModelVersion
from conch.repository.version_policy import select_versions, version_folders
from conch.repository.warmup import run_warmup
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadOptions:
    """Server-wide settings that shape how models are completed and placed."""

    default_max_batch_size: int = autocomplete.DEFAULT_MAX_BATCH_SIZE
    #: Cores this process's models may use for their default thread counts (None: the machine's).
    cpu_cores: int | None = None


class ModelLoader:
    """Loads model folders with one set of options."""

    def __init__(self, options: LoadOptions | None = None) -> None:
        self.options = options or LoadOptions()

    def load(
        self, folder: Path, override: mc.ModelConfig | None = None, previous: Model | None = None
    ) -> Model:
        """The model in ``folder``; ``override`` replaces its ``config.pbtxt`` (Triton's load parameter).

        Versions of ``previous`` whose folder and config are unchanged are carried over, not rebuilt.
        """
        started = time.perf_counter()
        model = self._build(folder, override, previous)
        seconds = time.perf_counter() - started
        record_load(folder.name, seconds, succeeded=bool(model.ready_versions))
        emit(
            log,
            "model_loaded",
            model=folder.name,
            ready=[n for n, v in sorted(model.versions.items()) if v.ready],
            unavailable=[n for n, v in sorted(model.versions.items()) if not v.ready],
            seconds=round(seconds, 3),
        )
        return model

    def _build(self, folder: Path, override: mc.ModelConfig | None, previous: Model | None) -> Model:
        model = Model(folder.name)
        try:
            config, fields, text = self._config(folder, override)
            autocomplete.complete_defaults(config, folder.name)
            config_validation.check_identity(config, folder.name)
        except ConchError as exc:
            model.reason = exc.message
            emit(log, "model_unavailable", logging.ERROR, model=folder.name, reason=exc.message)
            return model
        model.config_text = text
        numbers = select_versions(config.version_policy, version_folders(folder))
        if not numbers:
            model.reason = "no version folder matches the version policy"
            emit(log, "model_unavailable", logging.ERROR, model=folder.name, reason=model.reason)
        for number in numbers:
            fingerprint = version_fingerprint(folder / str(number))
            kept = _unchanged(previous, number, text, fingerprint)
            if kept is not None:
                model.versions[number] = kept
                continue
            version = self._load_version(folder, number, config, fields)
            version.fingerprint = fingerprint
            model.versions[number] = version
        return model

    @staticmethod
    def _config(folder: Path, override: mc.ModelConfig | None) -> tuple[mc.ModelConfig, set[str], str]:
        if override is not None:
            config = mc.ModelConfig()
            config.CopyFrom(override)
            return config, {f.name for f, _ in override.ListFields()}, config_text(override)
        path = folder / "config.pbtxt"
        if not path.exists():
            return mc.ModelConfig(), set(), ""
        text = path.read_text(encoding="utf-8", errors="replace")
        config = parse_config(text)
        return config, fields_set_in_text(config, text), text

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
            emit(
                log,
                "version_unavailable",
                logging.ERROR,
                model=folder.name,
                version=number,
                reason=exc.message,
            )
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


def _unchanged(previous: Model | None, number: int, text: str, fingerprint: str) -> ModelVersion | None:
    if previous is None or previous.config_text != text:
        return None
    version = previous.versions.get(number)
    if version is None or not version.ready or version.fingerprint != fingerprint:
        return None
    return version
