"""digit-dedup: a PNG in, the ids of its nearest catalogue images and their distances out.

For each request it calls two models of the repository by BLS, digit-preprocess (PNG to pixels, the
example's only decoder) and digit-embedder (pixels to an embedding, ONNX), then searches a faiss index
of the catalogue's embeddings (``digits.faiss`` beside this file, made by
examples/image_dedup/build.py). Ids are positions in scikit-learn's ``load_digits()``; distances are
squared L2 distances between embeddings (faiss's ``IndexFlatL2``), so a catalogue image finds itself
at 0.

``execute`` is a coroutine: the requests of a batch await their BLS calls together instead of one
after the other. A request whose image is refused gets digit-preprocess's error, kind included (a
non-PNG is INVALID_ARG: HTTP 400), and the others are answered.
"""

import asyncio
import json
import os

import faiss
import numpy as np
import triton_python_backend_utils as pb_utils

INDEX_FILE = "digits.faiss"


class TritonPythonModel:
    """Loads the index once per instance; answers each request from it."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        # The config is the one place that says how many neighbours come back: the dims of "ids".
        self.neighbours = pb_utils.get_output_config_by_name(config, "ids")["dims"][-1]
        path = os.path.join(args["model_repository"], args["model_version"], INDEX_FILE)
        self.index = faiss.read_index(path)
        # A search over 1797 embeddings takes microseconds; OpenMP threads would only compete with
        # the server's own for the cores.
        faiss.omp_set_num_threads(1)
        pb_utils.Logger.log_info(
            f"{path}: {self.index.ntotal} embeddings of {self.index.d} values, {self.neighbours} neighbours"
        )

    async def execute(self, requests):
        return list(await asyncio.gather(*(self._answer(request) for request in requests)))

    async def _answer(self, request):
        image = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
        pixels = await _call("digit-preprocess", "image", image, "pixels")
        if isinstance(pixels, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=pixels)
        embedding = await _call("digit-embedder", "pixels", pixels, "embedding")
        if isinstance(embedding, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=embedding)
        distances, ids = self.index.search(np.ascontiguousarray(embedding), self.neighbours)
        return pb_utils.InferenceResponse(
            [
                pb_utils.Tensor("ids", ids.astype(np.int64)),
                pb_utils.Tensor("distances", distances.astype(np.float32)),
            ]
        )


async def _call(model_name, input_name, value, output_name):
    """One BLS call with one input and one output: the output's array, or the callee's error."""
    request = pb_utils.InferenceRequest(
        model_name=model_name,
        inputs=[pb_utils.Tensor(input_name, value)],
        requested_output_names=[output_name],
    )
    response = await request.async_exec()
    if response.has_error():
        return response.error()
    return pb_utils.get_output_tensor_by_name(response, output_name).as_numpy()
