"""The dashboard's data layer rows: the streams a deployment reads, and what the data contracts and the
ingestion timestamps say about the inputs.

Why ``max`` over replicas for the lag: every replica reports its consumer group's whole figure, so a
sum would count it once per replica. The panels stay empty on a deployment without streams or
contracts; their rows sit below the serving rows so such a board reads as before.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from conch.deploy.monitoring.panels import JOB, MODEL, RATE, VERSION, timeseries_panel

QUANTILES = (0.5, 0.99)


def _quantiles(histogram: str, labels: str, legend: str) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by ({labels}, le) (rate({histogram}{MODEL}{RATE})))",
            f"{legend} p{round(q * 100)}",
        )
        for q in QUANTILES
    ]


def streams_rows(builder: Dashboard) -> Dashboard:
    """Lag, records, dead letters, end-to-end latency and the broker, per model and input stream."""
    return (
        builder.with_row(Row("Streams"))
        .with_panel(
            timeseries_panel(
                "Stream lag",
                "short",
                [(f"max by (model, stream) (conch_stream_lag{MODEL})", "{{model}} {{stream}}")],
                "Entries of each input stream pending or not yet read by its consumer group.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Stream records per second",
                "ops",
                [
                    (
                        f"sum by (model, stream, outcome) (rate(conch_stream_records_total{MODEL}{RATE}))",
                        "{{model}} {{stream}} {{outcome}}",
                    )
                ],
                "Input records acknowledged, as a result or as a dead letter.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Dead letters by reason",
                "ops",
                [
                    (
                        "sum by (model, stream, reason) "
                        f"(rate(conch_stream_dead_letters_total{MODEL}{RATE}))",
                        "{{model}} {{stream}} {{reason}}",
                    )
                ],
                "Records written to the dead-letter stream instead of scored: contract, malformed, "
                "too_large, unknown_model, inference or poison.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Stream end-to-end latency P50 / P99",
                "s",
                _quantiles("conch_stream_latency_seconds_bucket", "model, stream", "{{model}} {{stream}}"),
                "From a record's ingestion timestamp to its result written to the results stream.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Broker reachable",
                "short",
                [(f"max by (stream) (conch_stream_broker_up{JOB})", "{{stream}}")],
                "1 while at least one replica reaches the stream's broker; 0 when none does.",
            )
        )
    )


def contracts_rows(builder: Dashboard) -> Dashboard:
    """Freshness, refusals, out-of-range values, unknown categories and default fills."""

    def per_field(metric: str) -> str:
        return f"sum by (model, version, field) (rate({metric}{VERSION}{RATE}))"

    return (
        builder.with_row(Row("Data contracts and freshness"))
        .with_panel(
            timeseries_panel(
                "Data freshness P50 / P99",
                "s",
                _quantiles("conch_data_freshness_seconds_bucket", "model", "{{model}}"),
                "From an input's ingestion timestamp to its answer, for inputs that carry one.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Contract violations",
                "ops",
                [
                    (
                        "sum by (model, version, field, rule) "
                        f"(rate(conch_contract_violations_total{VERSION}{RATE}))",
                        "{{model}} v{{version}} {{field}} {{rule}}",
                    )
                ],
                "Inputs refused by the version's data contract, by field and rule.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Out-of-range values",
                "percentunit",
                [
                    (
                        f"{per_field('conch_contract_out_of_range_total')} / on (model, version) "
                        f"group_left sum by (model, version) (rate(nv_inference_count{VERSION}{RATE}))",
                        "{{model}} v{{version}} {{field}}",
                    )
                ],
                "Values outside the training range, per inference: served, but the inputs have drifted.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Unknown categories",
                "ops",
                [(per_field("conch_contract_unknown_category_total"), "{{model}} v{{version}} {{field}}")],
                "Categories the fitted encoders never saw, served where the pipeline ignores them.",
            )
        )
        .with_panel(
            timeseries_panel(
                "Default fills",
                "ops",
                [(per_field("conch_contract_filled_total"), "{{model}} v{{version}} {{field}}")],
                "Rows whose missing value took the contract's default.",
            )
        )
    )
