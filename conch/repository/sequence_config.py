"""What ``sequence_batching`` means for a config's tensors, and its checks against the graph.

A stateful model gets tensors the client never sends: the control inputs (START, END, READY, CORRID)
and its implicit state. The config names them in ``sequence_batching``, not in ``input``, so
auto-complete leaves them out of ``input`` and ``output`` (no client is asked for them, none gets the
state back unless ``output`` lists it) and the graph check counts them as declared. Their datatypes
and shapes must still match the graph: a control is ``[1]`` per row, a state ``dims`` per row.

The section's own rules (controls, strategies, states) are in
:mod:`conch.repository.sequence_config_checks`.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.signature import ModelSignature, TensorSignature
from conch.core import datatypes
from conch.core.findings import Finding, Severity

Control = mc.ModelSequenceBatching.Control
START = Control.CONTROL_SEQUENCE_START
READY = Control.CONTROL_SEQUENCE_READY
END = Control.CONTROL_SEQUENCE_END
CORRID = Control.CONTROL_SEQUENCE_CORRID
#: The datatypes a CORRID control may have, as in Triton.
CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def kind_name(kind: int) -> str:
    """``CONTROL_SEQUENCE_START`` style name of a control kind, for messages."""
    return str(Control.Kind.Name(kind))  # type: ignore[arg-type]


def control_datatype(control: mc.ModelSequenceBatching.Control) -> int:
    """The config datatype the control's tensor has: from its false/true pair, or CORRID's data_type."""
    if control.kind == CORRID:
        return int(control.data_type)
    if control.int32_false_true:
        return mc.TYPE_INT32
    if control.fp32_false_true:
        return mc.TYPE_FP32
    return mc.TYPE_BOOL


def fed_inputs(config: mc.ModelConfig) -> list[mc.ModelInput]:
    """The graph inputs the sequence batcher feeds (controls, state inputs) as config inputs would
    describe them: what a warm-up sample gives them."""
    if not config.HasField("sequence_batching"):
        return []
    batching = config.sequence_batching
    fed = [
        mc.ModelInput(name=c.name, data_type=control_datatype(c.control[0]), dims=[1])  # type: ignore[arg-type]
        for c in batching.control_input
        if len(c.control) == 1
    ]
    return fed + [
        mc.ModelInput(name=s.input_name, data_type=s.data_type, dims=s.dims) for s in batching.state
    ]


def fed_input_names(config: mc.ModelConfig) -> set[str]:
    """Graph inputs the sequence batcher feeds (controls and state inputs), not the client."""
    return {entry.name for entry in fed_inputs(config)}


def state_output_names(config: mc.ModelConfig) -> set[str]:
    """Graph outputs that carry a sequence's state to its next request."""
    if not config.HasField("sequence_batching"):
        return set()
    return {s.output_name for s in config.sequence_batching.state}


def sequence_signature_findings(
    config: mc.ModelConfig, signature: ModelSignature, model: str
) -> list[Finding]:
    """Each control and state tensor is in the graph with the config's datatype and a fitting shape."""
    if not config.HasField("sequence_batching"):
        return []
    batch = [-1] if config.max_batch_size > 0 else []
    inputs = {t.name: t for t in signature.inputs}
    outputs = {t.name: t for t in signature.outputs}
    found = []
    for index, entry in enumerate(config.sequence_batching.control_input):
        if len(entry.control) != 1:
            continue  # reported by sequence_findings
        field = f"sequence_batching.control_input[{index}]"
        datatype = control_datatype(entry.control[0])
        found += _graph_findings(model, field, "input", entry.name, datatype, [*batch, 1], inputs)
    for index, state in enumerate(config.sequence_batching.state):
        field = f"sequence_batching.state[{index}]"
        shape = batch + list(state.dims)
        found += _graph_findings(model, field, "input", state.input_name, state.data_type, shape, inputs)
        found += _graph_findings(model, field, "output", state.output_name, state.data_type, shape, outputs)
    return found


def _graph_findings(
    model: str,
    field: str,
    role: str,
    name: str,
    config_type: int,
    shape: list[int],
    graph: dict[str, TensorSignature],
) -> list[Finding]:
    tensor = graph.get(name)
    if tensor is None:
        return [
            _error(
                "sequence-tensor-not-in-model",
                model,
                field,
                f"sequence batching {role} '{name}' is not in the model; the model's {role}s are "
                f"{sorted(graph)}",
                f"name one of the graph's {role}s",
            )
        ]
    found = []
    wanted = datatypes.BY_CONFIG_TYPE.get(config_type)
    if wanted is None or wanted.name != tensor.datatype:
        found.append(
            _error(
                "sequence-tensor-datatype",
                model,
                field,
                f"sequence batching {role} '{name}' is {datatypes.config_type_name(config_type)} in the "
                f"config but {tensor.datatype} in the model",
                "make the control's false/true values (int32, fp32, bool) or the data_type match the graph",
            )
        )
    actual = [-1 if d is None else d for d in tensor.shape]
    if not shapes_fit(actual, shape):
        found.append(
            _error(
                "sequence-tensor-shape",
                model,
                field,
                f"sequence batching {role} '{name}' gets shape {shape} but the model's is {actual}",
                "a control is [1] per row and a state its dims per row, after the batch dimension when "
                "max_batch_size > 0",
            )
        )
    return found


def shapes_fit(actual: list[int], wanted: list[int]) -> bool:
    """Same rank, and each dimension equal where both are fixed (-1: variable)."""
    return len(actual) == len(wanted) and all(
        a == -1 or w == -1 or a == w for a, w in zip(actual, wanted, strict=True)
    )


def _error(code: str, model: str, field: str, message: str, hint: str) -> Finding:
    return Finding(code, Severity.ERROR, model, field, message, hint)
