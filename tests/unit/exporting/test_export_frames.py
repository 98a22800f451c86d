"""DataFrames as they come: the column-naming rule, the column kinds, and the refusals that name a column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.input_aliases import COLUMN_INPUTS_PARAMETER, input_aliases
from conch.exporting import ExportError, export
from conch.exporting.column_names import rename_graph_inputs, renamed, tensor_names
from conch.exporting.samples import frame_columns


def test_good_names_are_kept_and_others_cleaned_deterministically() -> None:
    columns = ["alcohol", "od280/od315_of_diluted_wines", "sepal length (cm)", "0", "%", "größe", "__x", "m²"]

    names = tensor_names(columns)

    assert names == {
        "alcohol": "alcohol",
        "od280/od315_of_diluted_wines": "od280_od315_of_diluted_wines",
        "sepal length (cm)": "sepal_length_cm",
        "0": "column_0",
        "%": "column_4",
        "größe": "größe",
        "__x": "__x",
        "m²": "m",
    }
    assert tensor_names(columns) == names


def test_names_equal_after_cleaning_get_numbered_and_a_good_name_never_moves() -> None:
    # "a_b" comes last but is a good name, so it keeps it; the cleaned ones are numbered in order.
    names = tensor_names(["a b", "a-b", "a_b", "a_b_2 "])

    assert names == {"a b": "a_b_2", "a-b": "a_b_3", "a_b": "a_b", "a_b_2 ": "a_b_2_2"}
    assert len(set(names.values())) == 4
    assert renamed(names) == {"a b": "a_b_2", "a-b": "a_b_3", "a_b_2 ": "a_b_2_2"}


def test_renaming_a_graph_input_renames_its_uses_in_subgraphs_too() -> None:
    inner = helper.make_graph(
        [helper.make_node("Identity", ["a/b"], ["inner_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("inner_out", TensorProto.FLOAT, [1])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Neg", ["a/b"], ["negated"]),
            helper.make_node("If", ["flag"], ["out"], then_branch=inner, else_branch=inner),
        ],
        "g",
        [
            helper.make_tensor_value_info("a/b", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)

    rename_graph_inputs(model, {"a/b": "a_b"})

    assert [i.name for i in model.graph.input] == ["a_b", "flag"]
    assert list(model.graph.node[0].input) == ["a_b"]
    assert list(model.graph.node[1].attribute[0].g.node[0].input) == ["a_b"]
    onnx.checker.check_model(model)


def test_each_column_kind_becomes_its_tensor_kind() -> None:
    frame = pd.DataFrame(
        {
            "count": pd.array([1, None, 3], dtype="Int64"),
            "known": pd.array([True, None, False], dtype="boolean"),
            "plan": pd.array(["basic", None, "plus"], dtype="string"),
            "colour": pd.Categorical(["red", "green", "red"]),
            "size": pd.Categorical([1, 2, 1]),
            "flag": [True, False, True],
            "n": np.array([4, 5, 6], dtype=np.int32),
            "empty": [np.nan, np.nan, np.nan],
        }
    )

    columns = frame_columns(frame)

    assert {name: values.dtype.kind for name, values in columns.items()} == {
        "count": "f",
        "known": "f",
        "plan": "O",
        "colour": "O",
        "size": "i",
        "flag": "f",
        "n": "i",
        "empty": "f",
    }
    assert np.isnan(columns["count"][1, 0]) and columns["count"][2, 0] == 3
    assert np.isnan(columns["known"][1, 0]) and columns["known"][0, 0] == 1.0
    assert columns["plan"][:, 0].tolist() == ["basic", "", "plus"]
    assert columns["colour"][:, 0].tolist() == ["red", "green", "red"]
    assert all(values.shape == (3, 1) for values in columns.values())


def test_a_nullable_integer_column_is_a_float_input_even_without_a_missing_value() -> None:
    assert frame_columns(pd.DataFrame({"n": pd.array([1, 2], dtype="Int64")}))["n"].dtype == np.float64


@pytest.mark.parametrize(
    "values",
    [
        pd.date_range("2026-01-01", periods=3),
        pd.date_range("2026-01-01", periods=3, tz="UTC"),
        pd.to_timedelta([1, 2, 3], unit="s"),
        pd.period_range("2026-01", periods=3, freq="M"),
    ],
    ids=["datetime", "datetime-tz", "timedelta", "period"],
)
def test_dates_and_durations_are_refused_by_column_with_a_conversion(values: object) -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "when": values})

    with pytest.raises(ExportError, match=r"column 'when' is .*convert it in the frame"):
        frame_columns(frame)


def test_columns_with_one_name_are_refused() -> None:
    frame = pd.DataFrame([[1.0, 2.0]], columns=["x", "x"])

    with pytest.raises(ExportError, match=r"more than one column named \['x'\]"):
        frame_columns(frame)


def test_a_column_empty_when_fitted_is_named_with_the_fix(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=40), "empty": np.full(40, np.nan)})
    pipeline = make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression())
    pipeline.fit(frame, rng.integers(0, 2, 40))

    with pytest.raises(ExportError, match=r"\['empty'\] held no values .*keep_empty_features=True"):
        export(pipeline, frame.head(10), repository=tmp_path, name="m")
    assert not (tmp_path / "m").exists()


def test_a_column_empty_in_the_sample_only_exports(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    sparse = np.r_[np.full(20, np.nan), rng.normal(size=20)]
    frame = pd.DataFrame({"x": rng.normal(size=40), "sparse": sparse})
    pipeline = make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression())
    pipeline.fit(frame, rng.integers(0, 2, 40))

    assert (export(pipeline, frame.head(10), repository=tmp_path, name="m") / "model.onnx").is_file()


def test_aliases_are_read_from_the_config_and_bad_json_gives_none() -> None:
    config = mc.ModelConfig()
    config.parameters[COLUMN_INPUTS_PARAMETER].string_value = '{"a/b": "a_b"}'
    broken = mc.ModelConfig()
    broken.parameters[COLUMN_INPUTS_PARAMETER].string_value = "{not json"

    assert input_aliases(config) == {"a/b": "a_b"}
    assert input_aliases(broken) == {}
    assert input_aliases(mc.ModelConfig()) == {}
