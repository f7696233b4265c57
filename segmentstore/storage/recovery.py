# Recovery of one container: newest checkpoint + replay of the log after it.
#
# Contract. ``recover`` runs in a worker thread (it does nothing but disk I/O and parsing) and
# returns the committed state as of the last good log record, or raises StoreCorrupted
# (naming the file and the repair command) and then has changed no log file:
# * a damaged checkpoint, or a missing one where the log shows there was one, refuses;
# * chunk files are made to match the checkpoint (files of unknown segments and chunks
#   outside [start offset, length) are deleted; the block checksums of each last chunk are
#   cut back to the checkpointed length), because anything the storage writer wrote after
#   the checkpoint is re-derived from the log; a segment whose chunk files are missing or
#   short is marked damaged (its reads fail; the store starts), except for the head of the
#   block a segment truncated to its end extends next (bytes no read returns): written back
#   as zeros if its file cannot give it;
# * records after the checkpoint are replayed in sequence order through operations.py's
#   rules; data goes straight back into chunk files (buffered, written in large pieces, not
#   synced: the log stays until the next checkpoint syncs them), so recovery needs memory
#   for a bounded buffer, not for the log;
# * replay stops at the first record with a wrong length, CRC, type or sequence number. If no
#   intact record follows it in the last file with records, it is a torn tail: cut (a
#   WARNING). Anything else is damage (damage.py): refused, unless the fsync mode lets a
#   power loss leave it there; then the prefix is kept and the rest set aside, never deleted.
#   ``dry_run`` (``segmentstore check``) changes nothing on disk.
from __future__ import annotations

import logging
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from . import records as R
from .api import EVENT_COUNT, FsyncMode, StoreCorrupted
from .checkpoint import Checkpoint, load_newest
from .chunk_sums import BLOCK, ChunkDamaged
from .chunk_sums import cut as cut_sums
from .chunks import ChunkId, ChunkStore
from .crc import crc32c
from .damage import LogDamage, file_holds_records, later_record
from .metadata import SegmentMeta
from .operations import apply_append
from .operations import decode as decode_operation
from .wal import HEADER_SIZE, LogFileInfo, list_log_files

log = logging.getLogger("segmentstore.storage")

_EVENT_COUNT = EVENT_COUNT.int
_FLUSH_AT = 64 * 1024 * 1024
# The record prefix and an APPEND_W body: the fixed head of the commonest record, read at once.
_APPEND_W_HEAD = struct.Struct(R.PREFIX.format + R.APPEND_W_BODY.format[1:])


@dataclass
class Recovered:
    segments: dict[str, SegmentMeta]
    checkpoint_seq: int
    next_seq: int
    next_segment_id: int
    next_log_index: int
    prev_valid_len: int
    # (seq of the record that made them garbage, segment id, first chunk, last chunk)
    pending_deletes: list[tuple[int, int, int, int]] = field(default_factory=list)
    dirty_chunks: set[ChunkId] = field(default_factory=set)
    records: int = 0
    log_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    # Segment id -> length in the checkpoint (what its chunk files must hold, fsynced).
    checkpoint_lengths: dict[int, int] = field(default_factory=dict)


class _ChunkBuffer:
    """Replayed segment data on its way to the chunk files, written in large pieces."""

    def __init__(self, chunks: ChunkStore, dirty: set[ChunkId], dry_run: bool = False) -> None:
        self.chunks = chunks
        self.dirty = dirty
        self.dry_run = dry_run
        # Segments whose chunk files are missing or short: their data cannot be appended to
        # those files (the head block to extend is gone); reads of them fail anyway.
        self.damaged: set[int] = set()
        self.pending: dict[int, tuple[int, bytearray]] = {}
        self.size = 0

    def add(self, seg_id: int, offset: int, data: memoryview) -> None:
        entry = self.pending.get(seg_id)
        if entry is None:
            self.pending[seg_id] = (offset, bytearray(data))
        else:
            entry[1].extend(data)
        self.size += len(data)
        if self.size >= _FLUSH_AT:
            self.flush()

    def drop(self, seg_id: int) -> None:
        entry = self.pending.pop(seg_id, None)
        if entry is not None:
            self.size -= len(entry[1])

    def flush(self) -> None:
        for seg_id, (offset, data) in self.pending.items():
            if not self.dry_run and seg_id not in self.damaged:
                self.dirty |= self.chunks.write(seg_id, offset, [data])
        self.pending.clear()
        self.size = 0


def _pending_size(pending: dict[int, tuple[int, bytearray]]) -> int:
    return sum(len(data) for _, data in pending.values())


def _clean_chunks(
    chunks: ChunkStore, by_id: dict[int, SegmentMeta], dirty: set[ChunkId], problems: list[str]
) -> None:
    """Make chunk files match the checkpoint: drop what it does not cover, cut the checksums
    of each segment's last chunk back to its length (bytes past it are vouched for no more);
    give back the head of the block a segment truncated to its end extends next; mark
    segments whose files are missing or short."""
    cb = chunks.chunk_bytes
    for seg_id, ks in chunks.list_files().items():
        seg = by_id.get(seg_id)
        first, last = (0, -1) if seg is None else chunks.chunk_range(seg.start_offset, seg.length)
        if seg is not None and seg.start_offset == seg.length and seg.length % cb:
            # Truncated to its end mid-chunk: no byte left to read, but the next append
            # extends the block holding the end, whose head it reads back and sums over.
            first = last = seg.length // cb
        for k in ks:
            if k < first or k > last:
                chunks.delete(seg_id, k, k)
            elif seg is not None and k == last:
                path = chunks.path(seg_id, k)
                if path.exists():
                    cut_sums(path, cb, seg.length - k * cb)
    for seg in by_id.values():
        if seg.start_offset == seg.length:
            _restore_end_head(chunks, seg, dirty, problems)
        found = chunks.verify(seg.id, seg.start_offset, seg.length, read=False)
        if found:
            seg.damaged = "; ".join(what for _, what in found)
            msg = f"segment {seg.name!r}: {seg.damaged}; its reads will fail"
            problems.append(msg)
            log.error("recovery: %s", msg)


def _restore_end_head(
    chunks: ChunkStore, seg: SegmentMeta, dirty: set[ChunkId], problems: list[str]
) -> None:
    """A segment truncated to its whole length mid-block: its next append extends the block
    holding that length, reading back (direct I/O) or summing over the block's head. Those
    bytes are below the start offset, so no read returns them; if the chunk file cannot give
    them (a recovery before 9d812b8 dropped it, or it is short or fails its checksum),
    write them back as zeros, with their checksum, rather than fail that append's flush."""
    cb = chunks.chunk_bytes
    k = seg.length // cb
    in_file = seg.length - k * cb
    head_at = k * cb + in_file - in_file % BLOCK
    if head_at == seg.length:
        return  # the next append starts a block of its own
    try:
        chunks.read(seg.id, head_at, seg.length)
        return
    except ChunkDamaged as exc:
        why = str(exc)
    dirty |= chunks.write(seg.id, head_at, [bytes(seg.length - head_at)])
    msg = (
        f"segment {seg.name!r}: truncated to its end at {seg.length}, but {why}: bytes "
        f"[{head_at}, {seg.length}) (below its start, never read) written back as zeros"
    )
    problems.append(msg)
    log.warning("recovery: %s", msg)


def _load_checkpoint(
    container_dir: Path, infos: list[LogFileInfo], chunks: ChunkStore
) -> Checkpoint | None:
    """The newest checkpoint; refuses (StoreCorrupted) when it is damaged or missing."""
    try:
        ckpt = load_newest(container_dir)
    except StoreCorrupted as exc:
        raise StoreCorrupted(
            exc.segment,
            f"{exc}. The store will not start: the log files it needs were retired when it "
            f"was written, so no older state can stand in for it. Restore {exc.segment} "
            f"from a backup; `segmentstore check {container_dir.parent}` lists what else "
            f"is damaged",
        ) from None
    if ckpt is not None:
        return ckpt
    # No checkpoint yet is normal only for a container whose log still starts at record 1
    # (nothing was ever checkpointed, so no log file was ever retired).
    first = next((i for i in infos if i.header_ok), None)
    if first is not None and first.first_seq > 1:
        why = f"its oldest log file {first.path.name} starts at record {first.first_seq}"
    elif not infos and chunks.dir.is_dir() and chunks.list_files():
        why = "chunk files exist but no log file does"
    else:
        return None
    raise StoreCorrupted(
        str(container_dir),
        f"checkpoint missing in {container_dir}: {why}, so a checkpoint-*.ckp file was "
        f"there and is gone. The store will not start (starting empty would drop every "
        f"segment). Restore the checkpoint from a backup; `segmentstore check "
        f"{container_dir.parent}` lists what else is present",
    )


def recover(
    container_dir: Path,
    chunks: ChunkStore,
    label: str,
    fsync: FsyncMode = "always",
    dry_run: bool = False,
) -> Recovered:
    """Rebuild the container's committed state from disk (see the module's contract).

    ``fsync`` is the mode the store runs with: it says which damage a power loss may
    legitimately leave (then the intact prefix is recovered and the rest set aside) and
    which must stop the store. ``dry_run`` (``segmentstore check``) changes nothing on disk.
    """
    log_dir = container_dir / "log"
    if not dry_run:
        log_dir.mkdir(parents=True, exist_ok=True)
        chunks.open()
    infos = list_log_files(log_dir) if log_dir.is_dir() else []
    ckpt = _load_checkpoint(container_dir, infos, chunks)
    ckpt_seq = ckpt.seq if ckpt is not None else 0
    by_id: dict[int, SegmentMeta] = {}
    next_segment_id = 1
    if ckpt is not None:
        next_segment_id = ckpt.next_segment_id
        for s in ckpt.segments:
            seg = SegmentMeta(s.name, s.seg_id, s.segment_type, s.last_modified_ms)
            seg.created = True
            seg.length = seg.flushed = s.length
            seg.start_offset = s.start_offset
            seg.sealed = s.sealed
            seg.load_attrs(s.attrs)
            by_id[s.seg_id] = seg
    rec = Recovered({}, ckpt_seq, ckpt_seq + 1, next_segment_id, 0, -1)
    rec.checkpoint_lengths = {seg_id: seg.length for seg_id, seg in by_id.items()}
    if not dry_run:
        _clean_chunks(chunks, by_id, rec.dirty_chunks, rec.problems)
    buf = _ChunkBuffer(chunks, rec.dirty_chunks, dry_run)
    buf.damaged = {seg.id for seg in by_id.values() if seg.damaged is not None}

    # Files whose successor starts at or before ckpt_seq + 1 hold only checkpointed records.
    start = 0
    while (
        start + 1 < len(infos)
        and infos[start + 1].header_ok
        and infos[start + 1].first_seq <= ckpt_seq + 1
    ):
        start += 1
    expected = ckpt_seq + 1
    last_seq = ckpt_seq
    stop = False
    # What a power loss may leave in each mode: fsync=never syncs no log file, so any page
    # of any of them may be missing; fsync=interval syncs a file when it rolls, so only the
    # newest may have holes; fsync=always acknowledges nothing before it is on disk.
    tolerate_all = fsync == "never"
    tolerate_newest = fsync != "always"
    seen = LogDamage(container_dir, label, fsync, dry_run, rec.problems)
    newest_i = len(infos) - 1
    for i in range(start, len(infos)):
        info = infos[i]
        if stop:
            seen.set_aside_file(info)
            continue
        rec.next_log_index = info.index + 1
        if not info.header_ok:
            # Nothing goes into a log file before its header is durable, so a newest file
            # whose header is bad and that holds none of the next records was being created
            # (or recycled) when the server stopped.
            holds = file_holds_records(info.path, expected)
            if i == newest_i and holds is None:
                log.warning(
                    "recovery %s: removed newest log file %s: its header is not valid and "
                    "it holds no records (it was being created or recycled at the stop)",
                    label,
                    info.path,
                )
                if not dry_run:
                    info.path.unlink()
                continue
            problem = "bad header"
            if holds is not None:
                problem += f" and holds record {expected} or later at byte {holds}"
            seen.damage(info, 0, problem, tolerate_all or (i == newest_i and tolerate_newest))
            stop = True
            continue
        # The first file may start before the checkpoint; each later one must continue
        # exactly where its predecessor's good records ended.
        if info.first_seq > expected or (i > start and info.first_seq != expected):
            problem = (
                f"starts at record {info.first_seq}, expected {expected} (records are missing)"
            )
            seen.damage(info, 0, problem, tolerate_all)
            stop = True
            continue
        # A later file's header says where this one's records end (bytes after that are a
        # failed write, or the zeros / old records of a preallocated or recycled file).
        nxt = infos[i + 1] if i + 1 < len(infos) else None
        claimed = nxt.prev_valid_len if nxt is not None and nxt.header_ok else -1
        end = min(claimed, info.size) if claimed >= 0 else info.size
        mtime_ms = int(os.stat(info.path).st_mtime * 1000)
        follows: int | None = None
        with open(info.path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if info.size else b""
            try:
                result = _replay_file(mm, end, info.first_seq, ckpt_seq, by_id, buf, rec, mtime_ms)
                if result.problem:
                    follows = later_record(mm, result.good_end, end, result.next_seq)
            finally:
                if isinstance(mm, mmap.mmap):
                    mm.close()
        last_seq = max(last_seq, result.next_seq - 1)
        rec.log_bytes += result.good_end
        expected = result.next_seq
        if not result.problem and claimed >= 0 and result.good_end < claimed:
            result.problem = f"records end at {result.good_end}, the next file says {claimed}"
        if result.problem:
            # The last file with records: the newest, or the one before a header-less newest
            # file that holds none of the next records.
            last = i == newest_i or (
                i == newest_i - 1
                and not infos[newest_i].header_ok
                and file_holds_records(infos[newest_i].path, expected) is None
            )
            if last and follows is None:
                cut = info.size - result.good_end
                msg = (
                    f"torn tail in {info.path.name}: {result.problem}; cut {cut} bytes "
                    f"after the last good record (seq {result.next_seq - 1}), no intact "
                    f"record follows"
                )
                log.warning("recovery %s: %s", label, msg)
                rec.problems.append(msg)
                if not dry_run:
                    os.truncate(info.path, result.good_end)
            else:
                where = (
                    f"intact record(s) follow at byte {follows}"
                    if follows is not None
                    else "later log files follow"
                )
                problem = f"damaged record: {result.problem}; {where}"
                seen.damage(
                    info, result.good_end, problem, tolerate_all or (last and tolerate_newest)
                )
                stop = True
        rec.prev_valid_len = result.good_end
    buf.flush()
    rec.next_seq = max(expected, last_seq + 1)
    for seg in by_id.values():
        if seg.deleted:
            continue
        seg.flushed = seg.length
        seg.reset_pending()
        rec.segments[seg.name] = seg
    rec.next_segment_id = max([rec.next_segment_id, *(seg_id + 1 for seg_id in by_id)])
    return rec


class _Scan:
    """Where the replay of one file stopped: ``good_end`` and, if it hit bad data, ``problem``.

    Ending at zeros (a preallocated file) or at an intact record with an older sequence
    number (a recycled file's previous life) is a clean end: ``problem`` stays empty.
    """

    __slots__ = ("good_end", "next_seq", "problem")

    def __init__(self, good_end: int, next_seq: int) -> None:
        self.good_end = good_end
        self.next_seq = next_seq
        self.problem = ""


# An appended-to segment while appends follow each other: the segment, its pending buffer and
# the writer ids (raw 16 bytes) with their newest event numbers, not yet in ``seg.attrs``.
_Slot = tuple[SegmentMeta, bytearray, dict[bytes, int]]


def _open_slot(
    slots: dict[int, _Slot],
    by_id: dict[int, SegmentMeta],
    pending: dict[int, tuple[int, bytearray]],
    seg_id: int,
    offset: int,
    mtime_ms: int,
) -> _Slot | None:
    """The slot for an append to ``seg_id`` at ``offset``; None if it does not fit."""
    seg = by_id.get(seg_id)
    if seg is None or seg.deleted or offset != seg.length:
        return None
    entry = pending.get(seg_id)
    if entry is None:
        entry = pending[seg_id] = (offset, bytearray())
    # Every record of a file gets the file's mtime: set once, at the first append.
    seg.last_modified_ms = mtime_ms
    slot = slots[seg_id] = (seg, entry[1], {})
    return slot


def _close_slots(slots: dict[int, _Slot]) -> None:
    """Commit the writers' event numbers of the open slots and forget them.

    Called before anything else touches segments or pending buffers (other records, a
    flush) and at the end of a file (whose mtime the slots assume).
    """
    from_bytes = int.from_bytes
    for seg, _, writers in slots.values():
        if writers:
            attrs = seg.attrs
            if attrs is None:
                attrs = seg.attrs = {}
            for wbytes, event_number in writers.items():
                attrs[from_bytes(wbytes, "big")] = event_number
    slots.clear()


def _replay_file(
    mm: mmap.mmap | bytes,
    end: int,
    first_seq: int,
    ckpt_seq: int,
    by_id: dict[int, SegmentMeta],
    buf: _ChunkBuffer,
    rec: Recovered,
    mtime_ms: int,
) -> _Scan:
    """Check and apply the records of one log file in ``mm[HEADER_SIZE:end]``.

    Plain appends are decoded inline (they are nearly all of a log and this loop is what
    recovery time is made of); everything else goes through ``_apply``. Per record the loop
    makes one struct call (it reads an APPEND_W head, the common record, in one go: for
    other types the body fields are garbage and unused), one mmap slice for the CRC and one
    for the data, which goes straight into the segment's pending buffer.
    """
    unpack_head = _APPEND_W_HEAD.unpack_from
    unpack_prefix = R.PREFIX.unpack_from
    unpack_a = R.APPEND_BODY.unpack_from
    pending = buf.pending
    crc32c_ = crc32c
    record_types = R.RECORD_TYPES
    head_size = _APPEND_W_HEAD.size
    prefix_size = R.PREFIX_SIZE
    data_w = head_size  # data of an APPEND_W starts right after its head
    append_body_size = R.APPEND_BODY.size
    data_a = prefix_size + append_body_size
    min_size = R.SEQ_TYPE_SIZE
    t_append_w = R.APPEND_W
    t_append = R.APPEND
    # Up to here the whole fixed head of an APPEND_W fits before ``end``; past it only the
    # prefix is read (an intact APPEND_W cannot start there: it would not fit either).
    last_head = end - head_size
    pos = HEADER_SIZE
    expected = first_seq
    # Data added per record is never more than the record's log bytes, so the pending
    # buffer can only reach _FLUSH_AT once ``pos`` passes ``check_at``; its real size is
    # counted there (not per record).
    check_at = pos + _FLUSH_AT - buf.size
    seg_id = offset = count = event_number = 0
    wbytes = b""
    slots: dict[int, _Slot] = {}
    scan = _Scan(pos, expected)
    while pos < end:
        if pos <= last_head:
            crc, size, seq, rtype, seg_id, offset, count, wbytes, event_number = unpack_head(
                mm, pos
            )
        else:
            if end - pos < prefix_size:
                scan.problem = f"truncated record header at {pos} ({end - pos} bytes left)"
                break
            crc, size, seq, rtype = unpack_prefix(mm, pos)
        if crc == 0 and size == 0:
            break  # zero-filled remainder of a preallocated file
        rec_end = pos + 8 + size
        if size < min_size or rec_end > end:
            scan.problem = f"bad record length {size} at {pos} (file ends at {end})"
            break
        if crc32c_(mm[pos + 4 : rec_end]) != crc:
            scan.problem = f"CRC mismatch in record at {pos} (length {size})"
            break
        if rtype != t_append_w and rtype not in record_types:
            scan.problem = f"unknown record type {rtype} at {pos}"
            break
        if seq != expected:
            if seq > expected:
                scan.problem = f"sequence gap at {pos}: expected {expected}, found {seq}"
            break  # an older intact record: a recycled file's previous life
        expected = seq + 1
        start = at = pos
        pos = rec_end
        if seq <= ckpt_seq:
            continue
        if rtype == t_append_w:
            at += data_w
        elif rtype == t_append:
            at += data_a
            if at <= rec_end:
                seg_id, offset, count = unpack_a(mm, at - append_body_size)
        if rtype <= t_append_w and at <= rec_end:
            slot = slots.get(seg_id)
            if slot is None:
                slot = _open_slot(slots, by_id, pending, seg_id, offset, mtime_ms)
                if slot is None:
                    _inconsistent(rec, seq, f"append to segment {seg_id} at {offset}")
                    continue
            seg, data, writers = slot
            if offset != seg.length:
                _inconsistent(rec, seq, f"append to segment {seg_id} at {offset}")
                continue
            data += mm[at:rec_end]
            seg.length = offset + rec_end - at
            if rtype == t_append_w:
                writers[wbytes] = event_number
            if count:
                seg.ec = (seg.ec or 0) + count
        else:
            # Not an append (or one too short for its body, on which _apply raises as the
            # unpacking of a short record always did).
            _close_slots(slots)
            _apply(rec, by_id, buf, seq, rtype, mm[start + 4 : rec_end], mtime_ms)
        if pos >= check_at:
            _close_slots(slots)
            buf.size = _pending_size(pending)
            if buf.size >= _FLUSH_AT:
                buf.flush()
            check_at = pos + _FLUSH_AT - buf.size
    _close_slots(slots)
    scan.good_end = pos  # only ever advanced past records that checked out
    scan.next_seq = expected
    buf.size = _pending_size(pending)
    # Every record from the first one after the checkpoint on was applied (or reported).
    rec.records += max(0, expected - max(first_seq, ckpt_seq + 1))
    return scan


class _ReplayEffects:
    """``operations.Effects`` for recovery: data goes to the chunk buffer."""

    __slots__ = ("buf", "chunk_bytes", "rec")

    def __init__(self, rec: Recovered, buf: _ChunkBuffer) -> None:
        self.rec = rec
        self.buf = buf
        self.chunk_bytes = buf.chunks.chunk_bytes

    def on_data(self, seg: SegmentMeta, offset: int, data: bytes | memoryview) -> None:
        self.buf.add(seg.id, offset, memoryview(data))

    def on_garbage(self, seq: int, seg_id: int, first_chunk: int, last_chunk: int) -> None:
        self.rec.pending_deletes.append((seq, seg_id, first_chunk, last_chunk))

    def on_truncated(self, seg: SegmentMeta, offset: int) -> None:
        pass

    def on_deleted(self, seg: SegmentMeta) -> None:
        self.buf.drop(seg.id)

    def on_woken(self, seg: SegmentMeta, everyone: bool) -> None:
        pass


def _apply(
    rec: Recovered,
    by_id: dict[int, SegmentMeta],
    buf: _ChunkBuffer,
    seq: int,
    rtype: int,
    record: bytes,
    mtime_ms: int,
) -> None:
    """Replay one record through the rules the live engine applied (operations.py)."""
    fx = _ReplayEffects(rec, buf)
    body = 4 + R.SEQ_TYPE_SIZE  # size field + seq + type precede the body in ``record``
    if rtype == R.APPEND or rtype == R.APPEND_W:
        writer = None
        event_number = 0
        if rtype == R.APPEND:
            seg_id, offset, count = R.APPEND_BODY.unpack_from(record, body)
            data_at = body + R.APPEND_BODY.size
        else:
            seg_id, offset, count, wbytes, event_number = R.APPEND_W_BODY.unpack_from(record, body)
            data_at = body + R.APPEND_W_BODY.size
            writer = int.from_bytes(wbytes, "big")
        seg = by_id.get(seg_id)
        if seg is None or seg.deleted or offset != seg.length:
            _inconsistent(rec, seq, f"append to segment {seg_id} at {offset}")
            return
        data = memoryview(record)[data_at:]
        apply_append(seg, offset, data, writer, event_number, count, mtime_ms, fx)
        return
    op = decode_operation(seq, rtype, record, by_id, mtime_ms)
    if isinstance(op, str):
        _inconsistent(rec, seq, op)
        return
    op.apply(mtime_ms, fx)


def _inconsistent(rec: Recovered, seq: int, what: str) -> None:
    # The live engine validates before logging, so this means a bug, not a torn write:
    # say so loudly, skip the record, keep the rest of the state.
    msg = f"record {seq}: {what} does not fit the replayed state; skipped"
    rec.problems.append(msg)
    log.error("recovery: %s", msg)
