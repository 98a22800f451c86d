"""The Grafana dashboard of a conch deployment, built with ``grafana-foundation-sdk``.

Why the SDK and not a JSON template: its builders are generated from Grafana's own schema, so a
panel, a query or a template variable cannot be misspelled into JSON Grafana silently ignores. The
board drills down from the golden signals (latency, traffic, errors) to what explains them: the
version split of a release, readiness, circuits and fallbacks, cold starts, queue time and GPU memory,
then the data layer: streams, data contracts and freshness (``data_panels.py``).
Every query filters on the ``job`` template variable (which conch deployment), and each per-model one
on ``model`` and ``version`` too; the families conch keeps server-wide or per GPU
(``conch_requests_total``, ``nv_gpu_*``, ``conch_gpu_*``) have no model label.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import bargauge, heatmap, statetimeline
from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BarGaugeDisplayMode,
    VisibilityMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import VariableRefresh, VariableSort

from conch.deploy.monitoring.data_panels import contracts_rows, streams_rows
from conch.deploy.monitoring.panels import (
    DATASOURCE,
    JOB,
    MODEL,
    RATE,
    VERSION,
    prometheus_query,
    timeseries_panel,
)

DASHBOARD_UID = "conch-serving"


def _latency_quantile(quantile: float) -> str:
    return (
        f"histogram_quantile({quantile}, sum by (model, le) "
        f"(rate(conch_inference_request_duration_seconds_bucket{VERSION}{RATE})))"
    )


def _variables(builder: Dashboard) -> Dashboard:
    job = (
        QueryVariable("job")
        .label("Job")
        .datasource(DATASOURCE)
        .query("label_values(nv_inference_request_success, job)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    model = (
        QueryVariable("model")
        .label("Model")
        .datasource(DATASOURCE)
        .query(f"label_values(nv_inference_request_success{JOB}, model)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    version = (
        QueryVariable("version")
        .label("Version")
        .datasource(DATASOURCE)
        .query(f"label_values(nv_inference_request_success{MODEL}, version)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.NUMERICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    source = DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    return builder.with_variable(source).with_variable(job).with_variable(model).with_variable(version)


def _golden_signals(builder: Dashboard) -> Dashboard:
    requests = (
        f"sum by (model, version) (rate(nv_inference_request_success{VERSION}{RATE}))"
        f" + sum by (model, version) (rate(nv_inference_request_failure{VERSION}{RATE}))"
    )
    latency_heatmap = (
        heatmap.Panel()
        .title("Latency heatmap")
        .description("Successful requests by end-to-end time, per interval.")
        .datasource(DATASOURCE)
        .height(8)
        .span(12)
        .calculate(False)
        .with_target(
            prometheus_query(
                f"sum by (le) (increase(conch_inference_request_duration_seconds_bucket{VERSION}{RATE}))",
                "{{le}}",
                heatmap_format=True,
            )
        )
    )
    return (
        builder.with_row(Row("Golden signals"))
        .with_panel(
            timeseries_panel(
                "Latency P50 / P90 / P99",
                "s",
                [(_latency_quantile(q), f"{{{{model}}}} p{round(q * 100)}") for q in (0.5, 0.9, 0.99)],
                "End-to-end time of successful requests, from conch_inference_request_duration_seconds.",
            )
        )
        .with_panel(latency_heatmap)
        .with_panel(
            timeseries_panel(
                "Requests per second",
                "reqps",
                [(requests, "{{model}} v{{version}}")],
                "Requests answered and failed, per model version.",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU utilisation",
                "percentunit",
                [(f"nv_gpu_utilization{JOB}", "{{gpu_uuid}}")],
                "Per GPU, from NVML; empty on a server without a GPU.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Errors by code",
                "reqps",
                [
                    (
                        "sum by (protocol, code) "
                        f'(rate(conch_requests_total{{job=~"$job", code!~"200|OK"}}{RATE}))',
                        "{{protocol}} {{code}}",
                    )
                ],
                "Every answer other than 200 / OK on the HTTP and gRPC ports, for the whole server.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Failures by reason",
                "reqps",
                [
                    (
                        "sum by (model, version, reason) "
                        f"(rate(nv_inference_request_failure{VERSION}{RATE}))",
                        "{{model}} v{{version}} {{reason}}",
                    )
                ],
                "Failed requests per model version, by Triton's reason (REJECTED, BACKEND, CANCELED).",
            )
        )
    )


def _state_timeline(title: str, metric: str, description: str) -> statetimeline.Panel:
    """A gauge's value per model version over time, as coloured bands (readiness, circuit state)."""
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .span(12)
        .show_value(VisibilityMode.AUTO)
        .merge_values(True)
        .fill_opacity(70)
        .line_width(0)
        .with_target(prometheus_query(f"{metric}{VERSION}", "{{model}} v{{version}}"))
    )


def _versions(builder: Dashboard) -> Dashboard:
    readiness = _state_timeline(
        "Model readiness", "conch_model_ready", "1: READY; 0: loading, unloading or unavailable."
    )
    circuits = _state_timeline(
        "Circuit state",
        "conch_circuit_state",
        "0 closed, 1 open, 2 half-open, per model version with a circuit breaker.",
    )
    return (
        builder.with_row(Row("Versions, releases and resilience"))
        .with_panel(
            timeseries_panel(
                "Version split",
                "percentunit",
                [
                    (
                        f"sum by (model, version) (rate(nv_inference_request_success{MODEL}{RATE}))",
                        "{{model}} v{{version}}",
                    )
                ],
                "Each version's share of a model's successful requests.",
                percent=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "Release weights",
                "percent",
                [(f"conch_release_weight{VERSION}", "{{model}} v{{version}}")],
                "The weight a release in progress gives each version.",
            )
        )
        .with_panel(readiness)
        .with_panel(circuits)
        .with_panel(
            timeseries_panel(
                "Fallback answers",
                "reqps",
                [
                    (
                        f"sum by (model, version, level) (rate(conch_fallback_total{VERSION}{RATE}))",
                        "{{model}} v{{version}} {{level}}",
                    )
                ],
                "Answers a MODEL, CPU or BUSINESS fallback gave.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Mean queue time",
                "s",
                [
                    (
                        "sum by (model, version) "
                        f"(rate(conch_inference_queue_duration_seconds_sum{VERSION}{RATE}))"
                        " / sum by (model, version) "
                        f"(rate(conch_inference_queue_duration_seconds_count{VERSION}{RATE}))",
                        "{{model}} v{{version}}",
                    )
                ],
                "Time requests waited in the queue or for an instance.",
            )
        )
    )


def _cold_start_and_gpu(builder: Dashboard) -> Dashboard:
    load_time = (
        bargauge.Panel()
        .title("Cold start: mean model load time")
        .description("Config read, sessions created and warm-up run, per model, since the server started.")
        .datasource(DATASOURCE)
        .unit("s")
        .orientation(VizOrientation.HORIZONTAL)
        .display_mode(BarGaugeDisplayMode.GRADIENT)
        .height(8)
        .span(12)
        .with_target(
            prometheus_query(
                f"sum by (model) (conch_model_load_duration_seconds_sum{MODEL})"
                f" / sum by (model) (conch_model_load_duration_seconds_count{MODEL})",
                "{{model}}",
            )
        )
    )
    phases = (
        bargauge.Panel()
        .title("Cold start by phase")
        .description(
            "Mean time of each load phase, for backends that report them (PyTorch): context is the "
            "program read and placed on its devices, warmup the warm-up runs on every instance."
        )
        .datasource(DATASOURCE)
        .unit("s")
        .orientation(VizOrientation.HORIZONTAL)
        .display_mode(BarGaugeDisplayMode.GRADIENT)
        .height(8)
        .span(12)
        .with_target(
            prometheus_query(
                f"sum by (model, phase) (conch_model_load_phase_duration_seconds_sum{MODEL})"
                f" / sum by (model, phase) (conch_model_load_phase_duration_seconds_count{MODEL})",
                "{{model}} {{phase}}",
            )
        )
    )
    return (
        builder.with_row(Row("Cold start and GPU memory"))
        .with_panel(load_time)
        .with_panel(phases)
        .with_panel(
            timeseries_panel(
                "Model loads",
                "short",
                [(f"sum by (model, result) (conch_model_loads_total{MODEL})", "{{model}} {{result}}")],
                "Loads since the server started, by result.",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU memory",
                "bytes",
                [
                    (f"nv_gpu_memory_used_bytes{JOB}", "{{gpu_uuid}} used"),
                    (f"nv_gpu_memory_total_bytes{JOB}", "{{gpu_uuid}} total"),
                ],
                "Per GPU, from NVML; empty on a server without a GPU.",
            )
        )
        .with_panel(
            timeseries_panel(
                "PyTorch allocator",
                "bytes",
                [
                    (f"conch_gpu_memory_reserved_bytes{JOB}", "{{gpu}} reserved"),
                    (f"conch_gpu_memory_allocated_bytes{JOB}", "{{gpu}} allocated"),
                ],
                "Memory PyTorch's caching allocator holds and gives to tensors; the gap is fragmentation.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Allocator fragmentation and retries",
                "short",
                [
                    (f"conch_gpu_memory_fragmentation_ratio{JOB}", "{{gpu}} fragmentation"),
                    (f"rate(conch_gpu_allocation_retries_total{JOB}{RATE})", "{{gpu}} retries/s"),
                ],
                "Share of reserved memory not allocated, and allocations retried after freeing the cache.",
            )
        )
    )


def dashboard(title: str = "conch", uid: str = DASHBOARD_UID) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (import it, or provision it from ``dashboard.json``)."""
    builder = (
        Dashboard(title)
        .uid(uid)
        .tags(["conch", "generated"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
    )
    for section in (
        _variables,
        _golden_signals,
        _versions,
        _cold_start_and_gpu,
        streams_rows,
        contracts_rows,
    ):
        builder = section(builder)
    built = builder.build()
    for number, panel in enumerate(built.panels or [], start=1):
        panel.id_val = number  # Grafana keys a panel's state and links by id
    model: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(built))
    return model
