"""TLS and authorization for the server (issue 20; README "Security").

``tls_context(config)`` and ``authorizer(config)`` turn the settings into what the
listeners and connections use (None when off); their errors are one line each
(``SecurityError``), shown by ``serve`` as a startup failure.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ServerConfig
from ..tls import TlsError, server_context
from .checker import TOKEN_CHECK_FAILED, TOKEN_EXPIRED, Authorizer, TokenCheck
from .passwords import PasswordFile
from .tokens import Permission, TokenExpired, TokenInvalid, TokenSigner, load_secret

__all__ = [
    "TOKEN_CHECK_FAILED",
    "TOKEN_EXPIRED",
    "Authorizer",
    "Permission",
    "SecurityError",
    "TokenCheck",
    "TokenExpired",
    "TokenInvalid",
    "TokenSigner",
    "authorizer",
    "controller_authenticator",
    "password_checker",
    "tls_context",
]

if TYPE_CHECKING:
    from .controller_auth import ControllerAuth


class SecurityError(Exception):
    """A TLS or auth setting cannot be used (one line)."""


def tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    if not config.tls_cert_file:
        return None
    try:
        return server_context(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file)
    except TlsError as e:
        raise SecurityError(str(e)) from e


def signer(config: ServerConfig) -> TokenSigner | None:
    if config.auth != "on":
        return None
    try:
        return TokenSigner(load_secret(config.auth_token_secret_file))
    except ValueError as e:
        raise SecurityError(str(e)) from e


def controller_authenticator(config: ServerConfig) -> ControllerAuth | None:
    """The controller's authentication (None when auth is off; imports grpc)."""
    s = signer(config)
    if s is None:
        return None
    if not config.auth_password_file:
        raise SecurityError("auth = on with a controller needs auth_password_file")
    return _password_auth(config, s)


def password_checker(config: ServerConfig) -> ControllerAuth:
    """Basic/Bearer checks against the password file, for the HTTP port (http_auth)."""
    return _password_auth(config, signer(config))


def _password_auth(config: ServerConfig, s: TokenSigner | None) -> ControllerAuth:
    from .controller_auth import ControllerAuth

    try:
        passwords = PasswordFile.load(Path(config.auth_password_file))
    except ValueError as e:
        raise SecurityError(str(e)) from e
    return ControllerAuth(passwords, s, config.auth_token_ttl_s)


def authorizer(config: ServerConfig) -> Authorizer | None:
    s = signer(config)
    return None if s is None else Authorizer(s)
