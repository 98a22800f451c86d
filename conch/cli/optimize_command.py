"""``conch optimize MODEL_DIR --int8 [--calibration SAMPLE]``: an int8 twin for edge devices.

Quantizes the model's newest fp32 ONNX version (or ``--from-version``) with ONNX Runtime, compares
the result with it on the release gate's figures, and writes it as a new version beside it when
agreement is at least ``--min-agreement``. The report (size, median latency per batch on this
machine, agreement, drift) goes to stdout as a table, or as JSON with ``--json``; progress to stderr.

Exit codes: 0 written; 1 refused (the figures missed their limits) or quantization failed, with
nothing written; 2 usage error (not a model folder, no ONNX version, a bad calibration file).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from conch.cli.arguments import at_least, ratio
from conch.optimizing import DEFAULT_MIN_AGREEMENT

#: What each gate check is called when it refuses, and which side of its limit fails.
_REFUSALS = {
    "agreement": "is below --min-agreement",
    "drift_fraction": "is above the release gate's max_drift_fraction",
}


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "optimize",
        help="quantize a model's ONNX version to int8, as a new version, when it still agrees",
        description="Quantize the newest fp32 ONNX version of MODEL_DIR to int8 (ONNX Runtime; dynamic, "
        "or static with --calibration), compare it with that version (agreement and drift as the release "
        "gate counts them, median latency per batch, size) and write it as a new version, the quantized "
        "twin, recorded in config.pbtxt's parameters. Exit 0: written; 1: refused or failed (nothing "
        "written); 2: usage error. Guide: conch docs edge.",
    )
    parser.add_argument("model_dir", type=Path, help="a model folder: config.pbtxt and <version>/model.onnx")
    parser.add_argument("--int8", action="store_true", help="quantize weights (and activations) to int8")
    parser.add_argument(
        "--calibration",
        type=Path,
        help="real input rows, .npy (one input) or .npz (one array per input) in the graph's shapes: "
        "static quantization calibrated on them, and the rows compared on (default: dynamic "
        "quantization, compared on the warm-up sample and rows varied from it)",
    )
    parser.add_argument(
        "--min-agreement",
        type=ratio,
        default=DEFAULT_MIN_AGREEMENT,
        help="share of rows whose prediction must stay the same, above 0 and at most 1 "
        f"(default {DEFAULT_MIN_AGREEMENT})",
    )
    parser.add_argument(
        "--version", type=at_least(1), help="the twin's version number (default: the highest plus one)"
    )
    parser.add_argument(
        "--from-version",
        type=at_least(1),
        help="the fp32 version to quantize (default: the newest one that is not itself a twin)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from conch.cli.progress import Steps
    from conch.optimizing.optimizer import optimize_int8
    from conch.optimizing.source import OptimizeError

    if not args.int8:
        print("conch optimize: say how to optimize: --int8 (the one optimization so far)", file=sys.stderr)
        return 2
    with Steps(prefix="conch optimize: ") as steps:
        try:
            optimized = optimize_int8(
                args.model_dir,
                calibration=args.calibration,
                min_agreement=args.min_agreement,
                version=args.version,
                from_version=args.from_version,
                progress=steps.step,
            )
        except OptimizeError as exc:
            print(f"conch optimize: {exc}", file=sys.stderr)
            return 2 if exc.usage else 1
    if args.json:
        print(json.dumps(_document(optimized), indent=2, sort_keys=True))
    else:
        _print_report(optimized)
    fp32, int8 = optimized.comparison.fp32, optimized.comparison.int8
    if int8.size_bytes >= fp32.size_bytes:
        print(
            f"conch optimize: warning: the int8 version is not smaller ({_size(int8.size_bytes)} against "
            f"{_size(fp32.size_bytes)}): in a model this small the quantization scales and the extra "
            "nodes outweigh the weights saved; int8 pays off where weights dominate the file",
            file=sys.stderr,
        )
    if not optimized.written:
        failures = "; ".join(
            f"{check.name} {check.value:.4f} {_REFUSALS[check.name]} {check.limit:g}"
            for check in optimized.comparison.judgement.failures
            if check.value is not None
        )
        advice = (
            "Calibrate on rows closer to the traffic"
            if optimized.method.value == "static"
            else "Static quantization on real rows (--calibration) often agrees better than dynamic"
        )
        print(
            f"conch optimize: refused: {failures}. Nothing was written. {advice}; or keep serving the fp32 "
            "version.",
            file=sys.stderr,
        )
        return 1
    print(  # with --json, stdout holds the document and nothing else
        f"wrote version {optimized.twin_version} of '{optimized.model}', the int8 twin of version "
        f"{optimized.source_version}, to {args.model_dir / str(optimized.twin_version)}",
        file=sys.stderr if args.json else sys.stdout,
    )
    return 0


def _document(optimized: Any) -> dict[str, Any]:
    return {
        "model": optimized.model,
        "source_version": optimized.source_version,
        "twin_version": optimized.twin_version,
        "method": optimized.method.value,
        "rows_from": optimized.rows_from,
        "written": optimized.written,
        **optimized.comparison.as_json(),
    }


def _print_report(optimized: Any) -> None:
    from conch.cli.progress import print_table

    figures = optimized.comparison
    fp32, int8 = figures.fp32, figures.int8
    judged = {check.name: check for check in figures.judgement.checks}
    drift = "no float output" if figures.drift_fraction is None else f"{figures.drift_fraction:.4f}"
    rows = [
        (
            "size on disk",
            _size(fp32.size_bytes),
            _size(int8.size_bytes),
            _times(int8.size_bytes, fp32.size_bytes),
        ),
        (
            f"median latency, batch of {figures.batch_rows}",
            f"{fp32.median_batch_ms:.3f} ms",
            f"{int8.median_batch_ms:.3f} ms",
            _times(int8.median_batch_ms, fp32.median_batch_ms),
        ),
        (
            "agreement",
            "",
            f"{figures.agreement:.4f}",
            f"at least {figures.min_agreement:g}: {judged['agreement'].outcome}",
        ),
        (
            "drift fraction",
            "",
            drift,
            f"at most {judged['drift_fraction'].limit:g}: {judged['drift_fraction'].outcome}",
        ),
    ]
    compared, counted = _count(figures.compared, "request"), _count(figures.rows, "row")
    title = (
        f"'{optimized.model}' int8 ({optimized.method.value}) against fp32, {compared} compared "
        f"({counted}: {optimized.rows_from})"
    )
    columns = (
        "figure",
        f"fp32 (version {fp32.version})",
        f"int8 (version {int8.version})",
        "int8/fp32, limit",
    )
    print_table(columns, rows, title=title)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _size(size: int) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def _times(value: float, reference: float) -> str:
    return f"{value / reference:.2f}x" if reference else ""
