"""Writers and readers that speak a record format: the SDK's ``format=`` hook.

Contract: :class:`FormattedWriter` encodes each record with its :class:`RecordFormat`
and hands the bytes to an :class:`EventWriter` (one record = one segment event; acks,
batching and exactly-once are the writer's); :class:`FormattedReader` decodes each
event an :class:`EventReader` yields. A damaged event (one whose decoder raises a
``CorruptRecord``) is never a wrong record; what happens to it is the reader's
``errors`` choice (:func:`decode_batch` holds the rule both facades share):

* ``"raise"`` (default): the records before it are returned first (``read_batch`` stops
  at it and leaves the reader positioned at it); the read that meets it raises
  :class:`~segmentstore_client.formats.errors.DamagedEvent` (segment, offset, cause)
  with the reader positioned after it, so the next read goes on past it;
* ``"skip"``: it is dropped, counted in ``skipped`` and kept in ``last_damage``.

Any other decoding error (e.g. ``CodecUnavailable``) is raised as it is, after the
records before it, in the same positions as ``"raise"``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import CorruptRecord
from . import RecordFormat, get
from .errors import DamagedEvent

if TYPE_CHECKING:
    from ..position import Position
    from ..reader import Event, EventReader
    from ..writer import Ack, EventWriter


Errors = Literal["raise", "skip"]


@dataclass(slots=True)
class Decoded:
    """What :func:`decode_batch` made of a batch: the good ``records`` (from the first
    events up to the first failure), the ``skipped`` damaged events, and the failure
    (``error`` at ``failed``, an index into the batch) if decoding stopped at one."""

    records: list[Any]
    skipped: list[DamagedEvent]
    last: int = -1
    """Index of the event the last record came from."""
    failed: int = -1
    error: Exception | None = None


def check_errors(errors: str) -> Errors:
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip', not {errors!r}")
    return "skip" if errors == "skip" else "raise"


def decode_batch(
    decode: Callable[[bytes], Any], segment: str, batch: Sequence[Event], errors: Errors
) -> Decoded:
    """Decode ``batch`` in order up to its first event that cannot be decoded (and is
    not skipped); damaged events become :class:`DamagedEvent` errors."""
    out = Decoded([], [])
    for i, ev in enumerate(batch):
        try:
            out.records.append(decode(ev.data))
            out.last = i
        except CorruptRecord as e:
            damage = DamagedEvent(segment, ev.offset, ev.next_offset, e)
            damage.__cause__ = e
            if errors == "skip":
                out.skipped.append(damage)
                continue
            out.failed, out.error = i, damage
            return out
        except Exception as e:
            out.failed, out.error = i, e
            return out
    return out


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


class DamageRule(abc.ABC):
    """The part both formatted readers share: ``errors``, the counters, and what a
    decoded batch does to the reader's position (module docstring). A subclass gives
    ``_segment``, ``_offset`` and ``_seek`` of its event reader."""

    errors: Errors
    last_event: Event | None
    skipped: int
    last_damage: DamagedEvent | None

    def _init_rule(self, errors: str) -> None:
        self.errors = check_errors(errors)
        self.last_event = None
        self.skipped = 0
        self.last_damage = None

    @abc.abstractmethod
    def _segment(self) -> str:
        """Given by the subclass's event reader."""

    @abc.abstractmethod
    def _offset(self) -> int:
        """Given by the subclass's event reader."""

    @abc.abstractmethod
    def _seek(self, offset: int) -> None:
        """Given by the subclass's event reader."""

    def _decode(self, fmt: RecordFormat, evs: list[Event]) -> list[Any]:
        return self._take(decode_batch(fmt.decode, self._segment(), evs, self.errors), evs)

    def _take(self, d: Decoded, evs: list[Event]) -> list[Any]:
        """Account for ``d``; reposition the reader and raise where the module says."""
        if d.skipped:
            self.skipped += len(d.skipped)
            self.last_damage = d.skipped[-1]
        if d.records:
            self.last_event = evs[d.last]
        if d.error is None:
            return d.records
        bad = evs[d.failed]
        if d.records:  # the good ones first; the next read starts at the damaged event
            self._seek(bad.offset)
            return d.records
        self.last_event = bad
        if len(evs) > 1 or self._offset() != bad.next_offset:
            self._seek(bad.next_offset)
        raise d.error


class FormattedReader(DamageRule):
    """An :class:`EventReader` that yields decoded records; ``last_event`` is the event
    the last record came from (its offsets), ``position`` the reader's position.
    ``errors`` ("raise" or "skip", settable) decides what a damaged event does (module
    docstring); ``skipped`` counts the events skipped, ``last_damage`` the last one.

    Example::

        async for msg in client.reader("orders/0", format="kafka"):
            print(msg.offset, msg.value)

        r = client.reader("orders/0", format="kafka")
        while True:
            try:
                batch = await r.read_batch()
            except DamagedEvent as e:   # the good records came before; go on past it
                log.warning("skipping %s", e)
                continue
            if not batch:
                break
    """

    def __init__(
        self, reader: EventReader, fmt: str | RecordFormat, *, errors: Errors = "raise"
    ) -> None:
        self.reader = reader
        self.format = get(fmt)
        self._init_rule(errors)

    def _segment(self) -> str:
        return self.reader.segment

    def _offset(self) -> int:
        return self.reader.offset

    def _seek(self, offset: int) -> None:
        self.reader.seek(offset)

    def __repr__(self) -> str:
        return f"<FormattedReader {self.format.name} {self.reader!r}>"

    @property
    def position(self) -> Position:
        return self.reader.position

    def __aiter__(self) -> FormattedReader:
        return self

    async def __anext__(self) -> Any:
        while True:
            ev = await self.reader.__anext__()
            out = self._decode(self.format, [ev])
            if out:
                return out[0]

    async def read_batch(self) -> list[Any]:
        """The records of the next read (empty at the end); see the module docstring
        for a damaged event in it."""
        while True:
            evs = await self.reader.read_batch()
            if not evs:
                return []
            out = self._decode(self.format, evs)
            if out:
                return out

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
