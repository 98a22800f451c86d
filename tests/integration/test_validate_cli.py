"""``conch validate`` as a user runs it: exit codes, the table, the JSON document and progress on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from onnx import TensorProto

from tests.fixtures.onnx_models import identity_model
from tests.fixtures.validation_models import image_model, model_folder

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
TRANSPOSED = """
name: "resnet"
max_batch_size: 2
input [ { name: "image" data_type: TYPE_FP32 dims: [ 224, 224, 3 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
"""


def validate(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "validate", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_example_repository_is_valid_with_a_table_and_progress() -> None:
    result = validate(EXAMPLES)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "SEVERITY", "CODE", "FIELD", "MESSAGE"]
    assert lines[-1] == "4 models checked: 0 errors, 0 warnings, 4 infos: valid"
    assert "digits-mlp 1: determinism…" in result.stderr.splitlines()
    assert "iris-autoconfig 1: batch invariance…" in result.stderr.splitlines()


def test_broken_model_exits_1_and_the_table_shows_field_and_hint(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "resnet", image_model(), TRANSPOSED)

    result = validate(folder)

    assert result.returncode == 1
    row = next(line for line in result.stdout.splitlines() if "dims-mismatch" in line)
    assert row.split()[:4] == ["resnet", "error", "dims-mismatch", "input[0].dims"]
    assert "hint: set dims: [3, 224, 224]" in " ".join(result.stdout.split())
    assert result.stdout.splitlines()[-1] == "1 model checked: 1 error, 0 warnings, 1 info: INVALID"


def test_json_is_the_only_thing_on_stdout(tmp_path: Path) -> None:
    model_folder(tmp_path, "resnet", image_model(), TRANSPOSED)
    model_folder(tmp_path, "Plain_Identity", identity_model(TensorProto.FLOAT), None)

    result = validate(tmp_path, "--json")

    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["models"] == ["Plain_Identity", "resnet"]
    assert document["valid"] is False
    assert document["counts"] == {"error": 1, "warning": 1, "info": 3}
    assert len(document["findings"]) == 5
    dims = next(f for f in document["findings"] if f["code"] == "dims-mismatch")
    assert dims == {
        "model": "resnet",
        "severity": "error",
        "code": "dims-mismatch",
        "field": "input[0].dims",
        "message": "version 1: config input 'image' dims [224, 224, 3] (full shape [-1, 224, 224, 3]) "
        "do not match the model's shape [-1, 3, 224, 224]",
        "hint": "set dims: [3, 224, 224] (without the batch dimension, which max_batch_size adds)",
    }
    assert "Plain_Identity 1: determinism…" in result.stderr


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "Plain_Identity", identity_model(TensorProto.FLOAT), None)

    result = validate(folder, "--json")

    assert result.returncode == 0
    assert json.loads(result.stdout)["counts"]["warning"] == 1


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()

    for path in (tmp_path / "absent", tmp_path):
        result = validate(path)

        assert result.returncode == 2
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("conch validate: ")
        assert "Traceback" not in result.stderr
