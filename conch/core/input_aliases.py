"""Inputs a client may name by another name: the DataFrame columns that export renamed.

``conch.export`` gives a column such as ``od280/od315_of_diluted_wines`` the tensor name
``od280_od315_of_diluted_wines`` and records ``{"column": "tensor name"}`` as JSON in the config's
``parameters`` under :data:`COLUMN_INPUTS_PARAMETER`. A request that names the column is served as if
it named the tensor, so a client that builds its inputs from the frame's own columns works unchanged.
The parameter is read only when a request names an input the config does not have, so the usual
path pays nothing.
"""

from __future__ import annotations

import functools
import json

from tritonclient.grpc import model_config_pb2 as mc

#: ``config.pbtxt`` parameter holding the renamed columns as JSON: ``{"column": "tensor name"}``.
COLUMN_INPUTS_PARAMETER = "conch.column_inputs"


def input_aliases(config: mc.ModelConfig) -> dict[str, str]:
    """The config's aliases (column name to input name); empty when it has none or they are unreadable."""
    if COLUMN_INPUTS_PARAMETER not in config.parameters:
        return {}
    return aliases_from_json(config.parameters[COLUMN_INPUTS_PARAMETER].string_value)


@functools.lru_cache(maxsize=256)
def aliases_from_json(text: str) -> dict[str, str]:
    """The parameter's value read; anything but a JSON object of names gives no aliases."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return {}
    if not isinstance(body, dict):
        return {}
    return {str(column): name for column, name in body.items() if isinstance(name, str)}
