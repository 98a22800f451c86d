"""JWT auth end to end: real tokens signed by keys made here (RS256 and ES256), over HTTP and gRPC.

Valid, expired, wrong-audience, ``alg: none``, HS256 signed with the RSA public key, missing ``exp``,
a missing scope for an admin call, and an ``infer:<model>`` token that sees only its model.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import jwt
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import identity_model, write_repository
from tests.integration.server_process import ServerProcess

ISSUER = "https://issuer.test"
AUDIENCE = "conch"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def token(scope: str, algorithm: str = "RS256", **overrides: Any) -> str:
    claims: dict[str, Any] = {
        "sub": "client-1",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": int(time.time()) + 300,
        "scope": scope,
        **overrides,
    }
    claims = {key: value for key, value in claims.items() if value is not None}
    key, kid = (RSA_KEY, "rsa-1") if algorithm == "RS256" else (EC_KEY, "ec-1")
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid})


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = tmp_path_factory.mktemp("auth")
    repository = write_repository(
        root / "models",
        {name: (identity_model(TensorProto.FLOAT), None) for name in ("iris", "iris-v2", "secret")},
    )
    keys = []
    for key, kid, algorithm in ((RSA_KEY, "rsa-1", "RS256"), (EC_KEY, "ec-1", "ES256")):
        keys.append({**_public_jwk(key), "kid": kid, "alg": algorithm, "use": "sig"})
    jwks = root / "jwks.json"
    jwks.write_text(json.dumps({"keys": keys}))
    return start_server(
        repository,
        "--auth", "jwt",
        "--jwt-jwks", str(jwks),
        "--jwt-issuer", ISSUER,
        "--jwt-audience", AUDIENCE,
        "--jwt-algorithms", "RS256,ES256",
        "--model-control-mode", "explicit",
        "--load-model", "*",
    )  # fmt: skip


def _public_jwk(key: Any) -> dict[str, Any]:
    algorithm = (
        jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    )
    return json.loads(algorithm.to_jwk(key.public_key()))  # type: ignore[no-any-return]


def infer_http(server: ServerProcess, model: str, headers: dict[str, str]) -> Any:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        return client.infer(model, [tensor], headers=headers)


def test_health_stays_open_without_a_token(server: ServerProcess) -> None:
    assert server.request("GET", "/v2/health/ready").status == 200
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_server_live()


def test_no_token_is_a_401_with_a_bearer_challenge(server: ServerProcess) -> None:
    reply = server.request("GET", "/v2/models/iris")
    assert reply.status == 401
    assert reply.headers["www-authenticate"] == 'Bearer realm="conch"'


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_a_valid_token_infers_over_http(server: ServerProcess, algorithm: str) -> None:
    result = infer_http(server, "iris", bearer(token("infer", algorithm)))
    assert result.as_numpy("OUTPUT0").tolist() == [[1.0] * 4]


def _hs256_with_the_rsa_public_key() -> str:
    public_pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}
    claims = {"sub": "x", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 300, "scope": "infer"}

    def part(document: dict[str, Any]) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(document).encode()).rstrip(b"=")

    signing_input = part(header) + b"." + part(claims)
    signature = base64.urlsafe_b64encode(hmac.new(public_pem, signing_input, hashlib.sha256).digest()).rstrip(
        b"="
    )
    return (signing_input + b"." + signature).decode()


def _alg_none() -> str:
    claims = {"sub": "x", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 300, "scope": "infer"}
    return jwt.encode(claims, None, algorithm="none")


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: token("infer", exp=int(time.time()) - 3600), "expired"),
        (lambda: token("infer", aud="another-service"), "audience"),
        (lambda: token("infer", exp=None), "'exp'"),
        (_alg_none, "algorithm 'none'"),
        (_hs256_with_the_rsa_public_key, "algorithm 'HS256'"),
    ],
    ids=["expired", "wrong-audience", "no-exp", "alg-none", "hs256-with-rsa-public-key"],
)
def test_bad_tokens_are_401_invalid_token(server: ServerProcess, make: Callable[[], str], why: str) -> None:
    reply = server.request("POST", "/v2/repository/index", headers=bearer(make()))
    assert reply.status == 401
    assert reply.headers["www-authenticate"].startswith('Bearer realm="conch", error="invalid_token"')
    assert why in reply.json()["error"]


def test_an_admin_call_needs_the_admin_scope(server: ServerProcess) -> None:
    refused = server.request("POST", "/v2/repository/models/iris/load", headers=bearer(token("infer")))
    assert refused.status == 403
    assert (
        refused.headers["www-authenticate"]
        == 'Bearer realm="conch", error="insufficient_scope", scope="admin"'
    )
    allowed = server.request("POST", "/v2/repository/models/iris/load", headers=bearer(token("admin")))
    assert allowed.status == 200


def test_an_infer_model_token_sees_only_its_model(server: ServerProcess) -> None:
    headers = bearer(token("infer:iris"))
    assert infer_http(server, "iris", headers).as_numpy("OUTPUT0").shape == (1, 4)
    hidden = server.request("GET", "/v2/models/secret", headers=headers)
    assert hidden.status == 404
    assert hidden.json()["error"] == "Request for unknown model: 'secret' is not found"
    near = server.request("GET", "/v2/models/iris-v2", headers=headers).json()["error"]
    assert "did you mean 'iris'" in near and "secret" not in near
    index = server.request("POST", "/v2/repository/index", headers=headers).json()
    assert [entry["name"] for entry in index] == ["iris"]


def test_grpc_takes_the_authorization_metadata(server: ServerProcess) -> None:
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(
            "iris", [tensor], headers={"authorization": f"Bearer {token('infer', 'ES256')}"}
        )
        assert result.as_numpy("OUTPUT0").tolist() == [[1.0] * 4]
        with pytest.raises(InferenceServerException) as unauthenticated:
            client.infer("iris", [tensor])
        assert unauthenticated.value.status() == str(grpc.StatusCode.UNAUTHENTICATED)
        with pytest.raises(InferenceServerException) as denied:
            client.load_model("iris", headers={"authorization": f"Bearer {token('infer')}"})
        assert denied.value.status() == str(grpc.StatusCode.PERMISSION_DENIED)
        index = client.get_model_repository_index(headers={"authorization": f"Bearer {token('infer:iris')}"})
        assert [model.name for model in index.models] == ["iris"]


def test_errors_are_counted_by_code(server: ServerProcess) -> None:
    server.request("GET", "/v2/models/iris")
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        page = reply.read().decode()
    assert "# TYPE conch_requests_total counter" in page
    assert 'conch_requests_total{code="401",protocol="http"}' in page
    assert 'conch_requests_total{code="UNAUTHENTICATED",protocol="grpc"}' in page or 'protocol="grpc"' in page
