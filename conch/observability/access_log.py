"""``--access-log``: one record per HTTP answer, through ``--log-format``.

Off by default (each line is formatted on the event loop, for every request, health probes and
metrics scrapes included). With ``--access-log true`` the HTTP servers write a record per answer on
``conch.http.access`` (:data:`ACCESS_LOGGER`), and :class:`AccessFields` gives
each the fields of a JSON line of its own (``event="http_access"``, ``client``, ``method``, ``path``,
``http_version``, ``status``), while the text format keeps the common one-line form.
"""

from __future__ import annotations

import logging

#: The logger the HTTP servers write one record per answer on.
ACCESS_LOGGER = "conch.http.access"
ACCESS_EVENT = "http_access"
_FIELDS = ("client", "method", "path", "http_version", "status")


class AccessFields(logging.Filter):
    """Names the values of the access line (``'%s - "%s %s HTTP/%s" %d'``) as fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = record.args
        if isinstance(values, tuple) and len(values) == len(_FIELDS):
            record.event = ACCESS_EVENT
            record.fields = dict(zip(_FIELDS, values, strict=True))
        return True


def enable_access_log() -> None:
    """Let the access records through to the root handler, at info, with their fields named."""
    access = logging.getLogger(ACCESS_LOGGER)
    access.handlers = []
    access.propagate = True
    access.setLevel(logging.INFO)
    if not any(isinstance(f, AccessFields) for f in access.filters):
        access.addFilter(AccessFields())
