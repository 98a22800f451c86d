"""The expected agreement: measured on a reference frame against the version before, recorded in the
candidate's metadata.json, and the ``min_agreement`` a release then uses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from conch.cli.main import main
from conch.exporting import export
from conch.release.expected_agreement import (
    AGREEMENT_MARGIN,
    ExpectedAgreement,
    agreement_limit,
    read_expected,
)
from conch.release.spec import DEFAULT_MIN_AGREEMENT
from conch.validation.agreement_interval import ReferenceError, wilson_interval
from conch.validation.expected_agreement import against_version, record_expected_agreement


def frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(rng.normal(size=(rows, 4)), columns=["a", "b", "c", "d"])


def labels(features: pd.DataFrame) -> np.ndarray:
    return (features["a"] + 0.5 * features["b"] - features["c"] > 0).astype(int).to_numpy()


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repository")
    train = frame(2000, 1)
    for strength in (1.0, 0.01):  # version 2: a retrain with stronger regularisation
        model = LogisticRegression(C=strength).fit(train, labels(train))
        export(model, train.head(8), repository=root, name="scored")
    return root


def test_a_retrain_is_measured_against_the_version_before_and_recorded(repository: Path) -> None:
    reference = frame(600, 2)
    expected = record_expected_agreement(repository / "scored", 2, reference)
    assert expected is not None and expected.against_version == 1 and expected.rows == 600
    assert 0.9 < expected.value < 1.0, "a retrain changes a few predictions near the boundary"
    assert expected.lower < expected.value < expected.upper
    assert expected.self_agreement == 1.0, "ONNX Runtime on CPU is deterministic"
    body = json.loads((repository / "scored" / "2" / "metadata.json").read_text())
    assert body["extra"]["expected_agreement"]["rows"] == 600
    assert read_expected(repository / "scored" / "2") == expected


def test_the_recorded_figure_sets_min_agreement_when_the_gate_leaves_it_out(repository: Path) -> None:
    expected = read_expected(repository / "scored" / "2")
    assert expected is not None
    used = agreement_limit(None, expected, baseline=1)
    assert used.limit == pytest.approx(expected.lower - AGREEMENT_MARGIN)
    assert used.source.startswith("expected agreement 0.9") and "against version 1" in used.source
    other = agreement_limit(None, expected, baseline=7)
    assert other.limit == DEFAULT_MIN_AGREEMENT and "against version 1, not 7" in other.source
    assert agreement_limit(0.9, expected, baseline=1).source == "release.yaml"


def test_a_small_or_misfit_reference_is_refused_with_the_fix(repository: Path) -> None:
    with pytest.raises(ReferenceError, match="give at least 200"):
        record_expected_agreement(repository / "scored", 2, frame(50, 3))
    with pytest.raises(ReferenceError, match=r"no column for the model's inputs \['d'\]"):
        record_expected_agreement(repository / "scored", 2, frame(300, 3).drop(columns="d"))


def test_the_version_compared_against_skips_rejected_ones_and_prefers_the_promoted(tmp_path: Path) -> None:
    for number in (1, 2, 3, 5):
        (tmp_path / str(number)).mkdir()
    assert against_version(tmp_path, 5, set(), None) == 3
    assert against_version(tmp_path, 5, {3}, None) == 2
    assert against_version(tmp_path, 5, {3}, 1) == 1
    assert against_version(tmp_path, 5, set(), 3) == 3
    assert against_version(tmp_path, 1, {2, 3, 5}, None) is None


def test_wilson_interval_and_a_malformed_record_reads_as_none() -> None:
    lower, upper = wilson_interval(200, 200)
    assert lower == pytest.approx(0.9812, abs=1e-4) and upper == pytest.approx(1.0)
    assert (
        ExpectedAgreement.from_json({"value": 2, "lower": 0, "upper": 1, "rows": 1, "against_version": 1})
        is None
    )
    assert ExpectedAgreement.from_json("0.99") is None


def test_validate_and_package_take_a_reference_file(repository: Path, tmp_path: Path) -> None:
    reference = tmp_path / "reference.csv"
    frame(300, 4).to_csv(reference, index=False)
    model_dir = repository / "scored"
    assert main(["validate", str(model_dir), "--reference", str(reference)]) == 0
    expected = read_expected(model_dir / "2")
    assert expected is not None and expected.rows == 300
    package = tmp_path / "scored.tar.gz"
    args = [
        "package",
        str(model_dir),
        "--version",
        "1.1.0",
        "-o",
        str(package),
        "--reference",
        str(reference),
    ]
    assert main(args) == 0 and package.is_file()
    assert main(["validate", str(repository), "--reference", str(reference)]) == 2, "one model folder only"


def test_export_takes_a_reference_and_records_against_the_version_before(tmp_path: Path) -> None:
    train = frame(1000, 5)
    first = LogisticRegression().fit(train, labels(train))
    export(first, train.head(8), repository=tmp_path, name="m")
    second = LogisticRegression(C=0.05).fit(train, labels(train))
    version_dir = export(second, train.head(8), repository=tmp_path, name="m", reference=frame(250, 6))
    expected = read_expected(version_dir)
    assert expected is not None and (expected.against_version, expected.rows) == (1, 250)
