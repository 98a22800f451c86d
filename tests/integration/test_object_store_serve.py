"""``conch serve s3://...`` against moto's S3 server: a model uploaded to the bucket answers over HTTP, in
Triton's endpoint form and through ``AWS_ENDPOINT_URL``; a wrong prefix or wrong credentials stop the
server with one line that names the problem and holds no secret."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.onnx_models import add_sub_model, scale_model, write_repository
from tests.integration.s3_store import BUCKET, FOREIGN_AWS_VARIABLES, MotoS3, running_moto
from tests.integration.server_process import ServerProcess


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    with running_moto(tmp_path_factory.mktemp("moto")) as store:
        local = write_repository(
            tmp_path_factory.mktemp("upload") / "models", {"add-sub": (add_sub_model(), None)}
        )
        store.upload_folder(local, "models")
        yield store


@pytest.fixture(autouse=True)
def no_machine_aws_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers start with this process's environment: none of the machine's AWS settings may reach them."""
    for name in FOREIGN_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def environment(moto: MotoS3, home: Path, **extra: str) -> dict[str, str]:
    """This process's environment plus moto's key, and no AWS config file of the machine."""
    return {**os.environ, **moto.environment(home), **extra}


def serve_and_infer(moto: MotoS3, tmp_path: Path, url: str, env: dict[str, str]) -> None:
    cache = tmp_path / "cache"
    server = ServerProcess(None, [url, "--model-cache-dir", str(cache)], env).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        assert client.is_model_ready("add-sub")
        a = np.arange(32, dtype=np.float32).reshape(2, 16)
        b = np.full((2, 16), 3.5, dtype=np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [2, 16], "FP32"),
            httpclient.InferInput("INPUT1", [2, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add-sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    finally:
        assert server.stop() == 0, server.log()
    mirrored = [p for p in cache.rglob("model.onnx")]
    assert len(mirrored) == 1 and mirrored[0].parts[-4:] == ("repository", "add-sub", "1", "model.onnx")


def test_serves_a_model_from_the_endpoint_form(moto: MotoS3, tmp_path: Path) -> None:
    serve_and_infer(moto, tmp_path, moto.url("models"), environment(moto, tmp_path))


def test_serves_a_model_from_aws_endpoint_url(moto: MotoS3, tmp_path: Path) -> None:
    env = environment(moto, tmp_path, AWS_ENDPOINT_URL=moto.endpoint)
    serve_and_infer(moto, tmp_path, f"s3://{BUCKET}/models", env)


def serve_refused(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "conch.cli.main", "serve", *args, "--model-cache-dir", str(tmp_path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_a_prefix_with_nothing_under_it_exits_2_with_one_line(moto: MotoS3, tmp_path: Path) -> None:
    done = serve_refused([moto.url("no-such-prefix")], environment(moto, tmp_path), tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"conch: no objects under s3://127.0.0.1:{moto.port}/{BUCKET}/no-such-prefix: "
        "check the bucket and prefix"
    )


def test_bad_credentials_exit_1_without_echoing_the_secret(moto: MotoS3, tmp_path: Path) -> None:
    secret = "wrong-secret-ZYXW9876"
    env = environment(moto, tmp_path, AWS_SECRET_ACCESS_KEY=secret)
    done = serve_refused([moto.url("models")], env, tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("conch: the object store refused the credentials for s3://"), lines[0]
    assert "SignatureDoesNotMatch" in lines[0]
    assert secret not in done.stderr and moto.credentials["AWS_ACCESS_KEY_ID"] not in done.stderr


def test_poll_mode_serves_a_version_uploaded_while_it_runs(moto: MotoS3, tmp_path: Path) -> None:
    """``conch serve s3://... --model-control-mode poll``: the cache is refreshed before each scan."""
    local = write_repository(
        tmp_path / "upload", {"scaled": (scale_model(1.0), 'name: "scaled"\nmax_batch_size: 4')}
    )
    moto.upload_folder(local, "polled")
    args = [moto.url("polled"), "--model-cache-dir", str(tmp_path / "cache")]
    args += ["--model-control-mode", "poll", "--repository-poll-secs", "1"]
    server = ServerProcess(None, args, environment(moto, tmp_path)).start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        moto.put("polled/scaled/2/model.onnx", scale_model(2.0).SerializeToString())
        deadline = time.monotonic() + 60
        while client.get_model_metadata("scaled")["versions"] != ["2"]:  # the default policy: latest 1
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.2)
        request = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        request.set_data_from_numpy(np.ones((1, 4), np.float32))
        result = client.infer("scaled", [request])
    finally:
        assert server.stop() == 0, server.log()

    assert result.get_response()["model_version"] == "2"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 2.0, np.float32))
