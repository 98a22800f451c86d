"""Triton's ``--http-restricted-api`` and ``--grpc-restricted-protocol``: ``API[,API...]:key=value``.

A request to a restricted group must carry the header (HTTP) or metadata (gRPC) ``key`` with
``value``. Users who already run Triton with an admin key keep their setup when they move to conch.
Triton's answer is kept too: HTTP 403 "This API is restricted, expecting header 'key'", and gRPC
UNAVAILABLE "This protocol is restricted, expecting header 'key'".

The value is compared in constant time (``hmac.compare_digest``): it is a shared secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from conch.core.errors import ConchError, ErrorKind
from conch.gateway.api_groups import GROUPS


class RestrictedApiError(ConchError):
    """A restricted group without its header: 403 over HTTP, UNAVAILABLE over gRPC, as Triton answers."""

    kind = ErrorKind.PERMISSION_DENIED
    grpc_kind = ErrorKind.UNAVAILABLE


@dataclass(frozen=True)
class Restriction:
    groups: frozenset[str]
    key: str
    value: str


def parse_restriction(text: str) -> Restriction:
    """``model-repository,shared-memory:admin-key=secret``; raises ValueError saying what is expected."""
    groups_text, colon, pair = text.partition(":")
    key, equals, value = pair.partition("=")
    if not colon or not equals or not key.strip() or not groups_text.strip():
        raise ValueError(f"expected API[,API...]:key=value, got '{text}'")
    groups = frozenset(g.strip().lower() for g in groups_text.split(","))
    unknown = sorted(groups - set(GROUPS))
    if unknown:
        raise ValueError(f"unknown API group {', '.join(unknown)}; the groups are {', '.join(GROUPS)}")
    return Restriction(groups, key.strip().lower(), value)


class RestrictedApis:
    """The restrictions of one protocol, by group (a group restricted twice is Triton's error too)."""

    def __init__(self, restrictions: Iterable[Restriction], protocol_word: str) -> None:
        self._by_group: dict[str, Restriction] = {}
        for restriction in restrictions:
            for group in restriction.groups:
                if group in self._by_group:
                    raise ValueError(f"API group '{group}' is restricted more than once")
                self._by_group[group] = restriction
        self._word = protocol_word

    def __bool__(self) -> bool:
        return bool(self._by_group)

    def check(self, group: str, header: Callable[[str], str | None]) -> None:
        """Raise :class:`RestrictedApiError` unless ``group`` is open or its header is right."""
        restriction = self._by_group.get(group)
        if restriction is None:
            return
        given = header(restriction.key)
        if given is None or not hmac.compare_digest(given.encode(), restriction.value.encode()):
            raise RestrictedApiError(f"This {self._word} is restricted, expecting header '{restriction.key}'")
