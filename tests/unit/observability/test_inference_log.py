"""The per-inference record, its request id and output summary, the audit file and the access-log
fields: each piece on its own, without a server."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conch.core.errors import NotFoundError
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.observability.access_log import AccessFields
from conch.observability.audit_log import AuditLog
from conch.observability.inference_log import (
    LOGGER,
    InferenceLog,
    InferenceRecord,
    begin,
    note_error,
    note_request,
    note_response,
    record_fields,
    usable_id,
)
from conch.observability.input_hash import input_hash, tensor_hash
from conch.observability.log_format import JsonFormatter
from conch.observability.output_summary import MAX_TEXT, output_summary

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def response(*outputs: Tensor, **parameters: Any) -> InferenceResponse:
    return InferenceResponse(
        "m", "3", "", list(outputs), dict(parameters), queue_ns=2_000_000, compute_ns=5_000_000
    )


def test_a_request_id_is_the_header_else_the_v2_id_else_generated() -> None:
    assert InferenceRecord("HTTP", "infer", "m", "", "from-header", v2_id="v2").request_id == "from-header"
    assert InferenceRecord("HTTP", "infer", "m", "", None, v2_id="v2").request_id == "v2"
    generated = InferenceRecord("HTTP", "infer", "m", "", None, v2_id="has space")
    assert HEX32.match(generated.request_id) and generated.request_id == generated.request_id


def test_a_usable_id_is_1_to_128_visible_ascii_characters() -> None:
    assert usable_id("a") and usable_id("x" * 128) and usable_id("req-1:2/3")
    for bad in (None, "", "x" * 129, "with space", "tab\t", "caf\u00e9", "line\n"):
        assert not usable_id(bad), bad


def test_an_unusable_header_is_ignored_for_the_next_source() -> None:
    record = begin(None, "HTTP", "infer", "m", "", "x" * 200)

    assert record.header_id is None and not record.logged and not record.audited


def test_a_classification_shaped_output_is_summarized_by_its_argmax() -> None:
    scores = Tensor("probabilities", "FP32", np.array([[0.1, 0.7, 0.2], [0.9, 0.05, 0.05]], dtype=np.float32))
    one_row = Tensor("p", "FP64", np.array([0.2, 0.3, 0.5]))

    assert output_summary(response(scores)) == {
        "output": "probabilities",
        "class": 1,
        "score": pytest.approx(0.7),
        "rows": 2,
    }
    assert output_summary(response(one_row)) == {"output": "p", "class": 2, "score": 0.5}


def test_any_other_output_is_summarized_by_its_first_value() -> None:
    label = Tensor("label", "INT64", np.array([4, 2], dtype=np.int64))
    text = Tensor("text", "BYTES", np.array([b"y" * 100], dtype=object))
    lone = Tensor("score", "FP32", np.array([[float("nan")]], dtype=np.float32))

    assert output_summary(response(label)) == {"output": "label", "value": 4}
    assert output_summary(response(text)) == {"output": "text", "value": "y" * MAX_TEXT}
    assert output_summary(response(lone)) == {"output": "score", "value": "nan"}
    assert output_summary(response()) is None
    assert output_summary(response(text), redact={"text"}) == {"output": "text", "redacted": True}


def test_a_record_collects_the_request_and_response_it_is_told_of() -> None:
    request = InferenceRequest(
        "m", id="v2-7", inputs=[Tensor("x", "FP32", np.ones((1, 2), dtype=np.float32))]
    )
    answer = response(Tensor("y", "INT32", np.array([9], dtype=np.int32)), fallback_level="CPU")

    async def one_inference() -> dict[str, Any]:
        record = begin(InferenceLog(records=True), "gRPC", "ModelInfer", "m", "", None)
        note_request(request)
        note_response(answer)
        return record_fields(record, "OK")

    fields = asyncio.run(one_inference())

    assert fields["request_id"] == "v2-7" and fields["input_hash"] == input_hash(request.inputs)
    assert (fields["queue_ms"], fields["compute_ms"], fields["model_version"]) == (2.0, 5.0, "3")
    assert fields["total_ms"] >= 0 and fields["trace_id"] is None
    assert (fields["fallback_level"], fields["status"]) == ("CPU", "OK")
    assert fields["output_summary"] == {"output": "y", "value": 9}
    assert "responses" not in fields and "error" not in fields


def test_a_stream_record_counts_its_responses_and_keeps_its_first_error() -> None:
    async def one_stream() -> dict[str, Any]:
        record = begin(InferenceLog(records=True), "gRPC", "ModelStreamInfer", "m", "", "s-1")
        note_response(response(Tensor("y", "INT32", np.array([1], dtype=np.int32))))
        note_response(NotFoundError("first"))
        note_error(RuntimeError("second"))
        return record_fields(record, "NOT_FOUND")

    fields = asyncio.run(one_stream())

    assert (fields["responses"], fields["error"], fields["status"]) == (1, "first", "NOT_FOUND")


def test_notes_outside_an_inference_go_nowhere() -> None:
    async def outside() -> None:
        note_request(InferenceRequest("m"))
        note_response(response())
        note_error(RuntimeError())

    asyncio.run(outside())  # no current record: nothing to fail on


def test_finish_writes_one_json_line_with_the_fields_through_the_formatter() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    LOGGER.addHandler(handler)
    try:

        async def one() -> None:
            journal = InferenceLog(records=True)
            record = begin(journal, "HTTP", "infer", "m", "1", "line-1")
            journal.finish(record, 404)

        asyncio.run(one())
    finally:
        LOGGER.removeHandler(handler)
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert (entry["event"], entry["request_id"], entry["status"], entry["model"]) == (
        "inference",
        "line-1",
        404,
        "m",
    )
    assert entry["message"].startswith("inference m/1 404 ") and entry["message"].endswith(
        "request_id=line-1"
    )


def test_the_audit_file_holds_redacted_tensors_as_their_hash_and_rotates(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path), 1.0, {"secret"}, max_bytes=600)
    secret = Tensor("secret", "INT32", np.array([424242], dtype=np.int32))
    plain = Tensor("plain", "BYTES", np.array([b"ok", b"\xff"], dtype=object))
    request = InferenceRequest("m", id="r", inputs=[secret, plain])

    assert audit.sampled()
    form = audit.request_form(request)
    for number in range(3):
        audit.write({"request_id": f"r{number}"}, form, [audit.response_form(response(secret))])
    audit.close()

    entries = [json.loads(line) for f in sorted(tmp_path.iterdir()) for line in f.read_text().splitlines()]
    assert sorted(e["request_id"] for e in entries) == ["r0", "r1", "r2"]
    assert (tmp_path / "audit.jsonl.1").exists()
    inputs = entries[0]["request"]["inputs"]
    assert inputs[0] == {
        "name": "secret",
        "datatype": "INT32",
        "shape": [1],
        "redacted": True,
        "sha256": tensor_hash(secret),
    }
    assert inputs[1]["data"] == ["ok", {"base64": "/w=="}]
    assert entries[0]["responses"][0]["outputs"][0]["redacted"] is True
    assert "424242" not in "".join(f.read_text() for f in tmp_path.iterdir())


def test_a_small_ratio_samples_about_that_share() -> None:
    audit = AuditLog("/dev/null", 0.05, (), max_bytes=0)
    try:
        drawn = sum(audit.sampled() for _ in range(20_000))
    finally:
        audit.close()

    assert 600 < drawn < 1400


def test_uvicorns_access_line_gets_its_values_as_fields() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        "",
        0,
        '%s - "%s %s HTTP/%s" %d',
        ("1.2.3.4:5", "GET", "/v2", "1.1", 200),
        None,
    )

    assert AccessFields().filter(record)
    assert record.event == "http_access"  # type: ignore[attr-defined]
    assert record.fields == {  # type: ignore[attr-defined]
        "client": "1.2.3.4:5",
        "method": "GET",
        "path": "/v2",
        "http_version": "1.1",
        "status": 200,
    }
