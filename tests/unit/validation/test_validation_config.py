"""``conch validate`` on model folders whose config is wrong: one broken model per finding code."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto

from conch.validation import Severity, validate_model, validate_path
from tests.fixtures.onnx_models import add_sub_model, fixed_shape_model, identity_model, write_repository
from tests.fixtures.validation_models import (
    ADD_SUB_CONFIG,
    found,
    good_model,
    image_model,
    model_folder,
    problems,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
IDENTITY_CONFIG = """
name: "{name}"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
IMAGE_CONFIG = """
name: "{name}"
max_batch_size: 2
input [ { name: "image" data_type: TYPE_FP32 dims: [ 224, 224, 3 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
"""


def identity(tmp_path: Path, config: str, name: str = "m") -> Path:
    return model_folder(tmp_path, name, identity_model(TensorProto.FLOAT), config)


def test_the_example_repository_has_no_error_or_warning() -> None:
    findings = validate_path(EXAMPLES)

    assert problems(findings) == []
    assert {f.code for f in findings} == {"metadata-missing", "config-autocompleted"}
    assert found(findings, "config-autocompleted").model == "iris-autoconfig"


def test_a_good_model_has_no_error_or_warning(tmp_path: Path) -> None:
    assert problems(validate_model(good_model(tmp_path))) == []


def test_config_that_does_not_parse_gives_line_and_column_and_nothing_else(tmp_path: Path) -> None:
    folder = identity(tmp_path, 'name: "m"\nmax_batch_size: [ not a number\n')

    findings = validate_model(folder)

    assert [(f.code, f.field, f.severity) for f in findings] == [
        ("config-unparsable", "config.pbtxt", Severity.ERROR)
    ]
    assert "config.pbtxt does not parse: 2:" in findings[0].message


def test_missing_config_is_completed_and_said(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "auto", add_sub_model(), None)

    findings = validate_model(folder)

    info = found(findings, "config-autocompleted")
    assert info.severity is Severity.INFO
    assert "max_batch_size 4" in info.message
    assert "'INPUT0' FP32 [16]" in info.message
    assert problems(findings) == []


def test_name_differs_from_folder(tmp_path: Path) -> None:
    findings = validate_model(identity(tmp_path, IDENTITY_CONFIG.replace('"{name}"', '"other"')))

    assert problems(findings) == [("name-mismatch", "name")]
    assert "'other' does not match its folder 'm'" in found(findings, "name-mismatch").message


def test_name_that_is_not_dns_safe_is_a_warning(tmp_path: Path) -> None:
    findings = validate_model(identity(tmp_path, IDENTITY_CONFIG, name="My_Model"))

    assert problems(findings) == [("name-not-dns-safe", "name")]
    assert found(findings, "name-not-dns-safe").severity is Severity.WARNING


def test_platform_conch_cannot_run_stops_before_the_versions(tmp_path: Path) -> None:
    findings = validate_model(identity(tmp_path, 'name: "m"\nplatform: "tensorrt_plan"'))

    assert [(f.code, f.field) for f in findings] == [("platform-unsupported", "platform")]


def test_negative_max_batch_size(tmp_path: Path) -> None:
    findings = validate_model(identity(tmp_path, 'name: "m"\nmax_batch_size: -1'))

    assert [(f.code, f.field) for f in findings] == [("max-batch-size-negative", "max_batch_size")]


def test_folders_that_are_not_versions_are_warnings(tmp_path: Path) -> None:
    folder = identity(tmp_path, IDENTITY_CONFIG)
    for name in ("abc", "01", "warmup", ".cache"):
        (folder / name).mkdir()

    findings = validate_model(folder)

    assert problems(findings) == [("version-folder-ignored", "01"), ("version-folder-ignored", "abc")]


def test_model_without_a_version_folder(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.pbtxt").write_text('name: "m"')

    findings = validate_model(folder)

    assert problems(findings) == [("no-version", "version_policy")]


def test_version_policy_that_selects_no_folder(tmp_path: Path) -> None:
    folder = identity(tmp_path, IDENTITY_CONFIG + "version_policy { specific { versions: [ 3 ] } }")

    findings = validate_model(folder)

    assert problems(findings) == [("no-version", "version_policy")]
    assert "versions present: [1]" in found(findings, "no-version").message


def test_transposed_layout_is_a_dims_mismatch_naming_the_field(tmp_path: Path) -> None:
    findings = validate_model(model_folder(tmp_path, "resnet", image_model(), IMAGE_CONFIG))

    assert problems(findings) == [("dims-mismatch", "input[0].dims")]
    mismatch = found(findings, "dims-mismatch")
    assert mismatch.message == (
        "version 1: config input 'image' dims [224, 224, 3] (full shape [-1, 224, 224, 3]) do not match "
        "the model's shape [-1, 3, 224, 224]"
    )
    assert "set dims: [3, 224, 224]" in mismatch.hint


def test_reshape_that_does_not_fit_the_graph_names_the_reshape(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG.replace("dims: [ 4 ] }", "dims: [ 4 ] reshape: { shape: [ 2, 2 ] } }", 1)

    findings = validate_model(identity(tmp_path, config))

    assert problems(findings) == [("dims-mismatch", "input[0].reshape")]


def test_datatype_mismatch(tmp_path: Path) -> None:
    findings = validate_model(identity(tmp_path, IDENTITY_CONFIG.replace("TYPE_FP32", "TYPE_INT32", 1)))

    assert problems(findings) == [("datatype-mismatch", "input[0].data_type")]
    assert "set data_type: TYPE_FP32" in found(findings, "datatype-mismatch").hint


def test_config_tensor_that_is_not_in_the_graph(tmp_path: Path) -> None:
    findings = validate_model(identity(tmp_path, IDENTITY_CONFIG.replace('"OUTPUT0"', '"logits"')))

    assert problems(findings) == [("tensor-not-in-model", "output[0].name")]


def test_graph_input_missing_from_the_config(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.replace('{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }', "").replace(
        "] },\n", "] }\n", 1
    )

    findings = validate_model(model_folder(tmp_path, "add-sub", add_sub_model(), config))

    assert problems(findings) == [("graph-input-undeclared", "input")]
    assert "['INPUT1']" in found(findings, "graph-input-undeclared").message


def test_batching_a_graph_without_a_dynamic_first_dimension(tmp_path: Path) -> None:
    config = (
        'name: "{name}"\nmax_batch_size: 4\ninput { name: "X" data_type: TYPE_FP32 dims: 3 }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: 3 }'
    )

    findings = validate_model(model_folder(tmp_path, "fixed", fixed_shape_model(), config))

    assert problems(findings) == [("batch-dim-not-dynamic", "max_batch_size")] * 2


def test_reshape_with_another_element_count(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG.replace("dims: [ 4 ] }", "dims: [ 3 ] reshape: { shape: [ 4 ] } }", 1)

    findings = validate_model(identity(tmp_path, config))

    assert problems(findings) == [("reshape-size-mismatch", "input[0].reshape")]
    assert "hold 3 elements but reshape [4] holds 4" in found(findings, "reshape-size-mismatch").message


def test_preferred_batch_sizes_outside_one_to_max_batch_size(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG + "dynamic_batching { preferred_batch_size: [ 2, 16, 0 ] }"

    findings = validate_model(identity(tmp_path, config))

    assert problems(findings) == [
        ("preferred-batch-size-invalid", "dynamic_batching.preferred_batch_size[1]"),
        ("preferred-batch-size-invalid", "dynamic_batching.preferred_batch_size[2]"),
    ]


def test_dynamic_batching_on_a_model_that_does_not_batch(tmp_path: Path) -> None:
    config = (
        'name: "{name}"\nmax_batch_size: 0\ninput { name: "X" data_type: TYPE_FP32 dims: [2, 3] }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: [2, 3] }\ndynamic_batching { }'
    )

    findings = validate_model(model_folder(tmp_path, "fixed", fixed_shape_model(), config))

    assert problems(findings) == [("dynamic-batching-without-batching", "dynamic_batching")]


def test_every_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    config = IDENTITY_CONFIG.replace("TYPE_FP32", "TYPE_INT32", 1).replace('"OUTPUT0"', '"logits"')

    findings = validate_model(identity(tmp_path, config))

    assert problems(findings) == [
        ("datatype-mismatch", "input[0].data_type"),
        ("tensor-not-in-model", "output[0].name"),
    ]


def test_a_finding_shared_by_versions_is_reported_once_naming_them(tmp_path: Path) -> None:
    graph = image_model()
    folder = (
        write_repository(tmp_path, {"resnet": (graph, IMAGE_CONFIG.replace("{name}", "resnet"))}) / "resnet"
    )
    (folder / "2").mkdir()
    (folder / "2" / "model.onnx").write_bytes((folder / "1" / "model.onnx").read_bytes())

    findings = validate_model(folder)

    assert [f.field for f in findings if f.code == "metadata-missing"] == [
        "1/metadata.json",
        "2/metadata.json",
    ]
    assert found(findings, "dims-mismatch").message.startswith("versions 1, 2: config input 'image' dims")


PYTHON_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "length" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""


def python_model(root: Path, config: str, versions: dict[int, str | None]) -> Path:
    """A Python-backend model folder; a version's text is its model.py (None: no model.py)."""
    folder = root / "scorer"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(config.replace("{name}", "scorer"))
    for number, source in versions.items():
        (folder / str(number)).mkdir()
        if source is not None:
            (folder / str(number) / "model.py").write_text(source)
    return folder


def test_a_python_model_is_checked_without_running_its_code(tmp_path: Path) -> None:
    # A model.py that would fail if it ran: validate checks the folder, not the code.
    folder = python_model(tmp_path, PYTHON_CONFIG, {1: "raise SystemExit('ran')\n"})

    assert validate_model(folder) == []


def test_a_python_model_version_without_model_py_is_an_error(tmp_path: Path) -> None:
    folder = python_model(tmp_path, PYTHON_CONFIG, {1: "class TritonPythonModel: ...\n", 2: None})

    findings = validate_model(folder)

    assert [(f.code, f.field, f.severity) for f in findings] == [
        ("model-file-missing", "2/model.py", Severity.ERROR)
    ]
    assert "TritonPythonModel" in findings[0].hint


def test_a_python_models_batching_section_follows_the_servers_rules(tmp_path: Path) -> None:
    config = PYTHON_CONFIG.replace("max_batch_size: 4", "max_batch_size: 0") + "dynamic_batching { }\n"
    folder = python_model(tmp_path, config, {1: "class TritonPythonModel: ...\n"})

    assert [f.code for f in validate_model(folder)] == ["dynamic-batching-without-batching"]
