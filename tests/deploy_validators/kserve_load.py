"""Loads KServe manifests into the kserve SDK's models: ``python kserve_load.py FILE...``.

Runs in the venv of ``kserve-requirements.txt``, not conch's. Each YAML document becomes its SDK class
(``V1alpha1ServingRuntime``, ``V1beta1InferenceService``), field by field through the models'
``openapi_types`` and ``attribute_map``; the models' own client-side validation refuses missing
required fields and bad enum values, and this loader refuses what the generated constructors would let
through silently: a key the model does not have, or a value of the wrong type. One PASS/FAIL line per
document; exit 1 when any fails.

Only ``kserve.models`` and ``kubernetes.client.models`` are imported, their packages' ``__init__``
skipped: those start kserve's model server (fastapi, cloudevents...) and the Kubernetes API client
(requests, websockets, OAuth), none of which loading a model needs or this venv installs.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import yaml


def _bare_package(name: str, parent: Path) -> Path:
    """Put package ``name`` (found in ``parent``) in sys.modules without running its ``__init__``."""
    folder = parent / name.rpartition(".")[2]
    package = types.ModuleType(name)
    package.__path__ = [str(folder)]
    sys.modules[name] = package
    return folder


_site = Path(importlib.util.find_spec("kserve").origin).parent.parent  # type: ignore[union-attr, arg-type]
_bare_package("kserve", _site)
_bare_package("kubernetes.client", _bare_package("kubernetes", _site))

import kserve.models as kserve_models  # noqa: E402
import kubernetes.client.models as kubernetes_models  # noqa: E402

KINDS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}
PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
}


class LoadError(ValueError):
    pass


def load(data: Any, klass: str, where: str) -> Any:
    if klass.startswith("list["):
        if not isinstance(data, list):
            raise LoadError(f"{where}: expected a list ({klass}), got {type(data).__name__}")
        return [load(item, klass[5:-1], f"{where}[{index}]") for index, item in enumerate(data)]
    if klass.startswith("dict("):
        if not isinstance(data, dict):
            raise LoadError(f"{where}: expected a mapping ({klass}), got {type(data).__name__}")
        inner = klass[klass.index(",") + 1 : -1].strip()
        return {key: load(value, inner, f"{where}.{key}") for key, value in data.items()}
    if klass == "object":
        return data
    if klass in PRIMITIVES:
        wanted = PRIMITIVES[klass]
        if not isinstance(data, wanted) or (isinstance(data, bool) and bool not in wanted):
            raise LoadError(f"{where}: expected {klass}, got {type(data).__name__} {data!r}")
        return data
    model = getattr(kserve_models, klass, None) or getattr(kubernetes_models, klass, None)
    if model is None:
        raise LoadError(f"{where}: the SDK has no model {klass}")
    if not isinstance(data, dict):
        raise LoadError(f"{where}: expected a {klass} mapping, got {type(data).__name__}")
    attributes = {json_name: name for name, json_name in model.attribute_map.items()}
    unknown = sorted(set(data) - set(attributes))
    if unknown:
        raise LoadError(f"{where}: {klass} has no field {', '.join(unknown)}")
    values = {
        attributes[key]: load(value, model.openapi_types[attributes[key]], f"{where}.{key}")
        for key, value in data.items()
    }
    try:
        return model(**values)
    except (TypeError, ValueError) as exc:
        raise LoadError(f"{where}: {klass}: {exc}") from None


def main(files: list[str]) -> int:
    failed = False
    for file in files:
        for document in yaml.safe_load_all(Path(file).read_text(encoding="utf-8")):
            key = (document.get("apiVersion"), document.get("kind"))
            name = document.get("metadata", {}).get("name")
            try:
                if key not in KINDS:
                    raise LoadError(f"no kserve model for {key[0]} {key[1]}")
                load(document, KINDS[key], key[1])
                print(f"PASS {file}: {key[1]} {name}")
            except LoadError as exc:
                print(f"FAIL {file}: {exc}")
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
