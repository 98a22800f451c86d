"""The gateway's driver: one :meth:`Gateway.admit` per call, before the frontend's handler runs.

In order: the restricted groups (Triton's header check), the token and its scopes, the client's
token bucket, and the in-flight cap. Health stays open to all but the restricted-header check, so
probes need no token. The frontends hold a gateway only when a gateway flag is on; otherwise they
skip all of this with one attribute check.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from conch.core.errors import PermissionDeniedError, RateLimitedError, UnavailableError
from conch.gateway.api_groups import Access, Call
from conch.gateway.rate_limit import ClientBuckets, Limit, limit_of
from conch.gateway.restricted import RestrictedApis, Restriction
from conch.gateway.scopes import Grant, grant_of, missing_scope, scopes_of
from conch.gateway.tokens import JwtSettings, TokenVerifier, missing_token

log = logging.getLogger(__name__)

#: The ``x-client-id`` header names a client for the rate limit, only while auth is off.
CLIENT_ID_HEADER = "x-client-id"
#: A grant for every model: what a call gets when auth is off.
EVERYTHING = Grant(admin=True, every_model=True)


@dataclass(frozen=True)
class GatewaySettings:
    """The gateway flags of ``conch serve``."""

    jwt: JwtSettings | None = None
    http_restricted: tuple[Restriction, ...] = ()
    grpc_restricted: tuple[Restriction, ...] = ()
    client_rate_limit: float = 0.0
    client_burst: int = 0
    max_in_flight: int = 0

    @property
    def on(self) -> bool:
        """Whether any of it is on; off, the frontends hold no gateway."""
        return (
            bool(self.jwt or self.http_restricted or self.grpc_restricted or self.client_rate_limit > 0)
            or self.max_in_flight > 0
        )


@dataclass
class Sources:
    """What the gateway reads from the server, at each call."""

    known_models: Callable[[], Collection[str]]
    #: A model's own ``client_rate_limit`` / ``client_burst`` parameters, or None.
    model_limit: Callable[[str], Limit | None] = lambda name: None
    #: Requests inside the models now (``InferenceServer.in_flight.count``).
    in_flight: Callable[[], int] = lambda: 0
    clock: Callable[[], float] = time.monotonic


@dataclass
class Gateway:
    settings: GatewaySettings
    sources: Sources
    verifier: TokenVerifier | None = None
    buckets: ClientBuckets = field(default_factory=ClientBuckets)
    #: ``(model, client_class) -> refusals``: ``conch_rate_limited_total``.
    rate_limited: Counter[tuple[str, str]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.restricted = {
            "HTTP": RestrictedApis(self.settings.http_restricted, "API"),
            "gRPC": RestrictedApis(self.settings.grpc_restricted, "protocol"),
        }
        self.default_limit = limit_of(self.settings.client_rate_limit, self.settings.client_burst)
        if self.settings.jwt is not None and self.verifier is None:
            self.verifier = TokenVerifier(self.settings.jwt)

    def admit(
        self, protocol: str, call: Call, header: Callable[[str], str | None], peer: str
    ) -> tuple[Grant, tuple[tuple[str, str], ...]]:
        """The call's grant and the headers to add to its answer, or a ConchError refusing it."""
        self.restricted[protocol].check(call.group, header)
        if call.access is Access.OPEN:
            return EVERYTHING, ()
        grant, client_class, client = self._identify(call, header, peer)
        headers = self._take(call, client_class, client)
        cap = self.settings.max_in_flight
        if call.group == "inference" and cap and self.sources.in_flight() >= cap:
            raise UnavailableError(
                f"the server has {cap} requests in flight, its limit (--max-in-flight); retry shortly "
                "or send the request to another replica",
                (("retry-after", "1"),),
            )
        return grant, headers

    def _identify(self, call: Call, header: Callable[[str], str | None], peer: str) -> tuple[Grant, str, str]:
        """The grant, and who the client is for the rate limit: its class and its id."""
        if self.verifier is None:
            client_id = header(CLIENT_ID_HEADER)
            return (EVERYTHING, "header", client_id) if client_id else (EVERYTHING, "address", peer)
        authorization = header("authorization")
        if authorization is None:
            raise missing_token()
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise missing_token()
        claims = self.verifier.verify(token.strip())
        grant = grant_of(scopes_of(claims))
        needed = missing_scope(grant, call, self.sources.known_models())
        if needed is not None:
            challenge = f'Bearer realm="conch", error="insufficient_scope", scope="{needed}"'
            raise PermissionDeniedError(
                f"the token lacks the '{needed}' scope this call needs", (("www-authenticate", challenge),)
            )
        subject = claims.get("sub")
        if isinstance(subject, str) and subject:
            return dataclasses.replace(grant, subject=subject), "jwt", subject
        return grant, "address", peer

    def _take(self, call: Call, client_class: str, client: str) -> tuple[tuple[str, str], ...]:
        own = self.sources.model_limit(call.model) if call.model else None
        limit = own or self.default_limit
        if limit is None:
            return ()
        key = (client_class, client, call.model if own is not None else "")
        decision = self.buckets.take(key, limit, self.sources.clock())
        if not decision.allowed:
            self.rate_limited[(call.model, client_class)] += 1
            whose = f" for model '{call.model}'" if own is not None else ""
            raise RateLimitedError(
                f"rate limit exceeded: {limit.rate:g} requests per second after a burst of "
                f"{limit.burst}{whose}; retry after the Retry-After seconds",
                decision.headers(),
            )
        return decision.headers()

    async def keep_keys_fresh(self) -> None:
        """Re-read the JWKS when due, off the event loop; a failed read keeps the keys it had."""
        verifier = self.verifier
        if verifier is None:
            return
        while True:
            await asyncio.sleep(5)
            if not verifier.refresh_due(time.monotonic()):
                continue
            try:
                await asyncio.to_thread(verifier.refresh)
            except ValueError as exc:
                log.warning("%s; keeping the keys read before", exc)
                verifier.loaded_at = time.monotonic()
