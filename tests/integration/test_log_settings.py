"""Triton's logging extension on a real ``conch serve``: tritonclient (HTTP and gRPC) changes how much
the server logs while it runs, the server's own log shows it, and what cannot be done is refused."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.server_process import ServerProcess

STARTED = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """The example repository with the access log on: one info record per HTTP answer."""
    return start_server(None, "--access-log", "true")


@pytest.fixture()
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.http_url) as client:
        yield client
        client.update_log_settings({"log_info": True, "log_verbose_level": 0})


def _logged(server: ServerProcess, marker: str) -> bool:
    """Whether an access record of a request naming ``marker`` reaches the log (waited for briefly)."""
    server.request("GET", f"/v2/models/{marker}/ready")
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        if marker in server.log():
            return True
        time.sleep(0.05)
    return False


def test_info_records_stop_and_start_again_as_log_info_says(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    assert http.get_log_settings() == STARTED
    assert _logged(server, f"before-{uuid.uuid4().hex}")
    assert http.update_log_settings({"log_info": False}) == {**STARTED, "log_info": False}
    assert not _logged(server, f"quiet-{uuid.uuid4().hex}")
    assert http.update_log_settings({"log_info": True})["log_info"] is True
    assert _logged(server, f"after-{uuid.uuid4().hex}")


def test_verbose_logging_set_over_grpc_is_read_back_over_http_and_logged(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        answer = grpc.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
        assert answer["log_verbose_level"] == {"uint32_param": 1}
        assert grpc.get_log_settings(as_json=True)["settings"]["log_info"] == {"bool_param": True}
    assert http.get_log_settings()["log_verbose_level"] == 1
    assert "log level set to DEBUG over the logging API" in server.log()


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        ({"log_file": "/tmp/conch.log"}, 403, "CVE-2024-0087"),
        ({"log_format": "ISO8601"}, 400, "--log-format"),
        ({"log_warning": False}, 400, "thresholds"),
        ({"log_info": "no"}, 400, "true or false"),
        ({"log_verbose_level": -1}, 400, ">= 0"),
        ({"log_level": "debug"}, 400, "unknown log setting"),
    ],
)
def test_a_change_that_cannot_be_made_is_refused_and_changes_nothing(
    server: ServerProcess, change: dict[str, object], status: int, words: str
) -> None:
    refused = server.request("POST", "/v2/logging", json.dumps({"log_verbose_level": 1, **change}).encode())
    assert refused.status == status and words in refused.json()["error"]
    assert server.request("GET", "/v2/logging").json() == STARTED


def test_grpc_refusals_carry_their_codes(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        for settings, code in [
            ({"log_file": "/tmp/conch.log"}, "PERMISSION_DENIED"),
            ({"log_error": False}, "INVALID_ARGUMENT"),
        ]:
            with pytest.raises(InferenceServerException) as refused:
                grpc.update_log_settings(settings)
            assert refused.value.status() == f"StatusCode.{code}"
        assert "logging" in grpc.get_server_metadata().extensions
