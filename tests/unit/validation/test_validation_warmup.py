"""``conch validate`` on warm-up samples: files in ``warmup/``, their size, and their fit with the inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conch.validation import Finding, Severity, validate_model
from tests.fixtures.onnx_models import string_model
from tests.fixtures.validation_models import ADD_SUB_CONFIG, found, good_model, model_folder, problems


def warmup_entry(inputs: dict[str, str], batch_size: int = 1) -> str:
    """A ``model_warmup`` sample; each value is the body of that input's ``ModelWarmup.Input``."""
    entries = " ".join(f'inputs {{ key: "{name}" value: {{ {body} }} }}' for name, body in inputs.items())
    return f'model_warmup [ {{ name: "sample" batch_size: {batch_size} {entries} }} ]'


def add_sub_with_warmup(tmp_path: Path, sample: str, files: dict[str, bytes] | None = None) -> Path:
    folder = good_model(tmp_path)
    (folder / "config.pbtxt").write_text(ADD_SUB_CONFIG.replace("{name}", "add-sub") + sample)
    (folder / "warmup").mkdir()
    for name, data in (files or {}).items():
        (folder / "warmup" / name).write_bytes(data)
    return folder


FLOATS_16 = np.arange(16, dtype="<f4").tobytes()
FILE_INPUT = 'data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "{file}"'
ZERO_INPUT = "data_type: TYPE_FP32 dims: [ 16 ] zero_data: true"


def test_warm_up_files_of_the_right_size_pass(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": FILE_INPUT.format(file="in0"), "INPUT1": ZERO_INPUT})

    findings = validate_model(add_sub_with_warmup(tmp_path, sample, {"in0": FLOATS_16}))

    assert problems(findings) == []


def test_sample_with_batch_size_zero_is_skipped_by_triton(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": ZERO_INPUT, "INPUT1": ZERO_INPUT}, batch_size=0)

    findings = validate_model(add_sub_with_warmup(tmp_path, sample))

    assert problems(findings) == [("warmup-sample-skipped", "model_warmup[0].batch_size")]


def test_warm_up_input_that_is_not_a_config_input(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": ZERO_INPUT, "INPUT1": ZERO_INPUT, "MASK": ZERO_INPUT})

    findings = validate_model(add_sub_with_warmup(tmp_path, sample))

    assert problems(findings) == [("warmup-input-unknown", "model_warmup[0].inputs['MASK']")]


def test_warm_up_input_of_another_datatype_or_shape(tmp_path: Path) -> None:
    sample = warmup_entry(
        {"INPUT0": ZERO_INPUT.replace("TYPE_FP32", "TYPE_INT32"), "INPUT1": ZERO_INPUT.replace("16", "8")}
    )

    findings = validate_model(add_sub_with_warmup(tmp_path, sample))

    assert problems(findings) == [
        ("warmup-input-mismatch", "model_warmup[0].inputs['INPUT0']"),
        ("warmup-input-mismatch", "model_warmup[0].inputs['INPUT1']"),
    ]
    messages = [f.message for f in findings if f.code == "warmup-input-mismatch"]
    assert "data_type TYPE_INT32 but the config input's is TYPE_FP32" in messages[0]
    assert "dims [8] do not fit the config input's dims [16]" in messages[1]


def test_config_input_without_warm_up_data(tmp_path: Path) -> None:
    findings = validate_model(add_sub_with_warmup(tmp_path, warmup_entry({"INPUT0": ZERO_INPUT})))

    assert problems(findings) == [("warmup-input-mismatch", "model_warmup[0].inputs")]
    assert "no data for config input 'INPUT1'" in found(findings, "warmup-input-mismatch").message


def test_warm_up_dims_must_be_fixed(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": ZERO_INPUT.replace("16", "-1"), "INPUT1": ZERO_INPUT})

    findings = validate_model(add_sub_with_warmup(tmp_path, sample))

    assert ("warmup-dims-dynamic", "model_warmup[0].inputs['INPUT0'].dims") in problems(findings)


def test_warm_up_input_without_a_data_source(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": "data_type: TYPE_FP32 dims: [ 16 ]", "INPUT1": ZERO_INPUT})

    findings = validate_model(add_sub_with_warmup(tmp_path, sample))

    assert problems(findings) == [("warmup-data-unset", "model_warmup[0].inputs['INPUT0']")]


def test_warm_up_file_that_is_missing_or_outside_the_warmup_folder(tmp_path: Path) -> None:
    sample = warmup_entry(
        {"INPUT0": FILE_INPUT.format(file="absent"), "INPUT1": FILE_INPUT.format(file="../config.pbtxt")}
    )

    findings = validate_model(add_sub_with_warmup(tmp_path, sample))

    assert problems(findings) == [
        ("warmup-file-missing", "model_warmup[0].inputs['INPUT0'].input_data_file"),
        ("warmup-file-missing", "model_warmup[0].inputs['INPUT1'].input_data_file"),
    ]


def test_warm_up_file_too_short_is_an_error(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": FILE_INPUT.format(file="in0"), "INPUT1": ZERO_INPUT})

    findings = validate_model(add_sub_with_warmup(tmp_path, sample, {"in0": FLOATS_16[:60]}))

    size = found(findings, "warmup-file-size")
    assert size.severity is Severity.ERROR
    assert "has 60 bytes; dims [16] of FP32 need 64" in size.message
    assert problems(findings) == [("warmup-file-size", "model_warmup[0].inputs['INPUT0'].input_data_file")]


def test_warm_up_file_too_long_is_a_warning(tmp_path: Path) -> None:
    sample = warmup_entry({"INPUT0": FILE_INPUT.format(file="in0"), "INPUT1": ZERO_INPUT})

    findings = validate_model(add_sub_with_warmup(tmp_path, sample, {"in0": FLOATS_16 * 2}))

    assert found(findings, "warmup-file-too-large").severity is Severity.WARNING
    assert [f.code for f in findings if f.severity is Severity.ERROR] == []


def length_prefixed(*elements: bytes) -> bytes:
    return b"".join(len(e).to_bytes(4, "little") + e for e in elements)


def text_model(tmp_path: Path, data: bytes) -> list[Finding]:
    config = (
        'name: "text"\nmax_batch_size: 4\n'
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    ) + warmup_entry({"TEXT": 'data_type: TYPE_STRING dims: [ 1 ] input_data_file: "text"'})
    folder = model_folder(tmp_path, "text", string_model(), config)
    (folder / "warmup").mkdir()
    (folder / "warmup" / "text").write_bytes(data)
    return validate_model(folder)


def test_bytes_warm_up_file_with_one_length_prefixed_element(tmp_path: Path) -> None:
    assert problems(text_model(tmp_path, length_prefixed("héllo".encode()))) == []


def test_bytes_warm_up_file_with_more_elements_is_a_warning(tmp_path: Path) -> None:
    findings = text_model(tmp_path, length_prefixed(b"a", b"b"))

    finding = found(findings, "warmup-file-too-large")
    assert "holds 2 elements; dims [1] need 1" in finding.message
    assert finding.severity is Severity.WARNING, "the server reads the start, as Triton"


def test_bytes_warm_up_file_that_is_not_length_prefixed(tmp_path: Path) -> None:
    findings = text_model(tmp_path, b"hello")

    assert (
        "is not a sequence of 4-byte length-prefixed elements" in found(findings, "warmup-file-size").message
    )
