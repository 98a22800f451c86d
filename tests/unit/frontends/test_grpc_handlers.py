"""``generic_handlers_only``: every method of the service stays reachable without gRPC's registration."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from tritonclient.grpc import service_pb2 as pb

from conch.frontends.grpc.grpc_server import generic_handlers_only
from conch.frontends.grpc.servicer import InferenceServicer
from conch.models.served_models import ServedModels
from conch.server import InferenceServer, ServerOptions

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]


class CallDetails(NamedTuple):
    """What gRPC hands a generic handler to look a method up by."""

    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


@pytest.fixture(scope="module")
def servicer(tmp_path_factory: pytest.TempPathFactory) -> InferenceServicer:
    repository = ServedModels(tmp_path_factory.mktemp("repository"))
    return InferenceServicer(InferenceServer(repository, ServerOptions()))


@pytest.mark.parametrize("method", [m.name for m in SERVICE.methods])
def test_every_method_of_the_service_has_a_handler_bound_to_the_servicer(
    servicer: InferenceServicer, method: str
) -> None:
    (handler,) = generic_handlers_only(servicer)

    found = handler.service(CallDetails(f"/{SERVICE.full_name}/{method}"))

    assert found is not None
    behaviour = found.unary_unary or found.stream_stream
    assert behaviour == getattr(servicer, method)


def test_an_unknown_method_has_none(servicer: InferenceServicer) -> None:
    (handler,) = generic_handlers_only(servicer)

    assert handler.service(CallDetails(f"/{SERVICE.full_name}/NoSuchMethod")) is None
