"""Running a version's warm-up samples (:mod:`conch.repository.warmup` reads them) on every instance
before the version is READY: each sample ``count`` times (at least once), and a sample that fails
makes the version UNAVAILABLE, with the sample's name in the reason."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import ConchError, InvalidArgumentError
from conch.core.types import ExecutionTiming
from conch.repository.warmup import warmup_samples
from conch.scheduling.instance_pool import ModelInstance


def run_warmup(instances: list[ModelInstance], config: mc.ModelConfig, model_dir: Path) -> None:
    """Run each sample on each instance; raise naming the sample when one fails."""
    output_names = [entry.name for entry in config.output]
    for sample in warmup_samples(config, model_dir):
        for instance in instances:
            for _ in range(max(sample.count, 1)):
                try:
                    instance.run(sample.inputs, output_names, ExecutionTiming())
                except ConchError as exc:
                    raise InvalidArgumentError(
                        f"warm-up sample '{sample.name}' failed: {exc.message}"
                    ) from None
                except Exception as exc:  # e.g. dims that do not fit the input's reshape
                    raise InvalidArgumentError(
                        f"warm-up sample '{sample.name}' failed: {type(exc).__name__}: {exc}"
                    ) from None
