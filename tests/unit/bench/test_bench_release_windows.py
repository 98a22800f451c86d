"""bench.release_windows: one window's figures from two readings of the V2 statistics."""

from __future__ import annotations

from bench.release_windows import window


def reading(requests: int, executions: int, compute_ms: float, queue_ms: float) -> dict[str, int]:
    return {
        "requests": requests,
        "executions": executions,
        "compute_ns": int(compute_ms * 1e6),
        "queue_ns": int(queue_ms * 1e6),
    }


def test_a_window_shows_the_clients_ratio_and_each_version_s_batches_compute_and_queue() -> None:
    before = {1: reading(100, 25, 400.0, 500.0), 2: reading(100, 50, 200.0, 100.0)}
    # v1: 400 requests more in 100 executions; compute_infer counts a batch's time once per request
    after = {
        1: reading(500, 125, 400.0 + 400 * 4.0, 500.0 + 400 * 10.0),
        2: reading(300, 150, 200.0 + 200 * 2.0, 300.0),
    }
    line = window(before, after, {1: 0.030, 2: 0.012})
    assert line.startswith("clients' P95 ratio 0.40 | ")
    v1, v2 = line.split(" | ")[1:]
    assert (
        v1
        == "v1: 400 requests, 4.00 a batch, compute 4.00 ms an execution, queue 10.00 ms, client P95 30.0 ms"
    )
    assert (
        v2
        == "v2: 200 requests, 2.00 a batch, compute 2.00 ms an execution, queue 1.00 ms, client P95 12.0 ms"
    )
