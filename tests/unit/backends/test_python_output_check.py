"""The output check of Python models (``stub/output_check.py``): datatype, dims with -1, the batch
dimension, BYTES as str or bytes, and the ``output_check: warn`` parameter, as pure rules."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import conch.backends.python.stub as stub_package


@pytest.fixture(scope="module")
def output_check() -> Iterator[ModuleType]:
    folder = str(Path(stub_package.__file__).parent)
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module("output_check")
    finally:
        sys.path.remove(folder)


def _config(max_batch_size: int = 0, check: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "m",
        "max_batch_size": max_batch_size,
        "output": [
            {"name": "SCORES", "data_type": "TYPE_FP32", "dims": [-1, 4]},
            {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [2]},
            {"name": "FLAT", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}},
        ],
    }
    if check is not None:
        config["parameters"] = {"output_check": {"string_value": check}}
    return config


def test_matching_outputs_pass(output_check: ModuleType) -> None:
    rules = output_check.OutputRules(_config())
    assert rules.problem("SCORES", np.zeros((7, 4), np.float32), None) is None
    assert rules.problem("TEXT", np.array(["a", b"b"], dtype=object), None) is None
    assert rules.problem("FLAT", np.array([3], np.int64), None) is None
    assert rules.problem("FLAT", np.array(3, np.int64), None) is None  # its reshape's shape
    assert rules.problem("UNDECLARED", np.zeros(3, np.int8), None) is None


def test_a_wrong_datatype_or_shape_names_model_output_config_and_result(output_check: ModuleType) -> None:
    rules = output_check.OutputRules(_config())
    wrong_type = rules.problem("SCORES", np.zeros((7, 4), np.int64), None)
    assert "model 'm'" in wrong_type and "'SCORES'" in wrong_type
    assert "INT64 [7, 4]" in wrong_type and "FP32 [-1, 4]" in wrong_type
    wrong_shape = rules.problem("SCORES", np.zeros(3, np.float32), None)
    assert "FP32 [3]" in wrong_shape and "output_check" in wrong_shape
    assert rules.problem("TEXT", np.zeros(2, np.float32), None) is not None  # numbers for a string


def test_with_batching_the_first_dimension_is_the_requests_batch(output_check: ModuleType) -> None:
    rules = output_check.OutputRules(_config(max_batch_size=8))
    assert rules.problem("SCORES", np.zeros((3, 5, 4), np.float32), 3) is None
    says = rules.problem("SCORES", np.zeros((2, 5, 4), np.float32), 3)
    assert "FP32 [3, -1, 4]" in says and "max_batch_size 8" in says and "3 in this request" in says
    assert rules.problem("SCORES", np.zeros((5, 4), np.float32), 3) is not None  # no batch dimension
    assert rules.problem("SCORES", np.zeros((2, 5, 4), np.float32), None) is None  # batch unknown
    assert rules.batch_of([("IN", "FP32", (3, 16), "seg", 0, 192)]) == 3


def test_warn_logs_once_per_output_and_passes_it_on(output_check: ModuleType) -> None:
    rules = output_check.OutputRules(_config(check="warn"))
    logged: list[tuple[str, int]] = []
    wrong = [("SCORES", np.zeros(3, np.int64))]
    assert rules.check(wrong, None, lambda message, level: logged.append((message, level))) is None
    assert rules.check(wrong, None, lambda message, level: logged.append((message, level))) is None
    assert len(logged) == 1 and "'SCORES'" in logged[0][0] and logged[0][1] == output_check.WARNING
    strict = output_check.OutputRules(_config())
    assert "'SCORES'" in strict.check(wrong, None, lambda message, level: None)


def test_an_unknown_mode_is_refused_with_the_choices(output_check: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"'error'.*'warn'"):
        output_check.OutputRules(_config(check="loose"))
