"""Builds versions of ``backend: "python"`` models and keeps their instances running.

A version is READY once every instance's process imported ``model.py`` and ran ``initialize``. The
first instance's process also runs the model's ``auto_complete_config`` (when it has one), and the
completed config is what every instance initializes with and what the server validates requests
against. When an instance's process dies, it is restarted here with the backoff of
:mod:`conch.backends.python.restarts`, and the version's index entry says so. A model whose class
defines ``is_ready()`` also reports its own readiness: every instance is asked, and the answer is
shared for :data:`READINESS_CACHE_S` by model readiness and deep health.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.python.environment import process_settings
from conch.backends.python.instance import Inference, InferenceStream, InstanceSpec, PythonInstance
from conch.backends.python.process import ProcessSettings
from conch.backends.python.restarts import RestartPolicy
from conch.core.errors import ConchError, InvalidArgumentError, NotFoundError
from conch.lifecycle.shared_result import SharedResult
from conch.lifecycle.warmup import run_warmup
from conch.models.model import ModelState, ModelVersion
from conch.observability.events import emit
from conch.repository import config_validation
from conch.repository.config import config_to_json
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool

log = logging.getLogger(__name__)

#: How long a model's ``is_ready()`` answer stands for model readiness and deep health: a flood of
#: probes makes at most one call into each instance's process per second.
READINESS_CACHE_S = 1.0


@dataclass
class PythonBackendSettings:
    """Server-wide settings of the Python backend (``--backend-config python,<key>=<value>``)."""

    process: ProcessSettings
    #: The server's inference entry point, for the models' BLS calls (set once the server exists).
    inference: Inference | None = None
    #: The same for BLS calls to decoupled models (``exec(decoupled=True)``).
    inference_stream: InferenceStream | None = None
    #: The serving event loop: a version built on a loader thread hands its processes' sockets to it.
    loop: asyncio.AbstractEventLoop | None = None


class PythonModelBuilder:
    """The loader's builder for ``backend: "python"`` versions."""

    def __init__(self, settings: PythonBackendSettings) -> None:
        self.settings = settings

    def __call__(self, version: ModelVersion, folder: Path, fields: set[str]) -> None:
        folder = folder.resolve()  # the process runs elsewhere, and args carry absolute paths, as Triton's
        config = version.config
        model_file = folder / str(version.version) / config.default_model_filename
        if not model_file.is_file():
            raise NotFoundError(f"version {version.version} has no {config.default_model_filename}")
        settings = process_settings(config, folder, self.settings.process)
        instances = [
            PythonInstance(
                InstanceSpec(config.name, version.version, f"{group.name}_{index}", model_file, settings),
                self.settings.inference,
                self.settings.inference_stream,
            )
            for group in config.instance_group
            for index in range(group.count)
        ]
        started: list[PythonInstance] = []
        try:
            first = instances[0]
            first.launch()
            started.append(first)
            _apply_completion(config, first.complete_config(config_to_json(config)))
            _check(config)
            args = _initialize_args(config, folder, version.version)
            for instance in instances:
                instance.decoupled = config.model_transaction_policy.decoupled
                instance.args = {**args, "model_instance_name": instance.spec.instance_name}
                if instance is not first:
                    instance.launch()
                    started.append(instance)
                instance.initialize()
            if not config.model_transaction_policy.decoupled:
                run_warmup(list(instances), config, folder)
        except BaseException:
            for instance in started:
                instance.stop()
            raise
        version.decoupled = config.model_transaction_policy.decoupled
        if any(instance.readiness is not None for instance in instances):
            version.reported_readiness = SharedResult(lambda: _readiness_of(instances), READINESS_CACHE_S).get
        pool = InstancePool(list(instances), f"{folder.name}-{version.version}", folder.name)
        version.scheduler = create_scheduler(config, pool, version.statistics)
        supervisor = _Supervisor(version, pool)
        for instance in instances:
            instance.on_exit = supervisor.died
            if self.settings.loop is not None:
                self.settings.loop.call_soon_threadsafe(instance.attach)


async def _readiness_of(instances: list[PythonInstance]) -> tuple[bool, str]:
    """Ready when every instance's ``is_ready()`` says so (asked together); else the first reason."""
    answers = await asyncio.gather(*(instance.is_ready() for instance in instances))
    for instance, (ready, why) in zip(instances, answers, strict=True):
        if not ready:
            return False, f"instance '{instance.spec.instance_name}': {why or 'is_ready() returned False'}"
    return True, ""


def _apply_completion(config: mc.ModelConfig, completed: dict[str, Any]) -> None:
    """Take over what ``auto_complete_config`` changed (its JSON is Triton's form of the config)."""
    try:
        merged = json_format.ParseDict(completed, mc.ModelConfig(), ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise InvalidArgumentError(
            f"auto_complete_config returned a config that does not parse: {exc}"
        ) from None
    config.CopyFrom(merged)


def _check(config: mc.ModelConfig) -> None:
    """Triton's load-time rules for a Python model's completed config."""
    for role, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            if entry.data_type == mc.TYPE_INVALID:
                raise InvalidArgumentError(
                    f"{role} '{entry.name}' of model '{config.name}' has no data_type: set it in "
                    "config.pbtxt or add it in auto_complete_config"
                )
    config_validation.check_batching(config)


def _initialize_args(config: mc.ModelConfig, folder: Path, number: int) -> dict[str, str]:
    """The ``args`` of ``initialize``, with Triton's keys (all strings)."""
    import json

    group = config.instance_group[0]
    return {
        "model_config": json.dumps(config_to_json(config)),
        "model_instance_kind": mc.ModelInstanceGroup.Kind.Name(group.kind).removeprefix("KIND_"),
        "model_instance_device_id": str(group.gpus[0]) if group.gpus else "0",
        "model_repository": str(folder),
        "model_version": str(number),
        "model_name": config.name,
    }


class _Supervisor:
    """Restarts a version's instances when their processes die; gives the version up when they
    cannot start any more."""

    def __init__(self, version: ModelVersion, pool: InstancePool) -> None:
        self.version = version
        self.pool = pool
        self.policies: dict[int, RestartPolicy] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def died(self, instance: PythonInstance, why: str) -> None:
        if self.version.state is not ModelState.READY:
            return
        policy = self.policies.setdefault(id(instance), RestartPolicy())
        delay = policy.delay_after_death(time.monotonic() - instance.started_at)
        self._event("python_instance_died", logging.ERROR, instance, reason=why, restart_in_s=delay)
        self.version.reason = f"instance '{instance.spec.instance_name}' {why}; restarting it"
        task = asyncio.get_running_loop().create_task(self._restart(instance, policy, why, delay))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _restart(self, instance: PythonInstance, policy: RestartPolicy, why: str, delay: float) -> None:
        while True:
            await asyncio.sleep(delay)
            if self.version.state is not ModelState.READY:
                return
            try:
                await asyncio.to_thread(instance.start)
            except ConchError as exc:
                next_delay = policy.start_failed()
                if next_delay is None:
                    self._give_up(instance, exc.message)
                    return
                delay = next_delay
                continue
            break
        instance.attach()
        policy.started()
        self.version.reason = (
            f"restarted {policy.restarts} time(s); last: instance '{instance.spec.instance_name}' {why}"
        )
        self._event("python_instance_restarted", logging.INFO, instance, restarts=policy.restarts)
        self.pool.rejoin(instance)

    def _give_up(self, instance: PythonInstance, reason: str) -> None:
        self.version.state = ModelState.UNAVAILABLE
        self.version.reason = f"instance '{instance.spec.instance_name}' cannot restart: {reason}"
        self._event("version_unavailable", logging.ERROR, None, reason=self.version.reason)
        self.version.close()

    def _event(self, event: str, severity: int, instance: PythonInstance | None, **fields: Any) -> None:
        """One structured event about this version (and one of its instances)."""
        if instance is not None:
            fields["instance"] = instance.spec.instance_name
        emit(log, event, severity, model=self.version.name, version=self.version.version, **fields)
