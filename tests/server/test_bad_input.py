"""Hostile and broken input from many connections at once (reference 2.4, 12.2) while a
good client keeps appending and reading: every bad connection is closed without a reply
(or simply left waiting, for a frame that never completes), the good connection is not
disturbed, nothing it was acknowledged is lost, and the server keeps accepting."""

from __future__ import annotations

import asyncio
import random
import struct
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from segmentstore_client.protocol import (
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    DataAppended,
    Hello,
    InvalidEventNumber,
    KeepAlive,
    ReadSegment,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    block_end,
    encode,
    frame_event,
    frame_events,
)

from .wire import (
    WireClient,
    check_per_writer_order,
    event_payload,
    next_id,
    parse_events,
    unique,
)

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

HEADER = struct.Struct(">ii")


def frame(type_code: int, payload: bytes, declared: int | None = None) -> bytes:
    return HEADER.pack(type_code, len(payload) if declared is None else declared) + payload


def bad_inputs(segment: str) -> list[tuple[str, bytes, bool]]:
    """(what, bytes to send, whether the server must close the connection)."""
    w = uuid.uuid4()
    setup = encode(SetupAppend(1, w, segment, ""))
    rng = random.Random(7)
    cases: list[tuple[str, bytes, bool]] = [
        ("oversize length", frame(1, b"", 0x7FFFFFF0), True),
        ("length just over the limit", frame(4, b"\0" * 64, 16_777_208), True),
        ("negative length", frame(1, b"", -5), True),
        ("unknown type 6", frame(6, b"\0" * 8), True),
        ("unknown type 72", frame(72, b"\0" * 8), True),
        ("unknown type 99", frame(99, b""), True),
        ("unknown type 1000", frame(1000, b"\0" * 4), True),
        ("reply: DataAppended", encode(DataAppended(w, 1, -1, 1, 0)), True),
        ("reply: SegmentCreated", encode(SegmentCreated(1, segment)), True),
        ("reply: AppendSetup", encode(AppendSetup(1, segment, w, 0)), True),
        ("reply: SegmentRead", encode(SegmentRead(segment, 0, True, False, b"x", 1)), True),
        ("bare Event", frame(0, b"hello"), True),
        ("top-level PartialEvent", frame(-2, b"part"), True),
        ("data before SetupAppend", encode(block_end(w, frame_event(b"x"), 1, 1, 5)), True),
        ("block before SetupAppend", encode(AppendBlock(w, frame_event(b"x"))), True),
        (
            "AppendBlock then something else",
            setup + encode(AppendBlock(w, frame_event(b"x"))) + encode(KeepAlive()),
            True,
        ),
        (
            "AppendBlockEnd for another writer",
            setup
            + encode(AppendBlock(w, frame_event(b"x")))
            + encode(AppendBlockEnd(uuid.uuid4(), 9, b"", 1, 1, 2)),
            True,
        ),
        (
            "sizeOfWholeEvents beyond the block",
            setup
            + encode(AppendBlock(w, frame_event(b"x")))
            + encode(AppendBlockEnd(w, 99, b"", 1, 1, 2)),
            True,
        ),
        ("numEvents 0", setup + encode(block_end(w, frame_event(b"x"), 0, 1, 2)), True),
        (
            "event number going backwards",
            setup
            + encode(block_end(w, frame_event(b"x"), 1, 5, 2))
            + encode(block_end(w, frame_event(b"y"), 1, 3, 3)),
            True,
        ),
        ("field runs past the payload", frame(1, b"\0\0\0\0\0\0\0\1" + b"\x12" * 8), True),
        (
            "string longer than the payload",
            frame(11, b"\0" * 8 + b"\x00\xff" + b"ab" + b"\0\0"),
            True,
        ),
        (
            "ConditionalAppend with event type 5",
            setup + frame(5, w.bytes + b"\0" * 16 + HEADER.pack(5, 1) + b"x"),
            True,
        ),
        ("truncated frame (body never comes)", frame(11, b"\0" * 10, 200), False),
        ("truncated header", b"\x00\x00\x00", False),
    ]
    for i in range(25):
        junk = rng.randbytes(rng.randint(8, 4000))
        # A random type code is unknown (and a random length absurd) with near certainty;
        # force it so that the expectation is exact.
        junk = HEADER.pack(rng.choice([7777, -99, 0x41414141, 13]), rng.randint(0, 100)) + junk
        cases.append((f"random bytes {i}", junk, True))
    return cases


async def test_bad_input_from_many_connections_does_not_hurt_others(
    module_server: ServerProcess,
) -> None:
    host, port = module_server.host, module_server.port
    name = unique()
    async with await WireClient.connect(host, port) as good:
        await good.create_segment(name)
        w = uuid.uuid4()
        await good.setup_append(w, name)
        stop = asyncio.Event()
        acked = 0

        async def keep_appending_and_reading() -> int:
            n = 0
            offset = 0
            while not stop.is_set():
                for _ in range(5):
                    n += 1
                    good.send(block_end(w, frame_event(event_payload(0, n, 200)), 1, n, next_id()))
                await good.wait_acked(w, n, timeout=10)
                reply = await good.read(name, offset, 1 << 20)
                assert isinstance(reply, SegmentRead), reply
                offset += len(reply.data)
                await asyncio.sleep(0.005)
            return n

        worker = asyncio.create_task(keep_appending_and_reading())
        await asyncio.sleep(0.1)
        junk_segment = unique("junk")  # the bad connections' valid appends go there
        await good.create_segment(junk_segment)
        cases = bad_inputs(junk_segment)
        assert len(cases) >= 50
        bad: list[tuple[str, bool, WireClient]] = []
        for what, data, must_close in cases:
            c = await WireClient.connect(host, port, hello=False)
            bad.append((what, must_close, c))
            c.send_raw(data)
        t0 = time.monotonic()
        failures: list[str] = []
        for what, must_close, c in bad:
            if must_close:
                try:
                    await c.wait_closed(max(0.5, 10 - (time.monotonic() - t0)))
                except TimeoutError:
                    failures.append(f"{what}: not closed")
                    continue
                # No reply is sent for bad input (only what legitimately came before it).
                # (Except InvalidEventNumber for an event number going back, reference 7.6.)
                allowed = AppendSetup | DataAppended
                if what == "event number going backwards":
                    allowed = allowed | InvalidEventNumber
                unexpected = [x for x in c.received if not isinstance(x, allowed)]
                if unexpected:
                    failures.append(f"{what}: replied {unexpected}")
            else:
                await asyncio.sleep(0)
                if c.is_closed or c.received:
                    failures.append(f"{what}: {c.received}, closed={c.is_closed}")
        assert not failures, "\n".join(failures)
        # Half-sent frames: the server is still waiting, and that costs the others nothing.
        for _, must_close, c in bad:
            if not must_close:
                assert not c.is_closed
            await c.close()
        await asyncio.sleep(0.2)
        stop.set()
        acked = await asyncio.wait_for(worker, 20)
        assert not good.is_closed
        assert good.last_acked(w) == acked
        events = parse_events(await good.read_all(name))
        check_per_writer_order(events, {0: range(1, acked + 1)})
    # New connections are still served.
    async with await WireClient.connect(host, port) as fresh:
        other = unique()
        await fresh.create_segment(other)
        assert (await fresh.info(name)).write_offset == len(events) * 208


async def test_many_connections_opened_and_dropped(module_server: ServerProcess) -> None:
    """Connections that vanish mid-frame, mid-request or right after connecting."""
    host, port = module_server.host, module_server.port
    name = unique()
    async with await WireClient.connect(host, port) as admin:
        await admin.create_segment(name)

    async def one(i: int) -> None:
        c = await WireClient.connect(host, port, hello=False)
        actions: list[Callable[[], None]] = [
            lambda: None,
            lambda: c.send_raw(encode(Hello(17, 5))[:5]),
            lambda: c.send(SetupAppend(next_id(), uuid.uuid4(), name, "")),
            lambda: c.send_raw(encode(SetupAppend(1, uuid.uuid4(), name, ""))[:20]),
        ]
        actions[i % len(actions)]()
        await c.drain()
        await c.close()

    await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(100))), 30)
    async with await WireClient.connect(host, port) as c:
        assert (await c.info(name)).write_offset == 0
        await c.keepalive()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_client_that_never_reads_replies_cannot_balloon_server_memory(
    server: ServerProcess,
) -> None:
    """Pipelined 2 MiB reads from a client that does not read its socket: the server must
    stop producing replies once its write buffer is full (reference 7.10's backpressure),
    not queue 600 MB of them in memory."""
    assert server.proc is not None
    pid = server.proc.pid
    name = unique()
    async with await WireClient.connect(server.host, server.port) as c:
        await c.create_segment(name)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        c.send(block_end(w, frame_events([b"x" * (1 << 20)] * 2), 2, 2, next_id()))
        await c.wait_acked(w, 2)
        before = rss_bytes(pid)
        _reader, writer = await asyncio.open_connection(server.host, server.port)
        try:
            reads = b"".join(encode(ReadSegment(name, 0, 2 << 20, "", i)) for i in range(300))
            writer.write(reads)  # 300 x 2 MiB of replies asked for; none will be read
            await asyncio.wait_for(writer.drain(), 10)
            peak = before
            for _ in range(20):
                await asyncio.sleep(0.1)
                peak = max(peak, rss_bytes(pid))
            # Other connections are still served promptly.
            t0 = time.monotonic()
            await c.info(name)
            assert time.monotonic() - t0 < 1.0
        finally:
            writer.close()
    growth = peak - before
    assert growth < 150 * 1024 * 1024, f"server memory grew by {growth >> 20} MiB"
