"""PyTorch models end to end: a real ``conch serve`` with TorchScript and ``torch.export`` programs that
torch wrote, answers compared with torch's own in eval mode over HTTP and gRPC (tritonclient).

Also: Triton's naming (``INPUT__0`` and forward argument names), an unknown input name (400), a
TorchScript config that leaves out what the program cannot tell, bad GPU parameters, and ``KIND_GPU``
on this GPU-less machine with and without the CPU fallback.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tests.fixtures.pytorch_models import (
    CNN_INPUT,
    cnn,
    cnn_config,
    mlp,
    write_exported_mlp,
    write_torchscript_cnn,
)
from tests.integration.server_process import ServerProcess

pytestmark = pytest.mark.torch  # the program this file drives

GPU_STRICT = "instance_group [ { count: 1 kind: KIND_GPU } ]"
GPU_FALLBACK = (
    "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]\n"
    'parameters { key: "FALLBACK_STRATEGY" value { string_value: "CPU" } }\n'
    'parameters { key: "precision" value { string_value: "fp16" } }\n'
    'parameters { key: "gpu_memory_fraction" value { string_value: "0.5" } }'
)
NAMED_CONFIG = """
name: "cnn-named"
backend: "pytorch"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 5 ] } ]
"""
UNDECLARED_CONFIG = 'name: "cnn-undeclared"\nplatform: "pytorch_libtorch"\nmax_batch_size: 8\n'


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pytorch-repo")
    configs = {
        "cnn": cnn_config("cnn", "instance_group [ { count: 2 kind: KIND_CPU } ]\ndynamic_batching { }"),
        "cnn-named": NAMED_CONFIG,
        "cnn-undeclared": UNDECLARED_CONFIG,
        "cnn-gpu": cnn_config("cnn-gpu", GPU_STRICT),
        "cnn-gpu-fallback": cnn_config("cnn-gpu-fallback", GPU_FALLBACK),
        "cnn-bad-fraction": cnn_config(
            "cnn-bad-fraction", 'parameters { key: "gpu_memory_fraction" value { string_value: "1.5" } }'
        ),
    }
    for name, text in configs.items():
        write_torchscript_cnn(root / name / "1")
        (root / name / "config.pbtxt").write_text(text)
    write_exported_mlp(root / "mlp" / "1")  # no config.pbtxt: completed from the program
    return root


def images(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, *CNN_INPUT), dtype=np.float32)


def torch_logits(batch: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return cnn()(torch.from_numpy(batch)).numpy()


def http_infer(server: ServerProcess, model: str, name: str, batch: np.ndarray, output: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput(name, list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=True)
    return client.infer(model, [tensor]).as_numpy(output)


def index(server: ServerProcess) -> dict[str, dict[str, str]]:
    return {entry["name"]: entry for entry in server.request("POST", "/v2/repository/index", b"{}").json()}


def test_torchscript_cnn_answers_as_torch_in_eval_mode_over_http_and_grpc(server: ServerProcess) -> None:
    batch = images(3, seed=1)
    expected = torch_logits(batch)

    over_http = http_infer(server, "cnn", "INPUT__0", batch, "OUTPUT__0")
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT__0", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch)
    over_grpc = grpc.infer("cnn", [tensor]).as_numpy("OUTPUT__0")

    np.testing.assert_allclose(over_http, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(over_grpc, expected, rtol=1e-5, atol=1e-6)
    # Dropout is off and batch norm uses its running statistics: a row does not depend on its batch.
    np.testing.assert_allclose(
        http_infer(server, "cnn", "INPUT__0", batch[:1], "OUTPUT__0"), expected[:1], rtol=1e-5, atol=1e-6
    )


def test_forward_argument_names_bind_as_in_triton(server: ServerProcess) -> None:
    batch = images(2, seed=2)

    logits = http_infer(server, "cnn-named", "image", batch, "logits")

    np.testing.assert_allclose(logits, torch_logits(batch), rtol=1e-5, atol=1e-6)


def test_exported_mlp_without_config_is_completed_from_the_program(server: ServerProcess) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("mlp")
    assert config["platform"] == "pytorch_libtorch"
    assert config["max_batch_size"] == 4  # a dynamic batch dimension: conch's default, as for ONNX
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("features", "TYPE_FP32", [6])
    ]
    assert [o["name"] for o in config["output"]] == ["OUTPUT__0", "OUTPUT__1"]

    features = np.random.default_rng(3).standard_normal((4, 6), dtype=np.float32)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("features", [4, 6], "FP32")
    tensor.set_data_from_numpy(features)
    result = client.infer("mlp", [tensor])
    with torch.inference_mode():
        logits, probabilities = mlp()(torch.from_numpy(features))

    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), logits.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), probabilities.numpy(), rtol=1e-5, atol=1e-6)


def test_an_unknown_input_name_is_a_400_naming_the_inputs(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT__7", [1, *CNN_INPUT], "FP32")
    tensor.set_data_from_numpy(images(1, seed=4))

    with pytest.raises(InferenceServerException) as raised:
        client.infer("cnn", [tensor])

    assert raised.value.status() == "400"
    assert "INPUT__7" in raised.value.message()
    assert "INPUT__0" in raised.value.message()


def test_a_torchscript_config_without_tensors_fails_saying_what_to_write(server: ServerProcess) -> None:
    entry = index(server)["cnn-undeclared"]

    assert entry["state"] == "UNAVAILABLE"
    assert "must list every input and output with name, data_type and dims" in entry["reason"]
    assert "input (none listed)" in entry["reason"]


def test_a_bad_gpu_memory_fraction_fails_the_load_even_without_a_gpu(server: ServerProcess) -> None:
    entry = index(server)["cnn-bad-fraction"]

    assert entry["state"] == "UNAVAILABLE"
    assert "gpu_memory_fraction' must be a number above 0 and at most 1, got '1.5'" in entry["reason"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without CUDA")
def test_kind_gpu_without_cuda_fails_without_the_cpu_fallback(server: ServerProcess) -> None:
    entry = index(server)["cnn-gpu"]

    assert entry["state"] == "UNAVAILABLE"
    assert "asks for 1 KIND_GPU instance(s) but PyTorch sees no CUDA device" in entry["reason"]
    assert "add CPU to FALLBACK_STRATEGY" in entry["reason"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without CUDA")
def test_kind_gpu_without_cuda_serves_on_the_cpu_with_the_fallback(server: ServerProcess) -> None:
    batch = images(2, seed=5)

    logits = http_infer(server, "cnn-gpu-fallback", "INPUT__0", batch, "OUTPUT__0")

    # The CPU stand-ins run in fp32 whatever precision the GPU instances were to use.
    np.testing.assert_allclose(logits, torch_logits(batch), rtol=1e-5, atol=1e-6)
    assert "fallback model=cnn-gpu-fallback version=1 level=CPU reason=gpu_unavailable gpu_instances=2" in (
        server.log()
    )


def test_load_phases_are_metrics_and_allocator_families_need_a_gpu(server: ServerProcess) -> None:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        families = {f.name: f for f in text_string_to_metric_families(reply.read().decode())}

    phases = {
        (s.labels["model"], s.labels["phase"])
        for s in families["conch_model_load_phase_duration_seconds"].samples
        if s.name.endswith("_count") and s.value == 1
    }
    assert {("cnn", "context"), ("cnn", "warmup"), ("mlp", "context"), ("mlp", "warmup")} <= phases
    if not torch.cuda.is_available():
        assert not [name for name in families if name.startswith("conch_gpu_memory")]


def test_without_torch_a_pytorch_model_is_unavailable_with_the_install_hint(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path: Path
) -> None:
    shim = tmp_path / "no_torch"
    shim.mkdir()
    # Run at interpreter start in the server process only: `import torch` fails as if not installed.
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "        return None\n"
        "sys.meta_path.insert(0, NoTorch())\n"
    )
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    served = start_server(repository, env={"PYTHONPATH": path})

    entry = index(served)["cnn"]

    assert entry["state"] == "UNAVAILABLE"
    assert "pip install 'conch[torch]'" in entry["reason"]
    assert served.request("GET", "/v2/models/cnn/ready").status == 503
