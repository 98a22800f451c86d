"""Config checks: identity (name, platform) and agreement with the model graph.

The rules produce findings (all of them, for ``conch validate``); the server raises the first error.
"""

from __future__ import annotations

import logging

import pytest

from conch.backends.signature import ModelSignature, TensorSignature
from conch.core.errors import InvalidArgumentError
from conch.core.findings import Severity
from conch.repository.config import parse_config
from conch.repository.config_validation import (
    check_against_signature,
    check_identity,
    identity_findings,
    signature_findings,
)

IMAGE = ModelSignature(
    inputs=(TensorSignature("image", "FP32", (None, 3, 224, 224)),),
    outputs=(TensorSignature("scores", "FP32", (None, 1000)),),
)
SUM = ModelSignature(
    inputs=(TensorSignature("x", "FP64", (None, 2)),),
    outputs=(TensorSignature("total", "FP64", (None,)),),
)
FIXED = ModelSignature(
    inputs=(TensorSignature("X", "FP32", (2, 3)),),
    outputs=(TensorSignature("Y", "FP32", (2, 3)),),
)
IMAGE_CONFIG = """
max_batch_size: 8
input [ { name: "image", data_type: TYPE_FP32, dims: [ 3, 224, 224 ] } ]
output [ { name: "scores", data_type: TYPE_FP32, dims: [ 1000 ] } ]
"""


def test_identity_of_a_good_config() -> None:
    check_identity(parse_config('name: "resnet"\nplatform: "onnxruntime_onnx"'), "resnet")
    check_identity(parse_config('name: "resnet"\nbackend: "onnxruntime"'), "resnet")


def test_name_must_match_folder() -> None:
    with pytest.raises(
        InvalidArgumentError, match="config name 'resnet' does not match its folder 'resnet50'"
    ):
        check_identity(parse_config('name: "resnet"'), "resnet50")


@pytest.mark.parametrize(
    "text", ['platform: "tensorrt_plan"', 'backend: "dali"', 'platform: "ensemble"\nbackend: "python"']
)
def test_platform_conch_cannot_run(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not supported; use platform 'onnxruntime_onnx'"):
        check_identity(parse_config(f'name: "m"\n{text}'), "m")


def test_negative_max_batch_size() -> None:
    with pytest.raises(InvalidArgumentError, match="max_batch_size must be >= 0"):
        check_identity(parse_config('name: "m"\nmax_batch_size: -1'), "m")


def test_matching_config() -> None:
    check_against_signature(parse_config(IMAGE_CONFIG), IMAGE)


def test_batch_only_tensor_with_dims_one_and_empty_reshape() -> None:
    config = parse_config(
        "max_batch_size: 4\n"
        'input [ { name: "x", data_type: TYPE_FP64, dims: [ 2 ] } ]\n'
        'output [ { name: "total", data_type: TYPE_FP64, dims: [ 1 ], reshape: { shape: [ ] } } ]\n'
    )

    check_against_signature(config, SUM)


def test_dynamic_graph_dim_accepts_a_fixed_config_dim() -> None:
    signature = ModelSignature((TensorSignature("x", "FP32", (None, None)),), ())

    check_against_signature(
        parse_config('max_batch_size: 2\ninput { name: "x" data_type: TYPE_FP32 dims: 7 }'), signature
    )


def test_datatype_mismatch() -> None:
    config = parse_config(
        IMAGE_CONFIG.replace("data_type: TYPE_FP32, dims: [ 3", "data_type: TYPE_INT32, dims: [ 3")
    )

    with pytest.raises(
        InvalidArgumentError, match="input 'image' has data_type TYPE_INT32 but the model's is FP32"
    ):
        check_against_signature(config, IMAGE)


def test_transposed_dims_are_reported_with_both_shapes() -> None:
    config = parse_config(IMAGE_CONFIG.replace("[ 3, 224, 224 ]", "[ 224, 224, 3 ]"))

    with pytest.raises(InvalidArgumentError) as caught:
        check_against_signature(config, IMAGE)

    assert caught.value.message == (
        "config input 'image' dims [224, 224, 3] (full shape [-1, 224, 224, 3]) do not match "
        "the model's shape [-1, 3, 224, 224]"
    )


def test_unknown_input_name_lists_the_graph_inputs() -> None:
    config = parse_config(IMAGE_CONFIG.replace('name: "image"', 'name: "img"'))

    with pytest.raises(InvalidArgumentError, match=r"config input 'img' is not in the model; .* \['image'\]"):
        check_against_signature(config, IMAGE)


def test_unknown_output_name() -> None:
    config = parse_config(IMAGE_CONFIG.replace('name: "scores"', 'name: "logits"'))

    with pytest.raises(InvalidArgumentError, match="config output 'logits' is not in the model"):
        check_against_signature(config, IMAGE)


def test_graph_input_missing_from_config() -> None:
    signature = ModelSignature(
        (*IMAGE.inputs, TensorSignature("mask", "BOOL", (None, 224, 224))), IMAGE.outputs
    )

    with pytest.raises(InvalidArgumentError, match=r"config has no input for graph input\(s\) \['mask'\]"):
        check_against_signature(parse_config(IMAGE_CONFIG), signature)


def test_batching_needs_a_dynamic_first_dim() -> None:
    config = parse_config(
        'max_batch_size: 4\ninput { name: "X" data_type: TYPE_FP32 dims: 3 }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: 3 }'
    )

    with pytest.raises(
        InvalidArgumentError, match=r"needs a dynamic first dimension, .* 'X' has shape \[2, 3\]"
    ):
        check_against_signature(config, FIXED)


def test_fixed_shape_without_batching() -> None:
    config = parse_config(
        'input { name: "X" data_type: TYPE_FP32 dims: [2, 3] }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: [2, 3] }'
    )

    check_against_signature(config, FIXED)


def test_findings_report_every_problem_and_the_server_raises_the_first() -> None:
    config = parse_config(
        "max_batch_size: 8\n"
        'input [ { name: "image", data_type: TYPE_INT32, dims: [ 224, 224, 3 ] } ]\n'
        'output [ { name: "logits", data_type: TYPE_FP32, dims: [ 1000 ] } ]\n'
    )

    findings = signature_findings(config, IMAGE, "resnet")

    assert [(f.code, f.field) for f in findings] == [
        ("datatype-mismatch", "input[0].data_type"),
        ("dims-mismatch", "input[0].dims"),
        ("tensor-not-in-model", "output[0].name"),
    ]
    assert {f.model for f in findings} == {"resnet"}
    with pytest.raises(InvalidArgumentError) as caught:
        check_against_signature(config, IMAGE)
    assert caught.value.message == findings[0].message


def test_name_that_is_not_dns_safe_loads_with_a_logged_warning(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config('name: "My_Model"')

    with caplog.at_level(logging.WARNING):
        check_identity(config, "My_Model")

    [finding] = identity_findings(config, "My_Model")
    assert (finding.code, finding.severity) == ("name-not-dns-safe", Severity.WARNING)
    assert finding.message in caplog.text
