"""Builds an ONNX version: ONNX Runtime sessions on the config's placements, completed from the graph,
warmed up, behind its scheduler; and, for GPU instances allowed to fall back, the CPU build."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conch.backends import onnxruntime as ort_backend
from conch.backends.onnxruntime_threads import one_thread_session
from conch.backends.placement import Placement, instance_placements
from conch.core.errors import NotFoundError
from conch.lifecycle.gpu_fallback import ONNX_WITHOUT_CUDA, gpu_instances_on_cpu
from conch.lifecycle.load_options import LoadOptions
from conch.lifecycle.warmup import run_warmup
from conch.models.fallback import FallbackPolicy
from conch.models.model import ModelVersion
from conch.models.strategy import FallbackLevel
from conch.repository import autocomplete, config_validation
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import Scheduler


class OnnxModelBuilder:
    """Builds ONNX versions with one set of load options."""

    def __init__(self, options: LoadOptions) -> None:
        self.options = options

    def build(
        self, version: ModelVersion, folder: Path, fields: set[str], policy: FallbackPolicy | None
    ) -> str:
        """ONNX Runtime sessions on the config's placements, completed from the graph (``fields``: those
        set in ``config.pbtxt``), warmed up; returns the placements, for the log."""
        number, config = version.version, version.config
        model_file = folder / str(number) / config.default_model_filename
        if not model_file.is_file():
            raise NotFoundError(f"version {number} has no {config.default_model_filename}")
        placements = instance_placements(config)
        cores = self.options.cpu_cores
        session = ort_backend.open_session(model_file, config, placements[0], cores)
        signature = ort_backend.read_signature(session)
        autocomplete.complete_from_signature(config, signature, fields, self.options.default_max_batch_size)
        config_validation.check_against_signature(config, signature)
        threads = None
        lean = one_thread_session(model_file, config, placements, cores)
        if lean is not None:
            session, threads = lean, 1
        sessions = [session] + [
            ort_backend.open_session(model_file, config, p, cores, threads) for p in placements[1:]
        ]
        wanted_gpus = sum(p.gpu for p in placements)
        if wanted_gpus and not ort_backend.gpu_available():
            gpu_instances_on_cpu(version, wanted_gpus, policy, ONNX_WITHOUT_CUDA)
        instances = [ort_backend.OnnxRuntimeInstance(s, config) for s in sessions]
        run_warmup(list(instances), config, folder)
        version.scheduler = create_scheduler(
            config, InstancePool(list(instances), f"{folder.name}-{number}", folder.name), version.statistics
        )
        if wanted_gpus and policy is not None and policy.allows(FallbackLevel.CPU):
            version.cpu_fallback = self._cpu_build(version, model_file, len(placements))
        return ", ".join(map(str, placements))

    def _cpu_build(self, version: ModelVersion, model_file: Path, count: int) -> Callable[[], Scheduler]:
        """What builds the version again on ``count`` CPU instances when its GPU fails at run time."""

        def build() -> Scheduler:
            config = version.config
            sessions = [
                ort_backend.open_session(model_file, config, Placement(), self.options.cpu_cores)
                for _ in range(count)
            ]
            instances = [ort_backend.OnnxRuntimeInstance(s, config) for s in sessions]
            pool = InstancePool(list(instances), f"{version.name}-{version.version}-cpu", version.name)
            return create_scheduler(config, pool, version.statistics)

        return build
