"""The append path's outcome handling (``Appends``), driven frame by frame with the store's
futures completed by the test, in an order a live store gives only by chance: an append
that fails ends its writer's session, and a later append of the same writer that the store
did take is not acknowledged (only the earliest failure of a session is reported; the
client learns what is durable from its next SetupAppend).

The connection and the store here are small stand-ins recording what the real ones would
be asked to do; ``Appends``, the assembler, the budgets and the metrics are the real ones.
The live paths are in test_append_session.py, test_harness_appends.py, test_disk_full.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import time
import uuid
from typing import Any

from segmentstore_client.protocol import (
    AppendAssembler,
    AppendSetup,
    DataAppended,
    ErrorMessage,
    SetupAppend,
    block_end,
    decode,
    frame_event,
)

from segmentstore.server.appends import Appends
from segmentstore.server.budget import Budget
from segmentstore.server.metrics import Metrics
from segmentstore.storage import NULL_ATTRIBUTE_VALUE, AppendResult, StorageError
from segmentstore.storage.api import SegmentInfo


class Store:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.futures: list[asyncio.Future[AppendResult]] = []

    def info(self, segment: str) -> SegmentInfo:
        return SegmentInfo(segment, 0, 0, False, False, 0, 0)

    def get_attribute(self, segment: str, attribute: uuid.UUID) -> int:
        return NULL_ATTRIBUTE_VALUE

    def append(self, segment: str, data: Any, *_: Any) -> asyncio.Future[AppendResult]:
        future: asyncio.Future[AppendResult] = self.loop.create_future()
        self.futures.append(future)
        return future

    def appender(self, segment: str) -> Any:
        return self.append


class Config:
    connection_inflight_bytes = 1 << 20
    max_writers_per_connection = 4096
    store_writers = 65536


class Server:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.config = Config()
        self.inflight_budget = Budget("inflight", 1 << 30, loop.call_soon)


class Conn:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.store = Store(loop)
        self.metrics = Metrics()
        self.server = Server(loop)
        self.assembler = AppendAssembler()
        self.closed = False
        self.sent: list[Any] = []
        self.dispatched_at = time.perf_counter()

    def send(self, frame: bytes) -> None:
        self.sent.append(decode(frame))

    send_frame = send

    def reply(self, reply: Any) -> None:
        self.sent.append(reply)

    def process(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


async def test_a_stored_append_after_its_sessions_failure_is_not_acknowledged() -> None:
    conn = Conn(asyncio.get_running_loop())
    appends = Appends(conn)  # type: ignore[arg-type]
    w = uuid.uuid4()
    appends.setup(SetupAppend(1, w, "seg"))
    for n in (1, 2, 3):
        appends.block_end(block_end(w, frame_event(b"e%d" % n), 1, n, 10 + n))
    first, second, third = conn.store.futures
    first.set_result(AppendResult(12))
    second.set_exception(StorageError("seg", "I/O error"))
    third.set_result(AppendResult(36))
    await asyncio.sleep(0)  # the done-callbacks run
    await asyncio.sleep(0)
    assert [type(c) for c in conn.sent] == [AppendSetup, DataAppended, ErrorMessage]
    _, ack, error = conn.sent
    assert (ack.event_number, ack.previous_event_number, ack.request_id) == (
        1,
        NULL_ATTRIBUTE_VALUE,
        11,
    )
    assert ack.current_segment_write_offset == 12
    assert error.request_id == 12 and "I/O error" in error.message
    assert appends.inflight_bytes == 0 and conn.server.inflight_budget.used == 0


def contexts() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is contextvars.Context)


async def test_pending_appends_hold_no_context_each() -> None:
    """Every done-callback of a connection's appends runs in one context: a copied context
    per append would be one more object per append for the collector to trace."""
    conn = Conn(asyncio.get_running_loop())
    appends = Appends(conn)  # type: ignore[arg-type]
    w = uuid.uuid4()
    appends.setup(SetupAppend(1, w, "seg"))
    before = contexts()
    for n in range(1, 201):
        appends.block_end(block_end(w, frame_event(b"e"), 1, n, n))
    assert len(conn.store.futures) == 200
    assert contexts() - before < 10
    for i, future in enumerate(conn.store.futures):
        future.set_result(AppendResult(i + 1))
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(conn.sent) == 201  # AppendSetup + 200 acks
