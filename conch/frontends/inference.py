"""The part of an inference both frontends do the same way, once the request is decoded.

Why one place: a release's route key, the decoupled refusal's wording (``endpoint``), the
classification extension and outputs written into shared-memory regions apply alike to HTTP and
gRPC; the frontends differ only in how they decode and encode.
"""

from __future__ import annotations

from conch.core.tensor_limits import check_element_counts
from conch.core.types import InferenceRequest, InferenceResponse
from conch.frontends.classified_outputs import classify_outputs
from conch.observability.inference_log import note_request, note_response
from conch.router.release_split import ROUTE_KEY_PARAMETER
from conch.server import InferenceServer
from conch.shared_memory.tensors import RegionLeases


async def answer(
    server: InferenceServer,
    request: InferenceRequest,
    leases: RegionLeases,
    endpoint: str,
    route_key: str | None = None,
) -> InferenceResponse:
    """Run ``request`` and finish its response: classified outputs, outputs written to regions.

    A client's request is held to the element caps here; a model's own calls (BLS, ensemble steps)
    go to the server directly and are not.
    """
    note_request(request)
    check_element_counts(request, server.options.tensor_limits)
    if route_key is not None:
        request.parameters.setdefault(ROUTE_KEY_PARAMETER, route_key)
    response = await server.infer(request, endpoint=endpoint)
    classify_outputs(server.repository, request, response)
    leases.write_outputs(request, response)
    note_response(response)
    return response
