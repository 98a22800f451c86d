"""``GET /v2/openapi.yaml`` from a live server, and schemathesis fuzzing that server with it.

Bounded for CI: a few examples per operation (``MAX_EXAMPLES``), so the whole module takes well under
a minute. Non-destructive routes run against a server with the default control mode; load, unload,
shared-memory registration and release changes against a second server in explicit mode over a
throwaway repository; and every operation once more against a third server under ``--auth jwt``,
called with an admin token, on its own throwaway repository. Every answer must be documented
(status code, content type, headers, body schema) and none may be a 500: a model failing while
running is the only documented 500, and these models never fail.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, settings
from onnx import TensorProto
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

from conch.frontends.http import openapi
from tests.fixtures.gateway_keys import AUTH_FLAGS, bearer, write_jwks
from tests.fixtures.onnx_models import add_sub_model, identity_model, write_repository
from tests.integration.server_process import ServerProcess

# CONCH_OPENAPI_EXAMPLES=200 for a longer run by hand.
MAX_EXAMPLES = int(os.environ.get("CONCH_OPENAPI_EXAMPLES", "8"))
CHECKS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.response_schema_conformance,
]
DESTRUCTIVE = r"/(load|unload|register|unregister)$|/release(/\{action\})?$"


def models(root: Path) -> Path:
    return write_repository(
        root, {"simple": (add_sub_model(), None), "identity": (identity_model(TensorProto.FLOAT), None)}
    )


@pytest.fixture(scope="module")
def live(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    return start_server(models(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def behind_proxies(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    """Two proxy processes decode the inferences and relay the rest: the same answers are due."""
    return start_server(models(tmp_path_factory.mktemp("proxies")), "--proxies", "2")


@pytest.fixture(scope="module")
def throwaway(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = models(tmp_path_factory.mktemp("throwaway"))
    return start_server(root, "--model-control-mode", "explicit", "--load-model", "*")


@pytest.fixture(scope="module")
def guarded(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = models(tmp_path_factory.mktemp("guarded"))
    jwks = write_jwks(root.parent / "jwks.json")
    return start_server(
        root, *AUTH_FLAGS, "--jwt-jwks", str(jwks), "--model-control-mode", "explicit", "--load-model", "*"
    )


def fetch(server: ServerProcess) -> tuple[str, bytes]:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/openapi.yaml", timeout=10) as reply:
        return reply.headers["content-type"], reply.read()


def test_the_server_serves_its_openapi_document(live: ServerProcess) -> None:
    content_type, body = fetch(live)
    assert content_type == "application/yaml"
    assert body == openapi.document()
    assert yaml.safe_load(body)["openapi"].startswith("3.")


# The document the package ships (the test above checks the server serves the same bytes).
schema = schemathesis.openapi.from_dict(yaml.safe_load(openapi.document()))
live_api = schema.exclude(path_regex=DESTRUCTIVE)
throwaway_api = schema.include(path_regex=DESTRUCTIVE)
#: Fewer examples under auth: the run covers every operation again, and the token is what it adds.
AUTH_EXAMPLES = max(1, MAX_EXAMPLES // 2)
bounded = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


@live_api.parametrize()
@pytest.mark.parametrize("served", ["live", "behind_proxies"])
@bounded
def test_non_destructive_routes_conform(
    case: schemathesis.Case, served: str, request: pytest.FixtureRequest
) -> None:
    server: ServerProcess = request.getfixturevalue(served)
    case.call_and_validate(base_url=f"http://{server.http_url}", checks=CHECKS)


@throwaway_api.parametrize()
@bounded
def test_destructive_routes_conform_on_a_throwaway_repository(
    case: schemathesis.Case, throwaway: ServerProcess
) -> None:
    case.call_and_validate(base_url=f"http://{throwaway.http_url}", checks=CHECKS)


@schema.parametrize()
@settings(bounded, max_examples=AUTH_EXAMPLES)
def test_every_route_conforms_under_auth_with_an_admin_token(
    case: schemathesis.Case, guarded: ServerProcess
) -> None:
    response = case.call_and_validate(
        base_url=f"http://{guarded.http_url}", checks=CHECKS, headers=bearer("infer admin")
    )
    assert response.status_code != 401, f"the admin token was refused: {response.text}"
