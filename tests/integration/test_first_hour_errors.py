"""The errors a newcomer meets in their first hour name the fix, over HTTP and gRPC alike.

A typo in a model name gets Triton's words and the closest served names; a server that is not ready
says which models hold it back and which flag changes that; a batch over ``max_batch_size`` says where
the limit comes from; a repeated output is refused; an empty repository is a warning in the log. The
clients are tritonclient's, as a user's would be.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import ONNX_TYPES, add_sub_model, identity_model, write_repository
from tests.integration.server_process import ServerProcess

# iris-pipeline sets max_batch_size in its config; simple leaves it to --default-max-batch-size.
IRIS_CONFIG = 'name: "iris-pipeline"\nmax_batch_size: 2\n'
DEFAULT_MAX_BATCH_SIZE = "3"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_repository(
        tmp_path_factory.mktemp("first-hour"),
        {
            "iris-pipeline": (identity_model(ONNX_TYPES["FP32"]), IRIS_CONFIG),
            "simple": (add_sub_model(), None),
            "bad-config": (add_sub_model(), 'name: "bad-config"\nmax_batch_size: [ oops'),
        },
    )
    (root / "not-onnx" / "1").mkdir(parents=True)
    (root / "not-onnx" / "1" / "model.onnx").write_bytes(b"GIF89a: an image, not an ONNX model")
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository, "--default-max-batch-size", DEFAULT_MAX_BATCH_SIZE)


Client = Any  # tritonclient's HTTP or gRPC InferenceServerClient: the same methods, two modules


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[Client]:
    """A tritonclient client of each protocol; ``client.protocol`` says which."""
    module = httpclient if request.param == "http" else grpcclient
    url = server.http_url if request.param == "http" else server.grpc_url
    made = module.InferenceServerClient(url)
    made.protocol = request.param
    try:
        yield made
    finally:
        made.close()


def module_of(client: Client) -> Any:
    return httpclient if client.protocol == "http" else grpcclient


def status_of(client: Client, http: str, grpc: str) -> str:
    """The status tritonclient reports: the HTTP code, or the gRPC status code's name."""
    return http if client.protocol == "http" else f"StatusCode.{grpc}"


def rows_input(client: Client, rows: int, name: str = "INPUT0", width: int = 4) -> Any:
    tensor = module_of(client).InferInput(name, [rows, width], "FP32")
    tensor.set_data_from_numpy(np.ones((rows, width), dtype=np.float32))
    return tensor


def failure(call: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def assert_no_path(message: str, repository: Path) -> None:
    assert str(repository) not in message
    assert str(repository.resolve()) not in message


def test_an_unknown_model_gets_tritons_words_and_the_closest_name(client: Client, repository: Path) -> None:
    error = failure(lambda: client.infer("iris-pipline", [rows_input(client, 1)]))

    assert error.status() == status_of(client, "404", "NOT_FOUND")
    assert (
        error.message()
        == "Request for unknown model: 'iris-pipline' is not found; did you mean 'iris-pipeline'?"
    )


def test_an_unknown_model_far_from_every_name_gets_tritons_words_alone(client: Client) -> None:
    error = failure(lambda: client.get_model_metadata("resnet50"))

    assert error.status() == status_of(client, "404", "NOT_FOUND")
    assert error.message() == "Request for unknown model: 'resnet50' is not found"


def test_an_unknown_version_gets_tritons_words_and_the_served_versions(client: Client) -> None:
    error = failure(lambda: client.infer("iris-pipeline", [rows_input(client, 1)], model_version="7"))

    assert error.status() == status_of(client, "404", "NOT_FOUND")
    assert error.message() == (
        "Request for unknown model: 'iris-pipeline' version 7 is not found; its served versions are 1"
    )


def test_a_batch_over_a_configured_max_batch_size_points_at_config_pbtxt(client: Client) -> None:
    error = failure(lambda: client.infer("iris-pipeline", [rows_input(client, 3)]))

    assert error.status() == status_of(client, "400", "INVALID_ARGUMENT")
    message = error.message()
    assert message.startswith(
        "inference request batch-size must be <= 2 for 'iris-pipeline': input 'INPUT0' has batch size 3."
    )
    assert "The limit is max_batch_size in the model's config.pbtxt" in message
    assert "conch export, its max_batch_size= argument" in message
    assert "--default-max-batch-size" not in message


def test_a_batch_over_an_auto_completed_max_batch_size_points_at_the_server_flag(client: Client) -> None:
    inputs = [rows_input(client, 4, "INPUT0", 16), rows_input(client, 4, "INPUT1", 16)]

    error = failure(lambda: client.infer("simple", inputs))

    assert error.status() == status_of(client, "400", "INVALID_ARGUMENT")
    message = error.message()
    assert message.startswith("inference request batch-size must be <= 3 for 'simple'")
    assert "The limit is the server's --default-max-batch-size" in message
    assert "config.pbtxt does not set max_batch_size" in message


def test_an_output_requested_twice_is_refused_by_name(client: Client) -> None:
    module = module_of(client)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT0")]

    error = failure(lambda: client.infer("iris-pipeline", [rows_input(client, 1)], outputs=outputs))

    assert error.status() == status_of(client, "400", "INVALID_ARGUMENT")
    assert error.message().startswith("output 'OUTPUT0' already requested")


def test_each_output_once_is_still_answered(client: Client) -> None:
    outputs = [module_of(client).InferRequestedOutput("OUTPUT0")]

    result = client.infer("iris-pipeline", [rows_input(client, 2)], outputs=outputs)

    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones((2, 4), dtype=np.float32))


def test_not_ready_says_which_models_and_the_flag_that_changes_it(
    server: ServerProcess, repository: Path
) -> None:
    reply = server.request("GET", "/v2/health/ready")

    assert reply.status == 503
    message = reply.json()["error"]
    assert message.startswith("server is not ready: models not READY: 'bad-config' (")
    assert "'not-onnx' version 1 (model.onnx is not a loadable ONNX model" in message
    assert "'iris-pipeline'" not in message
    assert "'simple'" not in message
    assert "--strict-readiness false" in message
    assert_no_path(message, repository)


def test_strict_readiness_false_is_ready_with_the_same_failed_models(
    start_server: Callable[..., ServerProcess], repository: Path
) -> None:
    relaxed = start_server(repository, "--strict-readiness", "false")

    assert relaxed.request("GET", "/v2/health/ready").status == 200


def test_the_start_up_log_names_the_repository(server: ServerProcess, repository: Path) -> None:
    assert f"loading model repository {repository}" in server.log()


def test_an_empty_repository_is_served_with_a_warning(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    empty = tmp_path / "models"
    empty.mkdir()

    served = start_server(empty)

    assert served.request("POST", "/v2/repository/index", b"{}").json() == []
    log = served.log()
    # Whichever conch module warns (it moved once, with model control): the level and the words matter.
    warning = rf"WARNING conch[\w.]*: model repository {re.escape(str(empty))} has no model folders"
    assert re.search(warning, log), log
    assert "<name>/1/model.onnx" in log


def test_a_repository_with_models_gives_no_empty_warning(server: ServerProcess) -> None:
    assert "has no model folders" not in server.log()
