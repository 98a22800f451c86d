"""Which version answers a request that names none, while a release splits the traffic by weight.

A request with a route key (the ``conch-route-key`` header or gRPC metadata, or a ``route_key``
request parameter) always lands on the same version for the same weights: the key is hashed to a
point in [0, 100) and the versions own consecutive ranges of it by weight. So a user keeps seeing one
version through a step, and raising the candidate's weight only moves keys from baseline to candidate,
never back. A request without a key draws its point at random.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from typing import Any

#: The request parameter (and, lowercased, the HTTP header and gRPC metadata key) carrying a route key.
ROUTE_KEY_PARAMETER = "route_key"
ROUTE_KEY_HEADER = "conch-route-key"


def route_key_of(parameters: Mapping[str, Any]) -> str | None:
    """A request's route key: its ``route_key``, else its ``sequence_id``, so a sequence stays on one
    version of a release (the one its key lands on at the step's weight)."""
    key = parameters.get(ROUTE_KEY_PARAMETER)
    if key is None:
        sequence = parameters.get("sequence_id")
        return f"sequence:{sequence}" if sequence else None
    return str(key)


def pick(
    baseline: int, candidate: int, candidate_weight: int, key: str | None, draw: random.Random | None = None
) -> int:
    """The version for one request, given the candidate's percent of the unversioned traffic."""
    point = _point(key) if key else (draw or random).random() * 100
    # The candidate owns the bottom of the range, so a key that moved to it stays there as it grows.
    return candidate if point < candidate_weight else baseline


def _point(key: str) -> float:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * 100
