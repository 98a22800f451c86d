"""Who a connection's client is: its socket peer, or, for a proxy the operator trusts
(``--http-trusted-proxies``), the client that proxy names in ``--http-client-ip-header``.

The client address is the header's rightmost entry that is not itself a trusted proxy: each proxy
appends the address it received the request from, so entries to the left of the last trusted hop are
whatever the client wrote and prove nothing. A header from an untrusted peer is ignored whole, so a
client cannot choose its identity (and so escape its share of the connections or its rate limit).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from conch.frontends.http.limits import parse_networks


class TrustedProxies:
    """The proxies whose client header is believed, and how to read it."""

    __slots__ = ("_known", "_networks", "header")

    def __init__(self, entries: Iterable[str], header: str) -> None:
        self._networks = parse_networks(entries)
        self.header = header.lower().encode("latin-1")
        #: Addresses already judged, so a busy proxy costs one dict lookup a request.
        self._known: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self._networks)

    def trusts(self, address: str) -> bool:
        trusted = self._known.get(address)
        if trusted is None:
            try:
                ip = ipaddress.ip_address(address)
            except ValueError:
                trusted = False
            else:
                trusted = any(ip in network for network in self._networks)
            if len(self._known) < 4096:
                self._known[address] = trusted
        return trusted

    def client_of(self, peer: str, headers: list[tuple[bytes, bytes]]) -> str:
        """The client's address: ``peer`` itself unless ``peer`` is a trusted proxy that names one."""
        if not self.trusts(peer):
            return peer
        named = [
            part.strip()
            for name, value in headers
            if name == self.header
            for part in value.decode("latin-1").split(",")
        ]
        client = peer
        for entry in reversed(named):
            try:
                ipaddress.ip_address(entry)
            except ValueError:
                break  # not an address: nothing left of it can be believed
            client = entry
            if not self.trusts(entry):
                break
        return client
