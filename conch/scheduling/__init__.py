"""Scheduling decides when a request runs, on which model instance, and with which other requests."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from conch.observability.statistics import ModelStatistics
from conch.scheduling.batch_queue import BatchingSettings
from conch.scheduling.dynamic_batcher import DynamicBatcher
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import DirectScheduler, Scheduler
from conch.scheduling.sequence_batcher import SequenceBatcher
from conch.scheduling.sequence_settings import SequenceSettings


def create_scheduler(config: mc.ModelConfig, pool: InstancePool, statistics: ModelStatistics) -> Scheduler:
    """The sequence batcher for a stateful model, the dynamic batcher when the config asks for it on a
    batching model, else one run per request."""
    if config.HasField("sequence_batching"):
        return SequenceBatcher(SequenceSettings.from_config(config), pool, statistics)
    if config.HasField("dynamic_batching") and config.max_batch_size > 0:
        return DynamicBatcher(BatchingSettings.from_config(config), pool, statistics)
    return DirectScheduler(pool, statistics)
