"""What the sequence examples check: the first request of a sequence answers its value plus one,
the others their value (the START control input is 1 on the first request only)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy().reshape(value.shape)
            answer = pb_utils.Tensor("OUTPUT", (value + start).astype(np.int32))
            responses.append(pb_utils.InferenceResponse([answer]))
        return responses
