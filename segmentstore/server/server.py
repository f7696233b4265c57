"""The segment store server: storage + tables + TCP listener + metrics, and a clean stop.

``run(config)`` opens the store (recovery), starts the listener and the metrics endpoint,
logs one ``ready`` line with the addresses, and serves until SIGTERM/SIGINT. The server
owns the store-wide budgets every connection charges (``budget.py``), the connection cap
derived from the fd limit, and a sweep that runs a few times a second: it enforces each
connection's timeouts (no Hello, a frame stalled half-way, replies that never drain) and
hands freed memory back after a burst. Time comes from ``self.clock`` (injectable).
Stopping
stops accepting, lets appends already received become durable (bounded wait), sends
their acknowledgements, closes connections, and closes the store.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

from segmentstore_client.protocol import Command, OperationUnsupported, Reply

from ..config import ServerConfig
from ..storage import SEGMENT_TYPE_TRANSIENT, SegmentStore, StorageError, StoreConfig
from ..tables import TableStore
from .budget import Budget
from .connection import Connection
from .context import HandlerTable, ServerContext
from .early_flush import EarlyFlush
from .gc_pauses import GcPauses
from .listing import LISTING_HANDLERS
from .metrics import Metrics
from .resources import (
    connection_cap,
    default_read_cache_mb,
    keep_freed_memory,
    memory_limit_bytes,
    raise_fd_limit,
    release_freed_memory,
)
from .segment_handlers import SEGMENT_HANDLERS
from .table_handlers import TABLE_HANDLERS

__all__ = ["Server", "StartupError", "run"]

log = logging.getLogger("segmentstore.server")

SHUTDOWN_DRAIN_SECONDS = 10.0
# Buffered bytes that must have come and gone before freed memory is handed back.
TRIM_AFTER_BYTES = 64 * 1024 * 1024


class Server:
    def __init__(
        self,
        config: ServerConfig,
        ctx: ServerContext,
        clock: Callable[[], float] = time.monotonic,
        max_connections: int | None = None,
    ) -> None:
        self.config = config
        self.ctx = ctx
        self.clock = clock
        self.max_connections = max_connections or config.max_connections or 1024
        loop = asyncio.get_running_loop()
        self.input_budget = Budget("input", config.store_input_bytes, loop.call_soon)
        self.output_budget = Budget("output", config.store_output_bytes, loop.call_soon)
        self.inflight_budget = Budget("inflight", config.store_inflight_bytes, loop.call_soon)
        self.disk_reads = asyncio.Semaphore(config.disk_read_concurrency)
        self._sweeper: asyncio.Task[None] | None = None
        self.handlers: HandlerTable = {**SEGMENT_HANDLERS, **TABLE_HANDLERS, **LISTING_HANDLERS}
        self.connections: set[Connection] = set()
        self.early_flush = EarlyFlush(loop)
        self.address: tuple[str, int] = (config.host, config.port)
        self.metrics_port: int | None = None
        self._listener: asyncio.Server | None = None
        self._metrics_server: Any = None
        self._background: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self.controller: Any = None  # segmentstore.controller.controller.Controller, if enabled
        self.tls: Any = None  # ssl.SSLContext of every listener when TLS is on (auth/)
        self.auth: Any = None  # auth.Authorizer when auth = on: connections check tokens

    @classmethod
    async def start(cls, config: ServerConfig) -> Server:
        metrics = Metrics()
        started = time.perf_counter()
        fd_limit = raise_fd_limit()
        cap, reserve = connection_cap(fd_limit, config.max_connections, config.fd_reserve)
        log.info(
            "open-file limit %d: up to %d connections, %d fds kept for storage and metrics",
            fd_limit,
            cap,
            reserve,
        )
        if config.max_connections > cap:
            log.warning(
                "max_connections %d does not fit the open-file limit; using %d",
                config.max_connections,
                cap,
            )
        cache_mb = config.read_cache_mb or default_read_cache_mb(memory_limit_bytes())
        log.info(
            "read cache %d MiB%s; freed memory kept for reuse: %s",
            cache_mb,
            "" if config.read_cache_mb else " (1/8 of the memory available)",
            "yes" if keep_freed_memory() else "no (not glibc)",
        )
        try:
            store = await SegmentStore.open(
                StoreConfig(
                    data_dir=config.data_dir,
                    fsync=config.fsync,  # type: ignore[arg-type]
                    fsync_interval_s=config.fsync_interval_ms / 1000,
                    container_count=config.containers,
                    read_cache_bytes=cache_mb * 1024 * 1024,
                    direct_io=config.direct_io == "on",
                    log_file_bytes=config.log_file_mb * 1024 * 1024,
                )
            )
        except StorageError:
            raise  # a refusal to open damaged data: cli.py prints it and exits EXIT_STORAGE
        except OSError as e:
            why = _why(e)
            if isinstance(e, FileExistsError) and not config.data_dir.is_dir():
                why = "it is a file, not a directory"  # mkdir's "file exists" hides that
            raise StartupError(f"cannot open the data dir {config.data_dir}: {why}") from e
        tables = await TableStore.open(store)
        await _drop_orphaned_transients(store)
        metrics.recovery_seconds = time.perf_counter() - started
        store.on_commit = metrics.on_commit
        metrics.store_stats = store.stats
        ctx = ServerContext(store, tables, metrics, tail_read_timeout=config.tail_read_timeout_s)
        server = cls(config, ctx, max_connections=cap)
        early = server.early_flush

        def committed(records: int, fsync_seconds: float) -> None:
            metrics.on_commit(records, fsync_seconds)
            early.committed()

        store.on_commit = committed  # acks leave one loop turn sooner (early_flush.py)
        try:
            server._security()
            await server._listen()
        except BaseException:
            await tables.close()
            await store.close()
            raise
        server.start_sweeper()
        if config.controller_port >= 0:
            try:
                await server._start_controller()
            except BaseException:
                await server.shutdown()
                raise
        return server

    async def _start_controller(self) -> None:
        c = self.config
        # gRPC's C core logs bind failures on stderr itself; the one line below says it all.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        if c.controller_port > 0:
            try:
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind((c.host, c.controller_port))
            except OSError as e:
                raise StartupError(
                    f"cannot listen on {host_port(c.host, c.controller_port)} for the controller: "
                    + _bind_why(e, "--controller-port")
                ) from e
        try:
            from ..controller.controller import Controller, ControllerSettings
            from ..controller.errors import ControllerError
        except ImportError as e:
            raise StartupError(
                f"the controller needs grpcio and protobuf ({e}): pip install -e '.[server]', "
                "or run with --controller-port -1"
            ) from e

        host = self.address[0] if self.address[0] not in ("0.0.0.0", "::", "") else "127.0.0.1"
        host = c.advertised_host or host  # a name the TLS certificate carries (README "Security")
        settings = ControllerSettings(
            c.host, c.controller_port, c.controller_tick_s, c.controller_rate_window_s,
            c.controller_scale_cooldown_s, c.controller_retention_interval_s,
            c.controller_max_open_txns,
        )  # fmt: skip
        tls_credentials, auth = self._controller_security()
        if auth is not None:
            from ..auth.acls import AclTable

            auth.acls = await AclTable.open(self.ctx.tables)
        try:
            self.controller = await Controller.start(
                self.ctx.store, self.ctx.tables, settings, (host, c.advertised_port or self.address[1]),
                tls_credentials, auth,
            )  # fmt: skip
        except ControllerError as e:
            raise StartupError(str(e)) from e
        self.ctx.metrics.controller_stats = self.controller.stats

    def _security(self) -> None:
        from ..auth import SecurityError, authorizer, tls_context

        try:
            self.tls, self.auth = tls_context(self.config), authorizer(self.config)
        except SecurityError as e:
            raise StartupError(str(e)) from e

    def _controller_security(self) -> tuple[Any, Any]:
        from ..auth import SecurityError, controller_authenticator
        from ..tls import TlsError, grpc_credentials

        c = self.config
        try:
            creds = (
                grpc_credentials(c.tls_cert_file, c.tls_key_file, c.tls_client_ca_file)
                if c.tls_cert_file
                else None
            )
            return creds, controller_authenticator(c)
        except (SecurityError, TlsError) as e:
            raise StartupError(str(e)) from e

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        c = self.config
        try:
            self._listener = await loop.create_server(
                self._new_connection, c.host, c.port, backlog=1024, ssl=self.tls,
                # A peer stalling the TLS handshake is held no longer than one without Hello.
                ssl_handshake_timeout=c.hello_timeout_s if self.tls else None,
            )  # fmt: skip
        except OSError as e:
            raise StartupError(
                f"cannot listen on {host_port(c.host, c.port)}: {_bind_why(e, '--port')}"
            ) from e
        sock = self._listener.sockets[0].getsockname()
        self.address = (sock[0], sock[1])
        if c.http_port >= 0:
            from ..relay import start_http  # /metrics and the Databus relay, on this loop

            try:
                self._metrics_server = await start_http(
                    self.ctx, c, ssl=self.tls, auth=self._http_auth()
                )
            except OSError as e:
                self._listener.close()
                why = _bind_why(e, "--http-port")
                raise StartupError(
                    f"cannot serve metrics on {host_port(c.http_host, c.http_port)}: {why}"
                ) from e
            self.metrics_port = self._metrics_server.port

    def _http_auth(self) -> Any:
        """auth.ControllerAuth when the HTTP port requires credentials (http_auth = on)."""
        if self.config.http_auth != "on":
            return None
        from ..auth import SecurityError, password_checker

        try:
            return password_checker(self.config)
        except SecurityError as e:
            raise StartupError(str(e)) from e

    def _new_connection(self) -> asyncio.Protocol:
        if len(self.connections) >= self.max_connections:
            self.ctx.metrics.connections_refused += 1
            if (
                self.ctx.metrics.connections_refused & (self.ctx.metrics.connections_refused - 1)
                == 0
            ):
                log.warning("connection limit %d reached; refusing", self.max_connections)
            return _Refuse()
        return Connection(self)

    # --- budgets and timeouts -------------------------------------------------------------

    def sweep_interval(self) -> float:
        c = self.config
        shortest = min(c.hello_timeout_s, c.frame_timeout_s, c.write_stall_timeout_s)
        return min(1.0, max(0.02, shortest / 8))

    def start_sweeper(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        interval = self.sweep_interval()
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep()
            except Exception:  # the sweep must outlive any one bad connection
                log.exception("connection sweep failed")

    def sweep(self) -> None:
        """Enforce every connection's timeouts; hand freed memory back after a burst."""
        now = self.clock()
        for conn in list(self.connections):
            conn.check_timeouts(now)
        budgets = (self.input_budget, self.output_budget, self.inflight_budget)
        held = sum(b.used for b in budgets)
        if sum(b.peak for b in budgets) >= TRIM_AFTER_BYTES and held < TRIM_AFTER_BYTES // 4:
            peaks = ", ".join(f"{b.name} {b.peak >> 20} MiB" for b in budgets)
            for budget in budgets:
                budget.peak = budget.used
            released = release_freed_memory()
            log.info("buffered bytes peaked at %s; freed memory handed back: %s", peaks, released)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def ready_line(self) -> str:
        c = self.config
        metrics = (
            f"metrics on http{'s' if self.tls else ''}://"
            f"{host_port(c.http_host, self.metrics_port)}/metrics"
            if self.metrics_port is not None
            else "metrics disabled"
        )
        controller = (
            f"controller on {'tls' if self.tls else 'tcp'}://"
            f"{host_port(c.host, self.controller.port)}"
            if self.controller is not None
            else "controller disabled"
        )
        return (
            f"segmentstore ready: listening on {host_port(*self.address)}, {metrics}, "
            f"{controller}, "
            f"fsync={self.config.fsync}, data dir {self.config.data_dir.resolve()}, "
            f"recovery {self.ctx.metrics.recovery_seconds:.3f}s"
        )

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait_stopped(self) -> None:
        await self._stopping.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        log.info("stopping: no new connections; draining %d connections", len(self.connections))
        if self._listener is not None:
            self._listener.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.controller is not None:
            await self.controller.stop()
        if self._metrics_server is not None:
            await self._metrics_server.close()
        for conn in list(self.connections):
            if conn.transport is not None and not conn.closed:
                conn.transport.pause_reading()
        deadline = time.monotonic() + SHUTDOWN_DRAIN_SECONDS
        while time.monotonic() < deadline and any(c.inflight_bytes for c in self.connections):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # let the last acknowledgements be queued
        for conn in list(self.connections):
            conn.close()
        for task in list(self._background):
            await asyncio.wait([task], timeout=5)
        await self.ctx.tables.close()
        await self.ctx.store.close()
        log.info("stopped cleanly")


async def _drop_orphaned_transients(store: SegmentStore) -> None:
    """Transient segments live only as long as the connection that made it; after a crash
    no connection owns them any more, so they go at startup."""
    orphans = [
        name
        for name in store.segment_names()
        if store.info(name).segment_type & SEGMENT_TYPE_TRANSIENT
    ]
    for name in orphans:
        await store.delete(name)
    if orphans:
        log.info("deleted %d transient segments left over from before the restart", len(orphans))


class _Refuse(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


async def unsupported(ctx: ServerContext, cmd: Command) -> Reply:
    return OperationUnsupported(getattr(cmd, "request_id", -1), type(cmd).__name__, "")


class StartupError(Exception):
    """The server cannot start (busy port, unusable data dir): one line, exit code 2."""


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower() + (f" ({e.filename})" if e.filename else "")
    return str(e)


def host_port(host: str, port: int) -> str:
    """``host:port`` as a URI writes it: an IPv6 address in brackets (``[::1]:12345``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_why(e: OSError, flag: str) -> str:
    """Why a port could not be bound, with the way out when it is taken. asyncio words a
    bind error as "error while attempting to bind on address (...): ..."; the errno says
    the same in fewer words."""
    if e.errno == errno.EADDRINUSE:
        return f"address already in use (another server? {flag} picks another port, 0 any free one)"
    if e.errno is not None and e.strerror and e.strerror.startswith("error while attempting"):
        return os.strerror(e.errno).lower()
    return _why(e)


async def run(config: ServerConfig) -> None:
    server = await Server.start(config)
    # This process is a server: time the collector's pauses, and keep what startup made
    # (recovered metadata included) out of every later collection (gc_pauses.py).
    pauses = GcPauses()
    pauses.install()
    pauses.settle()
    server.ctx.metrics.gc_pauses = pauses
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    log.info(server.ready_line())
    await server.wait_stopped()
