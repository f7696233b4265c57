"""Event boundaries without reading events: hop from record header to record header.

Splitting one large segment into several Spark partitions needs offsets that are event
boundaries, and the only way to find them is to walk the 8-byte record headers from a
known boundary (the segment's start). This module does that with small raw reads (one
``ReadSegment`` of a few KiB per hop, whole runs of small events per read), on a private
blocking connection built from the SDK's public sans-IO codec
(:mod:`segmentstore_client.protocol`). The walk is bounded by a request budget; past it,
the rest of the segment stays one range.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
from typing import Final

from ..connection import Endpoint
from ..errors import ConnectFailed, ConnectionLost, CorruptData, error_from_reply
from ..protocol import (
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    FrameDecoder,
    Hello,
    ReadSegment,
    Reply,
    SegmentRead,
    encode,
)

HOP_READ_BYTES: Final = 8 * 1024
"""Bytes asked for per hop: covers one header, or many headers of small events."""
DEFAULT_MAX_REQUESTS: Final = 4096
"""Hop reads one planning walk may issue (about a second on a LAN at worst)."""
_HEADER: Final = struct.Struct(">ii")


class RawSegmentReader:
    """A blocking connection that reads raw segment bytes (no event parsing).

    Example::

        with RawSegmentReader("tcp://127.0.0.1:12345") as raw:
            header = raw.read("orders/0", 0, 8)
    """

    def __init__(self, endpoint: str, timeout: float = 30.0, delegation_token: str = "") -> None:
        ep = Endpoint.parse(endpoint)
        try:
            self._sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
        except OSError as e:
            raise ConnectFailed(f"cannot connect to {ep}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder()
        self._token = delegation_token
        self._rid = 0
        self._pending: list[object] = []
        self._sock.sendall(encode(Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION)))
        reply = self._next()
        if not isinstance(reply, Hello):
            self.close()
            raise ConnectionLost(f"expected Hello from {ep}, got {type(reply).__name__}")

    def _next(self) -> object:
        # Bounded by the socket timeout: each recv either returns bytes, or raises.
        while not self._pending:
            try:
                data = self._sock.recv(1 << 20)
            except OSError as e:
                raise ConnectionLost(f"raw read connection failed: {e}") from e
            if not data:
                raise ConnectionLost("the server closed the raw read connection")
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    def read(self, segment: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of ``segment`` at ``offset`` (fewer at the end, or where
        the server cuts a read short; empty at the tail)."""
        self._rid += 1
        rid = self._rid
        self._sock.sendall(encode(ReadSegment(segment, offset, length, self._token, rid)))
        for _ in range(1000):  # skip stray replies (e.g. KeepAlive) to other requests
            reply = self._next()
            if isinstance(reply, SegmentRead) and reply.request_id == rid:
                return bytes(reply.data)
            if isinstance(reply, Reply) and getattr(reply, "request_id", None) == rid:
                raise error_from_reply(reply)
        raise ConnectionLost("no reply to a raw read")

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> RawSegmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plan_ranges(
    raw: RawSegmentReader,
    segment: str,
    start: int,
    end: int,
    target_bytes: int,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` (both event boundaries) into ranges of about
    ``target_bytes`` whose ends are event boundaries.

    Example::

        plan_ranges(raw, "orders/0", 0, 100 << 20, 16 << 20)   # ~7 ranges
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
            buf = raw.read(segment, pos, HOP_READ_BYTES)
            buf_at = pos
            requests += 1
            if len(buf) < 8:
                if requests >= max_requests:
                    break
                buf += raw.read(segment, pos + len(buf), HOP_READ_BYTES)
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
    raw: RawSegmentReader,
    segment: str,
    start: int,
    end: int,
    max_bytes: int,
    max_requests: int = DEFAULT_MAX_REQUESTS,
) -> int:
    """The last event boundary in ``(start, min(end, start + max_bytes)]``, or the end of
    the first event when that one alone is larger (so a read always makes progress).

    Example::

        next_boundary(raw, "orders/0", 0, 100 << 20, 8 << 20)   # <= 8 MiB of events
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
            buf = raw.read(segment, pos, HOP_READ_BYTES)
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
