"""``GET /v2/openapi.yaml``: the HTTP API's OpenAPI document, shipped beside this module.

The document is written by hand from the routes in :mod:`conch.frontends.http.app` (there is no
framework to generate it from), validated by tests/unit/frontends/test_openapi.py and checked against a live
server with schemathesis by tests/integration/test_openapi.py. It is read from the installed package
once, on first request.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

CONTENT_TYPE = b"application/yaml"


@cache
def document() -> bytes:
    """The bytes of ``openapi.yaml`` as shipped in the package."""
    return (resources.files("conch.frontends.http") / "openapi.yaml").read_bytes()
