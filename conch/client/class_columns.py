"""Names for the columns of a class-valued output: the classes, as the served version's labels say.

An exported classifier's probability output has one value per class, and its ``label_filename``
names them, version by version. The labels are read the way any Triton client can read them: one
request for the first row with the classification extension (``class_count`` = every class), whose
answers are ``"score:index:label"``. It asks the very version that answered the frame, so a newer
version with other classes cannot name the columns of an older one.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def served_version(result: Any) -> str:
    """The version that answered ``result`` (HTTP or gRPC tritonclient result)."""
    response = result.get_response()
    return str(response["model_version"] if isinstance(response, dict) else response.model_version)


def class_labels(
    client: Any, client_module: Any, model: str, version: str, first_row: list[Any], output: str, count: int
) -> list[str] | None:
    """The ``count`` labels of ``output`` in index order, or None when the server gives none."""
    result = client.infer(
        model,
        first_row,
        model_version=version,
        outputs=[client_module.InferRequestedOutput(output, class_count=count)],
    )
    labels: dict[int, str] = {}
    for entry in np.asarray(result.as_numpy(output)).ravel():
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        parts = text.split(":", 2)
        if len(parts) < 3:
            return None
        labels[int(parts[1])] = parts[2]
    if sorted(labels) != list(range(count)):
        return None
    return [labels[index] for index in range(count)]
