"""The ``streams.yaml`` that ``conch deploy kubernetes --streams`` ships to the pods, checked with the
server's own rules (``conch/streams/config.py``) and read for what the manifests need: the broker's
address, TLS and database, each stream's input and consumer group, and where ``conch serve`` reads the
broker's password (``password_env`` or ``password_file``).

Why refuse a password in it: the file goes into a ConfigMap, and the ConfigMap into Git. A password
belongs in a Secret (``--stream-secret``), which the pods and KEDA's ``TriggerAuthentication`` read by
reference, so no manifest ever holds it. The server's rules are applied without reading the password:
it lives in the cluster, not on the machine that deploys.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from conch.streams.config import StreamSpec, load_streams_config

#: Redis's port when the broker URL names none.
REDIS_PORT = 6379
#: The keys saying where the server reads the password, left out of the check on this machine.
PASSWORD_KEYS = ("password_env", "password_file")


@dataclass(frozen=True)
class StreamsFile:
    """A checked ``streams.yaml``: its text as given, the broker and the streams read."""

    filename: str
    text: str
    host: str
    port: int
    database: int
    tls: bool
    username: str | None
    streams: tuple[StreamSpec, ...]
    #: The variable or the file ``conch serve`` reads the broker's password from; None: no password.
    password_env: str | None = None
    password_file: str | None = None
    #: Where ``conch serve`` reads the CA bundle of a ``rediss://`` broker; None: the system CAs.
    tls_ca_file: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _refuse(filename: str, message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{filename}: {message}")


def _has_password(value: Any) -> bool:
    """A ``password`` key anywhere, or a broker URL with a password."""
    if isinstance(value, dict):
        if "password" in value:
            return True
        broker = value.get("broker")
        if isinstance(broker, str) and urlsplit(broker).password is not None:
            return True
        return any(_has_password(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_password(item) for item in value)
    return False


def _server_rules(name: str, document: dict[str, Any]) -> tuple[StreamSpec, ...]:
    """The streams, as ``conch serve --streams`` would read the file (its password keys aside)."""
    checked = {key: value for key, value in document.items() if key not in PASSWORD_KEYS}
    with tempfile.TemporaryDirectory(prefix="conch-deploy-") as folder:
        copy = Path(folder) / name
        copy.write_text(yaml.safe_dump(checked), encoding="utf-8")
        try:
            return load_streams_config(copy, environ={}).streams
        except ValueError as exc:
            raise _refuse(name, str(exc).removeprefix("--streams: ")) from None


def _broker(name: str, url: str) -> tuple[str, int, int, bool, str | None]:
    """Host, port, database, TLS and user of a URL the server's rules accepted."""
    parts = urlsplit(url)
    try:
        port = parts.port or REDIS_PORT
    except ValueError:
        raise _refuse(name, "the broker URL's port is not a number") from None
    database = parts.path.strip("/") or "0"
    if not database.isdigit():
        raise _refuse(name, f"the broker URL's database '{database}' is not a number, e.g. /0")
    return parts.hostname or "", port, int(database), parts.scheme == "rediss", parts.username or None


def read_streams_file(path: Path) -> StreamsFile:
    """``path`` checked; a bad file raises ``ArgumentTypeError`` naming the file and what to fix."""
    name = path.name
    try:
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text)
    except OSError as exc:
        raise _refuse(name, f"cannot read it: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise _refuse(name, f"not YAML: {exc}") from None
    if not isinstance(document, dict):
        raise _refuse(name, "must be a mapping with 'broker' and a list 'streams' (conch docs streams)")
    if _has_password(document):
        raise _refuse(
            name,
            "holds a password, and this file goes into a ConfigMap in Git: remove it, put it in a "
            "Secret, give --stream-secret NAME and say password_env (or password_file) in the file",
        )
    streams = _server_rules(name, document)
    host, port, database, tls, url_user = _broker(name, document["broker"])
    where = {key: document.get(key) for key in PASSWORD_KEYS}
    for key, value in where.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise _refuse(name, f"'{key}' must be a non-empty string")
    for key, example in (
        ("password_file", "/etc/conch/redis/pw"),
        ("tls_ca_file", "/etc/conch/redis/ca.crt"),
    ):
        if document.get(key) and not str(document[key]).startswith("/"):
            raise _refuse(name, f"'{key}' must be an absolute path in the pod, e.g. {example}")
    ca_file = document.get("tls_ca_file") or None
    if ca_file is not None and ca_file == where["password_file"]:
        raise _refuse(name, "'tls_ca_file' and 'password_file' name the same file; give each its own path")
    username = document.get("username") or url_user
    return StreamsFile(
        name, text, host, port, database, tls, username, streams,
        password_env=where["password_env"], password_file=where["password_file"], tls_ca_file=ca_file,
    )  # fmt: skip


def streams_file(text: str) -> StreamsFile:
    """The ``--streams`` parser (also ``streams:`` in ``deploy.yaml``): a path, read and checked."""
    return read_streams_file(Path(text))
