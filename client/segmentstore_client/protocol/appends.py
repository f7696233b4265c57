"""Append blocks: how clients cut events into AppendBlock / PartialEvent / Padding /
AppendBlockEnd frames (reference 7.4), and how a server puts them back together (7.5).

The server side is :class:`AppendAssembler`, one per connection: it tracks which writer
ids were set up on the connection (and for which segment), holds at most one AppendBlock
waiting for its AppendBlockEnd, enforces the event-number floor, and turns every data
command into one :class:`Append`. Anything the reference says must close the connection
raises :class:`RemoteProtocolError`.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ..errors import RemoteProtocolError
from .commands import (
    AppendBlock,
    AppendBlockEnd,
    Command,
    ConditionalAppend,
    ConditionalBlockEnd,
    Padding,
)
from .events import frame_event
from .primitives import HEADER, Buffer

PARTIAL_EVENT_TYPE: Final = -2
PADDING_TYPE: Final = -1


@dataclass(slots=True)
class Append:
    """One server-side append, produced by one data command (or block + block end)."""

    segment: str
    writer_id: uuid.UUID
    event_number: int  # number of the last event in this append
    event_count: int
    data: Buffer
    expected_offset: int | None  # conditional appends only
    request_id: int


class _Writer:
    """A set-up writer: its segment, and the highest event number it has sent (its floor)."""

    __slots__ = ("floor", "segment")

    def __init__(self, segment: str) -> None:
        self.segment = segment
        self.floor = 0


class AppendAssembler:
    """Per-connection reassembly of append data into :class:`Append` objects."""

    __slots__ = ("_pending", "_writers")

    def __init__(self) -> None:
        # One entry per writer (one UUID hash per lookup: UUID.__hash__ is Python code).
        self._writers: dict[uuid.UUID, _Writer] = {}
        self._pending: AppendBlock | None = None

    @property
    def block_open(self) -> bool:
        """True between an AppendBlock and its AppendBlockEnd: no other frame may come."""
        return self._pending is not None

    def setup(self, writer_id: uuid.UUID, segment: str) -> None:
        """Record a SetupAppend: the writer now writes to ``segment``; its floor resets."""
        if self._pending is not None:
            raise RemoteProtocolError("SetupAppend between AppendBlock and its AppendBlockEnd")
        self._writers[writer_id] = _Writer(segment)

    def knows(self, writer_id: uuid.UUID) -> bool:
        """True when ``writer_id`` was set up on this connection (and not forgotten)."""
        return writer_id in self._writers

    def writer_count(self) -> int:
        """Writer ids set up on this connection and not forgotten."""
        return len(self._writers)

    def forget(self, writer_id: uuid.UUID) -> None:
        """Drop a writer (after a failed append): its data is refused until set up again."""
        self._writers.pop(writer_id, None)

    def segment_of(self, writer_id: uuid.UUID) -> str | None:
        writer = self._writers.get(writer_id)
        return None if writer is None else writer.segment

    def feed(self, command: Command) -> Append | None:
        """Take one data command; return the completed append, or None for a block start."""
        if isinstance(command, AppendBlockEnd):
            return self._block_end(command)
        if self._pending is not None:
            raise RemoteProtocolError(
                f"{type(command).__name__} between AppendBlock and its AppendBlockEnd"
            )
        if isinstance(command, AppendBlock):
            self._segment(command.writer_id)
            self._pending = command
            return None
        if isinstance(command, ConditionalAppend):
            data: Buffer = frame_event(command.data)
        elif isinstance(command, ConditionalBlockEnd):
            data = command.data
        elif isinstance(command, Padding):
            return None
        else:
            raise RemoteProtocolError(f"{type(command).__name__} is not append data")
        segment = self._segment(command.writer_id)
        self._advance(command.writer_id, command.event_number)
        return Append(
            segment,
            command.writer_id,
            command.event_number,
            1,
            data,
            command.expected_offset,
            command.request_id,
        )

    def end_only(self, end: AppendBlockEnd) -> Append:
        """``feed(end)`` for an AppendBlockEnd while no block is open (what the SDK and the
        Rust client send for every append), in one call: the same checks, the same errors.
        The caller checks :attr:`block_open` first."""
        segment = self.take_end_only(end)
        assert segment is not None, "a block is open"
        w, number = end.writer_id, end.last_event_number
        return Append(segment, w, number, end.num_events, end.data, None, end.request_id)

    def take_end_only(self, end: AppendBlockEnd) -> str | None:
        """``end_only`` without building the :class:`Append` (the server's hot path reads
        the fields from ``end`` itself): the checks, the floor moved; returns the segment.
        None, with nothing done, while a block is open (``feed`` then joins the two)."""
        if self._pending is not None:
            return None
        w = end.writer_id
        writer = self._writers.get(w)
        if writer is None:
            raise RemoteProtocolError(f"data for writer {w} before its SetupAppend")
        if end.num_events <= 0:
            raise RemoteProtocolError(f"AppendBlockEnd with numEvents {end.num_events}")
        number = end.last_event_number
        if number < writer.floor:
            raise RemoteProtocolError(f"writer {w}: event number {number} goes backwards")
        writer.floor = number
        return writer.segment

    def _segment(self, writer_id: uuid.UUID) -> str:
        writer = self._writers.get(writer_id)
        if writer is None:
            raise RemoteProtocolError(f"data for writer {writer_id} before its SetupAppend")
        return writer.segment

    def _advance(self, writer_id: uuid.UUID, event_number: int) -> None:
        writer = self._writers[writer_id]
        if event_number < writer.floor:
            raise RemoteProtocolError(
                f"writer {writer_id}: event number {event_number} goes backwards"
            )
        writer.floor = event_number

    def _block_end(self, end: AppendBlockEnd) -> Append:
        w = end.writer_id
        segment = self._segment(w)
        if end.num_events <= 0:
            raise RemoteProtocolError(f"AppendBlockEnd with numEvents {end.num_events}")
        pending, self._pending = self._pending, None
        if pending is None:
            data: Buffer = end.data
        else:
            data = _join_block(pending, end)
        self._advance(w, end.last_event_number)
        return Append(segment, w, end.last_event_number, end.num_events, data, None, end.request_id)


def _join_block(block: AppendBlock, end: AppendBlockEnd) -> Buffer:
    if block.writer_id != end.writer_id:
        raise RemoteProtocolError("AppendBlockEnd names another writer than its AppendBlock")
    whole_len = end.size_of_whole_events
    block_data = memoryview(block.data)
    if not 0 <= whole_len <= len(block_data):
        raise RemoteProtocolError(f"sizeOfWholeEvents {whole_len} outside the block")
    whole = block_data[:whole_len]
    rest = block_data[whole_len:]
    if not rest:
        if len(end.data):
            raise RemoteProtocolError("AppendBlockEnd carries data after a block with no split")
        return whole
    if len(rest) < 8:
        raise RemoteProtocolError("truncated sub-frame header at the end of an AppendBlock")
    sub_type, sub_len = HEADER.unpack_from(rest, 0)
    if sub_len < 0 or 8 + sub_len != len(rest):
        raise RemoteProtocolError("AppendBlock's trailing sub-frame does not end the block")
    if sub_type == PADDING_TYPE:
        if len(end.data):
            raise RemoteProtocolError("AppendBlockEnd carries data after a padded block")
        return whole
    if sub_type == PARTIAL_EVENT_TYPE:
        return b"".join((whole, rest[8:], end.data))
    raise RemoteProtocolError(f"AppendBlock ends with a sub-frame of type {sub_type}")


# AppendBlockEnd (type 4) around its records: frame header, writer id, sizeOfWholeEvents,
# the data's length prefix | records | numEvents, lastEventNumber, requestId.
_ABE_HEAD: Final = struct.Struct(">ii16sii")
_ABE_TAIL: Final = struct.Struct(">iqq")
APPEND_BLOCK_END_HEAD_SIZE: Final = _ABE_HEAD.size  # 28 bytes before the records
APPEND_BLOCK_END_TAIL_SIZE: Final = _ABE_TAIL.size  # 20 bytes after them
_ABE_FIXED: Final = APPEND_BLOCK_END_HEAD_SIZE + APPEND_BLOCK_END_TAIL_SIZE - HEADER.size


def append_block_end_parts(
    writer_id: uuid.UUID | bytes,
    data_length: int,
    num_events: int,
    last_event_number: int,
    request_id: int,
) -> tuple[bytes, bytes]:
    """An end-only AppendBlockEnd frame as (head, tail) around ``data_length`` bytes of
    whole event records, so a writer joins head, its records and tail in one go without
    building the command: ``b"".join((head, records, tail))`` equals
    ``encode(block_end(writer_id, records, num_events, last_event_number, request_id))``.
    ``writer_id`` may be the UUID's 16 bytes (a writer keeps them at hand).

    Example::

        head, tail = append_block_end_parts(wid, len(records), 3, 42, rid)
        transport.writelines((head, records, tail))
    """
    wid = writer_id.bytes if isinstance(writer_id, uuid.UUID) else writer_id
    head = _ABE_HEAD.pack(4, _ABE_FIXED + data_length, wid, data_length, data_length)
    return head, _ABE_TAIL.pack(num_events, last_event_number, request_id)


# DataAppended (type 7) with every optional field present: frame header (payload 48
# bytes), writer id, eventNumber, previousEventNumber, requestId, currentSegmentWriteOffset.
_DATA_APPENDED: Final = struct.Struct(">ii16sqqqq")

data_appended_frame: Final[Callable[[bytes, int, int, int, int], bytes]] = functools.partial(
    _DATA_APPENDED.pack, 7, 48
)
"""``data_appended_frame(writer_id_bytes, event_number, previous, request_id, offset)``
equals ``encode(DataAppended(UUID(bytes=writer_id_bytes), event_number, previous,
request_id, offset))``: a server's ack without the command object (one C call)."""


def block_end(
    writer_id: uuid.UUID,
    records: Buffer,
    num_events: int,
    last_event_number: int,
    request_id: int,
) -> AppendBlockEnd:
    """An end-only append (what the Rust client sends): every record in one AppendBlockEnd."""
    return AppendBlockEnd(
        writer_id, len(records), records, num_events, last_event_number, request_id
    )


def build_blocks(
    writer_id: uuid.UUID,
    records: Sequence[bytes],
    first_event_number: int,
    request_id: int,
    block_size: int,
) -> list[Command]:
    """Cut event records into reserved blocks the way the Java client does (shape 3).

    Records that fit whole go into the block; the first one that does not fit is split
    between a PartialEvent sub-frame and the AppendBlockEnd's data; a block that runs out
    of records is closed with Padding. Returns AppendBlock/AppendBlockEnd pairs.
    """
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    out: list[Command] = []
    i, n = 0, len(records)
    event_number = first_event_number - 1
    while i < n:
        parts: list[bytes] = []
        whole = count = 0
        while i < n and len(records[i]) < block_size - whole:
            parts.append(records[i])
            whole += len(records[i])
            count += 1
            i += 1
        room = block_size - whole
        if i < n:
            record = records[i]
            i += 1
            count += 1
            parts.append(HEADER.pack(PARTIAL_EVENT_TYPE, room) + record[:room])
            tail = record[room:]
        else:
            parts.append(HEADER.pack(PADDING_TYPE, room) + bytes(room))
            tail = b""
        event_number += count
        out.append(AppendBlock(writer_id, b"".join(parts)))
        out.append(AppendBlockEnd(writer_id, whole, tail, count, event_number, request_id))
    return out
