"""The HTTP port's limits, from ``conch serve``'s ``--http-*`` flags (see docs/security.md).

Apart from the code that enforces them (``server/connection.py`` for connections and request heads,
``body.py`` for bodies, ``infer_codec.py`` for JSON depth), so that parsing the command line reads
the defaults without importing the server.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Deeper than any V2 request or model config needs (an ensemble's config nests about 6 deep), far
#: below orjson's own 1024.
DEFAULT_MAX_JSON_DEPTH = 32


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
