"""The sequence batcher seen from tritonclient, as Triton's ``L0_sequence_batcher`` and
``L0_implicit_state`` see it.

The models are the accumulator of :mod:`tests.fixtures.sequence_models`: each answer is the running
sum of its sequence, kept by the server as implicit state, so an answer fed the wrong state, the wrong
row or the wrong START tells at once. Sequences interleave (threads, a gRPC stream) under both
strategies, with integer and string correlation ids, and every refusal is checked with its status.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import identity_model, write_repository
from tests.fixtures.sequence_models import accumulator_config, accumulator_model
from tests.integration.server_process import ServerProcess

#: tritonclient's HTTP or gRPC client (untyped packages).
Client: TypeAlias = Any
MODELS = {
    "acc-direct": accumulator_config("acc-direct", max_batch_size=4),
    "acc-oldest": accumulator_config(
        "acc-oldest",
        strategy="oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] "
        "max_queue_delay_microseconds: 5000 }",
    ),
    "acc-idle": accumulator_config("acc-idle", idle_us=200_000),
    "acc-string": accumulator_config("acc-string", corrid_type="TYPE_STRING"),
    "acc-single": accumulator_config("acc-single", max_batch_size=0),
    # Listing the state output in `output` lets a client ask for it, as in Triton.
    "acc-visible": accumulator_config("acc-visible")
    + 'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }, '
    '{ name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]',
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models: dict[str, tuple[Any, str | None]] = {
        name: (
            accumulator_model(
                TensorProto.STRING if name == "acc-string" else TensorProto.UINT64, batch=name != "acc-single"
            ),
            config,
        )
        for name, config in MODELS.items()
    }
    models["plain"] = (identity_model(TensorProto.FLOAT), None)
    return write_repository(tmp_path_factory.mktemp("sequences"), models)


def inputs(module: Any, value: float, batch: bool = True) -> list[Any]:
    tensor = module.InferInput("INPUT", [1, 1] if batch else [1], "FP32")
    tensor.set_data_from_numpy(np.full([1, 1] if batch else [1], value, np.float32))
    return [tensor]


def step(
    client: Client, model: str, sequence_id: int | str, value: float, start: bool = False, end: bool = False
) -> Any:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    return client.infer(
        model,
        inputs(module, value, batch=model != "acc-single"),
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
    )


def total(result: Any) -> float:
    return float(result.as_numpy("OUTPUT").ravel()[0])


def run_sequence(client: Client, model: str, sequence_id: int | str, values: list[float]) -> list[float]:
    """One whole sequence; the running sums the server answered."""
    sums = []
    for index, value in enumerate(values):
        result = step(client, model, sequence_id, value, start=index == 0, end=index == len(values) - 1)
        sums.append(total(result))
    return sums


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, http_client: Any, grpc_client: Any) -> Client:
    return http_client if request.param == "http" else grpc_client


def test_the_server_is_ready_and_asks_clients_for_none_of_the_fed_tensors(http_client: Any) -> None:
    assert http_client.is_server_ready()  # strict readiness: every sequence model loaded
    metadata = http_client.get_model_metadata("acc-direct")
    assert [t["name"] for t in metadata["inputs"]] == ["INPUT"]
    assert [t["name"] for t in metadata["outputs"]] == ["OUTPUT", "CONTROLS", "CORRID_OUT"]
    batching = http_client.get_model_config("acc-direct")["sequence_batching"]
    assert int(batching["max_sequence_idle_microseconds"]) == 1_000_000  # Triton's default, completed
    assert http_client.get_model_config("acc-idle")["sequence_batching"][
        "max_sequence_idle_microseconds"
    ] in (
        200_000,
        "200000",
    )


@pytest.mark.parametrize("model", ["acc-direct", "acc-oldest"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_interleaved_sequences_each_keep_their_own_state(
    server: ServerProcess, model: str, protocol: str
) -> None:
    # Six sequences on four slots: two wait in the backlog until others end.
    sequences = {sid: [float(sid), 1.0, 2.0, 3.0, float(sid)] for sid in (11, 12, 13, 14, 15, 16)}
    before = inferences(server, model)

    def one(sequence_id: int) -> list[float]:
        if protocol == "http":
            with httpclient.InferenceServerClient(server.http_url) as own:
                return run_sequence(own, model, sequence_id, sequences[sequence_id])
        with grpcclient.InferenceServerClient(server.grpc_url) as own:
            return run_sequence(own, model, sequence_id, sequences[sequence_id])

    with ThreadPoolExecutor(len(sequences)) as pool:
        answers = dict(zip(sequences, pool.map(one, sequences), strict=True))
    for sequence_id, values in sequences.items():
        assert answers[sequence_id] == list(np.cumsum(values)), sequence_id
    assert inferences(server, model) - before == 30  # not-ready rows are not counted


def inferences(server: ServerProcess, model: str) -> int:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return int(client.get_inference_statistics(model)["model_stats"][0]["inference_count"])


def test_the_model_sees_the_controls_and_the_correlation_id(client: Client) -> None:
    first = step(client, "acc-direct", 21, 1.0, start=True)
    assert first.as_numpy("CONTROLS").tolist() == [[1, 1, 0]]  # START, READY, END
    assert first.as_numpy("CORRID_OUT").tolist() == [[21]]
    middle = step(client, "acc-direct", 21, 1.0)
    assert middle.as_numpy("CONTROLS").tolist() == [[0, 1, 0]]
    last = step(client, "acc-direct", 21, 1.0, end=True)
    assert last.as_numpy("CONTROLS").tolist() == [[0, 1, 1]] and total(last) == 3
    assert last.as_numpy("STATE_OUT") is None  # the state stays in the server


def test_the_largest_uint64_id_over_http(http_client: Any) -> None:
    largest = 2**64 - 1
    result = step(http_client, "acc-direct", largest, 4.0, start=True, end=True)
    assert result.as_numpy("CORRID_OUT").tolist() == [[largest]]


def test_string_ids(client: Client) -> None:
    assert run_sequence(client, "acc-string", "user-a", [1.0, 2.0]) == [1.0, 3.0]
    result = step(client, "acc-string", "user-b", 5.0, start=True, end=True)
    assert result.as_numpy("CORRID_OUT").ravel().tolist() in ([b"user-b"], ["user-b"])


def test_a_model_without_batching_runs_sequences_one_slot_at_a_time(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as first:
        step(first, "acc-single", 31, 1.0, start=True)
        # The only slot is sequence 31's: sequence 32 waits in the backlog until 31 ends.
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                run_sequence, httpclient.InferenceServerClient(server.http_url), "acc-single", 32, [7.0, 1.0]
            )
            time.sleep(0.2)
            assert not waiting.done()
            assert total(step(first, "acc-single", 31, 2.0, end=True)) == 3.0
            assert waiting.result(timeout=10) == [7.0, 8.0]


def test_grpc_streaming_interleaves_sequences_in_order(server: ServerProcess) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    sequences = {41: [1.0, 2.0, 3.0, 4.0], "stream-b": [10.0, 20.0, 30.0, 40.0]}
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for index in range(4):
            for sequence_id, values in sequences.items():
                model = "acc-string" if isinstance(sequence_id, str) else "acc-direct"
                client.async_stream_infer(
                    model,
                    inputs(grpcclient, values[index]),
                    request_id=f"{sequence_id}-{index}",
                    sequence_id=sequence_id,
                    sequence_start=index == 0,
                    sequence_end=index == 3,
                )
        got = [answers.get(timeout=10) for _ in range(8)]
        client.stop_stream()
    assert [error for _, error in got] == [None] * 8
    sums: dict[str, list[tuple[int, float]]] = {}
    for result, _ in got:
        sequence, index = result.get_response().id.rsplit("-", 1)
        sums.setdefault(sequence, []).append((int(index), total(result)))
    assert sorted(sums["41"]) == [(0, 1.0), (1, 3.0), (2, 6.0), (3, 10.0)]
    assert sorted(sums["stream-b"]) == [(0, 10.0), (1, 30.0), (2, 60.0), (3, 100.0)]


def test_an_idle_sequence_is_released(client: Client) -> None:
    sequence_id = 51 if isinstance(client, httpclient.InferenceServerClient) else 52
    step(client, "acc-idle", sequence_id, 1.0, start=True)
    time.sleep(0.05)
    assert total(step(client, "acc-idle", sequence_id, 1.0)) == 2.0  # still within 200 ms
    time.sleep(0.35)
    with pytest.raises(InferenceServerException) as refused:
        step(client, "acc-idle", sequence_id, 1.0)
    assert_invalid(
        refused.value,
        f"inference request for sequence {sequence_id} to model 'acc-idle' must specify the START flag",
    )
    assert total(step(client, "acc-idle", sequence_id, 5.0, start=True, end=True)) == 5.0  # a new sequence


def plain_with_a_sequence_id(client: Client) -> Any:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = module.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones([1, 4], np.float32))
    return client.infer("plain", [tensor], sequence_id=7, sequence_start=True)


def assert_invalid(error: InferenceServerException, prefix: str) -> None:
    assert error.status() in ("400", str(grpc.StatusCode.INVALID_ARGUMENT)), error.status()
    assert prefix in error.message(), error.message()


@pytest.mark.parametrize(
    ("send", "prefix"),
    [
        (
            lambda c: step(c, "acc-direct", 0, 1.0),
            "inference request to model 'acc-direct' must specify a non-zero or non-empty correlation ID",
        ),
        (
            lambda c: step(c, "acc-direct", 61, 1.0),
            "inference request for sequence 61 to model "
            "'acc-direct' must specify the START flag on the first request of the sequence",
        ),
        (
            lambda c: step(c, "acc-direct", "s", 1.0, start=True),
            "sequence batching control 'CORRID' "
            "data-type is 'STRING', but model 'acc-direct' expects 'UINT64'",
        ),
        (
            lambda c: step(c, "acc-string", 5, 1.0, start=True),
            "sequence batching control 'CORRID' "
            "data-type is 'UINT64', but model 'acc-string' expects 'STRING'",
        ),
        (plain_with_a_sequence_id, "model 'plain': the model has no sequence batcher"),
    ],
    ids=["no-id", "no-start", "string-id-for-uint64", "uint64-id-for-string", "no-sequence-batcher"],
)
def test_refusals(client: Client, send: Callable[[Client], Any], prefix: str) -> None:
    with pytest.raises(InferenceServerException) as refused:
        send(client)
    assert_invalid(refused.value, prefix)


def test_a_request_after_end_needs_a_new_start(client: Client) -> None:
    sequence_id = 71 if isinstance(client, httpclient.InferenceServerClient) else 72
    run_sequence(client, "acc-direct", sequence_id, [1.0, 1.0])
    with pytest.raises(InferenceServerException) as refused:
        step(client, "acc-direct", sequence_id, 1.0)
    assert_invalid(
        refused.value,
        f"inference request for sequence {sequence_id} to model 'acc-direct' must specify the START",
    )


def test_two_rows_in_one_request_are_refused(client: Client) -> None:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensor = module.InferInput("INPUT", [2, 1], "FP32")
    tensor.set_data_from_numpy(np.ones([2, 1], np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("acc-direct", [tensor], sequence_id=81, sequence_start=True)
    assert_invalid(
        refused.value,
        "inference request to model 'acc-direct' must specify batch-size 1 due to "
        "requirements of sequence batcher",
    )


def test_the_state_output_is_not_an_output_clients_can_ask_for(http_client: Any) -> None:
    with pytest.raises(InferenceServerException) as refused:
        http_client.infer(
            "acc-direct",
            inputs(httpclient, 1.0),
            outputs=[httpclient.InferRequestedOutput("STATE_OUT")],
            sequence_id=91,
            sequence_start=True,
            sequence_end=True,
        )
    assert_invalid(refused.value, "unexpected inference output 'STATE_OUT'")


def test_a_state_output_listed_in_output_can_be_asked_for(http_client: Any) -> None:
    asked = [httpclient.InferRequestedOutput("STATE_OUT")]
    for value, start in ((2.0, True), (3.0, False)):
        result = http_client.infer(
            "acc-visible", inputs(httpclient, value), outputs=asked, sequence_id=95, sequence_start=start
        )
    assert result.as_numpy("STATE_OUT").tolist() == [[5.0]] and result.as_numpy("OUTPUT") is None


def test_workers_refuse_a_repository_with_sequence_models(repository: Path, tmp_path: Path) -> None:
    workers = ServerProcess(repository, ["--workers", "2"])
    with pytest.raises(RuntimeError, match="exited with 1"):
        workers.start(tmp_path, timeout=15)
    log = workers.log()
    assert "use sequence_batching, whose sequences live in one process" in log
    assert "['acc-direct', 'acc-idle', 'acc-oldest', 'acc-single', 'acc-string', 'acc-visible']" in log
