"""``python -m bench.int8_edge``: what ``conch optimize --int8`` gives on this machine, as a Markdown table.

The figures ``docs/edge.md`` quotes. Four models, each exported with ``conch.export`` and quantized
dynamically and statically (calibrated on the rows it is compared on), with the command's own report:

- the tests' two models: the scikit-learn MLP on the bundled digits and the tiny torch CNN;
- two with enough weights for int8 to matter: a wide torch MLP (256 -> 2048 -> 2048 -> 10, 4.7M
  weights, random) and a torch CNN on 3x32x32 images (32-64-128 channels, random weights).

Random weights are fine here: agreement compares two forms of the same function. A run takes about a
minute; nothing downloads.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from conch.exporting import export
from conch.optimizing.optimizer import Optimized, optimize_int8
from tests.fixtures.notebook_models import digits, digits_mlp, images, small_cnn


def wide_mlp() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    )


def image_cnn() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).eval()


def normal(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(1).normal(0, 1, shape).astype(np.float32)


#: name -> (builds the model, its export sample, the rows it is calibrated and compared on)
MODELS: dict[str, tuple[Callable[[], Any], Callable[[], np.ndarray], Callable[[], np.ndarray]]] = {
    "digits MLP (tests)": (digits_mlp, lambda: digits(slice(0, 20))[0], lambda: digits(slice(1000, None))[0]),
    "tiny CNN (tests)": (small_cnn, lambda: images(16), lambda: images(200, seed=1)),
    "wide MLP": (wide_mlp, lambda: normal((8, 256)), lambda: normal((512, 256))),
    "image CNN": (image_cnn, lambda: normal((8, 3, 32, 32)), lambda: normal((256, 3, 32, 32))),
}


def measure(root: Path) -> list[tuple[str, Optimized]]:
    results = []
    for label, (build, sample, rows) in MODELS.items():
        name = label.split(" (")[0].replace(" ", "-").lower()
        export(build(), sample(), repository=root / "fp32", name=name)
        np.save(root / f"{name}.npy", rows())
        for calibration in (None, root / f"{name}.npy"):
            model_dir = root / ("static" if calibration else "dynamic") / name
            shutil.copytree(root / "fp32" / name, model_dir)
            results.append((label, optimize_int8(model_dir, calibration=calibration, min_agreement=0.5)))
    return results


def table(results: list[tuple[str, Optimized]]) -> str:
    lines = [
        "| model | int8 | rows | agreement | drift fraction | size | median batch |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, done in results:
        c = done.comparison
        drift = "-" if c.drift_fraction is None else f"{c.drift_fraction:.4f}"
        lines.append(
            f"| {label} | {done.method.value} | {c.rows} | {c.agreement:.4f} | {drift} | "
            f"{c.fp32.size_bytes / 1e3:,.1f} kB -> {c.int8.size_bytes / 1e3:,.1f} kB "
            f"({c.int8.size_bytes / c.fp32.size_bytes:.2f}x) | {c.fp32.median_batch_ms:.3f} ms -> "
            f"{c.int8.median_batch_ms:.3f} ms ({c.int8.median_batch_ms / c.fp32.median_batch_ms:.2f}x, "
            f"batch of {c.batch_rows}) |"
        )
    return "\n".join(lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(table(measure(Path(folder))))


if __name__ == "__main__":
    main()
