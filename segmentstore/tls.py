"""TLS for the server's listeners: one ``ssl.SSLContext`` built from files.

Contract: ``server_context(cert, key, client_ca)`` loads a PEM certificate chain and its
private key (TLS 1.2 or newer); with ``client_ca`` the peer must present a certificate
signed by that CA (mutual TLS). Every problem with the files becomes one ``TlsError`` line
naming the file, never an ``ssl`` traceback. The same context serves the wire-protocol
port; the controller's gRPC port reads the same files (``grpc_credentials``) and the HTTP
port takes the context as its ``ssl_context``.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

__all__ = ["TlsError", "grpc_credentials", "server_context"]


class TlsError(Exception):
    """A certificate or key file cannot be used (one line, names the file)."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsError(f"cannot read the TLS {what} {path}: {e.strerror or e}") from e


def server_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """A server-side context for ``cert_file``/``key_file`` (PEM).

    Example: ``ctx = server_context("server.pem", "server.key")``
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _read(cert_file, "certificate")
    _read(key_file, "key")
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        raise TlsError(
            f"the TLS certificate {cert_file} and key {key_file} do not load: {e.reason or e}"
        ) from e
    if client_ca_file:
        _read(client_ca_file, "client CA")
        try:
            ctx.load_verify_locations(client_ca_file)
        except ssl.SSLError as e:
            raise TlsError(f"the client CA {client_ca_file} does not load: {e.reason or e}") from e
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def grpc_credentials(cert_file: str, key_file: str, client_ca_file: str = "") -> Any:
    """``grpc.ssl_server_credentials`` for the same files (imported lazily: grpc is an
    optional dependency of the server)."""
    import grpc

    server_context(cert_file, key_file, client_ca_file)  # the same checks, the same errors
    root = _read(client_ca_file, "client CA") if client_ca_file else None
    pair = (_read(key_file, "key"), _read(cert_file, "certificate"))
    return grpc.ssl_server_credentials(
        [pair], root_certificates=root, require_client_auth=bool(client_ca_file)
    )
