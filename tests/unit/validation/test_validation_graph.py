"""``conch validate`` on broken model files: missing, not ONNX, training leftovers, and the runtime checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from conch.validation import Severity, validate_model
from tests.fixtures.onnx_models import identity_model, string_model, write_repository
from tests.fixtures.validation_models import (
    FP32,
    GATHER_CONFIG,
    batch_mean_model,
    batchnorm_training_model,
    dropout_model,
    found,
    gather_model,
    graph_model,
    model_folder,
    problems,
    random_noise_model,
)

NOT_ONNX = np.random.default_rng(3).bytes(256)


def test_version_without_its_model_file(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "m", identity_model(TensorProto.FLOAT), None)
    (folder / "1" / "model.onnx").rename(folder / "1" / "model.bin")  # model.pt would be PyTorch

    findings = validate_model(folder)

    assert problems(findings) == [("model-file-missing", "1/model.onnx")]
    assert {f.code for f in findings} == {"model-file-missing", "config-autocompleted"}


def test_file_that_is_not_onnx_is_reported_once(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "m", identity_model(TensorProto.FLOAT), None)
    (folder / "1" / "model.onnx").write_bytes(NOT_ONNX)

    findings = validate_model(folder)

    assert problems(findings) == [("model-file-invalid", "1/model.onnx")]
    assert "model.onnx is not an ONNX model" in found(findings, "model-file-invalid").message


def test_graph_that_fails_the_onnx_checker(tmp_path: Path) -> None:
    wrong_shape = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])], [("x", FP32, ["N", 4])], [("y", FP32, ["N", 5])]
    )

    findings = validate_model(model_folder(tmp_path, "m", wrong_shape, None))

    invalid = found(findings, "model-file-invalid")
    assert invalid.field == "1/model.onnx"
    assert "fails onnx.checker" in invalid.message
    assert str(tmp_path) not in invalid.message


def test_graph_conch_cannot_serve(tmp_path: Path) -> None:
    bfloat16 = graph_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [("x", TensorProto.BFLOAT16, ["N", 4])],
        [("y", TensorProto.BFLOAT16, ["N", 4])],
    )

    findings = validate_model(model_folder(tmp_path, "m", bfloat16, None))

    assert problems(findings) == [("model-not-loadable", "1/model.onnx")]
    assert "tensor(bfloat16), which conch cannot serve" in found(findings, "model-not-loadable").message


def test_dropout_with_a_constant_training_mode_is_an_error(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", dropout_model("constant"), None))

    assert problems(findings) == [
        ("dropout-training-mode", "1/model.onnx node 'dropout'"),
        ("nondeterministic-output", "1/model.onnx output 'y'"),
    ]


def test_dropout_in_training_mode_as_torch_exports_it(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", dropout_model("node"), None))

    assert found(findings, "dropout-training-mode").severity is Severity.ERROR


def test_dropout_whose_mode_is_a_graph_input_is_a_warning(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", dropout_model("input"), None))

    warning = found(findings, "dropout-training-switchable")
    assert warning.severity is Severity.WARNING
    assert "graph input 'training'" in warning.message


def test_dropout_in_inference_form_is_fine(tmp_path: Path) -> None:
    assert problems(validate_model(model_folder(tmp_path, "m", dropout_model("absent"), None))) == []


def test_batchnorm_in_training_form_is_an_error(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", batchnorm_training_model(), None))

    assert found(findings, "batchnorm-training-mode").field == "1/model.onnx node 'bn'"
    assert found(findings, "batchnorm-training-mode").severity is Severity.ERROR


def test_random_operator_is_nondeterministic_and_batch_check_is_skipped(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", random_noise_model(), None))

    assert problems(findings) == [("nondeterministic-output", "1/model.onnx output 'y'")]
    assert "16 of 16 elements differ" in found(findings, "nondeterministic-output").message


def test_row_that_depends_on_its_batch_mates(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", batch_mean_model(), None))

    assert problems(findings) == [("batch-variant-output", "1/model.onnx output 'y'")]
    assert (
        "of a batch of 4 differs from the same row run alone"
        in found(findings, "batch-variant-output").message
    )


def test_model_failing_on_random_input_is_a_warning(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "m", gather_model(), GATHER_CONFIG))

    rejected = found(findings, "random-input-rejected")
    assert rejected.severity is Severity.WARNING
    assert "indices element out of data bounds" in rejected.message
    assert problems(findings) == [("random-input-rejected", "1/model.onnx")]


def test_model_failing_on_its_warm_up_sample_is_an_error(tmp_path: Path) -> None:
    config = GATHER_CONFIG + (
        'model_warmup [ { name: "s" batch_size: 1 inputs { key: "index" value: '
        '{ data_type: TYPE_INT64 dims: [ 1 ] input_data_file: "index" } } } ]'
    )
    folder = model_folder(tmp_path, "m", gather_model(), config)
    (folder / "warmup").mkdir()
    np.array([5], dtype="<i8").tofile(folder / "warmup" / "index")

    findings = validate_model(folder)

    assert problems(findings) == [("model-run-failed", "1/model.onnx")]
    assert "failed on its warm-up sample" in found(findings, "model-run-failed").message


def test_warm_up_sample_is_the_runtime_input(tmp_path: Path) -> None:
    config = GATHER_CONFIG + (
        'model_warmup [ { name: "s" batch_size: 1 inputs { key: "index" value: '
        '{ data_type: TYPE_INT64 dims: [ 1 ] input_data_file: "index" } } } ]'
    )
    folder = model_folder(tmp_path, "m", gather_model(), config)
    (folder / "warmup").mkdir()
    np.array([0], dtype="<i8").tofile(folder / "warmup" / "index")

    assert problems(validate_model(folder)) == []


def test_string_model_runs_on_random_strings(tmp_path: Path) -> None:
    folder = write_repository(tmp_path, {"text": (string_model(), None)}) / "text"

    findings = validate_model(folder)

    assert problems(findings) == []
    assert "'TEXT' BYTES [1]" in found(findings, "config-autocompleted").message
