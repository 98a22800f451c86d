"""TLS on the HTTP and gRPC ports of a real ``conch serve``, in each way it can run (one process,
proxy processes, the gRPC relay, workers): tritonclient over HTTPS and gRPC with TLS, a client
refused without the certificate mutual TLS asks for, and flags that cannot be served refused at start.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.certificates import Certificates, write_certificates
from tests.fixtures.onnx_models import identity_model, write_repository
from tests.integration.server_process import ServerProcess

MODES = {
    "one-process": (),
    "proxies": ("--proxies", "2"),
    "workers": ("--workers", "2"),
}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return write_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    return write_repository(root, {"echo": (identity_model(TensorProto.FLOAT), None)})


def tls_flags(certificates: Certificates, mutual: bool = False) -> list[str]:
    flags = []
    for port in ("http", "grpc"):
        flags += [f"--{port}-use-ssl", "true"]
        flags += [f"--{port}-server-cert", str(certificates.server_cert)]
        flags += [f"--{port}-server-key", str(certificates.server_key)]
    if mutual:
        for root, mutual_flag in (
            ("--http-root-cert", "--http-use-ssl-mutual"),
            ("--grpc-root-cert", "--grpc-use-ssl-mutual"),
        ):
            flags += [root, str(certificates.ca), mutual_flag, "true"]
    return flags


def client_context(certificates: Certificates, own_certificate: bool = False) -> ssl.SSLContext:
    """A client's TLS context trusting the test CA, with the client's certificate when asked."""
    made = ssl.create_default_context(cafile=str(certificates.ca))
    if own_certificate:
        made.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
    return made


def https_client(server: ServerProcess, certificates: Certificates, own_certificate: bool = False) -> Any:
    return httpclient.InferenceServerClient(
        f"localhost:{server.http_port}",
        ssl=True,
        ssl_context_factory=lambda: client_context(certificates, own_certificate),
        network_timeout=10,
    )


def grpc_client(
    server: ServerProcess, certificates: Certificates, own_certificate: bool = False
) -> grpcclient.InferenceServerClient:
    extra = {}
    if own_certificate:
        extra = {
            "private_key": str(certificates.client_key),
            "certificate_chain": str(certificates.client_cert),
        }
    return grpcclient.InferenceServerClient(
        f"localhost:{server.grpc_port}", ssl=True, root_certificates=str(certificates.ca), **extra
    )


def echoes(client: Any, module: Any) -> bool:
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return bool(np.array_equal(client.infer("echo", [tensor]).as_numpy("OUTPUT0"), data))


@pytest.mark.parametrize("mode", MODES)
def test_tritonclient_infers_over_https_and_grpc_with_tls_and_plain_text_is_not_served(
    start_server: Callable[..., ServerProcess], repository: Path, certificates: Certificates, mode: str
) -> None:
    server = start_server(
        repository, *tls_flags(certificates), *MODES[mode], https=client_context(certificates)
    )
    with https_client(server, certificates) as https, grpc_client(server, certificates) as grpc:
        assert echoes(https, httpclient) and echoes(grpc, grpcclient)
        assert https.is_server_ready() and grpc.is_server_ready()
    with pytest.raises((ConnectionError, http.client.HTTPException)):  # no HTTP answer in plain text
        server.request("GET", "/v2/health/ready")
    with grpcclient.InferenceServerClient(server.grpc_url) as plain, pytest.raises(InferenceServerException):
        plain.is_server_ready(client_timeout=5)
    # The metrics port stays plain, for Prometheus inside the cluster.
    assert (
        "nv_inference_count"
        in subprocess.run(
            ["curl", "-s", server.metrics_url], capture_output=True, text=True, timeout=30
        ).stdout
    )


def test_mutual_tls_serves_a_client_with_a_certificate_and_refuses_one_without(
    start_server: Callable[..., ServerProcess], repository: Path, certificates: Certificates
) -> None:
    server = start_server(
        repository, *tls_flags(certificates, mutual=True), https=client_context(certificates, True)
    )
    with https_client(server, certificates, True) as https, grpc_client(server, certificates, True) as grpc:
        assert echoes(https, httpclient) and echoes(grpc, grpcclient)
    # Refused in the handshake (or, under TLS 1.3, right after it): never an HTTP answer.
    url = f"https://localhost:{server.http_port}/v2/health/ready"
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(url, context=client_context(certificates), timeout=10)
    with grpc_client(server, certificates) as anonymous, pytest.raises(InferenceServerException):
        anonymous.is_server_ready(client_timeout=5)
    with grpc_client(server, certificates, True) as grpc:  # and the server serves on
        assert echoes(grpc, grpcclient)


def test_a_client_that_stalls_its_handshake_is_cut_off_as_a_slow_client(
    start_server: Callable[..., ServerProcess], repository: Path, certificates: Certificates
) -> None:
    server = start_server(
        repository,
        *tls_flags(certificates),
        "--http-slow-client-timeout-secs",
        "1",
        https=client_context(certificates),
    )
    with socket.create_connection(("127.0.0.1", server.http_port)) as stalled:
        stalled.settimeout(10)
        started = time.monotonic()
        assert stalled.recv(1024) == b""  # closed by the server, no handshake having begun
        assert time.monotonic() - started < 5
    with https_client(server, certificates) as https:
        assert echoes(https, httpclient)


def serve(flags: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", *flags], capture_output=True, text=True, timeout=60
    )


def test_tls_flags_that_cannot_be_served_are_refused_naming_the_flag(
    certificates: Certificates, tmp_path: Path
) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    cert, key = str(certificates.server_cert), str(certificates.server_key)
    for flags, words in [
        (
            ["--grpc-use-ssl", "true", "--grpc-server-cert", cert],
            "--grpc-use-ssl needs --grpc-server-cert and",
        ),
        (["--http-server-cert", cert, "--http-server-key", key], "given without --http-use-ssl true"),
        (
            [
                "--grpc-use-ssl",
                "true",
                "--grpc-server-cert",
                cert,
                "--grpc-server-key",
                key,
                "--grpc-use-ssl-mutual",
                "1",
            ],
            "--grpc-use-ssl-mutual needs --grpc-root-cert",
        ),
        (
            [
                "--http-use-ssl",
                "true",
                "--http-server-cert",
                str(tmp_path / "gone.crt"),
                "--http-server-key",
                key,
            ],
            "--http-server-cert "
            + str(tmp_path / "gone.crt")
            + ": cannot read it (No such file or directory)",
        ),
        (
            ["--http-use-ssl", "true", "--http-server-cert", str(not_pem), "--http-server-key", key],
            "is not a PEM certificate and its private key",
        ),
        (
            [
                "--http-use-ssl",
                "true",
                "--http-server-cert",
                cert,
                "--http-server-key",
                str(certificates.client_key),
            ],
            "is not a PEM certificate and its private key",
        ),
    ]:
        done = serve(flags)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr
        assert "Traceback" not in done.stderr
