"""bench.cost_per_second: each second of a load run, sampled from a real conch server and a real
client process, and the slow seconds set against the fast ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.cost_per_second import Contrast, Second, median_contrast, sample_seconds, slow_against_fast
from bench.models import write_conch_repository
from bench.peers import serve_conch

#: A client that sends tiny JSON inferences one after another for ``seconds``.
CLIENT = """
import json, sys, time, urllib.request
url, seconds = sys.argv[1], float(sys.argv[2])
body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]})
end = time.monotonic() + seconds
while time.monotonic() < end:
    request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    urllib.request.urlopen(request).read()
"""


def test_each_second_of_a_run_counts_the_servers_requests_and_both_processes_cpu(tmp_path: Path) -> None:
    repository = write_conch_repository(tmp_path / "repo", ["tiny"])
    with serve_conch(repository, tmp_path) as server:
        url = f"{server.ports.http_url}/v2/models/tiny/infer"
        client = subprocess.Popen([sys.executable, "-c", CLIENT, url, "4"])
        seconds = sample_seconds(client, server, "tiny", interval_s=0.5)
        assert client.wait() == 0

    assert len(seconds) >= 5
    for second in seconds:
        # One client in a loop: hundreds to thousands of answers a second, each costing both
        # processes some CPU (a Python client spends far more than 10 us on a request).
        assert 50 < second.rate < 50_000
        assert second.server_us > 0
        assert second.client_us > 10
        # One request at a time: every execution of the model ran one row.
        assert second.batch == pytest.approx(1.0)


def test_a_client_that_sends_nothing_gives_no_seconds(tmp_path: Path) -> None:
    repository = write_conch_repository(tmp_path / "repo", ["tiny"])
    with serve_conch(repository, tmp_path) as server:
        idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
        assert sample_seconds(idle, server, "tiny", interval_s=0.25) == []
        idle.wait()


def test_the_slowest_third_is_set_against_the_fastest() -> None:
    # Rates 100..900; the slow third (100, 200, 300) cost twice the server CPU of the fast third
    # (700, 800, 900), and the client the same.
    seconds = [Second(rate, 20.0 if rate < 400 else 10.0, 5.0) for rate in range(100, 1000, 100)]
    contrast = slow_against_fast(seconds)
    assert contrast == Contrast(pytest.approx(200 / 800), pytest.approx(2.0), pytest.approx(1.0))
    assert contrast.describe() == "rate 0.25x, server CPU/request 2.00x, client 1.00x"
    assert slow_against_fast(seconds[:5]) is None
    # Without the model's batches in any second there is no batch ratio; with them, there is one.
    assert contrast.batch is None
    batched = [Second(s.rate, s.server_us, s.client_us, 4.0 if s.rate < 400 else 8.0) for s in seconds]
    assert slow_against_fast(batched).batch == pytest.approx(0.5)
    # A fast third whose CPU /proc could not count (under one 10 ms tick) gives no contrast, not a
    # division by zero an hour into a stability run.
    uncounted = [Second(s.rate, s.server_us if s.rate < 400 else 0.0, s.client_us) for s in seconds]
    assert slow_against_fast(uncounted) is None


def test_the_median_over_runs_skips_runs_without_a_contrast() -> None:
    runs = [Contrast(0.5, 2.0, 1.0, 0.5), None, Contrast(0.7, 1.0, 1.4), Contrast(0.9, 1.5, 1.2, 0.9)]
    assert median_contrast(runs) == Contrast(0.7, 1.5, 1.2, pytest.approx(0.7))
    assert median_contrast([None]) is None
