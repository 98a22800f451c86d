"""``conch serve``'s TLS flags: Triton's five for gRPC, and the same five for HTTP (docs/security.md).

Nothing imported here may import gRPC or tritonclient (tests/unit/cli/test_serve_arguments_import.py).
"""

from __future__ import annotations

import argparse

from conch.cli.arguments import boolean
from conch.cli.serve_flags import FlagGroup, setting
from conch.frontends.tls import TlsSettings, tls_files

PORTS = ("http", "grpc")


def tls_flags(serve: FlagGroup) -> None:
    """``--{http,grpc}-use-ssl``, ``-server-cert``, ``-server-key``, ``-root-cert``, ``-use-ssl-mutual``."""
    for port in PORTS:
        flag, name = f"--{port}", "HTTP" if port == "http" else "gRPC"
        setting(serve, f"{flag}-use-ssl", boolean, "false", f"serve {name} over TLS (TLS 1.2 or later)")
        setting(serve, f"{flag}-server-cert", str, "", f"{name}'s certificate chain, a PEM file")
        setting(
            serve, f"{flag}-server-key", str, "", "the certificate's private key, a PEM file (unencrypted)"
        )
        setting(
            serve, f"{flag}-root-cert", str, "", "the CA certificates that sign clients' certificates, PEM"
        )
        setting(
            serve,
            f"{flag}-use-ssl-mutual",
            boolean,
            "false",
            f"refuse {name} clients without a certificate signed by {flag}-root-cert",
        )


def tls_settings(args: argparse.Namespace) -> TlsSettings:
    """The TLS flags, checked (a :class:`~conch.frontends.tls.TlsError` names the flag at fault)."""
    ports = {
        port: tls_files(
            port,
            getattr(args, f"{port}_use_ssl"),
            getattr(args, f"{port}_server_cert"),
            getattr(args, f"{port}_server_key"),
            getattr(args, f"{port}_root_cert"),
            getattr(args, f"{port}_use_ssl_mutual"),
        )
        for port in PORTS
    }
    return TlsSettings(**ports)
