"""moto's standalone S3 server on a loopback port, as a stand-in for S3 or MinIO that speaks the real
wire protocol, with credentials checked.

moto checks signatures only once ``INITIAL_NO_AUTH_ACTION_COUNT`` requests have passed: the first three
create an IAM user allowed everything and its access key, and every request after them, including the
ones conch makes, must be signed with that key.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from tests.integration.server_process import free_port

BUCKET = "conch-models"
_ALLOW_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


@dataclass
class MotoS3:
    """A running moto server; ``credentials`` are the only key it accepts."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    credentials: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, prefix: str, bucket: str = BUCKET) -> str:
        """Triton's endpoint form: ``s3://127.0.0.1:PORT/bucket/prefix``."""
        return f"s3://127.0.0.1:{self.port}/{bucket}/{prefix}"

    def start(self, log_dir: Path, timeout: float = 30.0) -> MotoS3:
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3", "AWS_ACCESS_KEY_ID": "bootstrap"}
        env["AWS_SECRET_ACCESS_KEY"] = "bootstrap"
        log = (log_dir / f"moto-{self.port}.log").open("w")
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"moto server did not start on port {self.port}") from None
                time.sleep(0.1)
        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="conch")
        iam.put_user_policy(UserName="conch", PolicyName="all", PolicyDocument=json.dumps(_ALLOW_ALL))
        key = iam.create_access_key(UserName="conch")["AccessKey"]
        self.credentials = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
        }
        self.client().create_bucket(Bucket=BUCKET)
        return self

    def client(self) -> Any:
        """An S3 client signed with the accepted key, for the test's own uploads."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.credentials["AWS_SECRET_ACCESS_KEY"],
        )

    def environment(self, home: Path) -> dict[str, str]:
        """Variables for a process that should find exactly these credentials through boto3's chain,
        and no profile, config file or endpoint of the machine it runs on."""
        return {
            **self.credentials,
            "AWS_CONFIG_FILE": str(home / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def upload_folder(self, folder: Path, prefix: str) -> list[str]:
        """Every file under ``folder`` as ``prefix/<relative path>``; returns the keys."""
        keys = []
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = f"{prefix}/{path.relative_to(folder).as_posix()}"
            self.client().put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
            keys.append(key)
        return keys

    def put(self, key: str, body: bytes) -> None:
        self.client().put_object(Bucket=BUCKET, Key=key, Body=body)

    def delete(self, key: str) -> None:
        self.client().delete_object(Bucket=BUCKET, Key=key)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


#: The variables that would point boto3 somewhere other than the test's server.
FOREIGN_AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CA_BUNDLE",
)


@contextlib.contextmanager
def running_moto(log_dir: Path) -> Iterator[MotoS3]:
    """A moto server for the length of the block."""
    store = MotoS3().start(log_dir)
    try:
        yield store
    finally:
        store.stop()
