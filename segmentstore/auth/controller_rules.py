"""Which permission each controller RPC needs, on which resource (README "Security").

Contract: ``required(method, request)`` returns ``(resource, permission)`` for an RPC of
Pravega's ControllerService, or None when any authenticated caller may make it
(``getControllerServerList``; ``getDelegationToken`` checks for itself). The resource
comes from the request: its ``streamInfo`` (most messages), its own scope/stream
(``StreamInfo``), or its scope (``ScopeInfo``, ``StreamsInScopeRequest``); scope-level
calls are checked on ``prn::/scope:S``, stream-level ones on
``prn::/scope:S/stream:T`` (creating a stream too: a ``prn::/scope:S/*`` grant may create
streams in S), ``listScopes`` on the root ``prn::`` (the admin role).
"""

from __future__ import annotations

from typing import Any, Final

from .resources import ROOT
from .tokens import Permission

__all__ = ["UNCHECKED", "WRITES", "required"]

R, RU = Permission.READ, Permission.READ_UPDATE
UNCHECKED: Final = frozenset({"getControllerServerList", "getDelegationToken"})
WRITES: Final = frozenset(
    {
        "createScope", "deleteScope", "createStream", "updateStream", "truncateStream",
        "sealStream", "deleteStream", "scale", "createTransaction", "commitTransaction",
        "abortTransaction", "pingTransaction",
    }
)  # fmt: skip


def _target(request: Any) -> tuple[str, str]:
    info = getattr(request, "streamInfo", None)
    if info is not None:
        return str(info.scope), str(info.stream)
    scope = getattr(request, "scope", "")
    if not isinstance(scope, str):  # StreamsInScopeRequest.scope is a ScopeInfo
        scope = scope.scope
    return str(scope), str(getattr(request, "stream", ""))


def required(method: str, request: Any) -> tuple[str, Permission] | None:
    if method in UNCHECKED:
        return None
    needed = RU if method in WRITES else R
    if method == "listScopes":
        return ROOT, needed
    scope, stream = _target(request)
    if stream:
        return f"prn::/scope:{scope}/stream:{stream}", needed
    return f"prn::/scope:{scope}", needed
