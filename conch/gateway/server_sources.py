"""A :class:`Gateway` reading the served models: their names, their own rate limits, the requests in
flight. Kept apart from the rules so that those stay free of the server."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from conch.gateway.gateway import Gateway, GatewaySettings, Sources
from conch.gateway.rate_limit import Limit, limit_of

log = logging.getLogger(__name__)

RATE_PARAMETER = "client_rate_limit"
BURST_PARAMETER = "client_burst"


def limit_from_parameters(name: str, parameters: Any) -> Limit | None:
    """A model's ``client_rate_limit`` / ``client_burst`` config parameters as its own limit, or None.

    A value that is not a number is ignored with a warning, so a typo never refuses every request.
    """
    if RATE_PARAMETER not in parameters:
        return None
    try:
        rate = float(parameters[RATE_PARAMETER].string_value)
        burst = int(parameters[BURST_PARAMETER].string_value) if BURST_PARAMETER in parameters else 0
    except ValueError:
        log.warning("model '%s': %s and %s must be numbers; ignored", name, RATE_PARAMETER, BURST_PARAMETER)
        return None
    return limit_of(rate, burst, "model")


def gateway_for(settings: GatewaySettings, server: Any) -> Gateway | None:
    """The gateway of an :class:`~conch.server.InferenceServer`, or None when every gateway flag is off.

    Reads the key set once (ValueError when it cannot be read: the server must not start open).
    """
    if not settings.on:
        return None
    repository = server.repository

    def known() -> Collection[str]:
        return repository.models.keys()  # type: ignore[no-any-return]

    # A model's own limit, read from its config once per loaded config, not on every request.
    read: dict[str, tuple[Any, Limit | None]] = {}

    def model_limit(name: str) -> Limit | None:
        model = repository.models.get(name)
        if model is None or not model.versions:
            return None
        config = next(iter(model.versions.values())).config
        known = read.get(name)
        if known is None or known[0] is not config:
            known = read[name] = (config, limit_from_parameters(name, config.parameters))
        return known[1]

    gateway = Gateway(settings, Sources(known, model_limit, lambda: server.in_flight.count))
    if gateway.verifier is not None:
        gateway.verifier.refresh()
    return gateway
