"""The PyTorch backend's GPU behaviour, checked against a real ``conch serve`` on a machine with CUDA.

``python -m bench.pytorch_gpu_checks`` (``bench/gpu_check.sh`` runs it with the tests and the
benchmark). CI has no GPU, so these checks live here rather than in ``tests/``; each prints PASS or
FAIL with what it saw, and the exit status is the number of failures.

1. A KIND_GPU TorchScript CNN (two instances, fp16, channels-last) answers as torch does in fp32,
   within fp16's error, and is READY only after its cold-start warm-up (load phases in /metrics).
2. The allocator families are there for GPU 0: reserved >= allocated, a ratio in [0, 1], retries.
3. A memory cap (``gpu_memory_limit_bytes``) broken by a large batch: a 500 saying the GPU ran out of
   memory; the same model with ``FALLBACK_STRATEGY: CPU`` answers that batch from CPU instances.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from bench.servers import Ports, ServerProcess
from tests.fixtures.pytorch_models import CNN_INPUT, cnn, cnn_config, write_torchscript_cnn

#: 1024 features x 4096 per row in float32: 16 MiB a row, so batch 8 needs 128 MiB.
WIDE = 1024
CAP_BYTES = 64 << 20


class Widen(torch.nn.Module):
    """Allocates ``rows x 1024 x 4096`` floats on its device: a batch of 8 breaks a 64 MiB cap."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.unsqueeze(-1) * torch.ones(4096, device=x.device)).sum(-1)


def write_repository(root: Path) -> Path:
    write_torchscript_cnn(root / "cnn-gpu" / "1")
    (root / "cnn-gpu" / "config.pbtxt").write_text(
        cnn_config(
            "cnn-gpu",
            "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n"
            'parameters { key: "precision" value { string_value: "fp16" } }\n'
            'parameters { key: "memory_format" value { string_value: "channels_last" } }',
        )
    )
    for name, strategy in (("capped", ""), ("capped-fallback", "CPU")):
        (root / name / "1").mkdir(parents=True)
        torch.jit.script(Widen()).save(str(root / name / "1" / "model.pt"))
        fallback = (
            f'parameters {{ key: "FALLBACK_STRATEGY" value {{ string_value: "{strategy}" }} }}'
            if strategy
            else ""
        )
        (root / name / "config.pbtxt").write_text(
            textwrap.dedent(
                f"""
                name: "{name}"
                platform: "pytorch_libtorch"
                max_batch_size: 8
                input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {WIDE} ] }} ]
                output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {WIDE} ] }} ]
                instance_group [ {{ kind: KIND_GPU count: 1 }} ]
                dynamic_batching {{ preferred_batch_size: [ 1 ] }}
                parameters {{ key: "gpu_memory_limit_bytes" value {{ string_value: "{CAP_BYTES}" }} }}
                {fallback}
                """
            )
        )
    return root


def infer(client: httpclient.InferenceServerClient, model: str, batch: np.ndarray) -> np.ndarray:
    tensor = httpclient.InferInput("INPUT__0", list(batch.shape), "FP32")
    tensor.set_data_from_numpy(batch, binary_data=True)
    return client.infer(model, [tensor]).as_numpy("OUTPUT__0")


def check_fp16_cnn(client: httpclient.InferenceServerClient, metrics: str) -> str:
    batch = np.random.default_rng(0).standard_normal((8, *CNN_INPUT), dtype=np.float32)
    with torch.inference_mode():
        expected = cnn()(torch.from_numpy(batch)).numpy()
    np.testing.assert_allclose(infer(client, "cnn-gpu", batch), expected, rtol=2e-2, atol=2e-2)
    phases = _samples(metrics, "conch_model_load_phase_duration_seconds")
    warm = [s for s in phases if s[0].get("model") == "cnn-gpu" and s[0].get("phase") == "warmup"]
    assert warm, "no warmup phase recorded for cnn-gpu"
    return "fp16 channels-last answers within 2e-2 of fp32 torch; load phases recorded"


def check_allocator_metrics(client: httpclient.InferenceServerClient, metrics: str) -> str:
    reserved = _value(metrics, "conch_gpu_memory_reserved_bytes")
    allocated = _value(metrics, "conch_gpu_memory_allocated_bytes")
    ratio = _value(metrics, "conch_gpu_memory_fragmentation_ratio")
    retries = _value(metrics, "conch_gpu_allocation_retries_total")
    gpu = f"gpu 0: reserved {reserved:.0f} B, allocated {allocated:.0f} B"
    assert reserved >= allocated > 0, (reserved, allocated)
    assert 0 <= ratio <= 1 and retries >= 0
    return f"{gpu}, ratio {ratio:.3f}, retries {retries:g}"


def check_memory_cap(client: httpclient.InferenceServerClient, metrics: str) -> str:
    rows = np.ones((8, WIDE), dtype=np.float32)
    try:
        infer(client, "capped", rows)
    except InferenceServerException as exc:
        assert exc.status() == "500" and "ran out of GPU memory" in (exc.message() or ""), exc
    else:
        raise AssertionError("batch 8 under a 64 MiB cap did not fail")
    answered = infer(client, "capped-fallback", rows)
    np.testing.assert_allclose(answered, np.full((8, WIDE), 4096.0, dtype=np.float32))
    return "over the cap: 500 'ran out of GPU memory'; with FALLBACK_STRATEGY CPU: answered on the CPU"


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name or family.name == name
    ]


def _value(text: str, name: str) -> float:
    values = [value for labels, value in _samples(text, name) if labels.get("gpu") == "0"]
    assert values, f"{name} has no sample for gpu 0"
    return values[0]


def main() -> int:
    if not torch.cuda.is_available():
        print("SKIPPED: torch sees no CUDA device (a CUDA build of torch and a GPU are needed)")
        return 0
    checks: list[Callable[[httpclient.InferenceServerClient, str], str]] = [
        check_fp16_cnn,
        check_allocator_metrics,
        check_memory_cap,
    ]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="conch-gpu-checks-") as work:
        repository = write_repository(Path(work) / "repo")
        ports = Ports()
        command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
        command += ["--http-port", str(ports.http), "--grpc-port", str(ports.grpc)]
        command += ["--metrics-port", str(ports.metrics)]
        with ServerProcess("conch", command, ports, Path(work) / "conch.log", ready_timeout_s=300) as server:
            client = httpclient.InferenceServerClient(ports.http_address)
            for check in checks:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports.metrics}/metrics", timeout=10) as reply:
                    metrics = reply.read().decode()
                try:
                    print(f"PASS {check.__name__}: {check(client, metrics)}")
                except Exception as exc:  # every check reports, whatever the one before did
                    failures += 1
                    print(f"FAIL {check.__name__}: {type(exc).__name__}: {exc}")
            if failures:
                print(server.log_tail(40))
    return failures


if __name__ == "__main__":
    sys.exit(main())
