"""The segment store's token check: one call per request, cached per connection.

Contract: ``Authorizer.session()`` gives a connection its checker; ``check(command)``
returns None when the request may go on, or the ``AuthTokenCheckFailed`` reply to send
(error code 0 TOKEN_CHECK_FAILED: empty, garbage, another key, ``alg: none``, no grant for
the resource or too weak a grant; 1 TOKEN_EXPIRED). Verified tokens and granted
(token, resource, permission) triples are cached per connection, so a busy connection
verifies a signature once per token and matches patterns once per resource; a cached
grant still answers TOKEN_EXPIRED once its ``exp`` passes. The caches are bounded
(cleared when full) so a hostile peer cannot grow them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from segmentstore_client.protocol import AuthTokenCheckFailed, Command

from .resources import REQUIRED, ROOT, segment_resource, touched_segments
from .tokens import Grants, Permission, TokenExpired, TokenInvalid, TokenSigner

__all__ = ["TOKEN_CHECK_FAILED", "TOKEN_EXPIRED", "Authorizer", "TokenCheck"]

TOKEN_CHECK_FAILED: Final = 0
TOKEN_EXPIRED: Final = 1
CACHE_ENTRIES: Final = 1024


class Authorizer:
    """Server-wide: the signer and the clock every connection's check uses."""

    def __init__(self, signer: TokenSigner, clock: Callable[[], float] = time.time) -> None:
        self.signer = signer
        self.clock = clock
        self.verified = 0  # signatures checked (the cache's misses), for tests and metrics

    def session(self) -> TokenCheck:
        return TokenCheck(self)


class TokenCheck:
    """One connection's checker (callable on each request)."""

    __slots__ = ("_auth", "_granted", "_tokens")

    def __init__(self, auth: Authorizer) -> None:
        self._auth = auth
        self._tokens: dict[str, Grants | TokenInvalid] = {}
        self._granted: dict[tuple[str, str, Permission], float] = {}

    def __call__(self, command: Command) -> AuthTokenCheckFailed | None:
        needed = REQUIRED.get(type(command))
        if needed is None:
            return None
        token: str = getattr(command, "delegation_token", "")
        resources = [segment_resource(s) for s in touched_segments(command)] or [ROOT]
        now = self._auth.clock()
        for resource in resources:
            expires = self._granted.get((token, resource, needed))
            if expires is None:
                failure = self._grant(token, resource, needed, now)
                if failure is not None:
                    return _refusal(command, failure)
            elif now >= expires:
                return _refusal(command, TokenExpired("the delegation token has expired"))
        return None

    def _grant(
        self, token: str, resource: str, needed: Permission, now: float
    ) -> TokenInvalid | None:
        grants = self._tokens.get(token)
        if grants is None or (isinstance(grants, Grants) and now >= grants.expires):
            self._auth.verified += 1
            try:
                grants = self._auth.signer.verify(token, now)
            except TokenInvalid as e:
                grants = e
            if len(self._tokens) >= CACHE_ENTRIES:
                self._tokens.clear()
            self._tokens[token] = grants
        if isinstance(grants, TokenInvalid):
            return grants
        have = grants.permission(resource)
        if have < needed:
            return TokenInvalid(
                f"{grants.subject} has {have.name} on {resource}, {needed.name} needed"
            )
        if len(self._granted) >= CACHE_ENTRIES:
            self._granted.clear()
        self._granted[(token, resource, needed)] = grants.expires
        return None


def _refusal(command: Command, why: TokenInvalid) -> AuthTokenCheckFailed:
    code = TOKEN_EXPIRED if isinstance(why, TokenExpired) else TOKEN_CHECK_FAILED
    rid = getattr(command, "request_id", -1)
    return AuthTokenCheckFailed(rid if isinstance(rid, int) else -1, str(why), code)
