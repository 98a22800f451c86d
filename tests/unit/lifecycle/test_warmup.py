"""Model warm-up: samples built as Triton builds them, run on every instance, failures make the version
UNAVAILABLE with the sample's name and no path."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.types import ExecutionTiming
from conch.lifecycle.warmup import run_warmup
from conch.models.model import ModelState
from conch.repository.warmup import warmup_samples
from tests.fixtures.model_folders import load_repository
from tests.fixtures.onnx_models import add_sub_model, string_model, write_repository

ADD_SUB_WARMUP = """
name: "add_sub"
max_batch_size: 8
model_warmup [
  {
    name: "zeros"
    batch_size: 3
    count: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [16] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [16] random_data: true } }
  }
]
"""

TEXT_WARMUP = """
name: "text"
max_batch_size: 4
model_warmup [
  {
    name: "from-file"
    batch_size: 2
    inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [1] input_data_file: "TEXT" } }
  }
]
"""


class RecordingInstance:
    """Stands in for a backend instance (not what is under test) and records what warm-up runs."""

    def __init__(self) -> None:
        self.calls: list[dict[str, np.ndarray]] = []

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.calls.append(inputs)
        return {}


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_batching_samples_repeat_one_sample_batch_size_times(tmp_path: Path) -> None:
    (sample,) = warmup_samples(parse(ADD_SUB_WARMUP), tmp_path)

    assert sample.name == "zeros" and sample.count == 2
    assert sample.inputs["INPUT0"].shape == (3, 16) and not sample.inputs["INPUT0"].any()
    assert sample.inputs["INPUT1"].dtype == np.float32
    assert np.array_equal(sample.inputs["INPUT1"][0], sample.inputs["INPUT1"][2])


def test_file_samples_are_read_from_the_warmup_folder(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "TEXT").write_bytes(struct.pack("<I", 5) + b"hello")

    (sample,) = warmup_samples(parse(TEXT_WARMUP), tmp_path)

    assert sample.inputs["TEXT"].tolist() == [[b"hello"], [b"hello"]]


def test_each_sample_runs_count_times_on_every_instance(tmp_path: Path) -> None:
    instances = [RecordingInstance(), RecordingInstance()]

    run_warmup(list(instances), parse(ADD_SUB_WARMUP), tmp_path)

    assert [len(i.calls) for i in instances] == [2, 2]


def test_models_with_warmup_load_ready(tmp_path: Path) -> None:
    root = write_repository(
        tmp_path / "models",
        {"add_sub": (add_sub_model(), ADD_SUB_WARMUP), "text": (string_model(), TEXT_WARMUP)},
    )
    (root / "text" / "warmup").mkdir()
    (root / "text" / "warmup" / "TEXT").write_bytes(struct.pack("<I", 2) + b"hi")

    repository = load_repository(root)
    try:
        assert repository.model("add_sub").state is ModelState.READY
        assert repository.model("text").state is ModelState.READY
    finally:
        repository.close()


def test_failing_warmup_makes_the_version_unavailable(tmp_path: Path) -> None:
    short_file = TEXT_WARMUP.replace('input_data_file: "TEXT"', 'input_data_file: "short"')
    escaping = TEXT_WARMUP.replace('name: "text"', 'name: "escape"').replace(
        'input_data_file: "TEXT"', 'input_data_file: "../config.pbtxt"'
    )
    root = write_repository(
        tmp_path / "models", {"text": (string_model(), short_file), "escape": (string_model(), escaping)}
    )
    (root / "text" / "warmup").mkdir()
    (root / "text" / "warmup" / "short").write_bytes(struct.pack("<I", 9) + b"abc")

    repository = load_repository(root)
    try:
        text, escape = repository.model("text"), repository.model("escape")
        assert text.state is ModelState.UNAVAILABLE
        assert "warm-up sample 'from-file'" in text.versions[1].reason
        assert "longer than the data" in text.versions[1].reason
        assert escape.state is ModelState.UNAVAILABLE
        assert "not in the model's warmup/ folder" in escape.versions[1].reason
        assert str(tmp_path) not in text.versions[1].reason + escape.versions[1].reason
    finally:
        repository.close()


def test_a_longer_file_is_read_from_its_start_as_triton_does(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "TEXT").write_bytes(struct.pack("<I", 2) + b"hi" + struct.pack("<I", 3) + b"bye")

    (sample,) = warmup_samples(parse(TEXT_WARMUP), tmp_path)

    assert sample.inputs["TEXT"].tolist() == [[b"hi"], [b"hi"]]


def test_zero_data_strings_are_empty_as_in_triton(tmp_path: Path) -> None:
    config = parse(TEXT_WARMUP.replace('input_data_file: "TEXT"', "zero_data: true"))

    (sample,) = warmup_samples(config, tmp_path)

    assert sample.inputs["TEXT"].tolist() == [[b""], [b""]]


def test_a_sample_with_batch_size_zero_is_skipped_as_triton_does(tmp_path: Path) -> None:
    config = parse(ADD_SUB_WARMUP.replace("batch_size: 3", "batch_size: 0"))

    assert warmup_samples(config, tmp_path) == []


def test_a_sample_without_data_or_that_breaks_a_reshape_makes_the_version_unavailable(tmp_path: Path) -> None:
    no_data = ADD_SUB_WARMUP.replace('name: "add_sub"', 'name: "no_data"').replace("zero_data: true", "")
    bad_reshape = (
        ADD_SUB_WARMUP.replace('name: "add_sub"', 'name: "reshaped"').replace(
            "dims: [16] zero_data", "dims: [3] zero_data"
        )
        + 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] reshape: { shape: [ 16 ] } },\n'
        + '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    )
    root = write_repository(
        tmp_path / "models",
        {"no_data": (add_sub_model(), no_data), "reshaped": (add_sub_model(), bad_reshape)},
    )

    repository = load_repository(root)
    try:
        no_data_reason = repository.model("no_data").versions[1].reason
        reshaped_reason = repository.model("reshaped").versions[1].reason
        assert "input 'INPUT0': no data" in no_data_reason
        assert "warm-up sample 'zeros' failed: ValueError" in reshaped_reason
    finally:
        repository.close()
