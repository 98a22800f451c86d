"""Triton's rules for the ``sequence_batching`` section on its own, checked at load and by
``conch validate`` (through :func:`conch.repository.config_validation.batching_findings`).

The findings follow Triton's ``model_config_utils`` checks, in its words; conch adds a few of its own
where Triton would accept a config and then misbehave (a control listed in ``input`` too, a control
input naming several kinds) or where conch does not support a field yet (``initial_state.data_file``,
``iterative_sequence``).
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.findings import Finding, Severity
from conch.repository.sequence_config import CORRID, CORRID_TYPES, kind_name, shapes_fit


def sequence_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    """The ``sequence_batching`` section on its own: controls, strategy settings, states."""
    if not config.HasField("sequence_batching"):
        return []
    batching = config.sequence_batching
    found = _control_findings(config, model) + _state_findings(config, model)
    if batching.HasField("oldest"):
        for index, size in enumerate(batching.oldest.preferred_batch_size):
            if size <= 0 or size > config.max_batch_size:
                found.append(
                    _error(
                        "sequence-preferred-batch-size-invalid",
                        model,
                        f"sequence_batching.oldest.preferred_batch_size[{index}]",
                        f"sequence batching preferred batch size {size} must be positive and <= max batch "
                        f"size {config.max_batch_size} for {model}",
                        "list batch sizes the oldest strategy may aim for, each from 1 to max_batch_size",
                    )
                )
    utilization = batching.direct.minimum_slot_utilization
    if batching.HasField("direct") and not 0.0 <= utilization <= 1.0:
        found.append(
            _error(
                "sequence-slot-utilization-invalid",
                model,
                "sequence_batching.direct.minimum_slot_utilization",
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {model}, "
                f"got {utilization}",
                "give the share of the batch's slots that must hold a request before it runs early, e.g. 0.5",
            )
        )
    if batching.iterative_sequence:
        found.append(
            _error(
                "sequence-iterative-unsupported",
                model,
                "sequence_batching.iterative_sequence",
                "iterative_sequence is not supported by conch",
                "remove iterative_sequence: conch runs sequences whose requests the client sends",
            )
        )
    return found


def _control_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    found = []
    seen_names: set[str] = set()
    seen_kinds: set[int] = set()
    declared = {entry.name for entry in config.input}
    for index, entry in enumerate(config.sequence_batching.control_input):
        field = f"sequence_batching.control_input[{index}]"
        if not entry.name:
            found.append(
                _error(
                    "sequence-control-unnamed",
                    model,
                    f"{field}.name",
                    f"sequence batching control tensor must have a name for {model}",
                    'name the graph input that takes this control, e.g. name: "START"',
                )
            )
            continue
        if entry.name in seen_names:
            found.append(
                _error(
                    "sequence-control-duplicate",
                    model,
                    f"{field}.name",
                    f"sequence batching control tensor '{entry.name}' is specified for multiple control "
                    f"kinds for {model}",
                    "give each control kind its own graph input",
                )
            )
        seen_names.add(entry.name)
        if entry.name in declared:
            found.append(
                _error(
                    "sequence-control-in-input",
                    model,
                    f"{field}.name",
                    f"control input '{entry.name}' is also listed in input, so clients would have to send it",
                    f"remove '{entry.name}' from input: the sequence batcher feeds it",
                )
            )
        if len(entry.control) != 1:
            found.append(
                _error(
                    "sequence-control-count",
                    model,
                    f"{field}.control",
                    f"control input '{entry.name}' lists {len(entry.control)} controls; it needs exactly one",
                    "give each control kind (START, END, READY, CORRID) a control_input of its own",
                )
            )
            continue
        control = entry.control[0]
        if control.kind in seen_kinds:
            found.append(
                _error(
                    "sequence-control-kind-repeated",
                    model,
                    f"{field}.control[0].kind",
                    f"sequence batching specifies multiple {kind_name(control.kind)} tensors for {model}",
                    "keep one control_input per control kind",
                )
            )
        seen_kinds.add(control.kind)
        found += _control_value_findings(control, model, f"{field}.control[0]")
    return found


def _control_value_findings(
    control: mc.ModelSequenceBatching.Control, model: str, field: str
) -> list[Finding]:
    kind = kind_name(control.kind)
    pairs = {
        name: len(values)
        for name, values in (
            ("int32_false_true", control.int32_false_true),
            ("fp32_false_true", control.fp32_false_true),
            ("bool_false_true", control.bool_false_true),
        )
        if values
    }
    if control.kind == CORRID:
        if pairs:
            return [
                _error(
                    "sequence-corrid-false-true",
                    model,
                    field,
                    "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
                    f"'bool_false_true' for {kind} for {model}",
                    "give CORRID a data_type instead, e.g. data_type: TYPE_UINT64",
                )
            ]
        if control.data_type not in CORRID_TYPES:
            return [
                _error(
                    "sequence-corrid-datatype",
                    model,
                    f"{field}.data_type",
                    f"unexpected data type for control {kind} for {model}. Allowed data types are "
                    "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
                    "set data_type to the graph input's type: TYPE_UINT64 for numeric ids, TYPE_STRING "
                    "for string ids",
                )
            ]
        return []
    if len(pairs) != 1:
        return [
            _error(
                "sequence-control-values",
                model,
                field,
                f"sequence batching must specify exactly one of 'int32_false_true', 'fp32_false_true' or "
                f"'bool_false_true' for {kind} for {model}",
                "give the graph input's false and true values, e.g. int32_false_true: [ 0, 1 ]",
            )
        ]
    name, count = next(iter(pairs.items()))
    if count != 2:
        return [
            _error(
                "sequence-control-values",
                model,
                f"{field}.{name}",
                f"sequence batching control '{name}' must have exactly 2 entries for {kind} for {model}",
                f"list the false value then the true value, e.g. {name}: [ 0, 1 ]",
            )
        ]
    return []


def _state_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    found = []
    taken = {entry.name for entry in config.input} | {c.name for c in config.sequence_batching.control_input}
    for index, state in enumerate(config.sequence_batching.state):
        field = f"sequence_batching.state[{index}]"
        if not state.input_name or not state.output_name:
            found.append(
                _error(
                    "sequence-state-unnamed",
                    model,
                    field,
                    "a sequence_batching state needs both input_name and output_name",
                    "name the graph input that takes the state and the graph output that gives it back",
                )
            )
            continue
        if state.input_name in taken:
            found.append(
                _error(
                    "sequence-state-input-taken",
                    model,
                    f"{field}.input_name",
                    f"state input '{state.input_name}' is also an input or a control input",
                    f"remove '{state.input_name}' from input: the sequence batcher feeds the state",
                )
            )
        taken.add(state.input_name)
        if len(state.initial_state) > 1:
            found.append(
                _error(
                    "sequence-initial-state-count",
                    model,
                    f"{field}.initial_state",
                    f"initial_state field for state input '{state.input_name}' must contain exactly one or "
                    f"zero element. Found '{len(state.initial_state)}' elements.",
                    "keep one initial_state per state",
                )
            )
        for initial in state.initial_state[:1]:
            found += _initial_state_findings(state, initial, model, f"{field}.initial_state[0]")
    return found


def _initial_state_findings(
    state: mc.ModelSequenceBatching.State,
    initial: mc.ModelSequenceBatching.InitialState,
    model: str,
    field: str,
) -> list[Finding]:
    found = []
    if initial.data_type != state.data_type:
        found.append(
            _error(
                "sequence-initial-state-datatype",
                model,
                f"{field}.data_type",
                f"initial_state of state '{state.input_name}' has data_type "
                f"{datatypes.config_type_name(initial.data_type)} but the state's is "
                f"{datatypes.config_type_name(state.data_type)}",
                f"set data_type: {datatypes.config_type_name(state.data_type)}",
            )
        )
    dims, fixed = list(initial.dims), list(state.dims)
    if any(d < 0 for d in dims) or not shapes_fit(dims, fixed):
        found.append(
            _error(
                "sequence-initial-state-dims",
                model,
                f"{field}.dims",
                f"initial_state dims {dims} of state '{state.input_name}' must be fixed sizes that fit the "
                f"state's dims {fixed}",
                "give each variable state dimension (-1) a size in initial_state.dims",
            )
        )
    if initial.WhichOneof("state_data") != "zero_data" or not initial.zero_data:
        found.append(
            _error(
                "sequence-initial-state-data",
                model,
                f"{field}",
                f"initial_state of state '{state.input_name}' must set zero_data: true; conch does not "
                "read initial_state data_file yet",
                "use zero_data: true, or leave initial_state out (the first request then gets zeros)",
            )
        )
    return found


def _error(code: str, model: str, field: str, message: str, hint: str) -> Finding:
    return Finding(code, Severity.ERROR, model, field, message, hint)
