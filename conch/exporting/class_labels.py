"""A classifier's classes: recorded in ``metadata.json`` and written as the labels of its output.

Triton's classification extension (``InferRequestedOutput(name, class_count=k)``) answers
``"score:index:label"`` when the output's ``label_filename`` names a file of one label per line. The
file is written into the version folder, because versions may be fitted on different classes and each
must keep its own; conch looks for ``label_filename`` in the serving version's folder first, then in
the model folder, where Triton looks (``conch.frontends.classified_outputs``). Triton refuses to load
a model whose label file is missing, so the first export of a model also writes a copy into the model
folder: Triton then loads it and names the classes of that export.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def label_filename(output: str) -> str:
    """The label file's name for ``output``: the output's name made a safe file name."""
    return f"{_UNSAFE.sub('_', output)}_labels.txt"


def write_labels(version_dir: Path, classes: Mapping[str, list[Any]]) -> None:
    """One label file per class-valued output, one class per line, in the output's order."""
    for output, labels in classes.items():
        text = "".join(f"{' '.join(str(label).splitlines())}\n" for label in labels)
        (version_dir / label_filename(output)).write_text(text, encoding="utf-8")


def name_labels(config: mc.ModelConfig, classes: Mapping[str, list[Any]], written: bool) -> None:
    """Point each class-valued output of ``config`` at its label file.

    A kept config (``written`` false) is an operator's file and is not changed; an output without a
    ``label_filename`` there is reported, with the line to add.
    """
    for entry in config.output:
        if entry.name not in classes:
            continue
        if written:
            entry.label_filename = label_filename(entry.name)
        elif entry.label_filename != label_filename(entry.name):
            log.info(
                "the kept config.pbtxt names no labels for output '%s': add label_filename: \"%s\" to it "
                "for the classification extension to name the classes",
                entry.name,
                label_filename(entry.name),
            )
