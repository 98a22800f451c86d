"""The image_dedup example repository, served as its README says, called as its README shows.

``examples/image_dedup`` holds two Python-backend models (digit-preprocess decodes PNGs with Pillow;
digit-dedup calls it and the ONNX digit-embedder by BLS, then searches a faiss index), the ONNX model,
and an ensemble of digit-preprocess and digit-embedder. Images are made here the way the README
describes a catalogue image: ``load_digits().images`` scaled from 0..16 to 8-bit grey levels and saved
as PNG with Pillow. Everything goes over real tritonclient HTTP and gRPC to a real ``conch serve``.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import numpy_helper
from PIL import Image
from sklearn.datasets import load_digits
from tritonclient.utils import InferenceServerException

from tests.integration.server_process import ServerProcess

IMAGE_DEDUP = Path(__file__).resolve().parents[2] / "examples" / "image_dedup"
PROTOCOLS = ["http", "grpc"]
EMBEDDER = "digit-embedder/1/model.onnx"
INDEX = "digit-dedup/1/digits.faiss"
# Weights and embeddings trained on another processor (see the build test).
WEIGHT_ATOL = 1e-4
PNG = "89 50 4e 47 0d 0a 1a 0a"  # the signature every PNG starts with


@pytest.fixture(scope="module")
def repository() -> Path:
    return IMAGE_DEDUP


@pytest.fixture(scope="module")
def catalogue() -> np.ndarray:
    """The catalogue as 8-bit grey images (1797, 8, 8): an id is a position in this array."""
    return np.rint(load_digits().images * (255 / 16)).astype(np.uint8)


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def client_for(protocol: str, http_client: Any, grpc_client: Any) -> tuple[Any, Any]:
    """The client of ``protocol`` and tritonclient's module for it."""
    return (http_client, httpclient) if protocol == "http" else (grpc_client, grpcclient)


def infer_images(client: Any, module: Any, model: str, images: list[bytes]) -> Any:
    rows = np.array([[image] for image in images], dtype=object)
    request = module.InferInput("image", list(rows.shape), "BYTES")
    request.set_data_from_numpy(rows)
    return client.infer(model, [request])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_catalogue_digits_find_themselves_first_at_distance_zero(
    catalogue: np.ndarray, http_client: Any, grpc_client: Any, protocol: str
) -> None:
    client, module = client_for(protocol, http_client, grpc_client)
    wanted = [0, 42, 1000, 1796]

    result = infer_images(client, module, "digit-dedup", [png(catalogue[i]) for i in wanted])

    ids, distances = result.as_numpy("ids"), result.as_numpy("distances")
    assert ids.dtype == np.int64 and ids.shape == (4, 3)
    assert distances.dtype == np.float32 and distances.shape == (4, 3)
    assert ids[:, 0].tolist() == wanted
    np.testing.assert_allclose(distances[:, 0], 0, atol=1e-6)
    assert (distances[:, 1] > 0.1).all(), "no other catalogue image is the same picture"
    assert (np.diff(distances, axis=1) >= 0).all(), "nearest first"


def test_a_noisy_copy_still_finds_its_original(catalogue: np.ndarray, http_client: Any) -> None:
    originals = [7, 300, 1234]
    noise = np.random.default_rng(0).normal(0, 16, (len(originals), 8, 8))
    copies = np.clip(catalogue[originals] + noise, 0, 255).round().astype(np.uint8)
    assert all((copy != catalogue[i]).sum() > 40 for copy, i in zip(copies, originals, strict=True))

    result = infer_images(http_client, httpclient, "digit-dedup", [png(copy) for copy in copies])

    assert result.as_numpy("ids")[:, 0].tolist() == originals
    distances = result.as_numpy("distances")
    assert (distances[:, 0] > 1e-3).all(), "a copy is not the same picture"
    assert (distances[:, 0] < distances[:, 1]).all()


def test_a_larger_colour_png_is_made_grey_and_shrunk_to_8x8(catalogue: np.ndarray, http_client: Any) -> None:
    # Each grey level repeated over a 4x4 block of an RGB image: averaging each block back and taking
    # the luma of equal channels gives the 8x8 original exactly.
    big = np.repeat(np.repeat(catalogue[512], 4, axis=0), 4, axis=1)
    colour = np.stack([big, big, big], axis=-1)

    result = infer_images(http_client, httpclient, "digit-dedup", [png(colour)])

    assert result.as_numpy("ids")[0, 0] == 512
    assert result.as_numpy("distances")[0, 0] == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_ensemble_gives_the_embedding_of_the_onnx_model_called_directly(
    catalogue: np.ndarray, http_client: Any, grpc_client: Any, protocol: str
) -> None:
    client, module = client_for(protocol, http_client, grpc_client)
    chosen = catalogue[[3, 99, 1500]]
    pixels = chosen.reshape(3, 64).astype(np.float32) / 255.0

    through_ensemble = infer_images(client, module, "digit-embedding", [png(image) for image in chosen])
    request = module.InferInput("pixels", [3, 64], "FP32")
    request.set_data_from_numpy(pixels)
    through_embedder = client.infer("digit-embedder", [request])
    session = ort.InferenceSession(str(IMAGE_DEDUP / "digit-embedder" / "1" / "model.onnx"))
    (in_onnxruntime,) = session.run(["embedding"], {"pixels": pixels})

    embedding = through_ensemble.as_numpy("embedding")
    assert embedding.shape == (3, 32) and embedding.dtype == np.float32
    np.testing.assert_allclose(embedding, through_embedder.as_numpy("embedding"), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(embedding, in_onnxruntime, rtol=1e-6, atol=1e-6)
    assert np.abs(embedding[0] - embedding[1]).max() > 0.1, "different digits, different embeddings"


def not_png_images(catalogue: np.ndarray) -> dict[str, tuple[bytes, str]]:
    """Images digit-preprocess refuses, with what its message must say."""
    jpeg = io.BytesIO()
    Image.fromarray(catalogue[0]).save(jpeg, format="JPEG")
    return {
        "jpeg": (jpeg.getvalue(), f"with bytes [ff d8 ff e0 00 10 4a 46], and a PNG starts with [{PNG}]"),
        "text": (b"hello", "starts with bytes [68 65 6c 6c 6f]"),
        "truncated png": (png(catalogue[0])[:40], "starts like a PNG but cannot be decoded"),
    }


@pytest.mark.parametrize("model", ["digit-dedup", "digit-embedding"])
@pytest.mark.parametrize("kind", ["jpeg", "text", "truncated png"])
def test_an_image_that_is_not_a_png_is_a_400_saying_which_row_and_what_to_send(
    catalogue: np.ndarray, http_client: Any, grpc_client: Any, model: str, kind: str
) -> None:
    data, said = not_png_images(catalogue)[kind]
    images = [png(catalogue[5]), data]  # row 0 is fine, row 1 is refused

    with pytest.raises(InferenceServerException) as over_http:
        infer_images(http_client, httpclient, model, images)
    with pytest.raises(InferenceServerException) as over_grpc:
        infer_images(grpc_client, grpcclient, model, images)

    assert over_http.value.status() == "400"
    assert over_grpc.value.status() == "StatusCode.INVALID_ARGUMENT"
    for error in (over_http.value, over_grpc.value):
        message = error.message()
        assert "input 'image' row 1 " in message and said in message, message
        assert "send " in message and ".png file" in message, message


def test_json_bytes_that_are_not_a_png_get_a_400_body_with_the_reason(server: ServerProcess) -> None:
    # The V2 JSON form carries BYTES as strings, which a PNG's bytes are not: clients send PNGs with
    # the binary extension (tritonclient does), and a string gets this answer.
    body = b'{"inputs":[{"name":"image","shape":[1,1],"datatype":"BYTES","data":["digit.png"]}]}'

    reply = server.request("POST", "/v2/models/digit-dedup/infer", body)

    assert reply.status == 400
    said = reply.json()["error"]
    assert said.startswith("input 'image' row 0 is not a PNG image: it starts with bytes [64 69 67"), said


def test_the_build_script_remakes_the_committed_files(tmp_path: Path) -> None:
    # The committed model.onnx and digits.faiss are generated: they must be what build.py makes. The
    # graph must be the same to the byte; the numbers only to within WEIGHT_ATOL, because OpenBLAS picks
    # its kernels by processor, and one BLAS thread on an AMD EPYC trains weights 7e-6 away from the
    # machine that made the committed files.
    subprocess.run(
        [sys.executable, str(IMAGE_DEDUP / "build.py"), "--output", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )

    built, committed = (onnx.load(folder / EMBEDDER) for folder in (tmp_path, IMAGE_DEDUP))
    assert [t.name for t in built.graph.initializer] == [t.name for t in committed.graph.initializer]
    for made, kept in zip(built.graph.initializer, committed.graph.initializer, strict=True):
        np.testing.assert_allclose(
            numpy_helper.to_array(made),
            numpy_helper.to_array(kept),
            rtol=0,
            atol=WEIGHT_ATOL,
            err_msg=made.name,
        )
    assert _without_weights(built) == _without_weights(committed)

    made_index, kept_index = (faiss.read_index(str(folder / INDEX)) for folder in (tmp_path, IMAGE_DEDUP))
    assert (made_index.d, made_index.ntotal) == (kept_index.d, kept_index.ntotal)
    np.testing.assert_allclose(
        made_index.reconstruct_n(0, made_index.ntotal),
        kept_index.reconstruct_n(0, kept_index.ntotal),
        rtol=0,
        atol=WEIGHT_ATOL,
    )


def _without_weights(model: onnx.ModelProto) -> bytes:
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.initializer[:]
    return bare.SerializeToString(deterministic=True)
