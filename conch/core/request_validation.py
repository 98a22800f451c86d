"""Checks an inference request against its model's config before anything runs.

Every failure is a 400 that names the model and the offending input or output, so a client can fix
the call without reading server logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.contract_enforcement import ContractOutcome, ContractViolation, enforce
from conch.core.contracts import Contract
from conch.core.errors import InvalidArgumentError, did_you_mean
from conch.core.input_aliases import input_aliases
from conch.core.types import InferenceRequest


def validate_request(
    request: InferenceRequest,
    config: mc.ModelConfig,
    max_batch_size_completed: bool = False,
    rules: RequestRules | None = None,
    contract: Contract | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The request's inputs by name and the output names to compute, once they fit ``config``.

    ``max_batch_size_completed`` says the server chose ``max_batch_size`` (auto-complete) rather than
    ``config.pbtxt``, so a batch over it is told to raise ``--default-max-batch-size`` instead.
    ``rules``: ``RequestRules.of(config)``, when the caller keeps them (a served version does:
    ``ModelVersion.request_rules``). With a ``contract``, a wrong datatype or an absent required field
    of it is a :class:`ContractViolation`, and an absent field the contract completes is let through:
    :func:`validate_contracted_request` completes it.
    """
    if rules is None:
        rules = RequestRules.of(config)
    expected = rules.inputs
    inputs: dict[str, np.ndarray] = {}
    for tensor in request.inputs:
        name = tensor.name
        rule = expected.get(name)
        if rule is None:  # perhaps the DataFrame column export renamed
            name = input_aliases(config).get(name, name)
            rule = expected.get(name)
        if rule is None:
            raise InvalidArgumentError(
                f"unexpected inference input '{tensor.name}' for model '{config.name}'; "
                f"its inputs are {sorted(expected)}{did_you_mean(tensor.name, expected)}"
            )
        if name in inputs:
            raise InvalidArgumentError(f"input '{name}' is given more than once")
        if tensor.datatype != rule.datatype:
            want = datatypes.from_config_type(rule.config_type).name  # a type conch lacks: its 400
            if contract is not None and name in contract.fields:
                raise ContractViolation(
                    config.name, name, "type", f"it was sent as {tensor.datatype}; send it as {want}"
                )
            raise InvalidArgumentError(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
                f"'{config.name}' expects '{want}'; send it as {want}"
            )
        inputs[name] = tensor.data
    for name in rules.required:
        if name not in inputs and (contract is None or not contract.supplies(name)):
            if contract is not None and name in contract.fields:
                raise ContractViolation(
                    config.name, name, "required", "the input is missing and the field is required"
                )
            missing = [each for each in rules.required if each not in inputs]
            raise InvalidArgumentError(_missing_inputs(config, list(inputs), missing))
    _check_shapes(inputs, rules, config, max_batch_size_completed)
    return inputs, _output_names(request, rules, config)


def validate_contracted_request(
    request: InferenceRequest,
    config: mc.ModelConfig,
    max_batch_size_completed: bool,
    rules: RequestRules,
    contract: Contract,
) -> tuple[dict[str, np.ndarray], list[str], ContractOutcome]:
    """:func:`validate_request`, then the inputs completed and held to the version's ``contract``."""
    inputs, output_names = validate_request(request, config, max_batch_size_completed, rules, contract)
    dims = {name: rule.dims for name, rule in rules.inputs.items()}
    outcome = enforce(contract, inputs, dims, rules.max_batch_size > 0, config.name)
    return inputs, output_names, outcome


@dataclass(frozen=True, slots=True)
class _InputRule:
    """One ``input`` entry of a config, read off the protobuf once."""

    config_type: int
    #: The V2 name of ``config_type``; None for a type conch does not support (refused when checked).
    datatype: str | None
    dims: tuple[int, ...]
    optional: bool
    #: No -1 among ``dims``: a shape fits only when it equals them.
    exact: bool


@dataclass(frozen=True, slots=True)
class RequestRules:
    """What :func:`validate_request` reads of a config.

    Reading a protobuf field costs far more than a dataclass attribute (each repeated entry is a new
    wrapper object): at one input and one output, reading the config on every request cost about 4 us
    of the 5 us the checks took.
    """

    #: By name, in config order; a name given twice keeps its last entry, as a dict built from them.
    inputs: dict[str, _InputRule]
    #: Every entry in config order, for the shape checks.
    entries: tuple[tuple[str, _InputRule], ...]
    required: tuple[str, ...]
    outputs: tuple[str, ...]
    max_batch_size: int

    @classmethod
    def of(cls, config: mc.ModelConfig) -> RequestRules:
        entries = tuple((entry.name, _input_rule(entry)) for entry in config.input)
        inputs = dict(entries)
        return cls(
            inputs=inputs,
            entries=entries,
            required=tuple(name for name, rule in inputs.items() if not rule.optional),
            outputs=tuple(entry.name for entry in config.output),
            max_batch_size=config.max_batch_size,
        )


def _input_rule(entry: mc.ModelInput) -> _InputRule:
    try:
        datatype: str | None = datatypes.from_config_type(entry.data_type).name
    except InvalidArgumentError:
        datatype = None
    dims = tuple(entry.dims)
    return _InputRule(entry.data_type, datatype, dims, entry.optional, -1 not in dims)


def _check_shapes(
    inputs: dict[str, np.ndarray], rules: RequestRules, config: mc.ModelConfig, max_batch_size_completed: bool
) -> None:
    limit = rules.max_batch_size
    batching = limit > 0
    batch_sizes = set()
    for name, rule in rules.entries:
        array = inputs.get(name)
        if array is None:
            continue
        shape = array.shape
        if batching:
            if not shape:
                raise InvalidArgumentError(_unexpected_shape(config, name, [], list(rule.dims)))
            rows = shape[0]
            if rows < 1:
                raise InvalidArgumentError(
                    f"input '{name}' for model '{config.name}' needs a batch dimension >= 1, "
                    f"got shape {list(shape)}"
                )
            if rows > limit:
                raise InvalidArgumentError(_batch_too_large(config, name, rows, max_batch_size_completed))
            batch_sizes.add(rows)
            shape = shape[1:]
        if not (shape == rule.dims if rule.exact else _dims_match(shape, rule.dims)):
            raise InvalidArgumentError(_unexpected_shape(config, name, list(array.shape), list(rule.dims)))
    if len(batch_sizes) > 1:
        raise InvalidArgumentError(
            f"inputs of one request must share one batch size, got {sorted(batch_sizes)}"
        )


def _unexpected_shape(config: mc.ModelConfig, input_name: str, shape: list[int], dims: list[int]) -> str:
    """Triton's words (its shapes written without spaces), then what the shape must look like."""
    batching = config.max_batch_size > 0
    full = ([-1] if batching else []) + dims
    hint = (
        f"; -1 is any size, and the first dimension is the batch (1 to {config.max_batch_size} rows)"
        if batching
        else "; -1 is any size, and the model does not batch (max_batch_size 0): send no batch dimension"
    )
    return (
        f"unexpected shape for input '{input_name}' for model '{config.name}'. "
        f"Expected {_dims_text(full)}, got {_dims_text(shape)}{hint}"
    )


def _missing_inputs(config: mc.ModelConfig, given: list[str], missing: list[str]) -> str:
    """Triton's words: how many inputs were expected and sent, which were sent and which are missing."""
    total = len(config.input)
    required = sum(1 for entry in config.input if not entry.optional)
    expected = f"{total} inputs" if required == total else f"number of inputs between {required} and {total}"
    return (
        f"expected {expected} but got {len(given)} inputs for model '{config.name}'. Got input(s) "
        f"{_names_text(given)}, but missing required input(s) {_names_text(missing)}. "
        "Please provide all required input(s)."
    )


def _dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _names_text(names: Sequence[str]) -> str:
    return "[" + ",".join(f"'{name}'" for name in names) + "]"


def _batch_too_large(config: mc.ModelConfig, input_name: str, rows: int, completed: bool) -> str:
    """Triton's words, then where the limit comes from and how to raise it."""
    limit = config.max_batch_size
    if completed:
        origin = (
            "the server's --default-max-batch-size, as the model's config.pbtxt does not set max_batch_size; "
            f"send at most {limit} rows per request, or set max_batch_size in config.pbtxt, or restart "
            "conch serve with a larger --default-max-batch-size"
        )
    else:
        origin = (
            "max_batch_size in the model's config.pbtxt (for a model made by conch export, its "
            f"max_batch_size= argument); send at most {limit} rows per request, or raise max_batch_size "
            "and restart the server"
        )
    return (
        f"inference request batch-size must be <= {limit} for '{config.name}': input '{input_name}' has "
        f"batch size {rows}. The limit is {origin}"
    )


def _dims_match(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims, strict=True))


def _output_names(request: InferenceRequest, rules: RequestRules, config: mc.ModelConfig) -> list[str]:
    known = list(rules.outputs)
    if not request.outputs:
        return known
    names: list[str] = []
    for output in request.outputs:
        if output.name not in known:
            raise InvalidArgumentError(
                f"unexpected inference output '{output.name}' for model '{config.name}'; "
                f"its outputs are {known}{did_you_mean(output.name, known)}"
            )
        if output.name in names:
            # Triton refuses it too: each output is computed once and answered once.
            raise InvalidArgumentError(
                f"output '{output.name}' already requested; name each output of model '{config.name}' "
                "once in 'outputs'"
            )
        names.append(output.name)
    return names
