"""OpenTelemetry traces end to end: a real ``conch serve`` exports over OTLP/HTTP to a receiver on
loopback that decodes with ``opentelemetry-proto``; tritonclient sends the requests with a W3C
``traceparent``, and each test reads the span tree the receiver got.
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures import python_models as models
from tests.fixtures.ensembles import ensemble_config, write_ensemble
from tests.fixtures.onnx_models import add_sub_grpc_inputs, add_sub_model, scale_model, write_repository
from tests.integration.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.integration.server_process import ServerProcess

SERVER, CLIENT = 2, 3  # OTLP span kinds
STATUS_ERROR = 2
STAGES = {"decode", "queue", "execute", "encode", "batch"}
#: A batch of four goes as soon as four requests are queued; anything else waits 5 s.
BATCH_OF_FOUR = """
max_batch_size: 4
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 5000000 }
parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }
"""
#: Version 1 answers every request (weight 0) and each is copied to version 2 (shadow).
DARK_LAUNCH = """
candidate: 2
baseline: 1
steps:
  - {weight: 0, duration: 1h, shadow: true}
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    write_repository(
        root,
        {
            "add_sub": (add_sub_model(), "max_batch_size: 8\ndynamic_batching { }\n"),
            "add_sub_four": (add_sub_model(), BATCH_OF_FOUR),
            "released": (scale_model(1.0), "max_batch_size: 8\n"),
        },
    )
    (root / "released" / "2").mkdir()
    (root / "released" / "2" / "model.onnx").write_bytes(scale_model(2.0).SerializeToString())
    (root / "released" / "release.yaml").write_text(DARK_LAUNCH)
    models.write_python_model(root, "bls_sync", models.BLS_CONFIG.format(name="bls_sync"), models.BLS_SYNC)
    tensors = [(name, "TYPE_FP32", [16]) for name in ("INPUT0", "INPUT1")]
    outputs = [(name, "TYPE_FP32", [16]) for name in ("OUTPUT0", "OUTPUT1")]
    steps = [
        ("add_sub", {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
        ("add_sub", {"INPUT0": "SUM", "INPUT1": "DIFF"}, {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}),
    ]
    write_ensemble(root, "twice", ensemble_config("twice", tensors, outputs, steps, max_batch_size=8))
    return root


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess],
    repository: Path,
    receiver: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> ServerProcess:
    """Tracing set by the flags; the OTEL_* variables name the service and add an export header."""
    env = {
        "OTEL_SERVICE_NAME": "conch-under-test",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=traces-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export every 0.1 s instead of 5 s: a faster test
        "CONCH_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
        "CONCH_LOG_FORMAT": "json",
    }
    args = ("--trace-otlp-endpoint", receiver.url, "--trace-sample-ratio", "1.0", "--log-inferences", "true")
    return start_server(repository, *args, env=env)


def _traceparent(sampled: bool = True) -> tuple[str, str, str]:
    """A caller's fresh trace id and span id, and the ``traceparent`` header carrying them."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def _http_inputs(rows: int = 1) -> list[httpclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [rows, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((rows, 16), dtype=np.float32))
        inputs.append(tensor)
    return inputs


def _complete(trace_id: str, names: set[str]) -> Callable[[list[ReceivedSpan]], bool]:
    return lambda spans: names <= {s.name for s in spans if s.trace_id == trace_id}


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"expected one {name!r} span, got {[s.name for s in spans]}"
    return found[0]


def _check_request_tree(spans: list[ReceivedSpan], trace_id: str, caller_span: str, name: str) -> None:
    """The server span continues the caller's; every stage is its child, in order, inside it."""
    root = _one(spans, name)
    assert (root.trace_id, root.parent_id, root.kind) == (trace_id, caller_span, SERVER)
    assert root.service == "conch-under-test"
    stages = {s.name: s for s in spans if s.parent_id == root.span_id}
    assert set(stages) == STAGES
    decode, queue, execute, encode = (stages[n] for n in ("decode", "queue", "execute", "encode"))
    slack = 2_000_000  # queue and execute are timed on the monotonic clock and placed on the epoch
    assert root.start_ns - slack <= decode.start_ns <= decode.end_ns <= queue.start_ns + slack
    assert queue.end_ns <= execute.start_ns + slack and execute.end_ns <= encode.start_ns + slack
    assert encode.end_ns <= root.end_ns + slack
    batch = stages["batch"]
    assert (trace_id, root.span_id) in batch.links  # a batch links to each request it holds
    assert execute.links == [(trace_id, batch.span_id)]
    assert batch.attributes["conch.batch.requests"] == 1 and batch.attributes["conch.batch.rows"] == 1


def test_http_request_continues_the_callers_trace(server: ServerProcess, receiver: OtlpReceiver) -> None:
    trace_id, caller, traceparent = _traceparent()
    with httpclient.InferenceServerClient(server.http_url) as client:
        client.infer("add_sub", _http_inputs(), headers={"traceparent": traceparent})
    spans = receiver.wait_for(_complete(trace_id, STAGES | {"POST /v2/models/{model_name}/infer"}))
    trace = [s for s in spans if s.trace_id == trace_id]
    _check_request_tree(trace, trace_id, caller, "POST /v2/models/{model_name}/infer")
    root = _one(trace, "POST /v2/models/{model_name}/infer")
    assert root.attributes["http.request.method"] == "POST"
    assert root.attributes["http.route"] == "/v2/models/{model_name}/infer"
    assert root.attributes["url.path"] == "/v2/models/add_sub/infer"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["conch.model.name"] == "add_sub"
    assert root.attributes["conch.protocol"] == "http"
    assert any(h.get("x-tenant") == "traces-test" for h in receiver.headers)  # OTEL_EXPORTER_OTLP_HEADERS
    records = [json.loads(line) for line in server.log().splitlines() if '"event":"inference"' in line]
    assert trace_id in {record["trace_id"] for record in records}  # the inference log names the trace


def test_grpc_call_continues_the_callers_trace(server: ServerProcess, receiver: OtlpReceiver) -> None:
    trace_id, caller, traceparent = _traceparent()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.infer(
            "add_sub", add_sub_grpc_inputs(), model_version="1", headers={"traceparent": traceparent}
        )
    name = "inference.GRPCInferenceService/ModelInfer"
    spans = receiver.wait_for(_complete(trace_id, STAGES | {name}))
    trace = [s for s in spans if s.trace_id == trace_id]
    _check_request_tree(trace, trace_id, caller, name)
    root = _one(trace, name)
    assert root.attributes["rpc.system"] == "grpc"
    assert root.attributes["rpc.method"] == "ModelInfer"
    assert root.attributes["rpc.grpc.status_code"] == 0
    assert (root.attributes["conch.model.name"], root.attributes["conch.model.version"]) == ("add_sub", "1")


def test_each_request_of_a_grpc_stream_is_in_the_streams_trace(
    server: ServerProcess, receiver: OtlpReceiver
) -> None:
    trace_id, caller, traceparent = _traceparent()
    answers: queue.Queue[object] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(
            lambda result, error: answers.put(error or result), headers={"traceparent": traceparent}
        )
        for _ in range(2):
            client.async_stream_infer("add_sub", add_sub_grpc_inputs())
        got = [answers.get(timeout=30) for _ in range(2)]
        client.stop_stream()
    assert all(isinstance(answer, grpcclient.InferResult) for answer in got)
    name = "inference.GRPCInferenceService/ModelStreamInfer"
    spans = receiver.wait_for(
        lambda got: sum(s.trace_id == trace_id and s.name == "encode" for s in got) == 2
    )
    roots = [s for s in spans if s.trace_id == trace_id and s.name == name]
    assert len(roots) == 2 and all(root.parent_id == caller for root in roots)
    assert all(root.attributes["rpc.method"] == "ModelStreamInfer" for root in roots)
    for root in roots:
        assert {s.name for s in spans if s.parent_id == root.span_id} == STAGES


def test_a_batch_links_to_every_request_in_it(server: ServerProcess, receiver: OtlpReceiver) -> None:
    callers = [_traceparent() for _ in range(4)]

    def send(traceparent: str) -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            client.infer("add_sub_four", _http_inputs(), headers={"traceparent": traceparent})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(send, [traceparent for _, _, traceparent in callers]))
    ids = {trace_id for trace_id, _, _ in callers}
    spans = receiver.wait_for(
        lambda got: (
            all(_complete(t, {"execute", "encode"})(got) for t in ids)
            and any(s.name == "batch" and s.trace_id in ids for s in got)
        )
    )
    roots = {s.trace_id: s for s in spans if s.trace_id in ids and s.kind == SERVER}
    batches = [s for s in spans if s.name == "batch" and s.trace_id in ids]
    assert len(batches) == 1  # the four went together
    batch = batches[0]
    assert sorted(batch.links) == sorted((t, roots[t].span_id) for t in ids)
    assert batch.attributes["conch.batch.requests"] == 4
    assert batch.parent_id == roots[batch.trace_id].span_id  # it lives in the first request's trace
    for trace_id in ids:
        execute = next(s for s in spans if s.trace_id == trace_id and s.name == "execute")
        assert execute.parent_id == roots[trace_id].span_id
        assert execute.links == [(batch.trace_id, batch.span_id)]


def test_a_bls_call_is_in_the_callers_trace(server: ServerProcess, receiver: OtlpReceiver) -> None:
    trace_id, caller, traceparent = _traceparent()
    values = {
        "MODEL": (np.array([b"add_sub"], dtype=object), "BYTES"),
        "INPUT0": (np.ones((1, 16), dtype=np.float32), "FP32"),
        "INPUT1": (np.ones((1, 16), dtype=np.float32), "FP32"),
        "TIMEOUT_US": (np.array([0], dtype=np.int64), "INT64"),
    }
    inputs = []
    for name, (value, datatype) in values.items():
        tensor = httpclient.InferInput(name, list(value.shape), datatype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer("bls_sync", inputs, headers={"traceparent": traceparent})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2, dtype=np.float32))
    spans = receiver.wait_for(
        lambda got: sum(s.trace_id == trace_id and s.name == "execute" for s in got) == 2
    )
    trace = [s for s in spans if s.trace_id == trace_id]
    root = _one(trace, "POST /v2/models/{model_name}/infer")
    assert root.parent_id == caller
    outer_batch = next(s for s in trace if s.name == "batch" and s.parent_id == root.span_id)
    bls = _one(trace, "BLS add_sub")
    assert (bls.parent_id, bls.kind) == (outer_batch.span_id, CLIENT)  # under the execution that called
    assert bls.attributes["conch.protocol"] == "bls"
    under_bls = {s.name for s in trace if s.parent_id == bls.span_id}
    assert {"queue", "execute", "batch"} <= under_bls  # the callee's own stages, in the same trace


def test_a_shadow_copy_is_a_span_of_the_request_it_copies(
    server: ServerProcess, receiver: OtlpReceiver
) -> None:
    deadline = time.monotonic() + 30
    while server.request("GET", "/v2/models/released/release").json()["state"] != "progressing":
        assert time.monotonic() < deadline, "the release never started"
        time.sleep(0.1)
    trace_id, _, traceparent = _traceparent()
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer("released", [tensor], headers={"traceparent": traceparent})
    assert result.get_response()["model_version"] == "1"
    spans = receiver.wait_for(
        lambda got: sum(s.trace_id == trace_id and s.name == "execute" for s in got) == 2
    )
    trace = [s for s in spans if s.trace_id == trace_id]
    root = _one(trace, "POST /v2/models/{model_name}/infer")
    shadow = _one(trace, "shadow")
    assert shadow.parent_id == root.span_id
    assert (shadow.attributes["conch.model.name"], shadow.attributes["conch.model.version"]) == (
        "released",
        "2",
    )
    assert {"queue", "execute", "batch"} <= {s.name for s in trace if s.parent_id == shadow.span_id}


def test_each_ensemble_step_is_a_span_of_the_ensembles_request(
    server: ServerProcess, receiver: OtlpReceiver
) -> None:
    trace_id, _, traceparent = _traceparent()
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer("twice", _http_inputs(), headers={"traceparent": traceparent})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2, dtype=np.float32))
    spans = receiver.wait_for(
        lambda got: sum(s.trace_id == trace_id and s.name == "step add_sub" for s in got) == 2
    )
    trace = [s for s in spans if s.trace_id == trace_id]
    root = _one(trace, "POST /v2/models/{model_name}/infer")
    steps = sorted((s for s in trace if s.name == "step add_sub"), key=lambda s: s.start_ns)
    assert all(step.parent_id == root.span_id for step in steps)
    assert steps[0].end_ns <= steps[1].start_ns  # the second step reads the first one's outputs
    for step in steps:
        assert {"queue", "execute", "batch"} <= {s.name for s in trace if s.parent_id == step.span_id}


def test_a_refused_request_records_its_status(server: ServerProcess, receiver: OtlpReceiver) -> None:
    trace_id, _, traceparent = _traceparent()
    with httpclient.InferenceServerClient(server.http_url) as client, pytest.raises(InferenceServerException):
        client.infer("add_sub", _http_inputs()[:1], headers={"traceparent": traceparent})
    spans = receiver.wait_for(_complete(trace_id, {"POST /v2/models/{model_name}/infer"}))
    root = _one([s for s in spans if s.trace_id == trace_id], "POST /v2/models/{model_name}/infer")
    assert root.attributes["http.response.status_code"] == 400
    assert root.status_code != STATUS_ERROR  # a client's mistake is not the server's error


def test_ratio_zero_from_the_otel_variables_records_only_sampled_callers(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Configured by the standard variables alone: parent-based ratio 0 records no new trace, nor a
    caller's unsampled one, but follows a caller that sampled its trace; the spans still buffered
    when the server stops are exported before it exits (the export timer is a minute here)."""
    with OtlpReceiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url,
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
            "CONCH_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
        }
        server = start_server(repository, env=env)
        unsampled = _traceparent(sampled=False)
        sampled = _traceparent()
        with httpclient.InferenceServerClient(server.http_url) as client:
            for _ in range(5):
                client.infer("add_sub", _http_inputs())
            client.infer("add_sub", _http_inputs(), headers={"traceparent": unsampled[2]})
            client.infer("add_sub", _http_inputs(), headers={"traceparent": sampled[2]})
        assert receiver.spans == []  # nothing exported yet: the timer has not fired
        assert server.stop() == 0
        assert {s.trace_id for s in receiver.spans} == {sampled[0]}
        assert STAGES | {"POST /v2/models/{model_name}/infer"} == {s.name for s in receiver.spans}
        assert receiver.spans[0].service == "conch"  # the default service name without OTEL_SERVICE_NAME
