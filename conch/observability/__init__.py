"""Observability beside the request path: statistics, metrics and logs. Layers report, this formats."""
