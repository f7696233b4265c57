"""Delegation tokens: JWTs signed with HS512 and a shared secret, as Pravega issues them.

Contract: ``TokenSigner.issue(subject, grants, ttl_s, now)`` makes a token whose claims are
``sub``, ``aud`` ("segmentstore"), ``iat``, ``exp`` and one claim per granted resource
pattern (``"prn::/scope:S/stream:T": "READ_UPDATE"``, Pravega's layout). ``verify`` accepts
only HS512 under this secret with an ``exp`` and a ``sub``: anything else (empty, garbage,
another key, ``alg: none``, another algorithm) raises ``TokenInvalid``, a token past its
``exp`` raises ``TokenExpired``. The result, :class:`Grants`, answers "may this token do
PERMISSION on RESOURCE" from its patterns (``*`` matches any run of characters).
Time is passed in (``now``, seconds since the epoch).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import jwt

__all__ = [
    "AUDIENCE",
    "Grants",
    "Permission",
    "TokenExpired",
    "TokenInvalid",
    "TokenSigner",
    "grants_for",
    "load_secret",
    "pattern_matches",
]

AUDIENCE: Final = "segmentstore"
ALGORITHM: Final = "HS512"
_RESERVED: Final = frozenset({"sub", "aud", "iat", "exp", "nbf", "iss", "jti"})
MIN_SECRET_BYTES: Final = 64  # RFC 7518 3.2: at least the hash size for HS512


class Permission(enum.IntEnum):
    """Pravega's access levels, ordered: a higher one includes the lower ones."""

    NONE = 0
    READ = 1
    READ_UPDATE = 2


class TokenInvalid(Exception):
    """The token is not one this server issued (or says nothing usable)."""


class TokenExpired(TokenInvalid):
    """The token was good but its ``exp`` has passed."""


def load_secret(path: str) -> bytes:
    """The signing secret from ``path`` (surrounding whitespace dropped; >= 64 bytes)."""
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as e:
        raise ValueError(f"cannot read the token secret {path}: {e.strerror or e}") from e
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the token secret in {path} is shorter than {MIN_SECRET_BYTES} bytes")
    return secret


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def pattern_matches(pattern: str, resource: str) -> bool:
    """``prn::/scope:S/*`` matches ``prn::/scope:S/stream:T``; no ``*``: equality."""
    if "*" not in pattern:
        return pattern == resource
    return _compile(pattern).fullmatch(resource) is not None


@dataclass(frozen=True, slots=True)
class Grants:
    """What one verified token allows, and until when."""

    subject: str
    expires: float
    exact: Mapping[str, Permission]
    wildcards: tuple[tuple[re.Pattern[str], Permission], ...]

    def permission(self, resource: str) -> Permission:
        best = self.exact.get(resource, Permission.NONE)
        for regex, level in self.wildcards:
            if level > best and regex.fullmatch(resource) is not None:
                best = level
        return best


def grants_from_claims(claims: Mapping[str, object]) -> Grants:
    exact: dict[str, Permission] = {}
    wild: list[tuple[re.Pattern[str], Permission]] = []
    for key, value in claims.items():
        if key in _RESERVED or not isinstance(value, str) or not key.startswith("prn::"):
            continue
        try:
            level = Permission[value]
        except KeyError:
            continue
        if "*" in key:
            wild.append((_compile(key), level))
        else:
            exact[key] = max(level, exact.get(key, Permission.NONE))
    sub, exp = claims.get("sub"), claims.get("exp")
    if not isinstance(sub, str) or not isinstance(exp, int | float):
        raise TokenInvalid("the token has no subject or expiry")
    return Grants(sub, float(exp), exact, tuple(wild))


def grants_for(subject: str, acl: Mapping[str, Permission]) -> Grants:
    """The grants of an ACL, as a token carrying it would have them (no expiry)."""
    claims: dict[str, object] = {r: p.name for r, p in acl.items()}
    claims.update(sub=subject, exp=float("inf"))
    return grants_from_claims(claims)


class TokenSigner:
    """Issues and verifies tokens with one HS512 secret.

    Example::

        signer = TokenSigner(secret)
        token = signer.issue("alice", {"prn::/scope:app/*": Permission.READ}, 600, time.time())
        signer.verify(token, time.time()).permission("prn::/scope:app/stream:orders")
    """

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"a token secret needs at least {MIN_SECRET_BYTES} bytes")
        self._secret = secret

    def issue(
        self, subject: str, grants: Mapping[str, Permission], ttl_s: float, now: float
    ) -> str:
        claims: dict[str, object] = {
            "sub": subject,
            "aud": AUDIENCE,
            "iat": int(now),
            "exp": int(now + ttl_s),
        }
        for resource, level in grants.items():
            if level > Permission.NONE:
                claims[resource] = level.name
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM)

    def verify(self, token: str, now: float) -> Grants:
        if not token:
            raise TokenInvalid("no delegation token")
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                options={"require": ["exp", "sub"], "verify_exp": False},
            )
        except jwt.PyJWTError as e:
            raise TokenInvalid(f"invalid delegation token: {e}") from e
        grants = grants_from_claims(claims)
        if now >= grants.expires:
            raise TokenExpired("the delegation token has expired")
        return grants
