"""``python -m bench.python_backend_ab BASE NEW``: a Python-backend model in two conch trees, A/B.

``bench.python_backend`` compares conch with Triton; this compares two conch trees (a change to
``conch/backends/python/`` and the commit before it) on the same Python-backend models, with
``bench.grpc_cpu_ab``'s measure: perf_analyzer at 32 gRPC clients, and the server's CPU per call
(the model processes are its children and are counted). The trees take turns going first. Models:

- ``tiny_python``: ``peer_code/triton_model.py`` on the ``tiny`` ONNX file, as ``bench.python_backend``
  serves it (16 floats in, the project's Python-backend benchmark);
- ``image_python``: an image-sized input (3x224x224 FP32, 602 KB a row) whose ``model.py`` returns
  each channel's mean, so that the tensor's trip dominates.

Prints every round, then each model's medians and worst rounds per tree, and new/base ratios.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.grpc_cpu_ab import measure
from bench.models import model_config, write_python_backend_repository

IMAGE_WIDTH = 3 * 224 * 224
MODELS = {"tiny_python": 16, "image_python": IMAGE_WIDTH}

IMAGE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            means = image.reshape(image.shape[0], 3, -1).mean(axis=2, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", means)]))
        return responses
"""


def write_repository(root: Path) -> Path:
    """``tiny_python`` (with ``bench.python_backend``'s BLS model beside it) and ``image_python``."""
    write_python_backend_repository(root, ["tiny"], onnx_callee=False)
    shutil.rmtree(root / "tiny_bls")
    (root / "image_python" / "1").mkdir(parents=True)
    (root / "image_python" / "1" / "model.py").write_text(IMAGE_MODEL)
    config = model_config("image_python", (IMAGE_WIDTH, 3), 'backend: "python"', max_batch_size=8)
    (root / "image_python" / "config.pbtxt").write_text(config)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.python_backend_ab", description=__doc__)
    parser.add_argument("base", type=Path, help="the tree to compare against (a git worktree, say)")
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--port", type=int, default=18210, help="first of the six ports used")
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    models = args.models.split(",")
    results: dict[tuple[str, str], list[tuple[float, float]]] = {(m, n): [] for m in models for n in trees}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        repository = write_repository(workdir / "repo")
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for model in models:
                for name in order:
                    port = args.port if name == "base" else args.port + 3
                    cost, rate = measure(
                        trees[name], repository, port, workdir, model=model, width=MODELS[model]
                    )
                    results[model, name].append((cost, rate))
                    print(
                        f"round {round_} {model} {name}: {cost:.1f} us CPU/call, {rate:,.0f} calls/s",
                        flush=True,
                    )
    for model in models:
        for name in trees:
            rows = results[model, name]
            us, rates = [u for u, _ in rows], [r for _, r in rows]
            print(
                f"{model} {name}: CPU/call median {statistics.median(us):.1f} us, worst {max(us):.1f}; "
                f"calls/s median {statistics.median(rates):,.0f}, worst {min(rates):,.0f}"
            )
        base, new = results[model, "base"], results[model, "new"]
        paired = [n[1] / b[1] for b, n in zip(base, new, strict=True)]
        print(
            f"{model} new/base calls/s per round: {', '.join(f'{r:.3f}' for r in paired)}; "
            f"median {statistics.median(paired):.3f}, worst {min(paired):.3f}; worst rounds "
            f"{min(r for _, r in new) / min(r for _, r in base):.3f}"
        )


if __name__ == "__main__":
    main()
