"""The HTTP server's rules with no I/O: who gets a connection slot near the cap (admission), how fast
a request must arrive (pace), whose word names the client (peers), what a head must say
(request_heads)."""

from __future__ import annotations

from collections import Counter

import pytest

from conch.frontends.http.limits import HttpLimits
from conch.http_server.admission import Admission, Holding, admit, near_cap
from conch.http_server.pace import RequestPace
from conch.http_server.peers import TrustedProxies
from conch.http_server.request_heads import head_problem


def slow(slot: str, client: str, rate: float = 1.0) -> Holding[str]:
    return Holding(slot, client, evictable=True, incomplete=True, rate=rate)


def verdict_on(newcomer: str, others: list[Holding[str]], cap: int) -> Admission[str]:
    """The rule's verdict with ``others`` held, counted by client as the server counts them."""
    held = Counter(each.client for each in others)
    return admit(newcomer, held, len(others), cap, lambda: others)


def test_far_from_the_cap_anyone_is_admitted_whoever_holds_the_rest() -> None:
    others = [slow(f"a{i}", "attacker") for i in range(80)]
    assert verdict_on("attacker", others, cap=100).admitted
    assert not near_cap(90, 100) and near_cap(91, 100)


def test_at_the_cap_a_newcomer_takes_the_slowest_request_of_a_client_over_its_share() -> None:
    others = [slow(f"a{i}", "attacker", rate=10.0 + i) for i in range(99)] + [slow("n0", "normal")]
    verdict = verdict_on("normal", others, cap=100)
    assert verdict.admitted and verdict.evict == "a0"  # the slowest of the attacker's, not normal's


def test_a_client_over_its_share_near_the_cap_is_refused() -> None:
    others = [slow(f"a{i}", "attacker") for i in range(95)] + [slow("n0", "normal")]
    verdict = verdict_on("attacker", others, cap=100)  # two clients: a share of 50 each
    assert not verdict.admitted and verdict.evict is None
    assert "share (50)" in verdict.reason


def test_answers_being_made_are_never_evicted_and_idle_ones_go_after_incomplete_ones() -> None:
    busy = [Holding(f"b{i}", "attacker", evictable=False, incomplete=False) for i in range(98)]
    idle = Holding("idle", "attacker", evictable=True, incomplete=False, idle_secs=30.0)
    incomplete = slow("incomplete", "attacker", rate=5000.0)
    verdict = verdict_on("normal", [*busy, idle, incomplete], cap=100)
    assert verdict.evict == "incomplete"
    verdict = verdict_on("normal", [*busy, idle, Holding("b", "attacker", False, False)], cap=100)
    assert verdict.evict == "idle"
    assert not verdict_on("normal", [*busy, *busy[:2]], cap=100).admitted  # nothing may go: a 503


def test_a_client_over_its_share_is_refused_without_a_look_at_every_connection() -> None:
    def listed() -> list[Holding[str]]:
        raise AssertionError("the connections were listed")

    held = Counter({"attacker": 95, "normal": 5})
    assert not admit("attacker", held, 100, 100, listed).admitted


def test_a_lone_client_may_take_every_slot() -> None:
    others = [slow(f"a{i}", "only") for i in range(99)]
    assert verdict_on("only", others, cap=100).admitted
    assert not verdict_on("only", [*others, slow("last", "only")], cap=100).admitted


LIMITS = HttpLimits(slow_client_timeout_secs=10, min_body_rate=1000, request_timeout_secs=60)


def test_a_head_must_arrive_within_the_slow_client_timeout() -> None:
    pace = RequestPace()
    pace.advance(9.5, in_body=False)
    assert pace.late_head(LIMITS) is None
    pace.advance(1.0, in_body=False)
    assert "--http-slow-client-timeout-secs" in (pace.late_head(LIMITS) or "")


def test_a_trickling_body_falls_under_the_rate_once_the_grace_is_over() -> None:
    """10 bytes every 5 s resets a stall timer forever; the average rate catches it after the grace."""
    pace = RequestPace()
    for _ in range(2):
        pace.advance(5.0, in_body=True)
        pace.body_bytes += 10
        pace.stalled_secs = 0.0
        assert pace.late_body(LIMITS) is None  # within the 10 s grace
    pace.advance(1.0, in_body=True)
    assert "--http-min-body-rate" in (pace.late_body(LIMITS) or "")


def test_a_steady_body_over_the_rate_is_only_held_to_the_whole_request_deadline() -> None:
    pace = RequestPace()
    for _ in range(59):
        pace.advance(1.0, in_body=True)
        pace.body_bytes += 2000
        pace.stalled_secs = 0.0
        assert pace.late_body(LIMITS) is None
    pace.advance(1.5, in_body=True)
    assert "--http-request-timeout-secs" in (pace.late_body(LIMITS) or "")


def test_a_stalled_body_is_cut_off_and_restart_clears_every_clock() -> None:
    pace = RequestPace()
    pace.advance(10.5, in_body=True)
    assert "no byte of the request body" in (pace.late_body(LIMITS) or "")
    pace.restart()
    assert pace.late_body(LIMITS) is None and pace.rate(0) == 0.0


PROXIES = TrustedProxies(["127.0.0.1", "10.0.0.0/8"], "X-Forwarded-For")


@pytest.mark.parametrize(
    "peer, forwarded, client",
    [
        ("127.0.0.1", "203.0.113.7", "203.0.113.7"),  # KServe's sidecar, one hop
        ("10.1.2.3", "198.51.100.1, 203.0.113.7, 10.9.9.9", "203.0.113.7"),  # ingress behind a balancer
        ("203.0.113.9", "1.2.3.4", "203.0.113.9"),  # an untrusted peer names no one
        ("127.0.0.1", "not-an-address, 203.0.113.7", "203.0.113.7"),
        ("127.0.0.1", "203.0.113.7, garbage", "127.0.0.1"),  # garbage after the last hop: the proxy
        ("127.0.0.1", None, "127.0.0.1"),
    ],
)
def test_the_client_is_the_rightmost_address_a_trusted_proxy_did_not_add(
    peer: str, forwarded: str | None, client: str
) -> None:
    headers = [(b"host", b"x")] + ([(b"x-forwarded-for", forwarded.encode())] if forwarded else [])
    assert PROXIES.client_of(peer, headers) == client


def test_no_trusted_proxy_is_false_and_believes_no_header() -> None:
    none = TrustedProxies([], "x-forwarded-for")
    assert not none and none.client_of("127.0.0.1", [(b"x-forwarded-for", b"1.2.3.4")]) == "127.0.0.1"


@pytest.mark.parametrize(
    "version, headers, problem",
    [
        ("1.1", [(b"host", b"x")], None),
        ("1.0", [], None),
        ("1.1", [], "needs a Host header"),
        ("1.1", [(b"host", b"a"), (b"host", b"b")], "more than one Host"),
        ("0.9", [], "no HTTP version"),
        ("1.1", [(b"host", b"x"), (b"upgrade", b"h2c"), (b"content-length", b"3")], "Upgrade"),
        ("1.1", [(b"host", b"x"), (b"upgrade", b"h2c"), (b"content-length", b"0")], None),
    ],
)
def test_what_a_head_must_say(version: str, headers: list[tuple[bytes, bytes]], problem: str | None) -> None:
    found = head_problem(version, headers)
    assert (found is None) if problem is None else (found is not None and problem in found)
