"""TLS on the HTTP and gRPC ports: the certificate files ``conch serve`` was given, checked once at
start, and the credentials each listener is made with.

Why: ``--auth jwt`` sends bearer tokens, and inference sends the data itself; across a network either
should travel encrypted. In Kubernetes that is often the ingress's or the mesh's job, but a server
reached directly (a VM, a pod without a mesh, a client with its own certificate) needs it here.
Triton has TLS on gRPC only, with the flags ``--grpc-use-ssl``, ``--grpc-server-cert``,
``--grpc-server-key``, ``--grpc-root-cert`` and ``--grpc-use-ssl-mutual``; conch takes the same, and
the same five for HTTP (``--http-use-ssl``, ...). The metrics port stays plain, as Triton's does:
Prometheus scrapes it inside the cluster.

With ``*-use-ssl-mutual`` the server asks each client for a certificate signed by the root
certificate (``*-root-cert``) and refuses the connection without one.

Nothing here imports gRPC at module level: the serve flags are parsed before gRPC may load.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TlsError(ValueError):
    """A TLS flag that cannot be served; the message names the flag and what to give."""


@dataclass(frozen=True)
class TlsFiles:
    """One port's TLS: off when ``cert`` is empty."""

    cert: str = ""
    key: str = ""
    root: str = ""
    mutual: bool = False

    @property
    def on(self) -> bool:
        return bool(self.cert)

    def ssl_context(self) -> ssl.SSLContext:
        """The server's context (TLS 1.2 or later) for an asyncio server (the HTTP port)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        if self.root:
            context.load_verify_locations(self.root)
        if self.mutual:
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self) -> Any:
        """``grpc.ServerCredentials`` for ``add_secure_port`` (the gRPC port)."""
        import grpc

        root = Path(self.root).read_bytes() if self.root else None
        pair = (Path(self.key).read_bytes(), Path(self.cert).read_bytes())
        return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=self.mutual)


@dataclass(frozen=True)
class TlsSettings:
    """``conch serve``'s TLS for its HTTP and gRPC ports."""

    http: TlsFiles = field(default_factory=TlsFiles)
    grpc: TlsFiles = field(default_factory=TlsFiles)

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> TlsSettings:
        """The settings as ``dataclasses.asdict`` wrote them (for the proxy processes)."""
        return cls(TlsFiles(**document["http"]), TlsFiles(**document["grpc"]))


def tls_files(port: str, use_ssl: bool, cert: str, key: str, root: str, mutual: bool) -> TlsFiles:
    """One port's TLS flags (``port``: ``http`` or ``grpc``), checked: the files are readable PEM and
    the key is the certificate's. Raises :class:`TlsError` naming the flag at fault."""
    flag = f"--{port}"
    if not use_ssl:
        given = [
            name for name, value in (("server-cert", cert), ("server-key", key), ("root-cert", root)) if value
        ]
        if given or mutual:
            named = ", ".join(f"{flag}-{name}" for name in given) or f"{flag}-use-ssl-mutual"
            raise TlsError(
                f"{named} given without {flag}-use-ssl true; add it to serve {port.upper()} over TLS"
            )
        return TlsFiles()
    if not cert or not key:
        raise TlsError(f"{flag}-use-ssl needs {flag}-server-cert and {flag}-server-key (PEM files)")
    if mutual and not root:
        raise TlsError(
            f"{flag}-use-ssl-mutual needs {flag}-root-cert: the CA that signs the clients' certificates"
        )
    for name, path in (("server-cert", cert), ("server-key", key), ("root-cert", root)):
        try:
            if path:
                Path(path).read_bytes()
        except OSError as exc:
            raise TlsError(f"{flag}-{name} {path}: cannot read it ({exc.strerror or exc})") from None
    files = TlsFiles(cert, key, root, mutual)
    try:
        files.ssl_context()
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(
            f"{flag}-server-cert, {flag}-server-key or {flag}-root-cert is not a PEM certificate and its "
            f"private key ({exc.__class__.__name__}: {getattr(exc, 'reason', None) or exc})"
        ) from None
    return files


def bind_grpc(server: Any, address: str, tls: TlsFiles) -> None:
    """Listen on ``address``, with TLS when ``tls`` is on (``grpc.aio.Server``'s ports)."""
    if tls.on:
        server.add_secure_port(address, tls.grpc_credentials())
    else:
        server.add_insecure_port(address)
