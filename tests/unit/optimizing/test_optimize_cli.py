"""``conch optimize`` in-process: usage errors exit 2 with a clear message and write nothing; the config
record keeps the operator's file; a model folder without config.pbtxt gets one the server reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conch.cli.main import main
from conch.optimizing.twin_record import config_with_twin
from conch.repository.config import parse_config
from conch.repository.quantized_twin import twin_from_config
from tests.fixtures.onnx_models import add_sub_model, slow_identity_model, write_repository

PYTHON_CONFIG = 'name: "scripted"\nbackend: "python"\n'


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = write_repository(
        tmp_path / "models",
        {"add_sub": (add_sub_model(), None), "products": (slow_identity_model(width=16, layers=2), None)},
    )
    (root / "empty").mkdir()
    (root / "empty" / "config.pbtxt").write_text('name: "empty"\n')
    (root / "scripted" / "1").mkdir(parents=True)
    (root / "scripted" / "1" / "model.py").write_text("")
    (root / "scripted" / "config.pbtxt").write_text(PYTHON_CONFIG)
    (tmp_path / "garbage.npy").write_bytes(b"not numpy")
    np.save(tmp_path / "one.npy", np.ones((4, 16), np.float32))
    np.savez(tmp_path / "other.npz", INPUT0=np.ones((4, 16), np.float32), WRONG=np.ones((4, 16), np.float32))
    (tmp_path / "rows.csv").write_text("1,2\n")
    return root


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["missing", "--int8"], "is not a model folder"),
        (["empty", "--int8"], "has no fp32 ONNX version to quantize"),
        (["scripted", "--int8"], "runs on the python backend; conch optimize --int8 quantizes ONNX models"),
        (
            ["add_sub", "--int8", "--from-version", "5"],
            "no version 5 with model.onnx; its ONNX versions are [1]",
        ),
        (["add_sub", "--int8", "--version", "1"], "version 1 of 'add_sub' already exists"),
        (["add_sub", "--int8", "--calibration", "../no.npy"], "does not exist"),
        (["add_sub", "--int8", "--calibration", "../rows.csv"], "must be .npy (one array) or .npz"),
        (["add_sub", "--int8", "--calibration", "../garbage.npy"], "cannot read sample"),
        (["add_sub", "--int8", "--calibration", "../one.npy"], "the model has 2 inputs ['INPUT0', 'INPUT1']"),
        (["add_sub", "--int8", "--calibration", "../other.npz"], "input 'INPUT1' is not in the sample"),
        (["add_sub"], "say how to optimize: --int8"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(
    repository: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    before = tree(repository.parent)
    arguments[0] = str(repository / arguments[0])
    arguments = [a.replace("../", f"{repository.parent}/") for a in arguments]

    assert main(["optimize", *arguments]) == 2

    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""
    assert tree(repository.parent) == before


@pytest.mark.parametrize("threshold", ["0", "1.5", "most"])
def test_a_threshold_outside_0_to_1_is_a_usage_error(
    repository: Path, capsys: pytest.CaptureFixture[str], threshold: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["optimize", str(repository / "add_sub"), "--int8", "--min-agreement", threshold])
    assert exited.value.code == 2
    assert "--min-agreement" in capsys.readouterr().err


def test_a_graph_with_nothing_to_quantize_is_refused(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(repository.parent)

    assert main(["optimize", str(repository / "add_sub"), "--int8"]) == 1

    message = capsys.readouterr().err
    assert "found nothing to quantize: the graph's operators are Add, Sub" in message
    assert tree(repository.parent) == before


def test_an_int8_twin_is_not_quantized_again(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", str(repository / "products"), "--int8"]) == 0
    capsys.readouterr()

    assert main(["optimize", str(repository / "products"), "--int8", "--from-version", "2"]) == 2
    assert "version 2 of 'products' is already an int8 twin" in capsys.readouterr().err


def test_a_model_without_config_gets_one_that_names_its_twin(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["optimize", str(repository / "products"), "--int8"]) == 0

    assert "wrote version 2 of 'products', the int8 twin of version 1" in capsys.readouterr().out
    config = parse_config((repository / "products" / "config.pbtxt").read_text())
    assert (config.name, config.backend) == ("products", "onnxruntime")
    twin = twin_from_config(config, gpu=False)
    assert twin is not None and (twin.quantized, twin.source, twin.prefers_quantized) == (2, 1, True)


COMMENTED = (
    '# tuned by hand\nname: "m"\nmax_batch_size: 8\nparameters { key: "a" value { string_value: "b" } }\n'
)


def test_the_record_is_appended_to_the_operators_config() -> None:
    text = config_with_twin(COMMENTED, "m", twin=2, source=1)

    assert text.startswith(COMMENTED.rstrip())
    config = parse_config(text)
    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "a": "b",
        "quantized_twin": "2",
        "quantized_twin_of": "1",
        "prefer_quantized": "no_gpu",
    }


def test_a_second_twin_replaces_the_first_and_keeps_the_preference() -> None:
    first = config_with_twin(COMMENTED, "m", twin=2, source=1).replace('"no_gpu"', '"never"')

    config = parse_config(config_with_twin(first, "m", twin=4, source=3))

    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "a": "b",
        "quantized_twin": "4",
        "quantized_twin_of": "3",
        "prefer_quantized": "never",
    }
    assert config.max_batch_size == 8
