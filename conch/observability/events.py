"""Structured events: anything that changes what is served is one log record with named fields.

A load, unload, swap, breaker change or fallback is reported with :func:`emit`, never formatted by the
layer that reports it. The record's message is the event's name and its fields in ``key=value`` form,
so the text log reads well; the fields also travel on the record (``record.event``, ``record.fields``)
for the JSON formatter, which writes each as its own JSON key. The last :data:`RECENT_LIMIT` events
are also kept in memory, whatever the log level, for the status page's list of recent changes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

RECENT_LIMIT = 100
#: This process's most recent events, oldest first: ``{"time", "event", "severity", "fields"}``.
RECENT: deque[dict[str, Any]] = deque(maxlen=RECENT_LIMIT)


def emit(logger: logging.Logger, event: str, severity: int = logging.INFO, /, **fields: Any) -> None:
    """Log ``event`` with ``fields`` (JSON-friendly values) as one record at ``severity``.

    The first three are positional only, so a field may be called ``level`` (a fallback's level).
    """
    level = logging.getLevelName(severity).lower()
    RECENT.append({"time": time.time(), "event": event, "severity": level, "fields": fields})
    if not logger.isEnabledFor(severity):
        return
    text = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
    logger.log(severity, "%s %s", event, text, extra={"event": event, "fields": fields}, stacklevel=2)


def _text(value: Any) -> str:
    rendered = str(value)
    return repr(rendered) if (" " in rendered or not rendered) else rendered
