"""The model figures on the metrics page: each version's readiness, and each model's loads."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from conch.observability.exposition import render
from conch.observability.metrics import create_registry
from conch.observability.model_loads import (
    LOAD_BUCKETS_S,
    MODEL_LOADS,
    ModelLoadCollector,
    ModelLoadMetrics,
    record_load,
)

INDEX = [
    {"name": "good", "version": "1", "state": "READY", "reason": ""},
    {"name": "good", "version": "2", "state": "UNAVAILABLE", "reason": "not ONNX"},
    {"name": "bad-config", "version": "", "state": "UNAVAILABLE", "reason": "cannot parse"},
]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``(sample name, sorted labels) -> value`` of a scrape."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_model_ready_is_one_for_ready_versions_and_zero_for_the_rest_read_at_each_scrape() -> None:
    index: list[dict[str, Any]] = [dict(entry) for entry in INDEX]
    registry = create_registry(list, lambda: index)

    first = samples(render(registry).decode())
    assert first[("conch_model_ready", (("model", "good"), ("version", "1")))] == 1
    assert first[("conch_model_ready", (("model", "good"), ("version", "2")))] == 0
    assert first[("conch_model_ready", (("model", "bad-config"), ("version", "")))] == 0

    index[1]["state"] = "READY"
    second = samples(render(registry).decode())
    assert second[("conch_model_ready", (("model", "good"), ("version", "2")))] == 1


def test_what_was_unloaded_on_purpose_is_not_a_model_that_should_be_ready() -> None:
    index = [
        *INDEX,
        {"name": "retired", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "good", "version": "0", "state": "UNAVAILABLE", "reason": "unloaded"},
    ]

    page = samples(render(create_registry(list, lambda: index)).decode())

    assert not any(("model", "retired") in labels for _, labels in page)
    assert ("conch_model_ready", (("model", "good"), ("version", "0"))) not in page
    assert page[("conch_model_ready", (("model", "bad-config"), ("version", "")))] == 0


def test_without_an_index_the_page_has_no_readiness() -> None:
    assert "conch_model_ready" not in render(create_registry(list)).decode()


def test_loads_are_counted_by_result_and_timed_in_load_sized_buckets() -> None:
    loads = ModelLoadMetrics()
    loads.record("resnet", 0.04, succeeded=True)
    loads.record("resnet", 12.0, succeeded=False)
    loads.record("bert", 400.0, succeeded=True)

    found = samples(render(ModelLoadCollector(loads)).decode())

    assert found[("conch_model_loads_total", (("model", "resnet"), ("result", "success")))] == 1
    assert found[("conch_model_loads_total", (("model", "resnet"), ("result", "failure")))] == 1
    assert found[("conch_model_loads_total", (("model", "bert"), ("result", "failure")))] == 0
    resnet = (("model", "resnet"),)
    assert found[("conch_model_load_duration_seconds_count", resnet)] == 2
    assert found[("conch_model_load_duration_seconds_sum", resnet)] == 12.04
    assert found[("conch_model_load_duration_seconds_bucket", (("le", "0.05"), *resnet))] == 1
    assert found[("conch_model_load_duration_seconds_bucket", (("le", "10.0"), *resnet))] == 1
    assert found[("conch_model_load_duration_seconds_bucket", (("le", "30.0"), *resnet))] == 2
    bert = (("model", "bert"),)
    assert found[("conch_model_load_duration_seconds_bucket", (("le", "300.0"), *bert))] == 0
    assert found[("conch_model_load_duration_seconds_bucket", (("le", "+Inf"), *bert))] == 1
    assert LOAD_BUCKETS_S[0] == 0.05 and LOAD_BUCKETS_S[-1] == 300.0


def test_record_load_adds_to_the_process_figures_every_registry_shows() -> None:
    model = "test_record_load_model"
    record_load(model, 0.2, succeeded=False)
    record_load(model, 0.3, succeeded=True)

    figures = MODEL_LOADS.snapshot()[model]
    assert (figures.successes, figures.failures) == (1, 1)
    found = samples(render(create_registry(list)).decode())
    assert found[("conch_model_loads_total", (("model", model), ("result", "failure")))] == 1
    assert found[("conch_model_load_duration_seconds_sum", (("model", model),))] == 0.5
