"""One aiohttp server on the event loop for every HTTP endpoint (``/metrics`` and the relay).

Contract: the HTTP port keeps the same limits as the wire port. Requests are served by the
event loop (no thread per connection); at most ``max_connections`` connections are open at
once (a connection beyond that is closed as soon as it is accepted, and the refusal is
logged once per second at most); a connection with no request in flight that has received
no byte for ``idle_timeout`` seconds is closed (a peer that connects and sends nothing, a
request left half sent, an idle keep-alive); a request in flight (a long poll on
``/stream``) is never cut by the idle timer. The listen backlog is 1024, as on the wire
port. The routes themselves come from an ``aiohttp.web.Application`` built by the caller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("segmentstore.http")

BACKLOG = 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int = 1024
    idle_timeout: float = 30.0


class _Handler(RequestHandler):  # type: ignore[misc]
    """aiohttp's protocol, plus what the limits need: activity time and requests in flight."""

    __slots__ = ("busy", "last_active", "tracker")

    def __init__(self, tracker: _Tracker, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tracker = tracker
        self.busy = 0
        self.last_active = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.tracker.open.add(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.tracker.open.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        super().data_received(data)

    def close_now(self) -> None:
        transport = self.transport
        if transport is not None:
            transport.close()


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Tracker:
    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.open: set[_Handler] = set()
        self.refused = 0
        self.idle_closed = 0
        self._last_refusal_log = 0.0

    def refuse(self) -> asyncio.Protocol:
        self.refused += 1
        now = time.monotonic()
        if now - self._last_refusal_log >= 1.0:
            self._last_refusal_log = now
            log.warning(
                "HTTP connection limit %d reached; refusing (%d refused so far)",
                self.limits.max_connections,
                self.refused,
            )
        return _Refuse()

    def sweep(self, now: float) -> None:
        deadline = now - self.limits.idle_timeout
        for handler in list(self.open):
            if handler.busy == 0 and handler.last_active < deadline:
                self.idle_closed += 1
                handler.close_now()


@web.middleware
async def _track_requests(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    proto = request.protocol
    if not isinstance(proto, _Handler):
        return await handler(request)
    proto.busy += 1
    try:
        return await handler(request)
    finally:
        proto.busy -= 1
        proto.last_active = time.monotonic()


class HttpServer:
    """Serve ``app`` on ``host:port`` (0 = any free port) with :class:`HttpLimits`.

    Example::

        server = HttpServer(app, HttpLimits(max_connections=100, idle_timeout=5))
        port = await server.start("127.0.0.1", 0)
        ...
        await server.close()
    """

    def __init__(self, app: web.Application, limits: HttpLimits) -> None:
        app.middlewares.insert(0, _track_requests)
        self.app = app
        self.limits = limits
        self.tracker = _Tracker(limits)
        self.port = 0
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._listener: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def open_connections(self) -> int:
        return len(self.tracker.open)

    async def start(self, host: str, port: int, ssl: Any = None) -> int:
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        kwargs = dict(server._kwargs)  # the runner's settings (keep-alive, access log...)
        loop = asyncio.get_running_loop()
        tracker = self.tracker

        def factory() -> asyncio.Protocol:
            if len(tracker.open) >= self.limits.max_connections:
                return tracker.refuse()
            handler: asyncio.Protocol = _Handler(tracker, server, loop=loop, **kwargs)
            return handler

        try:
            self._listener = await loop.create_server(
                factory, host, port, backlog=BACKLOG, ssl=ssl
            )  # ssl: HTTPS (README "Security")
        except OSError:
            await self._runner.cleanup()
            raise
        self.port = int(self._listener.sockets[0].getsockname()[1])
        self._sweeper = loop.create_task(self._sweep_loop())
        return self.port

    async def _sweep_loop(self) -> None:
        period = min(1.0, self.limits.idle_timeout / 4)
        while True:
            await asyncio.sleep(period)
            self.tracker.sweep(time.monotonic())

    def disconnect_all(self, keep: object = None) -> int:
        """Close every open HTTP connection but ``keep`` (the asking one), for
        ``/relayCommand/disconnectClients``; returns how many were closed."""
        handlers = [h for h in self.tracker.open if h is not keep]
        for handler in handlers:
            handler.close_now()
        return len(handlers)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._listener is not None:
            self._listener.close()
        for handler in list(self.tracker.open):
            handler.close_now()
        await self._runner.cleanup()
