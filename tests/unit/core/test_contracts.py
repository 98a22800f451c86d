"""The data contract's format and rules: parsing a hand-edited file, and holding inputs to it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.contract_enforcement import ContractViolation, check_lineage, enforce
from conch.core.contracts import (
    CONTRACT_FILENAME,
    Contract,
    ContractError,
    contract_document,
    parse_contract,
    read_contract,
)
from conch.core.data_lineage import Lineage, copy_headers, lineage_of, parse_timestamp
from conch.core.errors import InvalidArgumentError
from conch.core.request_validation import RequestRules, validate_contracted_request
from conch.core.types import InferenceRequest, Tensor
from conch.observability.contract_metrics import ContractCollector, ContractFigures
from conch.observability.tracing import RequestTrace
from conch.request_contract import ContractCheck, answer_parameters
from conch.validation.contract_checks import contract_findings

DOCUMENT: dict[str, Any] = {
    "fields": [
        {
            "name": "amount",
            "type": "number",
            "constraints": {"required": False, "minimum": 0.0, "maximum": 100.0},
            "conch": {"datatype": "FP32", "missing": "impute", "out_of_range": "count"},
        },
        {
            "name": "age",
            "type": "number",
            "constraints": {"required": False},
            "conch": {"datatype": "FP32", "missing": "default", "default": 40.0},
        },
        {
            "name": "region",
            "type": "string",
            "constraints": {"required": False, "enum": ["north", "south"]},
            "conch": {
                "datatype": "BYTES",
                "missing": "default",
                "default": "north",
                "unknown_category": "count",
            },
        },
        {
            "name": "plan",
            "type": "string",
            "constraints": {"required": True, "enum": ["basic", "plus"]},
            "conch": {"datatype": "BYTES", "unknown_category": "refuse"},
        },
    ],
    "conch": {"format": "conch.data-contract/1", "range": "reference", "data_version": {"required": True}},
}


def contract(changes: dict[str, Any] | None = None, position: int = 0) -> Contract:
    document = json.loads(json.dumps(DOCUMENT))
    for key, value in (changes or {}).items():
        block, _, name = key.rpartition(".")
        target = document["fields"][position]
        for part in filter(None, block.split(".")):
            target = target.setdefault(part, {})
        target[name] = value
    return parse_contract(document)


def column(*values: Any) -> np.ndarray:
    if isinstance(values[0], str):
        return np.array([[v.encode()] for v in values], dtype=object)
    return np.array([[v] for v in values], dtype=np.float32)


def held(inputs: dict[str, np.ndarray], rules: Contract | None = None) -> tuple[dict[str, np.ndarray], Any]:
    dims = {name: (1,) for name in DOCUMENT_NAMES}
    outcome = enforce(rules or contract(), inputs, dims, True, "fraud")
    return inputs, outcome


DOCUMENT_NAMES = [entry["name"] for entry in DOCUMENT["fields"]]


def test_the_document_written_is_the_contract_read(tmp_path: Path) -> None:
    rules = contract()
    (tmp_path / CONTRACT_FILENAME).write_text(yaml.safe_dump(contract_document(rules)), encoding="utf-8")
    assert read_contract(tmp_path) == rules
    assert read_contract(tmp_path / "elsewhere") is None
    assert rules.data_version_required and not rules.ingestion_timestamp_required
    assert [rules.supplies(name) for name in DOCUMENT_NAMES] == [True, True, True, False]


@pytest.mark.parametrize(
    ("changes", "position", "words"),
    [
        ({"conch.datatype": "FLOAT"}, 0, "conch.datatype must be a V2 datatype"),
        ({"type": "string"}, 0, "type must be 'number'"),
        ({"conch.missing": "guess"}, 0, "conch.missing must be one of"),
        ({"constraints.required": True}, 0, "constraints.required is true but conch.missing is 'impute'"),
        ({"conch.default": "forty"}, 1, "conch.default must be a number"),
        ({"conch.default": None}, 1, "conch.missing is 'default' but conch.default is not given"),
        ({"constraints.minimum": "low"}, 0, "constraints.minimum must be a number"),
        ({"constraints.enum": []}, 2, "constraints.enum must be a non-empty list"),
        ({"conch.unknown_category": "maybe"}, 2, "conch.unknown_category must be one of"),
        ({"conch.datatype": "INT64", "type": "integer"}, 0, "cannot carry a missing value"),
    ],
)
def test_a_hand_edit_that_breaks_a_rule_names_the_field_and_key(
    changes: dict[str, Any], position: int, words: str
) -> None:
    with pytest.raises(ContractError, match=words) as caught:
        contract(changes, position)
    assert f"field '{DOCUMENT_NAMES[position]}'" in caught.value.message


def test_malformed_yaml_and_bad_shapes_are_refused(tmp_path: Path) -> None:
    (tmp_path / CONTRACT_FILENAME).write_text("fields: [\n", encoding="utf-8")
    with pytest.raises(ContractError, match="not valid YAML"):
        read_contract(tmp_path)
    for document, words in [
        ([], "must hold a mapping"),
        ({"fields": []}, "must have 'fields'"),
        ({"fields": [DOCUMENT["fields"][0]] * 2}, "described twice"),
        ({"fields": DOCUMENT["fields"], "conch": {"range": "guess"}}, "conch.range"),
        (
            {"fields": DOCUMENT["fields"], "conch": {"data_version": {"required": "yes"}}},
            "conch.data_version",
        ),
    ]:
        with pytest.raises(ContractError, match=words):
            parse_contract(document)


def test_a_contract_must_fit_the_models_inputs() -> None:
    config = mc.ModelConfig(name="fraud")
    for name, kind in [("amount", mc.TYPE_FP32), ("age", mc.TYPE_FP32), ("region", mc.TYPE_STRING)]:
        config.input.add(name=name, data_type=kind, dims=[1])
    with pytest.raises(ContractError, match="field 'plan' is not an input of the model"):
        contract().check_config(config)
    config.input.add(name="plan", data_type=mc.TYPE_FP32, dims=[1])
    with pytest.raises(ContractError, match="field 'plan' has datatype BYTES, but the model's input is FP32"):
        contract().check_config(config)


def test_missing_values_are_imputed_defaulted_or_refused_and_filled_rows_named() -> None:
    inputs, outcome = held(
        {
            "amount": column(5.0, float("nan"), 7.0),
            "age": column(30.0, float("nan"), float("nan")),
            "plan": column("basic", "plus", "basic"),
        }
    )
    assert np.isnan(inputs["amount"][1, 0])  # imputed by the pipeline: passed as missing
    assert inputs["age"].ravel().tolist() == [30.0, 40.0, 40.0]
    assert inputs["region"].ravel().tolist() == [b"north"] * 3  # absent: every row takes the default
    assert outcome.filled == {"age": [1, 2], "region": [0, 1, 2]}
    assert json.loads(outcome.filled_parameter() or "") == [["region"], ["age", "region"], ["age", "region"]]
    _, one = held({"amount": column(5.0), "region": column(""), "plan": column("plus")})
    assert one.filled_parameter() == "age,region"
    _, none = held(
        {"amount": column(5.0), "age": column(3.0), "region": column("south"), "plan": column("plus")}
    )
    assert none.filled_parameter() is None


def test_a_required_field_refuses_absence_and_in_band_missing() -> None:
    with pytest.raises(
        ContractViolation, match="input 'plan' of model 'fraud' breaks its data contract, rule 'required'"
    ):
        held({"amount": column(5.0)})
    with pytest.raises(ContractViolation, match="rule 'required'") as caught:
        held({"plan": column("")})
    assert (caught.value.field, caught.value.rule) == ("plan", "required")


def test_unknown_categories_are_refused_or_counted_as_the_pipeline_treats_them() -> None:
    with pytest.raises(ContractViolation, match="rule 'category': 'gold' is not a category") as caught:
        held({"plan": column("basic", "gold")})
    assert caught.value.field == "plan"
    _, outcome = held({"region": column("west", "north", "east"), "plan": column("basic", "plus", "plus")})
    assert outcome.unknown_categories == {"region": 2}


def test_values_outside_the_training_range_are_counted_or_refused() -> None:
    _, outcome = held(
        {"amount": column(-1.0, 50.0, 101.0, float("nan")), "plan": column("basic", "basic", "plus", "plus")}
    )
    assert outcome.out_of_range == {"amount": 2}
    strict = contract({"conch.out_of_range": "refuse"})
    with pytest.raises(ContractViolation, match=r"rule 'range': .*outside the training range \[0.0, 100.0\]"):
        held({"amount": column(101.0), "plan": column("basic")}, strict)


def test_float32_values_meet_float64_categories_and_bounds_at_their_own_precision() -> None:
    categories = contract({"constraints.enum": [0.1, 0.7]})
    _, outcome = held({"amount": column(0.1, 0.7, 0.2), "plan": column("basic", "plus", "plus")}, categories)
    assert outcome.unknown_categories == {"amount": 1}
    bounds = contract({"constraints.minimum": 0.1, "constraints.maximum": 333.7411185835721})
    edges = column(0.1, 333.7411185835721, 0.09, 334.0)
    _, outcome = held({"amount": edges, "plan": column("basic", "plus", "plus", "basic")}, bounds)
    assert outcome.out_of_range == {"amount": 2}


def test_the_request_checks_let_through_what_the_contract_completes_and_name_the_type_rule() -> None:
    config = mc.ModelConfig(name="fraud", max_batch_size=8)
    for name, kind in [
        ("amount", mc.TYPE_FP32),
        ("age", mc.TYPE_FP32),
        ("region", mc.TYPE_STRING),
        ("plan", mc.TYPE_STRING),
    ]:
        config.input.add(name=name, data_type=kind, dims=[1])
    config.output.add(name="label", data_type=mc.TYPE_INT64, dims=[1])
    rules = RequestRules.of(config)
    request = InferenceRequest("fraud", inputs=[Tensor("plan", "BYTES", column("basic", "plus"))])
    inputs, outputs, outcome = validate_contracted_request(request, config, False, rules, contract())
    assert sorted(inputs) == sorted(DOCUMENT_NAMES) and outputs == ["label"]
    assert inputs["amount"].shape == (2, 1) and np.isnan(inputs["amount"]).all()
    assert outcome.filled == {"age": [0, 1], "region": [0, 1]}
    wrong = InferenceRequest("fraud", inputs=[Tensor("plan", "FP32", column(1.0))])
    with pytest.raises(
        ContractViolation,
        match="input 'plan' of model 'fraud' breaks its data contract, rule 'type': it was sent as FP32; "
        "send it as BYTES",
    ):
        validate_contracted_request(wrong, config, False, rules, contract())
    absent = InferenceRequest("fraud", inputs=[Tensor("amount", "FP32", column(1.0))])
    with pytest.raises(ContractViolation, match=r"input 'plan' .* rule 'required'"):
        validate_contracted_request(absent, config, False, rules, contract())


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2026-01-31T12:00:00Z", 1769860800.0),
        ("2026-01-31T13:00:00.5+01:00", 1769860800.5),
        ("2026-01-31t12:00:00z", 1769860800.0),
        (1769860800, 1769860800.0),
        ("1769860800.25", 1769860800.25),
    ],
)
def test_ingestion_timestamps_are_rfc_3339_or_unix_seconds(value: Any, seconds: float) -> None:
    assert parse_timestamp(value) == seconds


@pytest.mark.parametrize(
    "value", ["yesterday", "2026-01-31T12:00:00", "2026-01-31", "nan", -5, True, [], "inf"]
)
def test_a_malformed_timestamp_is_a_400_naming_the_forms(value: Any) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"'ingestion_timestamp' is malformed.*RFC 3339.*Unix seconds"
    ):
        parse_timestamp(value)


def test_lineage_comes_from_parameters_or_headers_and_may_be_required() -> None:
    assert lineage_of({"other": 1}) is None
    parameters: dict[str, Any] = {"data_version": "v7"}
    headers = {"conch-data-version": "ignored", "conch-ingestion-timestamp": "1769860800"}
    copy_headers(parameters, headers.get)
    assert lineage_of(parameters) == Lineage("v7", 1769860800.0)
    with pytest.raises(InvalidArgumentError, match="'data_version' must be a non-empty string"):
        lineage_of({"data_version": " "})
    with pytest.raises(
        ContractViolation, match=r"parameter 'data_version' of model 'fraud' .* rule 'required'"
    ):
        check_lineage(contract(), Lineage(None, 5.0), "fraud")
    check_lineage(contract(), Lineage("v1", None), "fraud")


def test_freshness_is_never_negative_and_a_future_time_is_counted() -> None:
    figures = ContractFigures()
    assert figures.answered("fraud", 100.0, 102.5) == 2.5
    assert figures.answered("fraud", 200.0, 102.5) == 0.0
    families = {family.name: family for family in ContractCollector(figures).collect()}
    assert [
        s.value for s in families["conch_ingestion_timestamp_future"].samples if s.name.endswith("_total")
    ] == [1]
    count = [s.value for s in families["conch_data_freshness_seconds"].samples if s.name.endswith("_count")]
    assert count == [2]


def fraud_config() -> mc.ModelConfig:
    config = mc.ModelConfig(name="fraud", max_batch_size=8)
    for name, kind in [("amount", mc.TYPE_FP32), ("age", mc.TYPE_FP32)]:
        config.input.add(name=name, data_type=kind, dims=[1])
    for name in ("region", "plan"):
        config.input.add(name=name, data_type=mc.TYPE_STRING, dims=[1])
    return config


def test_validate_reports_a_malformed_contract_and_a_missing_training_range(tmp_path: Path) -> None:
    version = tmp_path / "1"
    version.mkdir()
    assert contract_findings(version, fraud_config(), "fraud") == []  # no contract: nothing to say
    document = json.loads(json.dumps(DOCUMENT))
    (version / CONTRACT_FILENAME).write_text(yaml.safe_dump(document), encoding="utf-8")
    assert contract_findings(version, fraud_config(), "fraud") == []
    del document["fields"][0]["constraints"]["minimum"], document["fields"][0]["constraints"]["maximum"]
    (version / CONTRACT_FILENAME).write_text(yaml.safe_dump(document), encoding="utf-8")
    (no_range,) = contract_findings(version, fraud_config(), "fraud")
    assert (no_range.code, no_range.severity.value, no_range.field) == (
        "contract-no-range",
        "info",
        "1/contract.yaml",
    )
    assert "--reference" in no_range.hint
    document["fields"][1]["conch"]["missing"] = "sometimes"
    (version / CONTRACT_FILENAME).write_text(yaml.safe_dump(document), encoding="utf-8")
    (malformed,) = contract_findings(version, fraud_config(), "fraud")
    assert malformed.code == "contract-malformed" and malformed.is_error
    assert "field 'age': conch.missing must be one of" in malformed.message


def test_the_answer_carries_filled_and_the_trace_carries_lineage_and_freshness() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    request = InferenceRequest("fraud", trace=RequestTrace(provider.get_tracer("test").start_span("POST")))
    outcome = enforce(
        contract(), {"plan": column("basic")}, dict.fromkeys(DOCUMENT_NAMES, (1,)), True, "fraud"
    )
    route_parameters = {"fallback_level": "CPU"}
    checked = ContractCheck(outcome, Lineage("v9", time.time() - 3.0))
    answer = answer_parameters(request, checked, route_parameters)
    assert answer == {"fallback_level": "CPU", "filled": "age,region"}
    assert route_parameters == {"fallback_level": "CPU"}  # the route's dict is shared by its answers
    assert request.trace is not None
    request.trace.span.end()
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["conch.data_version"] == "v9"
    assert 3.0 <= attributes["conch.data_freshness_s"] < 60.0
    provider.shutdown()
