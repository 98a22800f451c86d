"""A fallback strategy's levels and their parsing, with nothing heavy imported.

``conch serve --fallback-strategy`` checks its value while the command line is parsed, which happens
before gRPC may be imported (``conch.frontends.grpc.grpc_options.prefer_iomgr_listener`` must set
gRPC's experiments first; importing gRPC earlier kept its slower listener and cost a fifth of the
gRPC throughput). So this module imports only the standard library and conch's errors.
"""

from __future__ import annotations

import enum

from conch.core.errors import InvalidArgumentError

STRATEGY_PARAMETER = "FALLBACK_STRATEGY"


class FallbackLevel(enum.Enum):
    MODEL = "MODEL"
    CPU = "CPU"
    BUSINESS = "BUSINESS"


def parse_strategy(text: str, where: str = STRATEGY_PARAMETER) -> tuple[FallbackLevel, ...]:
    """``"MODEL->CPU->BUSINESS"`` as levels; an unknown or repeated level is refused by name."""
    if not text.strip() or text.strip().upper() == "NONE":
        return ()
    levels = []
    for part in text.split("->"):
        name = part.strip().upper()
        try:
            level = FallbackLevel(name)
        except ValueError:
            allowed = "->".join(level.value for level in FallbackLevel)
            raise InvalidArgumentError(
                f"{where} has the unknown level '{part.strip()}'; use an ordered subset of {allowed}, "
                "separated by '->'"
            ) from None
        if level in levels:
            raise InvalidArgumentError(f"{where} names {name} twice")
        levels.append(level)
    return tuple(levels)
