"""A sequence's requests stay on one version of a release: its ``sequence_id`` is their route key."""

from __future__ import annotations

from conch.core.types import InferenceRequest
from conch.router.release_split import ROUTE_KEY_PARAMETER
from conch.server import _route_key


def test_a_sequence_id_is_the_route_key_unless_the_request_names_one() -> None:
    assert _route_key(InferenceRequest("m", parameters={"sequence_id": 42})) == "sequence:42"
    assert _route_key(InferenceRequest("m", parameters={"sequence_id": "abc"})) == "sequence:abc"
    named = {"sequence_id": 42, ROUTE_KEY_PARAMETER: "user-7"}
    assert _route_key(InferenceRequest("m", parameters=named)) == "user-7"
    assert _route_key(InferenceRequest("m", parameters={"sequence_id": 0})) is None  # 0: no sequence
    assert _route_key(InferenceRequest("m")) is None
