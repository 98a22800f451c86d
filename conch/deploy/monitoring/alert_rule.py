"""What every alert is made of: the rule (:class:`Alert`, a signal and a condition on it) and the
metric selectors carrying the rules' label matchers (:class:`Metrics`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Alert:
    """One alerting rule: ``expr`` is ``signal condition``, held for ``for_`` before it fires."""

    name: str
    signal: str
    condition: str
    for_: str | None
    severity: str
    summary: str
    description: str

    @property
    def expr(self) -> str:
        return f"{self.signal} {self.condition}"

    @property
    def anchor(self) -> str:
        """The alert's section in ``docs/runbooks.md`` (a Markdown heading named after the alert)."""
        return self.name.lower()


@dataclass(frozen=True)
class Metrics:
    """Writes each metric's selector with the rules' label matchers."""

    selector: str

    def __call__(self, name: str) -> str:
        return f"{name}{{{self.selector}}}"

    def latency(self, quantile: float) -> str:
        return (
            f"histogram_quantile({quantile}, sum by (model, version, le) "
            f"(rate({self('conch_inference_request_duration_seconds_bucket')}[5m])))"
        )

    def requests(self, shift: str = "") -> str:
        """Requests per second by model over the last hour, ``shift`` earlier: answered or failed."""
        return (
            f"(sum by (model) (rate({self('nv_inference_request_success')}[1h]{shift}))"
            f" + sum by (model) (rate({self('nv_inference_request_failure')}[1h]{shift})))"
        )

    def mean_queue_seconds(self, window: str) -> str:
        total, count = (
            self("conch_inference_queue_duration_seconds_sum"),
            self("conch_inference_queue_duration_seconds_count"),
        )
        return (
            f"(sum by (model, version) (rate({total}[{window}]))"
            f" / sum by (model, version) (rate({count}[{window}])))"
        )


def number(value: float) -> str:
    return f"{value:g}"
