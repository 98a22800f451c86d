"""``conch export`` as a user runs it: one real subprocess per file kind, refusals and usage errors."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import joblib
import numpy as np
import onnxruntime as ort
import pytest
import torch

from conch.cli.main import build_parser
from conch.exporting import DEFAULT_MAX_BATCH_SIZE
from conch.packaging.metadata import read_metadata
from tests.fixtures.notebook_models import (
    churn_classifier,
    customers,
    dropout_mlp,
    forest_classifier,
    measurements,
)
from tests.fixtures.onnx_models import add_sub_model

pytestmark = pytest.mark.torch  # the program this file drives


def conch_export(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "conch.cli.main", "export", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_onnx_file_with_an_npz_sample(tmp_path: Path) -> None:
    model_file = tmp_path / "add_sub.onnx"
    model_file.write_bytes(add_sub_model().SerializeToString())
    np.savez(tmp_path / "sample.npz", INPUT0=np.ones((2, 16)), INPUT1=np.zeros((2, 16)))
    repository = tmp_path / "models"

    done = conch_export(
        model_file, "--sample", tmp_path / "sample.npz", "--repository", repository, "--name", "add-sub"
    )

    assert done.returncode == 0, done.stderr
    version_dir = repository / "add-sub" / "1"
    assert done.stdout.splitlines() == [
        f"exported 'add-sub' version 1 to {version_dir}",
        f"  {version_dir / 'metadata.json'}",
        f"  {version_dir / 'model.onnx'}",
        f"  {repository / 'add-sub' / 'config.pbtxt'}",
        f"  {repository / 'add-sub' / 'warmup' / 'INPUT0'}",
        f"  {repository / 'add-sub' / 'warmup' / 'INPUT1'}",
    ]
    assert "running the ONNX model on the sample" in done.stderr


@pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated", "ignore:`torch.jit.save` is deprecated"
)
def test_torchscript_file(tmp_path: Path) -> None:
    module = dropout_mlp()
    torch.jit.save(torch.jit.script(module), tmp_path / "mlp.pt")
    sample = measurements(8)
    np.save(tmp_path / "sample.npy", sample)

    done = conch_export(
        tmp_path / "mlp.pt", "--sample", tmp_path / "sample.npy", "--repository", tmp_path, "--name", "mlp",
        "--max-batch-size", "4", "--version", "3",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    session = ort.InferenceSession(str(tmp_path / "mlp" / "3" / "model.onnx"))
    (out,) = session.run(None, {"input": sample.astype(np.float32)})
    module.eval()
    with torch.no_grad():
        np.testing.assert_allclose(
            out, module(torch.from_numpy(sample).float()).numpy(), rtol=1e-5, atol=1e-6
        )
    assert "max_batch_size: 4" in (tmp_path / "mlp" / "config.pbtxt").read_text()


def test_trusted_joblib_pipeline_with_one_npz_array_per_column(tmp_path: Path) -> None:
    model, frame = churn_classifier(), customers(12)
    joblib.dump(model, tmp_path / "churn.joblib")
    columns = {
        name: frame[name].to_numpy(dtype=str if name in ("plan", "region") else None) for name in frame
    }
    np.savez(tmp_path / "sample.npz", **columns)

    done = conch_export(
        tmp_path / "churn.joblib", "--sample", tmp_path / "sample.npz", "--repository", tmp_path,
        "--name", "churn", "--trust-pickle",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    metadata = read_metadata(tmp_path / "churn" / "1")
    assert metadata.feature_names == list(frame.columns)
    assert metadata.framework["model_class"] == "sklearn.pipeline.Pipeline"


class LeavesAMark:
    """A pickle that creates a file when loaded: what untrusted pickles can do, harmlessly."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.mark),))  # type: ignore[return-value]


def test_pickle_is_refused_without_trust_and_never_loaded(tmp_path: Path) -> None:
    mark = tmp_path / "unpickled"
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(LeavesAMark(mark)))
    np.save(tmp_path / "sample.npy", measurements(2))

    done = conch_export(
        tmp_path / "model.pkl",
        "--sample",
        tmp_path / "sample.npy",
        "--repository",
        tmp_path / "models",
        "--name",
        "m",
    )

    assert done.returncode == 1
    assert "refusing to load" in done.stderr and "--trust-pickle" in done.stderr
    assert "Traceback" not in done.stderr
    assert not mark.exists()
    assert not (tmp_path / "models").exists()


def test_failures_exit_1_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "weights.pt").write_bytes(b"not an archive")
    (tmp_path / "broken.onnx").write_bytes(b"not onnx")
    np.save(tmp_path / "objects.npy", np.array([["a", 1]], dtype=object), allow_pickle=True)
    np.save(tmp_path / "sample.npy", np.ones((2, 16)))
    where = ("--repository", tmp_path / "models", "--name", "m")

    for model_file, sample, message in [
        ("weights.pt", "sample.npy", "is not a TorchScript archive"),
        ("broken.onnx", "sample.npy", "is not an ONNX model"),
        ("broken.onnx", "objects.npy", "dtype=str"),
    ]:
        done = conch_export(tmp_path / model_file, "--sample", tmp_path / sample, *where)
        assert (done.returncode, message in done.stderr, "Traceback" in done.stderr) == (1, True, False), (
            done.stderr
        )
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize(
    ("model_file", "extra", "message"),
    [
        ("model.h5", (), "unknown suffix"),
        ("missing.onnx", (), "does not exist"),
        ("model.onnx", ("--version", "0"), "must be at least 1"),
        ("model.onnx", ("--max-batch-size", "many"), "expected a whole number"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, model_file: str, extra: tuple[str, ...], message: str) -> None:
    for name in ("model.h5", "model.onnx"):
        (tmp_path / name).write_bytes(add_sub_model().SerializeToString())
    np.save(tmp_path / "sample.npy", np.ones((2, 16)))

    done = conch_export(
        tmp_path / model_file,
        "--sample",
        tmp_path / "sample.npy",
        "--repository",
        tmp_path,
        "--name",
        "m",
        *extra,
    )

    assert done.returncode == 2
    assert message in done.stderr


def test_a_missing_sample_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(add_sub_model().SerializeToString())
    done = conch_export(
        tmp_path / "model.onnx", "--sample", tmp_path / "none.npy", "--repository", tmp_path, "--name", "m"
    )
    assert (done.returncode, "sample file" in done.stderr) == (2, True)


def test_help_states_the_library_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "--help"])
    assert f"(default {DEFAULT_MAX_BATCH_SIZE})" in capsys.readouterr().out


def test_trusted_plain_pickle_estimator_with_a_npy_sample(tmp_path: Path) -> None:
    forest = forest_classifier()
    (tmp_path / "forest.pkl").write_bytes(pickle.dumps(forest))
    rows = measurements(6, seed=3)
    np.save(tmp_path / "sample.npy", rows)

    done = conch_export(
        tmp_path / "forest.pkl", "--sample", tmp_path / "sample.npy", "--repository", tmp_path,
        "--name", "forest", "--trust-pickle",
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    session = ort.InferenceSession(str(tmp_path / "forest" / "1" / "model.onnx"))
    label, probabilities = session.run(None, {"input": rows.astype(np.float32)})
    assert label.ravel().tolist() == forest.predict(rows).tolist()
    np.testing.assert_allclose(probabilities, forest.predict_proba(rows), atol=1e-5)
