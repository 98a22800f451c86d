"""``conch optimize --int8`` as a user runs it, then the twin served by a real ``conch serve``.

Models as a notebook leaves them, exported through ``conch.export``: a scikit-learn MLP trained on the
bundled digits and a torch CNN. Each report is checked against figures computed here, independently:
both ONNX files run with onnxruntime directly, rows compared by their decisions (argmax of the class
scores, equal labels) and their drift (``1 - cosine`` above 0.3) with numpy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from conch.exporting import export
from conch.optimizing.optimizer import optimize_int8
from conch.repository.config import parse_config
from conch.validation.inputs import runtime_inputs
from tests.fixtures.notebook_models import digits, digits_mlp, images, small_cnn
from tests.integration.server_process import ServerProcess

#: The exported configs' max_batch_size: both the command and this test run the rows in such batches.
BATCH = 32


def conch_optimize(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command, run from an empty folder that it must leave empty (ONNX Runtime's shape inference
    once left sym_shape_infer_temp.onnx in the working folder)."""
    command = [sys.executable, "-m", "conch.cli.main", "optimize", *map(str, args)]
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=folder)
        assert not list(Path(folder).iterdir()), "conch optimize left files in the working folder"
    return done


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository of fp32 version 1 of each model, and the calibration rows beside it."""
    root = tmp_path_factory.mktemp("fp32")
    export(digits_mlp(), digits(slice(0, 20))[0], repository=root / "models", name="digits")
    export(small_cnn(), images(16), repository=root / "models", name="cnn")
    np.save(root / "digits_rows.npy", digits(slice(1000, None))[0])
    np.save(root / "cnn_rows.npy", images(200, seed=1))
    return root


def model_copy(exported: Path, name: str, tmp_path: Path) -> Path:
    target = tmp_path / "models" / name
    shutil.copytree(exported / "models" / name, target)
    return target


def batched_run(model_file: Path, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    count = len(next(iter(rows.values())))
    parts = [
        session.run(names, {k: v[i : i + BATCH] for k, v in rows.items()}) for i in range(0, count, BATCH)
    ]
    return {name: np.concatenate([part[n] for part in parts]) for n, name in enumerate(names)}


def independent_figures(model_dir: Path, twin: int, rows: dict[str, np.ndarray]) -> tuple[float, float]:
    """(agreement, drift fraction) of version ``twin`` against version 1, computed from scratch."""
    fp32 = batched_run(model_dir / "1" / "model.onnx", rows)
    int8 = batched_run(model_dir / str(twin) / "model.onnx", rows)
    agreed = np.ones(len(next(iter(rows.values()))), dtype=bool)
    drift = np.zeros_like(agreed, dtype=np.float64)
    for name, old in fp32.items():
        new = int8[name]
        if old.dtype.kind == "f":
            agreed &= old.argmax(axis=1) == new.argmax(axis=1)
            x, y = old.astype(np.float64), new.astype(np.float64)
            cosine = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
            drift = np.maximum(drift, 1 - cosine)
        else:
            agreed &= np.all(old.reshape(len(old), -1) == new.reshape(len(new), -1), axis=1)
    return float(agreed.mean()), float((drift > 0.3).mean())


def check_report(report: dict[str, Any], model_dir: Path, rows: dict[str, np.ndarray], method: str) -> None:
    agreement, drift_fraction = independent_figures(model_dir, report["twin_version"], rows)
    assert report["method"] == method
    assert report["compared_requests"] == report["rows"] == len(next(iter(rows.values())))
    assert report["batch_rows"] == BATCH
    assert report["agreement"] == pytest.approx(agreement, abs=1e-12)
    assert report["drift_fraction"] == pytest.approx(drift_fraction, abs=1e-12)
    assert report["fp32"]["size_bytes"] == (model_dir / "1" / "model.onnx").stat().st_size
    twin_file = model_dir / str(report["twin_version"]) / "model.onnx"
    assert report["int8"]["size_bytes"] == twin_file.stat().st_size < report["fp32"]["size_bytes"]
    assert report["fp32"]["median_batch_ms"] > 0 and report["int8"]["median_batch_ms"] > 0


def test_mlp_dynamic_int8_on_the_warm_up_rows(exported: Path, tmp_path: Path) -> None:
    model_dir = model_copy(exported, "digits", tmp_path)

    done = conch_optimize(model_dir, "--int8", "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["written"], report["source_version"], report["twin_version"]) == (True, 1, 2)
    assert "warning" not in done.stderr
    config = parse_config((model_dir / "config.pbtxt").read_text())
    rows = runtime_inputs(model_dir, config, rows=256).arrays  # the rows the command documents it uses
    check_report(report, model_dir, rows, "dynamic")
    assert {key: config.parameters[key].string_value for key in config.parameters} == {
        "quantized_twin": "2",
        "quantized_twin_of": "1",
        "prefer_quantized": "no_gpu",
    }
    record = json.loads((model_dir / "2" / "quantization.json").read_text())
    assert (record["quantized_twin_of"], record["method"]) == (1, "dynamic")
    assert record["figures"]["agreement"] == report["agreement"]
    metadata = json.loads((model_dir / "2" / "metadata.json").read_text())
    assert metadata["version"] == 2 and metadata["extra"]["quantization"] == record
    # The twin takes the same inputs: it carries the fp32 version's data contract, under its checksums.
    contract = (model_dir / "2" / "contract.yaml").read_text()
    assert contract == (model_dir / "1" / "contract.yaml").read_text() and "fields:" in contract
    assert "contract.yaml" in metadata["files"]


def test_mlp_static_int8_on_calibration_rows(exported: Path, tmp_path: Path) -> None:
    model_dir = model_copy(exported, "digits", tmp_path)
    calibration = exported / "digits_rows.npy"

    done = conch_optimize(model_dir, "--int8", "--calibration", calibration, "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_report(report, model_dir, {"input": np.load(calibration)}, "static")
    assert report["agreement"] >= 0.99 and report["written"]


def test_cnn_static_int8_table(exported: Path, tmp_path: Path) -> None:
    model_dir = model_copy(exported, "cnn", tmp_path)
    calibration = exported / "cnn_rows.npy"

    done = conch_optimize(model_dir, "--int8", "--calibration", calibration, "--version", "7")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("'cnn' int8 (static) against fp32, 200 requests compared")
    assert lines[1].split() == [
        "figure",
        "fp32",
        "(version",
        "1)",
        "int8",
        "(version",
        "7)",
        "int8/fp32,",
        "limit",
    ]
    agreement, _ = independent_figures(model_dir, 7, {"input": np.load(calibration)})
    assert lines[4].split()[:2] == ["agreement", f"{agreement:.4f}"]
    assert lines[-1] == f"wrote version 7 of 'cnn', the int8 twin of version 1, to {model_dir / '7'}"
    # The test CNN holds 200 weights: the scales and QDQ nodes outweigh what int8 saves, and it says so.
    assert "warning: the int8 version is not smaller" in done.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "7", "config.pbtxt", "warmup"]


def near_tie_model() -> onnx.ModelProto:
    """Two class scores whose weights differ by 1e-4, far below int8's step (about 0.008 here): fp32
    tells the classes apart by the sign of that difference, int8 rounds both columns to the same
    values, so about half the rows change class whatever machine computes them."""
    rng = np.random.default_rng(0)
    first = rng.normal(0, 1, (16, 1)).astype(np.float32)
    weights = np.hstack([first, first + 1e-4 * rng.choice([-1.0, 1.0], (16, 1))]).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "weights"], ["scores"])],
        "near_tie",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 2])],
        initializer=[numpy_helper.from_array(weights, "weights")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_agreement_below_the_threshold_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    rows = np.random.default_rng(1).normal(0, 1, (200, 16)).astype(np.float32)
    export(near_tie_model(), rows[:8], repository=tmp_path / "models", name="near-tie")
    np.save(tmp_path / "rows.npy", rows)
    model_dir = tmp_path / "models" / "near-tie"
    config_before = (model_dir / "config.pbtxt").read_bytes()
    classes = batched_run(model_dir / "1" / "model.onnx", {"input": rows})["scores"].argmax(axis=1)
    assert 0.3 < classes.mean() < 0.7, "fp32 tells the two classes apart on these rows"

    done = conch_optimize(model_dir, "--int8", "--calibration", tmp_path / "rows.npy", "--json")

    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["written"] is False
    assert report["agreement"] < 0.9 and report["min_agreement"] == 0.99
    assert f"refused: agreement {report['agreement']:.4f} is below --min-agreement 0.99." in done.stderr
    assert "Nothing was written" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in model_dir.parent.iterdir()) == ["near-tie"], "no staging folder left"
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt", "warmup"]
    assert (model_dir / "config.pbtxt").read_bytes() == config_before


def with_preference(source: Path, name: str, preference: str, all_versions: bool = False) -> None:
    """A copy of an optimized model folder under ``name``, preferring as told."""
    target = source.parent / name
    shutil.copytree(source, target)
    text = (target / "config.pbtxt").read_text()
    text = text.replace('name: "digits"', f'name: "{name}"').replace('"no_gpu"', f'"{preference}"')
    if all_versions:
        assert "latest {\n    num_versions: 1\n  }" in text
        text = text.replace("latest {\n    num_versions: 1\n  }", "all {\n  }")
    (target / "config.pbtxt").write_text(text)


@pytest.fixture(scope="module")
def served(
    exported: Path, tmp_path_factory: pytest.TempPathFactory, start_server: Callable[..., ServerProcess]
) -> ServerProcess:
    repository = tmp_path_factory.mktemp("twins")
    model_dir = repository / "digits"
    shutil.copytree(exported / "models" / "digits", model_dir)
    # The command itself is tested above; here it only prepares the repository.
    assert optimize_int8(model_dir, calibration=exported / "digits_rows.npy").written
    with_preference(model_dir, "digits-fp32", "never")
    with_preference(model_dir, "digits-both", "always", all_versions=True)
    with_preference(model_dir, "digits-unsure", "sometimes")
    return start_server(repository)


def infer(url: str, model: str, pixels: np.ndarray, version: str = "") -> httpclient.InferResult:
    with httpclient.InferenceServerClient(url) as client:
        request = httpclient.InferInput("input", list(pixels.shape), "FP32")
        request.set_data_from_numpy(pixels, binary_data=True)
        return client.infer(model, [request], model_version=version)


def ready_versions(client: httpclient.InferenceServerClient) -> dict[str, list[str]]:
    ready: dict[str, list[str]] = {}
    for entry in client.get_model_repository_index():
        if entry.get("state") == "READY":
            ready.setdefault(entry["name"], []).append(entry.get("version", ""))
    return ready


def test_a_server_without_a_gpu_serves_the_int8_twin_by_default(served: ServerProcess) -> None:
    pixels = digits(slice(1700, 1710))[0]
    answer = infer(served.http_url, "digits", pixels)
    assert answer.get_response()["model_version"] == "2"
    assert served.repository is not None
    expected = batched_run(served.repository / "digits" / "2" / "model.onnx", {"input": pixels})
    np.testing.assert_array_equal(answer.as_numpy("probabilities"), expected["probabilities"])
    with httpclient.InferenceServerClient(served.http_url) as client:
        parameters = client.get_model_config("digits")["parameters"]
        ready = ready_versions(client)
    assert {key: value["string_value"] for key, value in parameters.items()} == {
        "quantized_twin": "2",
        "quantized_twin_of": "1",
        "prefer_quantized": "no_gpu",
    }
    assert ready["digits"] == ["2"], "the fp32 file is not loaded"


def test_prefer_never_serves_the_fp32_version_in_the_twins_slot(served: ServerProcess) -> None:
    answer = infer(served.http_url, "digits-fp32", digits(slice(1700, 1702))[0])
    assert answer.get_response()["model_version"] == "1"
    with httpclient.InferenceServerClient(served.http_url) as client:
        assert ready_versions(client)["digits-fp32"] == ["1"]
    with pytest.raises(InferenceServerException, match="version 2 is not found; its served versions are 1"):
        infer(served.http_url, "digits-fp32", digits(slice(1700, 1702))[0], version="2")


def test_an_unknown_preference_leaves_the_model_unavailable_saying_why(served: ServerProcess) -> None:
    with httpclient.InferenceServerClient(served.http_url) as client:
        entry = next(m for m in client.get_model_repository_index() if m["name"] == "digits-unsure")
    assert entry["state"] == "UNAVAILABLE"
    assert "'prefer_quantized' must be one of always, never, no_gpu, got 'sometimes'" in entry["reason"]


def test_with_both_loaded_the_preference_picks_the_answering_version(served: ServerProcess) -> None:
    pixels = digits(slice(1700, 1702))[0]
    assert infer(served.http_url, "digits-both", pixels).get_response()["model_version"] == "2"
    assert infer(served.http_url, "digits-both", pixels, version="1").get_response()["model_version"] == "1"
    with httpclient.InferenceServerClient(served.http_url) as client:
        assert sorted(ready_versions(client)["digits-both"]) == ["1", "2"]
