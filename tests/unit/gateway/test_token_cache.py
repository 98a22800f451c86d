"""The verified-token cache of :class:`conch.gateway.tokens.TokenVerifier`: a token is verified once
while it is valid, refused once past its ``exp`` (with the leeway), and forgotten when the keys are
read again, with real RS256 tokens and a real JWKS file."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from conch.core.errors import UnauthenticatedError
from conch.gateway import tokens
from conch.gateway.tokens import LEEWAY_SECS, JwtSettings, TokenVerifier

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def write_jwks(path: Path, key: rsa.RSAPrivateKey) -> Path:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path.write_text(json.dumps({"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}))
    return path


def signed(exp: float, key: rsa.RSAPrivateKey = KEY, sub: str = "alice") -> str:
    claims = {"sub": sub, "iss": "https://issuer.test", "aud": "conch", "exp": int(exp), "scope": "infer"}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture
def verifier(tmp_path: Path) -> TokenVerifier:
    settings = JwtSettings(str(write_jwks(tmp_path / "jwks.json", KEY)), "https://issuer.test", "conch")
    verifier = TokenVerifier(settings)
    verifier.refresh()
    return verifier


def test_a_valid_token_is_verified_once_and_then_read_from_the_cache(verifier: TokenVerifier) -> None:
    token = signed(time.time() + 600)
    first = verifier.verify(token)
    assert verifier.verify(token) is first  # the same claims object: not decoded again
    started = time.perf_counter()
    for _ in range(200):
        verifier.verify(token)
    per_call = (time.perf_counter() - started) / 200
    assert per_call < 50e-6, f"a cached token took {per_call * 1e6:.0f} us"


def test_a_cached_token_past_its_exp_is_verified_again_and_refused(verifier: TokenVerifier) -> None:
    expires = math.ceil(time.time()) + 1  # a whole second (exp is whole seconds), one to two seconds ahead
    token = signed(expires - LEEWAY_SECS)  # inside the leeway until then
    assert verifier.verify(token)["sub"] == "alice"
    assert verifier.verify(token)["sub"] == "alice"
    time.sleep(max(0.0, expires - time.time()) + 0.05)
    with pytest.raises(UnauthenticatedError, match="expired"):
        verifier.verify(token)


def test_new_keys_forget_the_tokens_verified_with_the_old_ones(
    verifier: TokenVerifier, tmp_path: Path
) -> None:
    token = signed(time.time() + 600)
    verifier.verify(token)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_jwks(Path(verifier.settings.jwks), other)
    verifier.refresh()
    with pytest.raises(UnauthenticatedError):
        verifier.verify(token)
    assert verifier.verify(signed(time.time() + 600, other))["sub"] == "alice"


def test_the_cache_stays_bounded(verifier: TokenVerifier, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "VERIFIED_TOKENS", 3)
    names = [f"client-{i}" for i in range(5)]
    for name in names:
        verifier.verify(signed(time.time() + 600, sub=name))
    assert [claims["sub"] for _, claims in verifier._verified.values()] == names[2:]
