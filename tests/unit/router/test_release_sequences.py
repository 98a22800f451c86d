"""A sequence's requests stay on one version of a release: its ``sequence_id`` is their route key."""

from __future__ import annotations

from conch.router.release_split import ROUTE_KEY_PARAMETER, route_key_of


def test_a_sequence_id_is_the_route_key_unless_the_request_names_one() -> None:
    assert route_key_of({"sequence_id": 42}) == "sequence:42"
    assert route_key_of({"sequence_id": "abc"}) == "sequence:abc"
    named = {"sequence_id": 42, ROUTE_KEY_PARAMETER: "user-7"}
    assert route_key_of(named) == "user-7"
    assert route_key_of({"sequence_id": 0}) is None  # 0: no sequence
    assert route_key_of({}) is None
