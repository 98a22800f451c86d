"""The HTTP port's limits, from ``conch serve``'s ``--http-*`` flags (see docs/security.md).

Apart from the code that enforces them (``server/connection.py`` for connections and request heads,
``body.py`` for bodies, ``infer_codec.py`` for JSON depth), so that parsing the command line reads
the defaults without importing the server.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Deeper than any V2 request or model config needs (an ensemble's config nests about 6 deep), far
#: below orjson's own 1024.
DEFAULT_MAX_JSON_DEPTH = 32


def parse_networks(entries: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``127.0.0.1``, ``10.0.0.0/8``, ``::1``...: each a network; a bad entry raises ValueError naming it."""
    networks = []
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"'{text}' is not an IP address or network (such as 10.0.0.0/8)") from None
    return networks


@dataclass(frozen=True)
class HttpLimits:
    """What one request and one client may hold of the HTTP port."""

    #: A request body, after inflating gzip or deflate.
    max_body_bytes: int = 512 * 1024 * 1024
    #: The request line and headers together; a JWT of a few kilobytes fits many times over.
    max_header_bytes: int = 64 * 1024
    #: Headers in one request (Apache's LimitRequestFields default).
    max_headers: int = 100
    #: Connections open at once; one more is answered 503 and closed.
    max_connections: int = 1000
    #: Seconds an idle keep-alive connection stays open: above the 60 s idle timeout of common load
    #: balancers, so a balancer never reuses a connection the server has just closed.
    idle_timeout_secs: float = 75.0
    #: Seconds a request's head (line and headers) may take to arrive from its first byte, or from
    #: the connection's opening for its first request.
    slow_client_timeout_secs: float = 10.0
    #: Nesting of a JSON request body, an infer request's tensor data aside.
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    #: Seconds a whole request (line, headers and body) may take to arrive from its first byte: a
    #: 100 MB body over a 10 Mbit/s link takes 80 s.
    request_timeout_secs: float = 120.0
    #: Bytes a second a request body must average once it has been arriving for
    #: ``slow_client_timeout_secs``: a client trickling a byte at a time is cut off after that grace.
    min_body_rate: int = 4096
    #: Seconds a client may leave an answer unread (no byte of it taken) before it is cut off.
    write_timeout_secs: float = 30.0
    #: Addresses and networks of the proxies whose ``client_ip_header`` names the client (empty: none).
    trusted_proxies: tuple[str, ...] = field(default=())
    #: The header a trusted proxy names the client in (its rightmost address not itself a proxy).
    client_ip_header: str = "x-forwarded-for"

    def __post_init__(self) -> None:
        # Sent to the proxy processes as JSON, where a tuple becomes a list.
        object.__setattr__(self, "trusted_proxies", tuple(self.trusted_proxies))
        object.__setattr__(self, "client_ip_header", self.client_ip_header.lower())
