"""Blocking SDK clients for the Spark integration, bounded by the ``timeout`` options.

Contract: :func:`open_client` returns a :class:`~segmentstore_client.sync.SyncClient`
whose every call is bounded by :attr:`Timeouts.call` (a request's reply and the time
spent reconnecting after a lost connection), and which fails within
:attr:`Timeouts.connect` when nothing accepts connections at the endpoint: the SDK keeps
retrying a refused first connection for its whole reconnect window, so a bounded TCP
probe runs first and a refused or unreachable endpoint is reported as one line naming
the endpoint and the option that bounds the wait. Driver (planning, commit, abort) and
executors (tasks) open their clients here and nowhere else.
"""

from __future__ import annotations

import socket
import time

from ..connection import Endpoint
from ..errors import ConnectFailed
from ..sync import SyncClient
from ..sync import connect as sync_connect
from .options import Timeouts

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


def open_client(endpoint: str, timeouts: Timeouts) -> SyncClient:
    """A blocking client of ``endpoint`` whose calls are bounded by ``timeouts``.

    Example::

        with open_client("tcp://127.0.0.1:12345", Timeouts(call=10, connect=2)) as c:
            c.segment_info("orders/0")
    """
    probe(endpoint, timeouts.connect)
    return sync_connect(
        endpoint,
        connect_timeout=timeouts.connect,
        request_timeout=timeouts.call,
        reconnect_timeout=timeouts.call,
    )
