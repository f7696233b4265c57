"""A small pool of connections to one segment store, reconnecting with backoff, and the
bounds every call keeps.

Contract: :class:`ConnectionPool` hands out open connections round-robin and is the one
place that reconnects (exponential backoff with full jitter, until a deadline);
:class:`Backoff` is that schedule, shared by callers that retry a whole request;
:func:`within` is the per-call ``timeout=`` of the public API. Closing the pool wakes
every caller still connecting with :class:`ClientClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
from collections.abc import Awaitable
from typing import TypeVar

from .connection import Connection, ConnectionOptions, Endpoint, open_connection
from .errors import ClientClosed, ConnectFailed, ConnectionLost, Timeout

log = logging.getLogger("segmentstore_client")

T = TypeVar("T")


async def within(timeout: float | None, aw: Awaitable[T]) -> T:
    """Await ``aw`` for at most ``timeout`` seconds (None: no bound of its own), then
    cancel it and raise :class:`Timeout`: the per-call ``timeout=`` of the public API.

    Example::

        info = await within(2.0, client.segment_info("orders/0"))
    """
    if timeout is None:
        return await aw
    if timeout < 0:
        if inspect.iscoroutine(aw):
            aw.close()  # never awaited: else "coroutine ... was never awaited" at exit
        raise ValueError("timeout must not be negative")
    bound = asyncio.timeout(timeout)
    try:
        async with bound:
            return await aw
    except TimeoutError:
        if bound.expired():
            raise Timeout(f"no result within the call's timeout of {timeout:g}s") from None
        raise


class Backoff:
    """Exponential backoff with full jitter, bounded by a deadline.

    Example::

        backoff = Backoff(options)
        while True:
            try: return await attempt()
            except ConnectionLost: await backoff.wait()   # raises when the deadline passes
    """

    def __init__(self, options: ConnectionOptions, timeout: float | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._delay = options.backoff_initial
        self._max = options.backoff_max
        limit = options.reconnect_timeout if timeout is None else timeout
        self.deadline = self._loop.time() + limit
        self.attempts = 0

    def remaining(self) -> float:
        """Seconds left before the deadline (0 once past). Example: ``backoff.remaining()``"""
        return max(0.0, self.deadline - self._loop.time())

    def expired(self) -> bool:
        """True once the deadline has passed. Example: ``if backoff.expired(): raise err``"""
        return self._loop.time() >= self.deadline

    async def wait(self, error: BaseException | None = None) -> None:
        """Sleep before the next attempt; re-raise ``error`` once the deadline is past."""
        self.attempts += 1
        remaining = self.deadline - self._loop.time()
        if remaining <= 0:
            if error is not None:
                raise error
            raise ConnectionLost("gave up reconnecting")
        delay = min(self._delay * (0.5 + random.random() / 2), remaining)
        self._delay = min(self._delay * 2, self._max)
        await asyncio.sleep(delay)


class ConnectionPool:
    """A few connections to one endpoint, handed out round-robin, reopened on demand.

    Until a first connection has been made, a refused connect fails at once and the
    budget is the connect timeout (a server that is not there is not a blip); after that,
    reconnects retry with backoff for the reconnect timeout. Closing the pool wakes every
    caller still connecting with :class:`ClientClosed`.

    Example::

        pool = ConnectionPool(Endpoint.parse("tcp://127.0.0.1:12345"), ConnectionOptions())
        conn = await pool.acquire()
    """

    def __init__(self, endpoint: Endpoint, options: ConnectionOptions) -> None:
        if options.pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.endpoint = endpoint
        self.options = options
        self._slots: list[Connection | None] = [None] * options.pool_size
        self._locks = [asyncio.Lock() for _ in range(options.pool_size)]
        self._next = 0
        self._closed = False
        self._closing = asyncio.Event()
        self._established = False
        self._refills: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called. Example: ``if pool.closed: ...``"""
        return self._closed

    @property
    def connected(self) -> bool:
        """True while at least one pooled connection is open. Example: ``pool.connected``"""
        return any(c is not None and c.is_open for c in self._slots)

    async def acquire(self, timeout: float | None = None) -> Connection:
        """An open connection, reconnecting with backoff until ``timeout`` (default: the
        options' reconnect timeout) has passed; then raises :class:`ConnectFailed`."""
        if self._closed:
            raise ClientClosed("the client is closed")
        slots = self._slots
        i = self._next
        self._next = (i + 1) % len(slots)
        conn = slots[i]
        if conn is not None and conn.is_open:
            return conn
        if conn is not None:
            # This slot broke: serve from a healthy one now and reopen it meanwhile.
            for other in slots:
                if other is not None and other.is_open:
                    if not self._locks[i].locked():
                        task = asyncio.get_running_loop().create_task(self._refill(i))
                        self._refills.add(task)
                    return other
        async with self._locks[i]:
            conn = self._slots[i]
            if conn is not None and conn.is_open:
                return conn
            conn = await self._connect(timeout)
            if self._closed:
                conn.close()
                raise ClientClosed("the client is closed")
            self._slots[i] = conn
            return conn

    async def _refill(self, i: int) -> None:
        try:
            async with self._locks[i]:
                conn = self._slots[i]
                if conn is None or not conn.is_open:
                    conn = await self._connect(None)
                    if self._closed:
                        conn.close()
                    else:
                        self._slots[i] = conn
        except Exception as e:  # the next acquire of this slot tries again
            log.info("reopening a connection to %s failed: %s", self.endpoint, e)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._refills.discard(task)

    async def _connect(self, timeout: float | None) -> Connection:
        if not self._established:
            first = self.options.connect_timeout
            timeout = first if timeout is None else min(timeout, first)
        backoff = Backoff(self.options, timeout)
        while True:
            try:
                conn = await self._unless_closed(open_connection(self.endpoint, self.options))
            except ConnectFailed as e:
                if e.refused and not self._established:
                    raise
                log.info("connect to %s failed (%s); retrying", self.endpoint, e)
                await self._unless_closed(backoff.wait(e))
                continue
            self._established = True
            return conn

    async def _unless_closed(self, aw: Awaitable[T]) -> T:
        """Await ``aw``, or cancel it and raise :class:`ClientClosed` when the pool closes."""
        if self._closing.is_set():
            if asyncio.iscoroutine(aw):
                aw.close()
            raise ClientClosed("the client is closed")
        task = asyncio.ensure_future(aw)
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait((task, closing), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):  # its outcome no longer matters
                    await task
        if task.cancelled() or (self._closing.is_set() and task.exception() is not None):
            raise ClientClosed("the client is closed")
        return task.result()

    def stop_connecting(self) -> None:
        """Open no more connections (the client is closing): callers that would connect
        or reconnect get :class:`ClientClosed` at once; open connections stay usable, so
        writers on them can still flush. Example: ``pool.stop_connecting()``"""
        self._closing.set()

    async def close(self) -> None:
        """Close every connection; later acquires raise :class:`ClientClosed`, and callers
        still connecting are woken with it.

        Example: ``await pool.close()``
        """
        self._closed = True
        self._closing.set()
        for task in list(self._refills):
            task.cancel()
        conns = [c for c in self._slots if c is not None]
        self._slots = [None] * len(self._slots)
        for c in conns:
            c.close()
        for c in conns:
            await c.wait_closed()
