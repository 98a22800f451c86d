"""What the stream tests share: a ``streams.yaml`` writer, a producer, and the tally of answers.

A tally reads the results and dead-letter streams whole and counts, per input entry id (each answer's
``entry`` field), how many answers it got: ``lost`` are the entries sent and never answered,
``duplicates`` the answers beyond the first.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import yaml

ADD_SUB_ROW = {"INPUT0": [1.0] * 16, "INPUT1": [0.5] * 16}


def write_streams_yaml(path: Path, broker: str, streams: Iterable[dict[str, str]], **settings: Any) -> Path:
    """``streams.yaml`` for ``broker`` with ``streams`` (model, input, results, dead_letter[, group])."""
    document = {"broker": broker, **settings, "streams": [{"group": "conch", **s} for s in streams]}
    path.write_text(yaml.safe_dump(document))
    return path


def stream_entry(model: str, stream: str, prefix: str | None = None) -> dict[str, str]:
    """One ``streams.yaml`` entry whose results and dead letters are ``<prefix>-out`` and ``-dlq``."""
    prefix = prefix or stream.removesuffix("-in")
    return {"model": model, "input": stream, "results": f"{prefix}-out", "dead_letter": f"{prefix}-dlq"}


def produce(client: redis.Redis, stream: str, count: int, row: dict[str, Any] | None = None) -> list[str]:
    """Add ``count`` one-row records (ids ``r0``... with an ingestion timestamp); their entry ids."""
    data = json.dumps(row or ADD_SUB_ROW)
    pipe = client.pipeline(transaction=False)
    for index in range(count):
        fields = {"data": data, "id": f"r{index}", "ingestion_timestamp": f"{time.time():.6f}"}
        pipe.xadd(stream, fields)  # type: ignore[arg-type]
    return [entry_id.decode() for entry_id in pipe.execute()]


def entries(client: redis.Redis, stream: str) -> list[dict[bytes, bytes]]:
    """Every entry's fields, oldest first."""
    return [fields for _id, fields in client.xrange(stream)]


@dataclass
class Tally:
    """Answers to the input entries ``sent``: results, dead letters, lost and duplicated."""

    sent: int
    results: int
    dead_letters: int
    lost: int
    duplicates: int
    consumers: Counter[str]

    def line(self) -> str:
        return (
            f"sent {self.sent}, results {self.results}, dead letters {self.dead_letters}, "
            f"duplicates {self.duplicates}, lost {self.lost}, by consumer {dict(self.consumers)}"
        )


def tally(client: redis.Redis, sent: list[str], results: str, dead_letter: str) -> Tally:
    """Count the answers in ``results`` and ``dead_letter`` to the entries ``sent``."""
    answers: Counter[str] = Counter()
    consumers: Counter[str] = Counter()
    found = entries(client, results)
    letters = entries(client, dead_letter)
    for fields in [*found, *letters]:
        answers[fields[b"entry"].decode()] += 1
    for fields in found:
        consumers[fields.get(b"consumer", b"").decode()] += 1
    wanted = set(sent)
    lost = len(wanted - set(answers))
    duplicates = sum(count - 1 for entry_id, count in answers.items() if entry_id in wanted)
    return Tally(len(sent), len(found), len(letters), lost, duplicates, consumers)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 0.1 s until true; fail saying ``what`` did not happen in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def pending(client: redis.Redis, stream: str, group: str = "conch") -> int:
    """Entries delivered to ``group`` and not acknowledged."""
    return int(client.xpending(stream, group)["pending"])
