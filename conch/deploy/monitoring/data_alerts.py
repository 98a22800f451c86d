"""The data layer's alerts: streams that fall behind, dead letters, a broker no replica reaches,
inputs a data contract refuses, and values outside the training range.

Why these signals: every replica reports its consumer group's whole lag (``conch_stream_lag``), so
lag is taken as the ``max`` over replicas, never the sum. A lag above the threshold is normal for a
burst that the replicas are draining; one still rising after ``--stream-lag-for`` means consumption is
slower than production, and the backlog only grows (``deriv`` over that window, above zero). A dead
letter is a record that was not scored: each one alerts, by reason. Out-of-range values are drift, not
errors: they are served, so their share of the version's inferences (``nv_inference_count``, one per
row) alerts, not their count.
"""

from __future__ import annotations

from conch.deploy.monitoring.alert_rule import Alert, Metrics, number
from conch.deploy.monitoring.thresholds import AlertThresholds


def data_layer_alerts(t: AlertThresholds, m: Metrics) -> list[Alert]:
    """The streams' and the data contracts' alerts, each metric selected with ``m``'s matchers."""
    lag = f"max by (model, stream) ({m('conch_stream_lag')})"
    rising = f"max by (model, stream) (deriv({m('conch_stream_lag')}[{t.stream_lag_for}]))"
    stream = "stream {{ $labels.stream }} of {{ $labels.model }}"
    field = "{{ $labels.field }} of {{ $labels.model }} version {{ $labels.version }}"
    out_of_range = (
        f"sum by (model, version, field) (rate({m('conch_contract_out_of_range_total')}[15m]))"
        " / on (model, version) group_left "
        f"sum by (model, version) (rate({m('nv_inference_count')}[15m]))"
    )
    return [
        Alert(
            "ConchStreamLagGrowing",
            lag,
            f"> {number(t.stream_lag_entries)} and {rising} > 0",
            t.stream_lag_for,
            "warning",
            f"The lag of {stream} is above {number(t.stream_lag_entries)} entries and rising",
            f"{{{{ $value | humanize }}}} entries of {stream} are pending or not yet read by its consumer "
            f"group, and the figure has kept rising for {t.stream_lag_for}: the replicas consume slower "
            "than producers write.",
        ),
        Alert(
            "ConchStreamDeadLetters",
            "sum by (model, stream, reason) "
            f"(increase({m('conch_stream_dead_letters_total')}[{t.dead_letter_window}]))",
            "> 0",
            None,
            "warning",
            f"Records of {stream} went to its dead-letter stream ({{{{ $labels.reason }}}})",
            f"{{{{ $value | humanize }}}} records of {stream} were not scored in the last "
            f"{t.dead_letter_window} and went to the dead-letter stream with reason "
            "{{ $labels.reason }}.",
        ),
        Alert(
            "ConchStreamBrokerDown",
            f"max by (stream) ({m('conch_stream_broker_up')})",
            "== 0",
            t.broker_down_for,
            "critical",
            "No replica reaches the broker of stream {{ $labels.stream }}",
            "Every replica reading stream {{ $labels.stream }} has failed to reach its Redis broker for "
            f"{t.broker_down_for}: no record is read, and producers' entries wait in the stream.",
        ),
        Alert(
            "ConchContractViolations",
            f"sum by (model, version, field, rule) (rate({m('conch_contract_violations_total')}[5m]))",
            f"> {number(t.contract_violation_rate)}",
            t.contract_violation_for,
            "warning",
            f"The data contract refuses {field} ({{{{ $labels.rule }}}})",
            f'{{{{ $value | printf "%.2f" }}}} inputs per second of {field} break rule '
            f"{{{{ $labels.rule }}}} of the data contract and are refused (400, or a dead letter on a "
            f"stream), for {t.contract_violation_for}.",
        ),
        Alert(
            "ConchOutOfRangeHigh",
            out_of_range,
            f"> {number(t.out_of_range_ratio)}",
            t.out_of_range_for,
            "warning",
            f"More than {number(t.out_of_range_ratio * 100)}% of {field} is outside the training range",
            f"{{{{ $value | humanizePercentage }}}} of {field}'s values per inference were outside the "
            f"range seen in training over the last 15 minutes, for {t.out_of_range_for}: the inputs "
            "have drifted, and the model answers them anyway.",
        ),
    ]
