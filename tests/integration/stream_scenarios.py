"""The two runs that show nothing is lost: a consumer killed with SIGKILL and restarted, and a
rebalance between two replicas of one consumer group with one killed. Each returns a :class:`Tally`
(sent, results, duplicates, lost).

The CI tests run them small, ``-m streams_soak`` runs them long, and ``python -m bench.streams`` prints
their figures.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import Tally, entries, produce, tally, wait_until

StartServer = Callable[[], ServerProcess]


def answered(client: redis.Redis, results: str, dead_letter: str) -> int:
    """Answers written so far, duplicates included."""
    return int(client.xlen(results)) + int(client.xlen(dead_letter))


def kill_and_restart(
    client: redis.Redis,
    start: StartServer,
    stream: str,
    results: str,
    dead_letter: str,
    records: int,
    kills: int,
    row: dict[str, Any],
) -> Tally:
    """Pre-fill ``records``; SIGKILL the server ``kills`` times while it answers, each time starting a
    new one, which claims the dead one's pending entries once they are idle; tally once all are answered.

    The kills fall in the first half of the records, so that on a loaded machine, where the poll for
    the answered count can lag by a second, each kill still lands while records are left to answer.
    """
    sent = produce(client, stream, records, row)
    server = start()
    for kill in range(1, kills + 1):
        goal = records * kill // (2 * (kills + 1))
        wait_until(lambda goal=goal: answered(client, results, dead_letter) >= goal, 120, f"{goal} answers")
        server.stop(signal.SIGKILL)
        server = start()
    wait_until(lambda: tally(client, sent, results, dead_letter).lost == 0, 180, "every record answered")
    server.stop()
    return tally(client, sent, results, dead_letter)


def rebalance(
    client: redis.Redis,
    start: StartServer,
    stream: str,
    results: str,
    dead_letter: str,
    records: int,
    kills: int,
    seconds: float,
    row: dict[str, Any],
    rejoin: bool = True,
) -> tuple[Tally, int]:
    """Two replicas in one group while records arrive over ``seconds``; ``kills`` times one replica is
    killed with SIGKILL (the other claims its pending entries) and, with ``rejoin``, a new one joins.
    Also returns how many replicas had written results before the first kill."""
    with ThreadPoolExecutor(2) as pool:
        replicas = list(pool.map(lambda _: start(), range(2)))
    sent: list[str] = []
    sharing = 0
    producing = threading.Thread(target=_produce_over, args=(client, stream, records, seconds, sent, row))
    producing.start()
    try:
        for kill in range(kills):
            time.sleep(seconds / (kills + 1))
            if kill == 0:
                sharing = len(consumers_of(client, results))
            victim = replicas.pop(kill % len(replicas))
            victim.stop(signal.SIGKILL)
            if rejoin:
                replicas.insert(kill % 2, start())
    finally:
        producing.join()
    wait_until(lambda: tally(client, sent, results, dead_letter).lost == 0, 180, "every record answered")
    for replica in replicas:
        replica.stop()
    return tally(client, sent, results, dead_letter), sharing


def _produce_over(
    client: redis.Redis, stream: str, records: int, seconds: float, sent: list[str], row: dict[str, Any]
) -> None:
    batches = max(1, int(seconds * 20))
    for index in range(batches):
        begun = time.monotonic()
        count = records * (index + 1) // batches - len(sent)
        sent += produce(client, stream, count, row)
        time.sleep(max(0.0, seconds / batches - (time.monotonic() - begun)))


def consumers_of(client: redis.Redis, results: str) -> set[str]:
    """The consumers that wrote results."""
    return {fields.get(b"consumer", b"").decode() for fields in entries(client, results)}
