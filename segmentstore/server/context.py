"""What a request handler gets to work with, and the shape of a handler.

Request/reply commands are served by handlers: ``async def handler(ctx, command) -> Reply``.
A handler returns the reply to send (success or a protocol error reply). Storage errors
it does not catch (``segmentstore.storage.StorageError`` subclasses) are turned into the
reference's error replies by the connection (``errors.py``), so handlers only deal with
the cases that are special to them. Handlers are registered per command class in a
``dict[type[Command], Handler]``; feature modules (segments, tables) each export one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from segmentstore_client.protocol import Command, Reply

from ..storage import SegmentStore

if TYPE_CHECKING:
    from ..tables import TableStore
    from .metrics import Metrics


@dataclass(slots=True)
class ServerContext:
    store: SegmentStore
    tables: TableStore
    metrics: Metrics
    tail_read_timeout: float = 10.0
    extras: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[ServerContext, Any], Awaitable[Reply]]
HandlerTable = dict[type[Command], Handler]
