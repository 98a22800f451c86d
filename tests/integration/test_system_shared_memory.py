"""Triton's system shared-memory extension, with tritonclient's own shared-memory utilities, over
HTTP and gRPC against a real conch serve: register, status and unregister; numeric and BYTES tensors
read from and written to regions at offsets; bad offsets, sizes and keys refused; a region
unregistered while a request uses it; CUDA shared memory refused; and ``--workers 2`` refusing it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.fixtures.onnx_models import (
    ADD_SUB_CONFIG,
    add_sub_model,
    slow_identity_model,
    string_model,
    write_repository,
)
from tests.integration.server_process import ServerProcess

STRINGS_CONFIG = """
name: "strings"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
SLOW_CONFIG = """
name: "slow"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(
        tmp_path_factory.mktemp("models"),
        {
            "simple": (add_sub_model(), ADD_SUB_CONFIG.replace("{name}", "simple")),
            "strings": (string_model(), STRINGS_CONFIG),
            "slow": (slow_identity_model(width=2048, layers=24), SLOW_CONFIG),
        },
    )


@pytest.fixture(params=["http", "grpc"])
def protocol(request: pytest.FixtureRequest, http_client: Any, grpc_client: Any) -> Iterator[tuple[Any, Any]]:
    module, client = (httpclient, http_client) if request.param == "http" else (grpcclient, grpc_client)
    yield module, client
    client.unregister_system_shared_memory()


@pytest.fixture
def objects() -> Iterator[Callable[[int], tuple[str, Any]]]:
    """Creates POSIX shared-memory objects as a client does; destroyed after the test."""
    made: list[Any] = []

    def create(size: int) -> tuple[str, Any]:
        key = f"/conch-test-{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(key[1:], key, size)
        made.append(handle)
        return key, handle

    yield create
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def status_of(module: Any, client: Any, name: str = "") -> list[dict[str, Any]]:
    """The status as HTTP's list of regions, whichever the protocol."""
    if module is httpclient:
        return list(client.get_system_shared_memory_status(region_name=name))
    answer = client.get_system_shared_memory_status(region_name=name, as_json=True)
    return [
        {k: int(v) if k in ("offset", "byte_size") else v for k, v in region.items()}
        for region in answer.get("regions", {}).values()
    ]


def test_register_status_and_unregister(protocol: tuple[Any, Any], objects: Callable[..., Any]) -> None:
    module, client = protocol
    key_a, _ = objects(128)
    key_b, _ = objects(64)
    client.register_system_shared_memory("a", key_a, 96, offset=32)
    client.register_system_shared_memory("b", key_b, 64)

    assert sorted(status_of(module, client), key=lambda r: r["name"]) == [
        {"name": "a", "key": key_a, "offset": 32, "byte_size": 96},
        {"name": "b", "key": key_b, "byte_size": 64, **({"offset": 0} if module is httpclient else {})},
    ]
    assert [r["name"] for r in status_of(module, client, "b")] == ["b"]

    client.unregister_system_shared_memory("a")
    assert [r["name"] for r in status_of(module, client)] == ["b"]
    client.unregister_system_shared_memory()
    assert status_of(module, client) == []
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region: 'a'"):
        status_of(module, client, "a")


def test_numeric_inputs_and_outputs_in_regions_at_offsets(
    protocol: tuple[Any, Any], objects: Callable[..., Any]
) -> None:
    module, client = protocol
    in_key, in_handle = objects(128)
    out_key, out_handle = objects(16 + 128)
    first = np.arange(16, dtype=np.float32).reshape(1, 16)
    second = np.full((1, 16), 0.5, dtype=np.float32)
    shm.set_shared_memory_region(in_handle, [first, second])
    client.register_system_shared_memory("in", in_key, 128)
    client.register_system_shared_memory("out", out_key, 128, offset=16)  # the region starts 16 bytes in

    inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("in", 64)
    inputs[1].set_shared_memory("in", 64, offset=64)
    outputs = [module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("out", 64, offset=64)
    outputs[1].set_shared_memory("out", 64)

    result = client.infer("simple", inputs, outputs=outputs)

    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=80), first + second
    )
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=16), first - second
    )
    entry = result.get_output("OUTPUT0")
    if module is httpclient:  # as Triton: no data and no parameters (perf_analyzer's client needs that)
        assert entry == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
    else:
        assert list(entry.shape) == [1, 16]
        assert result.get_response().raw_output_contents[0] == b""


def test_bytes_inputs_and_outputs_in_regions(protocol: tuple[Any, Any], objects: Callable[..., Any]) -> None:
    module, client = protocol
    text = np.array([[b"hello"], [b""], ["caf\u00e9".encode()]], dtype=object)
    serialized = serialize_byte_tensor(text)  # as Triton's string shared-memory examples do
    size = len(serialized.item())
    in_key, in_handle = objects(size + 8)
    out_key, out_handle = objects(size + 8)
    shm.set_shared_memory_region(in_handle, [serialized], offset=8)
    client.register_system_shared_memory("text-in", in_key, size + 8)
    client.register_system_shared_memory("text-out", out_key, size + 8)

    tensor = module.InferInput("TEXT", [3, 1], "BYTES")
    tensor.set_shared_memory("text-in", size, offset=8)
    output = module.InferRequestedOutput("TEXT_OUT")
    output.set_shared_memory("text-out", size + 8)
    client.infer("strings", [tensor], outputs=[output])

    answer = shm.get_contents_as_numpy(out_handle, np.object_, [3, 1])
    assert answer.tolist() == text.tolist()


def fp32_inputs(module: Any, region: str, size: int, offset: int = 0) -> list[Any]:
    inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_shared_memory(region, size, offset=offset)
    return inputs


@pytest.mark.parametrize(
    ("size", "offset", "words"),
    [
        (64, 128, "Invalid offset for shared memory region: 'in'"),
        (64, 96, "Invalid offset + byte size for shared memory region: 'in'"),
        (32, 0, "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 32"),
    ],
    ids=["offset-past-the-region", "size-past-the-region", "size-unlike-the-shape"],
)
def test_bad_offsets_and_sizes_are_refused(
    protocol: tuple[Any, Any], objects: Callable[..., Any], size: int, offset: int, words: str
) -> None:
    module, client = protocol
    key, _ = objects(128)
    client.register_system_shared_memory("in", key, 128)

    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", fp32_inputs(module, "in", size, offset))

    assert caught.value.message().startswith(words)
    assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_an_output_region_too_small_is_refused(
    protocol: tuple[Any, Any], objects: Callable[..., Any]
) -> None:
    module, client = protocol
    key, handle = objects(128)
    shm.set_shared_memory_region(handle, [np.ones((1, 16), np.float32), np.ones((1, 16), np.float32)])
    client.register_system_shared_memory("io", key, 128)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("io", 32, offset=64)

    with pytest.raises(
        InferenceServerException, match=r"for output 'OUTPUT0' \(32 bytes\) should be at least 64"
    ):
        client.infer(
            "simple", [*fp32_inputs(module, "io", 64)[:1], *_second_from(module, "io")], outputs=[output]
        )


def _second_from(module: Any, region: str) -> list[Any]:
    tensor = module.InferInput("INPUT1", [1, 16], "FP32")
    tensor.set_shared_memory(region, 64, offset=64)
    return [tensor]


def test_an_unknown_region_is_not_found(protocol: tuple[Any, Any]) -> None:
    module, client = protocol
    with pytest.raises(InferenceServerException) as caught:
        client.infer("simple", fp32_inputs(module, "nowhere", 64))

    assert caught.value.message().startswith("Unable to find shared memory region: 'nowhere'")
    assert caught.value.status() in ("404", "StatusCode.NOT_FOUND")


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("/../../etc/passwd", "invalid shared memory key '/../../etc/passwd'"),
        ("/dev/shm/x", "invalid shared memory key '/dev/shm/x'"),
        ("..", "invalid shared memory key '..'"),
        ("/conch-test-never-created", "Unable to open shared memory region: '/conch-test-never-created'"),
    ],
    ids=["dot-dot", "a-path", "parent", "missing-object"],
)
def test_bad_keys_are_refused_without_server_paths(protocol: tuple[Any, Any], key: str, words: str) -> None:
    _, client = protocol
    with pytest.raises(InferenceServerException) as caught:
        client.register_system_shared_memory("bad", key, 8)

    assert caught.value.message().startswith(words)
    assert "/dev/shm/conch" not in caught.value.message().replace(key, "")


def test_a_region_past_its_object_or_registered_twice_is_refused(
    protocol: tuple[Any, Any], objects: Callable[..., Any]
) -> None:
    _, client = protocol
    key, _ = objects(64)
    with pytest.raises(
        InferenceServerException, match="failed to register shared memory region 'r': invalid args"
    ):
        client.register_system_shared_memory("r", key, 64, offset=8)
    client.register_system_shared_memory("r", key, 64)
    with pytest.raises(InferenceServerException, match="shared memory region 'r' already in manager"):
        client.register_system_shared_memory("r", key, 8)


def test_unregistering_a_region_in_use_waits_for_its_request(
    protocol: tuple[Any, Any], objects: Callable[..., Any], server: ServerProcess
) -> None:
    module, client = protocol
    key, handle = objects(256)
    values = np.arange(32, dtype=np.float32).reshape(8, 4)
    shm.set_shared_memory_region(handle, [values])
    client.register_system_shared_memory("busy", key, 256)
    tensor = module.InferInput("INPUT0", [8, 4], "FP32")
    tensor.set_shared_memory("busy", 128)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory("busy", 128, offset=128)

    url = server.http_url if module is httpclient else server.grpc_url

    def infer_in_flight() -> Any:
        # A client of its own: tritonclient's clients are not shared between threads.
        with module.InferenceServerClient(url) as own:
            return own.infer("slow", [tensor], outputs=[output])

    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        answer = pool.submit(infer_in_flight)
        time.sleep(0.05)
        client.unregister_system_shared_memory("busy")
        unregistered = time.monotonic() - started
        answer.result(timeout=60)
        finished = time.monotonic() - started

    assert finished > unregistered, "the request ended before the region was unregistered"
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [8, 4], offset=128), values)
    assert status_of(module, client) == []
    with pytest.raises(InferenceServerException, match="Unable to find shared memory region: 'busy'"):
        client.infer("slow", [tensor], outputs=[output])


def test_cuda_shared_memory_has_no_region_as_in_triton(protocol: tuple[Any, Any]) -> None:
    """Listing CUDA regions answers none, as Triton does where none is registered, so a client that
    lists or cleans up regions at start goes on; a named region is unknown."""
    module, client = protocol
    listed = client.get_cuda_shared_memory_status()
    assert (list(listed.regions) if module is grpcclient else listed) == []
    with pytest.raises(InferenceServerException) as caught:
        client.get_cuda_shared_memory_status("r")
    assert "Unable to find cuda shared memory region: 'r'" in caught.value.message()
    assert caught.value.status() in ("404", "StatusCode.NOT_FOUND")
    client.unregister_cuda_shared_memory()  # nothing is registered: unregistering everything succeeds
    client.unregister_cuda_shared_memory("r")


def test_registering_cuda_shared_memory_is_refused_clearly(server: ServerProcess) -> None:
    """tritonclient's register call needs a CUDA handle, which no machine without a GPU makes: the
    raw calls carry what it would send."""
    refused = server.request("POST", "/v2/cudasharedmemory/region/r/register", b'{"raw_handle": {}}')
    assert refused.status == 400
    assert refused.json()["error"].startswith("CUDA shared memory is not supported by this server")


def test_metadata_lists_the_extension(http_client: httpclient.InferenceServerClient) -> None:
    extensions = http_client.get_server_metadata()["extensions"]

    assert "system_shared_memory" in extensions
    assert "cuda_shared_memory" not in extensions


def test_several_workers_refuse_registration(
    start_server: Callable[..., ServerProcess], repository: Path, objects: Callable[..., Any]
) -> None:
    server = start_server(repository, "--workers", "2")
    key, _ = objects(64)

    with (
        httpclient.InferenceServerClient(server.http_url) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.register_system_shared_memory("r", key, 64)

    assert "cannot be registered with --workers above 1" in caught.value.message()
    assert caught.value.status() == "503"
