"""TLS and credentials for the SDK's connections (README "Security").

Contract: ``client_tls_context(options)`` builds the ``ssl.SSLContext`` a ``tls://``
endpoint is opened with: the CA bundle ``options.tls_ca_file`` (the system's trust store
when empty), hostname and certificate checks unless ``options.tls_verify`` is False
(Pravega's ``disable_cert_verification``), and a client certificate when the server asks
for one. Contexts are cached per (CA, verify, cert, key), so a pool builds one.
Problems with the files raise ``ConnectFailed`` with ``refused`` set: retrying won't help.
"""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING

from .errors import ConnectFailed

if TYPE_CHECKING:
    from .connection import ConnectionOptions

__all__ = ["client_tls_context"]


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
