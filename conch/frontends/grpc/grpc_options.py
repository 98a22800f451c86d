"""The ``grpc.aio`` server options conch uses, in one place for the in-process server and the relay."""

from __future__ import annotations

#: Triton accepts large tensors; gRPC's default 4 MiB limit would refuse a single 1024x1024 FP32 input.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024


def grpc_server_options(reuse_port: bool) -> list[tuple[str, int]]:
    """``reuse_port`` lets several worker processes listen on the same port; otherwise a port already
    taken is an error rather than silently shared."""
    return [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", int(reuse_port)),
    ]
