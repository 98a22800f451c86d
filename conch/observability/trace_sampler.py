"""The sampler that puts the trace settings (:mod:`conch.observability.trace_settings`) before the one
configured at start: ``--trace-sample-ratio``, or ``OTEL_TRACES_SAMPLER``.

Why a sampler: OpenTelemetry asks it as each span starts, with the span's kind and attributes, so a
request's server span is where the settings decide, and the spans under it (its stages, its batch)
follow it as they always did. Imported by :func:`conch.observability.tracing.start` only, so a server
without traces never loads the SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from conch.observability.trace_settings import MODEL_ATTRIBUTE, LiveTraceSettings


class SettingsSampler(Sampler):
    """A request's server span starts a trace when the settings admit it and ``configured`` keeps it."""

    def __init__(self, settings: LiveTraceSettings, configured: Sampler) -> None:
        self.settings = settings
        self.configured = configured

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if kind is not SpanKind.SERVER:
            return self.configured.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )
        model: Any = (attributes or {}).get(MODEL_ATTRIBUTE, "")
        if not self.settings.admits(str(model)):
            return SamplingResult(Decision.DROP)
        result = self.configured.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if result.decision.is_sampled():
            self.settings.taken(str(model))
        return result

    def get_description(self) -> str:
        return f"TraceSettings{{{self.configured.get_description()}}}"
