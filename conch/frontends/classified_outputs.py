"""Replaces the outputs a client asked to classify by their top classes, before a frontend encodes them.

Triton ranks in its frontends too, once the model has answered: the server API returns values, and
both HTTP and gRPC call :func:`classify_outputs` on the response. The ranking itself is
:func:`conch.core.classification.top_k`; this module only finds what it needs for one response: the
version's config (is the model batching, which output has which ``label_filename``) and the labels.
"""

from __future__ import annotations

from conch.core.classification import labels_for, top_k
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.models.served_models import ServedModels


def classify_outputs(
    repository: ServedModels, request: InferenceRequest, response: InferenceResponse
) -> None:
    """Rank, in place, each output of ``response`` that ``request`` asked classes of."""
    counts = {output.name: output.classification for output in request.outputs if output.classification}
    if not counts:
        return
    model = repository.models.get(response.model_name)
    number = int(response.model_version) if response.model_version.isdigit() else None
    version = model.versions.get(number) if model is not None and number is not None else None
    if version is not None:
        batching = version.config.max_batch_size > 0
        label_files = {entry.name: entry.label_filename for entry in version.config.output}
    else:  # the BUSINESS fallback answered: no version, and no labels
        batching = model is not None and model.max_batch_size > 0
        label_files = {}
    folder = repository.root / response.model_name
    version_folder = folder / str(number) if version is not None else None
    for index, tensor in enumerate(response.outputs):
        count = counts.get(tensor.name)
        if count:
            labels = labels_for(folder, label_files.get(tensor.name, ""), response.model_name, version_folder)
            ranked = top_k(tensor.name, tensor.data, count, batching, labels)
            response.outputs[index] = Tensor(tensor.name, "BYTES", ranked)
