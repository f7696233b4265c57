"""The HTTP side of ``segmentstore serve``: ``/metrics``, ``/healthz`` and the Databus 2.0
relay.

``start_http(ctx, config)`` builds the aiohttp application (metrics page plus the relay's
routes) and serves it on ``config.http_host:config.http_port`` with the limits of
``http_server.HttpLimits``; the caller closes the returned server on shutdown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from .http_server import HttpLimits, HttpServer

if TYPE_CHECKING:
    from ..config import ServerConfig
    from ..server.context import ServerContext

__all__ = ["HttpLimits", "HttpServer", "start_http"]


async def start_http(
    ctx: ServerContext, config: ServerConfig, ssl: Any = None, auth: Any = None
) -> HttpServer:
    """``ssl``: an ``ssl.SSLContext`` (HTTPS); ``auth``: an ``auth.ControllerAuth`` every
    request must satisfy (README "Security")."""
    from ..server.metrics import MetricsPage

    page = MetricsPage(ctx.metrics)

    async def metrics(request: web.Request) -> web.Response:
        body, content_type = page.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(request: web.Request) -> web.Response:
        # 503 once an internal error stopped a container (its calls fail until a restart).
        stopped = ctx.store.stopped()
        if stopped:
            return web.json_response({"status": "stopped", "containers": stopped}, status=503)
        return web.json_response({"status": "ok"})

    from .page import status_page
    from .routes import HTTP, add_routes
    from .service import RelayService
    from .stats_routes import add_stats_routes

    app = web.Application()
    if auth is not None:
        from ..auth.http_auth import require_credentials

        app.middlewares.append(require_credentials(auth))
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    service = RelayService(ctx)
    add_routes(app, service)
    add_stats_routes(app)
    app.router.add_get("/", status_page)
    limits = HttpLimits(config.http_max_connections, config.http_idle_timeout_s)
    server = HttpServer(app, limits)
    app[HTTP] = server
    await server.start(config.http_host, config.http_port, ssl=ssl)
    return server
