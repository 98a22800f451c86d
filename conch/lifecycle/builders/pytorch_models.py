"""Builds versions of PyTorch models (``platform: "pytorch_libtorch"`` / ``backend: "pytorch"``).

A version is READY once its program is read, its config completed and checked against it, an
instance placed on each device ``instance_group`` names, and warm-up has run on every instance
(on GPU instances the cold-start samples of :mod:`conch.backends.pytorch.cold_start` when the config
has none). The load's two phases are timed apart (``conch_model_load_phase_duration_seconds``).

``KIND_GPU`` on a machine where PyTorch sees no CUDA device follows the lifecycle's rule for ONNX: with
``CPU`` in the fallback strategy the version serves on CPU instances, marked; without it the load
fails saying how to fix it. A version that does run on GPUs and has ``CPU`` in its strategy gets a
CPU build for the router to move to when a run fails with a device error (out of memory included).

Completing the config: a ``torch.export`` program gives its tensors, so what the config leaves out is
completed as for ONNX (inputs named as the forward arguments, outputs ``OUTPUT__<i>``,
``max_batch_size`` from a dynamic first dimension), and what it says is checked against the program
with the same rules. A TorchScript module gives nothing of the kind: its config must say it, or the
load fails naming what is missing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.placement import CPU, Placement, instance_placements
from conch.backends.pytorch.binding import bind, bound_signature
from conch.backends.pytorch.cold_start import cold_start_config
from conch.backends.pytorch.gpu import check_devices, prepare_gpus
from conch.backends.pytorch.instance import PyTorchInstance
from conch.backends.pytorch.options import PyTorchOptions, options_from_config
from conch.backends.pytorch.program import EXPORT_SUFFIX, Program, import_torch, load_program
from conch.core.errors import InvalidArgumentError, NotFoundError, UnavailableError
from conch.lifecycle.gpu_fallback import gpu_instances_on_cpu
from conch.lifecycle.load_options import LoadOptions
from conch.lifecycle.warmup import run_warmup
from conch.models.fallback import FallbackPolicy, strategy_from_config
from conch.models.model import ModelVersion
from conch.models.strategy import FallbackLevel
from conch.observability.model_loads import record_load_phase
from conch.repository import autocomplete, config_validation
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import Scheduler

log = logging.getLogger(__name__)

#: Why KIND_GPU instances cannot run on a GPU here, and the way out (the rest of the reason is the loader's).
TORCH_WITHOUT_CUDA = ("PyTorch sees no CUDA device", "run a CUDA build of torch on a machine with a GPU")


class PyTorchModelBuilder:
    """The loader's builder for PyTorch versions, with the loader's server-wide options."""

    def __init__(self, options: LoadOptions) -> None:
        self.options = options

    def __call__(self, version: ModelVersion, folder: Path, fields: set[str]) -> None:
        started = time.perf_counter()
        config = version.config
        settings = options_from_config(config)
        torch = import_torch()
        if settings.intra_op_threads is not None:
            torch.set_num_threads(settings.intra_op_threads)
        model_file = _model_file(folder / str(version.version), config, fields)
        program = load_program(torch, model_file)
        complete_config(config, program, fields, self.options.default_max_batch_size)
        placements = self._placements(torch, version, config, settings)
        if version.fallback_marker[0] is FallbackLevel.CPU:  # CPU stand-ins for GPUs run in fp32
            settings = replace(settings, half=False)
        label = f"model '{config.name}' version {version.version}"
        instances = _instances(torch, model_file, program, config, placements, settings, label)
        gpu_instances = [i for i in instances if i.device != "cpu"]
        warming = time.perf_counter()
        run_warmup(list(instances), config, folder)
        cold_start = cold_start_config(config) if gpu_instances else None
        if cold_start is not None:
            run_warmup(list(gpu_instances), cold_start, folder)
        record_load_phase(config.name, "context", warming - started)
        record_load_phase(config.name, "warmup", time.perf_counter() - warming)
        pool = InstancePool(list(instances), f"{folder.name}-{version.version}", folder.name)
        version.scheduler = create_scheduler(config, pool, version.statistics)
        if gpu_instances and FallbackLevel.CPU in self._levels(config):
            version.cpu_fallback = cpu_build(torch, model_file, version, settings, len(instances), label)

    def _levels(self, config: mc.ModelConfig) -> tuple[FallbackLevel, ...]:
        return strategy_from_config(config, self.options.fallback_levels)

    def _placements(
        self, torch: ModuleType, version: ModelVersion, config: mc.ModelConfig, settings: PyTorchOptions
    ) -> list[Placement]:
        """The config's placements, or CPU ones when CUDA is absent and the strategy allows it."""
        placements = instance_placements(config)
        wanted = sum(p.gpu for p in placements)
        if not wanted:
            return placements
        if not torch.cuda.is_available():
            gpu_instances_on_cpu(version, wanted, FallbackPolicy(self._levels(config)), TORCH_WITHOUT_CUDA)
            return [CPU] * len(placements)
        gpus = sorted({p.device_id for p in placements if p.gpu})
        check_devices(torch, gpus, config.name)
        prepare_gpus(torch, gpus, settings.memory_cap, config.name)
        return placements


def _model_file(version_dir: Path, config: mc.ModelConfig, fields: set[str]) -> Path:
    """The version's file; a version with ``model.pt2`` and no ``model.pt`` is found without the config
    naming it."""
    model_file = version_dir / config.default_model_filename
    if not model_file.is_file() and "default_model_filename" not in fields:
        exported = model_file.with_suffix(EXPORT_SUFFIX)
        if exported.is_file():
            config.default_model_filename = exported.name
            return exported
    if not model_file.is_file():
        raise NotFoundError(f"version {version_dir.name} has no {config.default_model_filename}")
    return model_file


def _instances(
    torch: ModuleType,
    model_file: Path,
    program: Program,
    config: mc.ModelConfig,
    placements: list[Placement],
    settings: PyTorchOptions,
    label: str,
) -> list[PyTorchInstance]:
    """One instance per placement; the instances on one device share one copy of the weights."""
    binding = bind(config, program)
    modules: dict[Placement, Any] = {}
    instances = []
    for placement in placements:
        # The CPU copy read for the signature serves the CPU; each GPU gets its own read.
        source = program if not placement.gpu or placement in modules else load_program(torch, model_file)
        try:
            if placement not in modules:
                modules[placement] = _prepared(torch, source.module, _device(placement), settings)
            instances.append(
                PyTorchInstance(torch, modules[placement], binding, _device(placement), settings, label)
            )
        except RuntimeError as exc:  # CUDA out of memory (under a cap), a device that failed
            reason = str(exc).strip().split("\n")[0][:300]
            raise UnavailableError(f"{label} could not be placed on {placement}: {reason}") from None
    return instances


def _device(placement: Placement) -> str:
    return f"cuda:{placement.device_id}" if placement.gpu else "cpu"


def _prepared(torch: ModuleType, module: Any, device: str, settings: PyTorchOptions) -> Any:
    """``module`` on ``device`` in the config's precision and memory format."""
    module = module.to(device)
    if settings.half:
        module = module.half()
    if settings.channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module


def cpu_build(
    torch: ModuleType,
    model_file: Path,
    version: ModelVersion,
    settings: PyTorchOptions,
    count: int,
    label: str,
) -> Callable[[], Scheduler]:
    """What builds the version on ``count`` CPU instances when its GPU fails at run time: a fresh
    read of the file, in fp32 (half precision is slow on CPUs), sharing one copy of the weights."""

    def build() -> Scheduler:
        config = version.config
        program = load_program(torch, model_file)
        cpu_settings = replace(settings, half=False)
        instances = _instances(torch, model_file, program, config, [CPU] * count, cpu_settings, label)
        pool = InstancePool(list(instances), f"{version.name}-{version.version}-cpu", version.name)
        return create_scheduler(config, pool, version.statistics)

    return build


_EXAMPLE = (
    'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ] '
    'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]'
)


def complete_config(
    config: mc.ModelConfig, program: Program, fields: set[str], default_max_batch_size: int
) -> None:
    """Fill what the program can tell; check the whole config against it (raise the first problem)."""
    if program.signature is None:
        _require_declared(config)
        config_validation.check_batching(config)
        return
    autocomplete.complete_from_signature(config, program.signature, fields, default_max_batch_size)
    config_validation.check_against_signature(config, bound_signature(config, program, program.signature))


def _require_declared(config: mc.ModelConfig) -> None:
    missing = [
        f"{role} (none listed)"
        for role, entries in (("input", config.input), ("output", config.output))
        if not entries
    ]
    for role, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            if entry.data_type == mc.TYPE_INVALID:
                missing.append(f"{role} '{entry.name}' data_type")
            if not entry.dims:
                missing.append(f"{role} '{entry.name}' dims")
    if missing:
        raise InvalidArgumentError(
            f"model '{config.name}': a TorchScript {config.default_model_filename} carries no tensor "
            "datatypes or shapes, so config.pbtxt must list every input and output with name, data_type "
            f"and dims; missing: {', '.join(missing)}. For example: {_EXAMPLE}"
        )
