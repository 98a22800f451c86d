"""The server-wide settings every backend builder reads (``conch serve``'s flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from conch.models.circuit_breaker import CircuitBreakerSettings
from conch.models.strategy import FallbackLevel
from conch.repository import autocomplete


@dataclass(frozen=True)
class LoadOptions:
    """Server-wide settings that shape how models are completed and placed."""

    default_max_batch_size: int = autocomplete.DEFAULT_MAX_BATCH_SIZE
    #: Cores this process's models may use for their default thread counts (None: the machine's).
    cpu_cores: int | None = None
    #: The server's ``--circuit-breaker-*`` settings, and whether ``--circuit-breaker`` turns them on.
    breaker_defaults: CircuitBreakerSettings = field(default_factory=CircuitBreakerSettings)
    breakers_on: bool = False
    #: The server's ``--fallback-strategy``, for models whose config does not set one.
    fallback_levels: tuple[FallbackLevel, ...] = ()
