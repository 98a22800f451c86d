"""Triton's log settings API (``/v2/logging``, gRPC ``LogSettings``), answered without letting a caller
say where logs go.

Triton's ``log_file`` setting let whoever reached the port have the server write its log to a path
of their choosing, a file that could then be run or read as code or config (CVE-2024-0087). conch
logs to stderr, set when it starts with ``--log-level`` and ``--log-format``: GET reports those
settings in Triton's fields, and POST refuses ``log_file`` (403) and any other change (400), naming
the flags that set them. With ``--auth jwt`` the route needs the ``admin`` scope, as Triton's
logging API group would.
"""

from __future__ import annotations

import logging
from typing import Any

from conch.core.errors import InvalidArgumentError, PermissionDeniedError


def answer(method: str, document: dict[str, Any]) -> dict[str, Any]:
    """The log settings for GET, or for a POST that changes nothing; otherwise the refusal."""
    if method not in ("GET", "POST"):
        raise InvalidArgumentError(f"method {method} is not allowed here; use GET or POST")
    if "log_file" in document:
        raise PermissionDeniedError(
            "conch does not write its log to a file named over the API (the hole of Triton's "
            "CVE-2024-0087); it logs to stderr: redirect that when you start conch serve"
        )
    if document:
        raise InvalidArgumentError(
            f"conch's log settings ({', '.join(sorted(document))}) are set when it starts: use "
            "--log-level and --log-format"
        )
    level = logging.getLogger().getEffectiveLevel()
    return {
        "log_file": "",
        "log_info": level <= logging.INFO,
        "log_warning": level <= logging.WARNING,
        "log_error": level <= logging.ERROR,
        "log_verbose_level": 1 if level <= logging.DEBUG else 0,
        "log_format": "default",
    }
