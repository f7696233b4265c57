"""The ``segmentstore-jvm`` reader against a hostile server and damaged stored data.

A bug in the Java reader runs inside the user's Spark driver or executor, so every number
a peer controls must be checked before it sizes an allocation, bounds a loop or indexes an
array, and every read must have a deadline. Two kinds of attack:

* a hostile server (:class:`Hostile`, asyncio on 127.0.0.1) that answers the Hello
  correctly and serves real rows, then lies in one reply: a frame length of 2 GiB or a
  negative one, an unknown type code, a SegmentRead for another segment, another offset or
  with more data than asked, a segment that shrinks after planning, a reply that stalls or
  trickles, a connection reset mid-frame, an error reply, in planning (the driver) and in a
  task (an executor);
* damaged records stored through the real server: envelope lengths running past the
  event, a truncated zstd frame, a decompression bomb, Arrow IPC streams whose metadata
  lies (message and buffer lengths, row counts, compressed sizes, string offsets).

Every case must fail with one message naming the segment (and the offset where one
applies) within seconds, return no rows, and leave the JVM able to run the next query.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest
from segmentstore_client import records, sync
from segmentstore_client.protocol import codec
from segmentstore_client.protocol.commands import (
    Command,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    Hello,
    NoSuchSegment,
    ReadSegment,
    SegmentAttribute,
    SegmentIsTruncated,
    SegmentRead,
    StreamSegmentInfo,
    WrongHost,
)
from segmentstore_client.spark.jvm import FORMAT

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("jvm_jar")]  # conftest: skip without a JDK

ARROW = b"application/vnd.apache.arrow.stream"
NULL_ATTRIBUTE = -(2**63)
RESET = "reset"
Step = bytes | float | str
Lie = Callable[[Command], Sequence[Step] | None]


# -- building events -----------------------------------------------------------------------


def _ipc(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=opts) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _ids(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _record(value: bytes, codec_name: str = "none") -> bytes:
    return records.encode(value, headers={"content-type": ARROW}, codec=codec_name)


def _event(record: bytes) -> bytes:
    return struct.pack(">ii", 0, len(record)) + record


def _frame(type_code: int, payload: bytes) -> bytes:
    return struct.pack(">ii", type_code, len(payload)) + payload


# -- the hostile server --------------------------------------------------------------------


class Hostile:
    """A segment store on 127.0.0.1 serving ``data`` as the bytes of every segment asked
    for, honestly unless ``lie(request)`` returns steps: bytes are sent, a float sleeps
    that many seconds, RESET aborts the connection with a TCP reset."""

    def __init__(self, data: bytes, lie: Lie) -> None:
        self.data = data
        self.lie = lie
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Hostile:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        with contextlib.suppress(BaseException):
            self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    def honest(self, req: Command) -> bytes:
        if isinstance(req, Hello):
            return codec.encode(Hello(codec.WIRE_VERSION, codec.OLDEST_COMPATIBLE_VERSION))
        if isinstance(req, GetStreamSegmentInfo):
            n = len(self.data)
            reply: Command = StreamSegmentInfo(
                req.request_id, req.segment_name, True, False, False, 0, n, 0
            )
            return codec.encode(reply)
        if isinstance(req, GetSegmentAttribute):
            return codec.encode(SegmentAttribute(req.request_id, NULL_ATTRIBUTE))
        assert isinstance(req, ReadSegment), req
        piece = self.data[req.offset : req.offset + req.suggested_length]
        at_tail = req.offset + len(piece) >= len(self.data)
        read = SegmentRead(req.segment, req.offset, at_tail, False, piece, req.request_id)
        return codec.encode(read)

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            for _ in range(10_000):  # bounded: a read needs a few requests
                head = await r.readexactly(8)
                body = await r.readexactly(struct.unpack(">ii", head)[1])
                req = codec.decode(head + body)
                steps = self.lie(req)
                for step in [self.honest(req)] if steps is None else steps:
                    if isinstance(step, bytes):
                        w.write(step)
                        await w.drain()
                    elif isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        sock = w.get_extra_info("socket")
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        w.transport.abort()
                        return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()


# -- helpers -------------------------------------------------------------------------------

SEG = "hostile/rows/0"
EVENT_1 = _event(_record(_ipc(_ids(0, 100))))
EVENT_2 = _event(_record(_ipc(_ids(100, 100))))
TWO_EVENTS = EVENT_1 + EVENT_2


def _fails(spark: Any, endpoint: str, seg: str, **opts: str) -> str:
    """The message ``segmentstore-jvm`` fails with; checks it took seconds and that the
    JVM still runs a query afterwards."""
    r = spark.read.format(FORMAT).option("endpoint", endpoint).option("segment", seg)
    for k, v in {"timeout": "2", "schema": "id BIGINT", **opts}.items():
        if v:  # "" leaves the option out (e.g. schema: inferred)
            r = r.option(k, v)
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:
        rows = r.load().collect()
        pytest.fail(f"read {len(rows)} rows, expected an error")  # never wrong rows
    took = time.monotonic() - t0
    msg = str(err.value)
    assert took < 15, (took, msg)
    assert spark.range(3).count() == 3  # the JVM is alive
    assert "segmentstore-jvm" in msg and f"segment '{seg}'" in msg, msg
    assert "OutOfMemory" not in msg and "StackOverflow" not in msg, msg
    return msg


@contextlib.contextmanager
def _hostile(data: bytes, lie: Lie) -> Iterator[Hostile]:
    with Hostile(data, lie) as h:
        yield h


def _on(kind: type, steps: Callable[[Any], Sequence[Step]]) -> Lie:
    return lambda req: steps(req) if isinstance(req, kind) else None


def _read_reply(req: ReadSegment, **changes: Any) -> bytes:
    data = TWO_EVENTS[req.offset : req.offset + req.suggested_length]
    honest = SegmentRead(req.segment, req.offset, True, False, data, req.request_id)
    return codec.encode(dataclasses.replace(honest, **changes))


def test_the_hostile_server_serves_real_rows(spark: Any) -> None:
    """The control: answered honestly, the same server's rows read back exactly."""
    with _hostile(TWO_EVENTS, lambda req: None) as h:
        df = spark.read.format(FORMAT).option("endpoint", h.endpoint).option("segment", SEG)
        assert sorted(r.id for r in df.load().collect()) == list(range(200))


# -- lies while planning (the driver) ------------------------------------------------------

INFO = GetStreamSegmentInfo


def _info(req: Any, **changes: Any) -> bytes:
    n = len(TWO_EVENTS)
    honest = StreamSegmentInfo(req.request_id, req.segment_name, True, False, False, 0, n, 0)
    return codec.encode(dataclasses.replace(honest, **changes))


def _trickle(n: int) -> list[Step]:
    """One byte every 0.3 s: each socket read returns in time, the reply never ends."""
    return [s for _ in range(n) for s in (0.3, b"\0")]


PLANNING: dict[str, tuple[Lie, str]] = {
    "frame-2GiB": (_on(INFO, lambda q: [struct.pack(">ii", 12, 0x7FFFFFFF)]), "declaring"),
    "frame-negative": (_on(INFO, lambda q: [struct.pack(">ii", 12, -8)]), "declaring"),
    "unknown-type": (_on(INFO, lambda q: [_frame(999, b"\0" * 16)]), "type 999"),
    "no-such-segment": (
        _on(INFO, lambda q: [codec.encode(NoSuchSegment(q.request_id, q.segment_name))]),
        "does not exist",
    ),
    "wrong-host": (
        _on(INFO, lambda q: [codec.encode(WrongHost(q.request_id, q.segment_name, "x:1"))]),
        "WrongHost",
    ),
    "negative-length": (_on(INFO, lambda q: [_info(q, write_offset=-5)]), "length"),
    "start-past-length": (_on(INFO, lambda q: [_info(q, start_offset=1 << 40)]), "start"),
    "other-segment": (_on(INFO, lambda q: [_info(q, segment_name="other/seg/0")]), "other/seg/0"),
    "other-request-id": (_on(INFO, lambda q: [_info(q, request_id=q.request_id + 7)]), "request"),
    "short-body": (_on(INFO, lambda q: [_frame(12, _info(q)[8:20])]), "malformed"),
    "error-short-body": (_on(INFO, lambda q: [_frame(56, b"\0\0\0")]), "malformed"),
    "stall-mid-frame": (_on(INFO, lambda q: [_info(q)[:20], 30.0]), "no reply"),
    "trickle": (
        _on(INFO, lambda q: [_info(q)[:9], *_trickle(100)]),
        "no reply",
    ),
    "reset-mid-frame": (_on(INFO, lambda q: [_info(q)[:20], 0.05, RESET]), "connection"),
}


@pytest.mark.parametrize("case", sorted(PLANNING))
def test_planning_refuses_a_lying_server(spark: Any, case: str) -> None:
    lie, expect = PLANNING[case]
    with _hostile(TWO_EVENTS, lie) as h:
        msg = _fails(spark, h.endpoint, SEG, timeout="1")
    assert expect in msg, msg


# -- lies in a task (an executor) ----------------------------------------------------------

READ = ReadSegment


def _shrunk(q: Any) -> list[Step]:
    # the segment "ends" after the first event although GetStreamSegmentInfo said more
    data = TWO_EVENTS[: len(EVENT_1)][q.offset : q.offset + q.suggested_length]
    return [_read_reply(q, data=data)]


def _data_past_frame(q: Any) -> bytes:
    """A SegmentRead whose data length (1000) runs past its frame (10 bytes follow)."""
    name = q.segment.encode()
    head = struct.pack(">H", len(name)) + name + struct.pack(">q??i", q.offset, True, False, 1000)
    return _frame(10, head + bytes(10) + struct.pack(">q", q.request_id))


TASK: dict[str, tuple[Lie, str]] = {
    "frame-2GiB": (_on(READ, lambda q: [struct.pack(">ii", 10, 0x7FFFFFFF)]), "declaring"),
    "frame-negative": (_on(READ, lambda q: [struct.pack(">ii", 10, -1)]), "declaring"),
    "unknown-type": (_on(READ, lambda q: [_frame(4242, b"")]), "type 4242"),
    "other-segment": (_on(READ, lambda q: [_read_reply(q, segment="a/b/0")]), "a/b/0"),
    "other-offset": (_on(READ, lambda q: [_read_reply(q, offset=q.offset + 8)]), "offset"),
    "other-request-id": (_on(READ, lambda q: [_read_reply(q, request_id=99)]), "request"),
    "more-than-asked": (
        _on(READ, lambda q: [_read_reply(q, data=bytes(q.suggested_length + 1))]),
        "more than",
    ),
    "data-past-frame": (_on(READ, lambda q: [_data_past_frame(q)]), "malformed"),
    "shrinks": (_on(READ, _shrunk), f"offset {len(EVENT_1)}"),
    "stall-mid-frame": (_on(READ, lambda q: [_read_reply(q)[:100], 30.0]), "no reply"),
    "reset-mid-frame": (_on(READ, lambda q: [_read_reply(q)[:100], 0.05, RESET]), "connection"),
    "truncated": (
        _on(READ, lambda q: [codec.encode(SegmentIsTruncated(q.request_id, q.segment, 4096))]),
        "truncated at 4096",
    ),
    "no-such-segment": (
        _on(READ, lambda q: [codec.encode(NoSuchSegment(q.request_id, q.segment))]),
        "does not exist",
    ),
}


@pytest.mark.parametrize("case", sorted(TASK))
def test_a_task_refuses_a_lying_server(spark: Any, case: str) -> None:
    lie, expect = TASK[case]
    with _hostile(TWO_EVENTS, lie) as h:
        msg = _fails(spark, h.endpoint, SEG, timeout="0.5")
    assert expect in msg, msg


def test_schema_inference_refuses_a_lying_server(spark: Any) -> None:
    lie = _on(READ, lambda q: [_read_reply(q, data=bytes(q.suggested_length + 1))])
    with _hostile(TWO_EVENTS, lie) as h:
        msg = _fails(spark, h.endpoint, SEG, schema="")
    assert "more than" in msg, msg


# -- damaged records stored through the real server ----------------------------------------


def _store(endpoint: str, seg: str, *events: bytes) -> None:
    with sync.connect(endpoint) as c:
        c.create_segment(seg)
        with c.writer(seg) as w:
            for e in events:
                w.write(e)


def _envelope(attrs: int, klen: int, headers: bytes, value: bytes) -> bytes:
    """A record with a valid CRC-32C whatever its fields declare."""
    body = struct.pack(">BBqi", records.FORMAT_VERSION, attrs, 0, klen) + headers + value
    return body + struct.pack("<I", records.crc32c(body))


def _headers(vlen: int | None = None, value: bytes = ARROW) -> bytes:
    name = b"content-type"
    n = len(value) if vlen is None else vlen
    return struct.pack(">HH", 1, len(name)) + name + struct.pack(">i", n) + value


def _zstd(data: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdCompressor(level=1).compress(data))


def _zstd_bomb(mib: int) -> bytes:
    import zstandard

    z = zstandard.ZstdCompressor(level=1).compressobj()
    zeros = bytes(1 << 20)
    return b"".join([*(z.compress(zeros) for _ in range(mib)), z.flush()])


def _patched(data: bytes, old: bytes, new: bytes, count: int = 1) -> bytes:
    assert data.count(old) == count, (data.count(old), old)
    return data.replace(old, new)


def _q(*v: int) -> bytes:
    return struct.pack(f"<{len(v)}q", *v)


IDS = _ipc(_ids(0, 777))  # one int64 column: a 6,216-byte buffer, no validity buffer
IDS_ZSTD = _ipc(_ids(0, 777), "zstd")
STRINGS = _ipc(pa.table({"s": pa.array(["hello", "world"])}))


def _deep(depth: int) -> bytes:
    ty: pa.DataType = pa.int64()
    for _ in range(depth):
        ty = pa.struct([pa.field("a", ty)])
    sink = pa.BufferOutputStream()  # the schema alone: pyarrow builds no deep arrays
    with pa.ipc.new_stream(sink, pa.schema([pa.field("deep", ty)])):
        pass
    return bytes(sink.getvalue().to_pybytes())


# name -> (the stored record, read schema or "" to infer, what the message must say)
DAMAGED: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "key-past-event": (lambda: _envelope(0, 99_999, _headers(), IDS), "", "key length 99999"),
    "header-past-event": (
        lambda: _envelope(0, -1, _headers(0x7FFFFFF0), IDS),
        "",
        "header runs past",
    ),
    "header-count-past-event": (
        lambda: _envelope(0, -1, struct.pack(">H", 500), IDS[:8]),
        "",
        "runs past",
    ),
    "truncated-zstd": (
        lambda: _envelope(3, -1, _headers(), _zstd(IDS)[:-9]),
        "",
        "does not decompress with zstd",
    ),
    "zstd-bomb": (lambda: _envelope(3, -1, _headers(), _zstd_bomb(300)), "", "more than"),
    "metadata-length-2GiB": (
        lambda: _envelope(0, -1, _headers(), IDS[:4] + struct.pack("<i", 0x7FFFFFF0) + IDS[8:]),
        "",
        "Arrow",
    ),
    "buffer-past-body": (
        lambda: _envelope(0, -1, _headers(), _patched(IDS, _q(0, 6216), _q(0, 1 << 40))),
        "id BIGINT",
        "buffer",
    ),
    "more-rows-than-buffers": (
        lambda: _envelope(0, -1, _headers(), _patched(IDS, _q(777), _q(5000), 2)),
        "id BIGINT",
        "5000",
    ),
    "batch-longer-than-column": (
        lambda: _envelope(0, -1, _headers(), _patched(IDS, _q(777, 0), _q(100, 0))),
        "id BIGINT",
        "rows",
    ),
    "uncompressed-length-lie": (
        lambda: _envelope(0, -1, _headers(), _patched(IDS_ZSTD, _q(6216), _q(1 << 40))),
        "id BIGINT",
        "compress",
    ),
    "string-offsets-past-data": (
        lambda: _envelope(
            0,
            -1,
            _headers(),
            _patched(STRINGS, struct.pack("<3i", 0, 5, 10), struct.pack("<3i", 0, 5, 100_000)),
        ),
        "s STRING",
        "Arrow",
    ),
    "schema-nested-1000-deep": (lambda: _envelope(0, -1, _headers(), _deep(1_000)), "", "deep"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_stored_data_is_refused(spark: Any, endpoint: str, seg: str, case: str) -> None:
    make, schema, expect = DAMAGED[case]
    good = _record(IDS)
    _store(endpoint, seg, good, make())  # the damaged event starts at 8 + len(good)
    msg = _fails(spark, endpoint, seg, schema=schema, startOffset=str(8 + len(good)))
    assert expect in msg, msg
    assert f"offset {8 + len(good)}" in msg, msg
