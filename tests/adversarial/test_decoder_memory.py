"""The frame decoder's memory follows the bytes that arrive (issue 13 item 9): a frame that
is declared big and trickled in costs about its bytes, not the declared length and not an
object per piece."""

from __future__ import annotations

import struct
import tracemalloc

from segmentstore_client.protocol import MAX_PAYLOAD_TO_SERVER, FrameDecoder, SegmentRead, encode

HEADER = struct.Struct(">ii")


def held_after(pieces: list[bytes]) -> int:
    decoder = FrameDecoder(max_payload=MAX_PAYLOAD_TO_SERVER)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for piece in pieces:
            assert decoder.feed(piece) == []
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_declared_length_is_not_allocated() -> None:
    # 16 MiB declared, 100 bytes sent.
    assert held_after([HEADER.pack(11, 16 * 1024 * 1024 - 16) + b"\0" * 100]) < 64 * 1024


def test_trickled_big_frame_costs_its_bytes() -> None:
    header = HEADER.pack(11, 8 * 1024 * 1024)
    body = [b"\1" * 7 for _ in range(20_000)]  # 140,000 bytes, 7 at a time
    held = held_after([header, *body])
    assert held < 3 * 140_000, f"{held} bytes held for 140,000 received"


def test_big_pieces_still_decode_zero_copy() -> None:
    frame = encode(SegmentRead("s", 0, False, False, b"z" * (3 << 20), 1))
    decoder = FrameDecoder()
    pieces = [frame[i : i + (256 << 10)] for i in range(0, len(frame), 256 << 10)]
    out = [c for p in pieces for c in decoder.feed(p)]
    assert len(out) == 1 and isinstance(out[0], SegmentRead)
    assert bytes(out[0].data) == b"z" * (3 << 20)
