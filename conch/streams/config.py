"""``streams.yaml``: which model reads which stream, and how the broker is reached.

```yaml
broker: redis://127.0.0.1:6379/0     # rediss:// for TLS
password_env: REDIS_PASSWORD         # or password_file: /run/secrets/redis-password
streams:
  - model: fraud
    input: fraud-in
    group: conch
    results: fraud-out
    dead_letter: fraud-dlq
```

The password never sits in the file or the URL: a URL with one is refused, so that it cannot reach a
log line, an error or the status page. Nothing here imports redis or gRPC: ``conch serve`` reads this
file before it starts anything, and a mistake stops it with exit status 2.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: Deliveries after which a record is a dead letter with reason ``poison`` instead of running again:
#: a record that crashes its model costs three attempts, not an endless loop.
DEFAULT_MAX_DELIVERIES = 3
#: Milliseconds an entry may stay pending with a consumer before another one claims it: longer than any
#: batch takes, short enough that a dead replica's records are answered within a minute.
DEFAULT_CLAIM_IDLE_MS = 30_000
#: ``MAXLEN ~`` of the results and dead-letter streams: about a minute of a busy model at 1,500
#: records/s, a few hundred MB at most with 1,000-float outputs.
DEFAULT_MAXLEN = 100_000
#: Entries one read asks for: a full batch of the sweep's models (max_batch_size 64).
DEFAULT_READ_COUNT = 64
#: Records one consumer has between read and acknowledgement; reading pauses at this many.
DEFAULT_MAX_IN_FLIGHT = 256

_TOP_KEYS = {
    "broker",
    "username",
    "password_env",
    "password_file",
    "tls_ca_file",
    "max_deliveries",
    "claim_idle_ms",
    "maxlen",
    "read_count",
    "max_in_flight",
    "max_record_bytes",
    "streams",
}
_STREAM_KEYS = ("model", "input", "group", "results", "dead_letter")


@dataclass(frozen=True)
class StreamSpec:
    """One model fed from one input stream, read as consumer group ``group``."""

    model: str
    input: str
    group: str
    results: str
    dead_letter: str


@dataclass(frozen=True)
class StreamsConfig:
    """The whole file, with its defaults; ``password`` is never part of ``repr``."""

    broker: str
    streams: tuple[StreamSpec, ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls_ca_file: str | None = None
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS
    maxlen: int = DEFAULT_MAXLEN
    read_count: int = DEFAULT_READ_COUNT
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    #: Bytes of one record's fields; None: ``--http-max-body-bytes``, as for an HTTP request.
    max_record_bytes: int | None = None

    @property
    def broker_address(self) -> str:
        """The broker as logs and the status page may show it: scheme, host and port only."""
        parts = urllib.parse.urlsplit(self.broker)
        return f"{parts.scheme}://{parts.hostname or ''}:{parts.port or 6379}"


def consumer_name() -> str:
    """This process's name in every consumer group: host and process id, unique among replicas and
    ``--workers`` (a container restarted in its pod keeps both, and so finds its own pending entries)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def load_streams_config(path: Path, environ: dict[str, str] | None = None) -> StreamsConfig:
    """Read and check ``path``; a ValueError says what is wrong and how to fix it."""
    environ = dict(os.environ) if environ is None else environ
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"--streams: cannot read {path.name}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise ValueError(f"--streams: {path.name} is not valid YAML") from None
    if not isinstance(document, dict):
        raise ValueError(f"--streams: {path.name} must be a mapping with 'broker' and 'streams'")
    unknown = sorted(set(document) - _TOP_KEYS)
    if unknown:
        raise ValueError(f"--streams: unknown key(s) {unknown}; the keys are {sorted(_TOP_KEYS)}")
    broker = _broker_url(document.get("broker"))
    specs = _streams(document.get("streams"))
    return StreamsConfig(
        broker=broker,
        streams=specs,
        username=_optional_text(document, "username"),
        password=_password(document, environ),
        tls_ca_file=_optional_text(document, "tls_ca_file"),
        max_deliveries=_positive(document, "max_deliveries", DEFAULT_MAX_DELIVERIES),
        claim_idle_ms=_positive(document, "claim_idle_ms", DEFAULT_CLAIM_IDLE_MS),
        maxlen=_positive(document, "maxlen", DEFAULT_MAXLEN),
        read_count=_positive(document, "read_count", DEFAULT_READ_COUNT),
        max_in_flight=_positive(document, "max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        max_record_bytes=_positive(document, "max_record_bytes", None),
    )


def _broker_url(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("--streams: 'broker' must be a URL such as redis://127.0.0.1:6379/0")
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("redis", "rediss"):
        raise ValueError("--streams: 'broker' must start with redis:// or rediss:// (TLS)")
    if parts.password is not None:
        raise ValueError(
            "--streams: 'broker' holds a password; remove it from the URL and give it with password_env "
            "(a variable's name) or password_file (a secret file), so it never shows in logs"
        )
    if not parts.hostname:
        raise ValueError("--streams: 'broker' has no host: write redis://HOST:PORT/DB")
    return value


def _streams(value: Any) -> tuple[StreamSpec, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("--streams: 'streams' must be a list with one entry per model and input stream")
    specs = []
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise ValueError(f"--streams: streams[{index}] must be a mapping with keys {list(_STREAM_KEYS)}")
        unknown = sorted(set(entry) - set(_STREAM_KEYS))
        if unknown:
            raise ValueError(f"--streams: streams[{index}] has unknown key(s) {unknown}")
        entry = {"group": "conch", **entry}
        missing = [key for key in _STREAM_KEYS if not isinstance(entry.get(key), str) or not entry[key]]
        if missing:
            raise ValueError(f"--streams: streams[{index}] needs {missing} (each a non-empty name)")
        spec = StreamSpec(*(entry[key] for key in _STREAM_KEYS))
        if len({spec.input, spec.results, spec.dead_letter}) != 3:
            raise ValueError(f"--streams: streams[{index}]: input, results and dead_letter must differ")
        specs.append(spec)
    inputs = [(s.input, s.group) for s in specs]
    if len(set(inputs)) != len(inputs):
        raise ValueError("--streams: two entries read the same input stream as the same group")
    return tuple(specs)


def _password(document: dict[str, Any], environ: dict[str, str]) -> str | None:
    variable = _optional_text(document, "password_env")
    secret_file = _optional_text(document, "password_file")
    if variable and secret_file:
        raise ValueError("--streams: give password_env or password_file, not both")
    if variable:
        if variable not in environ:
            raise ValueError(f"--streams: password_env names {variable}, which is not set")
        return environ[variable]
    if secret_file:
        try:
            return Path(secret_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"--streams: cannot read password_file: {exc.strerror}") from None
    return None


def _optional_text(document: dict[str, Any], key: str) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"--streams: '{key}' must be a non-empty string")
    return value


def _positive(document: dict[str, Any], key: str, default: int | None) -> Any:
    value = document.get(key, default)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise ValueError(f"--streams: '{key}' must be a whole number above 0, got {value!r}")
    return value
