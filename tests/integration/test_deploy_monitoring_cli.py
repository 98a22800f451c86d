"""``conch deploy monitoring`` as a user runs it: the three files written with the flags' thresholds
and links, promtool accepting the rules file; a bad threshold, a bad label or a repository that does
not validate refused with the flag or the finding named, and nothing written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.validation_models import image_model, model_folder
from tests.integration.test_deploy_validators import node_validator, run_node  # noqa: F401 (a fixture)
from tests.integration.test_validate_cli import TRANSPOSED


def deploy_monitoring(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "deploy", "monitoring", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_files_carry_the_flags_thresholds_labels_and_runbook_links(tmp_path: Path) -> None:
    out = tmp_path / "monitoring"

    result = deploy_monitoring(
        "-o", out, "--p99-ms", "350", "--traffic-drop-ratio", "0.5", "--namespace", "ml",
        "--rule-label", "release=kube-prometheus-stack", "--runbook-base-url", "https://wiki.example/rb.md",
        "--selector", 'job="scoring"',
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["dashboard.json", "prometheusrule.yaml", "rules.yaml"]
    assert "3 monitoring files written" in result.stdout
    rule = yaml.safe_load((out / "prometheusrule.yaml").read_text())
    assert rule["metadata"]["namespace"] == "ml"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    by_name = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert by_name["ConchLatencyP99High"]["expr"].endswith("> 0.35")
    assert by_name["ConchTrafficDropped"]["expr"].endswith("< 0.5")
    assert by_name["ConchModelNotReady"]["expr"] == 'conch_model_ready{job="scoring"} == 0'
    assert (
        by_name["ConchCircuitOpen"]["annotations"]["runbook_url"]
        == "https://wiki.example/rb.md#conchcircuitopen"
    )
    assert yaml.safe_load((out / "rules.yaml").read_text()) == rule["spec"]
    assert json.loads((out / "dashboard.json").read_text())["uid"] == "conch-serving"
    if shutil.which("promtool"):
        checked = subprocess.run(["promtool", "check", "rules", str(out / "rules.yaml")], capture_output=True)
        assert checked.returncode == 0, checked.stdout


def test_prometheus_operator_s_own_validator_accepts_the_rule(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """@kubernetes-models/prometheus-operator checks the object against the PrometheusRule CRD (the
    validator test_deploy_validators.py installs and shows refusing a broken rule)."""
    validator: Path = request.getfixturevalue("node_validator")
    out = tmp_path / "monitoring"
    assert deploy_monitoring("-o", out, "--namespace", "ml", "--rule-label", "release=prom").returncode == 0

    checked = run_node(validator, out / "prometheusrule.yaml")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS" in checked.stdout and "PrometheusRule" in checked.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--failure-ratio", "5"), "--failure-ratio 5 must be between 0 and 1"),
        (("--queue-for", "ten minutes"), "--queue-for 'ten minutes' is not a Prometheus duration"),
        (("--rule-label", "release"), "--rule-label 'release' is not KEY=VALUE"),
        (("--selector", "job=conch"), "--selector 'job=conch' is not PromQL label matchers"),
        (("--p95-ms", "fast"), "argument --p95-ms: invalid float value: 'fast'"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = deploy_monitoring("-o", tmp_path / "out", *args)

    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_repository_that_does_not_validate_stops_with_its_findings(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "models", "resnet", image_model(), TRANSPOSED)

    result = deploy_monitoring(folder.parent, "-o", tmp_path / "out")

    assert result.returncode == 1
    assert "dims-mismatch" in result.stdout
    assert "does not validate" in result.stderr
    assert not (tmp_path / "out").exists()
