"""How the server's log records are written: one JSON object per line for log collectors, or text.

Why JSON: in a container the log is read by a collector (Loki, CloudWatch, Elasticsearch), not a
person, and a load, a swap or a fallback must be found by its fields (``event="model_load"``,
``model="resnet"``), not by a regular expression over prose. A terminal still gets text, which a
person reads faster. :func:`conch.observability.events.emit` puts an event's fields on its record;
:class:`JsonFormatter` writes each as a key of its own.

Every logger goes through the one root handler :func:`configure_logging` installs: conch's (its HTTP
server's included) and grpc's (which only adds a ``NullHandler``), so in JSON
mode their records are JSON lines too.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

#: The values of ``--log-format``; ``auto`` is JSON unless stderr is a terminal.
LOG_FORMATS = ("auto", "json", "text")

#: The text format, as conch has always written it.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Keys every JSON line has (or may have) of its own; a field of the same name is prefixed.
_RESERVED = frozenset({"time", "level", "logger", "message", "event", "exception", "stack"})
_CLASH_PREFIX = "field_"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the event and its fields.

    The output is ASCII (non-ASCII characters escaped), so it stays valid JSON on a stream of any
    encoding; a value JSON cannot hold is written as its ``str``.

    Why orjson first: with ``--log-inferences`` a line is written per inference, on the request path,
    and orjson writes one in 0.5 us where ``json.dumps`` takes 6 us; a line that would not be ASCII
    (or holds what orjson refuses, such as an integer beyond 64 bits) goes through ``json``, which
    escapes. The time's second is formatted once per second.
    """

    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, "event", None)
        if event is not None:
            entry["event"] = event
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            for name, value in fields.items():
                key = str(name)
                while key in _RESERVED or key in entry:
                    key = _CLASH_PREFIX + key
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            line = orjson.dumps(entry, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        except TypeError:
            return json.dumps(entry, default=str)
        return line if line.isascii() else json.dumps(entry, default=str)

    def _utc_time(self, created: float) -> str:
        """``2025-01-31T09:15:02.337Z``: ISO-8601 in UTC with milliseconds."""
        second = int(created)
        if second != self._second:
            self._second, self._second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{int((created - second) * 1000):03d}Z"


def chosen_format(setting: str, stream: TextIO) -> str:
    """``json`` or ``text`` for ``--log-format`` ``setting``: ``auto`` is text only on a terminal."""
    if setting != "auto":
        return setting
    return "text" if stream.isatty() else "json"


def configure_logging(level: int, setting: str, stream: TextIO = sys.stderr) -> None:
    """Send every record at ``level`` or above to ``stream`` in the format ``setting`` chooses.

    In JSON mode Python's warnings become records too (``py.warnings``), so they do not break the
    one-object-per-line stream.
    """
    handler = logging.StreamHandler(stream)
    if chosen_format(setting, stream) == "json":
        handler.setFormatter(JsonFormatter())
        logging.captureWarnings(True)
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
