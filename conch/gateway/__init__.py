"""The gateway: who may call, and how much, before a request reaches a frontend's handler.

``api_groups`` names the API group and model of each HTTP route and gRPC method (Triton's groups),
``restricted`` is Triton's ``--http-restricted-api`` / ``--grpc-restricted-protocol``, ``tokens``
verifies JWTs, ``scopes`` turns a token's scopes into what it may do, ``rate_limit`` is the token
bucket per client, and ``gateway`` drives them all for a frontend. The rules take ``now`` and claims
as arguments; only ``gateway`` and ``tokens`` touch clocks, files and the network.

With every gateway flag off the frontends hold no gateway at all, and a request pays one attribute
check (``if self.gateway is not None``).
"""
