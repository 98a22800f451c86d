"""Which API group a call belongs to, which scope it needs, and which model it names.

The groups are Triton's (``--http-restricted-api``): health, metadata, inference, shared-memory,
model-config, model-repository, statistics, trace and logging. The access a call needs is conch's:

- ``OPEN``: server liveness, readiness and deep health, which probes must reach without a token;
- ``INFER``: reading and inference (``infer`` or ``infer:<model>``);
- ``ADMIN``: anything that changes what is served or what the server does (``admin``).

A route conch does not serve still needs ``infer``: an unauthenticated caller learns nothing, not
even which routes exist. Trace and logging settings, which conch does not serve either, need
``admin``, so a future route of those groups cannot be open by mistake (Triton's CVE-2024-0087).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Access(enum.Enum):
    OPEN = "open"
    INFER = "infer"
    ADMIN = "admin"


@dataclass(frozen=True)
class Call:
    """One call as the gateway sees it."""

    group: str
    access: Access
    #: The model the call names, or "" for a server-wide call.
    model: str = ""
    #: A listing of every model (repository index, all statistics), filtered for ``infer:<model>``.
    listing: bool = False


GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

_OPEN_HEALTH = Call("health", Access.OPEN)
#: The status page and its files hold no data (its script reads ``/ui/status.json`` with a token),
#: so a browser can load it, ask for a token and keep it. Its data is read like the statistics.
_OPEN_STATUS_PAGE = Call("", Access.OPEN)
_STATUS_PAGE_FILES = ("/", "/ui", "/ui/", "/ui/status.css", "/ui/status.js")
_STATUS_DATA = Call("statistics", Access.INFER, listing=True)
_MODEL_ACTIONS = {
    "": "metadata",
    "ready": "health",
    "config": "model-config",
    "stats": "statistics",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
}


def http_call(method: str, path: str) -> Call:
    """The call of an HTTP request (``path`` as ASGI gives it)."""
    parts = path.strip("/").split("/")
    route = parts[1:] if parts[0] == "v2" else None
    if route is None:  # the status page's paths are the only ones served outside /v2
        if path in _STATUS_PAGE_FILES:
            return _OPEN_STATUS_PAGE
        return _STATUS_DATA if path == "/ui/status.json" else Call("", Access.INFER)
    if not route:
        return Call("metadata", Access.INFER)
    head = route[0]
    if head == "health":
        return _OPEN_HEALTH
    if head == "repository":
        if route == ["repository", "index"]:
            return Call("model-repository", Access.INFER, listing=True)
        model = route[2] if len(route) >= 3 else ""
        return Call("model-repository", Access.ADMIN, model)
    if head in ("systemsharedmemory", "cudasharedmemory"):
        return Call("shared-memory", Access.INFER if route[-1] == "status" else Access.ADMIN)
    if head in ("trace", "logging"):
        return Call(head, Access.ADMIN)
    if head == "models" and len(route) >= 2:
        if route[1] == "stats" and len(route) == 2:
            return Call("statistics", Access.INFER, listing=True)
        return _model_call(method, route[1], route[2:])
    return Call("", Access.INFER)


def _model_call(method: str, model: str, rest: list[str]) -> Call:
    if len(rest) >= 2 and rest[0] == "versions":
        rest = rest[2:]
    if rest == ["trace", "setting"]:
        return Call("trace", Access.ADMIN, model)
    if rest and rest[0] == "release":
        if method == "GET" and len(rest) == 1:
            return Call("model-repository", Access.INFER, model)
        return Call("model-repository", Access.ADMIN, model)
    group = _MODEL_ACTIONS.get(rest[0] if len(rest) == 1 else "" if not rest else "?", "")
    return Call(group, Access.INFER, model)


#: gRPC method name -> (group, access, the request's field naming the model or "").
GRPC_METHODS: dict[str, tuple[str, Access, str]] = {
    "ServerLive": ("health", Access.OPEN, ""),
    "ServerReady": ("health", Access.OPEN, ""),
    "ModelReady": ("health", Access.INFER, "name"),
    "ServerMetadata": ("metadata", Access.INFER, ""),
    "ModelMetadata": ("metadata", Access.INFER, "name"),
    "ModelConfig": ("model-config", Access.INFER, "name"),
    "ModelStatistics": ("statistics", Access.INFER, "name"),
    "RepositoryIndex": ("model-repository", Access.INFER, ""),
    "RepositoryModelLoad": ("model-repository", Access.ADMIN, "model_name"),
    "RepositoryModelUnload": ("model-repository", Access.ADMIN, "model_name"),
    "SystemSharedMemoryStatus": ("shared-memory", Access.INFER, ""),
    "SystemSharedMemoryRegister": ("shared-memory", Access.ADMIN, ""),
    "SystemSharedMemoryUnregister": ("shared-memory", Access.ADMIN, ""),
    "CudaSharedMemoryStatus": ("shared-memory", Access.INFER, ""),
    "CudaSharedMemoryRegister": ("shared-memory", Access.ADMIN, ""),
    "CudaSharedMemoryUnregister": ("shared-memory", Access.ADMIN, ""),
    "ModelInfer": ("inference", Access.INFER, "model_name"),
    "ModelStreamInfer": ("inference", Access.INFER, "model_name"),
    "TraceSetting": ("trace", Access.ADMIN, "model_name"),
    "LogSettings": ("logging", Access.ADMIN, ""),
}


def grpc_call(method: str, request: object) -> Call:
    """The call of a gRPC method (its bare name, ``ModelInfer``) with its request message."""
    group, access, field = GRPC_METHODS.get(method, ("", Access.INFER, ""))
    model = str(getattr(request, field, "")) if field else ""
    listing = method == "RepositoryIndex" or (method == "ModelStatistics" and not model)
    return Call(group, access, model, listing)
