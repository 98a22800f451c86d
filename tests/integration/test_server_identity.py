"""The server metadata names the server (``--server-name``, default ``conch``) and gives conch's version.

A compatibility switch: some clients and scripts check that the metadata's name is ``triton``; with
``--server-name triton`` they are answered so over HTTP and gRPC, while the version stays conch's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conch import __version__
from tests.integration.conftest import EXAMPLES
from tests.integration.server_process import ServerProcess


@pytest.fixture(scope="module")
def repository() -> Path:
    return EXAMPLES


def metadata_over_both(server: ServerProcess) -> tuple[dict[str, object], dict[str, object]]:
    with httpclient.InferenceServerClient(server.http_url) as http:
        over_http = http.get_server_metadata()
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        over_grpc = grpc.get_server_metadata(as_json=True)
    return over_http, over_grpc


def test_the_default_name_is_conch_with_conchs_version(server: ServerProcess) -> None:
    for metadata in metadata_over_both(server):
        assert metadata["name"] == "conch"
        assert metadata["version"] == __version__


def test_server_name_triton_answers_triton_over_http_and_grpc(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server(EXAMPLES, "--server-name", "triton")

    for metadata in metadata_over_both(server):
        assert metadata["name"] == "triton"
        assert metadata["version"] == __version__
        assert "binary_tensor_data" in metadata["extensions"]  # type: ignore[operator]


def test_the_variable_sets_the_name_too(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(EXAMPLES, env={"CONCH_SERVER_NAME": "my-fleet"})

    assert [m["name"] for m in metadata_over_both(server)] == ["my-fleet", "my-fleet"]
