"""OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, row by row (strings hold integers).

simple_int8 and simple_string link to this file: one model.py, three types.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def as_numbers(array):
    if array.dtype != np.object_:
        return array
    return np.array([int(value) for value in array.ravel()], np.int32).reshape(array.shape)


def like(values, template):
    if template.dtype != np.object_:
        return values.astype(template.dtype)
    text = [str(value).encode() for value in values.ravel()]
    return np.array(text, dtype=np.object_).reshape(values.shape)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            first = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            second = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            a, b = as_numbers(first), as_numbers(second)
            outputs = [
                pb_utils.Tensor("OUTPUT0", like(a + b, first)),
                pb_utils.Tensor("OUTPUT1", like(a - b, first)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
