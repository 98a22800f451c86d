"""What a request's head must say before its app runs, as rules with no I/O (RFC 9112).

Each returns the 400's message, or None when the head is fine.
"""

from __future__ import annotations

Headers = list[tuple[bytes, bytes]]


def head_problem(http_version: str, headers: Headers) -> str | None:
    """A request line without a version (HTTP/0.9), a missing or repeated ``Host``, or an ``Upgrade``
    with a body (whose bytes the parser would take for the new protocol's, not the body's)."""
    if http_version not in ("1.0", "1.1"):
        return "the request line has no HTTP version; send HTTP/1.1 (METHOD /path HTTP/1.1)"
    hosts = 0
    upgrade = has_body = False
    for name, value in headers:
        if name == b"host":
            hosts += 1
        elif name == b"upgrade":
            upgrade = True
        elif name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t0")):
            has_body = True
    if hosts > 1:
        return "the request has more than one Host header; send exactly one"
    if hosts == 0 and http_version == "1.1":
        return "an HTTP/1.1 request needs a Host header"
    if upgrade and has_body:
        return "a request that asks for an Upgrade may not have a body; send it without Upgrade"
    return None


def declared_length(headers: Headers) -> int | None:
    """The ``Content-Length`` the head declares (the parser has refused a malformed or repeated one)."""
    for name, value in headers:
        if name == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() else None
    return None


def expects_continue(headers: Headers) -> bool:
    for name, value in headers:
        if name == b"expect":
            return value.lower() == b"100-continue"
    return False
