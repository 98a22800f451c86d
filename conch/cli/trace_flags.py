"""``conch serve``'s trace flags: where OpenTelemetry spans go and how many requests are traced.

The standard ``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME`` and ``OTEL_TRACES_SAMPLER(_ARG)``
variables work as in any OpenTelemetry SDK; these flags are the same settings where flags are the
habit, and win over the variables. Nothing imported here loads the SDK (nor gRPC: see
tests/unit/cli/test_serve_arguments_import.py).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from conch.cli.arguments import fraction
from conch.cli.serve_flags import FlagGroup, setting

if TYPE_CHECKING:
    from conch.observability.tracing import TraceSettings


def endpoint(text: str) -> str:
    """An ``http://`` or ``https://`` URL of an OTLP/HTTP receiver; empty: none."""
    if not text:
        return ""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"expected an http:// or https:// URL of an OTLP/HTTP receiver, such as "
            f"http://localhost:4318/v1/traces; got '{text}'"
        )
    return text


def sample_ratio(text: str) -> float | None:
    """A share of traces from 0 to 1; empty: the ``OTEL_TRACES_SAMPLER`` variables decide."""
    return fraction(text) if text else None


def trace_flags(serve: FlagGroup) -> None:
    """OpenTelemetry traces (see conch docs observability)."""
    setting(
        serve,
        "--trace-otlp-endpoint",
        endpoint,
        "",
        "send OpenTelemetry traces of inference requests over OTLP/HTTP to this URL (a bare "
        "http://host:4318 gets /v1/traces); empty: traces are on only when OTEL_EXPORTER_OTLP_ENDPOINT "
        "or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set",
    )
    setting(
        serve,
        "--trace-sample-ratio",
        sample_ratio,
        "",
        "the share of new traces recorded, 0 to 1 (a caller's sampled traceparent is always followed: "
        "ParentBased(TraceIdRatioBased)); empty: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG decide",
    )


def trace_settings(args: argparse.Namespace) -> TraceSettings:
    """The trace flags as :class:`~conch.observability.tracing.TraceSettings`."""
    from conch.observability.tracing import TraceSettings

    return TraceSettings(endpoint=args.trace_otlp_endpoint, sample_ratio=args.trace_sample_ratio)
