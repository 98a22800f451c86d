"""Walking a fitted scikit-learn model: its steps, and the step that first sees the notebook's data."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

#: A change a part needs before skl2onnx sees it: returns whether it applies, and makes it if asked.
Patch = Callable[[Any, bool], bool]


def fitted_parts(estimator: Any) -> Iterator[Any]:
    """The estimator and every fitted step in it: a ColumnTransformer's are clones in ``transformers_``."""
    yield estimator
    for attribute in ("steps", "transformers_", "transformer_list"):
        for entry in getattr(estimator, attribute, None) or []:
            if hasattr(entry[1], "get_params"):
                yield from fitted_parts(entry[1])


def first_step(model: Any) -> Any:
    """The step that receives the data ``fit`` and ``predict`` were given (through nested pipelines)."""
    first = model
    while hasattr(first, "steps"):
        first = first.steps[0][1]
    return first


def patched_copy(model: Any, patches: list[Patch]) -> Any:
    """``model`` itself when no patch applies to any part, else a deep copy with the patches made.

    The notebook's model is never changed, and a large forest is copied only when it needs a patch.
    """
    if not any(patch(part, False) for part in fitted_parts(model) for patch in patches):
        return model
    converted = copy.deepcopy(model)
    for part in fitted_parts(converted):
        for patch in patches:
            patch(part, True)
    return converted
