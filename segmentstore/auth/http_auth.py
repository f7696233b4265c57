"""Credentials on the HTTP port (``/metrics``, the relay, the status page).

Contract: ``require_credentials(auth)`` is an aiohttp middleware: a request without an
``Authorization`` header the password file accepts (``Basic`` user:password or
``Bearer`` static token, checked by ``ControllerAuth.authenticate``, cached per header)
gets 401 with ``WWW-Authenticate: Basic realm="segmentstore"`` and never reaches a
handler, except a request for one of ``OPEN_PATHS`` (``/healthz``), which needs none. Any
authenticated user may read; the ACLs govern segments, not this port.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .controller_auth import ControllerAuth

__all__ = ["require_credentials"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# Answered without credentials: a load balancer's or orchestrator's probe cannot always
# send them, and /healthz tells only whether each container works (a stopped one's line
# names the container and the exception's type, never data or settings).
OPEN_PATHS = frozenset({"/healthz"})


def require_credentials(auth: ControllerAuth) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        if await auth.authenticate(request.headers.get("Authorization", "")) is None:
            return web.Response(
                status=401,
                text="credentials required\n",
                headers={"WWW-Authenticate": 'Basic realm="segmentstore"'},
            )
        return await handler(request)

    return middleware
