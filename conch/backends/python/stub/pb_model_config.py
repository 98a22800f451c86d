"""``pb_utils.ModelConfig``: the config an ``auto_complete_config`` may change."""

from __future__ import annotations

import json
from typing import Any


class ModelConfig:
    """The model's config (Triton's JSON form) as ``auto_complete_config`` may change it: the batch
    size, the dynamic batcher, inputs, outputs and the transaction policy."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        self._model_config = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = int(self._model_config.get("max_batch_size", 0))
        if configured > max_batch_size:
            raise ValueError(
                f"the config of model '{self._name}' sets max_batch_size {configured}, but its "
                f"auto_complete_config asks for {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if self._model_config.get(other):
                raise ValueError(
                    f"the config of model '{self._name}' uses {other}; its auto_complete_config cannot "
                    "switch it to dynamic_batching"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        unknown = set(transaction_policy_dict) - {"decoupled"}
        if unknown:
            raise ValueError(f"model_transaction_policy has no field(s) {sorted(unknown)}")
        current = self._model_config.get("model_transaction_policy", {})
        wanted = bool(transaction_policy_dict.get("decoupled", False))
        if "decoupled" in current and bool(current["decoupled"]) != wanted:
            raise ValueError(
                f"the config of model '{self._name}' sets decoupled {current['decoupled']}, but its "
                f"auto_complete_config asks for {wanted}"
            )
        self._model_config["model_transaction_policy"] = {"decoupled": wanted}

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def _add(self, role: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
        if "name" not in entry:
            raise ValueError(f"an {role} added by auto_complete_config of model '{self._name}' has no 'name'")
        extra = set(entry) - set(allowed)
        if extra:
            raise ValueError(
                f"{role} '{entry['name']}' of model '{self._name}' has field(s) {sorted(extra)}; "
                f"only {list(allowed)} can be set"
            )
        for required in ("data_type", "dims"):
            if required not in entry:
                raise ValueError(f"{role} '{entry['name']}' of model '{self._name}' has no '{required}'")
        for current in self._model_config[role]:
            if current.get("name") != entry["name"]:
                continue
            declared = current.get("data_type", "TYPE_INVALID")
            if declared not in ("TYPE_INVALID", entry["data_type"]):
                raise ValueError(
                    f"model '{self._name}' {role} '{entry['name']}': the config says {declared}, "
                    f"auto_complete_config says {entry['data_type']}"
                )
            if current.get("dims") and list(current["dims"]) != list(entry["dims"]):
                raise ValueError(
                    f"model '{self._name}' {role} '{entry['name']}': the config says dims "
                    f"{list(current['dims'])}, auto_complete_config says {list(entry['dims'])}"
                )
            current.update(entry)
            return
        self._model_config[role].append(dict(entry))
