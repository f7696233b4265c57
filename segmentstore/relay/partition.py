"""One physical partition (a segment) as the relay sees it: windows, SCNs, and serving them.

Contract. The segment holds event records (8-byte header, type 0 + length, then the
payload; what the SDK's writer appends). The relay indexes them once, incrementally, in
memory: for every closed window its SCN and start offset (16 bytes a window).

* A payload that is a Databus event (v1 or v2, header CRC checked) keeps its own sequence
  as its SCN. Consecutive Databus events with one sequence form a window, closed by an
  end-of-period marker (source id -2) or by the next event with another sequence (or a
  non-Databus event). A window whose sequence is not above the previous window's SCN is
  indexed as previous + 1 (SCNs of a partition only grow; its events keep their bytes).
* Any other payload is a window of its own, with the derived SCN ``max(end, previous +
  1)`` where ``end`` is the segment offset just past its record: monotonic, and stable
  across restarts (it is computed from the bytes) as long as the segment is not a mix of
  both kinds that was truncated. It is served as a Databus v2 UPSERT event with key and
  sequence = that SCN, the catalogue's source id, partition id = the segment's number
  within its stream (0 for a segment source; modulo 32768, the field has 2 bytes),
  timestamp 0 (the store keeps no time per event) and the payload as the value.
* A sealed segment read to its end is ``complete``: a Databus window still open there is
  closed by the end of the segment (no event can follow it).
* Served windows are whole (plus the spec's mid-window checkpoints when one window alone
  is larger than ``size``: at least one event always goes out, so a consumer never
  stalls), each followed by an end-of-period marker (the one stored, or a made one).
* Truncation: windows below the segment's start offset are dropped; ``prev_scn`` is the
  SCN of the last dropped window; after a restart of a truncated segment it is the start
  offset when the first window kept is a derived one (the window before ended there), else
  min SCN - 1 (no integer SCN lies between). A checkpoint below it is too old.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import struct
import time
from array import array
from dataclasses import dataclass, field
from typing import Final

from segmentstore_client.formats import databus

from ..storage import SegmentStore, StorageError
from .filters import KeyTest

log = logging.getLogger("segmentstore.relay")

_HEADER: Final = struct.Struct(">ii")
INDEX_CHUNK: Final = 256 * 1024
MAX_RECORD: Final = 64 * 1024 * 1024
EOP = databus.EOP_SOURCE_ID


class TooOld(Exception):
    """The checkpoint points at data the store no longer has (retention truncated it)."""


@dataclass(slots=True)
class Served:
    """What one partition contributed to an answer."""

    chunks: list[bytes | memoryview] = field(default_factory=list)
    nbytes: int = 0
    events: int = 0  # data events sent
    filtered: int = 0  # data events the filter dropped
    windows: int = 0
    position: tuple[int, int] | None = None  # new (windowScn, windowOffset); None = no move


class Partition:
    def __init__(self, store: SegmentStore, segment: str, src_id: int, number: int = 0) -> None:
        self.store = store
        self.segment = segment
        self.src_id = src_id
        self.partition_id = number % 32768
        self.complete = False  # sealed, and everything in it indexed
        self.scns = array("q")
        self.starts = array("q")
        # 0: a derived window; 1: Databus events (checked when indexed); 2: the same, and
        # its last event is a stored end-of-period marker
        self.kinds = array("b")
        self.closed_end = 0
        self.base = -1  # offset the index starts at; -1 until the first catch-up
        self.scan_offset = 0
        self.last_scn = -1
        self.prev_scn: int | None = None  # None: nothing was ever lost
        self.broken: str | None = None
        self.first_ts_ms = 0
        self.latest_ts_ms = 0
        self.events = 0
        self._first_raw = False  # the first window indexed is a non-Databus event
        self._open_seq: int | None = None
        self._open_scn = 0
        self._open_start = 0
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ the index

    @property
    def min_scn(self) -> int:
        return self.scns[0] if self.scns else -1

    @property
    def max_scn(self) -> int:
        return self.scns[-1] if self.scns else -1

    def window_end(self, i: int) -> int:
        return self.starts[i + 1] if i + 1 < len(self.starts) else self.closed_end

    async def catch_up(self) -> None:
        """Index everything committed since the last call."""
        if self.broken:
            return
        async with self._lock:
            info = self.store.info(self.segment)
            if self.base < 0:
                self.base = self.scan_offset = self.closed_end = info.start_offset
            elif info.start_offset > self.base:
                self._drop_below(info.start_offset)
            while self.scan_offset < info.length and not self.broken:
                # small steps, yielding between them: indexing never holds the loop long
                await asyncio.sleep(0)
                want = min(info.length - self.scan_offset, INDEX_CHUNK)
                data = await self._read(self.scan_offset, want)
                used = self._index(data, self.scan_offset)
                if used == 0 and not self.broken:  # one record larger than a read
                    _t, length = _HEADER.unpack_from(data, 0)
                    data = await self._read_exact(self.scan_offset, 8 + length)
                    used = self._index(data, self.scan_offset)
                self.scan_offset += used
            if info.sealed and self.scan_offset >= info.length and not self.broken:
                if self._open_seq is not None:
                    self._close_open(self.scan_offset)
                self.complete = True
            if self.base > 0 and self.prev_scn is None and self.scns:
                # a derived SCN is an end offset: the lost window before ends at the base
                self.prev_scn = self.base if self._first_raw else self.scns[0] - 1

    def _drop_below(self, offset: int) -> None:
        cut = bisect.bisect_left(self.starts, offset)
        if cut < len(self.starts) and self.starts[cut] < offset:
            cut += 1
        if cut:
            self.prev_scn = self.scns[cut - 1]
            del self.scns[:cut]
            del self.starts[:cut]
            del self.kinds[:cut]
        self.base = offset
        if self.scan_offset < offset:  # everything indexed was truncated
            self.scan_offset = self.closed_end = offset
            self._open_seq = None

    async def _read(self, offset: int, length: int) -> bytes | memoryview:
        result = self.store.try_read(self.segment, offset, length)
        if result is None:
            result = await self.store.read(self.segment, offset, length)
        return result.data

    async def _read_exact(self, offset: int, length: int) -> bytes:
        parts: list[bytes] = []
        have = 0
        while have < length:
            data = await self._read(offset + have, length - have)
            if not data:
                break
            parts.append(bytes(data))
            have += len(data)
        return b"".join(parts)

    def _close_open(self, end: int, by_marker: bool = False) -> None:
        self.scns.append(self._open_scn)
        self.starts.append(self._open_start)
        self.kinds.append(2 if by_marker else 1)
        self.last_scn = self._open_scn
        self.closed_end = end
        self._open_seq = None

    def _index(self, data: bytes | memoryview, base: int) -> int:
        view = memoryview(data)
        n = len(view)
        pos = 0
        now_ms = int(time.time() * 1000)
        is_db, peek = databus.is_databus, databus.peek
        while n - pos >= 8:
            t, length = _HEADER.unpack_from(view, pos)
            if t != 0 or length < 0 or length > MAX_RECORD:
                self.broken = f"no event record at offset {base + pos} (type {t}, length {length})"
                log.warning("relay: segment %r is not served: %s", self.segment, self.broken)
                return pos
            end = pos + 8 + length
            if end > n:
                break
            payload = view[pos + 8 : end]
            if length >= 45 and payload[0] in (0, 2) and is_db(payload):
                seq, src, _key, ts = peek(payload)
                if self._open_seq is not None and seq != self._open_seq:
                    self._close_open(base + pos)
                if self._open_seq is None:
                    self._open_seq = seq
                    self._open_scn = seq if seq > self.last_scn else self.last_scn + 1
                    self._open_start = base + pos
                ts_ms = ts // 1_000_000
                if src == EOP:
                    self._close_open(base + end, by_marker=True)
                else:
                    self.events += 1
            else:
                if self._open_seq is not None:
                    self._close_open(base + pos)
                scn = max(base + end, self.last_scn + 1)
                if not self.scns and base + pos == self.base:
                    self._first_raw = True
                self.scns.append(scn)
                self.starts.append(base + pos)
                self.kinds.append(0)
                self.last_scn = scn
                self.closed_end = base + end
                self.events += 1
                ts_ms = now_ms
            if not self.first_ts_ms:
                self.first_ts_ms = ts_ms
            self.latest_ts_ms = ts_ms
            pos = end
        return pos

    # ------------------------------------------------------------------ serving

    def start_of(self, since_scn: int, window_offset: int) -> tuple[int, int]:
        """(index of the first window to serve, events of it already consumed), following
        the spec's table; raises :class:`TooOld`."""
        scns = self.scns
        if since_scn < 0:
            return 0, 0  # flexible: from the oldest window kept
        if window_offset < 0:
            if self.prev_scn is not None and since_scn < self.prev_scn:
                raise TooOld(f"windowScn {since_scn} is below {self.prev_scn}")
            return bisect.bisect_right(scns, since_scn), 0
        if self.prev_scn is not None and since_scn < self.min_scn:
            raise TooOld(f"windowScn {since_scn} is below min SCN {self.min_scn}")
        i = bisect.bisect_left(scns, since_scn)
        if i < len(scns) and scns[i] == since_scn:
            return i, window_offset
        return i, 0

    async def serve(
        self,
        start: tuple[int, int],
        budget: int,
        upper_scn: int,
        test: KeyTest | None,
        as_json: bool,
        must_send: bool,
    ) -> Served:
        """Windows from ``start`` while they fit in ``budget`` output bytes and their SCN
        is <= ``upper_scn``; ``must_send``: send at least one event even if too large."""
        out = Served()
        i, skip = start
        scns = self.scns
        last = len(scns)
        while i < last and scns[i] <= upper_scn:
            # read a run of whole windows (at least one) of about the budget's size
            limit = self.starts[i] + max(budget - out.nbytes, 1)
            c = bisect.bisect_right(self.starts, limit)
            fit = last if c == last and self.closed_end <= limit else c - 1
            j = max(i + 1, min(fit, bisect.bisect_right(scns, upper_scn)))
            lo, hi = self.starts[i], self.window_end(j - 1)
            try:
                data = await self._read_exact(lo, hi - lo)
            except StorageError as e:  # truncated or deleted under us
                log.info("relay: read of %r at %d failed: %s", self.segment, lo, e)
                break
            view = memoryview(data)
            kinds = self.kinds[i:j]
            if test is None and not as_json and not skip and 0 not in kinds:
                run = _marked_run(view, j - i) if 1 not in kinds else None
                if run is None:
                    run = _databus_run(view, self.starts, scns, i, j, lo)
                if out.nbytes + run[1] <= budget:  # the common case: all of it at once
                    out.chunks.extend(run[0])
                    out.nbytes += run[1]
                    out.events += run[2]
                    out.windows += j - i
                    out.position = (scns[j - 1], -1)
                    i = j
                    continue
            for k in range(i, j):
                ws, we = self.starts[k] - lo, self.window_end(k) - lo
                chunks, nbytes, sent, dropped = self._window(
                    view[ws:we], scns[k], skip, test, as_json, self.kinds[k]
                )
                if out.nbytes + nbytes > budget:
                    if out.windows or out.position is not None or not (must_send and sent):
                        return out
                    return self._partial(
                        out, view[ws:we], scns[k], skip, budget, test, as_json, self.kinds[k]
                    )
                out.chunks.extend(chunks)
                out.nbytes += nbytes
                out.events += sent
                out.filtered += dropped
                out.windows += 1
                out.position = (scns[k], -1)
                skip = 0
            i = j
        return out

    def _partial(
        self,
        out: Served,
        window: memoryview,
        scn: int,
        skip: int,
        budget: int,
        test: KeyTest | None,
        as_json: bool,
        kind: int,
    ) -> Served:
        """Part of a window larger than the budget: whole events, at least one. A window
        whose every event went out after all is a whole one (``windowOffset`` -1, its end
        marker sent): a checkpoint inside a window would look older than it is."""
        consumed = skip
        records = _records(window, skip)
        for record, payload in records:
            chunk, sent, dropped = self._event(payload, scn, test, as_json, kind)
            if out.events and out.nbytes + len(chunk) > budget:
                break
            if chunk:
                out.chunks.append(chunk)
                out.nbytes += len(chunk)
            out.events += sent
            out.filtered += dropped
            consumed = record + 1
        if records and consumed == records[-1][0] + 1:
            if kind != 2:  # no stored end-of-period marker: make one
                marker = (
                    _json_line(databus.end_of_period(scn))
                    if as_json
                    else databus.encode_end_of_period(scn)
                )
                out.chunks.append(marker)
                out.nbytes += len(marker)
            out.windows += 1
            out.position = (scn, -1)
            return out
        out.position = (scn, consumed)
        return out

    def _window(
        self,
        window: memoryview,
        scn: int,
        skip: int,
        test: KeyTest | None,
        as_json: bool,
        kind: int,
    ) -> tuple[list[bytes | memoryview], int, int, int]:
        """(chunks, bytes, events sent, events filtered out) for one window."""
        if kind and not as_json:
            return _databus_window(window, scn, skip, test)
        chunks: list[bytes | memoryview] = []
        nbytes = sent = dropped = 0
        eop_seen = False
        for _k, payload in _records(window, skip):
            chunk, s, d = self._event(payload, scn, test, as_json, kind)
            if s == 0 and d == 0 and chunk:
                eop_seen = True
            if chunk:
                chunks.append(chunk)
                nbytes += len(chunk)
            sent += s
            dropped += d
        if not eop_seen:
            if as_json:
                chunk = _json_line(databus.end_of_period(scn))
            else:
                chunk = databus.encode_end_of_period(scn)
            chunks.append(chunk)
            nbytes += len(chunk)
        return chunks, nbytes, sent, dropped

    def _event(
        self, payload: memoryview, scn: int, test: KeyTest | None, as_json: bool, kind: int
    ) -> tuple[bytes, int, int]:
        """(output bytes, 1 if a data event was sent, 1 if one was filtered out); ``kind``
        is the window's (non-zero: its events are Databus events, checked when indexed)."""
        if kind:
            event = databus.decode(payload)
            if event.src_id < 0:  # window marker or other control event: always passes
                return (_json_line(event) if as_json else _v2(payload, event)), 0, 0
            if test is not None and not test(event.key):
                return b"", 0, 1
            return (_json_line(event) if as_json else _v2(payload, event)), 1, 0
        if test is not None and not test(scn):
            return b"", 0, 1
        pid = self.partition_id
        if as_json:
            event = databus.DatabusEvent(
                scn, scn, bytes(payload), self.src_id, physical_partition_id=pid,
                logical_partition_id=pid,
            )  # fmt: skip
            return _json_line(event), 1, 0
        return databus.encode_upsert(scn, scn, payload, self.src_id, partition=pid), 1, 0


_LEN: Final = struct.Struct(">i")
_SRC_V2: Final = struct.Struct(">i")
_SRC_V1: Final = struct.Struct(">h")


def _databus_window(
    window: memoryview, scn: int, skip: int, test: KeyTest | None
) -> tuple[list[bytes | memoryview], int, int, int]:
    """The binary fast path for a window of Databus events (all checked when indexed): v2
    payloads go out as slices of the read buffer, nothing is re-encoded."""
    chunks: list[bytes | memoryview] = []
    nbytes = sent = dropped = 0
    pos, n, k = 0, len(window), 0
    src = 0
    len_at, v2_src, v1_src = _LEN.unpack_from, _SRC_V2.unpack_from, _SRC_V1.unpack_from
    while pos + 8 <= n:
        (length,) = len_at(window, pos + 4)
        p, end = pos + 8, pos + 8 + length
        pos = end
        k += 1
        if k <= skip:
            continue
        v2 = window[p] == databus.V2
        (src,) = v2_src(window, p + 31) if v2 else v1_src(window, p + 31)
        if src >= 0:
            if test is not None and not test(databus.peek(window[p:end])[2]):
                dropped += 1
                continue
            sent += 1
        chunk = window[p:end] if v2 else databus.encode(databus.decode(window[p:end]))
        chunks.append(chunk)
        nbytes += len(chunk)
    if src != EOP:
        marker = databus.encode_end_of_period(scn)
        chunks.append(marker)
        nbytes += len(marker)
    return chunks, nbytes, sent, dropped


def _marked_run(view: memoryview, windows: int) -> tuple[list[bytes | memoryview], int, int] | None:
    """Windows that all end with their stored marker, unfiltered, binary: the payloads as
    they are, (chunks, bytes, data events); None if a v1 event needs converting."""
    chunks: list[bytes | memoryview] = []
    append = chunks.append
    len_at = _LEN.unpack_from
    pos, n, records = 0, len(view), 0
    while pos < n:
        (length,) = len_at(view, pos + 4)
        p = pos + 8
        pos = p + length
        if view[p] != 2:
            return None
        append(view[p:pos])
        records += 1
    return chunks, n - 8 * records, records - windows


def _databus_run(
    view: memoryview, starts: array[int], scns: array[int], i: int, j: int, lo: int
) -> tuple[list[bytes | memoryview], int, int]:
    """Windows i..j-1 of Databus events, unfiltered, binary: (chunks, bytes, events)."""
    chunks: list[bytes | memoryview] = []
    append = chunks.append
    nbytes = sent = 0
    len_at, v2_src, v1_src = _LEN.unpack_from, _SRC_V2.unpack_from, _SRC_V1.unpack_from
    v2_byte, eop = databus.V2, EOP
    pos, n = 0, len(view)
    k = i
    boundary = starts[k + 1] - lo if k + 1 < j else n
    src = 0
    while pos < n:
        (length,) = len_at(view, pos + 4)
        p = pos + 8
        pos = p + length
        if view[p] == v2_byte:
            (src,) = v2_src(view, p + 31)
            chunk: bytes | memoryview = view[p:pos]
        else:
            (src,) = v1_src(view, p + 31)
            chunk = databus.encode(databus.decode(view[p:pos]))
        append(chunk)
        nbytes += len(chunk)
        sent += src >= 0
        if pos >= boundary:  # the end of window k
            if src != eop:
                marker = databus.encode_end_of_period(scns[k])
                append(marker)
                nbytes += len(marker)
            k += 1
            boundary = starts[k + 1] - lo if k + 1 < j else n
    return chunks, nbytes, sent


def _records(window: memoryview, skip: int) -> list[tuple[int, memoryview]]:
    """(record number, payload) of a window's records, the first ``skip`` left out."""
    out = []
    pos, n, k = 0, len(window), 0
    while pos + 8 <= n:
        _t, length = _HEADER.unpack_from(window, pos)
        if k >= skip:
            out.append((k, window[pos + 8 : pos + 8 + length]))
        pos += 8 + length
        k += 1
    return out


def _v2(payload: memoryview, event: databus.DatabusEvent) -> bytes:
    return bytes(payload) if payload[0] == databus.V2 else databus.encode(event)


_json_line = databus.json_line
