"""Warm-up samples for GPU instances whose config has none, so the first request does not pay for CUDA.

Why: the first execution on a GPU creates the CUDA context, loads the kernels and grows the caching
allocator; the guide measured 8 s for a first request. A version is READY only after its instances ran,
so that time moves from a caller to the load. When ``model_warmup`` is empty, conch runs zeros at
each ``preferred_batch_size``, largest first (the input buffers and the allocator's blocks are sized
for the largest batch once, and cuDNN picks kernels for the sizes the batcher will form), or at
``max_batch_size``. A config with its own ``model_warmup`` keeps it; a tensor with a variable
dimension gets none (zeros of a guessed size could fail a model that is right).
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

SAMPLE_NAME = "conch_cold_start"


def cold_start_batch_sizes(config: mc.ModelConfig) -> list[int]:
    """The batch sizes a GPU instance is warmed at, largest first (``[1]``-like for no batching)."""
    if config.max_batch_size <= 0:
        return [1]
    preferred = {
        size for size in config.dynamic_batching.preferred_batch_size if 0 < size <= config.max_batch_size
    }
    return sorted(preferred or {config.max_batch_size}, reverse=True)


def cold_start_config(config: mc.ModelConfig) -> mc.ModelConfig | None:
    """A copy of ``config`` whose ``model_warmup`` is the cold-start samples; None when the config has
    warm-up of its own or a variable dimension."""
    if config.model_warmup or any(d < 0 for entry in config.input for d in entry.dims):
        return None
    warm = mc.ModelConfig()
    warm.CopyFrom(config)
    for size in cold_start_batch_sizes(config):
        sample = warm.model_warmup.add(name=f"{SAMPLE_NAME}_{size}", batch_size=size, count=1)
        for entry in config.input:
            sample.inputs[entry.name].data_type = entry.data_type
            sample.inputs[entry.name].dims.extend(entry.dims)
            sample.inputs[entry.name].zero_data = True
    return warm
