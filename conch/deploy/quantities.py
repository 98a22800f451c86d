"""Kubernetes resource quantities (``500m``, ``2Gi``, ``1.5``): read them, scale them, write them back.

Why here and not the ``kubernetes`` client's ``parse_quantity``: that package is not a conch dependency
(it pulls a whole API client for one function), and a deploy must refuse ``4Gb`` before it writes
anything, naming the flag and the fix. The grammar is Kubernetes' own (``resource.Quantity``): a decimal
number, then one of the binary suffixes ``Ki Mi Gi Ti Pi Ei``, the decimal suffixes ``n u m k M G T P E``,
or an exponent ``e3``/``E3``.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
           "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
           "P": Decimal("1e15"), "E": Decimal("1e18")}  # fmt: skip
_QUANTITY = re.compile(
    r"^(?P<number>\+?[0-9]+(\.[0-9]*)?|\+?\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message says what would be."""


def parse_quantity(text: str, what: str) -> Decimal:
    """The value of ``text`` in base units (bytes, cores); ``what`` names the setting in the error."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(
            f"{what} '{text}' is not a Kubernetes quantity".lstrip()
            + ": write a number with an optional suffix, "
            "such as 500m or 2 (CPU cores), 512Mi or 4Gi (bytes, binary), 4G (bytes, decimal)"
        )
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in BINARY:
        return number * BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * DECIMAL[suffix]


def memory_quantity(text: str, what: str) -> str:
    """``text`` if it is a memory quantity of at least one byte, else :class:`QuantityError`."""
    if parse_quantity(text, what) < 1:
        raise QuantityError(
            f"{what} '{text}' is under one byte".lstrip() + ": give memory such as 512Mi or 4Gi"
        )
    return text.strip()


def cpu_quantity(text: str, what: str) -> str:
    """``text`` if it is a CPU quantity of at least one millicore, else :class:`QuantityError`."""
    if parse_quantity(text, what) < Decimal("0.001"):
        raise QuantityError(
            f"{what} '{text}' is under one millicore".lstrip() + ": give CPU such as 500m or 2"
        )
    return text.strip()


def scaled_memory(text: str, factor: float) -> str:
    """``text`` times ``factor``, rounded up to a whole Mi, written as Mi (or Gi when whole)."""
    whole = _ceiling_mi(parse_quantity(text, "memory") * Decimal(str(factor)))
    return f"{whole // 1024}Gi" if whole % 1024 == 0 else f"{whole}Mi"


def _ceiling_mi(size: Decimal) -> int:
    return int((size / BINARY["Mi"]).to_integral_value(rounding=ROUND_CEILING))
