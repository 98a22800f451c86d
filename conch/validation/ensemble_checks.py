"""``conch validate`` on an ensemble: its own config, by the rules the server applies at load.

Why only its own config: an ensemble has no model file (its version folders stay empty) and its steps
are other model folders, which the server checks it against once they are loaded and completed from
their graphs (``docs/ensembles.md``). The data flow (every output written, every step input with a
source, no cycle) needs nothing but the ensemble's ``config.pbtxt``, so it is checked here with the
server's own function, :func:`conch.scheduling.ensemble.plan.ensemble_problems`.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.findings import Finding, Severity
from conch.scheduling.ensemble.plan import ensemble_problems

_HINT = (
    "each message says what to change; the steps' own models are checked against the ensemble when the "
    "server loads it (docs/ensembles.md)"
)


def ensemble_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    """One error per rule the ensemble's config breaks."""
    return [
        Finding("ensemble-invalid", Severity.ERROR, model, "ensemble_scheduling", message, _HINT)
        for message in ensemble_problems(config)
    ]
