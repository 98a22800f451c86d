"""``--access-log``: uvicorn's access log, one record per HTTP request, through ``--log-format``.

conch starts uvicorn with its access log off (each line is formatted on the event loop, for every
request, health probes and metrics scrapes included). With ``--access-log true`` uvicorn's
``uvicorn.access`` records reach the root handler like every other record, and :class:`AccessFields`
gives each the fields of a JSON line of its own (``event="http_access"``, ``client``, ``method``,
``path``, ``http_version``, ``status``), while the text format keeps uvicorn's own line.
"""

from __future__ import annotations

import logging

ACCESS_EVENT = "http_access"
_FIELDS = ("client", "method", "path", "http_version", "status")


class AccessFields(logging.Filter):
    """Names the values of uvicorn's access line (``'%s - "%s %s HTTP/%s" %d'``) as fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = record.args
        if isinstance(values, tuple) and len(values) == len(_FIELDS):
            record.event = ACCESS_EVENT
            record.fields = dict(zip(_FIELDS, values, strict=True))
        return True


def enable_access_log() -> None:
    """Let uvicorn's access records through to the root handler, at info.

    Call it after the uvicorn servers' configs are made: making one turns the access logger off
    again (conch's configs say ``access_log=False``), and uvicorn checks it per connection.
    """
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = True
    access.setLevel(logging.INFO)
    if not any(isinstance(f, AccessFields) for f in access.filters):
        access.addFilter(AccessFields())
