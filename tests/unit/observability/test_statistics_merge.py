"""Summing statistics across worker processes: what ``conch serve --workers N`` reports."""

from __future__ import annotations

import pickle

from conch.core.types import ExecutionTiming
from conch.observability.statistics import ModelStatistics, merge_statistics


def worker_figures(name: str, batch: int, requests: int, last_ms: int) -> ModelStatistics:
    stats = ModelStatistics(name, "1")
    for _ in range(requests):
        stats.record_execution(batch, 1, ExecutionTiming(100, 1_000, 10))
        stats.record_success(5_000_000, 1_000_000)
    stats.record_failure(2_000, "REJECTED")
    stats.last_inference_ms = last_ms
    return stats


def test_figures_of_two_workers_add_up_per_model_version() -> None:
    first = [worker_figures("m", batch=2, requests=3, last_ms=10), worker_figures("other", 1, 1, 5)]
    second = [worker_figures("m", batch=4, requests=2, last_ms=30)]

    merged = {s.name: s for s in merge_statistics([first, second])}

    m = merged["m"]
    assert m.inference_count == 3 * 2 + 2 * 4
    assert m.execution_count == 5
    assert m.success.count == 5 and m.success.ns == 5 * 5_000_000
    assert m.fail.count == 2 and m.failures_by_reason == {"REJECTED": 2}
    assert m.compute_infer.ns == 5 * 1_000
    assert sorted(m.batches) == [2, 4]
    assert m.batches[2].compute_infer.count == 3 and m.batches[4].compute_infer.count == 2
    assert m.request_seconds.cumulative()[-1] == ("+Inf", 5)
    assert m.batch_sizes.sum == 3 * 2 + 2 * 4
    assert m.last_inference_ms == 30, "the latest inference of any worker"
    assert merged["other"].inference_count == 1


def test_merging_leaves_the_workers_figures_untouched_and_survives_pickling() -> None:
    worker = worker_figures("m", batch=2, requests=1, last_ms=1)
    sent = pickle.loads(pickle.dumps([worker]))  # as the control channel carries them

    (merged,) = merge_statistics([sent, sent])

    assert merged.inference_count == 4 and merged.success.count == 2
    assert merged.request_seconds.cumulative()[-1] == ("+Inf", 2)
    assert merged.batches[2].compute_infer.count == 2
    assert sent[0].inference_count == 2 and sent[0].success.count == 1, "a worker's figures were summed into"
    assert sent[0].request_seconds.cumulative()[-1] == ("+Inf", 1)
