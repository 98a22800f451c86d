"""JWT verification with PyJWT, following RFC 8725 (JWT best current practices).

- The algorithms are the configured asymmetric ones only (RS256 and ES256 by default): ``none`` and
  the HMAC family are refused when the flags are parsed and again for each token, so a token signed
  with HS256 using the server's RSA public key as the secret (the "HS/RS confusion") is refused.
- Each key is used only with an algorithm of its own type (an RSA key never verifies an EC token);
  a token names its key by ``kid`` when the key set has more than one.
- ``exp`` is required; ``iss`` and ``aud`` are required and checked when the flags set them.
- The clock-skew allowance is :data:`LEEWAY_SECS`, 30 seconds: enough for clocks kept by NTP, small
  next to a token's lifetime.

The keys are a JWKS document (``{"keys": [...]}``) from a file or an ``https://`` URL, read at start
and again every :data:`REFRESH_SECS` (and soon after a token names a ``kid`` the set lacks, as after
a key rotation) by :meth:`TokenVerifier.refresh`, which the server runs off the event loop.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from conch.core.errors import UnauthenticatedError
from conch.gateway.algorithms import ASYMMETRIC

log = logging.getLogger(__name__)

#: Seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
LEEWAY_SECS = 30
#: Seconds between two reads of the key set.
REFRESH_SECS = 300.0
#: The least seconds between two reads asked for by an unknown ``kid``, so tokens cannot flood the
#: identity provider.
UNKNOWN_KID_REFRESH_SECS = 30.0
#: Tokens kept verified, most recently used first out last. A client sends the same token with every
#: request until it expires, and verifying it each time cost more than the inference it guarded
#: (PyJWT with RS256: about 250-380 us a request on this project's shared 2-core machine, against
#: 150-200 us of server CPU for a whole tiny inference; ``python -m bench.gateway_overhead``).
VERIFIED_TOKENS = 4096


@dataclass(frozen=True)
class JwtSettings:
    jwks: str
    issuer: str = ""
    audience: str = ""
    algorithms: tuple[str, ...] = ("RS256", "ES256")


def invalid_token(description: str) -> UnauthenticatedError:
    """A 401 with RFC 6750's ``invalid_token`` challenge."""
    quoted = description.replace("\\", "").replace('"', "'")
    challenge = f'Bearer realm="conch", error="invalid_token", error_description="{quoted}"'
    return UnauthenticatedError(f"invalid token: {description}", (("www-authenticate", challenge),))


def missing_token() -> UnauthenticatedError:
    """A 401 for a request without credentials: RFC 6750 section 3.1 gives no error code then."""
    return UnauthenticatedError(
        "this server requires a bearer token (Authorization: Bearer <JWT>)",
        (("www-authenticate", 'Bearer realm="conch"'),),
    )


class TokenVerifier:
    """Verifies bearer tokens against a key set read from ``settings.jwks``."""

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        self._keys: list[jwt.PyJWK] = []
        self.loaded_at = 0.0
        self.wanted_at: float | None = None  # when a token named a kid the set lacks
        #: Tokens already verified with the current keys, by their text: until when, and the claims.
        self._verified: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()

    def refresh(self) -> None:
        """Read the key set again (blocking: file or network). Raises ValueError when unusable."""
        self._keys = list(_read_key_set(self.settings.jwks).keys)
        self._verified = OrderedDict()  # a key gone from the set must stop verifying at once
        self.loaded_at = time.monotonic()
        self.wanted_at = None

    def refresh_due(self, now: float) -> bool:
        if now - self.loaded_at >= REFRESH_SECS:
            return True
        return self.wanted_at is not None and now - self.loaded_at >= UNKNOWN_KID_REFRESH_SECS

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, or :class:`UnauthenticatedError` saying why it is refused.

        A token verified before with the same keys is not verified again while its ``exp`` (with the
        leeway) is ahead; past it, it is verified again, and so refused as expired.
        """
        verified = self._verified  # the set of the keys this call verifies with (refresh replaces it)
        known = verified.get(token)
        if known is not None and known[0] > time.time():
            verified.move_to_end(token)
            return known[1]
        claims = self._verify(token)
        verified[token] = (int(claims["exp"]) + LEEWAY_SECS, claims)  # PyJWT took exp as int()
        if len(verified) > VERIFIED_TOKENS:
            verified.popitem(last=False)
        return claims

    def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise invalid_token("the token is not a JWT") from None
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self.settings.algorithms:
            raise invalid_token(f"algorithm '{algorithm}' is not accepted")
        key = self._key_for(header.get("kid"), ASYMMETRIC[algorithm])
        required = [
            "exp",
            *(["iss"] if self.settings.issuer else []),
            *(["aud"] if self.settings.audience else []),
        ]
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self.settings.audience or None,
                issuer=self.settings.issuer or None,
                leeway=LEEWAY_SECS,
                options={"require": required, "verify_aud": bool(self.settings.audience)},
            )
        except jwt.ExpiredSignatureError:
            raise invalid_token("the token has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            raise invalid_token(f"the token has no '{exc.claim}' claim") from None
        except jwt.InvalidAudienceError:
            raise invalid_token("the token is not for this audience") from None
        except jwt.InvalidIssuerError:
            raise invalid_token("the token is not from the accepted issuer") from None
        except jwt.InvalidTokenError as exc:
            raise invalid_token(_brief(exc)) from None
        return claims

    def _key_for(self, kid: object, key_type: str) -> jwt.PyJWK:
        fitting = [k for k in self._keys if k.key_type == key_type]
        if isinstance(kid, str):
            fitting = [k for k in fitting if k.key_id == kid]
            if not fitting:
                if self.wanted_at is None:
                    self.wanted_at = time.monotonic()
                raise invalid_token(f"no {key_type} key '{kid}' in the key set")
        if len(fitting) != 1:
            raise invalid_token(
                f"the token names no key (kid), and the key set has {len(fitting)} {key_type} keys"
            )
        return fitting[0]


def _brief(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _read_key_set(source: str) -> jwt.PyJWKSet:
    """The JWKS at ``source``: an ``http(s)://`` URL or a file path."""
    try:
        if source.startswith(("https://", "http://")):
            with urllib.request.urlopen(source, timeout=10) as reply:
                document: Mapping[str, Any] = json.loads(reply.read())
        else:
            document = json.loads(Path(source).expanduser().read_text())
        return jwt.PyJWKSet.from_dict(dict(document))
    except (OSError, ValueError, jwt.PyJWKSetError, jwt.PyJWKError) as exc:
        raise ValueError(f"cannot read the JWKS key set {source}: {exc}") from None
