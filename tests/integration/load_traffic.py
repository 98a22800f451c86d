"""Client threads that send requests without pause until stopped, half over HTTP and half over gRPC.

Each answer is kept with the time it was sent, how long it took, the version that answered, its input
and its output, and every failure with its message, so a test can say what the clients saw while
something changed under them (a hot swap, a release). The model takes one FP32 input ``INPUT0``
[1, 4] and answers ``OUTPUT0``; ``make_input`` chooses each request's values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.server_process import ServerProcess

CLIENTS = 32


def ones() -> np.ndarray:
    return np.ones((1, 4), np.float32)


@dataclass(frozen=True)
class Answer:
    sent: float
    version: int
    values: np.ndarray
    output: np.ndarray
    #: From sending the request to having its answer, as the client saw it.
    seconds: float = 0.0


@dataclass
class Traffic:
    """``CLIENTS`` threads on ``model`` until :meth:`finish`."""

    server: ServerProcess
    model: str
    make_input: Callable[[], np.ndarray] = ones
    clients: int = CLIENTS
    stop: threading.Event = field(default_factory=threading.Event)
    answers: list[Answer] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Traffic:
        for index in range(self.clients):
            thread = threading.Thread(target=self._send, args=(index % 2 == 1,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _send(self, over_http: bool) -> None:
        module = httpclient if over_http else grpcclient
        if over_http:
            client = httpclient.InferenceServerClient(self.server.http_url, network_timeout=60)
        else:
            client = grpcclient.InferenceServerClient(self.server.grpc_url)
        while not self.stop.is_set():
            values = self.make_input()
            request = module.InferInput("INPUT0", [1, 4], "FP32")
            request.set_data_from_numpy(values)
            sent = time.monotonic()
            try:
                result = client.infer(self.model, [request])
            except InferenceServerException as exc:
                self.failures.append(f"{'HTTP' if over_http else 'gRPC'}: {exc}")
                continue
            response = result.get_response()
            version = response["model_version"] if over_http else response.model_version
            seconds = time.monotonic() - sent
            self.answers.append(Answer(sent, int(version), values, result.as_numpy("OUTPUT0"), seconds))
