"""``promtool`` on the rules ``conch deploy monitoring`` writes: ``check rules`` accepts them, and
``test rules`` (tests/fixtures/promtool/alerts_test.yaml, and data_alerts_test.yaml for the streams'
and data contracts' alerts) shows every alert firing on series that should fire it, with its
annotations rendered, and quiet on the series beside them, including the day-over-day traffic drop
(``offset 1d``), the GPU alerts no CI machine could produce live, a stream's lag rising against one
draining, and a broker that one replica still reaches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conch.deploy.monitoring import alerts, thresholds_from
from conch.deploy.monitoring.files import RULES_FILE, write_monitoring

PROMTOOL = shutil.which("promtool")
PROMTOOL_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "promtool"
ALERT_TESTS = PROMTOOL_FIXTURES / "alerts_test.yaml"
DATA_ALERT_TESTS = PROMTOOL_FIXTURES / "data_alerts_test.yaml"

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (make test installs Debian's prometheus package)"
)
pytestmark = [pytestmark, pytest.mark.prometheus]  # the programs this file drives


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules_file_and_the_prometheus_rule_s_spec(tmp_path: Path) -> None:
    write_monitoring(tmp_path, thresholds_from({}))
    spec = yaml.safe_load((tmp_path / "prometheusrule.yaml").read_text())["spec"]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))

    checked = promtool("check", "rules", RULES_FILE, "spec.yaml", cwd=tmp_path)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count(f"SUCCESS: {len(alerts())} rules found") == 2


def test_every_alert_fires_and_stays_quiet_in_promtool_s_unit_tests(tmp_path: Path) -> None:
    write_monitoring(tmp_path, thresholds_from({}))
    fired = set()
    for fixture in (ALERT_TESTS, DATA_ALERT_TESTS):
        shutil.copy(fixture, tmp_path / fixture.name)
        cases = yaml.safe_load(fixture.read_text())["tests"]
        fired |= {c["alertname"] for t in cases for c in t["alert_rule_test"] if c.get("exp_alerts")}

    tested = promtool("test", "rules", ALERT_TESTS.name, DATA_ALERT_TESTS.name, cwd=tmp_path)

    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert tested.stdout.count("SUCCESS") == 2
    assert fired == {alert.name for alert in alerts()}, "a promtool test per alert"


def test_a_threshold_flag_moves_where_the_alert_fires(tmp_path: Path) -> None:
    """The same slow series (P95 242.5 ms) fires at the default 150 ms and not at --p95-ms 300."""
    series = [(le, "0x20" if le == "0.1" else "0+100x20") for le in ("0.1", "0.25", "+Inf")]
    test = {
        "rule_files": [RULES_FILE],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": "conch_inference_request_duration_seconds_bucket"
                        f'{{job="conch", model="slow", version="1", le="{le}"}}',
                        "values": values,
                    }
                    for le, values in series
                ],
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "ConchLatencyP95High", "exp_alerts": []}
                ],
            }
        ],
    }
    (tmp_path / "quiet_test.yaml").write_text(yaml.safe_dump(test))
    outcomes = {}
    for p95_ms in (None, 300):
        write_monitoring(tmp_path, thresholds_from({"p95_ms": p95_ms}))
        outcomes[p95_ms] = promtool("test", "rules", "quiet_test.yaml", cwd=tmp_path)

    assert outcomes[300].returncode == 0, outcomes[300].stdout
    assert outcomes[None].returncode == 1
    assert "ConchLatencyP95High" in outcomes[None].stdout + outcomes[None].stderr
