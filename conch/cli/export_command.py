"""``conch export FILE --sample SAMPLE --repository DIR --name NAME``: a model file to a model folder.

FILE is an ``.onnx`` file, a TorchScript archive (``.pt``/``.pth``, written by ``torch.jit.save``) or
a scikit-learn model saved with joblib or pickle (``.joblib``/``.pkl``/``.pickle``). Unpickling runs
whatever code the file holds, so those are refused unless ``--trust-pickle`` says where it came from
is trusted. SAMPLE is ``.npy`` (one array, one input) or ``.npz`` (one array per input, or per column
of a DataFrame pipeline, named like it); both load with ``allow_pickle=False``, so strings must be
numpy unicode arrays (``dtype=str``).

Exit codes: 0 exported; 1 refused or failed, with nothing written; 2 usage error (a missing file, an
unknown suffix, a bad number). Progress and warnings go to stderr, the files written to stdout.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conch.cli.arguments import at_least
from conch.cli.reference_flag import add_reference_argument

if TYPE_CHECKING:
    from conch.cli.progress import Steps

ONNX_SUFFIXES = (".onnx",)
TORCHSCRIPT_SUFFIXES = (".pt", ".pth")
PICKLE_SUFFIXES = (".joblib", ".pkl", ".pickle")


class CommandError(Exception):
    """A failure to report as ``conch export: message`` with its exit code (1 refused, 2 usage)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "export",
        help="export an ONNX, TorchScript or scikit-learn model file to a versioned model folder",
        description="Convert FILE to ONNX, check it against the original on SAMPLE, and write "
        "<repository>/<name>/<version>/ with model.onnx and metadata.json, plus config.pbtxt and a "
        "warm-up sample. Exit 0: exported; 1: refused or failed (nothing written); 2: usage error.",
    )
    parser.add_argument("file", type=Path, help="model file: .onnx, .pt/.pth (TorchScript), .joblib/.pkl")
    parser.add_argument(
        "--sample",
        type=Path,
        required=True,
        help="a few real input rows: .npy, or .npz with one array per input",
    )
    parser.add_argument("--repository", type=Path, required=True, help="model repository folder")
    parser.add_argument("--name", required=True, help="model name (the model folder)")
    parser.add_argument(
        "--max-batch-size",
        type=at_least(0),
        help="largest batch the dynamic batcher forms, 0 for no batching (default 32)",
    )
    parser.add_argument(
        "--version", type=at_least(1), help="version number (default: the highest existing one plus one)"
    )
    add_reference_argument(parser)
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load a .joblib/.pkl file, which runs any code it holds: only for files you trust",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from conch.cli.progress import Steps

    with Steps(prefix="conch export: ") as steps:
        code, version_dir = _export(args, steps)
    if version_dir is not None:
        _print_written(version_dir)
    return code


def _export(args: argparse.Namespace, steps: Steps) -> tuple[int, Path | None]:
    """Export with each step shown by ``steps`` (the library logs its steps; they become steps here)."""
    from conch.cli.progress import StepsFromLog
    from conch.exporting import ExportError, export

    handler = StepsFromLog(steps)
    logger = logging.getLogger("conch.exporting")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        steps.step(f"loading {args.file}")
        model = _load_model(args.file, args.trust_pickle)
        sample = _load_sample(args.sample)
        options: dict[str, Any] = (
            {} if args.max_batch_size is None else {"max_batch_size": args.max_batch_size}
        )
        if args.reference is not None:
            options["reference"] = args.reference
        # Python's default filters still apply (deprecations stay hidden); what passes them is shown
        # in the command's own voice, once each.
        with warnings.catch_warnings(record=True) as caught:
            try:
                version_dir = export(
                    model, sample, repository=args.repository, name=args.name, version=args.version, **options
                )
            finally:
                for message in dict.fromkeys(str(w.message) for w in caught):
                    steps.note(f"conch export: warning: {message}")
    except CommandError as exc:
        steps.note(f"conch export: {exc}")
        return exc.exit_code, None
    except ExportError as exc:
        steps.note(f"conch export: {exc}")
        return 1, None
    except OSError as exc:
        steps.note(f"conch export: cannot write to '{args.repository}': {exc}")
        return 1, None
    finally:
        logger.removeHandler(handler)
    return 0, version_dir


def _load_model(path: Path, trust_pickle: bool) -> Any:
    if not path.is_file():
        raise CommandError(f"model file '{path}' does not exist", exit_code=2)
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        return path
    if suffix in TORCHSCRIPT_SUFFIXES:
        return _load_torchscript(path)
    if suffix in PICKLE_SUFFIXES:
        if not trust_pickle:
            raise CommandError(
                f"refusing to load '{path}': unpickling runs any code the file holds. Pass "
                "--trust-pickle if you trust where it came from, or export to ONNX in the notebook "
                "with conch.export"
            )
        return _load_pickle(path)
    known = ", ".join(ONNX_SUFFIXES + TORCHSCRIPT_SUFFIXES + PICKLE_SUFFIXES)
    raise CommandError(f"'{path}' has an unknown suffix; model files are {known}", exit_code=2)


def _load_torchscript(path: Path) -> Any:
    try:
        import torch
    except ImportError:
        raise CommandError(
            "TorchScript files need torch: pip install -e '.[torch]' in conch's source folder"
        ) from None
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError) as exc:
        raise CommandError(
            f"'{path}' is not a TorchScript archive (torch.jit.save): {exc}. A module saved with "
            "torch.save is a pickle: load it in Python and call conch.export"
        ) from None


def _load_pickle(path: Path) -> Any:
    try:
        import joblib
    except ImportError:
        raise CommandError(
            "scikit-learn files need scikit-learn and skl2onnx installed: pip install -e '.[export]'"
        ) from None

    try:
        return joblib.load(path)
    except Exception as exc:  # unpickling can fail in any way the pickled code chooses
        raise CommandError(f"cannot load '{path}': {type(exc).__name__}: {exc}") from None


def _load_sample(path: Path) -> Any:
    from conch.exporting.samples import SampleFileError, read_sample_file

    try:
        return read_sample_file(path)
    except SampleFileError as exc:
        raise CommandError(str(exc), exit_code=2 if exc.usage else 1) from None


def _print_written(version_dir: Path) -> None:
    from conch.cli.progress import print_summary
    from conch.packaging.metadata import METADATA_FILENAME, read_metadata

    metadata = read_metadata(version_dir)
    model_dir = version_dir.parent
    written = [version_dir / name for name in sorted([*metadata.files, METADATA_FILENAME])]
    written += [model_dir / name for name in sorted(metadata.model_files)]
    title = f"exported '{metadata.name}' version {metadata.version} to {version_dir}"
    # On a terminal the table names each file within the model folder, so paths never get cut.
    print_summary(
        [title, *(f"  {path}" for path in written)],
        ["file", "bytes"],
        [(path.relative_to(model_dir), f"{path.stat().st_size:,}") for path in written],
        title=title,
    )
