"""``conch serve``'s gateway flags: auth, Triton's restricted APIs, client rate limits, the in-flight cap.

Nothing imported here may import gRPC or tritonclient (tests/unit/cli/test_serve_arguments_import.py),
nor PyJWT: parsing the command line stays light, and the gateway loads only when a flag turns it on.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from conch.cli.arguments import at_least, choice
from conch.cli.serve_flags import FlagGroup, setting
from conch.gateway.algorithms import parse_algorithms
from conch.gateway.restricted import Restriction, parse_restriction
from conch.runtime.variables import variable_of

AUTH_MODES = ("none", "jwt")


def rate(text: str) -> float:
    """Requests per second, 0 or more (0: no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of requests per second, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def algorithms(text: str) -> tuple[str, ...]:
    """Asymmetric JWS algorithms only (:mod:`conch.gateway.algorithms`)."""
    try:
        return parse_algorithms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def restriction(text: str) -> Restriction:
    try:
        return parse_restriction(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gateway_flags(serve: FlagGroup) -> None:
    """Who may call and how much (see conch docs security)."""
    setting(
        serve,
        "--auth",
        choice(AUTH_MODES),
        "none",
        "none: no authentication; jwt: every call but health needs an Authorization: Bearer JWT (gRPC: "
        "authorization metadata) verified with --jwt-jwks, with the infer, infer:<model> or admin scope",
    )
    setting(serve, "--jwt-jwks", str, "", "--auth jwt: the JWKS key set, a file or an https:// URL")
    setting(serve, "--jwt-issuer", str, "", "--auth jwt: the iss claim tokens must carry; empty: any")
    setting(
        serve, "--jwt-audience", str, "", "--auth jwt: the aud claim tokens must carry; empty: none checked"
    )
    setting(
        serve,
        "--jwt-algorithms",
        algorithms,
        "RS256,ES256",
        "--auth jwt: the signature algorithms accepted, comma-separated; asymmetric ones only",
    )
    for flag, word in (("--http-restricted-api", "header"), ("--grpc-restricted-protocol", "metadata")):
        variable = variable_of(flag)
        serve.add_argument(
            flag,
            action="append",
            type=restriction,
            default=os.environ.get(variable, "").split(),
            metavar="API[,API]:KEY=VALUE",
            help=f"Triton's: calls to these API groups must carry the {word} KEY=VALUE (groups: health, "
            "metadata, inference, shared-memory, model-config, model-repository, statistics, trace, "
            f"logging); repeat it for more ({variable}, space-separated; default: none)",
        )
    setting(
        serve,
        "--client-rate-limit",
        rate,
        "0",
        "requests per second each client may send (by JWT sub, else x-client-id with --auth none, else "
        "address) after a burst of --client-burst; over it, 429; a model's client_rate_limit parameter "
        "overrides it; 0: no limit",
    )
    setting(
        serve, "--client-burst", at_least(0), "0", "requests a client may send at once; 0: one second's worth"
    )
    setting(
        serve,
        "--max-in-flight",
        at_least(0),
        "0",
        "inference requests the server holds at once; more get a 503 at once instead of a longer queue; "
        "0: no cap",
    )


def gateway_settings(args: argparse.Namespace) -> Any:
    """The gateway flags as :class:`~conch.gateway.gateway.GatewaySettings`; raises ValueError with the
    fix when they do not fit together."""
    from conch.gateway.gateway import GatewaySettings
    from conch.gateway.tokens import JwtSettings

    restricted = {
        name: tuple(parse_restriction(e) if isinstance(e, str) else e for e in getattr(args, name))
        for name in ("http_restricted_api", "grpc_restricted_protocol")
    }
    jwt = None
    if args.auth == "jwt":
        if not args.jwt_jwks:
            raise ValueError("--auth jwt needs --jwt-jwks (a JWKS file or URL)")
        algorithms_given = args.jwt_algorithms
        jwt = JwtSettings(args.jwt_jwks, args.jwt_issuer, args.jwt_audience, tuple(algorithms_given))
    settings = GatewaySettings(
        jwt=jwt,
        http_restricted=restricted["http_restricted_api"],
        grpc_restricted=restricted["grpc_restricted_protocol"],
        client_rate_limit=args.client_rate_limit,
        client_burst=args.client_burst,
        max_in_flight=args.max_in_flight,
    )
    return settings
