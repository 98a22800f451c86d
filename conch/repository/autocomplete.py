"""Auto-complete a model config from its ONNX graph, as Triton's ONNX Runtime backend does.

Whatever ``config.pbtxt`` leaves out (or the whole file, when there is none) is filled in from the
graph: input and output names, datatypes and dims, and ``max_batch_size``. A graph whose inputs and
outputs all start with a dynamic dimension supports batching and gets ``default_max_batch_size``
(Triton's default is 4). A batched tensor whose only dimension is the batch gets ``dims: [1]`` with an
empty ``reshape``, which is how Triton shows a ``[N]`` tensor as ``[N, 1]``. As in Triton, a model
with ``max_batch_size`` above 1 and no scheduler in its config gets ``dynamic_batching { }``. The
graph tensors ``sequence_batching`` feeds (controls and states) are left out of ``input`` and ``output``.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import (
    ENSEMBLE_PLATFORM,
    ONNX_BACKEND,
    ONNX_PLATFORM,
    PYTHON_BACKEND,
    PYTORCH_BACKEND,
    PYTORCH_PLATFORM,
)
from conch.backends.signature import ModelSignature, TensorSignature
from conch.core import datatypes
from conch.repository.sequence_config import fed_input_names, state_output_names

DEFAULT_MODEL_FILENAME = "model.onnx"
PYTHON_MODEL_FILENAME = "model.py"
#: Triton's PyTorch backend file: TorchScript. A ``torch.export`` program is ``model.pt2``.
PYTORCH_MODEL_FILENAME = "model.pt"
DEFAULT_MAX_BATCH_SIZE = 4
#: Triton's ``max_sequence_idle_microseconds`` when the config leaves it out.
DEFAULT_SEQUENCE_IDLE_US = 1_000_000


def complete_defaults(config: mc.ModelConfig, model_name: str) -> None:
    """Fill what does not need the graph: name, platform/backend, file name, instances, policy."""
    if not config.name:
        config.name = model_name
    if not config.platform and not config.backend:
        config.platform, config.backend = ONNX_PLATFORM, ONNX_BACKEND
    elif config.platform == ONNX_PLATFORM and not config.backend:
        config.backend = ONNX_BACKEND
    elif config.backend == ONNX_BACKEND and not config.platform:
        config.platform = ONNX_PLATFORM
    elif config.platform == PYTORCH_PLATFORM and not config.backend:
        config.backend = PYTORCH_BACKEND
    elif config.backend == PYTORCH_BACKEND and not config.platform:
        config.platform = PYTORCH_PLATFORM
    if config.platform == ENSEMBLE_PLATFORM:
        # An ensemble runs no instances of its own: its steps' models do.
        if not config.version_policy.WhichOneof("policy_choice"):
            config.version_policy.latest.num_versions = 1
        return
    if not config.default_model_filename:
        config.default_model_filename = {
            PYTHON_BACKEND: PYTHON_MODEL_FILENAME,
            PYTORCH_BACKEND: PYTORCH_MODEL_FILENAME,
        }.get(config.backend, DEFAULT_MODEL_FILENAME)
    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            group.kind = mc.ModelInstanceGroup.KIND_CPU
        if group.count < 1:
            group.count = 1
    if not config.version_policy.WhichOneof("policy_choice"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("sequence_batching") and not config.sequence_batching.max_sequence_idle_microseconds:
        config.sequence_batching.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_US


def supports_batching(signature: ModelSignature) -> bool:
    """Every input and output starts with a dynamic dimension."""
    tensors = signature.inputs + signature.outputs
    return bool(tensors) and all(t.shape and t.shape[0] is None for t in tensors)


def complete_from_signature(
    config: mc.ModelConfig,
    signature: ModelSignature,
    fields_set: set[str],
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill ``max_batch_size``, inputs and outputs that the config left out, from the graph."""
    if "max_batch_size" not in fields_set:
        config.max_batch_size = default_max_batch_size if supports_batching(signature) else 0
    batching = config.max_batch_size > 0
    # The sequence batcher feeds controls and states itself: clients neither send nor get them.
    if not config.input:
        fed = fed_input_names(config)
        for tensor in signature.inputs:
            if tensor.name not in fed:
                _fill_tensor(config.input.add(), tensor, batching)
    if not config.output:
        states = state_output_names(config)
        for tensor in signature.outputs:
            if tensor.name not in states:
                _fill_tensor(config.output.add(), tensor, batching)
    if config.max_batch_size > 1 and not config.WhichOneof("scheduling_choice"):
        config.dynamic_batching.SetInParent()


def _fill_tensor(entry: mc.ModelInput | mc.ModelOutput, tensor: TensorSignature, batching: bool) -> None:
    entry.name = tensor.name
    entry.data_type = datatypes.from_name(tensor.datatype).config_type  # type: ignore[assignment]
    shape = tensor.shape[1:] if batching else tensor.shape
    if batching and not shape:
        entry.dims.append(1)
        entry.reshape.SetInParent()
        return
    entry.dims.extend(-1 if d is None else d for d in shape)
