"""conch.export on scikit-learn: pipelines with a ColumnTransformer, a regressor, a plain estimator.

Each test exports a real fitted model, then reads back what was written with the tools a user or the
server would use (ONNX Runtime, ``parse_config``, ``read_metadata``, the server's warm-up reader).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression
from tritonclient.grpc import model_config_pb2 as mc

from conch.exporting import ConfigRewrittenWarning, DisagreementError, ExportError, export
from conch.packaging.metadata import (
    mismatched_files,
    model_file_checksums,
    read_metadata,
    version_file_checksums,
)
from conch.repository.config import parse_config
from conch.repository.warmup import warmup_samples
from tests.fixtures.notebook_models import (
    churn_classifier,
    customers,
    forest_classifier,
    measurements,
    spend_regressor,
)


def run_frame(version_dir: Path, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """What a client gets: one [N, 1] tensor per column, floats as FP32, missing text as ''."""
    feeds = {}
    for column in frame.columns:
        values = frame[column]
        if values.dtype.kind == "f":
            feeds[column] = values.to_numpy(np.float32).reshape(-1, 1)
        elif values.dtype.kind == "i":
            feeds[column] = values.to_numpy(np.int64).reshape(-1, 1)
        else:
            feeds[column] = np.array(values.fillna("").astype(str).tolist(), dtype=object).reshape(-1, 1)
    session = ort.InferenceSession(str(version_dir / "model.onnx"))
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def read_config(model_dir: Path) -> mc.ModelConfig:
    return parse_config((model_dir / "config.pbtxt").read_text())


def test_classifier_pipeline_with_missing_values_and_categories(tmp_path: Path) -> None:
    model, sample = churn_classifier(), customers(40, seed=7)
    assert sample["age"].isna().any()

    version_dir = export(model, sample, repository=tmp_path, name="churn")

    assert version_dir == tmp_path / "churn" / "1"
    outputs = run_frame(version_dir, sample)
    assert outputs["label"].ravel().tolist() == model.predict(sample).tolist()
    np.testing.assert_allclose(outputs["probabilities"], model.predict_proba(sample), rtol=1e-4, atol=1e-5)


def test_a_missing_category_travels_as_an_empty_string(tmp_path: Path) -> None:
    model, sample = churn_classifier(), customers(20, seed=8)
    sample.loc[::3, "plan"] = None  # one-hot with handle_unknown="ignore": all zeros, in both

    version_dir = export(model, sample, repository=tmp_path, name="churn")

    served_rows = sample.assign(plan=sample["plan"].fillna(""))
    outputs = run_frame(version_dir, served_rows)
    np.testing.assert_allclose(outputs["probabilities"], model.predict_proba(sample), rtol=1e-4, atol=1e-5)


def test_config_comes_from_the_graph_with_batching_on(tmp_path: Path) -> None:
    export(churn_classifier(), customers(10), repository=tmp_path, name="churn", max_batch_size=16)

    config = read_config(tmp_path / "churn")
    assert (config.name, config.platform, config.max_batch_size) == ("churn", "onnxruntime_onnx", 16)
    assert config.HasField("dynamic_batching")
    inputs = {entry.name: (entry.data_type, list(entry.dims)) for entry in config.input}
    assert inputs == {
        "age": (mc.TYPE_FP32, [1]),
        "income": (mc.TYPE_FP32, [1]),
        "visits": (mc.TYPE_INT64, [1]),
        "plan": (mc.TYPE_STRING, [1]),
        "region": (mc.TYPE_STRING, [1]),
    }
    outputs = {entry.name: (entry.data_type, list(entry.dims)) for entry in config.output}
    assert outputs == {"label": (mc.TYPE_STRING, [1]), "probabilities": (mc.TYPE_FP32, [2])}


def test_warmup_is_the_first_sample_row_as_the_server_reads_it(tmp_path: Path) -> None:
    sample = customers(10)
    export(churn_classifier(), sample, repository=tmp_path, name="churn")

    model_dir = tmp_path / "churn"
    (warmup,) = warmup_samples(read_config(model_dir), model_dir)
    first = sample.iloc[0]
    assert np.isnan(warmup.inputs["age"][0, 0]) and np.isnan(first["age"])
    assert warmup.inputs["income"][0, 0] == np.float32(first["income"])
    assert warmup.inputs["visits"][0, 0] == first["visits"]
    assert warmup.inputs["plan"][0, 0] == first["plan"].encode()
    assert (model_dir / "warmup" / "region").read_bytes() == len(first["region"]).to_bytes(
        4, "little"
    ) + first["region"].encode()


def test_metadata_records_schema_origin_and_checksums(tmp_path: Path) -> None:
    sample = customers(10)
    version_dir = export(
        churn_classifier(),
        sample,
        repository=tmp_path,
        name="churn",
        metadata={"training_data_version": "customers-2024-06", "owner": "growth team"},
    )

    metadata = read_metadata(version_dir)
    assert (metadata.name, metadata.version) == ("churn", 1)
    assert metadata.created.endswith("Z")
    assert metadata.feature_names == list(sample.columns)
    assert metadata.training_data_version == "customers-2024-06"
    assert metadata.extra == {"owner": "growth team"}
    assert metadata.framework["name"] == "scikit-learn"
    assert metadata.framework["model_class"] == "sklearn.pipeline.Pipeline"
    assert {"scikit-learn", "skl2onnx", "onnx", "onnxruntime"} <= metadata.libraries.keys()
    assert [(t.name, t.datatype, t.shape) for t in metadata.outputs] == [
        ("label", "BYTES", [-1, 1]),
        ("probabilities", "FP32", [-1, 2]),
    ]
    assert metadata.files.keys() == {"model.onnx", "probabilities_labels.txt", "contract.yaml"}
    assert metadata.classes == {"probabilities": sorted(metadata.classes["probabilities"])}
    assert len(metadata.classes["probabilities"]) == 2
    assert mismatched_files(metadata.files, version_file_checksums(version_dir)) == {}
    assert mismatched_files(metadata.model_files, model_file_checksums(tmp_path / "churn")) == {}
    assert "config.pbtxt" in metadata.model_files


def test_regressor_pipeline(tmp_path: Path) -> None:
    model, sample = spend_regressor(), customers(30, seed=3)

    version_dir = export(model, sample, repository=tmp_path, name="spend")

    predicted = run_frame(version_dir, sample)["variable"]
    np.testing.assert_allclose(predicted.ravel(), model.predict(sample), rtol=1e-4)
    assert [(t.name, t.shape) for t in read_metadata(version_dir).outputs] == [("variable", [-1, 1])]


def test_plain_estimator_on_a_2d_array(tmp_path: Path) -> None:
    model, sample = forest_classifier(), measurements(25, seed=5)

    version_dir = export(model, sample, repository=tmp_path, name="forest")

    session = ort.InferenceSession(str(version_dir / "model.onnx"))
    labels, probabilities = session.run(None, {"input": sample.astype(np.float32)})
    assert labels.tolist() == model.predict(sample).tolist()
    np.testing.assert_allclose(probabilities, model.predict_proba(sample), atol=1e-5)
    metadata = read_metadata(version_dir)
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [("input", "FP32", [-1, 4])]
    assert metadata.feature_names is None


def test_versions_follow_the_highest_and_an_existing_one_is_refused(tmp_path: Path) -> None:
    model, sample = forest_classifier(), measurements(5)
    assert export(model, sample, repository=tmp_path, name="forest").name == "1"
    assert export(model, sample, repository=tmp_path, name="forest", version=7).name == "7"
    assert export(model, sample, repository=tmp_path, name="forest").name == "8"
    before = sorted(tmp_path.rglob("*"))

    with pytest.raises(ExportError, match="version 7 of 'forest' already exists"):
        export(model, sample, repository=tmp_path, name="forest", version=7)

    assert sorted(tmp_path.rglob("*")) == before


def test_a_tuned_config_is_kept_while_the_interface_is_unchanged(tmp_path: Path) -> None:
    model, sample = churn_classifier(), customers(10)
    export(model, sample, repository=tmp_path, name="churn")
    config_path = tmp_path / "churn" / "config.pbtxt"
    tuned = config_path.read_text().replace("count: 1", "count: 2")
    assert tuned != config_path.read_text()
    config_path.write_text(tuned)

    version_dir = export(model, customers(5, seed=9), repository=tmp_path, name="churn")

    assert config_path.read_text() == tuned
    assert (
        mismatched_files(read_metadata(version_dir).model_files, model_file_checksums(tmp_path / "churn"))
        == {}
    )


def test_a_config_that_no_longer_fits_is_rewritten_with_a_warning(tmp_path: Path) -> None:
    sample = customers(10)
    export(churn_classifier(), sample, repository=tmp_path, name="model")

    with pytest.warns(ConfigRewrittenWarning, match=r"versions \[1\] were made for the old interface"):
        version_dir = export(spend_regressor(), sample, repository=tmp_path, name="model")

    assert [entry.name for entry in read_config(tmp_path / "model").output] == ["variable"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], "staging folders must be gone"
    assert (
        mismatched_files(read_metadata(version_dir).model_files, model_file_checksums(tmp_path / "model"))
        == {}
    )


def test_float32_skew_is_caught_and_nothing_is_written(tmp_path: Path) -> None:
    # Unix timestamps: float32 keeps 24 bits, so around 1.7e9 seconds it rounds to 128 s steps. A
    # model fitted on float64 seconds then disagrees with its float32 ONNX form: honest feature skew.
    seconds = 1_700_000_000 + np.arange(0, 3600, 37, dtype=np.float64).reshape(-1, 1)
    model = LinearRegression().fit(seconds, (seconds[:, 0] - 1_700_000_000) / 60)
    export(forest_classifier(), measurements(5), repository=tmp_path, name="other")
    before = {path: path.read_bytes() if path.is_file() else None for path in tmp_path.rglob("*")}

    with pytest.raises(DisagreementError) as raised:
        export(model, seconds, repository=tmp_path, name="minutes")

    (disagreement,) = raised.value.disagreements
    assert (disagreement.output, disagreement.method) == ("variable", "predict")
    message = str(raised.value)
    assert "output 'variable' (predict):" in message and "worst at [" in message
    assert "Nothing was written" in message
    assert {path: path.read_bytes() if path.is_file() else None for path in tmp_path.rglob("*")} == before


def test_a_model_skl2onnx_cannot_convert_is_refused_clearly(tmp_path: Path) -> None:
    from sklearn.preprocessing import FunctionTransformer

    model = FunctionTransformer(np.log1p).fit(measurements(5))

    with pytest.raises(ExportError, match="skl2onnx cannot convert FunctionTransformer"):
        export(model, measurements(5), repository=tmp_path, name="log")

    assert list(tmp_path.iterdir()) == []


def test_metadata_must_be_json(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="metadata must hold JSON values"):
        export(
            forest_classifier(), measurements(5), repository=tmp_path, name="forest", metadata={"x": object()}
        )
    assert list(tmp_path.iterdir()) == []
