"""The gateway's rules with a fake clock: token buckets, scopes, API groups and restricted APIs."""

from __future__ import annotations

import pytest

from conch.core.errors import NotFoundError
from conch.gateway.api_groups import Access, grpc_call, http_call
from conch.gateway.gateway import Gateway, GatewaySettings, Sources
from conch.gateway.rate_limit import ClientBuckets, Limit, limit_of
from conch.gateway.restricted import RestrictedApiError, RestrictedApis, parse_restriction
from conch.gateway.scopes import grant_of, missing_scope, scopes_of


def test_a_bucket_allows_its_burst_then_its_rate() -> None:
    buckets = ClientBuckets()
    limit = Limit(rate=2.0, burst=3)
    assert [buckets.take("a", limit, 0.0).allowed for _ in range(4)] == [True, True, True, False]
    refused = buckets.take("a", limit, 0.1)
    assert not refused.allowed and refused.retry_after_secs == pytest.approx(0.4)
    assert buckets.take("a", limit, 0.5).allowed  # one token after half a second at 2/s
    assert buckets.take("b", limit, 0.5).allowed  # another client has its own bucket


def test_the_headers_follow_the_ratelimit_draft() -> None:
    buckets = ClientBuckets()
    limit = Limit(rate=1.0, burst=2)
    buckets.take("a", limit, 0.0)
    buckets.take("a", limit, 0.0)
    headers = dict(buckets.take("a", limit, 0.0).headers())
    assert headers == {
        "retry-after": "1",
        "ratelimit-policy": '"default";q=2;w=2',
        "ratelimit": '"default";r=0;t=2',
    }


def test_buckets_stay_bounded_and_full_ones_go_first() -> None:
    buckets = ClientBuckets(max_clients=3)
    limit = Limit(rate=1.0, burst=1)
    for index in range(10):
        buckets.take(index, limit, float(index))
    assert len(buckets) <= 3
    buckets.take("late", limit, 100.0)  # every earlier bucket has refilled: all are dropped
    assert len(buckets) == 1


def test_limit_of_zero_rate_is_none_and_zero_burst_is_a_second() -> None:
    assert limit_of(0, 10) is None
    assert limit_of(5, 0) == Limit(5, 5)
    assert limit_of(0.5, 0) == Limit(0.5, 1)


def test_scopes_from_scope_string_and_scp_list() -> None:
    assert scopes_of({"scope": "infer admin"}) == {"infer", "admin"}
    assert scopes_of({"scp": ["infer:iris"]}) == {"infer:iris"}
    grant = grant_of({"infer:iris", "admin"})
    assert grant.admin and not grant.every_model and grant.models == {"iris"}


def test_an_infer_model_token_sees_only_its_model() -> None:
    grant = grant_of({"infer:iris"})
    known = ["iris", "iris2", "secret"]
    assert missing_scope(grant, http_call("POST", "/v2/models/iris/infer"), known) is None
    with pytest.raises(NotFoundError) as refused:
        missing_scope(grant, http_call("POST", "/v2/models/iris2/infer"), known)
    assert "secret" not in refused.value.message and "iris2" in refused.value.message
    assert missing_scope(grant, http_call("POST", "/v2/repository/models/iris/load"), known) == "admin"


def test_admin_does_not_imply_infer() -> None:
    assert missing_scope(grant_of({"admin"}), http_call("GET", "/v2/models/iris"), ["iris"]) == "infer:iris"


def test_api_groups_of_http_routes_and_grpc_methods() -> None:
    assert http_call("GET", "/v2/health/ready").access is Access.OPEN
    assert http_call("GET", "/v2/models/m/ready").access is Access.INFER
    assert http_call("POST", "/v2/models/m/release/promote").access is Access.ADMIN
    assert http_call("GET", "/v2/models/m/release").access is Access.INFER
    assert http_call("POST", "/v2/systemsharedmemory/region/r/register").access is Access.ADMIN
    assert http_call("GET", "/v2/systemsharedmemory/status").access is Access.INFER
    assert http_call("POST", "/v2/logging").access is Access.ADMIN
    assert http_call("POST", "/v2/repository/index").listing
    infer = http_call("POST", "/v2/models/m/versions/1/infer")
    assert (infer.group, infer.model) == ("inference", "m")

    class Request:
        model_name = "m"

    assert grpc_call("ModelInfer", Request()).model == "m"
    assert grpc_call("RepositoryModelLoad", Request()).access is Access.ADMIN
    assert grpc_call("ServerLive", Request()).access is Access.OPEN


def test_restricted_apis_need_their_header() -> None:
    restricted = RestrictedApis([parse_restriction("model-repository,shared-memory:admin-key=s3cret")], "API")
    restricted.check("inference", lambda key: None)
    restricted.check("model-repository", {"admin-key": "s3cret"}.get)
    with pytest.raises(RestrictedApiError, match="expecting header 'admin-key'"):
        restricted.check("shared-memory", {"admin-key": "wrong"}.get)
    with pytest.raises(ValueError, match="unknown API group"):
        parse_restriction("models:k=v")
    with pytest.raises(ValueError, match="API"):
        parse_restriction("inference")


def test_the_gateway_counts_refusals_by_model_and_client_class() -> None:
    now = [0.0]
    gateway = Gateway(
        GatewaySettings(client_rate_limit=1, client_burst=1), Sources(lambda: ["m"], clock=lambda: now[0])
    )
    call = http_call("POST", "/v2/models/m/infer")
    gateway.admit("HTTP", call, {"x-client-id": "a"}.get, "1.2.3.4")
    with pytest.raises(Exception, match="rate limit"):
        gateway.admit("HTTP", call, {"x-client-id": "a"}.get, "1.2.3.4")
    gateway.admit("HTTP", call, lambda key: None, "1.2.3.4")  # known by address: its own bucket
    assert gateway.rate_limited == {("m", "header"): 1}
    now[0] = 1.0
    gateway.admit("HTTP", call, {"x-client-id": "a"}.get, "1.2.3.4")


def test_the_in_flight_cap_sheds_inference_only() -> None:
    gateway = Gateway(GatewaySettings(max_in_flight=2), Sources(lambda: ["m"], in_flight=lambda: 2))
    with pytest.raises(Exception, match="in flight") as refused:
        gateway.admit("HTTP", http_call("POST", "/v2/models/m/infer"), lambda key: None, "")
    assert refused.value.kind.http_status == 503  # type: ignore[attr-defined]
    gateway.admit("HTTP", http_call("GET", "/v2/models/m"), lambda key: None, "")


def test_a_models_own_limit_comes_from_its_config_parameters() -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    from conch.gateway.server_sources import limit_from_parameters

    config = mc.ModelConfig()
    assert limit_from_parameters("m", config.parameters) is None
    config.parameters["client_rate_limit"].string_value = "5"
    config.parameters["client_burst"].string_value = "10"
    assert limit_from_parameters("m", config.parameters) == Limit(5.0, 10, "model")
    config.parameters["client_burst"].string_value = "many"
    assert limit_from_parameters("m", config.parameters) is None


def test_the_flags_refuse_what_cannot_work() -> None:
    from conch.cli.gateway_flags import gateway_settings
    from conch.cli.main import build_parser

    def settings(*flags: str) -> GatewaySettings:
        return gateway_settings(build_parser().parse_args(["serve", *flags]))  # type: ignore[no-any-return]

    assert not settings().on
    with pytest.raises(ValueError, match="--jwt-jwks"):
        settings("--auth", "jwt")
    assert settings("--client-rate-limit", "5", "--grpc-relay", "true").on  # the retired flag is ignored
    with pytest.raises(SystemExit):
        settings("--auth", "jwt", "--jwt-jwks", "k.json", "--jwt-algorithms", "HS256")
