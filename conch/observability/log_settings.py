"""Triton's logging extension (``/v2/logging``, gRPC ``LogSettings``): how much the server logs, changed
while it runs, without letting a caller say where logs go.

Why: debugging a server in production means turning verbose logs on for a while and off again
without a restart, as Triton's users do with ``log_verbose_level``. But Triton's ``log_file`` setting
let whoever reached the port have the server write its log to a path of their choosing, a file that
could then be run or read as code or config (CVE-2024-0087). conch logs to stderr, so ``log_file``
is refused (403), and so is a ``log_format`` other than the one reported (``--log-format`` sets it
at start).

conch's levels are thresholds (``--log-level``): errors, then warnings, then information, then
debug records (``log_verbose_level`` above 0). A change is applied to those Triton fields as they
stand, and must leave them a threshold: information logged with warnings off cannot be, and is
refused with what to send. With ``--auth jwt`` the route needs the ``admin`` scope, as Triton's
logging API group would. With ``--proxies`` it sets the model process's level, where the model,
batching and lifecycle records come from.
"""

from __future__ import annotations

import logging
from typing import Any

from conch.core.errors import InvalidArgumentError, MethodNotAllowedError, PermissionDeniedError

log = logging.getLogger(__name__)

#: Triton's on/off fields, each level's from the most severe: each needs the ones before it.
_SWITCHES = ("log_error", "log_warning", "log_info")
_LEVELS = (logging.ERROR, logging.WARNING, logging.INFO)
_VERBOSE = "log_verbose_level"
_SETTABLE = (*_SWITCHES, _VERBOSE)


def answer(method: str, document: dict[str, Any]) -> dict[str, Any]:
    """The log settings, after a POST's changes; a change that cannot be made is refused whole."""
    if method not in ("GET", "POST"):
        raise MethodNotAllowedError(method, ("GET", "POST"))
    if "log_file" in document:
        raise PermissionDeniedError(
            "conch does not write its log to a file named over the API (the hole of Triton's "
            "CVE-2024-0087); it logs to stderr: redirect that when you start conch serve"
        )
    root = logging.getLogger()
    settings = settings_of(root.getEffectiveLevel())
    changes = dict(document)
    if changes.get("log_format", settings["log_format"]) != settings["log_format"]:
        raise InvalidArgumentError(
            "the log format is set when conch serve starts: use --log-format json|text"
        )
    changes.pop("log_format", None)
    unknown = sorted(set(changes) - set(_SETTABLE))
    if unknown:
        raise InvalidArgumentError(
            f"unknown log setting {', '.join(unknown)}; the settings are log_file, {', '.join(_SETTABLE)}, "
            "log_format"
        )
    if changes:
        level = _level_of(settings | {name: _checked(name, value) for name, value in changes.items()})
        # The handlers too: a logger with a level of its own (the access log's) still meets them.
        root.setLevel(level)
        for handler in root.handlers:
            handler.setLevel(level)
        log.warning("log level set to %s over the logging API", logging.getLevelName(level))
    return settings_of(root.getEffectiveLevel())


def settings_of(level: int) -> dict[str, Any]:
    """Triton's fields for conch's threshold ``level``."""
    return {
        "log_file": "",
        "log_info": level <= logging.INFO,
        "log_warning": level <= logging.WARNING,
        "log_error": level <= logging.ERROR,
        _VERBOSE: 1 if level <= logging.DEBUG else 0,
        "log_format": "default",
    }


def _checked(name: str, value: Any) -> Any:
    if name == _VERBOSE:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(f"{_VERBOSE} must be a whole number >= 0 (0: no debug records)")
    elif not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be true or false")
    return value


def _level_of(settings: dict[str, Any]) -> int:
    """The threshold the fields describe, or the error that says which to change with which."""
    on = [settings[name] for name in _SWITCHES]
    if on != sorted(on, reverse=True):  # a level logged while a more severe one is not
        raise InvalidArgumentError(
            "conch's log levels are thresholds: log_info needs log_warning and log_error, and "
            "log_warning needs log_error; send them together"
        )
    if settings[_VERBOSE] > 0:
        if not all(on):
            raise InvalidArgumentError(f"{_VERBOSE} above 0 logs everything: log_info must be true too")
        return logging.DEBUG
    return _LEVELS[sum(on) - 1] if any(on) else logging.CRITICAL
