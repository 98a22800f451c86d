"""The dynamic batcher seen from clients, as Triton's ``L0_batcher`` and ``L0_queue_policy`` see it.

Many concurrent clients send distinct inputs; every answer must be its own request's, while the
statistics show fewer model executions than inferences. Preferred batch sizes go at once, a full
queue answers 503 / UNAVAILABLE without hurting the server, and priorities are checked and honoured.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

# These models test Triton's fixed queue delay, so conch's adaptive delay is off for them.
FIXED_DELAY = 'parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }'
CONFIGS = {
    "batched": """
max_batch_size: 16
dynamic_batching { max_queue_delay_microseconds: 20000 }
""",
    # A batch goes as soon as it makes 4 rows; anything else waits the 1.5 s delay.
    "preferred": """
max_batch_size: 16
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1500000 }
""",
    # The same rule with a 10 s delay: a preferred batch that waited for it could not pass for on time.
    "preferred-patient": """
max_batch_size: 16
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000 }
""",
    # Requests wait 0.5 s for company, and at most two may wait.
    "bounded": """
max_batch_size: 16
dynamic_batching {
  max_queue_delay_microseconds: 500000
  default_queue_policy { max_queue_size: 2 }
}
""",
    # Level 1 is served first; a lone row waits 1 s for a second one to fill the batch of 2.
    "prioritized": """
max_batch_size: 2
dynamic_batching {
  max_queue_delay_microseconds: 1000000
  priority_levels: 2
  default_priority_level: 2
}
""",
}
Outcome = dict[str, np.ndarray] | InferenceServerException


@dataclass(frozen=True)
class Request:
    """One add-sub request with inputs no other request has, so a mixed-up answer shows."""

    a: np.ndarray
    b: np.ndarray

    @classmethod
    def numbered(cls, index: int, rows: int = 1) -> Request:
        rng = np.random.default_rng(index)
        a, b = (rng.standard_normal((rows, 16)).astype(np.float32) + index for _ in range(2))
        return cls(a, b)

    def check(self, outcome: Outcome) -> None:
        assert not isinstance(outcome, InferenceServerException), outcome
        np.testing.assert_array_equal(outcome["OUTPUT0"], self.a + self.b)
        np.testing.assert_array_equal(outcome["OUTPUT1"], self.a - self.b)


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(
        tmp_path_factory.mktemp("batching") / "models",
        {
            name: (add_sub_model(), f'name: "{name}"\n{config}\n{FIXED_DELAY}')
            for name, config in CONFIGS.items()
        },
    )
    return start_server(root)


def connect(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def infer(client: Any, model: str, request: Request, priority: int = 0) -> Outcome:
    """Send ``request``; the outputs, or the exception the client raised."""
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inputs = [module.InferInput(name, list(request.a.shape), "FP32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(request.a)
    inputs[1].set_data_from_numpy(request.b)
    try:
        result = client.infer(model, inputs, priority=priority)
    except InferenceServerException as exc:
        return exc
    return {name: result.as_numpy(name) for name in ("OUTPUT0", "OUTPUT1")}


def burst(
    server: ServerProcess, protocols: list[str], model: str, requests: list[Request], timeout: float = 30
) -> list[Outcome]:
    """Send ``requests`` from one client thread per protocol entry, all starting together; answers in order.

    Client ``k`` sends requests ``k``, ``k + clients``, ... one after another, each after the last answer.
    """
    clients = len(protocols)
    outcomes: list[Outcome | None] = [None] * len(requests)
    start = threading.Barrier(clients)

    def client_thread(k: int) -> None:
        client = connect(server, protocols[k])
        try:
            start.wait(timeout)
            for i in range(k, len(requests), clients):
                outcomes[i] = infer(client, model, requests[i])
        finally:
            client.close()

    threads = [threading.Thread(target=client_thread, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a client thread did not finish"
    assert all(outcome is not None for outcome in outcomes), "a client thread failed before answering"
    return [outcome for outcome in outcomes if outcome is not None]


def statistics(server: ServerProcess, model: str) -> dict[str, Any]:
    reply = server.request("GET", f"/v2/models/{model}/stats")
    assert reply.status == 200
    stats: dict[str, Any] = reply.json()["model_stats"][0]
    return stats


def batch_counts(stats: dict[str, Any]) -> dict[int, int]:
    """Executions per batch size, from ``batch_stats``."""
    return {entry["batch_size"]: entry["compute_infer"]["count"] for entry in stats["batch_stats"]}


def grown(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    return {size: n - before.get(size, 0) for size, n in after.items() if n != before.get(size, 0)}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_clients_get_their_own_answers_from_shared_batches(
    server: ServerProcess, protocol: str
) -> None:
    requests = [Request.numbered(i, rows=1 + i % 3) for i in range(48)]
    before = statistics(server, "batched")
    outcomes = burst(server, [protocol] * 16, "batched", requests)
    for request, outcome in zip(requests, outcomes, strict=True):
        request.check(outcome)
    after = statistics(server, "batched")

    rows = sum(len(r.a) for r in requests)
    executions = after["execution_count"] - before["execution_count"]
    assert after["inference_count"] - before["inference_count"] == rows
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 48
    assert executions < len(requests), "no two requests shared an execution"
    batches = grown(batch_counts(before), batch_counts(after))
    assert sum(batches.values()) == executions
    assert sum(size * n for size, n in batches.items()) == rows
    assert max(batches) > 1
    assert max(batches) <= 16, "a batch exceeded max_batch_size"
    snapshot = scrape(server.metrics_url)
    assert snapshot.value("nv_inference_exec_count", model="batched", version="1") == after["execution_count"]
    assert snapshot.value("nv_inference_count", model="batched", version="1") == after["inference_count"]


def test_preferred_batch_size_goes_without_waiting_for_the_delay(server: ServerProcess) -> None:
    before = batch_counts(statistics(server, "preferred-patient"))
    started = time.monotonic()
    outcomes = burst(
        server, ["grpc", "http"] * 4, "preferred-patient", [Request.numbered(i) for i in range(8)]
    )
    elapsed = time.monotonic() - started
    for i, outcome in enumerate(outcomes):
        Request.numbered(i).check(outcome)
    assert grown(before, batch_counts(statistics(server, "preferred-patient"))) == {4: 2}
    # Half the delay: eight requests from eight clients take well under a second even on loaded cores.
    assert elapsed < 5, f"8 rows took {elapsed:.2f}s: the preferred size did not cut the 10 s delay"


def test_a_batch_short_of_the_preferred_size_waits_the_queue_delay(server: ServerProcess) -> None:
    before = batch_counts(statistics(server, "preferred"))
    started = time.monotonic()
    outcomes = burst(server, ["http"] * 3, "preferred", [Request.numbered(i) for i in range(3)])
    elapsed = time.monotonic() - started
    for i, outcome in enumerate(outcomes):
        Request.numbered(i).check(outcome)
    assert grown(before, batch_counts(statistics(server, "preferred"))) == {3: 1}
    assert 1.4 <= elapsed < 5, f"3 rows took {elapsed:.2f}s, not the 1.5 s queue delay"


def test_a_full_queue_refuses_with_unavailable_and_the_server_carries_on(server: ServerProcess) -> None:
    requests = [Request.numbered(i) for i in range(8)]
    failures_before = sum(
        s.value for s in scrape(server.metrics_url).samples("nv_inference_request_failure", model="bounded")
    )
    outcomes = burst(server, ["http", "grpc"] * 4, "bounded", requests)
    refused = [o for o in outcomes if isinstance(o, InferenceServerException)]
    answered = [
        (r, o) for r, o in zip(requests, outcomes, strict=True) if not isinstance(o, InferenceServerException)
    ]
    assert len(answered) >= 2, "the two requests the queue holds must be answered"
    assert refused, "eight requests at once never filled a queue of two"
    for exc in refused:
        assert exc.status() in ("503", "StatusCode.UNAVAILABLE"), exc
        assert "queue is full" in str(exc.message()), exc
    for request, outcome in answered:
        request.check(outcome)

    assert server.request("GET", "/v2/health/live").status == 200
    assert server.request("GET", "/v2/models/bounded/ready").status == 200
    with httpclient.InferenceServerClient(server.http_url) as client:
        Request.numbered(99).check(infer(client, "bounded", Request.numbered(99)))
    failures = scrape(server.metrics_url).samples("nv_inference_request_failure", model="bounded")
    assert sum(s.value for s in failures) - failures_before == len(refused)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("priority", [1, 2])
def test_priority_levels_in_range_are_accepted(server: ServerProcess, protocol: str, priority: int) -> None:
    request = Request.numbered(priority, rows=2)  # a full batch: no waiting for the queue delay
    with connect(server, protocol) as client:
        request.check(infer(client, "prioritized", request, priority=priority))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_priority_out_of_range_is_a_bad_request(server: ServerProcess, protocol: str) -> None:
    with connect(server, protocol) as client:
        outcome = infer(client, "prioritized", Request.numbered(0, rows=2), priority=3)
    assert isinstance(outcome, InferenceServerException)
    assert outcome.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert "priority 3 is out of range" in str(outcome.message())


@pytest.mark.parametrize("priority", [-1, "high", 1.5, True])
def test_priority_that_is_not_a_level_number_is_a_bad_request(
    server: ServerProcess, priority: object
) -> None:
    request = Request.numbered(0, rows=2)
    body = {
        "parameters": {"priority": priority},
        "inputs": [
            {"name": name, "shape": [2, 16], "datatype": "FP32", "data": array.ravel().tolist()}
            for name, array in (("INPUT0", request.a), ("INPUT1", request.b))
        ],
    }
    reply = server.request("POST", "/v2/models/prioritized/infer", json.dumps(body).encode())
    assert reply.status == 400
    assert "priority" in reply.json()["error"]


def test_higher_priority_overtakes_a_waiting_request(server: ServerProcess) -> None:
    """A lone level-2 row waits for company; a full level-1 batch arriving later must not wait behind it."""
    finished: dict[str, float] = {}
    low = Request.numbered(1)

    def send_low() -> None:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            low.check(infer(client, "prioritized", low, priority=2))
        finished["low"] = time.monotonic()

    started = time.monotonic()
    thread = threading.Thread(target=send_low)
    thread.start()
    time.sleep(0.2)  # the low request is queued by now, with 0.8 s of its delay left
    high = Request.numbered(2, rows=2)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        high.check(infer(client, "prioritized", high, priority=1))
    finished["high"] = time.monotonic()
    thread.join(10)
    # Under FIFO the low row would go first (alone, as the batch of 2 has no room for 1 + 2 rows).
    assert finished["high"] < finished["low"]
    assert finished["high"] - started < 0.8, "the level-1 batch should have gone at once"
    assert finished["low"] - started >= 0.9, "the low request should have waited its queue delay"
