"""Checks of a version's data contract (``contract.yaml``), with the rules the server loads it by.

- Malformed, or not fitting the model's inputs: error; the server would not load the version.
- No training range (exported without a reference frame): info, as values outside the range seen in
  training cannot be counted until one is recorded.
- No contract: nothing; requests are checked against the config alone, as for any model.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.contracts import CONTRACT_FILENAME, ContractError, read_contract
from conch.core.findings import Finding, Severity


def contract_findings(version_dir: Path, config: mc.ModelConfig, model: str) -> list[Finding]:
    """What is wrong with ``<version>/contract.yaml`` against the completed ``config``."""
    field = f"{version_dir.name}/{CONTRACT_FILENAME}"
    try:
        contract = read_contract(version_dir)
        if contract is not None:
            contract.check_config(config)
    except ContractError as exc:
        return [
            Finding(
                "contract-malformed",
                Severity.ERROR,
                model,
                field,
                exc.message,
                "fix the key named in the message (docs/contracts.md), or export the model again",
            )
        ]
    if contract is None or any(rule.has_range for rule in contract.fields.values()):
        return []
    return [
        Finding(
            "contract-no-range",
            Severity.INFO,
            model,
            field,
            "the contract records no training range, so values outside the range seen in training are "
            "not counted",
            "export with --reference FILE (the training data, or a few hundred rows of it) to record them",
        )
    ]
