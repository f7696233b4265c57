"""TLS and credentials for the SDK's connections (README "Security").

Contract: ``client_tls_context(options)`` builds the ``ssl.SSLContext`` a ``tls://``
endpoint is opened with: the CA bundle ``options.tls_ca_file`` (the system's trust store
when empty), hostname and certificate checks unless ``options.tls_verify`` is False
(Pravega's ``disable_cert_verification``), and a client certificate when the server asks
for one. Contexts are cached per (CA, verify, cert, key), so a pool builds one.
Problems with the files raise ``ConnectFailed`` with ``refused`` set: retrying won't help.
``fetch_token`` asks the controller's ``getDelegationToken`` for a token with Basic
(user, password) or Bearer (static token) credentials; a refusal is
``AuthenticationFailed``.
"""

from __future__ import annotations

import base64
import functools
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConnectFailed
from .protocol.controller_auth import (
    ACCESS_READ,
    ACCESS_READ_WRITE,
    GET_DELEGATION_TOKEN,
    decode_delegation_token,
    encode_stream_info,
)

if TYPE_CHECKING:
    from .connection import ConnectionOptions

__all__ = ["authorization_header", "client_tls_context", "fetch_token"]


def client_tls_context(options: ConnectionOptions) -> ssl.SSLContext:
    """The context for ``tls://`` connections made with ``options``.

    Example: ``ctx = client_tls_context(ConnectionOptions(tls_ca_file="ca.pem"))``
    """
    return _context(options.tls_ca_file, options.tls_verify, options.tls_cert_file,
                    options.tls_key_file)  # fmt: skip


@functools.lru_cache(maxsize=16)
def _context(ca_file: str, verify: bool, cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if ca_file:
            ctx.load_verify_locations(ca_file)
        else:
            ctx.load_default_certs()
        if cert_file:
            ctx.load_cert_chain(cert_file, key_file or None)
    except (OSError, ssl.SSLError) as e:
        error = ConnectFailed(f"cannot use the TLS files ({ca_file or cert_file}): {e}")
        error.refused = True
        raise error from e
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def authorization_header(credentials: tuple[str, str] | str) -> str:
    """``(user, password)`` -> HTTP Basic; a string is a static token -> Bearer."""
    if isinstance(credentials, str):
        return f"Bearer {credentials}"
    user, password = credentials
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def fetch_token(
    controller: str,
    credentials: tuple[str, str] | str,
    *,
    scope: str = "",
    stream: str = "",
    write: bool = True,
    options: ConnectionOptions | None = None,
    timeout: float = 10.0,
) -> str:
    """Ask the controller at ``controller`` (``tcp://`` or ``tls://host:port``) for a
    delegation token, authenticating with ``credentials``; needs ``grpcio``.

    Example::

        token = await fetch_token("tls://ctl:9090", ("alice", "pw"), scope="app",
                                  options=ConnectionOptions(tls_ca_file="ca.pem"))
    """
    from . import connection
    from .errors import AuthenticationFailed

    try:
        import grpc
    except ImportError as e:  # pragma: no cover - grpcio ships with the server extra
        raise ConnectFailed(f"fetching a token needs grpcio: {e}") from e
    endpoint = connection.Endpoint.parse(controller)
    options = options or connection.ConnectionOptions()
    target = endpoint.netloc
    if endpoint.tls:
        try:
            root = Path(options.tls_ca_file).read_bytes() if options.tls_ca_file else None
        except OSError as e:
            raise ConnectFailed(f"cannot read the CA bundle {options.tls_ca_file}: {e}") from e
        channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root))
    else:
        channel = grpc.aio.insecure_channel(target)
    access = ACCESS_READ_WRITE if write else ACCESS_READ
    call = channel.unary_unary(
        GET_DELEGATION_TOKEN,
        request_serializer=lambda r: r,
        response_deserializer=lambda r: r,
    )
    try:
        reply = await call(
            encode_stream_info(scope, stream, access),
            metadata=(("authorization", authorization_header(credentials)),),
            timeout=timeout,
        )
    except grpc.aio.AioRpcError as e:
        code = e.code()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            raise AuthenticationFailed(f"the controller refused: {e.details()}", "") from None
        why = e.details()
        if "Connection refused" in why:  # gRPC's "failed to connect to all addresses; ..."
            why = "connection refused (is a controller listening there? --controller names it)"
        raise ConnectFailed(f"cannot get a token from {endpoint}: {why}") from None
    finally:
        await channel.close()
    return decode_delegation_token(reply)
