"""Which permission each controller RPC needs, on which resource (README "Security").

Contract: ``required(method, request)`` returns ``(resource, permission)`` for an RPC of
Pravega's ControllerService, or None when any authenticated caller may make it
(``getControllerServerList``; ``getDelegationToken`` checks for itself). The resource
comes from the request: its ``streamInfo`` (most messages), its own scope/stream
(``StreamInfo``), or its scope (``ScopeInfo``); scope-level calls are checked on
``prn::/scope:S``, stream-level ones on ``prn::/scope:S/stream:T``. As Pravega,
``createStream`` is checked on the scope: READ_UPDATE on ``prn::/scope:S`` (or a wildcard
matching it) lets a user create streams in S. The listings (``FILTERED``) are open to any
authenticated caller and answer only what the caller may see, as Pravega filters them:
a scope the caller has any grant on or under (``scope_visible``), a stream it may READ;
the admin role (``prn::*``) sees everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .tokens import Permission, grants_for, pattern_matches

__all__ = ["FILTERED", "UNCHECKED", "WRITES", "Visibility", "required", "scope_visible"]

R, RU = Permission.READ, Permission.READ_UPDATE
UNCHECKED: Final = frozenset({"getControllerServerList", "getDelegationToken"})
FILTERED: Final = frozenset({"listScopes", "listStreamsInScope", "listKeyValueTablesInScope"})
WRITES: Final = frozenset(
    {
        "createScope", "deleteScope", "createStream", "updateStream", "truncateStream",
        "sealStream", "deleteStream", "scale", "createTransaction", "commitTransaction",
        "abortTransaction", "pingTransaction", "createReaderGroup", "updateReaderGroup",
        "deleteReaderGroup", "createKeyValueTable", "deleteKeyValueTable",
    }
)  # fmt: skip
# Created in a scope: checked on the scope, as createStream.
_CREATE_IN_SCOPE: Final = frozenset({"createStream", "createReaderGroup", "createKeyValueTable"})


def _target(request: Any) -> tuple[str, str]:
    """(scope, resource below the scope or "")."""
    info = getattr(request, "streamInfo", None)
    if info is not None:
        return str(info.scope), f"stream:{info.stream}" if info.stream else ""
    scope = getattr(request, "scope", "")
    if not isinstance(scope, str):  # StreamsInScopeRequest.scope is a ScopeInfo
        scope = scope.scope
    for field, kind in (
        ("stream", "stream"),
        ("readerGroupName", "reader-group"),  # ReaderGroupConfiguration
        ("readerGroup", "reader-group"),  # ReaderGroupInfo
        ("kvtName", "key-value-table"),
    ):
        name = getattr(request, field, "")
        if name:
            return str(scope), f"{kind}:{name}"
    return str(scope), ""


def required(method: str, request: Any) -> tuple[str, Permission] | None:
    if method in UNCHECKED or method in FILTERED:
        return None
    needed = RU if method in WRITES else R
    scope, below = _target(request)
    if below and method not in _CREATE_IN_SCOPE:
        return f"prn::/scope:{scope}/{below}", needed
    return f"prn::/scope:{scope}", needed


def scope_visible(acl: Mapping[str, Permission], scope: str) -> bool:
    """Whether an ACL grants anything on scope ``scope`` or on a resource inside it."""
    own, inside = f"prn::/scope:{scope}", f"prn::/scope:{scope}/"
    for pattern, level in acl.items():
        if level < R:
            continue
        if pattern_matches(pattern, own):
            return True
        # Some resource under ``inside`` matches: a pattern's literal start either leads
        # into it (``prn::/scope:S/stream:T``) or stops short of it before a ``*``
        # (``prn::*``, ``prn::/scope:S*``), which then matches any rest.
        head, star, _ = pattern.partition("*")
        if head.startswith(inside) or (star and inside.startswith(head)):
            return True
    return False


class Visibility:
    """What one caller's listings show (``FILTERED``): built from the caller's ACL."""

    def __init__(self, user: str, acl: Mapping[str, Permission]) -> None:
        self._acl = dict(acl)
        self._grants = grants_for(user, acl)

    def scope(self, scope: str) -> bool:
        return scope_visible(self._acl, scope)

    def stream(self, scope: str, stream: str) -> bool:
        return self._grants.permission(f"prn::/scope:{scope}/stream:{stream}") >= R
