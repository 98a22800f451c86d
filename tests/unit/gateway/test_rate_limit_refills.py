"""A client that keeps sending past many refill periods of its bucket gets the bucket's rate, period
after period, not only until the first refill (fake clock, as the gateway's rules take ``now``)."""

from __future__ import annotations

from conch.gateway.api_groups import http_call
from conch.gateway.gateway import Gateway, GatewaySettings, Sources
from conch.gateway.rate_limit import ClientBuckets, Limit

#: One request every 50 ms for 5 s: 100 requests, ten times the rate of 2 a second.
STEP_S, REQUESTS = 0.05, 100


def test_a_steady_sender_gets_the_burst_then_exactly_the_rate_in_every_period() -> None:
    buckets = ClientBuckets()
    limit = Limit(rate=2.0, burst=1)
    allowed_at = [
        index * STEP_S for index in range(REQUESTS) if buckets.take("a", limit, index * STEP_S).allowed
    ]

    # The burst at once, then one token each 0.5 s: 1 + 2 x 4.95 s.
    assert len(allowed_at) == 10
    per_second = [sum(1 for at in allowed_at if second <= at < second + 1) for second in range(5)]
    assert per_second == [2, 2, 2, 2, 2]


def test_the_gateway_holds_one_client_to_its_rate_over_many_refills() -> None:
    now = [0.0]
    gateway = Gateway(
        GatewaySettings(client_rate_limit=2, client_burst=3), Sources(lambda: ["m"], clock=lambda: now[0])
    )
    call = http_call("POST", "/v2/models/m/infer")
    allowed = 0
    for index in range(REQUESTS):
        now[0] = index * STEP_S
        try:
            gateway.admit("HTTP", call, {"x-client-id": "steady"}.get, "10.0.0.1")
            allowed += 1
        except Exception as exc:
            assert "rate limit exceeded" in str(exc)
    # A burst of 3, then 2 a second over 4.95 s.
    assert allowed == 3 + 9
    assert gateway.rate_limited == {("m", "header"): REQUESTS - allowed}
