"""A method a path does not take is a 405 with an ``Allow`` header, on every path of the API.

Triton answers 405 (``Method Not Allowed``) there, and HTTP requires the ``Allow`` header naming the
methods the path takes; conch used to answer 400. Every path of the OpenAPI document the server
serves is called with each method the document does not list for it, on one process and behind
proxy processes (which relay these calls to the model process).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from onnx import TensorProto

from conch.frontends.http import openapi
from tests.fixtures.onnx_models import add_sub_model, identity_model, write_repository
from tests.integration.server_process import ServerProcess

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
#: What each path parameter is filled with: names that exist, so no 404 comes before the method.
PARAMETERS = {"model_name": "simple", "model_version": "1", "region_name": "r", "action": "promote"}


def documented_methods() -> list[tuple[str, frozenset[str]]]:
    """(path with its parameters filled, the methods the document lists for it), for every path."""
    paths = yaml.safe_load(openapi.document())["paths"]
    return [
        (path.format(**PARAMETERS), frozenset(m.upper() for m in operations if m.upper() in METHODS))
        for path, operations in paths.items()
    ]


@pytest.fixture(scope="module", params=[(), ("--proxies", "2")], ids=["one process", "proxies"])
def server(
    request: pytest.FixtureRequest,
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> ServerProcess:
    root: Path = tmp_path_factory.mktemp("models")
    models = {"simple": (add_sub_model(), None), "identity": (identity_model(TensorProto.FLOAT), None)}
    return start_server(write_repository(root, models), *request.param)


def test_the_document_lists_every_route_with_its_methods() -> None:
    listed = dict(documented_methods())
    assert len(listed) >= 30
    assert listed["/v2/models/simple/infer"] == {"POST"}
    assert listed["/v2/trace/setting"] == {"GET", "POST"}


@pytest.mark.parametrize(("path", "allowed"), documented_methods())
def test_a_method_the_path_does_not_take_is_405_naming_those_it_takes(
    server: ServerProcess, path: str, allowed: frozenset[str]
) -> None:
    for method in sorted(set(METHODS) - allowed):
        reply = server.request(method, path, b"{}" if method != "GET" else None)
        assert reply.status == 405, f"{method} {path}: {reply.status} {reply.body[:200]!r}"
        assert set(reply.headers["allow"].split(", ")) == allowed, f"{method} {path}"
        message = reply.json()["error"]
        assert message.startswith(f"method {method} is not allowed")
        assert all(name in message for name in allowed), message


def test_the_server_still_answers_the_methods_it_takes(server: ServerProcess) -> None:
    assert server.request("GET", "/v2/health/ready").status == 200
    assert server.request("POST", "/v2/models/simple/infer", b"{}").status == 400  # no inputs: a 400
    assert server.request("GET", "/v2/trace/setting").status == 200
