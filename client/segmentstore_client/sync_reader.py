"""The blocking event reader: a plain iterator that fetches a batch per loop crossing.

Contract: every method takes the reader's lock, so one reader may be shared by threads;
``position`` is the offset after the last event handed out; ``poll``/``next`` bound the
wait as the async reader's do; closing a reader of a closed client is a no-op.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .errors import ClientClosed
from .position import Position
from .reader import Event, EventReader
from .sync_loop import LoopThread


class SyncEventReader:
    """Blocking :class:`EventReader`: a plain iterator of :class:`Event`.

    Example::

        reader = client.reader("orders/0")
        for event in reader:
            print(event.data)
        saved = reader.position.to_json()
    """

    def __init__(self, lt: LoopThread, reader: EventReader) -> None:
        self._lt = lt
        self._reader = reader
        self._lock = threading.Lock()
        self._buffer: list[Event] = []
        self._index = 0
        self._offset = reader.offset

    @property
    def segment(self) -> str:
        """The segment read. Example: ``print(reader.segment)``"""
        return self._reader.segment

    @property
    def position(self) -> Position:
        """Checkpoint after the last event handed out (see :meth:`EventReader.position`).

        Example: ``saved = reader.position.to_json()``
        """
        return Position(self._reader.segment, self._offset)

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        with self._lock:
            if self._index >= len(self._buffer):
                self._buffer = self._lt.run(self._reader.read_batch())
                self._index = 0
                if not self._buffer:
                    raise StopIteration
            event = self._buffer[self._index]
            self._index += 1
            self._offset = event.offset + 8 + len(event.data)
            return event

    def read_batch(self) -> list[Event]:
        """The next events available (at least one), or an empty list at the end.

        Example::

            while batch := reader.read_batch():
                process(batch)
        """
        with self._lock:
            if self._index < len(self._buffer):
                batch = self._buffer[self._index :]
            else:
                batch = self._lt.run(self._reader.read_batch())
            return self._handed_out(batch)

    def poll(self, timeout: float) -> list[Event]:
        """The events available within ``timeout`` seconds, or an empty list if none
        arrived in time or the reader has ended (see :meth:`EventReader.poll`).

        Example::

            while not reader.ended:
                for event in reader.poll(0.5):
                    handle(event)
        """
        with self._lock:
            if self._index < len(self._buffer):
                batch = self._buffer[self._index :]
            else:
                batch = self._lt.run(self._reader.poll(timeout))
            return self._handed_out(batch)

    def next(self, timeout: float | None = None) -> Event | None:
        """The next event, or None once the reader has ended; raises :class:`Timeout`
        if none arrives within ``timeout`` seconds (see :meth:`EventReader.next`).

        Example::

            event = reader.next(timeout=5)
        """
        with self._lock:
            if self._index >= len(self._buffer):
                self._buffer, self._index = [], 0
                event = self._lt.run(self._reader.next(timeout))
                if event is not None:
                    self._offset = event.next_offset
                return event
            event = self._buffer[self._index]
            self._index += 1
            self._offset = event.next_offset
            return event

    @property
    def ended(self) -> bool:
        """True once every event was handed out and no more will come.

        Example: ``while not reader.ended: reader.poll(1)``
        """
        return self._index >= len(self._buffer) and self._reader.ended

    def _handed_out(self, batch: list[Event]) -> list[Event]:
        """Under the lock: ``batch`` goes to the caller; the position moves past it."""
        self._buffer, self._index = [], 0
        if batch:
            self._offset = batch[-1].next_offset
        return batch

    def seek(self, offset: int | Position) -> None:
        """Continue from ``offset`` (see :meth:`EventReader.seek`)."""
        with self._lock:
            self._buffer, self._index = [], 0

            async def seek() -> None:
                self._reader.seek(offset)

            self._lt.run(seek())
            self._offset = self._reader.offset

    def close(self) -> None:
        """Stop prefetching.

        Example::

            reader.close()
        """
        if not self._lt.stopped:  # a closed client closed its readers already
            with contextlib.suppress(ClientClosed):
                self._lt.run(self._reader.close())

    def __enter__(self) -> SyncEventReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
