"""``conch validate`` on ``metadata.json``: missing, malformed, and checksums that no longer match."""

from __future__ import annotations

import json
from pathlib import Path

from conch.packaging.metadata import (
    ModelMetadata,
    TensorSchema,
    model_file_checksums,
    version_file_checksums,
    write_metadata,
)
from conch.validation import Severity, validate_model
from tests.fixtures.onnx_models import add_sub_model
from tests.fixtures.validation_models import found, good_model, problems


def exported(tmp_path: Path, name: str = "add-sub", version: int = 1) -> Path:
    """A good model whose version 1 has the metadata.json ``conch export`` would write."""
    folder = good_model(tmp_path)
    fp32 = [TensorSchema(n, "FP32", [-1, 16]) for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    metadata = ModelMetadata(
        name=name,
        version=version,
        created="2026-01-01T00:00:00Z",
        framework={"name": "onnx"},
        libraries={"onnx": "1.23.2"},
        inputs=fp32[:2],
        outputs=fp32[2:],
        files=version_file_checksums(folder / "1"),
        model_files=model_file_checksums(folder),
    )
    write_metadata(folder / "1", metadata)
    return folder


def test_metadata_that_matches_gives_no_finding(tmp_path: Path) -> None:
    assert validate_model(exported(tmp_path)) == []


def test_missing_metadata_is_information_only(tmp_path: Path) -> None:
    findings = validate_model(good_model(tmp_path))

    missing = found(findings, "metadata-missing")
    assert (missing.severity, missing.field) == (Severity.INFO, "1/metadata.json")


def test_malformed_metadata_is_an_error(tmp_path: Path) -> None:
    folder = exported(tmp_path)
    body = json.loads((folder / "1" / "metadata.json").read_text())
    del body["files"]
    (folder / "1" / "metadata.json").write_text(json.dumps(body))

    findings = validate_model(folder)

    assert problems(findings) == [("metadata-malformed", "1/metadata.json")]
    assert "has no field 'files'" in found(findings, "metadata-malformed").message


def test_metadata_that_is_not_json(tmp_path: Path) -> None:
    folder = exported(tmp_path)
    (folder / "1" / "metadata.json").write_text("{ not json")

    assert problems(validate_model(folder)) == [("metadata-malformed", "1/metadata.json")]


def test_changed_model_file_is_a_checksum_error(tmp_path: Path) -> None:
    folder = exported(tmp_path)
    changed = add_sub_model()
    changed.producer_name = "someone-else"
    (folder / "1" / "model.onnx").write_bytes(changed.SerializeToString())

    findings = validate_model(folder)

    assert problems(findings) == [("metadata-checksum-mismatch", "1/model.onnx")]
    assert "sha256 differs" in found(findings, "metadata-checksum-mismatch").message


def test_unlisted_file_in_the_version_folder_is_a_checksum_error(tmp_path: Path) -> None:
    folder = exported(tmp_path)
    (folder / "1" / "notes.txt").write_text("added later")

    findings = validate_model(folder)

    assert problems(findings) == [("metadata-checksum-mismatch", "1/notes.txt")]
    assert "present but not listed" in found(findings, "metadata-checksum-mismatch").message


def test_tuned_config_is_a_warning(tmp_path: Path) -> None:
    folder = exported(tmp_path)
    with (folder / "config.pbtxt").open("a") as config:
        config.write("dynamic_batching { max_queue_delay_microseconds: 100 }\n")

    findings = validate_model(folder)

    assert problems(findings) == [("metadata-config-changed", "config.pbtxt")]
    assert found(findings, "metadata-config-changed").severity is Severity.WARNING


def test_metadata_of_another_model_or_version_is_a_warning(tmp_path: Path) -> None:
    findings = validate_model(exported(tmp_path, name="other", version=3))

    identity = found(findings, "metadata-identity-mismatch")
    assert identity.severity is Severity.WARNING
    assert "describes 'other' version 3, but it is in 'add-sub' version 1" in identity.message
