"""Merging the ``--workers`` processes' own families: counters and histograms summed, gauges per worker."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from conch.observability.exposition import TritonCounter, render
from conch.observability.worker_families import MergedFamilies, merge_families


def worker(filled: int, lag: float, buckets: list[tuple[str, float]], hist_sum: float) -> list[Metric]:
    counter = CounterMetricFamily("conch_contract_filled", "filled", labels=["model", "field"])
    counter.add_metric(["fraud", "age"], filled)
    counter.add_metric(["fraud", "plan"], 1)
    gauge = GaugeMetricFamily("conch_stream_lag", "lag", labels=["model", "stream"])
    gauge.add_metric(["fraud", "in"], lag)
    histogram = HistogramMetricFamily("conch_data_freshness_seconds", "freshness", labels=["model"])
    histogram.add_metric(["fraud"], buckets, hist_sum)
    custom = TritonCounter("my_model_calls", "calls", labels=["model"])
    custom.add_metric(["fraud"], filled * 10)
    return [counter, gauge, histogram, custom]


def samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_counters_and_histograms_are_summed_and_gauges_kept_per_worker() -> None:
    first = worker(3, 40.0, [("0.1", 1), ("1.0", 4), ("+Inf", 5)], 2.5)
    second = worker(4, 40.0, [("0.1", 0), ("1.0", 2), ("+Inf", 3)], 1.5)
    merged = merge_families([first, second])
    found = samples(merged)

    assert [f.name for f in merged] == [
        "conch_contract_filled",
        "conch_stream_lag",
        "conch_data_freshness_seconds",
        "my_model_calls",
    ]
    assert found[("conch_contract_filled_total", (("field", "age"), ("model", "fraud")))] == 7
    assert found[("conch_contract_filled_total", (("field", "plan"), ("model", "fraud")))] == 2
    assert found[("conch_data_freshness_seconds_bucket", (("le", "1.0"), ("model", "fraud")))] == 6
    assert found[("conch_data_freshness_seconds_count", (("model", "fraud"),))] == 8
    assert found[("conch_data_freshness_seconds_sum", (("model", "fraud"),))] == 4.0
    assert found[("my_model_calls", (("model", "fraud"),))] == 70
    lag = [s for f in merged if f.name == "conch_stream_lag" for s in f.samples]
    assert sorted((s.labels["worker"], s.value) for s in lag) == [("0", 40.0), ("1", 40.0)]
    # The workers' own lists are left as they were.
    assert samples(first)[("conch_contract_filled_total", (("field", "age"), ("model", "fraud")))] == 3


def test_the_merged_page_is_valid_text_and_keeps_tritons_bare_counter_names() -> None:
    merged = merge_families([worker(1, 5.0, [("+Inf", 1)], 0.2), worker(2, 6.0, [("+Inf", 1)], 0.3)])
    text = render(MergedFamilies(lambda: merged)).decode()

    assert '# TYPE my_model_calls counter\nmy_model_calls{model="fraud"} 30.0\n' in text
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed["conch_contract_filled"].type == "counter"
    assert len(parsed["conch_stream_lag"].samples) == 2


def test_a_family_only_one_worker_has_yet_is_shown() -> None:
    late = GaugeMetricFamily("conch_circuit_state", "state", labels=["model"])
    late.add_metric(["fraud"], 1)
    merged = merge_families([[], [late]])

    assert [(s.labels, s.value) for f in merged for s in f.samples] == [
        ({"model": "fraud", "worker": "1"}, 1)
    ]
