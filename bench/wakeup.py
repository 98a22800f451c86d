"""``python -m bench.wakeup``: what it costs here to wake a sleeping thread or process.

Why: ``conch serve --busy-poll-us`` (``conch/runtime/busy_poll.py``) keeps the event loop polling after the
last answer because, on a virtual machine whose idle CPUs halt, every wake-up of a thread asleep in
``epoll_wait`` or ``recv`` is slow. Two threads, then two processes, bounce one byte over a socketpair;
each round trip is two wake-ups. On the 2-core development machine: about 40 us per round trip.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time


def _echo(peer: socket.socket) -> None:
    while data := peer.recv(1):
        peer.send(data)


def _round_trip_us(sock: socket.socket, count: int) -> float:
    for _ in range(count // 10):  # warm up
        sock.send(b"x")
        sock.recv(1)
    started = time.perf_counter()
    for _ in range(count):
        sock.send(b"x")
        sock.recv(1)
    return (time.perf_counter() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wakeup", description=__doc__)
    parser.add_argument("--count", type=int, default=20_000, help="round trips per measurement")
    args = parser.parse_args()

    ours, theirs = socket.socketpair()
    threading.Thread(target=_echo, args=(theirs,), daemon=True).start()
    print(f"two threads: {_round_trip_us(ours, args.count):.1f} us per round trip")
    ours.close()

    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        ours.close()
        _echo(theirs)
        os._exit(0)
    theirs.close()
    print(f"two processes: {_round_trip_us(ours, args.count):.1f} us per round trip")
    ours.close()
    os.waitpid(child, 0)


if __name__ == "__main__":
    main()
