"""The JSON log format: one object per record, an event's fields as keys, and every logger through it."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from conch.observability.events import emit
from conch.observability.log_format import JsonFormatter, chosen_format, configure_logging

ISO_UTC_MILLISECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class Lines:
    """A logger whose records :class:`JsonFormatter` writes into memory, read back as parsed lines."""

    def __init__(self, name: str) -> None:
        self.stream = io.StringIO()
        handler = logging.StreamHandler(self.stream)
        handler.setFormatter(JsonFormatter())
        self.logger = logging.getLogger(name)
        self.logger.handlers = [handler]
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)

    def records(self) -> list[dict[str, Any]]:
        text = self.stream.getvalue()
        assert text.endswith("\n")
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def lines(request: pytest.FixtureRequest) -> Iterator[Lines]:
    captured = Lines(f"tests.log_format.{request.node.name}")
    yield captured
    captured.logger.handlers = []


def test_a_record_without_fields_has_time_level_logger_and_message(lines: Lines) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    lines.logger.warning("model '%s' has %d versions", "resnet", 2)

    (record,) = lines.records()
    assert set(record) == {"time", "level", "logger", "message"}
    assert record["level"] == "WARNING"
    assert record["logger"] == lines.logger.name
    assert record["message"] == "model 'resnet' has 2 versions"
    assert ISO_UTC_MILLISECONDS.match(record["time"]), record["time"]
    stamp = datetime.fromisoformat(record["time"].replace("Z", "+00:00"))
    assert before <= stamp <= datetime.now(UTC)


def test_an_event_and_each_field_are_keys_of_their_own(lines: Lines) -> None:
    emit(lines.logger, "model_loaded", model="resnet", version=3, seconds=1.25, ready=[1, 3])

    (record,) = lines.records()
    assert record["event"] == "model_loaded"
    assert record["model"] == "resnet"
    assert record["version"] == 3
    assert record["seconds"] == 1.25
    assert record["ready"] == [1, 3]
    assert record["level"] == "INFO"
    assert record["message"] == "model_loaded model=resnet version=3 seconds=1.25 ready='[1, 3]'"


def test_a_field_named_like_a_key_of_the_line_is_prefixed_not_overwritten(lines: Lines) -> None:
    fields = {
        "time": "yesterday",
        "level": "CPU",
        "logger": "mine",
        "message": "hello",
        "event": "other",
        "exception": "none",
        "field_level": "taken",
    }
    lines.logger.error("fallback", extra={"event": "fallback", "fields": fields})

    (record,) = lines.records()
    assert ISO_UTC_MILLISECONDS.match(record["time"])
    assert record["level"] == "ERROR"
    assert record["logger"] == lines.logger.name
    assert record["message"] == "fallback"
    assert record["event"] == "fallback"
    assert record["field_time"] == "yesterday"
    assert record["field_level"] == "CPU"
    assert record["field_field_level"] == "taken"
    assert record["field_logger"] == "mine"
    assert record["field_message"] == "hello"
    assert record["field_event"] == "other"
    assert record["field_exception"] == "none"
    assert "exception" not in record


def test_an_exception_is_one_string_field_and_the_line_stays_one_line(lines: Lines) -> None:
    try:
        raise ValueError("bad\nshape")
    except ValueError:
        lines.logger.exception("load failed")

    assert lines.stream.getvalue().count("\n") == 1
    (record,) = lines.records()
    assert record["message"] == "load failed"
    assert record["level"] == "ERROR"
    assert record["exception"].startswith("Traceback (most recent call last):")
    assert record["exception"].endswith("ValueError: bad\nshape")


def test_non_ascii_text_round_trips_and_the_line_is_ascii(lines: Lines) -> None:
    emit(lines.logger, "model_loaded", model="modèle-日本", reason='quote " and \\ back')
    lines.logger.info("café ✓")

    assert lines.stream.getvalue().isascii()
    first, second = lines.records()
    assert first["model"] == "modèle-日本"
    assert first["reason"] == 'quote " and \\ back'
    assert second["message"] == "café ✓"


def test_a_value_json_cannot_hold_is_written_as_its_text(lines: Lines) -> None:
    emit(lines.logger, "model_loaded", path=io.StringIO, count=2)

    (record,) = lines.records()
    assert record["path"] == str(io.StringIO)
    assert record["count"] == 2


def test_auto_is_text_on_a_terminal_and_json_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert chosen_format("auto", Terminal()) == "text"
    assert chosen_format("auto", io.StringIO()) == "json"
    assert chosen_format("json", Terminal()) == "json"
    assert chosen_format("text", io.StringIO()) == "text"


@contextlib.contextmanager
def bare_root() -> Iterator[None]:
    """The root logger without handlers, as at a server's start (pytest adds its own); then restored."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = handlers, level
        logging.captureWarnings(False)


def test_json_mode_writes_uvicorn_grpc_and_warnings_records_as_json() -> None:
    stream = io.StringIO()
    with bare_root():
        configure_logging(logging.INFO, "json", stream)
        logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
        logging.getLogger("grpc._cython.cygrpc").error("channel broke")
        logging.getLogger("conch.runtime.model_process").debug("below the level")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)

    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [
        ("uvicorn.error", "WARNING"),
        ("grpc._cython.cygrpc", "ERROR"),
        ("py.warnings", "WARNING"),
    ]
    assert "deprecated thing" in records[2]["message"]


def test_text_mode_keeps_the_text_format() -> None:
    stream = io.StringIO()
    with bare_root():
        configure_logging(logging.INFO, "text", stream)
        emit(logging.getLogger("conch.lifecycle"), "model_loaded", model="resnet", seconds=0.5)

    line = stream.getvalue()
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.match(rf"^{stamp} INFO conch.lifecycle: model_loaded model=resnet seconds=0.5\n$", line), line
