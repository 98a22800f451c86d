"""conch's adaptive queue delay: a lone client stops paying ``max_queue_delay_microseconds``."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.server_process import ServerProcess

DELAY_S = 0.3
CONFIG = f"""
max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: {int(DELAY_S * 1e6)} }}
"""
FIXED = CONFIG + 'parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }'


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = write_repository(
        tmp_path_factory.mktemp("adaptive") / "models",
        {
            "adaptive": (add_sub_model(), 'name: "adaptive"' + CONFIG),
            "fixed": (add_sub_model(), 'name: "fixed"' + FIXED),
        },
    )
    return start_server(root)


def timed_requests(server: ServerProcess, model: str, count: int) -> list[float]:
    """Seconds each of ``count`` sequential single-row requests took, outputs checked."""
    client = httpclient.InferenceServerClient(server.http_url)
    durations = []
    for index in range(count):
        a = np.full((1, 16), index, dtype=np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        started = time.monotonic()
        result = client.infer(model, inputs)
        durations.append(time.monotonic() - started)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    return durations


def queued_seconds(server: ServerProcess, model: str) -> float:
    """The model's total queue time so far, as the server measured it (``inference_stats.queue``)."""
    stats = server.request("GET", f"/v2/models/{model}/stats").json()["model_stats"][0]
    return float(stats["inference_stats"]["queue"]["ns"]) / 1e9


def test_a_lone_client_waits_only_until_its_batches_show_it_is_alone(server: ServerProcess) -> None:
    durations = timed_requests(server, "adaptive", 6)
    before = queued_seconds(server, "adaptive")
    timed_requests(server, "adaptive", 4)
    queued = queued_seconds(server, "adaptive") - before

    assert all(d >= DELAY_S for d in durations[:4]), "no history yet: the configured delay applies"
    # The server's own queue times, so a slow client on loaded cores cannot fail it: the delay would
    # make the four requests wait 1.2 s in all; sent at once they wait about a millisecond.
    assert queued < DELAY_S, f"the last 4 requests waited {queued:.3f} s in the queue, in all"


def test_with_adaptive_queue_delay_off_every_lone_request_waits(server: ServerProcess) -> None:
    durations = timed_requests(server, "fixed", 6)

    assert all(d >= DELAY_S for d in durations)
