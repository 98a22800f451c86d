"""The alerts and the dashboard of ``conch deploy monitoring`` against a running conch and a real
Prometheus scraping it: every metric they select is in the server's exposition (the GPU families,
which need a GPU, and the data contracts' families, which need a model with a contract, excepted by
name), and every PromQL expression runs without error, with samples for each signal the
traffic produces, and the alerts' conditions true exactly where the traffic makes them.

One server serves what each family needs to exist: a model with traffic (latency, queue, failures,
answer codes), a model behind a circuit breaker, one answering from its MODEL fallback because its
version 2 does not load (and so not READY), one in a release, and a PyTorch model (load phases). It
also reads a stream from a real redis-server (lag, records, latency, the broker, and a dead letter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.deploy.monitoring import alerts
from conch.deploy.monitoring.dashboard import dashboard
from tests.fixtures.monitoring_queries import (
    CONTRACT_FAMILIES,
    GPU_FAMILIES,
    interpolate,
    metric_names,
    panel_queries,
    variable_selectors,
)
from tests.fixtures.onnx_models import add_sub_model, reshape_model, scale_model, write_repository
from tests.fixtures.pytorch_models import cnn_config, write_torchscript_cnn
from tests.integration.metrics_scrape import scrape
from tests.integration.prometheus_server import PROMETHEUS, Prometheus
from tests.integration.redis_server import REDIS_SERVER, RedisServer, running_redis
from tests.integration.server_process import ServerProcess
from tests.integration.stream_helpers import produce, stream_entry, write_streams_yaml
from tests.integration.test_resilience import BREAKER, GOOD, call, fixed_reshape_model

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or REDIS_SERVER is None,
    reason="prometheus or redis-server is not installed (make test installs both with apt-get)",
)
pytestmark = [pytestmark, pytest.mark.prometheus, pytest.mark.redis]  # the programs this file drives

#: Prometheus's own series, not conch's exposition.
PROMETHEUS_SERIES = {"up"}
#: Signals that have no samples without history or a GPU: the day-over-day traffic needs yesterday.
NEEDS_HISTORY = {"ConchTrafficDropped"}
RELEASE = """
candidate: 2
baseline: 1
steps:
  - {weight: 50, duration: 1h}
  - {weight: 100}
"""


def _repository(root: Path) -> Path:
    fallback = 'name: "scored"\nparameters { key: "FALLBACK_STRATEGY" value { string_value: "MODEL" } }\n'
    released = 'name: "released"\nmax_batch_size: 8\n'
    write_repository(
        root,
        {
            "paced": (add_sub_model(), None),
            "flaky": (reshape_model(), 'name: "flaky"\n' + BREAKER),
            "scored": (fixed_reshape_model(), fallback),
            "released": (scale_model(1.0), released),
        },
    )
    (root / "scored" / "2").mkdir()
    (root / "scored" / "2" / "model.onnx").write_bytes(b"not an onnx model")
    (root / "released" / "2").mkdir()
    (root / "released" / "2" / "model.onnx").write_bytes(scale_model(2.0).SerializeToString())
    (root / "released" / "release.yaml").write_text(RELEASE)
    (root / "cnn").mkdir()
    (root / "cnn" / "config.pbtxt").write_text(cnn_config("cnn"))
    write_torchscript_cnn(root / "cnn" / "1")
    return root


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
def conch(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory, broker: RedisServer
) -> ServerProcess:
    home = tmp_path_factory.mktemp("monitoring")
    streams = write_streams_yaml(home / "streams.yaml", broker.url, [stream_entry("paced", "paced-in")])
    return start_server(
        _repository(home / "models"), "--state-dir", str(home / "state"), "--streams", str(streams)
    )


def _send_traffic(conch: ServerProcess, broker: RedisServer) -> None:
    """Answered and refused requests on both protocols, fallback answers, calls to each model, and
    stream records: answered ones, and one that is not JSON (a dead letter)."""
    client = broker.client()
    produce(client, "paced-in", 5)
    client.xadd("paced-in", {"data": "not json"})
    with httpclient.InferenceServerClient(conch.http_url) as client:
        for index in range(60):
            width = 8 if index % 10 == 9 else 16  # every tenth has a wrong shape: a 400, REJECTED
            inputs = [httpclient.InferInput(name, [2, width], "FP32") for name in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones((2, width), np.float32))
            try:
                client.infer("paced", inputs)
            except InferenceServerException as exc:
                assert exc.status() == "400"
        scaled = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        scaled.set_data_from_numpy(np.ones((1, 4), np.float32))
        for _ in range(10):
            client.infer("released", [scaled])
    with grpcclient.InferenceServerClient(conch.grpc_url) as client:
        inputs = [grpcclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        for _ in range(10):
            client.infer("paced", inputs)
    for _ in range(2):
        assert call(conch, "scored", GOOD).get_response()["parameters"]["fallback_level"] == "MODEL"
        call(conch, "flaky", GOOD)


@pytest.fixture(scope="module")
def scraped(conch: ServerProcess, prometheus: Prometheus, broker: RedisServer) -> set[str]:
    """Traffic sent while Prometheus scrapes; the sample names of the server's page afterwards, once
    Prometheus holds a few scrapes of the final counts."""
    # The fallback and dead-letter counters' series appear with their first answer: a scrape of each
    # before the others, so rate() and increase() see them as an increase.
    call(conch, "scored", GOOD)
    broker.client().xadd("paced-in", {"data": "not json"})
    prometheus.wait_for('sum(conch_fallback_total{model="scored"})', 1)
    prometheus.wait_for('sum(conch_stream_dead_letters_total{stream="paced-in"})', 1)
    _send_traffic(conch, broker)
    prometheus.wait_for('sum(conch_fallback_total{model="scored"})', 3)
    prometheus.wait_for("count(count_over_time(conch_fallback_total[1m]) >= 3)", 1)
    prometheus.wait_for('sum(conch_stream_records_total{stream="paced-in"})', 7)
    prometheus.wait_for('sum(conch_stream_dead_letters_total{stream="paced-in"})', 2)
    page = scrape(conch.metrics_url)
    return {sample.name for family in page.families.values() for sample in family.samples}


def _referenced() -> dict[str, set[str]]:
    """Where each expression comes from, and the metrics it selects."""
    board = dashboard()
    found = {f"alert {a.name}": metric_names(a.expr) for a in alerts()}
    found.update({f"panel {title}: {expr}": metric_names(expr) for title, expr in panel_queries(board)})
    found.update({f"variable {name}": metric_names(sel) for name, sel in variable_selectors(board)})
    return found


def test_every_metric_the_alerts_and_panels_select_is_exported(scraped: set[str]) -> None:
    missing = {
        where: names - scraped
        for where, names in _referenced().items()
        if names - scraped - GPU_FAMILIES - CONTRACT_FAMILIES - PROMETHEUS_SERIES
    }
    assert not missing, f"not in the exposition of a running server: {missing}"
    gpu_used = set().union(*_referenced().values()) & GPU_FAMILIES
    assert gpu_used == GPU_FAMILIES, "the allowed-missing list names only GPU families the board uses"


def test_every_alert_runs_and_its_signal_has_samples(prometheus: Prometheus, scraped: set[str]) -> None:
    for alert in alerts():
        prometheus.query(alert.expr)  # asserts Prometheus accepted and evaluated it
        signal = prometheus.query(alert.signal)
        if alert.name in NEEDS_HISTORY or metric_names(alert.signal) & (GPU_FAMILIES | CONTRACT_FAMILIES):
            continue
        assert signal, f"{alert.name}: no samples for {alert.signal}"


def test_every_panel_query_runs_with_samples(prometheus: Prometheus, scraped: set[str]) -> None:
    board = dashboard()
    for title, expr in panel_queries(board):
        result = prometheus.query(interpolate(expr, "1m"))
        if metric_names(expr) & (GPU_FAMILIES | CONTRACT_FAMILIES):
            continue
        assert result, f"{title}: no samples for {interpolate(expr, '1m')}"
    for name, selector in variable_selectors(board):
        assert prometheus.query(interpolate(selector)), f"variable {name}: no series for {selector}"


def _firing_now(prometheus: Prometheus, alert: str) -> dict[tuple[str, ...], float]:
    """The series an alert's whole expression returns now (it fires once they last its ``for``)."""
    expr = next(a.expr for a in alerts() if a.name == alert)
    found = {}
    for sample in prometheus.query(expr):
        labels = sample["metric"]
        assert isinstance(labels, dict) and isinstance(sample["value"], list)
        key = tuple(str(labels.get(name, "")) for name in ("model", "version", "level", "reason"))
        found[key] = float(sample["value"][1])
    return found


def test_the_conditions_hold_where_the_traffic_says_and_nowhere_else(
    prometheus: Prometheus, scraped: set[str]
) -> None:
    """6 of paced's 70 requests were refused (over 5%); scored's version 2 never loaded and its
    MODEL fallback answered; no circuit opened, no release rolled back, every target answers."""
    failing = _firing_now(prometheus, "ConchFailureRateHigh")
    assert set(failing) == {("paced", "1", "", "")}, failing
    assert 0.05 < failing[("paced", "1", "", "")] < 0.15
    assert ("scored", "2", "", "") in _firing_now(prometheus, "ConchModelNotReady")
    assert set(_firing_now(prometheus, "ConchFallbackActive")) == {("scored", "1", "MODEL", "load_failed")}
    for quiet in ("ConchCircuitOpen", "ConchReleaseRolledBack", "ConchTargetDown"):
        assert _firing_now(prometheus, quiet) == {}, quiet
    for quiet in ("ConchStreamLagGrowing", "ConchStreamBrokerDown"):
        assert _firing_now(prometheus, quiet) == {}, quiet


def test_a_dead_letter_fires_its_alert_with_its_reason(prometheus: Prometheus, scraped: set[str]) -> None:
    """The records that are not JSON went to the dead-letter stream: one series, reason malformed."""
    expr = next(a.expr for a in alerts() if a.name == "ConchStreamDeadLetters")
    found = {
        (str(s["metric"]["model"]), str(s["metric"]["stream"]), str(s["metric"]["reason"]))  # type: ignore[index]
        for s in prometheus.query(expr)
    }
    assert found == {("paced", "paced-in", "malformed")}
