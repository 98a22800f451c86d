"""PyTorch modules (and TorchScript modules) to ONNX, in eval mode, with a dynamic batch axis.

The module is traced in eval mode under ``no_grad`` whatever mode it was left in, because a notebook
model left in training mode keeps Dropout active and BatchNorm updating its statistics: it answers the
same input differently each time. Every submodule's own mode is put back afterwards, so exporting in
the middle of training changes nothing for the notebook.

One exporter: TorchScript's (``dynamo=False``). torch 2.13's default exporter (``dynamo=True``, built
on ``torch.export``) needs the ``onnxscript`` package and cannot export a TorchScript module, which is
what ``conch export model.pt`` loads; it also took 1-3 s per small model against 0.3 s. The TorchScript
exporter is deprecated upstream, so its deprecation notice is silenced here, where conch made that
choice; tracer warnings (a Python ``if`` on a tensor, say) still reach the user, and the check against
the original catches a trace that does not generalise.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from conch.exporting.agreement import Reference
from conch.exporting.conversion import Conversion, class_name, library_versions
from conch.exporting.errors import ExportError
from conch.exporting.samples import SINGLE_INPUT

BATCH_AXIS = "batch"
SINGLE_OUTPUT = "output"


def convert_module(module: Any, sample: Any) -> Conversion:
    """Export ``module``; ``sample`` is an array or tensor, a sequence of them, or a name -> array map."""
    import torch

    names, arrays = _named_arrays(sample)
    float_type = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    tensors = tuple(_tensor(array, float_type) for array in arrays)
    modes = {submodule: submodule.training for submodule in module.modules()}
    module.eval()
    try:
        with torch.no_grad():
            outputs = _outputs(_forward(module, tensors))
            output_names = _output_names(len(outputs))
            onnx_model = _export(module, tensors, names, output_names)
    finally:
        for submodule, training in modes.items():
            submodule.training = training
    return Conversion(
        onnx_model=onnx_model,
        inputs={name: tensor.numpy() for name, tensor in zip(names, tensors, strict=True)},
        references={
            name: Reference("forward", output.numpy())
            for name, output in zip(output_names, outputs, strict=True)
        },
        framework={"name": "torch", "version": torch.__version__, "model_class": class_name(module)},
        libraries=library_versions("torch"),
        feature_names=None,
    )


def _named_arrays(sample: Any) -> tuple[list[str], list[Any]]:
    if isinstance(sample, Mapping):
        return [str(name) for name in sample], list(sample.values())
    if isinstance(sample, Sequence) and not isinstance(sample, str):
        return [f"input_{i}" for i in range(len(sample))], list(sample)
    return [SINGLE_INPUT], [sample]


def _output_names(count: int) -> list[str]:
    return [SINGLE_OUTPUT] if count == 1 else [f"output_{i}" for i in range(count)]


def _tensor(array: Any, float_type: Any) -> Any:
    import torch

    # A notebook's numpy data is float64 while the module's weights are float32: feed what it expects.
    tensor = array.detach() if isinstance(array, torch.Tensor) else torch.from_numpy(np.asarray(array))
    return tensor.to(float_type) if tensor.is_floating_point() else tensor


def _forward(module: Any, tensors: tuple[Any, ...]) -> Any:
    try:
        return module(*tensors)
    except Exception as exc:  # the user's module: any failure is theirs to read, with its own message
        raise ExportError(f"{type(module).__name__}.forward failed on the sample: {exc}") from exc


def _outputs(result: Any) -> tuple[Any, ...]:
    import torch

    outputs = tuple(result) if isinstance(result, tuple | list) else (result,)
    if not outputs or not all(isinstance(output, torch.Tensor) for output in outputs):
        raise ExportError(
            f"forward returned {type(result).__name__}; export needs a tensor or a tuple of tensors"
        )
    return outputs


def _export(module: Any, tensors: tuple[Any, ...], inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    import torch

    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        path = Path(folder) / "model.onnx"
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export")
        warnings.filterwarnings("ignore", message="The feature will be removed")
        # A scripted module's forward has no Python signature; the exporter then takes the inputs as
        # given, which is what is wanted.
        warnings.filterwarnings("ignore", message="no signature found for <torch.ScriptMethod")
        try:
            torch.onnx.export(
                module,
                tensors,
                str(path),
                dynamo=False,
                input_names=inputs,
                output_names=outputs,
                dynamic_axes={name: {0: BATCH_AXIS} for name in inputs + outputs},
            )
        except Exception as exc:  # the exporter raises many kinds, each with a message worth showing
            raise ExportError(f"torch.onnx.export failed on {type(module).__name__}: {exc}") from exc
        return onnx.load(path)
