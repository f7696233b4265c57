"""The big-frame path of ``FrameDecoder``: a frame whose body is large and incomplete moves
into a buffer of its own and its byte fields come out as zero-copy views of that buffer."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from segmentstore_client.protocol import (
    COMMAND_TYPES,
    AppendBlock,
    AppendBlockEnd,
    Buffer,
    Command,
    DataAppended,
    FrameDecoder,
    KeepAlive,
    SegmentRead,
    TableEntriesRead,
    TableEntry,
    decode,
    encode,
)

from .helpers import feed_all, fixed_cuts, random_cuts
from .strategies import command_strategy

MIB = 1 << 20
CHUNK = 64 * 1024
W = uuid.UUID(int=7)

DATA = random.Random(1).randbytes(MIB)
BIG = SegmentRead("sc/st/0.#epoch.0", 4096, False, False, DATA, 9)
SMALL_BEFORE: list[Command] = [KeepAlive(), DataAppended(W, 1, 0, 2, 27)]
SMALL_AFTER: list[Command] = [SegmentRead("s", 0, True, False, b"tail", 10), KeepAlive()]


def _check_big(cmd: Command) -> None:
    assert isinstance(cmd, SegmentRead)
    assert cmd == BIG
    assert isinstance(cmd.data, memoryview)
    # A view of a buffer holding exactly this frame's payload: the body was copied once
    # out of the fed chunks and the data field is not copied again.
    assert isinstance(cmd.data.obj, bytes | bytearray)
    assert len(cmd.data.obj) == len(encode(BIG)) - 8
    assert cmd.data == DATA


def test_one_mib_segment_read_in_64k_chunks() -> None:
    frame = encode(BIG)
    dec = FrameDecoder()
    got = feed_all(dec, fixed_cuts(frame, CHUNK))
    assert len(got) == 1
    _check_big(got[0])
    assert dec.buffered == 0


def test_big_frame_mixed_with_small_frames_in_the_same_chunks() -> None:
    stream = b"".join(encode(c) for c in [*SMALL_BEFORE, BIG, *SMALL_AFTER])
    dec = FrameDecoder()
    # The small frames before share the first chunk with the big frame's head, the ones
    # after share the last chunk with its end.
    assert len(encode(SMALL_BEFORE[0])) + len(encode(SMALL_BEFORE[1])) < CHUNK
    got = feed_all(dec, fixed_cuts(stream, CHUNK))
    assert got == [*SMALL_BEFORE, BIG, *SMALL_AFTER]
    _check_big(got[2])
    assert dec.buffered == 0


def test_views_stay_valid_while_the_decoder_goes_on() -> None:
    frame = encode(BIG)
    dec = FrameDecoder()
    got = feed_all(dec, fixed_cuts(frame + frame + encode(KeepAlive()), CHUNK))
    assert got[:2] == [BIG, BIG] and got[2] == KeepAlive()
    first, second = got[0], got[1]
    assert isinstance(first, SegmentRead) and isinstance(second, SegmentRead)
    assert first.data.obj is not second.data.obj  # type: ignore[union-attr]
    assert first.data == DATA and second.data == DATA


@pytest.mark.parametrize("seed", range(3))
def test_big_frames_in_random_slicings(seed: int) -> None:
    rng = random.Random(seed)
    commands: list[Command] = []
    for _ in range(12):
        size = rng.choice([0, 10, 70_000, 300_000, MIB])
        blob = rng.randbytes(size)
        commands.append(
            rng.choice(
                [
                    SegmentRead("s", size, True, False, blob, 1),
                    AppendBlock(W, blob),
                    AppendBlockEnd(W, 0, blob, 1, 1, 1),
                    TableEntriesRead(1, "t", (TableEntry(b"k", blob, 3),), b"tok"),
                ]
            )
        )
        commands.append(KeepAlive())
    stream = b"".join(encode(c) for c in commands)
    dec = FrameDecoder()
    assert feed_all(dec, random_cuts(stream, rng, 200_000)) == commands
    assert dec.buffered == 0


def test_threshold_decides_the_path() -> None:
    frame = encode(SegmentRead("s", 0, False, False, bytes(1000), 1))
    below = FrameDecoder(big_frame_threshold=2000)
    got = below.feed(frame[:100]) + below.feed(frame[100:])
    assert isinstance(got[0], SegmentRead) and isinstance(got[0].data, bytes)
    above = FrameDecoder(big_frame_threshold=500)
    got = above.feed(frame[:100]) + above.feed(frame[100:])
    assert isinstance(got[0], SegmentRead) and isinstance(got[0].data, memoryview)
    # A big frame that arrives whole in one feed needs no buffer of its own.
    whole = FrameDecoder(big_frame_threshold=500).feed(frame)
    assert whole == [decode(frame)]


def test_reused_mutable_read_buffer() -> None:
    """A caller that reads into one bytearray again and again (asyncio.BufferedProtocol):
    the decoder must copy what it keeps, or the big frame's data would change under it."""
    stream = b"".join(encode(c) for c in [*SMALL_BEFORE, BIG, *SMALL_AFTER])
    dec = FrameDecoder()
    buffer = bytearray(CHUNK)
    got: list[Command] = []
    for pos in range(0, len(stream), CHUNK):
        piece = stream[pos : pos + CHUNK]
        buffer[: len(piece)] = piece
        got.extend(dec.feed(memoryview(buffer)[: len(piece)]))
    buffer[:] = bytes(CHUNK)  # scribble over it
    assert got == [*SMALL_BEFORE, BIG, *SMALL_AFTER]
    _check_big(got[2])


def test_body_in_one_fed_bytes_object_is_not_copied() -> None:
    """When a big frame's whole body arrives in one immutable ``bytes`` the data field is
    a view of that very object."""
    frame = encode(BIG)
    dec = FrameDecoder()
    assert dec.feed(frame[:8]) == []
    rest = frame[8:] + encode(KeepAlive())
    got = dec.feed(rest)
    assert got == [BIG, KeepAlive()]
    cmd = got[0]
    assert isinstance(cmd, SegmentRead) and isinstance(cmd.data, memoryview)
    assert cmd.data.obj is rest


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    commands=st.lists(
        st.sampled_from(sorted(COMMAND_TYPES)).flatmap(
            lambda t: command_strategy(COMMAND_TYPES[t])
        ),
        min_size=1,
        max_size=8,
    ),
    cuts=st.lists(st.integers(0, 1 << 20), max_size=12),
    kinds=st.lists(st.sampled_from(["bytes", "bytearray", "view", "reused"]), min_size=1),
    threshold=st.sampled_from([0, 16, 1024, 64 * 1024]),
)
def test_any_slicing_and_buffer_type(
    commands: list[Command], cuts: list[int], kinds: list[str], threshold: int
) -> None:
    """Whatever the slicing, the type of the buffers fed (immutable bytes are kept as
    views, mutable ones copied) and the big-frame threshold, the same commands come out."""
    stream = b"".join(encode(c) for c in commands)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    dec = FrameDecoder(big_frame_threshold=threshold)
    scratch = bytearray(len(stream))
    got: list[Command] = []
    for i, (a, b) in enumerate(itertools.pairwise(points)):
        kind = kinds[i % len(kinds)]
        piece: Buffer
        if kind == "bytes":
            piece = stream[a:b]
        elif kind == "bytearray":
            piece = bytearray(stream[a:b])
        elif kind == "view":
            piece = memoryview(stream)[a:b]
        else:
            scratch[: b - a] = stream[a:b]
            piece = memoryview(scratch)[: b - a]
        got.extend(dec.feed(piece))
        scratch[:] = bytes(len(scratch))  # a reused read buffer gets overwritten
    assert got == commands
    assert dec.buffered == 0
