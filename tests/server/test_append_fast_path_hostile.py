"""A hostile client against the append fast path (session 12's attack on the merged
``Appends.block_end`` / ``AppendAssembler.take_end_only`` / big-AppendBlockEnd decoding).

Every case here was run against the server before the fast path (522c56d) and against
main, byte for byte; they answered the same. The tests pin that answer: each refusal the
general path made (no SetupAppend, a block open for another writer, numEvents <= 0, an
event number going back, a malformed length) still closes the connection with nothing
stored, and every ack (previous event number, write offset) is the one the general path
sent, including the acks of duplicates resent after AppendSetup.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from segmentstore_client.errors import MalformedCommand
from segmentstore_client.protocol import (
    NULL_ATTRIBUTE_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateSegment,
    DataAppended,
    DeleteSegment,
    FrameDecoder,
    InvalidEventNumber,
    KeepAlive,
    NoSuchSegment,
    SealSegment,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentTruncated,
    SetupAppend,
    TruncateSegment,
    block_end,
    build_blocks,
    encode,
    frame_event,
    frame_events,
)
from segmentstore_client.protocol import (
    SegmentSealed as SegmentSealedReply,
)

from .harness import harness
from .wire import WireClient, next_id, unique

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

KiB = 1024

NULL = NULL_ATTRIBUTE_VALUE


def ev(i: int, size: int = 10) -> bytes:
    return frame_event(bytes([65 + i % 26]) * size)


def evs(first: int, stop: int) -> bytes:
    return b"".join(ev(i) for i in range(first, stop))


async def fresh(c: WireClient, *writers: uuid.UUID) -> str:
    name = unique("fp")
    await c.create_segment(name)
    for w in writers:
        assert await c.setup_append(w, name) == NULL
    return name


async def length_of(c: WireClient, name: str) -> int:
    return (await c.info(name)).write_offset


async def refused(c: WireClient, frames: bytes) -> None:
    """``frames`` make the server close the connection without any reply to them."""
    before = len(c.received)
    c.send_raw(frames)
    await c.wait_closed(10)
    assert c.received[before:] == []


def ack(w: uuid.UUID, number: int, previous: int, rid: int, offset: int) -> DataAppended:
    return DataAppended(w, number, previous, rid, offset)


# --- refusals: the connection closes, nothing is stored ----------------------------------


async def test_end_without_setup_is_refused(client: WireClient, client2: WireClient) -> None:
    name = await fresh(client)
    await refused(client, encode(block_end(uuid.uuid4(), ev(1), 1, 1, next_id())))
    assert await length_of(client2, name) == 0


async def test_num_events_zero_or_negative_is_refused(module_server: ServerProcess) -> None:
    host, port = module_server.host, module_server.port
    async with await WireClient.connect(host, port) as probe:
        for n in (0, -1):
            w = uuid.uuid4()
            async with await WireClient.connect(host, port) as c:
                name = await fresh(c, w)
                await refused(c, encode(block_end(w, ev(1), n, 1, next_id())))
            assert await length_of(probe, name) == 0


async def test_end_for_another_writer_while_a_block_is_open_is_refused(
    client: WireClient, client2: WireClient
) -> None:
    """take_end_only must not take an end while a block is open, whoever it is for."""
    w1, w2 = uuid.uuid4(), uuid.uuid4()
    name = await fresh(client, w1, w2)
    frames = encode(AppendBlock(w1, ev(1))) + encode(block_end(w2, ev(2), 1, 1, next_id()))
    await refused(client, frames)
    assert await length_of(client2, name) == 0


async def test_event_number_equal_or_below_the_last_is_rejected(
    module_server: ServerProcess,
) -> None:
    host, port = module_server.host, module_server.port
    async with await WireClient.connect(host, port) as probe:
        for again in (5, 3):
            w = uuid.uuid4()
            async with await WireClient.connect(host, port) as c:
                name = await fresh(c, w)
                rid1, rid2 = next_id(), next_id()
                c.send(block_end(w, ev(1), 1, 5, rid1))
                assert await c.wait_acked(w, 5) == ack(w, 5, NULL, rid1, 18)
                c.send(block_end(w, ev(2), 1, again, rid2))
                assert await c.reply_to(rid2) == InvalidEventNumber(w, rid2, "", again)
                await c.wait_closed()
            assert await length_of(probe, name) == 18


async def test_malformed_lengths_answer_as_the_general_path_did(
    module_server: ServerProcess,
) -> None:
    """Each length field of an AppendBlockEnd one off, both ways, then a KeepAlive. Field
    offsets: 4 the frame length, 24 sizeOfWholeEvents, 28 the data length. Per case: is the
    connection closed, the acks' (event number, request id, offset), the bytes stored.
    A frame length one short leaves 7 bytes for the optional request id (absent: -1, as
    the reference reads it) and its last byte starts a garbage header (as the
    first byte of the KeepAlive does when the frame length is one long); one data byte more
    or less shifts the fixed fields (a different, wire-valid append); sizeOfWholeEvents is
    not checked without an AppendBlock. When the garbage header comes in the same read as
    a whole frame before it, the decoder's error drops that read's frames (before and
    after the fast path alike): 0 or 18 bytes for the frame length one short."""
    host, port = module_server.host, module_server.port
    cases: list[tuple[int, int, bool, list[tuple[int, int, int]], tuple[int, ...]]] = [
        (4, +1, True, [], (0,)),
        (4, -1, True, [(1, -1, 18)], (0, 18)),
        (28, +1, False, [(256, -1, 19)], (19,)),
        (28, -1, False, [(1 << 56, 1 << 56, 17)], (17,)),
        (24, +1, False, [(1, 3, 18)], (18,)),
        (24, -1, False, [(1, 3, 18)], (18,)),
    ]
    async with await WireClient.connect(host, port) as probe:
        for field, delta, closes, acks, stored in cases:
            w = uuid.uuid4()
            async with await WireClient.connect(host, port) as c:
                name = await fresh(c, w)
                frame = bytearray(encode(block_end(w, ev(1), 1, 1, 3)))
                old = struct.unpack_from(">i", frame, field)[0]
                struct.pack_into(">i", frame, field, old + delta)
                c.send_raw(bytes(frame) + encode(KeepAlive()) * 2)
                if closes:
                    await c.wait_closed()
                else:
                    await c.wait_for(lambda x: isinstance(x, KeepAlive))
                    await c.wait_until(lambda c=c, w=w: bool(c.acks(w)))
                got = [
                    (a.event_number, a.request_id, a.current_segment_write_offset)
                    for a in c.acks(w)
                ]
                assert c.is_closed == closes, (field, delta)
                # A close may overtake the ack of an append stored before it.
                assert got == acks or (closes and not got), (field, delta, got)
            assert await length_of(probe, name) in stored, (field, delta)


# --- acks: byte-exact, per outcome -------------------------------------------------------


async def test_acks_of_fast_and_conditional_appends_mixed_on_one_writer(
    client: WireClient, client2: WireClient
) -> None:
    w = uuid.uuid4()
    name = await fresh(client, w)
    r = [next_id() for _ in range(8)]
    steps = [
        block_end(w, ev(1), 1, 1, r[0]),
        ConditionalAppend(w, 2, 18, b"A" * 10, r[1]),
        ConditionalAppend(w, 3, 0, b"B" * 10, r[2]),  # wrong offset
        block_end(w, ev(4), 1, 3, r[3]),  # reuses 3, once the failure is known
        block_end(w, ev(5), 1, 4, r[4]),
        ConditionalBlockEnd(w, 5, 0, ev(6), r[5]),  # wrong offset
        ConditionalBlockEnd(w, 6, 72, ev(7), r[6]),
    ]
    for cmd in steps:
        before = len(client.received)
        client.send(cmd)
        await client.wait_until(lambda before=before: len(client.received) > before)
    assert client.received[-7:] == [
        ack(w, 1, NULL, r[0], 18),
        ack(w, 2, 1, r[1], 36),
        ConditionalCheckFailed(w, 3, r[2]),
        ack(w, 3, 2, r[3], 54),
        ack(w, 4, 3, r[4], 72),
        ConditionalCheckFailed(w, 5, r[5]),
        ack(w, 6, 4, r[6], 90),
    ]
    # A repeat of 6 on the fast path: InvalidEventNumber, then the close.
    client.send(block_end(w, ev(8), 1, 6, r[7]))
    assert await client.reply_to(r[7]) == InvalidEventNumber(w, r[7], "", 6)
    await client.wait_closed()
    assert await length_of(client2, name) == 90


async def test_acks_of_duplicates_resent_after_setup(module_server: ServerProcess) -> None:
    """Resent after AppendSetup: acked without storing, previous = number - count (or
    NULL); a new one after them is stored and acked against the setup value."""
    host, port = module_server.host, module_server.port
    w = uuid.uuid4()
    async with await WireClient.connect(host, port) as c:
        name = await fresh(c, w)
        r0, r1 = next_id(), next_id()
        c.send(block_end(w, evs(0, 3), 3, 3, r0), block_end(w, evs(3, 5), 2, 5, r1))
        await c.wait_acked(w, 5)
        assert c.acks(w) == [ack(w, 3, NULL, r0, 54), ack(w, 5, 3, r1, 90)]
    async with await WireClient.connect(host, port) as c:
        assert await c.setup_append(w, name) == 5
        r = [next_id() for _ in range(4)]
        c.send(
            block_end(w, evs(0, 3), 3, 3, r[0]),
            block_end(w, evs(3, 5), 2, 5, r[1]),
            block_end(w, evs(5, 6), 1, 6, r[2]),
            block_end(w, evs(6, 8), 2, 8, r[3]),
        )
        await c.wait_until(lambda: len(c.acks(w)) == 4)
        assert c.acks(w) == [
            ack(w, 3, 0, r[0], 90),
            ack(w, 5, 3, r[1], 90),
            ack(w, 6, 5, r[2], 108),
            ack(w, 8, 6, r[3], 144),
        ]
        assert await length_of(c, name) == 144


async def test_setup_again_between_fast_appends(client: WireClient) -> None:
    """SetupAppend for the same writer mid-stream (before the first ack): the resend of 1
    is acked like the original, 2 goes on."""
    w = uuid.uuid4()
    name = await fresh(client, w)
    r0, rs, r1, r2 = next_id(), next_id(), next_id(), next_id()
    client.send(
        block_end(w, ev(1), 1, 1, r0),
        SetupAppend(rs, w, name, ""),
        block_end(w, ev(1), 1, 1, r1),
        block_end(w, ev(2), 1, 2, r2),
    )
    await client.wait_until(lambda: len(client.acks(w)) == 3)
    assert client.acks(w) == [
        ack(w, 1, NULL, r0, 18),
        ack(w, 1, NULL, r1, 18),
        ack(w, 2, 1, r2, 36),
    ]
    assert await length_of(client, name) == 36


async def test_interleaved_writers_and_repeated_request_ids(client: WireClient) -> None:
    w1, w2 = uuid.uuid4(), uuid.uuid4()
    name = await fresh(client, w1, w2)
    client.send(
        block_end(w1, ev(1), 1, 1, 5),
        block_end(w2, ev(2), 1, 1, 5),
        block_end(w1, ev(3), 1, 2, 5),
        block_end(w2, evs(4, 6), 2, 3, 5),
    )
    await client.wait_until(lambda: len(client.acks()) == 4)
    assert client.acks(w1) == [ack(w1, 1, NULL, 5, 18), ack(w1, 2, 1, 5, 54)]
    assert client.acks(w2) == [ack(w2, 1, NULL, 5, 36), ack(w2, 3, 1, 5, 90)]
    assert await length_of(client, name) == 90


# --- big frames: the codec's own-data decoding --------------------------------------------


async def test_big_end_trickled_and_off_by_one_in_the_big_decoder(
    module_server: ServerProcess,
) -> None:
    """A 70 kB AppendBlockEnd (over the decoder's big-frame threshold) fed 1 byte at a
    time for its first 200 bytes, then in 997-byte pieces: stored whole and acked. The
    same frame with its data length one off either way goes through the big decoder as
    a different, wire-valid append (the fixed fields shift; the general decoder read it
    the same way)."""
    host, port = module_server.host, module_server.port
    data = frame_event(b"x" * 70_000)
    for field, delta, stored in [(0, 0, 70_008), (28, -1, 70_007), (28, +1, 70_009)]:
        w = uuid.uuid4()
        async with await WireClient.connect(host, port) as c:
            name = await fresh(c, w)
            frame = bytearray(encode(AppendBlockEnd(w, len(data), data, 1, 1, 77)))
            if delta:
                struct.pack_into(
                    ">i", frame, field, struct.unpack_from(">i", frame, field)[0] + delta
                )
            for i in range(200):
                c.send_raw(bytes(frame[i : i + 1]))
                await c.drain()
            for i in range(200, len(frame), 997):
                c.send_raw(bytes(frame[i : i + 997]))
            got = await c.wait_acked(w, 1 if not delta else 0)
            assert got.current_segment_write_offset == stored
            assert await length_of(c, name) == stored
            if not delta:
                assert got == ack(w, 1, NULL, 77, stored)
                assert await c.read_all(name) == data


async def test_big_end_joined_with_its_block(client: WireClient) -> None:
    """A 200 kB event split the Java client's way: an AppendBlock ending in a PartialEvent,
    the rest (80 kB, over the big-frame threshold) in the AppendBlockEnd, all sent in
    997-byte pieces so the end goes through the big decoder. The event is stored whole,
    once, and acked; then a fast-path append goes on after it."""
    w = uuid.uuid4()
    name = await fresh(client, w)
    record = frame_event(b"y" * 200_000)
    pairs = build_blocks(w, [record], 1, 501, 120_000)
    assert [type(p) for p in pairs] == [AppendBlock, AppendBlockEnd]
    end = pairs[-1]
    assert isinstance(end, AppendBlockEnd) and len(end.data) > 64 * 1024
    wire = b"".join(encode(p) for p in pairs)
    for i in range(0, len(wire), 997):
        client.send_raw(wire[i : i + 997])
        await client.drain()
    client.send(block_end(w, ev(2), 1, 2, 502))
    await client.wait_acked(w, 2)
    assert client.acks(w) == [
        ack(w, 1, NULL, 501, len(record)),
        ack(w, 2, 1, 502, len(record) + 18),
    ]
    assert await client.read_all(name) == record + ev(2)


async def test_an_open_block_at_close_stores_nothing(
    client: WireClient, client2: WireClient
) -> None:
    w = uuid.uuid4()
    name = await fresh(client, w)
    client.send(AppendBlock(w, frame_events([b"a" * 10, b"b" * 10])))
    await client.drain()
    await client.close()
    await asyncio.sleep(0.1)
    assert await length_of(client2, name) == 0


# --- memory: a flood of fast-path appends from a peer that never reads its acks ------------


async def test_unread_acks_pause_the_fast_path_and_none_is_lost(tmp_path: Path) -> None:
    """3000 small appends, 100 per read, from a peer that does not read: the acks fill the
    64 KiB write buffer, the connection stops taking appends and stops reading (the rest
    waits in the peer's socket), the output stays within a read's acks of the high-water
    mark. Once the
    peer reads, every append is acked once, in order, with the exact offsets. Guards the
    two stops of Connection (process's output check, update_reading's _paused_writes):
    with both broken the server reads on."""
    batch, batches, size = 100, 30, 32
    async with harness(tmp_path, connection_write_buffer_bytes=64 * KiB) as h:
        peer = h.connect()
        peer.send(CreateSegment(1, "s", 0, 0, ""))
        await peer.until(lambda: any(isinstance(c, SegmentCreated) for c in peer.received))
        w = uuid.uuid4()
        peer.send(SetupAppend(2, w, "s", ""))
        await peer.until(lambda: any(isinstance(c, AppendSetup) for c in peer.received))
        record = frame_event(b"e" * (size - 8))
        t = peer.transport
        peak = 0
        for b in range(batches):
            first = b * batch + 1
            frames = (encode(block_end(w, record, 1, n, n)) for n in range(first, first + batch))
            peer.send_raw(b"".join(frames))
            # Until the server has acked all it took, or has stopped reading.
            sent_acks = 56 * (first + batch - 1)
            await peer.until(
                lambda s=sent_acks: not t.reading or len(t.outbox) >= s, "acks", read=False
            )
            peak = max(peak, len(t.outbox))
        assert t.writing_paused and not t.reading and t.inbox, "the server kept reading"
        assert peak <= 64 * KiB + 2 * batch * 56, peak
        total = batch * batches
        await peer.until(
            lambda: len([c for c in peer.received if isinstance(c, DataAppended)]) == total
        )
        got = [c for c in peer.received if isinstance(c, DataAppended)]
        assert got == [
            ack(w, n, n - 1 if n > 1 else NULL, n, n * size) for n in range(1, total + 1)
        ]
        assert h.server.ctx.store.info("s").length == total * size


async def test_end_exactly_at_the_frame_limit_and_one_byte_over(
    module_server: ServerProcess,
) -> None:
    """The client's frame limit (16 MiB - 1 less a header: 16777207 body bytes) through the
    big decoder: a frame of exactly that size is stored and acked; one byte more closes
    the connection before any of it is taken."""
    host, port = module_server.host, module_server.port
    body = 0x00FFFFFF - 8
    for extra in (0, 1):
        w = uuid.uuid4()
        async with await WireClient.connect(host, port) as c:
            name = await fresh(c, w)
            data = frame_event(b"z" * (body - 44 - 8 + extra))
            frame = encode(AppendBlockEnd(w, len(data), data, 1, 1, 9))
            assert len(frame) == 8 + body + extra
            c.send_raw(frame)
            if extra:
                await c.wait_closed()
                assert not c.acks(w)
            else:
                assert await c.wait_acked(w, 1) == ack(w, 1, NULL, 9, len(data))
        async with await WireClient.connect(host, port) as probe:
            assert await length_of(probe, name) == (0 if extra else len(data))


async def test_fast_path_after_seal_delete_and_truncate(module_server: ServerProcess) -> None:
    """The writer's session on a sealed or deleted segment fails on its first append
    (SegmentIsSealed / NoSuchSegment), the writer is forgotten, and its next append
    closes the connection; a truncation does not touch the session."""
    host, port = module_server.host, module_server.port
    for how in ("seal", "delete", "truncate"):
        w = uuid.uuid4()
        async with await WireClient.connect(host, port) as c:
            name = await fresh(c, w)
            c.send(block_end(w, ev(1), 1, 1, 11))
            assert await c.wait_acked(w, 1) == ack(w, 1, NULL, 11, 18)
            if how == "seal":
                await c.expect(SealSegment(next_id(), name, ""), SegmentSealedReply)
                want: object = SegmentIsSealed(12, name, "", 2)
            elif how == "delete":
                await c.expect(DeleteSegment(next_id(), name, ""), SegmentDeleted)
                want = NoSuchSegment(12, name, "", -1)
            else:
                await c.expect(TruncateSegment(next_id(), name, 18, ""), SegmentTruncated)
                want = ack(w, 2, 1, 12, 36)
            c.send(block_end(w, ev(2), 1, 2, 12))
            got = await c.wait_for(lambda x: getattr(x, "request_id", None) == 12)
            assert got == want, how
            c.send(block_end(w, ev(3), 1, 3, 13))
            if how == "truncate":
                assert await c.wait_acked(w, 3) == ack(w, 3, 2, 13, 54)
                assert (await c.info(name)).start_offset == 18
            else:
                await c.wait_closed()
                assert not c.by_id(13) and len(c.acks(w)) == 1


def _tail(c: AppendBlockEnd) -> tuple[int, int, int]:
    return c.num_events, c.last_event_number, c.request_id


def _decode(frame: bytes, piece: int) -> list[tuple[object, ...]] | str:
    """The frame fed in ``piece``-byte reads (0: one read): the commands' fields with the
    data as bytes, or the error's type."""
    decoder = FrameDecoder(max_payload=0x00FFFFFF - 8)
    out = []
    try:
        if piece:
            for i in range(0, len(frame), piece):
                out += decoder.feed(frame[i : i + piece])
        else:
            out = decoder.feed(frame)
    except MalformedCommand:
        return "MalformedCommand"
    return [
        (c.writer_id, c.size_of_whole_events, bytes(c.data), *_tail(c), type(c.data))
        for c in out
        if isinstance(c, AppendBlockEnd)
    ]


def test_big_decoder_agrees_with_the_general_one_on_bad_data_lengths() -> None:
    """The big-AppendBlockEnd decoding (a frame over 64 KiB that arrives in pieces) gives
    the same command, or the same error, as one read of the frame, whatever its data
    length field says: negative, zero, one off, up to and past the frame's end. Its data
    is a ``bytes`` of its own (the store keeps it as it is)."""
    data = frame_event(b"x" * 70_000)
    frame = encode(AppendBlockEnd(uuid.UUID(int=7), len(data), data, 1, 1, 77))
    body = len(frame) - 8
    lengths = [-1, 0, 1, len(data) - 1, len(data), len(data) + 1, body - 40, body - 39]
    lengths += [body - 32, body - 25, body - 24, body - 23, 2**31 - 1]
    for n in lengths:
        mutated = bytearray(frame)
        struct.pack_into(">i", mutated, 28, n)
        whole = _decode(bytes(mutated), 0)
        for piece in (997, 40_000):
            trickled = _decode(bytes(mutated), piece)
            if isinstance(whole, list) and isinstance(trickled, list):
                assert [c[:6] for c in trickled] == [c[:6] for c in whole], (n, piece)
                assert all(c[6] is bytes for c in trickled), (n, piece)
            else:
                assert trickled == whole, (n, piece)
