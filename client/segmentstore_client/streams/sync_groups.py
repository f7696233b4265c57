"""Blocking twins of reader groups and transactions, for the blocking client.

Contract: every method hands the async object's coroutine to the client's loop thread and
waits (``LoopThread.run``); signatures equal the async ones (``tests/client/test_sdk_api.py``
checks it). A :class:`SyncGroupReader` crosses threads once per read (a batch of events,
``GroupReader.batches``), not once per event; an event counts as passed (offsets,
checkpoints) when the next one is asked for or the reader closes, as in the async reader.
Iterating stops after ``close`` (from any thread) or ``idle_timeout``; leaving a ``for``
loop early closes the underlying async generator on the loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Literal

from . import group_state as gs
from .reader_group import _T, GroupReader, ReaderGroup, StreamEvent
from .stream_cut import StreamCut
from .transaction import Transaction

if TYPE_CHECKING:
    from ..sync_loop import LoopThread


class SyncReaderGroup:
    """Blocking :class:`ReaderGroup`; get one with ``SyncClient.reader_group``.

    Example::

        group = client.reader_group("shop/billing", ["shop/orders"])
        for event in group.reader("reader-1").events(idle_timeout=2):
            print(event.segment, event.offset, event.data)
    """

    def __init__(self, lt: LoopThread, group: ReaderGroup) -> None:
        self._lt = lt
        self._group = group
        self.scope, self.name, self.streams = group.scope, group.name, group.streams

    def open(self) -> SyncReaderGroup:
        """See :meth:`ReaderGroup.open`. Example: ``group.open()``."""
        self._lt.run(self._group.open())
        return self

    def update(self, fn: Callable[[gs.State], _T]) -> _T:
        """See :meth:`ReaderGroup.update` (``fn`` runs on the client's loop thread)."""
        return self._lt.run(self._group.update(fn))

    def state(self) -> gs.State:
        """See :meth:`ReaderGroup.state`. Example: ``group.state()["assigned"]``."""
        return self._lt.run(self._group.state())

    def reader(self, reader_id: str, *, read_size: int = 1024 * 1024) -> SyncGroupReader:
        """See :meth:`ReaderGroup.reader`. Example: ``for ev in group.reader("r1"): ...``."""
        return SyncGroupReader(self._lt, self._group.reader(reader_id, read_size=read_size))

    def reader_offline(self, reader_id: str, positions: StreamCut | None = None) -> None:
        """See :meth:`ReaderGroup.reader_offline`. Example: ``group.reader_offline("r1")``."""
        self._lt.run(self._group.reader_offline(reader_id, positions))

    def checkpoint(self, name: str, *, timeout: float = 60.0) -> list[StreamCut]:
        """See :meth:`ReaderGroup.checkpoint`; readers iterating in other threads pass it.

        Example: ``cuts = group.checkpoint("cp-1", timeout=30)``
        """
        return self._lt.run(self._group.checkpoint(name, timeout=timeout))

    def delete(self, *, missing_ok: bool = False) -> bool:
        """See :meth:`ReaderGroup.delete`. Example: ``group.delete()``."""
        return self._lt.run(self._group.delete(missing_ok=missing_ok))

    def reset(self, start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut]) -> None:
        """See :meth:`ReaderGroup.reset`. Example: ``group.reset(cuts)``."""
        self._lt.run(self._group.reset(start))


class SyncGroupReader:
    """Blocking :class:`GroupReader`: iterate it with ``for`` and ``close`` it when done.

    Example::

        reader = group.reader("reader-1")
        for event in reader.events(idle_timeout=5):
            handle(event.data)
        reader.close()
    """

    def __init__(self, lt: LoopThread, reader: GroupReader) -> None:
        self._lt = lt
        self._reader = reader
        self.reader_id = reader.reader_id

    def __iter__(self) -> Iterator[StreamEvent]:
        return self.events()

    def join(self) -> SyncGroupReader:
        """See :meth:`GroupReader.join`. Example: ``group.reader("r2").join()``."""
        self._lt.run(self._reader.join())
        return self

    def batches(
        self, *, idle_timeout: float | None = None
    ) -> Generator[list[StreamEvent], None, None]:
        """See :meth:`GroupReader.batches`. Example: ``for batch in reader.batches(): ...``."""
        agen = self._reader.batches(idle_timeout=idle_timeout)
        try:
            while True:
                batch = self._next(agen)
                if batch is None:
                    return
                yield batch
        finally:
            self._close_gen(agen)

    def events(self, *, idle_timeout: float | None = None) -> Iterator[StreamEvent]:
        """See :meth:`GroupReader.events`. Example: ``for ev in reader.events(): ...``."""
        batches = self.batches(idle_timeout=idle_timeout)
        try:
            for batch in batches:
                for event in batch:
                    self._reader._hand(event)  # passed once the next one is asked for
                    yield event
                    if self._reader._closed:
                        return
        finally:
            batches.close()

    def _next(self, agen: AsyncIterator[list[StreamEvent]]) -> list[StreamEvent] | None:
        async def step() -> list[StreamEvent] | None:
            try:
                return await agen.__anext__()
            except StopAsyncIteration:
                return None

        return self._lt.run(step())

    def _close_gen(self, agen: AsyncIterator[list[StreamEvent]]) -> None:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None and not self._lt.stopped:
            self._lt.run(aclose())

    def close(self) -> None:
        """See :meth:`GroupReader.close`. Example: ``reader.close()``."""
        self._lt.run(self._reader.close())


class SyncTransaction:
    """Blocking :class:`Transaction`; get one with ``SyncStreamWriter.begin()``.

    Example::

        txn = writer.begin()
        txn.write(b"debit", routing_key="acct-1")
        txn.commit()
    """

    def __init__(self, lt: LoopThread, txn: Transaction) -> None:
        self._lt = lt
        self._txn = txn
        self.id = txn.id

    @property
    def state(self) -> str:
        """``"open"``, ``"committed"`` or ``"aborted"`` (this client's view)."""
        return self._txn.state

    def write(self, data: bytes, routing_key: str | None = None) -> None:
        """See :meth:`Transaction.write`. Example: ``txn.write(b"e", routing_key="k")``."""
        self._lt.run(self._txn.write(data, routing_key))

    def flush(self) -> None:
        """See :meth:`Transaction.flush`. Example: ``txn.flush()``."""
        self._lt.run(self._txn.flush())

    def commit(self) -> None:
        """See :meth:`Transaction.commit`. Example: ``txn.commit()``."""
        self._lt.run(self._txn.commit())

    def abort(self) -> None:
        """See :meth:`Transaction.abort`. Example: ``txn.abort()``."""
        self._lt.run(self._txn.abort())

    def check_state(self) -> str:
        """See :meth:`Transaction.check_state`. Example: ``txn.check_state() == "OPEN"``."""
        return self._lt.run(self._txn.check_state())
