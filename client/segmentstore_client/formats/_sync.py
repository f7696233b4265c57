"""The blocking facade's ``format=`` hook: the same contract as ``_sdk`` (one record = one
segment event; a damaged event raises the format's named error where it is read), over a
:class:`SyncEventWriter` / :class:`SyncEventReader`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import RecordFormat, get

if TYPE_CHECKING:
    from ..position import Position
    from ..reader import Event
    from ..sync_reader import SyncEventReader
    from ..sync_writer import SyncAck, SyncEventWriter


class SyncFormattedWriter:
    """A blocking writer of records of one format.

    Example::

        with client.writer("orders/0", format="kafka") as w:
            w.write(b"value", key=b"k")
    """

    def __init__(self, writer: SyncEventWriter, fmt: str | RecordFormat) -> None:
        self.writer = writer
        self.format = get(fmt)

    def __repr__(self) -> str:
        return f"<SyncFormattedWriter {self.format.name} {self.writer!r}>"

    def write(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> SyncAck:
        """Encode one record from its fields and queue it (see ``SyncEventWriter.write``)."""
        return self.writer.write(self.format.encode(value, key, **fields))

    def write_record(self, record: Any) -> SyncAck:
        """Queue one record object (as the format's decoder returns)."""
        return self.writer.write(self.format.encode_record(record))

    def write_many(self, records: Iterable[Any]) -> SyncAck:
        """Queue many record objects; every one is encoded before any is queued."""
        enc = self.format.encode_record
        return self.writer.write_many([enc(r) for r in records])

    def flush(self, *, timeout: float | None = None) -> None:
        self.writer.flush(timeout=timeout)

    def close(self) -> None:
        self.writer.close()

    def start(self) -> SyncFormattedWriter:
        self.writer.start()
        return self

    def __enter__(self) -> SyncFormattedWriter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.writer.__exit__(*exc)


class SyncFormattedReader:
    """A blocking reader that yields decoded records; ``last_event`` is the event the
    last record came from.

    Example::

        for msg in client.reader("orders/0", format="kafka"):
            print(msg.offset, msg.value)
    """

    def __init__(self, reader: SyncEventReader, fmt: str | RecordFormat) -> None:
        self.reader = reader
        self.format = get(fmt)
        self.last_event: Event | None = None

    def __repr__(self) -> str:
        return f"<SyncFormattedReader {self.format.name} {self.reader!r}>"

    @property
    def position(self) -> Position:
        return self.reader.position

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        ev = next(self.reader)
        self.last_event = ev
        return self.format.decode(ev.data)

    def read_batch(self) -> list[Any]:
        """The records of the next read (empty at the end)."""
        evs = self.reader.read_batch()
        if evs:
            self.last_event = evs[-1]
        dec = self.format.decode
        return [dec(e.data) for e in evs]

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> SyncFormattedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
