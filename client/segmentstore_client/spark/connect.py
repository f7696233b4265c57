"""Blocking SDK clients for the Spark integration, bounded by the ``timeout`` options.

Contract: :func:`open_client` returns a :class:`~segmentstore_client.sync.SyncClient`
whose every call is bounded by :attr:`Timeouts.call` (a request's reply and the time
spent reconnecting after a lost connection), and which fails within
:attr:`Timeouts.connect` when nothing accepts connections at the endpoint: the SDK keeps
retrying a refused first connection for its whole reconnect window, so a bounded TCP
probe runs first and a refused or unreachable endpoint is reported as one line naming
the endpoint and the option that bounds the wait. Every client gets the write's or
read's :class:`~.options.Access` (controller, credentials, TLS). Driver (planning,
commit, abort) and executors (tasks) open their clients here and nowhere else:
:func:`open_client` (blocking) or :func:`open_async` (streams: transactions are async).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ..connection import ConnectionOptions, Endpoint
from ..errors import ConnectFailed
from ..sync import SyncClient
from ..sync import connect as sync_connect
from .options import Access, Timeouts

if TYPE_CHECKING:
    from ..client import Client

T = TypeVar("T")

_RETRY_PAUSE = 0.2


def probe(endpoint: str, seconds: float) -> None:
    """Return once a TCP connection to ``endpoint`` opens; raise :class:`ConnectFailed`
    when none does within ``seconds`` (refused attempts are retried until then).

    Example::

        probe("tcp://127.0.0.1:12345", 5.0)
    """
    ep = Endpoint.parse(endpoint)
    deadline = time.monotonic() + seconds
    # Bounded: each pass sleeps or waits at least _RETRY_PAUSE / until the deadline.
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((ep.host, ep.port), timeout=max(0.05, left)):
                return
        except OSError as e:
            left = deadline - time.monotonic()
            if left <= _RETRY_PAUSE:
                reason = e.strerror or type(e).__name__
                raise ConnectFailed(
                    f"could not connect to {ep} within {seconds:g}s ({reason}); is the "
                    "segment store running there? (option 'connectTimeout')"
                ) from None
            time.sleep(_RETRY_PAUSE)


def connection_options(timeouts: Timeouts, access: Access) -> ConnectionOptions:
    """The SDK's connection options for ``timeouts`` and ``access``."""
    return ConnectionOptions(
        connect_timeout=timeouts.connect,
        request_timeout=timeouts.call,
        reconnect_timeout=timeouts.call,
        credentials=access.credentials,
        controller=access.controller,
        tls_ca_file=access.tls_ca_file,
        tls_verify=access.tls_verify,
        tls_cert_file=access.tls_cert_file,
        tls_key_file=access.tls_key_file,
    )


def open_client(endpoint: str, timeouts: Timeouts, access: Access | None = None) -> SyncClient:
    """A blocking client of ``endpoint`` whose calls are bounded by ``timeouts``.

    Example::

        with open_client("tcp://127.0.0.1:12345", Timeouts(call=10, connect=2)) as c:
            c.segment_info("orders/0")
    """
    access = access or Access()
    probe(endpoint, timeouts.connect)
    return sync_connect(
        endpoint,
        controller=access.controller,
        options=connection_options(timeouts, access),
    )


async def open_async(endpoint: str, timeouts: Timeouts, access: Access) -> Client:
    """An opened async client (for stream transactions), bounded like :func:`open_client`.

    Example::

        client = await open_async(ep, Timeouts(), Access())
        try: ...
        finally: await client.close()
    """
    from ..client import connect as async_connect

    probe(endpoint, timeouts.connect)
    client = async_connect(
        endpoint, controller=access.controller, options=connection_options(timeouts, access)
    )
    return await client


def run_with_client(
    endpoint: str, timeouts: Timeouts, access: Access, work: Callable[[Client], Awaitable[T]]
) -> T:
    """Open an async client, run ``work`` with it on a fresh event loop, close it (the
    stream calls of the driver and the tasks: transactions and controller calls are async).

    Example::

        run_with_client(ep, Timeouts(), Access(), lambda c: c.segment_info("s"))
    """

    async def main() -> T:
        client = await open_async(endpoint, timeouts, access)
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(main())
