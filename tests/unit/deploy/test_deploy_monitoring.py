"""The alerts and the dashboard of ``conch deploy monitoring``, read as the tools that load them do:
every alert annotated and linked to its runbook section, the PrometheusRule's spec the same rules as
the plain file, every query valid PromQL, the dashboard read back by grafana-foundation-sdk's own
models, and bad thresholds refused by flag."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from conch.core.errors import InvalidArgumentError
from conch.deploy import manifests
from conch.deploy.monitoring import AlertThresholds, alerts, prometheus_rule, rule_groups, thresholds_from
from conch.deploy.monitoring.dashboard import dashboard
from tests.fixtures.monitoring_queries import (
    metric_names,
    panel_queries,
    selector_matchers,
    variable_selectors,
)

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks.md"
PANELS = {
    "Latency P50 / P90 / P99",
    "Latency heatmap",
    "Requests per second",
    "GPU utilisation",
    "Errors by code",
    "Version split",
    "Cold start: mean model load time",
    "GPU memory",
    "Stream lag",
    "Dead letters by reason",
    "Stream end-to-end latency P50 / P99",
    "Data freshness P50 / P99",
    "Contract violations",
    "Out-of-range values",
    "Unknown categories",
    "Default fills",
}


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the runbook's second-level headings (lowercased, spaces to dashes)."""
    headings = re.findall(r"^## (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_has_a_severity_annotations_and_its_own_runbook_section() -> None:
    rules = rule_groups(runbook_base="https://docs.example/runbooks.md")["groups"][0]["rules"]
    anchors = runbook_anchors()

    assert len(rules) == len({r["alert"] for r in rules}) == 18
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, rule
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == "https://docs.example/runbooks.md"
        assert anchor in anchors, f"docs/runbooks.md has no section for {rule['alert']}"
    alert_sections = {anchor for anchor in anchors if anchor.startswith("conch")}
    assert alert_sections == {r["alert"].lower() for r in rules}, "one runbook section per alert, no more"


def test_the_golden_signals_use_the_guide_s_thresholds_and_flags_change_them() -> None:
    by_name = {a.name: a for a in alerts()}
    changed = {a.name: a for a in alerts(thresholds_from({"p95_ms": 300, "failure_ratio": 0.1}))}

    assert (
        by_name["ConchLatencyP95High"].condition == "> 0.15" and by_name["ConchLatencyP95High"].for_ == "5m"
    )
    assert by_name["ConchLatencyP99High"].condition == "> 0.2"
    assert by_name["ConchFailureRateHigh"].condition == "> 0.05"
    assert by_name["ConchTrafficDropped"].condition == "< 0.7"
    assert "offset 1d" in by_name["ConchTrafficDropped"].signal
    assert changed["ConchLatencyP95High"].condition == "> 0.3"
    assert changed["ConchFailureRateHigh"].condition == "> 0.1"
    assert "300 ms" in changed["ConchLatencyP95High"].summary


def test_the_prometheus_rule_holds_the_rules_file_as_its_spec() -> None:
    rule = prometheus_rule(name="scoring", namespace="ml", labels={"release": "kube-prometheus-stack"})

    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["metadata"] == {
        "name": "scoring",
        "namespace": "ml",
        "labels": {"app.kubernetes.io/name": "conch", "release": "kube-prometheus-stack"},
    }
    assert rule["spec"] == rule_groups()


def test_every_selector_of_every_alert_carries_the_rules_label_matchers() -> None:
    """Scoped to conch's job, so another server's Triton counters raise no conch alert."""
    for selector, expected in (
        ('job="conch"', {("job", "conch")}),
        ('job="scoring", namespace="ml"', {("job", "scoring"), ("namespace", "ml")}),
    ):
        for alert in alerts(selector=selector):
            matchers = selector_matchers(alert.expr)
            assert matchers and all(expected <= each for each in matchers), (alert.name, alert.expr)


def test_a_selector_that_is_not_label_matchers_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"--selector 'job=conch' is not PromQL label matchers"):
        alerts(selector="job=conch")


def test_conch_deploy_kubernetes_writes_this_rule_scoped_to_its_service_and_namespace(tmp_path: Path) -> None:
    from conch.deploy.settings import resolve

    registered = {file.filename: file for file in manifests.manifest_files()}
    settings = resolve(tmp_path, {"name": "scoring", "namespace": "ml"}, {}, "1Gi")
    rule = registered[manifests.PROMETHEUS_RULE_FILE].build(settings)

    assert rule is not None and rule["metadata"]["namespace"] == "ml"
    assert rule["spec"] == rule_groups(selector='job="scoring", namespace="ml"')


def test_every_query_is_promql_and_filters_on_the_template_variables() -> None:
    board = dashboard()
    without_model = {"conch_requests_total", "up", "conch_stream_broker_up"}
    per_gpu = ("nv_gpu_", "conch_gpu_")

    for alert in alerts():
        assert metric_names(alert.expr), alert.name
    for title, expr in panel_queries(board):
        names = metric_names(expr)
        assert expr.count('job=~"$job"') == len(selector_matchers(expr)), f"{title}: {expr}"
        if not any(n in without_model or n.startswith(per_gpu) for n in names):
            assert 'model=~"$model"' in expr, f"{title}: {expr}"
    assert {name for name, _ in variable_selectors(board)} == {"job", "model", "version"}
    assert {p["title"] for p in board["panels"]} >= PANELS


def _without_empty_custom(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_empty_custom(v) for k, v in value.items() if not (k == "custom" and v == {})}
    if isinstance(value, list):
        return [_without_empty_custom(v) for v in value]
    return value


def test_the_dashboard_reads_back_through_grafana_s_schema_types() -> None:
    board = dashboard()
    register_default_plugins()
    decoded = DashboardModel.from_json(board)
    again = json.loads(JSONEncoder(sort_keys=True).encode(decoded))

    # The decoder only adds empty "custom" field settings; everything written is read back as written.
    assert _without_empty_custom(again) == _without_empty_custom(board)
    assert [panel.type_val for panel in decoded.panels or []][:3] == ["row", "timeseries", "heatmap"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert board["uid"] == "conch-serving"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"latency_for": "five minutes"}, "--latency-for 'five minutes' is not a Prometheus duration"),
        ({"failure_ratio": 5}, "--failure-ratio 5 must be between 0 and 1"),
        ({"p95_ms": 0}, "--p95-ms 0 must be above 0"),
    ],
)
def test_bad_thresholds_are_refused_by_flag(values: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        thresholds_from(values)


def test_defaults_are_the_thresholds_dataclass() -> None:
    assert thresholds_from({}) == AlertThresholds()


def test_the_data_layer_alerts_take_their_flags() -> None:
    by_name = {a.name: a for a in alerts()}
    changed = {
        a.name: a
        for a in alerts(
            thresholds_from({"stream_lag_entries": 50, "stream_lag_for": "30m", "out_of_range_ratio": 0.2})
        )
    }

    lag = by_name["ConchStreamLagGrowing"]
    assert lag.signal.startswith("max by (model, stream) (conch_stream_lag")  # the group's figure, not a sum
    assert lag.condition.startswith("> 1000 and ") and "[10m]" in lag.condition and lag.for_ == "10m"
    assert changed["ConchStreamLagGrowing"].condition.startswith("> 50 and ")
    assert "[30m]" in changed["ConchStreamLagGrowing"].condition
    assert changed["ConchStreamLagGrowing"].for_ == "30m"
    assert by_name["ConchOutOfRangeHigh"].condition == "> 0.05"
    assert changed["ConchOutOfRangeHigh"].condition == "> 0.2"
    assert by_name["ConchStreamBrokerDown"].severity == "critical"
    with pytest.raises(InvalidArgumentError, match="--out-of-range-ratio 2 must be between 0 and 1"):
        thresholds_from({"out_of_range_ratio": 2})
