"""An ensemble's steps as a data-flow graph, checked from its own ``config.pbtxt`` alone.

Why apart from the scheduler: these are rules, not machinery. Whether every ensemble output is
written, every step input has a source and the steps form no cycle can be decided from the config,
before any step model is loaded, so they are pure functions tested on configs
(``tests/unit/scheduling/test_ensemble_config.py``). What needs the step models' own configs (their tensors,
datatypes, ``max_batch_size``) is in :mod:`conch.scheduling.ensemble.step_checks`.

An *ensemble tensor* is a name on the ensemble's side of a step's maps: an ensemble input, an ensemble
output, or an intermediate tensor one step writes and later steps read.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError


@dataclass(frozen=True)
class EnsembleStep:
    """One step: a request to ``model_name`` whose inputs and outputs are ensemble tensors."""

    index: int
    model_name: str
    #: The version asked for, as a request names it: ``""`` for ``model_version: -1`` (the policy's).
    model_version: str
    #: Step model input -> the ensemble tensor it reads.
    input_map: dict[str, str]
    #: Step model output -> the ensemble tensor it writes.
    output_map: dict[str, str]

    @property
    def reads(self) -> frozenset[str]:
        return frozenset(self.input_map.values())

    @property
    def label(self) -> str:
        """``step 1 (model 'm')``: how messages name a step (its index in ``ensemble_scheduling.step``)."""
        return f"step {self.index} (model '{self.model_name}')"


@dataclass(frozen=True)
class EnsemblePlan:
    """The checked steps of an ensemble, in an order where each step's inputs are written before it."""

    name: str
    steps: tuple[EnsembleStep, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def plan_ensemble(config: mc.ModelConfig) -> EnsemblePlan:
    """The ensemble's plan, or a 400 with the first problem of :func:`ensemble_problems`."""
    problems = ensemble_problems(config)
    if problems:
        raise InvalidArgumentError(problems[0])
    return EnsemblePlan(
        config.name,
        tuple(_ordered(_steps(config), {entry.name for entry in config.input})),
        tuple(entry.name for entry in config.input),
        tuple(entry.name for entry in config.output),
    )


def ensemble_problems(config: mc.ModelConfig) -> list[str]:
    """Every rule the ensemble's own config breaks, each saying what to change; empty when it is sound."""
    name = config.name
    problems = _field_problems(config)
    if not config.ensemble_scheduling.step:
        return problems
    steps = _steps(config)
    problems += _step_field_problems(name, steps)
    if problems:
        return problems
    inputs = [entry.name for entry in config.input]
    outputs = [entry.name for entry in config.output]
    writers = _writers(steps)
    problems += _write_conflicts(name, steps, inputs)
    for step in steps:
        for model_input, tensor in sorted(step.input_map.items()):
            if tensor not in writers and tensor not in inputs:
                problems.append(
                    f"ensemble '{name}' {step.label} reads ensemble tensor '{tensor}' (for its input "
                    f"'{model_input}') that no step writes and that is not an ensemble input; map it to "
                    f"an ensemble input {inputs} or to a tensor an earlier step's output_map writes"
                )
    read = {tensor for step in steps for tensor in step.reads}
    problems += [
        f"ensemble '{name}' input '{tensor}' is not read by any step; map it in a step's input_map or "
        "remove it from the ensemble's inputs"
        for tensor in inputs
        if tensor not in read
    ]
    problems += [
        f"ensemble '{name}' output '{tensor}' is not written by any step; map a step model's output to "
        f"'{tensor}' in that step's output_map"
        for tensor in outputs
        if tensor not in writers
    ]
    problems += [
        f"ensemble '{name}' tensor '{tensor}' is written by step {writers[tensor]} but never read; remove "
        "it from that step's output_map, or make it an ensemble output"
        for tensor in sorted(writers)
        if tensor not in read and tensor not in outputs
    ]
    if not problems:
        problems += _cycle_problems(name, steps, set(inputs))
    return problems


def _field_problems(config: mc.ModelConfig) -> list[str]:
    name = config.name
    problems = []
    if not config.HasField("ensemble_scheduling") or not config.ensemble_scheduling.step:
        problems.append(
            f"ensemble '{name}' has no steps; add ensemble_scheduling {{ step [ {{ model_name: ... "
            "input_map {...} output_map {...} } ] }"
        )
    for field, hint in (
        ("input", "declare each input the ensemble takes, with name, data_type and dims"),
        ("output", "declare each output the ensemble returns, with name, data_type and dims"),
    ):
        if not getattr(config, field):
            problems.append(
                f"ensemble '{name}' declares no {field}; {hint} (ensembles are not auto-completed)"
            )
    for role, entries in (("input", config.input), ("output", config.output)):
        names = [entry.name for entry in entries]
        for duplicate in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"ensemble '{name}' declares {role} '{duplicate}' more than once")
        for entry in entries:
            if entry.data_type == mc.TYPE_INVALID:
                problems.append(f"ensemble '{name}' {role} '{entry.name}' has no data_type; set one")
    if config.instance_group:
        problems.append(
            f"ensemble '{name}' sets instance_group; an ensemble runs no instances of its own (its "
            "steps' models do), so remove it"
        )
    if config.model_warmup:
        problems.append(
            f"ensemble '{name}' sets model_warmup; warm up its step models instead, and remove it here"
        )
    if config.HasField("optimization"):
        problems.append(f"ensemble '{name}' sets optimization; set it on its step models instead")
    return problems


def _steps(config: mc.ModelConfig) -> list[EnsembleStep]:
    return [
        EnsembleStep(
            index,
            step.model_name,
            "" if step.model_version <= 0 else str(step.model_version),
            dict(step.input_map),
            dict(step.output_map),
        )
        for index, step in enumerate(config.ensemble_scheduling.step)
    ]


def _step_field_problems(name: str, steps: list[EnsembleStep]) -> list[str]:
    problems = []
    for step in steps:
        where = f"ensemble '{name}' step {step.index}"
        if not step.model_name:
            problems.append(f"{where} has no model_name; name the model this step runs")
        elif step.model_name == name:
            problems.append(f"{where} runs the ensemble itself; an ensemble cannot be its own step")
        if not step.input_map:
            problems.append(f"{where} has no input_map; map each input of its model to an ensemble tensor")
        if not step.output_map:
            problems.append(f"{where} has no output_map; map the outputs of its model that later steps read")
    return problems


def _writers(steps: list[EnsembleStep]) -> dict[str, int]:
    """Each written ensemble tensor and the first step writing it."""
    writers: dict[str, int] = {}
    for step in steps:
        for tensor in step.output_map.values():
            writers.setdefault(tensor, step.index)
    return writers


def _write_conflicts(name: str, steps: list[EnsembleStep], inputs: list[str]) -> list[str]:
    problems = []
    seen: dict[str, int] = {}
    for step in steps:
        for model_output, tensor in sorted(step.output_map.items()):
            if tensor in inputs:
                problems.append(
                    f"ensemble '{name}' {step.label} writes '{tensor}' (from its output '{model_output}'), "
                    "which is an ensemble input; give the written tensor another name"
                )
            elif tensor in seen:
                problems.append(
                    f"ensemble '{name}' tensor '{tensor}' is written twice, by step {seen[tensor]} and "
                    f"{step.label}; each ensemble tensor has one writer, so rename one of them"
                )
            seen.setdefault(tensor, step.index)
    return problems


def _ordered(steps: list[EnsembleStep], inputs: set[str]) -> list[EnsembleStep]:
    """Steps in data-flow order (config order among those ready together); steps left out are in a cycle."""
    written = set(inputs)
    remaining = list(steps)
    ordered: list[EnsembleStep] = []
    progress = True
    while remaining and progress:
        ready = [step for step in remaining if step.reads <= written]
        progress = bool(ready)
        for step in ready:
            ordered.append(step)
            written |= set(step.output_map.values())
            remaining.remove(step)
    return ordered


def _cycle_problems(name: str, steps: list[EnsembleStep], inputs: set[str]) -> list[str]:
    reached = {step.index for step in _ordered(steps, inputs)}
    stuck = [step for step in steps if step.index not in reached]
    if not stuck:
        return []
    return [
        f"ensemble '{name}' steps form a cycle: {', '.join(step.label for step in stuck)} each wait for a "
        "tensor another of them writes; a step may read only ensemble inputs and tensors of steps that "
        "do not depend on it"
    ]
