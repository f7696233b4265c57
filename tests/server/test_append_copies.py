"""The copies of a big append's bytes between the socket and the log (issue 19, round 9).

A 1 MiB AppendBlockEnd of 64 KiB events arrives in pieces of immutable ``bytes`` (as the
event loop hands them over). The decoder joins the payload's pieces into a ``bytes`` of its
own (the one copy), which the store takes as it is for the log's CRC and writev and the
read cache (before, the decoder joined the whole body and the store copied the payload's
view of it a second time). The tests follow that one object from the decoder to the read
cache, check the ack and the bytes stored, and check the big decoder against the general
one.
"""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest
from segmentstore_client.errors import MalformedCommand
from segmentstore_client.protocol import (
    MAX_PAYLOAD_TO_SERVER,
    AppendBlockEnd,
    FrameDecoder,
    block_end,
    decode,
    encode,
    frame_event,
)

from .harness import harness
from .test_harness import acks, create, setup

EVENT = 64 * 1024
EVENTS = 16  # one 1 MiB block, as the SDK sends 64 KiB events
PIECE = 256 * 1024  # what one socket read brings


async def test_a_big_frame_is_copied_once_on_its_way_to_the_log(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "big")
        w = uuid.uuid4()
        await setup(peer, "big", w)
        (conn,) = h.server.connections
        taken: list[AppendBlockEnd] = []
        hot_path = conn.appends.block_end

        def block_end_seen(end: AppendBlockEnd) -> None:
            taken.append(end)
            hot_path(end)

        conn.appends.block_end = block_end_seen  # type: ignore[method-assign]
        records = b"".join(frame_event(bytes([n]) * EVENT) for n in range(EVENTS))
        for piece in pieces_of(encode(block_end(w, records, EVENTS, EVENTS, 7))):
            peer.send_raw(piece)
        await peer.until(lambda: bool(acks(peer)), "the ack")
        (ack,) = acks(peer)
        assert (ack.event_number, ack.request_id) == (EVENTS, 7)
        assert ack.current_segment_write_offset == len(records)
        # The decoder's one copy is a bytes of its own, and the store kept that object.
        (end,) = taken
        assert type(end.data) is bytes and end.data == records
        stored = h.server.ctx.store.try_read("big", 0, len(records))
        assert stored is not None and type(stored.data) is memoryview
        assert stored.data.obj is end.data


def pieces_of(frame: bytes) -> list[bytes]:
    return [frame[i : i + PIECE] for i in range(0, len(frame), PIECE)]


def test_a_big_block_end_decodes_as_the_general_decoder_does() -> None:
    """The big AppendBlockEnd path gives the general decoder's command (every field, the
    omitted request id too), with the data as a ``bytes`` of its own; a data length out of
    range is the same MalformedCommand."""
    w = uuid.uuid4()
    records = frame_event(b"z" * (300 * 1024))
    frame = encode(block_end(w, records, 1, 9, 42))
    got = FrameDecoder(MAX_PAYLOAD_TO_SERVER)
    commands = [c for piece in pieces_of(frame) for c in got.feed(piece)]
    assert commands == [decode(frame)]
    assert type(commands[0].data) is bytes  # type: ignore[attr-defined]
    # Without the optional request id (an old client's frame): the same default, counted.
    short = frame[:4] + struct.pack(">i", len(frame) - 16) + frame[8:-8]
    old_client = FrameDecoder(MAX_PAYLOAD_TO_SERVER)
    (old,) = [c for piece in pieces_of(short) for c in old_client.feed(piece)]
    assert old == decode(short) and old.wire_omitted == 1  # type: ignore[attr-defined]
    # A data length past the end of the frame.
    bad = bytearray(frame)
    struct.pack_into(">i", bad, 8 + 20, len(records) + 100)
    with pytest.raises(MalformedCommand) as general:
        decode(bytes(bad))
    hostile = FrameDecoder(MAX_PAYLOAD_TO_SERVER)
    with pytest.raises(MalformedCommand) as big:
        for piece in pieces_of(bytes(bad)):
            hostile.feed(piece)
    assert str(big.value) == str(general.value)
