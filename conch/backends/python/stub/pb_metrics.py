"""``pb_utils.MetricFamily`` and ``Metric``: custom metrics a model defines.

Each change goes to the server (fire and forget), which sums the families over the model's processes
and shows them on ``/metrics``; ``value()`` is this process's own view.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from pb_errors import TritonModelException

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_families: dict[str, tuple[int, str]] = {}


class MetricFamily:
    """A metric family the model defines, shown on the server's ``/metrics`` page."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if not _METRIC_NAME.fullmatch(name or ""):
            raise TritonModelException(f"metric family name '{name}' is not a valid Prometheus metric name")
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException("kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM")
        known = _families.setdefault(name, (kind, description))
        if known != (kind, description):
            raise TritonModelException(
                f"metric family '{name}' already exists with another kind or description"
            )
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        return Metric(self, labels or {}, buckets)


class Metric:
    """One metric of a family, by its labels: ``increment``, ``set``, ``observe`` and ``value``.

    ``value()`` is what this process has counted (or last set); the page shows the sum over every
    process of the model.
    """

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        for key in labels:
            if not _LABEL_NAME.fullmatch(str(key)):
                raise TritonModelException(f"metric label name '{key}' is not a valid Prometheus label name")
        if family.kind == MetricFamily.HISTOGRAM and not buckets:
            raise TritonModelException("a histogram metric needs its buckets")
        if family.kind != MetricFamily.HISTOGRAM and buckets:
            raise TritonModelException("only a histogram metric takes buckets")
        self._family = family
        self._labels = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        self._buckets = tuple(sorted(float(b) for b in buckets or ()))
        self._value = 0.0
        self._send("create", 0.0)

    def increment(self, value: float) -> None:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("a histogram metric is observed, not incremented")
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter can only be incremented by a non-negative value")
        self._value += value
        self._send("increment", value)

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge metric can be set")
        self._value = float(value)
        self._send("set", value)

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram metric can observe a value")
        self._value += value
        self._send("observe", value)

    def value(self) -> float:
        return self._value

    def _send(self, action: str, value: float) -> None:
        runtime = _runtime()
        if runtime is not None:
            family = self._family
            runtime.metric(
                family.name,
                family.description,
                family.kind,
                self._labels,
                action,
                float(value),
                self._buckets,
            )


def _runtime() -> Any:
    """The stub's runtime, which ``triton_python_backend_utils`` holds (None outside a model's process)."""
    utils = sys.modules.get("triton_python_backend_utils")
    return getattr(utils, "_runtime", None)
