"""Answer order and queue timeouts over the wire (``docs/batching.md``, ``docs/protocol.md``).

- One ``ModelStreamInfer`` stream's requests run concurrently, each answered when ready: a quick
  request sent after a slow one is answered first.
- ``preserve_ordering: true`` holds the quick answer back until the slow one has left.
- ``default_timeout_microseconds`` refuses a request that waited longer with 503 / ``UNAVAILABLE``
  (``REJECT``) or keeps it (``DELAY``); ``allow_timeout_override`` lets the request's ``timeout``
  shorten the default, never lengthen it.

The slow request is :func:`counting_loop_model` counting to two million (about 2 s on the 2-core
machine, more under load), the quick one counting to 1 (under a millisecond), on a model with two
instances, so the quick one runs beside the slow one and its finishing first does not hang on timing.
The timeouts wait in a queue whose delay (2 s) is ten times the timeout (0.2 s).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import add_sub_model, counting_loop_model, write_repository
from tests.integration.server_process import ServerProcess

SLOW, QUICK = 2_000_000, 1
# max_batch_size 1: the slow and the quick request can never share a batch.
TWO_INSTANCES = "max_batch_size: 1\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n"
FIXED_DELAY = 'parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }'


def queue_config(action: str, timeout_us: int, delay_us: int, override: bool) -> str:
    return f"""
max_batch_size: 8
dynamic_batching {{
  max_queue_delay_microseconds: {delay_us}
  default_queue_policy {{
    timeout_action: {action}
    default_timeout_microseconds: {timeout_us}
    allow_timeout_override: {str(override).lower()}
  }}
}}
{FIXED_DELAY}
"""


MODELS = {
    "unordered": (counting_loop_model(), TWO_INSTANCES + "dynamic_batching { }\n"),
    "ordered": (counting_loop_model(), TWO_INSTANCES + "dynamic_batching { preserve_ordering: true }\n"),
    # A lone request waits 2 s for company, ten times its 0.2 s timeout.
    "reject": (add_sub_model(), queue_config("REJECT", 200_000, 2_000_000, override=True)),
    "delay": (add_sub_model(), queue_config("DELAY", 200_000, 2_000_000, override=False)),
    # A lone request waits 1 s, well inside its 3 s default timeout, unless it asks for less.
    "overridable": (add_sub_model(), queue_config("REJECT", 3_000_000, 1_000_000, override=True)),
    "fixed": (add_sub_model(), queue_config("REJECT", 3_000_000, 1_000_000, override=False)),
}


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    models = {name: (model, f'name: "{name}"\n{config}') for name, (model, config) in MODELS.items()}
    return start_server(write_repository(tmp_path_factory.mktemp("ordering") / "models", models))


def counting_request(model: str, request_id: str, turns: int) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    request.inputs.add(name="ITERATIONS", datatype="INT64", shape=[1, 1]).contents.int64_contents.append(
        turns
    )
    return request


def answer_order(server: ServerProcess, model: str) -> list[tuple[str, float]]:
    """Send the slow request, then the quick one, on one stream; (id, count) in the order answered."""
    requests = [counting_request(model, "slow", SLOW), counting_request(model, "quick", QUICK)]
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        replies = list(stub.ModelStreamInfer(iter(requests), timeout=120))
    order = []
    for reply in replies:
        assert reply.error_message == "", reply.error_message
        counted = np.frombuffer(reply.infer_response.raw_output_contents[0], dtype=np.float32)
        order.append((reply.infer_response.id, float(counted[0])))
    return order


def test_a_stream_runs_its_requests_concurrently_and_answers_each_when_ready(server: ServerProcess) -> None:
    assert answer_order(server, "unordered") == [("quick", QUICK), ("slow", SLOW)]


def test_preserve_ordering_answers_in_arrival_order(server: ServerProcess) -> None:
    assert answer_order(server, "ordered") == [("slow", SLOW), ("quick", QUICK)]


def add_sub(protocol: str, server: ServerProcess, model: str, **options: Any) -> Any:
    """One add-sub request; its OUTPUT0, or the InferenceServerException raised."""
    module: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    a = np.full((1, 16), 3.0, dtype=np.float32)
    inputs = [module.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    client = module.InferenceServerClient(url)
    try:
        return client.infer(model, inputs, **options).as_numpy("OUTPUT0")
    except InferenceServerException as exc:
        return exc
    finally:
        client.close()


def assert_timed_out(outcome: Any) -> None:
    assert isinstance(outcome, InferenceServerException), f"answered: {outcome}"
    assert outcome.status() in ("503", "StatusCode.UNAVAILABLE"), outcome
    assert "timed out in the queue" in (outcome.message() or ""), outcome


def assert_answered(outcome: Any) -> None:
    assert not isinstance(outcome, InferenceServerException), outcome
    np.testing.assert_array_equal(outcome, np.full((1, 16), 6.0, dtype=np.float32))


PROTOCOLS = pytest.mark.parametrize("protocol", ["http", "grpc"])


@PROTOCOLS
def test_a_request_past_its_reject_timeout_is_refused_with_unavailable(
    server: ServerProcess, protocol: str
) -> None:
    assert_timed_out(add_sub(protocol, server, "reject"))


@PROTOCOLS
def test_a_request_past_its_delay_timeout_is_still_answered(server: ServerProcess, protocol: str) -> None:
    assert_answered(add_sub(protocol, server, "delay"))


@PROTOCOLS
def test_a_request_may_shorten_the_timeout_when_overrides_are_allowed(
    server: ServerProcess, protocol: str
) -> None:
    assert_answered(add_sub(protocol, server, "overridable"))
    assert_timed_out(add_sub(protocol, server, "overridable", timeout=100_000))


@PROTOCOLS
def test_a_request_cannot_lengthen_the_timeout_or_shorten_it_unless_allowed(
    server: ServerProcess, protocol: str
) -> None:
    assert_timed_out(add_sub(protocol, server, "reject", timeout=10_000_000))
    assert_answered(add_sub(protocol, server, "fixed", timeout=100_000))
