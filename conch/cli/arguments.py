"""argparse types shared by the commands: a bad value is argparse's usage error (exit status 2) with
a message that says what was expected."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from conch.backends.python.backend_config import BackendSetting, parse_backend_setting

#: Python's level names, which ``--log-level`` takes in any case.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def count_or_auto(text: str) -> int | None:
    """A whole number from 0, or ``auto`` (None): let the server choose from the cores it may use."""
    if text.strip().lower() == "auto":
        return None
    try:
        return at_least(0)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or auto)") from None


def ratio(text: str) -> float:
    """A fraction above 0 and at most 1 (``0.95``): a share of something, such as memory used."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0 and at most 1, got '{text}'") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text}")
    return value


def fraction(text: str) -> float:
    """A share from 0 to 1 (``0.01``: one in a hundred), where 0 is none."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got '{text}'") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def choice(values: tuple[str, ...]) -> Callable[[str], str]:
    """One of ``values``, in any case."""

    def parse(text: str) -> str:
        if text.lower() not in values:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(values)}, got '{text}'")
        return text.lower()

    return parse


def server_name(text: str) -> str:
    """A name for the server metadata: one or more printable characters, not only spaces."""
    if not text.strip() or not text.isprintable():
        raise argparse.ArgumentTypeError(f"expected a name of printable characters, got {text!r}")
    return text


def boolean(text: str) -> bool:
    """``true``/``false`` and their usual spellings (``1``, ``yes``, ``on``; ``0``, ``no``, ``off``)."""
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def log_level(text: str) -> int:
    """One of :data:`LOG_LEVELS`, in any case, as its ``logging`` number; ``verbose`` is ``debug``.

    ``verbose`` is accepted because a Triton user reaches for it (Triton's ``--log-verbose``), and the
    most detail conch logs is ``debug``.
    """
    name = text.strip().lower()
    if name == "verbose":
        name = "debug"
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(LOG_LEVELS)} (or verbose, which is debug), got '{text}'"
        )
    return int(logging.getLevelNamesMapping()[name.upper()])


def backend_setting(text: str) -> BackendSetting:
    """A ``--backend-config`` entry (:mod:`conch.backends.python.backend_config`)."""
    try:
        return parse_backend_setting(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
