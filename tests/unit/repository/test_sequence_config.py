"""``sequence_batching`` config rules: the load-time checks and ``conch validate`` share them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.signature import ModelSignature, TensorSignature
from conch.core.errors import InvalidArgumentError
from conch.repository.autocomplete import complete_from_signature
from conch.repository.config import parse_config
from conch.repository.config_validation import (
    batching_findings,
    check_against_signature,
    signature_findings,
)
from conch.validation import Severity, validate_model
from conch.validation.warmup import warmup_config_findings
from tests.fixtures.onnx_models import write_repository
from tests.fixtures.sequence_models import accumulator_config, accumulator_model

ACCUMULATOR = ModelSignature(
    inputs=(
        TensorSignature("INPUT", "FP32", (None, 1)),
        TensorSignature("START", "INT32", (None, 1)),
        TensorSignature("READY", "INT32", (None, 1)),
        TensorSignature("END", "INT32", (None, 1)),
        TensorSignature("CORRID", "UINT64", (None, 1)),
        TensorSignature("STATE_IN", "FP32", (None, 1)),
    ),
    outputs=(
        TensorSignature("OUTPUT", "FP32", (None, 1)),
        TensorSignature("STATE_OUT", "FP32", (None, 1)),
        TensorSignature("CONTROLS", "INT32", (None, 3)),
        TensorSignature("CORRID_OUT", "UINT64", (None, 1)),
    ),
)


def completed(text: str) -> mc.ModelConfig:
    config = parse_config(text)
    complete_from_signature(config, ACCUMULATOR, {"max_batch_size"})
    return config


def codes(config: mc.ModelConfig) -> list[str]:
    found = signature_findings(config, ACCUMULATOR, "acc") + batching_findings(config, "acc")
    return [finding.code for finding in found if finding.is_error]


def test_controls_and_states_are_neither_client_inputs_nor_missing_graph_inputs() -> None:
    config = completed(accumulator_config("acc"))
    assert [entry.name for entry in config.input] == ["INPUT"]
    assert [entry.name for entry in config.output] == ["OUTPUT", "CONTROLS", "CORRID_OUT"]
    assert not config.HasField("dynamic_batching")  # the sequence batcher is the scheduler
    check_against_signature(config, ACCUMULATOR)
    assert codes(config) == []


def test_without_sequence_batching_the_control_inputs_are_undeclared_graph_inputs() -> None:
    config = parse_config('max_batch_size: 4\ninput [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]')
    complete_from_signature(config, ACCUMULATOR, {"max_batch_size"})
    with pytest.raises(InvalidArgumentError, match=r"config has no input for graph input\(s\) \['START'"):
        check_against_signature(config, ACCUMULATOR)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        # Triton's rules
        (("int32_false_true: [ 0, 1 ]", "int32_false_true: [ 0, 1, 2 ]"), "sequence-control-values"),
        (
            ("int32_false_true: [ 0, 1 ]", "int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ]"),
            "sequence-control-values",
        ),
        (("data_type: TYPE_UINT64", "data_type: TYPE_FP32"), "sequence-corrid-datatype"),
        (
            ("data_type: TYPE_UINT64", "data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ]"),
            "sequence-corrid-false-true",
        ),
        (('name: "READY"', 'name: "START"'), "sequence-control-duplicate"),
        (("CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_START"), "sequence-control-kind-repeated"),
        (("direct { }", "oldest { preferred_batch_size: [ 8 ] }"), "sequence-preferred-batch-size-invalid"),
        (("direct { }", "direct { minimum_slot_utilization: 1.5 }"), "sequence-slot-utilization-invalid"),
        (("zero_data: true", 'data_file: "state.bin"'), "sequence-initial-state-data"),
        (("dims: [ 1 ] zero_data", "dims: [ -1 ] zero_data"), "sequence-initial-state-dims"),
        # against the graph
        (('name: "END"', 'name: "FINISH"'), "sequence-tensor-not-in-model"),
    ],
)
def test_invalid_sequence_sections_are_refused(change: tuple[str, str], code: str) -> None:
    old, new = change
    text = accumulator_config("acc")
    assert old in text
    config = completed(text.replace(old, new, 1))
    assert code in codes(config)
    with pytest.raises(InvalidArgumentError):
        check_against_signature(config, ACCUMULATOR)


def test_a_control_whose_datatype_differs_from_the_graph_is_refused() -> None:
    text = accumulator_config("acc").replace(
        "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]",
        "CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ]",
    )
    config = completed(text)
    found = [f for f in signature_findings(config, ACCUMULATOR, "acc") if f.is_error]
    assert [f.code for f in found] == ["sequence-tensor-datatype"]
    assert "'START' is TYPE_FP32 in the config but INT32 in the model" in found[0].message
    assert found[0].field == "sequence_batching.control_input[0]"


def test_a_state_whose_dims_differ_from_the_graph_is_refused() -> None:
    config = completed(accumulator_config("acc").replace("dims: [ 1 ]\n", "dims: [ 2 ]\n", 1))
    found = [f for f in signature_findings(config, ACCUMULATOR, "acc") if f.is_error]
    assert {f.code for f in found} >= {"sequence-tensor-shape"}
    assert "gets shape [-1, 2] but the model's is [-1, 1]" in found[0].message


def test_a_control_also_listed_as_input_is_refused() -> None:
    text = accumulator_config("acc") + 'input [ { name: "START" data_type: TYPE_INT32 dims: [ 1 ] } ]'
    assert "sequence-control-in-input" in codes(completed(text))


def test_triton_wording_for_repeated_kinds() -> None:
    config = completed(accumulator_config("acc").replace("CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_START"))
    messages = [f.message for f in batching_findings(config, "acc")]
    assert "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for acc" in messages


def test_conch_validate_accepts_a_stateful_model_and_runs_it(tmp_path: Path) -> None:
    repository = write_repository(tmp_path, {"acc": (accumulator_model(), accumulator_config("acc"))})
    found = validate_model(repository / "acc")
    assert [f for f in found if f.severity is not Severity.INFO] == []  # it ran: no random-input warning


def warmup_input(name: str, data_type: str) -> str:
    return f'{{ key: "{name}" value: {{ data_type: {data_type} dims: [ 1 ] zero_data: true }} }}'


FED = [("START", "TYPE_INT32"), ("READY", "TYPE_INT32"), ("END", "TYPE_INT32"), ("CORRID", "TYPE_UINT64")]


def test_warm_up_samples_give_the_fed_inputs_as_in_triton() -> None:
    listed = [("INPUT", "TYPE_FP32"), *FED, ("STATE_IN", "TYPE_FP32")]
    entries = ", ".join(warmup_input(*i) for i in listed)
    sample = f'model_warmup [ {{ name: "w" batch_size: 1 inputs [ {entries} ] }} ]'
    assert warmup_config_findings(completed(accumulator_config("acc") + sample), "acc") == []
    without_state = sample.replace(", " + warmup_input("STATE_IN", "TYPE_FP32"), "")
    found = warmup_config_findings(completed(accumulator_config("acc") + without_state), "acc")
    assert [f.message for f in found] == ["warm-up sample 'w' has no data for config input 'STATE_IN'"]
