"""A decoupled model: one response per element of IN, each after its DELAY in microseconds, then
the final flag."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            for index, (value, delay) in enumerate(zip(values, delays, strict=False)):
                time.sleep(float(delay) / 1e6)
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(outputs))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
