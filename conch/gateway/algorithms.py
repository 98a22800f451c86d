"""The JWS algorithms conch may accept: asymmetric ones only (RFC 8725, section 3.1 and 3.2).

A module of its own, free of PyJWT, because the command line checks ``--jwt-algorithms`` before the
gateway loads.
"""

from __future__ import annotations

#: The algorithms a server may allow, each with the key type it needs.
ASYMMETRIC = {
    **{f"RS{bits}": "RSA" for bits in (256, 384, 512)},
    **{f"PS{bits}": "RSA" for bits in (256, 384, 512)},
    **{f"ES{bits}": "EC" for bits in (256, 384, 512)},
    "EdDSA": "OKP",
}


def parse_algorithms(text: str) -> tuple[str, ...]:
    """``RS256,ES256`` checked against :data:`ASYMMETRIC`; raises ValueError naming the refused one."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError("expected one or more algorithms, such as RS256,ES256")
    for name in names:
        if name not in ASYMMETRIC:
            raise ValueError(
                f"algorithm '{name}' is not allowed: only asymmetric ones ({', '.join(ASYMMETRIC)}); "
                "'none' and HMAC (HS*) never are"
            )
    return names
