"""The blocking facade's ``format=`` hook: the same contract as ``_sdk`` (one record = one
segment event; a damaged event is raised as ``DamagedEvent`` after the records before it,
or skipped, by the reader's ``errors``, with the rule of ``_sdk.DamageRule``), over a
:class:`SyncEventWriter` / :class:`SyncEventReader`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import RecordFormat, get
from ._sdk import DamageRule, Errors

if TYPE_CHECKING:
    from ..position import Position
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


class SyncFormattedReader(DamageRule):
    """A blocking reader that yields decoded records; ``last_event`` is the event the
    last record came from; ``errors``, ``skipped`` and ``last_damage`` as in the async
    reader (a damaged event raises ``DamagedEvent`` after the records before it).

    Example::

        for msg in client.reader("orders/0", format="kafka"):
            print(msg.offset, msg.value)
    """

    def __init__(
        self, reader: SyncEventReader, fmt: str | RecordFormat, *, errors: Errors = "raise"
    ) -> None:
        self.reader = reader
        self.format = get(fmt)
        self._init_rule(errors)

    def _segment(self) -> str:
        return self.reader.segment

    def _offset(self) -> int:
        return self.reader.position.offset

    def _seek(self, offset: int) -> None:
        self.reader.seek(offset)

    def __repr__(self) -> str:
        return f"<SyncFormattedReader {self.format.name} {self.reader!r}>"

    @property
    def position(self) -> Position:
        return self.reader.position

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        while True:
            ev = next(self.reader)
            out = self._decode(self.format, [ev])
            if out:
                return out[0]

    def read_batch(self) -> list[Any]:
        """The records of the next read (empty at the end); a damaged event as in the
        async reader."""
        while True:
            evs = self.reader.read_batch()
            if not evs:
                return []
            out = self._decode(self.format, evs)
            if out:
                return out

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> SyncFormattedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
