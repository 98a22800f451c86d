#!/usr/bin/env bash
# Everything issue 20 needs a GPU for, in one go, on a machine with CUDA and a CUDA build of torch:
#   1. the PyTorch backend's tests (those that describe a machine without CUDA skip themselves);
#   2. python -m bench.pytorch_gpu_checks: KIND_GPU fp16/channels-last, allocator metrics, memory cap;
#   3. python -m bench.pytorch_gpu: ResNet-50 at batch 128 through conch against torch alone, the
#      report written to bench/results/<time>-pytorch-resnet50.gpu.md.
# PYTHON picks the interpreter (default: the project's .venv). Exit status: the number of parts failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
# The checkout itself is importable, so an interpreter with the dependencies but no install of conch works.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
missing=$("$PYTHON" - <<'PY'
import importlib.util
needed = ["torch", "numpy", "tritonclient.grpc", "tritonclient.http", "grpc", "uvicorn", "onnxruntime",
          "prometheus_client", "pytest"]
print(" ".join(m for m in needed if importlib.util.find_spec(m.split(".")[0]) is None))
PY
)
if [ -n "$missing" ]; then
  echo "$PYTHON lacks: $missing (pip install -e '.[test,torch]' with a CUDA build of torch)"
  exit 4
fi
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "no CUDA device visible to torch ($("$PYTHON" -c 'import torch; print(torch.__version__)' 2>&1)):"
  echo "install a CUDA build of torch==2.13.0 on a machine with a GPU, then run this again"
  exit 3
fi
"$PYTHON" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0), "torch", torch.__version__)'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
failed=0
echo "== 1/3 tests"
timeout 300 "$PYTHON" -m pytest -q tests/unit/backends/test_pytorch_rules.py tests/unit/backends/test_pytorch_backend.py \
  tests/integration/test_pytorch_serving.py || failed=$((failed + 1))
echo "== 2/3 GPU checks"
timeout 240 "$PYTHON" -m bench.pytorch_gpu_checks || failed=$((failed + 1))
echo "== 3/3 ResNet-50 benchmark"
mkdir -p bench/results
timeout 300 "$PYTHON" -m bench.pytorch_gpu --batch 128 --seconds 20 \
  --out "bench/results/$(date -u +%Y-%m-%d-%H%M%S)-pytorch-resnet50.gpu.md" || failed=$((failed + 1))
echo "== parts failed: $failed"
exit "$failed"
