"""Event boundaries without reading events: hop from record header to record header.

Splitting one large segment into several Spark partitions needs offsets that are event
boundaries, and the only way to find them is to walk the 8-byte record headers from a
known boundary (the segment's start). This module does that with small raw reads
(:meth:`SyncClient.read_bytes <segmentstore_client.sync.SyncClient.read_bytes>`, one
``ReadSegment`` of a few KiB per hop, whole runs of small events per read) over the SDK's
pooled connections, which retry lost connections like every other read. The walk is
bounded by a request budget; past it, the rest of the segment stays one range.
"""

from __future__ import annotations

import itertools
import struct
from typing import Final

from ..errors import CorruptData
from ..sync import SyncClient

HOP_READ_BYTES: Final = 8 * 1024
"""Bytes asked for per hop: covers one header, or many headers of small events."""
DEFAULT_MAX_REQUESTS: Final = 4096
"""Hop reads one planning walk may issue (about a second on a LAN at worst)."""
_HEADER: Final = struct.Struct(">ii")


def _hop(client: SyncClient, segment: str, offset: int) -> bytes:
    """The raw bytes of one hop read at ``offset`` (fewer where the server cuts it)."""
    return client.read_bytes(segment, offset, HOP_READ_BYTES).data


def plan_ranges(
    client: SyncClient,
    segment: str,
    start: int,
    end: int,
    target_bytes: int,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` (both event boundaries) into ranges of about
    ``target_bytes`` whose ends are event boundaries.

    Example::

        plan_ranges(client, "orders/0", 0, 100 << 20, 16 << 20)   # ~7 ranges
    """
    if end - start <= target_bytes + target_bytes // 2:
        return [(start, end)] if end > start else []
    cuts = [start]
    next_cut = start + target_bytes
    pos = start
    buf = b""
    buf_at = start
    requests = 0
    # Each pass moves pos forward by at least one 8-byte header, so the walk is bounded by
    # (end - start) / 8 passes, and by max_requests reads.
    while pos < end and next_cut < end - target_bytes // 2:
        if pos + 8 > buf_at + len(buf):
            if requests >= max_requests:
                break
            buf = _hop(client, segment, pos)
            buf_at = pos
            requests += 1
            if len(buf) < 8:
                if requests >= max_requests:
                    break
                buf += _hop(client, segment, pos + len(buf))
                requests += 1
                if len(buf) < 8:
                    break  # the server has no complete header there: stop splitting
        t, length = _HEADER.unpack_from(buf, pos - buf_at)
        if t != 0 or length < 0:
            raise CorruptData(
                f"segment {segment!r} holds no event record at offset {pos} "
                f"(type {t}, length {length})"
            )
        if pos >= next_cut:
            cuts.append(pos)
            next_cut = pos + target_bytes
        pos += 8 + length
    cuts.append(end)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def next_boundary(
    client: SyncClient,
    segment: str,
    start: int,
    end: int,
    max_bytes: int,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> int:
    """The last event boundary in ``(start, min(end, start + max_bytes)]``, or the end of
    the first event when that one alone is larger (so a read always makes progress).

    Example::

        next_boundary(client, "orders/0", 0, 100 << 20, 8 << 20)   # <= 8 MiB of events
    """
    if end - start <= max_bytes:
        return end
    limit = start + max_bytes
    pos = start
    buf = b""
    buf_at = start
    requests = 0
    # Bounded like plan_ranges: pos grows by >= 8 per pass; reads are budgeted.
    while pos < end and requests <= max_requests:
        if pos + 8 > buf_at + len(buf):
            buf = _hop(client, segment, pos)
            buf_at = pos
            requests += 1
            if len(buf) < 8:
                break
        t, length = _HEADER.unpack_from(buf, pos - buf_at)
        if t != 0 or length < 0:
            raise CorruptData(
                f"segment {segment!r} holds no event record at offset {pos} "
                f"(type {t}, length {length})"
            )
        nxt = pos + 8 + length
        if nxt > limit:
            return nxt if pos == start else pos
        pos = nxt
    return pos if pos > start else end
