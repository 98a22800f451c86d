"""Checks an ensemble against its step models' completed configs: names, datatypes, shapes, batching.

Why separate from :mod:`conch.scheduling.ensemble.plan`: these need the step models, which may load
after the ensemble (models load in name order) or be replaced while it serves. The builder runs them
at load against the steps loaded then, and the scheduler runs them again whenever a step's served
version changes, so a step loaded later is checked before its first request. They stay pure: step
configs in, messages out.

Every declaration of one ensemble tensor (an ensemble input or output, a step model's input or
output) must have the same datatype, and full shapes (batch dimension included) that agree where
both are fixed. So a batching ensemble may feed a step model with ``max_batch_size: 0`` whose dims
spell the batch out as ``-1``. Triton also accepts equal dims without the batch dimension there and
drops a batch of one at run time; conch passes tensors to steps unchanged, so it refuses that at load
rather than failing every request with more than one row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.datatypes import config_type_name
from conch.scheduling.ensemble.plan import EnsemblePlan, EnsembleStep


@dataclass(frozen=True)
class TensorDeclaration:
    """What one side declares about an ensemble tensor."""

    where: str
    data_type: int
    #: The shape a request carries: the batch dimension (-1) first for a batching model.
    full_dims: tuple[int, ...]


def step_problems(
    config: mc.ModelConfig, plan: EnsemblePlan, step_configs: Mapping[int, mc.ModelConfig]
) -> list[str]:
    """Every disagreement between the ensemble and the step configs given (by step index).

    Steps missing from ``step_configs`` (their models are not loaded) are not checked.
    """
    problems: list[str] = []
    declared = _ensemble_declarations(config)
    for step in plan.steps:
        step_config = step_configs.get(step.index)
        if step_config is None:
            continue
        problems += _batch_size_problems(config, step, step_config)
        problems += _mapping_problems(config.name, step, step_config)
        _declare_step(declared, step, step_config)
    for tensor, declarations in declared.items():
        problems += _consistency_problems(config.name, tensor, declarations)
    return problems


def nested_cycle(name: str, plan: EnsemblePlan, steps_of: Callable[[str], Sequence[str]]) -> str:
    """A problem when a step model is an ensemble that runs ``name`` again, at any depth; else ``""``.

    ``steps_of`` gives the step model names of a loaded ensemble, and nothing for other models.
    """
    for step in plan.steps:
        path = _path_to(name, step.model_name, steps_of, [name])
        if path:
            return (
                f"ensemble '{name}' {step.label} leads back to '{name}' ({' -> '.join(path)}); "
                "ensembles that include each other would run forever, so remove one of the steps"
            )
    return ""


def _path_to(target: str, model: str, steps_of: Callable[[str], Sequence[str]], path: list[str]) -> list[str]:
    if model == target:
        return [*path, model]
    if model in path:  # a cycle that does not pass through target: that ensemble's own problem
        return []
    for inner in steps_of(model):
        found = _path_to(target, inner, steps_of, [*path, model])
        if found:
            return found
    return []


def _ensemble_declarations(config: mc.ModelConfig) -> dict[str, list[TensorDeclaration]]:
    batching = config.max_batch_size > 0
    declared: dict[str, list[TensorDeclaration]] = {}
    for role, entries in (("input", config.input), ("output", config.output)):
        for entry in entries:
            dims = entry.reshape.shape if entry.HasField("reshape") else entry.dims
            declared.setdefault(entry.name, []).append(
                TensorDeclaration(f"ensemble {role} '{entry.name}'", entry.data_type, _full(dims, batching))
            )
    return declared


def _declare_step(
    declared: dict[str, list[TensorDeclaration]], step: EnsembleStep, step_config: mc.ModelConfig
) -> None:
    batching = step_config.max_batch_size > 0
    for role, entries, mapping in (
        ("input", step_config.input, step.input_map),
        ("output", step_config.output, step.output_map),
    ):
        for entry in entries:
            tensor = mapping.get(entry.name)
            if tensor is not None:
                where = f"{step.label} {role} '{entry.name}'"
                declared.setdefault(tensor, []).append(
                    TensorDeclaration(where, entry.data_type, _full(entry.dims, batching))
                )


def _batch_size_problems(
    config: mc.ModelConfig, step: EnsembleStep, step_config: mc.ModelConfig
) -> list[str]:
    # A step model without batching (0) may still take the ensemble's batch, spelled out in its dims.
    limit = step_config.max_batch_size
    if limit == 0 or limit >= config.max_batch_size:
        return []
    return [
        f"ensemble '{config.name}' has max_batch_size {config.max_batch_size} but its {step.label} "
        f"accepts at most {limit} rows; lower the ensemble's max_batch_size to {limit} or raise the "
        "step model's"
    ]


def _mapping_problems(name: str, step: EnsembleStep, step_config: mc.ModelConfig) -> list[str]:
    where = f"ensemble '{name}' {step.label}"
    model_inputs = {entry.name: entry for entry in step_config.input}
    model_outputs = [entry.name for entry in step_config.output]
    problems = [
        f"{where} maps '{model_input}', which is not an input of '{step.model_name}'; its inputs are "
        f"{sorted(model_inputs)}"
        for model_input in sorted(step.input_map)
        if model_input not in model_inputs
    ]
    problems += [
        f"{where} does not map input '{model_input}' of '{step.model_name}'; add it to the step's "
        "input_map with the ensemble tensor it reads"
        for model_input, entry in model_inputs.items()
        if model_input not in step.input_map and not entry.optional
    ]
    problems += [
        f"{where} maps '{model_output}', which is not an output of '{step.model_name}'; its outputs are "
        f"{model_outputs}"
        for model_output in sorted(step.output_map)
        if model_output not in model_outputs
    ]
    return problems


def _consistency_problems(name: str, tensor: str, declarations: list[TensorDeclaration]) -> list[str]:
    if not declarations:
        return []
    first, problems = declarations[0], []
    for other in declarations[1:]:
        if other.data_type != first.data_type:
            problems.append(
                f"ensemble '{name}' tensor '{tensor}' is {config_type_name(first.data_type)} for "
                f"{first.where} but {config_type_name(other.data_type)} for {other.where}; make the "
                "datatypes agree"
            )
        elif not _dims_agree(first.full_dims, other.full_dims):
            problems.append(
                f"ensemble '{name}' tensor '{tensor}' has shape {list(first.full_dims)} for {first.where} "
                f"but {list(other.full_dims)} for {other.where} (-1: any size, including the batch "
                "dimension of a batching model); make the shapes agree"
            )
    return problems


def _dims_agree(left: tuple[int, ...], right: tuple[int, ...]) -> bool:
    return len(left) == len(right) and all(a == b or -1 in (a, b) for a, b in zip(left, right, strict=True))


def _full(dims: Sequence[int], batching: bool) -> tuple[int, ...]:
    return ((-1,) if batching else ()) + tuple(dims)
