"""A real Prometheus scrapes the data-contract and freshness families while a known load runs, and its
queries give back what was sent: refusals by field and rule, rows filled by the contract's default,
and the freshness of answers whose ingestion time the client set."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.http as httpclient
import yaml
from tritonclient.utils import InferenceServerException

from tests.fixtures.data_contracts import AMOUNT_CONTRACT
from tests.fixtures.python_models import write_python_model
from tests.integration.prometheus_server import PROMETHEUS, Prometheus
from tests.integration.server_process import ServerProcess

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (make test installs it with apt-get)"
)
pytestmark = [pytestmark, pytest.mark.prometheus]  # the programs this file drives

MODEL = "scored"
CONFIG = """
name: "scored"
backend: "python"
max_batch_size: 8
input [ { name: "amount" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "score" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
CODE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            amount = pb_utils.get_input_tensor_by_name(request, "amount").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("score", amount * 2)]))
        return responses
"""
#: Every request's data was ingested this long before it was sent.
AGE_S = 2.0
#: Of each 10 requests: 6 whole, 3 without ``amount`` (filled), 1 without ``data_version`` (refused).
PLAN = ["whole"] * 6 + ["filled"] * 3 + ["refused"]
ROUNDS = 6


@pytest.fixture(scope="module")
def conch(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = tmp_path_factory.mktemp("contract-models")
    write_python_model(root, MODEL, CONFIG, CODE)
    (root / MODEL / "1" / "contract.yaml").write_text(yaml.safe_dump(AMOUNT_CONTRACT))
    return start_server(root)


def send(client: httpclient.InferenceServerClient, kind: str) -> None:
    """One request of ``kind``, ingested AGE_S before it is sent; checks its answer."""
    inputs = []
    if kind != "filled":
        amount = httpclient.InferInput("amount", [1, 1], "FP32")
        amount.set_data_from_numpy(np.array([[1.5]], dtype=np.float32))
        inputs.append(amount)
    parameters = {"ingestion_timestamp": f"{time.time() - AGE_S:.3f}"}
    if kind != "refused":
        parameters["data_version"] = "batch-1"
    try:
        result = client.infer(MODEL, inputs, parameters=parameters)
    except InferenceServerException as exc:
        assert kind == "refused" and exc.status() == "400", exc
        return
    assert kind != "refused" and float(result.as_numpy("score")[0, 0]) == (10.0 if kind == "filled" else 3.0)


@pytest.fixture(scope="module")
def sent(conch: ServerProcess, prometheus: Prometheus) -> dict[str, int]:
    """One round of the plan, scraped (a series is born at its first count, and rate() needs it
    scraped before), then the rest; how many of each kind went."""
    fresh = f'sum(conch_data_freshness_seconds_count{{model="{MODEL}"}})'
    with httpclient.InferenceServerClient(conch.http_url) as client:
        for kind in PLAN:
            send(client, kind)
        prometheus.wait_for(fresh, len(PLAN) - PLAN.count("refused"))
        time.sleep(2.0)  # two more scrapes at the first round's counts
        for kind in PLAN * (ROUNDS - 1):
            send(client, kind)
    counts = {kind: PLAN.count(kind) * ROUNDS for kind in set(PLAN)}
    prometheus.wait_for(fresh, counts["whole"] + counts["filled"])
    return counts


def test_refusals_and_defaults_are_counted_by_field_and_rule(
    prometheus: Prometheus, sent: dict[str, int]
) -> None:
    refused = f'conch_contract_violations_total{{model="{MODEL}",field="data_version",rule="required"}}'
    filled = f'conch_contract_filled_total{{model="{MODEL}",field="amount"}}'
    prometheus.wait_for(refused, sent["refused"])
    prometheus.wait_for(filled, sent["filled"])
    # As a dashboard reads them: the share of refused requests over the last minute (the first round
    # was scraped before the rest, so the window sees the other rounds' counts rise).
    answered = f'conch_data_freshness_seconds_count{{model="{MODEL}"}}'
    share = prometheus.scalar(
        f"sum(increase({refused}[1m])) / (sum(increase({refused}[1m])) + sum(increase({answered}[1m])))"
    )
    assert share == pytest.approx(PLAN.count("refused") / len(PLAN), abs=0.02)


def test_freshness_quantiles_bracket_the_age_the_client_set(
    prometheus: Prometheus, sent: dict[str, int]
) -> None:
    buckets = f'conch_data_freshness_seconds_bucket{{model="{MODEL}"}}'
    median = prometheus.scalar(f"histogram_quantile(0.5, sum by (le) ({buckets}))")
    mean = prometheus.scalar(
        f'sum(conch_data_freshness_seconds_sum{{model="{MODEL}"}}) / '
        f'sum(conch_data_freshness_seconds_count{{model="{MODEL}"}})'
    )
    # Each answer is AGE_S plus its own latency; the median is read within its bucket (1 s to 2.5 s).
    assert AGE_S <= mean < AGE_S + 1.0
    assert 1.0 <= median <= 2.5


def test_prometheus_reads_the_contract_families_types(prometheus: Prometheus, sent: dict[str, int]) -> None:
    metadata = prometheus.metadata()
    assert metadata["conch_contract_violations_total"][0]["type"] == "counter"
    assert metadata["conch_contract_filled_total"][0]["type"] == "counter"
    assert metadata["conch_data_freshness_seconds"][0]["type"] == "histogram"
