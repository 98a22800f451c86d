"""Fixtures that start real ``conch serve`` processes for the integration suite, and the clients that
talk to them.

A module serves its own models by defining a ``repository`` fixture (a folder built with
``tests.fixtures.onnx_models.write_repository``): ``server`` serves it with no extra flag, and
``http_client``, ``grpc_client`` and ``grpc_stub`` talk to that ``server``. A module whose server needs
flags, or parameters, defines its own ``server``; the clients then talk to that one.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2_grpc

from tests.integration.otlp_receiver import OtlpReceiver
from tests.integration.prometheus_server import Prometheus, running_prometheus
from tests.integration.server_process import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"


@pytest.fixture(scope="module")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ServerProcess]]:
    """Call with a repository path (None: the embedded default) and extra CLI args; stopped at module end."""
    started: list[ServerProcess] = []
    log_dir = tmp_path_factory.mktemp("logs")

    def start(
        repository: Path | None,
        *args: str,
        env: dict[str, str] | None = None,
        https: ssl.SSLContext | None = None,
    ) -> ServerProcess:
        server = ServerProcess(repository, list(args), env or {}, https=https).start(log_dir)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def example_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """The embedded default repository, served with no repository argument."""
    return start_server(None)


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    """The module's ``repository`` fixture, served with no extra flag."""
    return start_server(repository)


@pytest.fixture(scope="module")
def http_client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    """tritonclient's HTTP client on the module's ``server``."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    """tritonclient's gRPC client on the module's ``server``."""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_stub(server: ServerProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """The raw gRPC service stub on the module's ``server``, for requests tritonclient cannot build
    (typed ``contents``, malformed messages)."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver on loopback for the module's traced servers (``receiver.url``)."""
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def prometheus(conch: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A real Prometheus scraping the module's ``conch`` server every second."""
    with running_prometheus(
        tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{conch.metrics_port}"]
    ) as url:
        yield Prometheus(url)
