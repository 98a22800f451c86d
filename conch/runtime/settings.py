"""What ``conch serve`` was asked to do: every flag and ``CONCH_*`` variable, in one frozen record.

The CLI builds it (:mod:`conch.cli.main`), :func:`conch.runtime.assembly.assemble` builds the server
from it, and the supervisors (``--workers``, ``--proxies``) hand it to their processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conch.backends.python.backend_config import BackendSetting
from conch.core.tensor_limits import TensorLimits
from conch.frontends.grpc.grpc_options import DEFAULT_ACCEPTORS, MAX_MESSAGE_BYTES, GrpcConnectionLimits
from conch.frontends.http.deep_health import DeepHealthSettings
from conch.frontends.http.limits import HttpLimits
from conch.frontends.tls import TlsSettings
from conch.gateway.gateway import GatewaySettings
from conch.models.circuit_breaker import CircuitBreakerSettings
from conch.observability.inference_log import RequestLogSettings
from conch.observability.tracing import TraceSettings
from conch.runtime.variables import variable_of
from conch.streams.config import StreamsConfig


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``conch serve`` takes, from flags or ``CONCH_*`` variables."""

    repository: Path
    host: str = "0.0.0.0"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    strict_readiness: bool = True
    server_name: str = "conch"
    default_max_batch_size: int = 4
    workers: int = 1
    #: Proxy processes owning the public ports (``conch.runtime``); 0: this process serves them;
    #: None: as many as the cores allow (``conch.runtime.proxy_count``).
    proxies: int | None = 0
    busy_poll_us: int = 1000
    grpc_acceptors: int = DEFAULT_ACCEPTORS
    model_control_mode: str = "none"
    repository_poll_secs: float = 15.0
    load_models: tuple[str, ...] = ()
    exit_timeout_secs: float = 30.0
    health_probe_timeout_ms: int = 1000
    health_max_memory_ratio: float = 0.95
    health_max_gpu_memory_ratio: float = 0.90
    health_cache_secs: float = 5
    circuit_breaker: bool = False
    circuit_breaker_defaults: CircuitBreakerSettings = field(default_factory=CircuitBreakerSettings)
    fallback_strategy: str = ""
    state_dir: str = ""
    #: The store every replica shares for rejected, promoted and re-admitted versions (empty: default).
    release_store: str = ""
    release_store_poll_secs: float = 5.0
    #: ``--backend-config`` entries (the Python backend's shared memory sizes).
    backend_config: tuple[BackendSetting, ...] = ()
    #: Auth, restricted APIs, client rate limits and the in-flight cap (all off by default).
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    #: Where OpenTelemetry traces go and how many (off by default; see conch.observability.tracing).
    tracing: TraceSettings = field(default_factory=TraceSettings)
    #: The ``--http-*`` limits, the tensor element caps and ``--grpc-max-message-bytes``.
    http_limits: HttpLimits = field(default_factory=HttpLimits)
    tensor_limits: TensorLimits = field(default_factory=TensorLimits)
    grpc_max_message_bytes: int = MAX_MESSAGE_BYTES
    #: Streams per gRPC connection, keepalive and connection age (``--grpc-*`` limits).
    grpc_connection_limits: GrpcConnectionLimits = field(default_factory=GrpcConnectionLimits)
    #: A record per inference, the audit sample and the access log (off by default).
    request_log: RequestLogSettings = field(default_factory=RequestLogSettings)
    #: TLS on the HTTP and gRPC ports (off by default; see conch.frontends.tls).
    tls: TlsSettings = field(default_factory=TlsSettings)
    #: ``--streams``: models fed from a broker's streams (None: none; see conch.streams).
    streams: StreamsConfig | None = None

    @property
    def deep_health(self) -> DeepHealthSettings:
        """The ``--health-*`` flags as :class:`DeepHealthSettings`."""
        return DeepHealthSettings(
            probe_timeout_ms=self.health_probe_timeout_ms,
            max_memory_ratio=self.health_max_memory_ratio,
            max_gpu_memory_ratio=self.health_max_gpu_memory_ratio,
            cache_secs=self.health_cache_secs,
        )


#: The flag that sets each port, by the name the messages give the port.
PORT_FLAGS = {"HTTP": "--http-port", "gRPC": "--grpc-port", "metrics": "--metrics-port"}


def cannot_listen(host: str, port: int, what: str, reason: str = "") -> str:
    """Why a port could not be opened, and the flag and variable that choose another."""
    flag = PORT_FLAGS[what]
    variable = variable_of(flag)
    why = f": {reason}" if reason else ""
    return (
        f"cannot listen on {host}:{port} ({what}){why}; if another server holds it, choose another port "
        f"with {flag} N (or {variable}=N)"
    )
