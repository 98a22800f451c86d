"""conch.export on torch: a Dropout MLP left in training mode, a small CNN, TorchScript, tuple outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from conch.exporting import ExportError, export
from conch.packaging.metadata import read_metadata
from conch.repository.config import parse_config
from tests.fixtures.notebook_models import dropout_mlp, images, measurements, small_cnn

pytestmark = pytest.mark.torch  # the program this file drives


def run_onnx(version_dir: Path, **feeds: np.ndarray) -> list[np.ndarray]:
    return list(ort.InferenceSession(str(version_dir / "model.onnx")).run(None, feeds))


def eval_forward(module: nn.Module, *inputs: np.ndarray) -> torch.Tensor:
    was_training = module.training
    module.eval()
    with torch.no_grad():
        out = module(*(torch.from_numpy(np.asarray(x, dtype=np.float32)) for x in inputs))
    module.train(was_training)
    return out


def test_dropout_left_in_training_mode_exports_the_eval_model(tmp_path: Path) -> None:
    model, sample = dropout_mlp(), measurements(16)
    model[0].eval()  # a notebook may leave submodules in mixed modes: each must come back as it was
    with torch.no_grad():
        noisy = [model(torch.from_numpy(sample).float()) for _ in range(2)]
    assert not torch.equal(*noisy), "Dropout in training mode should answer differently each time"

    first = export(model, sample, repository=tmp_path, name="mlp")
    second = export(model, sample, repository=tmp_path, name="mlp")

    assert [m.training for m in model.modules()] == [True, False, True, True, True]
    (out_first,) = run_onnx(first, input=sample.astype(np.float32))
    (out_second,) = run_onnx(second, input=sample.astype(np.float32))
    np.testing.assert_array_equal(out_first, out_second)
    np.testing.assert_allclose(out_first, eval_forward(model, sample).numpy(), rtol=1e-5, atol=1e-6)


def test_cnn_has_a_dynamic_batch_axis(tmp_path: Path) -> None:
    model = small_cnn()

    version_dir = export(model, images(3), repository=tmp_path, name="cnn", max_batch_size=8)

    bigger = images(11, seed=4)
    (scores,) = run_onnx(version_dir, input=bigger)
    np.testing.assert_allclose(scores, eval_forward(model, bigger).numpy(), rtol=1e-4, atol=1e-5)
    config = parse_config((tmp_path / "cnn" / "config.pbtxt").read_text())
    assert config.max_batch_size == 8
    assert [list(e.dims) for e in config.input] == [[1, 8, 8]]
    assert [list(e.dims) for e in config.output] == [[2]]
    metadata = read_metadata(version_dir)
    assert metadata.framework["name"] == "torch"
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [("input", "FP32", [-1, 1, 8, 8])]
    assert "torch" in metadata.libraries


class TwoHeads(nn.Module):
    """Two inputs and two outputs: names come from the sample mapping and from the output order."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(6, 3)

    def forward(self, numbers: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.mix(torch.cat([numbers, counts.float()], dim=1))
        return hidden.softmax(dim=1), hidden.argmax(dim=1)


def test_named_inputs_and_a_tuple_of_outputs(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TwoHeads()
    numbers, counts = measurements(6), np.arange(12, dtype=np.int64).reshape(6, 2)

    version_dir = export(model, {"numbers": numbers, "counts": counts}, repository=tmp_path, name="heads")

    probabilities, best = run_onnx(version_dir, numbers=numbers.astype(np.float32), counts=counts)
    with torch.no_grad():
        expected_p, expected_best = model(torch.from_numpy(numbers).float(), torch.from_numpy(counts))
    np.testing.assert_allclose(probabilities, expected_p.numpy(), rtol=1e-5)
    np.testing.assert_array_equal(best, expected_best.numpy())
    metadata = read_metadata(version_dir)
    assert [(t.name, t.datatype) for t in metadata.inputs] == [("numbers", "FP32"), ("counts", "INT64")]
    assert [(t.name, t.datatype) for t in metadata.outputs] == [("output_0", "FP32"), ("output_1", "INT64")]


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_torchscript_module(tmp_path: Path) -> None:
    model = torch.jit.script(dropout_mlp())
    sample = measurements(4)

    version_dir = export(model, torch.from_numpy(sample), repository=tmp_path, name="scripted")

    assert model.training
    (out,) = run_onnx(version_dir, input=sample.astype(np.float32))
    np.testing.assert_allclose(out, eval_forward(model, sample).numpy(), rtol=1e-5, atol=1e-6)


def test_a_forward_that_fails_on_the_sample_is_reported_and_modes_restored(tmp_path: Path) -> None:
    model = dropout_mlp()

    with pytest.raises(
        ExportError, match=r"Sequential\.forward failed on the sample: .*shapes cannot be multiplied"
    ):
        export(model, measurements(3)[:, :3], repository=tmp_path, name="mlp")

    assert all(m.training for m in model.modules())
    assert list(tmp_path.iterdir()) == []
