"""A token bucket per client: the rule, the bounded table of buckets, and the answer's headers.

Why a token bucket: it allows a burst of ``burst`` requests, then ``rate`` per second, which is what
a client of an inference API does (a page of requests, then a steady stream), and its state is two
numbers per client. The rules take ``now`` as an argument, so they are tested with a fake clock.

Memory stays bounded: a bucket that has refilled to full is the same as a new one, so dropping it
loses nothing, and the table keeps at most ``max_clients`` buckets, least recently used first out.
Under a flood of distinct clients a bucket may be dropped before it is full; that client then starts
afresh, which errs on the side of letting a request through.

The headers are those of draft-ietf-httpapi-ratelimit-headers-10: ``RateLimit-Policy:
"default";q=20;w=2`` (a quota of ``burst`` requests over the ``w`` seconds it takes to refill) and
``RateLimit: "default";r=0;t=1`` (``r`` requests left, ``t`` seconds until the bucket is full), with
``Retry-After`` (RFC 9110) on a refusal: the whole seconds until one request is allowed again.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

#: Buckets kept at most; about 200 bytes each, so the table stays under a few megabytes.
MAX_CLIENTS = 10_000


@dataclass(frozen=True)
class Limit:
    """``rate`` requests per second after a burst of ``burst``; ``policy`` names it in the headers."""

    rate: float
    burst: int
    policy: str = "default"

    @property
    def window_secs(self) -> int:
        """Seconds an empty bucket takes to refill: the ``w`` of the quota policy."""
        return max(1, math.ceil(self.burst / self.rate))


def limit_of(rate: float, burst: int, policy: str = "default") -> Limit | None:
    """The limit of a rate and burst as the flags and parameters give them; 0 rate: no limit, 0 burst:
    one second's worth of requests (at least one)."""
    if rate <= 0:
        return None
    return Limit(rate, burst if burst > 0 else max(1, math.ceil(rate)), policy)


@dataclass(frozen=True)
class Decision:
    """One request's answer from its bucket."""

    allowed: bool
    limit: Limit
    remaining: int
    #: Seconds until the bucket is full again.
    reset_secs: float
    #: Seconds until one more request is allowed (0 when one is now).
    retry_after_secs: float

    def headers(self) -> tuple[tuple[str, str], ...]:
        """``RateLimit-Policy`` and ``RateLimit``, and ``Retry-After`` when refused."""
        name = self.limit.policy
        fields = (
            ("ratelimit-policy", f'"{name}";q={self.limit.burst};w={self.limit.window_secs}'),
            ("ratelimit", f'"{name}";r={self.remaining};t={math.ceil(self.reset_secs)}'),
        )
        if self.allowed:
            return fields
        return (("retry-after", str(max(1, math.ceil(self.retry_after_secs)))), *fields)


class TokenBucket:
    """``burst`` tokens at most, ``rate`` more each second; each request takes one."""

    __slots__ = ("stamp", "tokens")

    def __init__(self, limit: Limit, now: float) -> None:
        self.tokens = float(limit.burst)
        self.stamp = now

    def take(self, limit: Limit, now: float) -> Decision:
        """Take a token if there is one, after refilling for the time since the last request."""
        self.tokens = min(float(limit.burst), self.tokens + (now - self.stamp) * limit.rate)
        self.stamp = now
        allowed = self.tokens >= 1.0
        if allowed:
            self.tokens -= 1.0
        missing = limit.burst - self.tokens
        return Decision(
            allowed=allowed,
            limit=limit,
            remaining=int(self.tokens),
            reset_secs=missing / limit.rate,
            retry_after_secs=0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / limit.rate,
        )

    def full(self, limit: Limit, now: float) -> bool:
        return self.tokens + (now - self.stamp) * limit.rate >= limit.burst


class ClientBuckets:
    """The buckets of every client seen lately, keyed by client (and model, for a model's own limit)."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self._buckets: OrderedDict[Hashable, tuple[TokenBucket, Limit]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: Hashable, limit: Limit, now: float) -> Decision:
        """One request of ``key`` under ``limit`` at ``now``."""
        entry = self._buckets.get(key)
        if entry is None or entry[1] != limit:  # a changed limit (a model reloaded) starts afresh
            self._evict(now)
            entry = (TokenBucket(limit, now), limit)
            self._buckets[key] = entry
        else:
            self._buckets.move_to_end(key)
        return entry[0].take(limit, now)

    def _evict(self, now: float) -> None:
        """Before adding a bucket: drop the least recently used ones that are full, and the least
        recently used one whatever its state while the table is at its bound."""
        while self._buckets:
            key, (bucket, limit) = next(iter(self._buckets.items()))
            if not bucket.full(limit, now) and len(self._buckets) < self.max_clients:
                return
            del self._buckets[key]
