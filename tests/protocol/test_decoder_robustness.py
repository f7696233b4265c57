"""Hostile input: whatever bytes arrive, ``FrameDecoder`` and ``decode`` either return
commands or raise a :class:`RemoteProtocolError` subclass (never ``struct.error``,
``IndexError``, ``UnicodeDecodeError``, ``MemoryError``...), never hang, reject a bad
header before its body arrives, and stay poisoned after an error."""

from __future__ import annotations

import itertools
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from segmentstore_client.errors import (
    FrameTooLarge,
    MalformedCommand,
    RemoteProtocolError,
    UnknownCommandType,
)
from segmentstore_client.protocol import (
    COMMAND_TYPES,
    MAX_PAYLOAD_FROM_SERVER,
    MAX_PAYLOAD_TO_SERVER,
    AppendBlockEnd,
    Command,
    FrameDecoder,
    Hello,
    KeepAlive,
    SegmentRead,
    decode,
    encode,
)

from .strategies import command_strategy

pytestmark = pytest.mark.timeout(60)

FUZZ = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
KNOWN = sorted(COMMAND_TYPES)
UNKNOWN = [6, 13, 19, 22, 27, 43, 49, 54, 62, 67, 72, 73, 92, 99, 101, 127, -7, -126, -128]
VALID = encode(Hello(17, 5))


def header(type_code: int, length: int) -> bytes:
    return struct.pack(">ii", type_code, length)


def feed_checked(dec: FrameDecoder, chunks: list[bytes]) -> tuple[list[Command], bool]:
    """Feed every chunk; on an error check that it is a remote protocol error and that the
    decoder is poisoned, then stop. Returns what was decoded, and whether it failed."""
    out: list[Command] = []
    for chunk in chunks:
        try:
            out.extend(dec.feed(chunk))
        except RemoteProtocolError as e:
            with pytest.raises(type(e)):
                dec.feed(VALID)
            with pytest.raises(type(e)):
                dec.feed(b"")
            return out, True
    return out, False


def decode_checked(frame: bytes) -> Command | None:
    try:
        return decode(frame)
    except RemoteProtocolError:
        return None


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# --- random bytes -----------------------------------------------------------------------------


@FUZZ
@given(
    data=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    server=st.booleans(),
)
def test_random_bytes(data: bytes, cuts: list[int], server: bool) -> None:
    dec = FrameDecoder(MAX_PAYLOAD_TO_SERVER if server else MAX_PAYLOAD_FROM_SERVER)
    feed_checked(dec, chunked(data, cuts))
    decode_checked(data)


@FUZZ
@given(
    type_code=st.sampled_from(KNOWN),
    payload=st.binary(max_size=200),
    trailer=st.binary(max_size=40),
    cuts=st.lists(st.integers(0, 300), max_size=4),
)
def test_garbage_payload_under_a_valid_header(
    type_code: int, payload: bytes, trailer: bytes, cuts: list[int]
) -> None:
    """A known type code and a correct length, with random payload bytes."""
    frame = header(type_code, len(payload)) + payload
    one = decode_checked(frame)
    if one is not None:
        assert type(one) is COMMAND_TYPES[type_code]
    got, failed = feed_checked(FrameDecoder(), chunked(frame + trailer, cuts))
    if one is not None and not failed:
        assert got[:1] == [one]
    if one is None and len(frame) >= 8:
        assert failed  # decode() refused the frame; so must the stream decoder


@FUZZ
@given(
    command=st.sampled_from(KNOWN).flatmap(lambda t: command_strategy(COMMAND_TYPES[t])),
    data=st.data(),
)
def test_truncated_and_corrupted_frames(command: Command, data: st.DataObject) -> None:
    frame = encode(command)
    payload = frame[8:]
    # Cut the payload and fix the header: optional trailing fields may legally go missing,
    # anything else must be a MalformedCommand.
    cut = data.draw(st.integers(0, len(payload)), label="cut")
    short = header(command.TYPE, cut) + payload[:cut]
    decode_checked(short)
    feed_checked(FrameDecoder(big_frame_threshold=16), [short[:9], short[9:]])
    # Overwrite a few bytes anywhere after the header.
    if payload:
        corrupt = bytearray(frame)
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            i = data.draw(st.integers(8, len(frame) - 1), label="at")
            corrupt[i] = data.draw(st.integers(0, 255), label="byte")
        decode_checked(bytes(corrupt))
        feed_checked(FrameDecoder(), [bytes(corrupt)])


@FUZZ
@given(
    type_code=st.sampled_from(KNOWN),
    declared=st.integers(0, 400),
    payload=st.binary(max_size=400),
)
def test_lying_length(type_code: int, declared: int, payload: bytes) -> None:
    """A header whose length disagrees with what follows: the decoder either waits for
    more or decodes the declared bytes; decode() refuses the mismatch."""
    frame = header(type_code, declared) + payload
    dec = FrameDecoder()
    feed_checked(dec, [frame])
    if declared != len(payload):
        with pytest.raises(MalformedCommand):
            decode(frame)


# --- headers ------------------------------------------------------------------------------


@pytest.mark.parametrize("type_code", UNKNOWN)
def test_unknown_type_is_rejected_from_the_header(type_code: int) -> None:
    assert type_code not in COMMAND_TYPES
    dec = FrameDecoder()
    with pytest.raises(UnknownCommandType):
        dec.feed(header(type_code, 4))
    with pytest.raises(UnknownCommandType):
        dec.feed(encode(KeepAlive()))  # poisoned
    with pytest.raises(UnknownCommandType):
        decode(header(type_code, 0))


@FUZZ
@given(type_code=st.integers(-(2**31), 2**31 - 1).filter(lambda t: t not in COMMAND_TYPES))
def test_any_unknown_type_is_rejected(type_code: int) -> None:
    with pytest.raises(UnknownCommandType):
        FrameDecoder().feed(header(type_code, 0))


@pytest.mark.parametrize(
    ("max_payload", "length"),
    [
        (MAX_PAYLOAD_FROM_SERVER, -1),
        (MAX_PAYLOAD_FROM_SERVER, -(2**31)),
        (MAX_PAYLOAD_FROM_SERVER, MAX_PAYLOAD_FROM_SERVER + 1),
        (MAX_PAYLOAD_FROM_SERVER, 2**31 - 1),
        (MAX_PAYLOAD_TO_SERVER, MAX_PAYLOAD_TO_SERVER + 1),  # 16 777 208: the Java server's limit
        (MAX_PAYLOAD_TO_SERVER, -5),
        (1000, 1001),
    ],
)
def test_bad_length_is_rejected_from_the_header_alone(max_payload: int, length: int) -> None:
    dec = FrameDecoder(max_payload)
    assert dec.feed(header(10, length)[:7]) == []  # not a whole header yet
    with pytest.raises(FrameTooLarge):
        dec.feed(header(10, length)[7:])  # the 8th byte completes it: no body needed
    with pytest.raises(FrameTooLarge):
        dec.feed(VALID)


def test_length_at_the_maximum_is_accepted() -> None:
    data = bytes(MAX_PAYLOAD_TO_SERVER - 25)  # 25 = the rest of this SegmentRead's payload
    frame = encode(SegmentRead("s", 0, False, False, data, 1))
    assert len(frame) == 8 + MAX_PAYLOAD_TO_SERVER
    dec = FrameDecoder(MAX_PAYLOAD_TO_SERVER)
    assert dec.feed(frame[:8]) == []  # waits for the body
    mv = memoryview(frame)
    got = [c for i in range(8, len(frame), 1 << 20) for c in dec.feed(mv[i : i + (1 << 20)])]
    assert len(got) == 1
    assert isinstance(got[0], SegmentRead)
    assert len(got[0].data) == len(data)


def test_error_after_good_frames_in_one_feed_poisons() -> None:
    dec = FrameDecoder()
    with pytest.raises(UnknownCommandType):
        dec.feed(VALID + VALID + header(72, 0))
    with pytest.raises(UnknownCommandType):
        dec.feed(VALID)


def test_malformed_big_frame_poisons() -> None:
    """A frame on the big-frame path (own buffer) whose payload does not parse."""
    # segment "s", offset, two flags, then a data length far beyond the frame
    body = b"\x00\x01s" + bytes(10) + b"\x7f\xff\xff\xff" + bytes(100_000)
    frame = header(SegmentRead.TYPE, len(body)) + body
    dec = FrameDecoder(big_frame_threshold=1024)
    assert dec.feed(frame[:5000]) == []
    with pytest.raises(MalformedCommand):
        dec.feed(frame[5000:])
    with pytest.raises(MalformedCommand):
        dec.feed(VALID)


@pytest.mark.parametrize("length", [-1, -8, -(2**31), 100, 2**31 - 1])
@pytest.mark.parametrize("view", [False, True], ids=["copied", "view"])
def test_byte_array_length_outside_the_frame_is_malformed(length: int, view: bool) -> None:
    """AppendBlockEnd's data length (read inline with the fields before it): negative or
    past the frame's end is refused, never read as an empty or shifted array."""
    good = encode(AppendBlockEnd(uuid.UUID(int=7), 4, b"abcd", 1, 1, 9))
    frame = bytearray(good)
    frame[28:32] = struct.pack(">i", length)  # 8 header + 16 writer + 4 sizeOfWholeEvents
    assert decode(good) == AppendBlockEnd(uuid.UUID(int=7), 4, b"abcd", 1, 1, 9)
    with pytest.raises(MalformedCommand):
        decode(bytes(frame))
    dec = FrameDecoder(big_frame_threshold=16 if view else 64 * 1024)
    with pytest.raises(MalformedCommand):
        dec.feed(bytes(frame[:20]))
        dec.feed(bytes(frame[20:]))
    # SegmentRead: the array is the last mandatory field (only an optional one follows).
    good = encode(SegmentRead("s", 0, True, False, b"abcd", 3))
    frame = bytearray(good)
    frame[21:25] = struct.pack(">i", length)  # 8 header + 3 name + 8 offset + 2 flags
    with pytest.raises(MalformedCommand):
        decode(bytes(frame))


def test_incomplete_frames_just_wait() -> None:
    frame = encode(SegmentRead("s", 0, False, False, bytes(300), 1))
    dec = FrameDecoder(big_frame_threshold=100)
    for i in range(len(frame) - 1):
        assert dec.feed(frame[i : i + 1]) == []
    assert dec.buffered == len(frame) - 1
    assert dec.feed(frame[-1:]) == [decode(frame)]
    assert dec.buffered == 0
