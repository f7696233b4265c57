# Log operations: one class per record kind, carrying its fields and its record body, and the
# one set of rules by which a durable record changes committed segment state.
#
# Contract.
# * An operation is built when a call is accepted (container.py; ``seq`` is filled in when it
#   is given its sequence number) or decoded from a durable record (``decode``, recovery).
# * ``op.apply(now_ms, fx)`` is the only code that changes committed metadata for a record
#   that is not a plain append: the commit loop and recovery both call it, and differ only in
#   ``Effects``: where data goes (read cache vs chunk files), what a delete or truncate
#   releases, who is woken. It returns the value the caller's future completes with.
# * Appends are the hot path of both the commit loop and recovery, and are not objects: a
#   queued append is the tuple ``Append`` (a slotted object would cost ~0.6 us per append on
#   this machine, a quarter of an append's whole cost) and ``apply_append`` holds its rules;
#   the two hot loops inline those same few lines (commit.py ``_apply``, recovery.py
#   ``_replay_file``), and test_apply_rules.py checks that live and recovered state agree.
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from segmentstore_client.protocol.names import decode_name, encode_name

from . import records as R
from .api import AppendResult
from .metadata import SegmentMeta

# (segment, data, end offset, future, writer id int or None, event number, event count)
Append = tuple[SegmentMeta, bytes, int, "asyncio.Future[AppendResult]", int | None, int | None, int]


class Effects(Protocol):
    """What applying a record does beyond segment metadata (commit loop or recovery)."""

    @property
    def chunk_bytes(self) -> int: ...

    def on_data(self, seg: SegmentMeta, offset: int, data: bytes | memoryview) -> None: ...

    def on_garbage(self, seq: int, seg_id: int, first_chunk: int, last_chunk: int) -> None:
        """Chunk files that record ``seq`` made garbage (deleted after its checkpoint)."""

    def on_truncated(self, seg: SegmentMeta, offset: int) -> None: ...

    def on_deleted(self, seg: SegmentMeta) -> None: ...

    def on_woken(self, seg: SegmentMeta, everyone: bool) -> None: ...


def apply_append(
    seg: SegmentMeta,
    offset: int,
    data: bytes | memoryview,
    writer: int | None,
    event_number: int,
    event_count: int,
    now_ms: int,
    fx: Effects,
) -> None:
    """The rules of an append record (the hot loops inline exactly these)."""
    if data:
        fx.on_data(seg, offset, data)
    seg.length = offset + len(data)
    if writer is not None:
        seg.set_attr(writer, event_number)
    if event_count:
        seg.ec = (seg.ec or 0) + event_count
    seg.last_modified_ms = now_ms


def _delete(seg: SegmentMeta, seq: int, fx: Effects) -> None:
    seg.deleted = True
    fx.on_deleted(seg)
    if seg.length:
        fx.on_garbage(seq, seg.id, 0, (seg.length - 1) // fx.chunk_bytes)
    fx.on_woken(seg, True)


@dataclass(slots=True, eq=False)
class Duplicate:
    """An append already stored (writer id and event number): no record, answered in order."""

    seg: SegmentMeta
    fut: asyncio.Future[AppendResult]


@dataclass(slots=True, eq=False)
class _Record:
    """What every logged operation has: its record type, its segment, the caller's future
    (None when replayed) and its sequence number (0 until it is queued)."""

    RTYPE: ClassVar[int]
    seg: SegmentMeta
    fut: asyncio.Future[Any] | None = field(default=None, kw_only=True)
    seq: int = field(default=0, kw_only=True)

    def body(self) -> bytes:
        return R.SEG.pack(self.seg.id)


@dataclass(slots=True, eq=False)
class Create(_Record):
    RTYPE: ClassVar[int] = R.CREATE
    attrs: dict[int, int]

    def body(self) -> bytes:
        seg = self.seg
        name = encode_name(seg.name)
        head = R.CREATE_BODY.pack(seg.id, seg.segment_type, len(name))
        return head + name + R.encode_attrs(self.attrs)

    def apply(self, now_ms: int, fx: Effects) -> object:
        self.seg.created = True
        self.seg.load_attrs(self.attrs)
        self.seg.last_modified_ms = now_ms
        return None


@dataclass(slots=True, eq=False)
class Seal(_Record):
    RTYPE: ClassVar[int] = R.SEAL

    def apply(self, now_ms: int, fx: Effects) -> object:
        self.seg.sealed = True
        self.seg.last_modified_ms = now_ms
        fx.on_woken(self.seg, True)
        return self.seg.length


@dataclass(slots=True, eq=False)
class Truncate(_Record):
    RTYPE: ClassVar[int] = R.TRUNCATE
    offset: int

    def body(self) -> bytes:
        return R.SEG_OFFSET.pack(self.seg.id, self.offset)

    def apply(self, now_ms: int, fx: Effects) -> object:
        seg = self.seg
        seg.last_modified_ms = now_ms
        if self.offset > seg.start_offset:
            seg.start_offset = self.offset
            fx.on_garbage(self.seq, seg.id, 0, self.offset // fx.chunk_bytes - 1)
            fx.on_truncated(seg, self.offset)
        return None


@dataclass(slots=True, eq=False)
class Delete(_Record):
    RTYPE: ClassVar[int] = R.DELETE

    def apply(self, now_ms: int, fx: Effects) -> object:
        self.seg.last_modified_ms = now_ms
        _delete(self.seg, self.seq, fx)
        return None


@dataclass(slots=True, eq=False)
class Merge(_Record):
    """Append ``data`` (the source's readable bytes) to ``seg`` and delete ``source``."""

    RTYPE: ClassVar[int] = R.MERGE
    source: SegmentMeta
    offset: int
    data: bytes | memoryview
    delta: int

    def body(self) -> bytes:
        head = R.MERGE_BODY.pack(self.seg.id, self.source.id, self.offset, self.delta)
        return head + self.data

    def apply(self, now_ms: int, fx: Effects) -> object:
        t = self.seg
        end = self.offset + len(self.data)
        if self.data:
            fx.on_data(t, self.offset, self.data)
        t.length = end
        if self.delta:
            t.ec = (t.ec or 0) + self.delta
        t.last_modified_ms = now_ms
        fx.on_woken(t, False)
        self.source.last_modified_ms = now_ms
        _delete(self.source, self.seq, fx)
        return end


@dataclass(slots=True, eq=False)
class UpdateAttributes(_Record):
    RTYPE: ClassVar[int] = R.ATTRS
    values: dict[int, int]

    def body(self) -> bytes:
        return R.SEG.pack(self.seg.id) + R.encode_attrs(self.values)

    def apply(self, now_ms: int, fx: Effects) -> object:
        for key, value in self.values.items():
            self.seg.set_attr(key, value)
        self.seg.last_modified_ms = now_ms
        return None


Operation = Create | Seal | Truncate | Delete | Merge | UpdateAttributes
Queued = Append | Duplicate | Operation


def decode(
    seq: int, rtype: int, record: bytes, by_id: dict[int, SegmentMeta], now_ms: int
) -> Operation | str:
    """The operation of a durable non-append record (``record`` from its size field on),
    or why it does not fit the state replayed so far (the live engine validated it before
    logging, so that means a bug, not a torn write)."""
    at = 4 + R.SEQ_TYPE_SIZE  # size field + seq + type precede the body
    if rtype == R.CREATE:
        seg_id, stype, name_len = R.CREATE_BODY.unpack_from(record, at)
        pos = at + R.CREATE_BODY.size
        name = decode_name(record[pos : pos + name_len])
        attrs, _ = R.decode_attrs(record, pos + name_len)
        seg = SegmentMeta(name, seg_id, stype, now_ms)
        by_id[seg_id] = seg
        return Create(seg, attrs, seq=seq)
    if rtype == R.MERGE:
        target_id, source_id, offset, delta = R.MERGE_BODY.unpack_from(record, at)
        target = by_id.get(target_id)
        source = by_id.get(source_id)
        if target is None or target.deleted or offset != target.length or source is None:
            return f"merge of {source_id} into {target_id} at {offset}"
        data = memoryview(record)[at + R.MERGE_BODY.size :]
        return Merge(target, source, offset, data, delta, seq=seq)
    (seg_id,) = R.SEG.unpack_from(record, at)
    found = by_id.get(seg_id)
    if found is None or found.deleted:
        return f"record type {rtype} for segment {seg_id}"
    seg = found
    if rtype == R.SEAL:
        return Seal(seg, seq=seq)
    if rtype == R.TRUNCATE:
        _, offset = R.SEG_OFFSET.unpack_from(record, at)
        return Truncate(seg, offset, seq=seq)
    if rtype == R.DELETE:
        return Delete(seg, seq=seq)
    values, _ = R.decode_attrs(record, at + R.SEG.size)
    return UpdateAttributes(seg, values, seq=seq)
