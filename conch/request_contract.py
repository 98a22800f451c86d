"""What a served version's data contract and a request's data lineage decide, and what they report.

The request checks and the contract rules live in :mod:`conch.core`; this module holds them to the
version a request was routed to, makes the request its scheduler runs, counts what the checks found
(:mod:`conch.observability.contract_metrics`) and adds the answer's ``filled`` parameter, freshness
and trace attributes. A version without a contract, asked without lineage parameters, costs one
``is None`` check and one empty-dict test.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.core.contract_enforcement import (
    FILLED_PARAMETER,
    ContractOutcome,
    ContractViolation,
    check_lineage,
)
from conch.core.data_lineage import Lineage, lineage_of
from conch.core.request_validation import validate_contracted_request, validate_request
from conch.core.response_stream import ResponseStream
from conch.core.types import InferenceRequest
from conch.models.model import ModelVersion
from conch.observability.contract_metrics import FIGURES
from conch.scheduling.scheduler import RequestsInFlight, ScheduledRequest
from conch.scheduling.sequence_rules import refuse_sequence_parameters


@dataclass(frozen=True, slots=True)
class ContractCheck:
    """A request's contract outcome (None: its version has no contract) and data lineage."""

    outcome: ContractOutcome | None
    lineage: Lineage | None


def checked_inputs(
    request: InferenceRequest, served: ModelVersion
) -> tuple[dict[str, np.ndarray], list[str], ContractCheck | None]:
    """The request's inputs and outputs checked against ``served``, and its contract check (None
    when there is nothing to add to the answer)."""
    contract, parameters = served.contract, request.parameters
    if contract is None:
        inputs, output_names = validate_request(
            request, served.config, served.max_batch_size_completed, served.request_rules
        )
        lineage = lineage_of(parameters) if parameters else None
        return inputs, output_names, None if lineage is None else ContractCheck(None, lineage)
    try:
        inputs, output_names, outcome = validate_contracted_request(
            request, served.config, served.max_batch_size_completed, served.request_rules, contract
        )
        lineage = lineage_of(parameters)
        check_lineage(contract, lineage, request.model_name)
    except ContractViolation as exc:
        FIGURES.violation(request.model_name, str(served.version), exc.field, exc.rule)
        raise
    FIGURES.outcome(request.model_name, str(served.version), outcome)
    return inputs, output_names, ContractCheck(outcome, lineage)


def scheduled_request(
    request: InferenceRequest,
    served: ModelVersion,
    in_flight: RequestsInFlight,
    stream: ResponseStream | None = None,
) -> tuple[ScheduledRequest, ContractCheck | None]:
    """The request checked against its version's config and contract, as its scheduler takes it, and
    what the checks add to the answer."""
    inputs, output_names, checked = checked_inputs(request, served)
    config, parameters = served.config, request.parameters
    if "sequence_id" in parameters and not config.HasField("sequence_batching"):
        refuse_sequence_parameters(parameters, request.model_name)
    rows = request.batch_size(config.max_batch_size > 0)
    scheduled = ScheduledRequest(
        inputs,
        output_names,
        rows,
        parameters,
        in_flight=in_flight,
        id=request.id,
        stream=stream,
        trace=request.trace,
    )
    return scheduled, checked


def answer_parameters(
    request: InferenceRequest, checked: ContractCheck, parameters: dict[str, Any], first: bool = True
) -> dict[str, Any]:
    """The answer's ``parameters`` with ``filled``; for the ``first`` answer to the request (a
    decoupled model may send many) its freshness is recorded and put on its trace."""
    filled = None if checked.outcome is None else checked.outcome.filled_parameter()
    if filled is not None:
        parameters = {**parameters, FILLED_PARAMETER: filled}  # the route's own dict is shared
    lineage = checked.lineage
    if lineage is None or not first:
        return parameters
    attributes: dict[str, Any] = {}
    if lineage.data_version is not None:
        attributes["conch.data_version"] = lineage.data_version
    if lineage.ingested_at is not None:
        freshness = FIGURES.answered(request.model_name, lineage.ingested_at, time.time())
        attributes["conch.ingestion_timestamp"] = lineage.ingested_at
        attributes["conch.data_freshness_s"] = round(freshness, 6)
    if request.trace is not None:
        request.trace.span.set_attributes(attributes)
    return parameters
