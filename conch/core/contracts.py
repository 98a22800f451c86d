"""A model version's data contract (``contract.yaml``): what each input may hold, read once at load.

The file is a Frictionless Table Schema: one entry of ``fields`` per model input, with Table Schema's
own ``name``, ``type`` and ``constraints`` (``required``, ``enum``, ``minimum``, ``maximum``). What
Table Schema has no word for sits in a ``conch:`` block, on a field or at the top:

- a field's ``conch.datatype`` (the V2 tensor datatype), ``conch.missing`` (``impute``: the
  pipeline treats a missing value, so it goes to the model as missing; ``default``: the contract's
  ``conch.default`` fills it), ``conch.unknown_category`` (``refuse`` or ``count``) and
  ``conch.out_of_range`` (``count`` or ``refuse``);
- the top block's ``data_version`` and ``ingestion_timestamp`` (``required: true`` to refuse requests
  without them) and ``range`` (``reference`` when the training range was measured, else ``none``).

Why Table Schema rather than JSON Schema: a contract describes columns of a table, one value per row,
and Table Schema says exactly that (typed fields, ``required``, ``enum``, ranges, the text that means
missing) where JSON Schema describes nested documents and needs a convention for rows.

Parsing checks every rule a request will be held to, so a hand-edited file that is wrong fails the
load with the field and key named, never a request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError

CONTRACT_FILENAME = "contract.yaml"
CONTRACT_FORMAT = "conch.data-contract/1"
#: Table Schema types by V2 datatype kind.
TABLE_TYPES = {"FP": "number", "IN": "integer", "UI": "integer", "BO": "boolean", "BY": "string"}
MISSING_TREATMENTS = ("impute", "default", "refuse")
UNKNOWN_CATEGORY = ("refuse", "count")
OUT_OF_RANGE = ("count", "refuse")

Value = float | int | str | bool


class ContractError(InvalidArgumentError):
    """A ``contract.yaml`` that cannot be read or breaks a rule; the message names the field and key."""


@dataclass(frozen=True)
class FieldContract:
    """The rules for one model input. ``missing`` is ``refuse`` exactly when the field is required."""

    name: str
    datatype: str
    missing: str = "refuse"
    default: Value | None = None
    categories: tuple[Value, ...] | None = None
    unknown_category: str = "count"
    minimum: float | None = None
    maximum: float | None = None
    out_of_range: str = "count"
    #: The column's name in the notebook's frame, where the tensor name differs (Table Schema's title).
    title: str | None = None
    #: ``categories`` as a request's values come (text as bytes and str), for one lookup per value.
    known: frozenset[object] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        categories = self.categories or ()
        text = {each.encode() for each in categories if isinstance(each, str)}
        # A float category as the request's dtype holds it: 0.1 arrives as float32's 0.100000001.
        dtype = datatypes.BY_NAME[self.datatype].numpy if self.datatype.startswith("FP") else None
        rounded = {float(dtype.type(each)) for each in categories} if dtype is not None else set()
        object.__setattr__(self, "known", frozenset({*categories, *text, *rounded}))

    @property
    def required(self) -> bool:
        return self.missing == "refuse"

    @property
    def has_range(self) -> bool:
        return self.minimum is not None or self.maximum is not None

    @property
    def table_type(self) -> str:
        return TABLE_TYPES[self.datatype[:2]]

    @property
    def holds_missing(self) -> bool:
        """Whether a missing value can be written inside the tensor: NaN in floats, ``""`` in text."""
        return self.datatype.startswith("FP") or self.datatype == "BYTES"


@dataclass(frozen=True)
class Contract:
    """Every input's rules, by input name, and the rules for the request's data lineage."""

    fields: dict[str, FieldContract]
    data_version_required: bool = False
    ingestion_timestamp_required: bool = False
    #: ``reference``: the ranges were measured on a reference frame; ``none``: no range recorded.
    range_source: str = "none"

    def supplies(self, name: str) -> bool:
        """Whether an absent input ``name`` is completed by the contract (imputed or defaulted)."""
        rule = self.fields.get(name)
        return rule is not None and not rule.required

    def check_config(self, config: mc.ModelConfig) -> None:
        """Refuse a contract whose fields are not inputs of the completed ``config``, or not of their
        datatype."""
        model = config.name
        inputs = {}
        for entry in config.input:
            known = datatypes.BY_CONFIG_TYPE.get(entry.data_type)
            inputs[entry.name] = known.name if known is not None else mc.DataType.Name(entry.data_type)
        for name, rule in self.fields.items():
            if name not in inputs:
                raise ContractError(
                    f"{CONTRACT_FILENAME} of model '{model}': field '{name}' is not an input of the model; "
                    f"its inputs are {sorted(inputs)}"
                )
            if inputs[name] != rule.datatype:
                raise ContractError(
                    f"{CONTRACT_FILENAME} of model '{model}': field '{name}' has datatype "
                    f"{rule.datatype}, but the model's input is {inputs[name]}"
                )


def contract_document(contract: Contract) -> dict[str, Any]:
    """The YAML document of ``contract``: what :func:`parse_contract` reads back to an equal contract."""
    fields = []
    for rule in contract.fields.values():
        constraints: dict[str, Any] = {"required": rule.required}
        if rule.categories is not None:
            constraints["enum"] = list(rule.categories)
        if rule.minimum is not None:
            constraints["minimum"] = rule.minimum
        if rule.maximum is not None:
            constraints["maximum"] = rule.maximum
        conch: dict[str, Any] = {"datatype": rule.datatype, "missing": rule.missing}
        if rule.default is not None:
            conch["default"] = rule.default
        if rule.categories is not None:
            conch["unknown_category"] = rule.unknown_category
        if rule.has_range:
            conch["out_of_range"] = rule.out_of_range
        entry: dict[str, Any] = {"name": rule.name, "type": rule.table_type}
        if rule.title is not None:
            entry["title"] = rule.title
        fields.append({**entry, "constraints": constraints, "conch": conch})
    return {
        "fields": fields,
        "missingValues": [""],
        "conch": {
            "format": CONTRACT_FORMAT,
            "range": contract.range_source,
            "data_version": {"required": contract.data_version_required},
            "ingestion_timestamp": {"required": contract.ingestion_timestamp_required},
        },
    }


def read_contract(version_dir: Path) -> Contract | None:
    """The version's contract, None when it has no ``contract.yaml``; a :class:`ContractError` when
    the file is malformed."""
    path = version_dir / CONTRACT_FILENAME
    if not path.is_file():
        return None
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ContractError(f"{CONTRACT_FILENAME} is not valid YAML: {exc}") from None
    return parse_contract(document)


def parse_contract(document: Any) -> Contract:
    """A contract from the loaded YAML document, every rule checked."""
    if not isinstance(document, Mapping):
        raise ContractError(f"{CONTRACT_FILENAME} must hold a mapping with 'fields'")
    top = _block(document, "conch", "the top level")
    fields = document.get("fields")
    if not isinstance(fields, list) or not fields:
        raise ContractError(f"{CONTRACT_FILENAME} must have 'fields': a list with one entry per model input")
    parsed: dict[str, FieldContract] = {}
    for position, entry in enumerate(fields):
        rule = _field(entry, position)
        if rule.name in parsed:
            raise ContractError(f"{CONTRACT_FILENAME}: field '{rule.name}' is described twice")
        parsed[rule.name] = rule
    range_source = top.get("range", "none")
    if range_source not in ("reference", "none"):
        raise ContractError(f"{CONTRACT_FILENAME}: conch.range must be 'reference' or 'none'")
    return Contract(
        fields=parsed,
        data_version_required=_required_flag(top, "data_version"),
        ingestion_timestamp_required=_required_flag(top, "ingestion_timestamp"),
        range_source=str(range_source),
    )


def _field(entry: Any, position: int) -> FieldContract:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ContractError(f"{CONTRACT_FILENAME}: fields[{position}] must be a mapping with a 'name'")
    name = entry["name"]
    where = f"{CONTRACT_FILENAME}: field '{name}'"
    conch = _block(entry, "conch", f"field '{name}'")
    constraints = _block(entry, "constraints", f"field '{name}'")
    datatype = conch.get("datatype")
    if not isinstance(datatype, str) or datatype[:2] not in TABLE_TYPES:
        raise ContractError(f"{where}: conch.datatype must be a V2 datatype such as FP32, INT64 or BYTES")
    expected_type = TABLE_TYPES[datatype[:2]]
    if entry.get("type", expected_type) != expected_type:
        raise ContractError(f"{where}: type must be '{expected_type}' for datatype {datatype}")
    required = constraints.get("required", False)
    if not isinstance(required, bool):
        raise ContractError(f"{where}: constraints.required must be true or false")
    missing = conch.get("missing", "refuse" if required else None)
    if missing not in MISSING_TREATMENTS:
        raise ContractError(
            f"{where}: conch.missing must be one of {list(MISSING_TREATMENTS)} (how a missing value is "
            "treated: impute passes it to the model, default fills conch.default)"
        )
    if required != (missing == "refuse"):
        raise ContractError(
            f"{where}: constraints.required is {str(required).lower()} but conch.missing is '{missing}'; "
            "a required field refuses a missing value, any other imputes or takes its default"
        )
    if missing == "impute" and not (datatype.startswith("FP") or datatype == "BYTES"):
        raise ContractError(
            f"{where}: a {datatype} tensor cannot carry a missing value (only floats, as NaN, and text, "
            "as an empty string, can): give it conch.missing: default and a conch.default"
        )
    default = _value(conch.get("default"), datatype, f"{where}: conch.default")
    if missing == "default" and default is None:
        raise ContractError(f"{where}: conch.missing is 'default' but conch.default is not given")
    categories = constraints.get("enum")
    if categories is not None:
        if not isinstance(categories, list) or not categories:
            raise ContractError(f"{where}: constraints.enum must be a non-empty list")
        categories = tuple(_value(each, datatype, f"{where}: constraints.enum") for each in categories)
    return FieldContract(
        name=name,
        datatype=datatype,
        missing=missing,
        default=default,
        categories=categories,
        unknown_category=_choice(conch, "unknown_category", UNKNOWN_CATEGORY, where),
        minimum=_bound(constraints, "minimum", where),
        maximum=_bound(constraints, "maximum", where),
        out_of_range=_choice(conch, "out_of_range", OUT_OF_RANGE, where),
        title=entry.get("title") if isinstance(entry.get("title"), str) else None,
    )


def _block(mapping: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    block = mapping.get(key) or {}
    if not isinstance(block, Mapping):
        raise ContractError(f"{CONTRACT_FILENAME}: '{key}' of {where} must be a mapping")
    return block


def _required_flag(top: Mapping[str, Any], key: str) -> bool:
    block = top.get(key) or {}
    required = block.get("required", False) if isinstance(block, Mapping) else None
    if not isinstance(required, bool):
        raise ContractError(f"{CONTRACT_FILENAME}: conch.{key} must be a mapping like {{required: true}}")
    return required


def _choice(block: Mapping[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    value = block.get(key, "count")
    if value not in choices:
        raise ContractError(f"{where}: conch.{key} must be one of {list(choices)}")
    return str(value)


def _bound(constraints: Mapping[str, Any], key: str, where: str) -> float | None:
    value = constraints.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ContractError(f"{where}: constraints.{key} must be a number")
    return float(value)


def _value(value: Any, datatype: str, where: str) -> Value | None:
    """``value`` as the field's type, or a ContractError saying which type it must be."""
    if value is None:
        return None
    kind = TABLE_TYPES[datatype[:2]]
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ContractError(f"{where} must be a {kind} for datatype {datatype}, got {value!r}")
