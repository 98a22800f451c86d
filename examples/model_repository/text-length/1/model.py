"""text-length: the characters and words of each text, a Triton Python-backend model.

It is in the bundled repository to show the Python backend beside the ONNX models, with what ONNX
does not do well: text. Each row of ``text`` is one UTF-8 string; ``characters`` counts Unicode code
points (``"naïve"`` is 5, though it is 6 bytes) and ``words`` counts runs of non-blank characters, as
``str.split()`` does. It needs numpy only, so it serves with conch's own dependencies.

A row that is not valid UTF-8 fails its request with INVALID_ARG (HTTP 400, gRPC INVALID_ARGUMENT),
saying which row and where; the other requests of the batch are answered.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class NotTextError(ValueError):
    """A row of ``text`` that is not UTF-8; the message is for the client."""


def decoded(row: bytes, index: int) -> str:
    try:
        return row.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotTextError(
            f"input 'text' row {index} is not UTF-8 text: byte {row[exc.start]:#04x} at position "
            f"{exc.start} cannot start or continue a character; send text encoded as UTF-8"
        ) from None


class TritonPythonModel:
    """No state: ``execute`` answers each request of the batch on its own."""

    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        rows = pb_utils.get_input_tensor_by_name(request, "text").as_numpy()
        try:
            texts = [decoded(bytes(row[0]), index) for index, row in enumerate(rows)]
        except NotTextError as exc:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
            )
        characters = np.array([[len(text)] for text in texts], dtype=np.int64)
        words = np.array([[len(text.split())] for text in texts], dtype=np.int64)
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor("characters", characters), pb_utils.Tensor("words", words)]
        )
