"""Triton's trace extension on a real ``conch serve``: tritonclient (HTTP and gRPC) changes the trace
settings while the server runs, and the spans a real OTLP receiver gets show their effect; a server
without an exporter keeps its level OFF and says how to turn it on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.integration.server_process import ServerProcess

SERVER_KIND = 2  # OTLP's SPAN_KIND_SERVER
CONFIG = "max_batch_size: 8\ndynamic_batching { }\n"
CLEARED = {"trace_level": None, "trace_rate": None, "trace_count": None}
STARTED = {
    "trace_level": ["TIMESTAMPS"],
    "trace_rate": "1",
    "trace_count": "-1",
    "trace_mode": "opentelemetry",
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    models = ("first", "second", "marker")
    return write_repository(root, {name: (add_sub_model(), CONFIG) for name in models})


@pytest.fixture(scope="module")
def traced(
    start_server: Callable[..., ServerProcess], repository: Path, receiver: OtlpReceiver
) -> ServerProcess:
    env = {"OTEL_BSP_SCHEDULE_DELAY": "50"}  # export every 50 ms: the counts below settle fast
    return start_server(repository, "--trace-otlp-endpoint", receiver.url, env=env)


@pytest.fixture()
def http(traced: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    """An HTTP client on the traced server; every setting is cleared back to the start after the test."""
    with httpclient.InferenceServerClient(traced.http_url) as client:
        yield client
        for model in ("first", "second"):
            client.update_trace_settings(model, CLEARED)
        client.update_trace_settings(settings=CLEARED)


def _infer(client: httpclient.InferenceServerClient, model: str, times: int = 1) -> None:
    for _ in range(times):
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 16], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
            inputs.append(tensor)
        client.infer(model, inputs)


def _traced_requests(receiver: OtlpReceiver, model: str) -> list[ReceivedSpan]:
    return [
        s
        for s in receiver.received()
        if s.kind == SERVER_KIND and s.attributes.get("conch.model.name") == model
    ]


def _settled(receiver: OtlpReceiver, client: httpclient.InferenceServerClient) -> None:
    """Every span of the requests sent so far has arrived: a marker request, traced by its model's
    own settings whatever the test set, ends after them, and the exporter sends spans in the order
    they end. Only this function sends to ``marker`` and it waits for each, so the count it starts
    from is complete (a count on a model the test also sends to may still be on its way)."""
    client.update_trace_settings("marker", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    before = len(_traced_requests(receiver, "marker"))
    _infer(client, "marker")
    receiver.wait_for(lambda _: len(_traced_requests(receiver, "marker")) > before)


def test_the_settings_start_as_the_server_was_started(traced: ServerProcess) -> None:
    with httpclient.InferenceServerClient(traced.http_url) as http:
        assert http.get_trace_settings() == STARTED
        assert http.get_trace_settings("first") == STARTED
    with grpcclient.InferenceServerClient(traced.grpc_url) as grpc:
        answer = grpc.get_trace_settings(as_json=True)["settings"]
        assert {name: value["value"] for name, value in answer.items()} == {
            name: value if isinstance(value, list) else [value] for name, value in STARTED.items()
        }
        assert "trace" in grpc.get_server_metadata().extensions


def test_a_trace_rate_traces_one_request_in_n_of_that_model_only(
    http: httpclient.InferenceServerClient, receiver: OtlpReceiver
) -> None:
    _settled(receiver, http)
    first, second = len(_traced_requests(receiver, "first")), len(_traced_requests(receiver, "second"))
    assert http.update_trace_settings("first", {"trace_rate": "4"})["trace_rate"] == "4"
    _infer(http, "first", 8)
    _infer(http, "second", 3)
    _settled(receiver, http)
    assert len(_traced_requests(receiver, "first")) - first == 2
    assert len(_traced_requests(receiver, "second")) - second == 3
    assert http.get_trace_settings()["trace_rate"] == "1"  # the server's own rate is untouched


def test_a_trace_count_is_spent_then_cleared_back_to_no_limit(
    http: httpclient.InferenceServerClient, traced: ServerProcess, receiver: OtlpReceiver
) -> None:
    _settled(receiver, http)
    before = len(_traced_requests(receiver, "first"))
    with grpcclient.InferenceServerClient(traced.grpc_url) as grpc:
        updated = grpc.update_trace_settings("first", {"trace_count": "3"}, as_json=True)
        assert updated["settings"]["trace_count"]["value"] == ["3"]
        _infer(http, "first", 6)
        _settled(receiver, http)
        assert len(_traced_requests(receiver, "first")) - before == 3
        assert http.get_trace_settings("first")["trace_count"] == "0"
        cleared = grpc.update_trace_settings("first", {"trace_count": None}, as_json=True)
        assert cleared["settings"]["trace_count"]["value"] == ["-1"]
    _infer(http, "first", 2)
    _settled(receiver, http)
    assert len(_traced_requests(receiver, "first")) - before == 5


def test_level_off_for_one_model_stops_its_traces_even_a_sampled_callers(
    http: httpclient.InferenceServerClient, receiver: OtlpReceiver
) -> None:
    _settled(receiver, http)
    before = len(_traced_requests(receiver, "first"))
    assert http.update_trace_settings("first", {"trace_level": ["OFF"]})["trace_level"] == ["OFF"]
    assert http.get_trace_settings()["trace_level"] == ["TIMESTAMPS"]
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
        inputs.append(tensor)
    sampled = {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"}
    http.infer("first", inputs, headers=sampled)
    _settled(receiver, http)
    assert len(_traced_requests(receiver, "first")) == before
    assert http.update_trace_settings("first", {"trace_level": None})["trace_level"] == ["TIMESTAMPS"]
    _infer(http, "first")
    _settled(receiver, http)
    assert len(_traced_requests(receiver, "first")) == before + 1


def test_level_off_for_the_server_stops_every_model_but_one_that_sets_its_own(
    http: httpclient.InferenceServerClient, receiver: OtlpReceiver
) -> None:
    http.update_trace_settings("second", {"trace_level": ["TIMESTAMPS"]})
    http.update_trace_settings(settings={"trace_level": ["OFF"]})
    _settled(receiver, http)
    before = [len(_traced_requests(receiver, model)) for model in ("first", "second")]
    assert http.get_trace_settings("first")["trace_level"] == ["OFF"]
    _infer(http, "first", 3)
    _infer(http, "second", 2)
    _settled(receiver, http)
    assert len(_traced_requests(receiver, "first")) == before[0]
    assert len(_traced_requests(receiver, "second")) == before[1] + 2, "its own level traces it"


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v2/trace/setting", {"trace_level": ["TENSORS"]}, 400, "TIMESTAMPS"),
        ("/v2/trace/setting", {"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "OFF"),
        ("/v2/trace/setting", {"trace_rate": "often"}, 400, "whole number"),
        ("/v2/trace/setting", {"trace_rate": "0"}, 400, "from 1"),
        ("/v2/trace/setting", {"trace_count": "-2"}, 400, "-1 for no limit"),
        ("/v2/trace/setting", {"log_frequency": "100"}, 400, "OTLP"),
        ("/v2/trace/setting", {"sample": "1"}, 400, "trace_rate"),
        ("/v2/trace/setting", [], 400, "object"),
        ("/v2/models/third/trace/setting", {}, 404, "unknown model"),
    ],
)
def test_a_bad_setting_is_refused_with_what_to_send(
    traced: ServerProcess, path: str, body: object, status: int, words: str
) -> None:
    refused = traced.request("POST", path, json.dumps(body).encode())
    assert refused.status == status
    assert words in refused.json()["error"]
    assert traced.request("GET", "/v2/trace/setting").json() == STARTED  # nothing changed


def test_log_frequency_0_is_accepted_and_a_put_is_refused(traced: ServerProcess) -> None:
    assert traced.request("POST", "/v2/trace/setting", b'{"log_frequency": "0"}').json() == STARTED
    wrong_method = traced.request("PUT", "/v2/trace/setting", b"{}")
    assert wrong_method.status == 405 and wrong_method.headers["allow"] == "GET, POST"


def test_grpc_refusals_carry_their_codes(traced: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(traced.grpc_url) as grpc:
        for model, settings, code in [
            ("", {"trace_level": ["TENSORS"]}, "INVALID_ARGUMENT"),
            ("", {"trace_rate": ["1", "2"]}, "INVALID_ARGUMENT"),
            ("", {"trace_file": "/tmp/trace.json"}, "PERMISSION_DENIED"),
            ("third", {"trace_rate": "2"}, "NOT_FOUND"),
        ]:
            with pytest.raises(InferenceServerException) as refused:
                grpc.update_trace_settings(model, settings)
            assert refused.value.status() == f"StatusCode.{code}"


def test_without_an_exporter_the_level_stays_off_and_turning_it_on_says_how(
    start_server: Callable[..., ServerProcess], repository: Path
) -> None:
    untraced = start_server(repository)
    with httpclient.InferenceServerClient(untraced.http_url) as http:
        assert http.get_trace_settings()["trace_level"] == ["OFF"]
        with pytest.raises(InferenceServerException) as refused:
            http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        assert refused.value.status() == "400" and "--trace-otlp-endpoint" in refused.value.message()
        assert http.update_trace_settings(settings={"trace_level": ["OFF"], "trace_rate": "10"}) == {
            **STARTED,
            "trace_level": ["OFF"],
            "trace_rate": "10",
        }
    with grpcclient.InferenceServerClient(untraced.grpc_url) as grpc:
        with pytest.raises(InferenceServerException) as grpc_refused:
            grpc.update_trace_settings("first", {"trace_level": ["TIMESTAMPS"]})
        assert grpc_refused.value.status() == "StatusCode.INVALID_ARGUMENT"
