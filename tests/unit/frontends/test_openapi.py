"""``openapi.yaml`` is a valid OpenAPI 3 document and covers every route family conch serves."""

from __future__ import annotations

import yaml
from openapi_spec_validator import validate

from conch.frontends.http import openapi

ROUTES = [
    "/v2",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/health/deep",
    "/v2/openapi.yaml",
    "/v2/models/stats",
    "/v2/repository/index",
    "/v2/repository/models/{model_name}/load",
    "/v2/repository/models/{model_name}/unload",
    "/v2/systemsharedmemory/status",
    "/v2/systemsharedmemory/region/{region_name}/register",
    "/v2/systemsharedmemory/unregister",
    "/v2/cudasharedmemory/status",
    "/v2/cudasharedmemory/region/{region_name}/register",
    "/v2/models/{model_name}/release",
    "/v2/models/{model_name}/release/{action}",
]
MODEL_ROUTES = ["", "/ready", "/config", "/stats", "/infer", "/generate", "/generate_stream"]


def spec() -> dict[str, object]:
    loaded = yaml.safe_load(openapi.document())
    assert isinstance(loaded, dict)
    return loaded


def test_the_document_is_valid_openapi() -> None:
    validate(spec())


def test_every_route_family_is_described_with_and_without_a_version() -> None:
    paths = spec()["paths"]
    assert isinstance(paths, dict)
    for route in MODEL_ROUTES:
        assert f"/v2/models/{{model_name}}{route}" in paths
        assert f"/v2/models/{{model_name}}/versions/{{model_version}}{route}" in paths
    assert sorted(set(ROUTES) - set(paths)) == []


def test_infer_describes_the_binary_extension() -> None:
    infer = spec()["paths"]["/v2/models/{model_name}/infer"]["post"]  # type: ignore[index]
    assert set(infer["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert "Inference-Header-Content-Length" in infer["description"]
    assert "Inference-Header-Content-Length" in infer["responses"]["200"]["headers"]
