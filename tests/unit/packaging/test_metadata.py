"""``metadata.json``: a stable format that round-trips, names the bad field, and checksums files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from conch.packaging.metadata import (
    MetadataError,
    ModelMetadata,
    TensorSchema,
    mismatched_files,
    model_file_checksums,
    read_metadata,
    version_file_checksums,
    write_metadata,
)


def example() -> ModelMetadata:
    return ModelMetadata(
        name="credit-risk",
        version=3,
        created="2026-11-30T12:00:00Z",
        framework={"name": "scikit-learn", "version": "1.9.1"},
        libraries={"onnx": "1.23.2"},
        inputs=[TensorSchema("age", "FP32", [-1, 1])],
        outputs=[TensorSchema("probabilities", "FP32", [-1, 2])],
        feature_names=["age"],
        training_data_version="2026-11",
        files={"model.onnx": "ab" * 32},
    )


def test_round_trip_and_same_bytes(tmp_path: Path) -> None:
    write_metadata(tmp_path, example())
    first = (tmp_path / "metadata.json").read_bytes()

    loaded = read_metadata(tmp_path)

    assert loaded == example()
    assert loaded.to_json().encode() == first
    assert json.loads(first)["format"] == "conch.model-metadata/1"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda body: body.pop("name"), "'name'"),
        (lambda body: body.update(version="3"), "'version' must be a int"),
        (lambda body: body.update(version=True), "'version' must be a int"),
        (lambda body: body["inputs"][0].update(shape=[-1, "x"]), "'inputs[0].shape'"),
        (lambda body: body.update(format="other/1"), "'format'"),
        (lambda body: body.update(files=[]), "'files' must be a dict"),
    ],
)
def test_a_malformed_field_is_named(change, named: str) -> None:  # type: ignore[no-untyped-def]
    body = json.loads(example().to_json())
    change(body)

    with pytest.raises(MetadataError, match=re.escape(named)):
        ModelMetadata.from_json(json.dumps(body))


def test_not_json_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MetadataError, match="not valid JSON"):
        ModelMetadata.from_json("{")
    with pytest.raises(MetadataError, match=r"has no metadata\.json"):
        read_metadata(tmp_path)


def test_interface_is_the_names_datatypes_and_shapes_of_inputs_then_outputs() -> None:
    assert example().interface() == (
        ("input", "age", "FP32", "-1", "1"),
        ("output", "probabilities", "FP32", "-1", "2"),
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m, "inputs", [TensorSchema("age", "FP32", [-1, 2])]),
        lambda m: setattr(m, "inputs", [TensorSchema("years", "FP32", [-1, 1])]),
        lambda m: setattr(m, "inputs", [TensorSchema("age", "FP64", [-1, 1])]),
        lambda m: setattr(m, "outputs", [TensorSchema("probabilities", "FP32", [-1, 3])]),
    ],
    ids=["dimension", "name", "datatype", "output"],
)
def test_interface_changes_with_what_callers_send_or_get(change) -> None:  # type: ignore[no-untyped-def]
    changed = example()
    change(changed)

    assert changed.interface() != example().interface()


def test_interface_ignores_what_callers_do_not_depend_on() -> None:
    retrained = example()
    retrained.version = 4
    retrained.created = "2027-01-31T08:00:00Z"
    retrained.training_data_version = "2027-01"
    retrained.files = {"model.onnx": "cd" * 32}

    assert retrained != example()
    assert retrained.interface() == example().interface()


def test_checksums_and_what_differs(tmp_path: Path) -> None:
    model = tmp_path / "credit-risk"
    (model / "1").mkdir(parents=True)
    (model / "warmup").mkdir()
    (model / "config.pbtxt").write_text('name: "credit-risk"\n')
    (model / "warmup" / "age").write_bytes(b"\0\0\0\0")
    (model / "1" / "model.onnx").write_bytes(b"graph")
    write_metadata(model / "1", example())

    files = version_file_checksums(model / "1")
    model_files = model_file_checksums(model)

    assert list(files) == ["model.onnx"]
    assert sorted(model_files) == ["config.pbtxt", "warmup/age"]
    (model / "1" / "model.onnx").write_bytes(b"tampered")
    (model / "1" / "extra.bin").write_bytes(b"")
    assert mismatched_files(files, version_file_checksums(model / "1")) == {
        "extra.bin": "present but not listed",
        "model.onnx": "sha256 differs",
    }
    (model / "warmup" / "age").unlink()
    assert mismatched_files(model_files, model_file_checksums(model)) == {"warmup/age": "listed but missing"}


def test_checksums_name_their_algorithm_and_bare_hex_still_matches(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"graph")
    digest = version_file_checksums(tmp_path)["model.onnx"]
    hex_digest = hashlib.sha256(b"graph").hexdigest()
    assert digest == f"sha256:{hex_digest}"
    actual = {"model.onnx": digest}
    assert mismatched_files({"model.onnx": hex_digest}, actual) == {}
    assert mismatched_files({"model.onnx": hex_digest.upper()}, actual) == {}
    assert mismatched_files({"model.onnx": "sha256:" + "0" * 64}, actual) == {"model.onnx": "sha256 differs"}
    assert mismatched_files({"model.onnx": "md5:" + "0" * 32}, actual) == {
        "model.onnx": "checksum algorithm 'md5' is not supported (use sha256)"
    }
