"""Stream entries to requests and back: rows typed from the config, V2 bodies, binary tensors,
timestamps, and the refusals that become dead letters with their reason class."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from conch.core.errors import InvalidArgumentError, NotFoundError, UnavailableError
from conch.core.types import InferenceResponse, Tensor
from conch.repository.config import parse_config
from conch.streams.record import (
    RecordRefused,
    dead_letter_fields,
    decode_record,
    record_timestamp,
    refusal_of,
    result_fields,
)

CONFIG = parse_config(
    """
name: "scorer"
max_batch_size: 8
input [
  { name: "amount" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "country" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "history" data_type: TYPE_INT64 dims: [ 3 ] }
]
output [ { name: "score" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "conch.column_inputs" value: { string_value: '{"Country code": "country"}' } }
"""
)


def _decode(fields: dict[bytes, bytes], limit: int = 10_000) -> object:
    return decode_record("1700000000000-0", fields, "scorer", CONFIG, limit)


def test_a_row_becomes_one_row_tensors_typed_from_the_config() -> None:
    row = {"amount": 12.5, "Country code": "FR", "history": [1, 2, 3]}
    record = _decode({b"data": json.dumps(row).encode(), b"id": b"tx-1", b"data_version": b"v7"})
    tensors = {t.name: t for t in record.request.inputs}  # type: ignore[attr-defined]
    assert tensors["amount"].datatype == "FP32" and tensors["amount"].data.shape == (1, 1)
    assert tensors["country"].data.tolist() == [[b"FR"]]
    assert tensors["history"].data.dtype == np.int64 and tensors["history"].data.shape == (1, 3)
    assert record.request.id == "tx-1"  # type: ignore[attr-defined]
    assert record.request.parameters == {"id": "tx-1", "data_version": "v7"}  # type: ignore[attr-defined]
    assert record.ingested_s == 1_700_000_000.0  # type: ignore[attr-defined]  # the entry id's time


def test_null_and_left_out_fields_are_absent_inputs() -> None:
    record = _decode({b"data": b'{"amount": null, "history": [1, 2, 3]}'})
    assert [t.name for t in record.request.inputs] == ["history"]  # type: ignore[attr-defined]


def test_a_v2_body_and_binary_tensors_decode_with_the_http_codec() -> None:
    body = {"inputs": [{"name": "amount", "datatype": "FP32", "shape": [2, 1], "data": [1, 2]}]}
    record = _decode({b"data": json.dumps(body).encode()})
    assert record.request.inputs[0].data.shape == (2, 1) and not record.one_row  # type: ignore[attr-defined]
    header = {
        "inputs": [
            {"name": "amount", "datatype": "FP32", "shape": [2, 1], "parameters": {"binary_data_size": 8}}
        ]
    }
    binary = np.array([3, 4], np.float32).tobytes()
    record = _decode({b"data": json.dumps(header).encode(), b"binary": binary})
    assert record.request.inputs[0].data.tolist() == [[3.0], [4.0]]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fields", "kind", "words"),
    [
        ({b"data": b"{oops"}, "malformed", "not valid JSON"),
        ({b"data": b"3"}, "malformed", "must be a JSON object"),
        ({b"row": b"{}"}, "malformed", "no 'data' field"),
        ({b"data": b'{"amount": "high"}'}, "contract", "FP32 data must be numbers"),
        ({b"data": b'{"amout": 1}'}, "contract", "did you mean 'amount'"),
        ({b"data": b'{"history": [[1, 2], [3]]}'}, "contract", "history"),
        ({b"data": b"{}", b"pad": b"x" * 200}, "too_large", "over the limit of 100"),
        ({b"data": b"{}", b"ingestion_timestamp": b"2026-01-31 12:00"}, "malformed", "with an offset"),
        ({b"data": b"{}", b"ingestion_timestamp": b"soon"}, "malformed", "neither Unix seconds nor RFC 3339"),
    ],
)
def test_bad_records_are_refused_with_their_class(fields: dict[bytes, bytes], kind: str, words: str) -> None:
    with pytest.raises(RecordRefused) as refused:
        _decode(fields, limit=100 if b"pad" in fields else 10_000)
    assert refused.value.kind == kind
    assert words in refused.value.reason


def test_timestamps_in_unix_seconds_and_rfc_3339() -> None:
    assert record_timestamp("1700000000.5") == 1_700_000_000.5
    assert record_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert record_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000.0


def test_the_models_refusals_map_to_reason_classes() -> None:
    assert refusal_of(NotFoundError("unknown model")).kind == "unknown_model"
    assert refusal_of(InvalidArgumentError("field 'amount' below minimum")).kind == "contract"
    assert refusal_of(UnavailableError("the model is unloading")).kind == "inference"


def test_a_result_carries_the_documented_fields_and_a_row_loses_its_batch_dimension() -> None:
    fields = {b"data": b'{"amount": 1}', b"data_version": b"v7", b"ingestion_timestamp": b"1700000000"}
    record = _decode(fields)
    response = InferenceResponse(
        "scorer",
        "3",
        "1700000000000-0",
        [Tensor.of("score", np.array([[0.25]], np.float32))],
        {"filled": "country"},
    )
    written = result_fields(record, response, 1_700_000_002.0)  # type: ignore[arg-type]
    document = orjson.loads(written[b"data"])
    assert document == {
        "id": "1700000000000-0",
        "model": "scorer",
        "model_version": "3",
        "outputs": {"score": [0.25]},
        "data_version": "v7",
        "ingestion_timestamp": "1700000000",
        "filled": "country",
        "latency_ms": 2000.0,
    }
    assert written[b"entry"] == b"1700000000000-0"


def test_a_dead_letter_keeps_the_original_data_and_names_the_reason() -> None:
    fields = {b"data": b"{oops", b"id": b"tx-9"}
    letter = dead_letter_fields(
        "5-0", fields, RecordRefused("malformed", "field 'data' is not valid JSON"), "scorer"
    )
    assert letter[b"data"] == b"{oops" and letter[b"id"] == b"tx-9" and letter[b"entry"] == b"5-0"
    assert letter[b"reason"] == b"field 'data' is not valid JSON" and letter[b"reason_class"] == b"malformed"
