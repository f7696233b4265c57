"""Writers and readers that speak a record format: the SDK's ``format=`` hook.

Contract: :class:`FormattedWriter` encodes each record with its :class:`RecordFormat`
and hands the bytes to an :class:`EventWriter` (one record = one segment event; acks,
batching and exactly-once are the writer's); :class:`FormattedReader` decodes each
event an :class:`EventReader` yields. A damaged event raises the format's named error
(a ``CorruptRecord``) at the point it is read, never a wrong record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterable
from typing import TYPE_CHECKING, Any

from . import RecordFormat, get

if TYPE_CHECKING:
    from ..position import Position
    from ..reader import Event, EventReader
    from ..writer import Ack, EventWriter


class FormattedWriter:
    """An :class:`EventWriter` that writes records of one format.

    Example::

        async with client.writer("orders/0", format="kafka") as w:
            await w.write(b"value", key=b"k")
            await w.write_record(kafka.Message(b"v2", timestamp=5))
    """

    def __init__(self, writer: EventWriter, fmt: str | RecordFormat) -> None:
        self.writer = writer
        self.format = get(fmt)

    def __repr__(self) -> str:
        return f"<FormattedWriter {self.format.name} {self.writer!r}>"

    async def write(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> Ack:
        """Encode one record from its fields and queue it (see ``EventWriter.write``)."""
        return await self.writer.write(self.format.encode(value, key, **fields))

    async def write_record(self, record: Any) -> Ack:
        """Queue one record object (as the format's decoder returns)."""
        return await self.writer.write(self.format.encode_record(record))

    async def write_many(self, records: Iterable[Any]) -> Ack:
        """Queue many record objects at once; the ack of the last covers them all."""
        enc = self.format.encode_record
        return await self.writer.write_many(enc(r) for r in records)

    async def flush(self) -> None:
        await self.writer.flush()

    async def close(self) -> None:
        await self.writer.close()

    def abort(self) -> None:
        self.writer.abort()

    async def start(self) -> FormattedWriter:
        await self.writer.start()
        return self

    def __await__(self) -> Generator[Any, None, FormattedWriter]:
        return self.start().__await__()

    async def __aenter__(self) -> FormattedWriter:
        return await self.start()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        await self.writer.__aexit__(exc_type, exc, tb)


class FormattedReader:
    """An :class:`EventReader` that yields decoded records; ``last_event`` is the event
    the last record came from (its offsets), ``position`` the reader's position.

    Example::

        async for msg in client.reader("orders/0", format="kafka"):
            print(msg.offset, msg.value)
    """

    def __init__(self, reader: EventReader, fmt: str | RecordFormat) -> None:
        self.reader = reader
        self.format = get(fmt)
        self.last_event: Event | None = None

    def __repr__(self) -> str:
        return f"<FormattedReader {self.format.name} {self.reader!r}>"

    @property
    def position(self) -> Position:
        return self.reader.position

    def __aiter__(self) -> FormattedReader:
        return self

    async def __anext__(self) -> Any:
        ev = await self.reader.__anext__()
        self.last_event = ev
        return self.format.decode(ev.data)

    async def read_batch(self) -> list[Any]:
        """The records of the next read (empty at the end)."""
        evs = await self.reader.read_batch()
        if evs:
            self.last_event = evs[-1]
        dec = self.format.decode
        return [dec(e.data) for e in evs]

    async def batches(self) -> AsyncIterator[list[Any]]:
        while batch := await self.read_batch():
            yield batch

    async def close(self) -> None:
        await self.reader.close()

    async def __aenter__(self) -> FormattedReader:
        await self.reader.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.reader.__aexit__(*exc)
