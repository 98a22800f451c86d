"""Where a request's data came from: its ``data_version`` and ``ingestion_timestamp``.

Both are request parameters (a stream record's fields become them too), or the HTTP headers and gRPC
metadata keys ``conch-data-version`` and ``conch-ingestion-timestamp``, which a frontend copies into
the parameters when the body does not set them. They pass through to the model like any parameter (a
Python model reads them from ``request.parameters()``, as in Triton).

The timestamp is RFC 3339 (``2026-01-31T12:00:00Z``, an offset required) or Unix seconds (a number, or
a string of one). Anything else is refused (400), since a freshness measured from a misread time would
mislead every alert built on it. A time in the future (a producer's clock ahead of the server's) is
accepted and reported; freshness is then 0, never negative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from conch.core.errors import InvalidArgumentError

DATA_VERSION = "data_version"
INGESTION_TIMESTAMP = "ingestion_timestamp"
DATA_VERSION_HEADER = "conch-data-version"
INGESTION_TIMESTAMP_HEADER = "conch-ingestion-timestamp"
HEADERS = ((DATA_VERSION_HEADER, DATA_VERSION), (INGESTION_TIMESTAMP_HEADER, INGESTION_TIMESTAMP))
#: The longest data version taken: it is a label on logs and traces, not a document.
MAX_DATA_VERSION = 256


@dataclass(frozen=True, slots=True)
class Lineage:
    """A request's data version and ingestion time (Unix seconds); either may be None."""

    data_version: str | None
    ingested_at: float | None

    def freshness(self, now: float) -> float | None:
        """Seconds from ingestion to ``now``, never negative; None without an ingestion time."""
        if self.ingested_at is None:
            return None
        return max(0.0, now - self.ingested_at)


def copy_headers(parameters: dict[str, Any], header: Callable[[str], str | None]) -> None:
    """Put the lineage headers (``header(name)``: a header's value or None) into the request's
    ``parameters``, where the request body did not set them."""
    for name, key in HEADERS:
        value = header(name)
        if value is not None and key not in parameters:
            parameters[key] = value


def lineage_of(parameters: Mapping[str, Any]) -> Lineage | None:
    """The request's lineage, None when it carries neither parameter; a 400 for a malformed one."""
    version = parameters.get(DATA_VERSION)
    stamp = parameters.get(INGESTION_TIMESTAMP)
    if version is None and stamp is None:
        return None
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, str | int) or not str(version).strip():
            raise InvalidArgumentError(
                f"parameter '{DATA_VERSION}' must be a non-empty string naming the data's version"
            )
        version = str(version)
        if len(version) > MAX_DATA_VERSION:
            raise InvalidArgumentError(
                f"parameter '{DATA_VERSION}' is longer than {MAX_DATA_VERSION} characters"
            )
    return Lineage(version, None if stamp is None else parse_timestamp(stamp))


def parse_timestamp(value: Any) -> float:
    """Unix seconds of an RFC 3339 time or of Unix seconds; a 400 naming the forms accepted."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _from_text(value.strip())
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        shown = repr(value)[:64]
        raise InvalidArgumentError(
            f"parameter '{INGESTION_TIMESTAMP}' is malformed: {shown}; send RFC 3339 with an offset "
            "(2026-01-31T12:00:00Z) or Unix seconds (1769860800)"
        )
    return seconds


def _from_text(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        pass
    if len(text) < 20 or text[10] not in "Tt ":
        return None
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    if moment.tzinfo is None:  # RFC 3339 needs an offset; a local time would be read differently
        return None
    return moment.timestamp()
