"""The ``streams.yaml`` that ``conch deploy kubernetes --streams`` ships to the pods, read for what the
manifests need: the broker's address, TLS and database, each stream's input and consumer group, and
where ``conch serve`` reads the broker's password (``password_env`` or ``password_file``).

Why refuse a password in it: the file goes into a ConfigMap, and the ConfigMap into Git. A password
belongs in a Secret (``--stream-secret``), which the pods and KEDA's ``TriggerAuthentication`` read by
reference, so no manifest ever holds it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

#: Redis's port when the broker URL names none.
REDIS_PORT = 6379
#: The consumer group of a stream entry that names none (the interface's example).
DEFAULT_GROUP = "conch"


@dataclass(frozen=True)
class StreamSource:
    """One entry of ``streams:``: the served model, the stream it reads and its consumer group."""

    model: str
    input: str
    group: str


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
    streams: tuple[StreamSource, ...]
    #: The variable or the file ``conch serve`` reads the broker's password from; None: no password.
    password_env: str | None = None
    password_file: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _refuse(filename: str, message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{filename}: {message}")


def _has_password_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(key == "password" or _has_password_key(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_password_key(item) for item in value)
    return False


def _broker(filename: str, url: Any) -> tuple[str, int, int, bool, str | None]:
    if not isinstance(url, str):
        raise _refuse(filename, "'broker' must be a Redis URL, e.g. redis://redis.streams:6379/0")
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise _refuse(filename, "'broker' must be redis://HOST[:PORT][/DB] or rediss://... (TLS)")
    if parts.password is not None:
        raise _refuse(
            filename,
            "the broker URL holds a password, and this file goes into a ConfigMap in Git: remove it "
            "from the URL and give a Secret that holds it with --stream-secret",
        )
    try:
        port = parts.port or REDIS_PORT
    except ValueError:
        raise _refuse(filename, "the broker URL's port is not a number") from None
    database = parts.path.strip("/") or "0"
    if not database.isdigit():
        raise _refuse(filename, f"the broker URL's database '{database}' is not a number, e.g. /0")
    return parts.hostname, port, int(database), parts.scheme == "rediss", parts.username or None


def _stream(filename: str, index: int, entry: Any) -> StreamSource:
    if not isinstance(entry, dict):
        raise _refuse(filename, f"streams[{index}] must be a mapping with model, input and group")
    for key in ("model", "input"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise _refuse(filename, f"streams[{index}] has no '{key}' (the served model, the stream read)")
    group = entry.get("group", DEFAULT_GROUP)
    if not isinstance(group, str) or not group:
        raise _refuse(filename, f"streams[{index}].group must be a consumer group's name")
    return StreamSource(entry["model"], entry["input"], group)


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
    if not isinstance(document, dict) or not isinstance(document.get("streams"), list):
        raise _refuse(name, "must be a mapping with 'broker' and a list 'streams' (conch docs streams)")
    if _has_password_key(document):
        raise _refuse(name, "holds a 'password': put it in a Secret and give --stream-secret instead")
    if not document["streams"]:
        raise _refuse(name, "'streams' is empty: name at least one stream to read")
    host, port, database, tls, username = _broker(name, document.get("broker"))
    streams = tuple(_stream(name, index, entry) for index, entry in enumerate(document["streams"]))
    where = {key: document.get(key) for key in ("username", "password_env", "password_file")}
    for key, value in where.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise _refuse(name, f"'{key}' must be a non-empty string")
    if where["password_file"] and not where["password_file"].startswith("/"):
        raise _refuse(
            name, "'password_file' must be an absolute path in the pod, e.g. /etc/conch/redis/password"
        )
    return StreamsFile(
        name, text, host, port, database, tls, where["username"] or username, streams,
        password_env=where["password_env"], password_file=where["password_file"],
    )  # fmt: skip


def streams_file(text: str) -> StreamsFile:
    """The ``--streams`` parser (also ``streams:`` in ``deploy.yaml``): a path, read and checked."""
    return read_streams_file(Path(text))
