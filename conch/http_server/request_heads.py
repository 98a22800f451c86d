"""A request's head: what it must say before its app runs (RFC 9112), as rules with no I/O, and the
ASGI scope made of it."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import httptools

_ASGI = {"version": "3.0", "spec_version": "2.3"}

Headers = list[tuple[bytes, bytes]]


def head_problem(http_version: str, headers: Headers) -> str | None:
    """The 400's message, or None when the head is fine: a request line without a version (HTTP/0.9),
    a missing or repeated ``Host``, or an ``Upgrade`` with a body (whose bytes the parser would take
    for the new protocol's, not the body's)."""
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


def peer_address(value: Any) -> tuple[str, int] | None:
    """A socket address as the ASGI scope gives it: ``(host, port)``."""
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None


def parser_complaint(exc: Exception) -> str:
    """The parser's complaint, without anything of the request's bytes."""
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    return text.split(":")[0][:80] or type(exc).__name__


def http_scope(
    method: str,
    target: bytes,
    http_version: str,
    headers: Headers,
    client: tuple[str, int] | None,
    server: tuple[str, int] | None,
) -> dict[str, Any] | None:
    """The ASGI scope of a request, or None when its target is not a valid URL."""
    try:
        url = httptools.parse_url(target)
    except httptools.HttpParserInvalidURLError:
        return None
    raw_path: bytes = url.path or b"/"
    path = raw_path.decode("latin-1")
    if "%" in path:
        path = unquote(path, encoding="latin-1")
    return {
        "type": "http",
        "asgi": _ASGI,
        "http_version": http_version,
        "server": server,
        "client": client,
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path,
        "raw_path": raw_path,
        "query_string": url.query or b"",
        "headers": headers,
    }
