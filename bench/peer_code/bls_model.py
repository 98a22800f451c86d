"""Triton python-backend BLS model: every request of the batch is sent on to another model.

The callee is the config's ``callee`` parameter, so one file serves every pairing. ``execute`` is a
coroutine that issues one ``async_exec`` per request and awaits them together, as Triton's BLS
examples do for concurrency: the callee's own dynamic batcher joins them again. The same file runs
unmodified on Triton 2.51 and on conch.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Forwards ``INPUT0`` to the callee and answers with its ``OUTPUT0``."""

    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.callee = config["parameters"]["callee"]["string_value"]

    async def execute(self, requests: list[Any]) -> list[Any]:
        calls = [
            pb_utils.InferenceRequest(
                model_name=self.callee,
                requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
            ).async_exec()
            for request in requests
        ]
        responses = []
        for answer in await asyncio.gather(*calls):
            if answer.has_error():
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message()))
                )
            else:
                output = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
                responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
