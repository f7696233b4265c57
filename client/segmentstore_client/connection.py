"""Connections to a segment store: Hello negotiation, request-id correlation, KeepAlive
and request timeouts (the pool that reconnects them is ``pool.py``).

Contract: a :class:`Connection` is one TCP connection speaking Pravega's wire protocol
through the sans-IO codec. Replies are matched to requests by request id (one-shot
waiters), to writer sessions by request id (persistent routes: append errors carry the
SetupAppend's id) and to writers by writer id (DataAppended and friends). When the
connection breaks, every waiter fails with :class:`ConnectionLost` and every route and
writer is told once, so writers and readers can reconnect through the pool. Nothing here
retries on its own.

Sending: the first frame written in a loop turn goes to the transport at once (a lone
event pays no extra turn); frames written after it in the same turn are held and go in ONE
``writelines`` at the start of the next turn (or as soon as ``_CORK_BYTES`` are held, or on
``drain()``), so a burst of events from many writers costs two send syscalls, not one per
frame. Byte order is kept: while frames are held every write joins them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from .auth import client_tls_context
from .errors import (
    ConnectFailed,
    ConnectionLost,
    IncompatibleServer,
    RemoteProtocolError,
    Timeout,
)
from .protocol import (
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    Command,
    ConditionalCheckFailed,
    DataAppended,
    FrameDecoder,
    Hello,
    InvalidEventNumber,
    KeepAlive,
    encode,
)

log = logging.getLogger("segmentstore_client")


DEFAULT_PORT: Final = 12345
TLS_SCHEMES: Final = ("tls", "ssl", "tcps", "pravegas")
_KEEPALIVE_FRAME: Final = encode(KeepAlive())
_CORK_BYTES: Final = 64 * 1024  # held frames beyond this go out at once (bounded buffer)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a segment store listens. ``Endpoint.parse("tcp://127.0.0.1:12345")``."""

    host: str
    port: int
    tls: bool = False

    @classmethod
    def parse(cls, uri: str) -> Endpoint:
        """Parse ``tcp://host:port`` (the scheme and the port are optional); ``tls://``
        (also ``ssl://``, ``tcps://``, ``pravegas://``, as Pravega's client) is TLS.

        Example::

            Endpoint.parse("tcp://10.0.0.5:12345")  # Endpoint(host='10.0.0.5', port=12345)
        """
        text = uri.strip()
        if "://" not in text:
            text = "tcp://" + text
        parts = urlsplit(text)
        if parts.scheme not in ("tcp", "pravega", *TLS_SCHEMES):
            raise ValueError(f"unsupported endpoint scheme {parts.scheme!r} in {uri!r}")
        if not parts.hostname:
            raise ValueError(f"no host in endpoint {uri!r}")
        return cls(parts.hostname, parts.port or DEFAULT_PORT, parts.scheme in TLS_SCHEMES)

    @property
    def netloc(self) -> str:
        """``host:port``, an IPv6 host in brackets (``[::1]:12345``), as URIs and gRPC
        targets write it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{'tls' if self.tls else 'tcp'}://{self.netloc}"


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """Timeouts and limits shared by every connection of a client (all in seconds)."""

    connect_timeout: float = 10.0
    """One attempt to open a TCP connection and exchange Hello."""
    request_timeout: float = 30.0
    """How long a request waits for its reply (tail reads excepted: they wait for data)."""
    reconnect_timeout: float = 60.0
    """How long writers, readers and idempotent requests keep reconnecting before giving up."""
    backoff_initial: float = 0.02
    backoff_max: float = 2.0
    keepalive_interval: float = 10.0
    """Send a KeepAlive after this long without traffic; two silent intervals kill the
    connection (a half-open TCP connection otherwise hangs a tail reader forever)."""
    pool_size: int = 2
    delegation_token: str = ""
    # --- TLS (tls:// endpoints) and credentials; README "Security" ---
    tls_ca_file: str = ""
    """CA bundle that signed the server's certificate ("" = the system's trust store)."""
    tls_verify: bool = True
    """False skips certificate and host name checks (Pravega's disable_cert_verification)."""
    tls_cert_file: str = ""
    """Client certificate (PEM) for a server that requires one; key in ``tls_key_file``."""
    tls_key_file: str = ""
    credentials: tuple[str, str] | str | None = None
    """(user, password) or a static token: the client asks ``controller`` for a delegation
    token when it opens, and again (once per request) when the store says it expired."""
    controller: str = ""
    """The controller (``tcp://`` or ``tls://host:9090``) that issues delegation tokens."""


_request_ids = itertools.count(1)


def next_request_id() -> int:
    """A fresh request id, unique within this process (so unique on every connection).

    Example: ``rid = next_request_id()``
    """
    return next(_request_ids)


Route = Callable[[Command], None]


class Connection(asyncio.Protocol):
    """One multiplexed TCP connection to a segment store (the asyncio Protocol layer).

    Obtain connections from a :class:`ConnectionPool`; use :func:`open_connection` for a
    connection of your own.
    """

    def __init__(self, endpoint: Endpoint, options: ConnectionOptions) -> None:
        self.endpoint = endpoint
        self.options = options
        self.loop = asyncio.get_running_loop()
        self.negotiated_version = 0
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder()
        self._waiters: dict[int, asyncio.Future[Command]] = {}
        self._routes: dict[int, Route] = {}
        # Keyed by the writer id's int: an int hashes and compares in C, a UUID in Python
        # (two Python calls per DataAppended).
        self._writers: dict[int, Route] = {}
        self._close_listeners: list[Callable[[ConnectionLost], None]] = []
        self._hello: asyncio.Future[Hello] = self.loop.create_future()
        self._closed_fut: asyncio.Future[None] = self.loop.create_future()
        self._error: ConnectionLost | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._rx_count = 0
        self._rx_seen = 0
        self._ka_pending = False
        self._ka_handle: asyncio.TimerHandle | None = None
        self._ka_sent = 0  # KeepAlives sent, and answered (the server echoes each one)
        self._ka_echoed = 0
        self._pings: list[tuple[int, asyncio.Future[None]]] = []
        self._cork: list[bytes | bytearray | memoryview] | None = None  # held this turn
        self._cork_bytes = 0

    # -- state -----------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True until the connection broke or was closed. Example: ``if conn.is_open: ...``"""
        return self._error is None and self._transport is not None

    @property
    def error(self) -> ConnectionLost | None:
        """Why the connection closed (None while it is open). Example: ``raise conn.error``"""
        return self._error

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"<Connection {self.endpoint} {state} waiters={len(self._waiters)}>"

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        interval = self.options.keepalive_interval
        if interval > 0:
            self._ka_handle = self.loop.call_later(interval, self._keepalive_tick)

    def data_received(self, data: bytes) -> None:
        self._rx_count += 1
        try:
            commands = self._decoder.feed(data)
        except RemoteProtocolError as e:
            what = _foreign_protocol(data) if self._rx_count == 1 else None
            if what is None:
                self._fail(ConnectionLost(f"{self.endpoint} sent an invalid frame: {e}"))
                return
            lost = ConnectFailed(f"{self.endpoint} {what}")
            lost.refused = True  # another protocol's port: trying again will not change it
            self._fail(lost)
            return
        dispatch = self._dispatch
        for cmd in commands:
            dispatch(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self._fail(ConnectionLost(f"{self.endpoint} closed the connection"))
        else:
            self._fail(ConnectionLost(f"connection to {self.endpoint} lost: {exc}"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # -- dispatch --------------------------------------------------------------------

    def _dispatch(self, cmd: Command) -> None:
        t = type(cmd)
        if t is DataAppended or t is ConditionalCheckFailed or t is InvalidEventNumber:
            route = self._writers.get(cmd.writer_id.int)  # type: ignore[attr-defined]
            if route is not None:
                route(cmd)
                return
        rid = getattr(cmd, "request_id", None)
        if rid is None:
            if t is Hello and not self._hello.done():
                self._hello.set_result(cmd)  # type: ignore[arg-type]
            elif t is KeepAlive:  # the receive counter already noted the traffic
                self._ka_echoed += 1
                if self._pings:
                    self._answer_pings()
            return
        fut = self._waiters.pop(rid, None)
        if fut is not None:
            if not fut.done():
                fut.set_result(cmd)
            return
        route = self._routes.get(rid)
        if route is not None:
            route(cmd)
            return
        log.debug("%s: dropping unrouted reply %r", self.endpoint, cmd)

    # -- sending ---------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue raw frame bytes (already encoded) for sending.

        Example: ``conn.write(encode(KeepAlive()))``
        """
        if self._error is not None:
            raise self._error
        cork = self._cork
        if cork is None:  # the turn's first frame: send now, hold what follows this turn
            assert self._transport is not None
            self._transport.write(data)
            self._cork = []
            self.loop.call_soon(self._uncork)
            return
        # Held until the next turn: a caller's buffer may change after write() returns.
        cork.append(data if type(data) is bytes else bytes(data))
        self._cork_bytes += len(data)
        if self._cork_bytes >= _CORK_BYTES:
            self._uncork(False)

    def writelines(self, chunks: list[bytes]) -> None:
        """Queue several pre-encoded frames with one call.

        Example: ``conn.writelines([frame1, frame2])``
        """
        if self._error is not None:
            raise self._error
        cork = self._cork
        if cork is None:
            assert self._transport is not None
            self._transport.writelines(chunks)
            self._cork = []
            self.loop.call_soon(self._uncork)
            return
        cork.extend(chunks)
        self._cork_bytes += sum(map(len, chunks))
        if self._cork_bytes >= _CORK_BYTES:
            self._uncork(False)

    def _uncork(self, turn_over: bool = True) -> None:
        """Send the frames held since the turn's first one, in one call. At the start of
        the next turn (``turn_over``) the next write goes straight out again; otherwise
        (the bound, ``drain``) writes stay held behind a first one until then."""
        cork = self._cork
        if cork is None:
            return
        self._cork = None if turn_over else []
        self._cork_bytes = 0
        if cork and self._error is None:
            assert self._transport is not None
            self._transport.writelines(cork)

    def send(self, command: Command) -> None:
        """Encode and queue one command; no reply is awaited.

        Example: ``conn.send(KeepAlive())``
        """
        self.write(encode(command))

    async def drain(self) -> None:
        """Wait until the socket's send buffer is below its high-water mark.

        Example: ``conn.write(big_frame); await conn.drain()``
        """
        if self._error is not None:
            raise self._error
        if self._cork:  # held frames count: the transport must see them to push back
            self._uncork(False)
        if self._write_paused:
            fut = self.loop.create_future()
            self._drain_waiters.append(fut)
            await fut
            if self._error is not None:
                raise self._error

    async def call(
        self, command: Command, request_id: int, timeout: float | None = None
    ) -> Command:
        """Send ``command`` and wait for the reply carrying ``request_id``.

        ``timeout`` defaults to the options' request timeout; ``0`` means wait forever
        (tail reads: the keepalive detects a dead connection instead). Example::

            rid = next_request_id()
            reply = await conn.call(GetStreamSegmentInfo(rid, "sc/st/0", ""), rid)
        """
        if self._error is not None:
            raise self._error
        fut: asyncio.Future[Command] = self.loop.create_future()
        self._waiters[request_id] = fut
        if timeout is None:
            timeout = self.options.request_timeout
        handle = (
            self.loop.call_later(timeout, self._expire, request_id, fut, command, timeout)
            if timeout > 0
            else None
        )
        try:
            self.write(encode(command))
            return await fut
        finally:
            if handle is not None:
                handle.cancel()
            if self._waiters.get(request_id) is fut:
                del self._waiters[request_id]

    def _expire(
        self, request_id: int, fut: asyncio.Future[Command], command: Command, timeout: float
    ) -> None:
        if not fut.done():
            fut.set_exception(
                Timeout(
                    f"no reply to {type(command).__name__} (request {request_id}) from "
                    f"{self.endpoint} within {timeout:g}s"
                )
            )

    # -- routes ----------------------------------------------------------------------

    def add_route(self, request_id: int, route: Route) -> None:
        """Send every reply carrying ``request_id`` (that no waiter takes) to ``route``."""
        self._routes[request_id] = route

    def remove_route(self, request_id: int) -> None:
        """Stop routing replies carrying ``request_id``. Example: ``conn.remove_route(rid)``"""
        self._routes.pop(request_id, None)

    def add_writer(self, writer_id: uuid.UUID, route: Route) -> None:
        """Send DataAppended / ConditionalCheckFailed / InvalidEventNumber of a writer to
        ``route``."""
        self._writers[writer_id.int] = route

    def remove_writer(self, writer_id: uuid.UUID, route: Route | None = None) -> None:
        """Stop routing a writer's replies (only if still routed to ``route``, if given).

        Example: ``conn.remove_writer(writer_id)``
        """
        key = writer_id.int
        if route is None or self._writers.get(key) is route:
            self._writers.pop(key, None)

    def on_close(self, listener: Callable[[ConnectionLost], None]) -> None:
        """Call ``listener(error)`` once when the connection breaks or is closed."""
        if self._error is not None:
            self.loop.call_soon(listener, self._error)
        else:
            self._close_listeners.append(listener)

    def remove_close_listener(self, listener: Callable[[ConnectionLost], None]) -> None:
        """Forget a listener added with :meth:`on_close`. Example: ``conn.remove_close_listener(f)``"""
        with contextlib.suppress(ValueError):
            self._close_listeners.remove(listener)

    # -- hello, keepalive, close -----------------------------------------------------

    async def handshake(self, timeout: float) -> None:
        """Send Hello and check the server's; raises :class:`IncompatibleServer`.

        Example: ``await conn.handshake(10.0)`` (``open_connection`` does it)
        """
        try:
            self.send(Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION))
            hello = await asyncio.wait_for(asyncio.shield(self._hello), timeout)
        except TimeoutError:
            self.close()
            raise ConnectFailed(
                f"{self.endpoint} did not answer Hello within {timeout:g}s"
            ) from None
        except ConnectionLost as e:
            why = str(e).removeprefix(f"{self.endpoint} ")
            if why == "closed the connection" and not self.endpoint.tls:
                why += " during Hello (a server with TLS on takes tls://)"
            elif why == "closed the connection":
                why += " during Hello"
            error = ConnectFailed(f"{self.endpoint} {why}")
            error.refused = isinstance(e, ConnectFailed) and e.refused
            raise error from e
        if hello.low_version > WIRE_VERSION or hello.high_version < OLDEST_COMPATIBLE_VERSION:
            self.close()
            raise IncompatibleServer(
                f"{self.endpoint} speaks wire versions {hello.low_version}..{hello.high_version}; "
                f"this client speaks {OLDEST_COMPATIBLE_VERSION}..{WIRE_VERSION}"
            )
        self.negotiated_version = min(WIRE_VERSION, hello.high_version)

    async def ping(self) -> float:
        """Send a KeepAlive and wait for the server's; returns the round trip in seconds.

        Example: ``rtt = await conn.ping()``
        """
        if self._error is not None:
            raise self._error
        fut: asyncio.Future[None] = self.loop.create_future()
        started = time.perf_counter()  # uvloop's clock counts whole milliseconds
        self.write(_KEEPALIVE_FRAME)
        self._ka_sent += 1
        self._pings.append((self._ka_sent, fut))
        try:
            await fut
        finally:
            self._pings = [p for p in self._pings if p[1] is not fut]
        return time.perf_counter() - started

    def _answer_pings(self) -> None:
        echoed = self._ka_echoed
        for sent, fut in self._pings:
            if sent <= echoed and not fut.done():
                fut.set_result(None)

    def _keepalive_tick(self) -> None:
        if self._error is not None:
            return
        if self._rx_count == self._rx_seen:
            if self._ka_pending:
                self._fail(
                    ConnectionLost(
                        f"{self.endpoint} did not answer a KeepAlive within "
                        f"{self.options.keepalive_interval:g}s; the connection is dead"
                    )
                )
                return
            self._ka_pending = True
            self.write(_KEEPALIVE_FRAME)
            self._ka_sent += 1
        else:
            self._ka_pending = False
        self._rx_seen = self._rx_count
        self._ka_handle = self.loop.call_later(
            self.options.keepalive_interval, self._keepalive_tick
        )

    def close(self, reason: str = "closed by the client") -> None:
        """Close the connection now; outstanding requests fail with ConnectionLost.

        Example: ``conn.close(); await conn.wait_closed()``
        """
        self._fail(ConnectionLost(f"connection to {self.endpoint} {reason}"))

    async def wait_closed(self) -> None:
        """Wait until the connection is closed. Example: ``await conn.wait_closed()``"""
        await asyncio.shield(self._closed_fut)

    def _fail(self, error: ConnectionLost) -> None:
        if self._error is not None:
            return
        self._error = error
        self._cork = None  # held frames are dropped, as abort() drops the transport's
        if self._ka_handle is not None:
            self._ka_handle.cancel()
        if self._transport is not None:
            self._transport.abort()
        if not self._hello.done():
            self._hello.set_exception(error)
            self._hello.exception()
        waiters, self._waiters = self._waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.set_exception(error)
        for _, ping in self._pings:
            if not ping.done():
                ping.set_exception(error)
        drains, self._drain_waiters = self._drain_waiters, []
        for d in drains:
            if not d.done():
                d.set_result(None)
        listeners, self._close_listeners = self._close_listeners, []
        self._routes.clear()
        self._writers.clear()
        for listener in listeners:
            try:
                listener(error)
            except Exception:  # a listener's bug must not stop the others
                log.exception("connection close listener failed")
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)


def _foreign_protocol(first: bytes) -> str | None:
    """What the first bytes from a peer say it speaks, when not Pravega's wire protocol:
    an endpoint given the metrics port (HTTP/1) or the controller's (gRPC's HTTP/2 opens
    with a SETTINGS frame: a 3-byte length, then type 4)."""
    where = f"the segment store's wire port is another (default {DEFAULT_PORT})"
    if first.startswith(b"HTTP/"):
        return f"answered in HTTP (the metrics port?), not Pravega's wire protocol: {where}"
    if len(first) >= 9 and first[3] == 4 and first[0] == 0:
        return f"answered in HTTP/2 (the controller's port?), not Pravega's wire protocol: {where}"
    return None


def _connect_why(e: OSError, endpoint: Endpoint) -> str:
    """The reason a connect failed in a few words: asyncio says "[Errno 111] Connect call
    failed ('127.0.0.1', 1)" and uvloop "[Errno 111] Connection refused" for one cause;
    a plain server resets a TLS handshake with a ConnectionResetError that has no text."""
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is a segment store listening there?)"
    if endpoint.tls and isinstance(e, ConnectionResetError | ssl.SSLEOFError):
        why = "connection reset" if isinstance(e, ConnectionResetError) else "cut short"
        return f"the TLS handshake failed ({why}); a server without TLS takes tcp://"
    if isinstance(e, socket.gaierror) and e.strerror:
        return e.strerror.lower()  # "name or service not known"
    if isinstance(e.errno, int) and e.errno > 0 and not isinstance(e, ssl.SSLError):
        return os.strerror(e.errno).lower()
    return str(e) or type(e).__name__


async def open_connection(
    endpoint: Endpoint, options: ConnectionOptions | None = None
) -> Connection:
    """Open one connection and exchange Hello (one attempt, no retry).

    Example::

        conn = await open_connection(Endpoint.parse("tcp://127.0.0.1:12345"))
    """
    options = options or ConnectionOptions()
    loop = asyncio.get_running_loop()
    tls = client_tls_context(options) if endpoint.tls else None
    try:
        _, conn = await asyncio.wait_for(
            loop.create_connection(
                lambda: Connection(endpoint, options),
                endpoint.host,
                endpoint.port,
                ssl=tls,
                server_hostname=endpoint.host if tls is not None else None,
            ),
            options.connect_timeout,
        )
    except TimeoutError:
        raise ConnectFailed(
            f"could not connect to {endpoint} within {options.connect_timeout:g}s"
        ) from None
    except OSError as e:
        error = ConnectFailed(f"could not connect to {endpoint}: {_connect_why(e, endpoint)}")
        # Nothing listens there, or the name does not resolve: not a passing blip.
        # A certificate that fails verification will fail the same way next time.
        error.refused = isinstance(
            e, ConnectionRefusedError | socket.gaierror | ssl.SSLCertVerificationError
        )
        raise error from e
    try:
        await conn.handshake(options.connect_timeout)
    except BaseException:
        conn.close()
        raise
    return conn
