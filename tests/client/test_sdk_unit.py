"""SDK pieces that need no server: endpoints, writer ids, block framing, event parsing
across arbitrary read boundaries, positions, error mapping."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
import segmentstore_client as sc
from segmentstore_client import errors, protocol, replies
from segmentstore_client.connection import ConnectionOptions, Endpoint
from segmentstore_client.naming import writer_uuid
from segmentstore_client.protocol import block_end, encode, frame_events
from segmentstore_client.reader import EventReader
from segmentstore_client.writer import EventWriter
from segmentstore_client.writer_blocks import Block, frame_block, trim_block
from segmentstore_client.writer_blocks import cut as _cut


def _offline_client() -> sc.Client:
    return sc.Client("tcp://127.0.0.1:1", ConnectionOptions())


def test_endpoint_parsing() -> None:
    assert Endpoint.parse("tcp://10.0.0.5:12346") == Endpoint("10.0.0.5", 12346)
    assert Endpoint.parse("localhost:7") == Endpoint("localhost", 7)
    assert Endpoint.parse("tcp://h") == Endpoint("h", 12345)
    assert str(Endpoint("h", 1)) == "tcp://h:1"
    with pytest.raises(ValueError):
        Endpoint.parse("http://h:1")
    with pytest.raises(ValueError):
        Endpoint.parse("tcp://:5")


def test_writer_ids() -> None:
    u = uuid.uuid4()
    assert writer_uuid(u) is u
    assert writer_uuid(str(u)) == u
    assert writer_uuid("spark/q1/p3") == writer_uuid("spark/q1/p3") != writer_uuid("spark/q1/p4")
    assert writer_uuid(None) != writer_uuid(None)


def test_block_frame_matches_the_codec() -> None:
    w = EventWriter(_offline_client(), "sc/st/0", "w1")
    payloads = [b"hello", b"world!", b"", b"x" * 1000]
    size = sum(map(len, payloads)) + 8 * len(payloads)
    frame = frame_block(w.writer_id.bytes, w._rid, payloads, list(map(len, payloads)), size, 41)
    records = frame_events(payloads)
    assert frame == encode(block_end(w.writer_id, records, len(payloads), 41, w._rid))
    head, tail = protocol.append_block_end_parts(w.writer_id, len(records), 4, 41, w._rid)
    assert head + records + tail == frame
    for n, last, rid in ((0, 0, 0), (1, -5, -1), (2**31 - 1, 2**63 - 1, 2**63 - 1)):
        data = frame_events([b"a" * 3] * 2)
        head, tail = protocol.append_block_end_parts(w.writer_id, len(data), n, last, rid)
        assert head + data + tail == encode(block_end(w.writer_id, data, n, last, rid))
    # trimming drops the events the server holds and keeps the frame valid
    loop = asyncio.new_event_loop()
    block = Block(41, 4, frame, size, loop.create_future())
    loop.close()
    freed = trim_block(block, 2, w.writer_id.bytes, w._rid)
    assert freed == 8 + 5 + 8 + 6
    kept = frame_events(payloads[2:])
    assert block.frame == encode(block_end(w.writer_id, kept, 2, 41, w._rid))
    assert (block.count, block.size) == (2, len(kept))
    decoded = protocol.decode(frame)
    assert isinstance(decoded, protocol.AppendBlockEnd)
    assert bytes(decoded.data) == records and decoded.last_event_number == 41


@pytest.mark.parametrize("seed", range(30))
def test_block_cuts_match_prefix_sums(seed: int) -> None:
    """_cut finds the same block end as a plain prefix-sum search, for uniform, noisy,
    skewed and tiny/huge mixes of event sizes (its guess-and-step path and fallback)."""
    rng = random.Random(seed)
    n = (1, 2, 7, 300, 8192)[seed // 5 % 5]
    shape = seed % 5
    if shape == 0:
        sizes = [100] * n
    elif shape == 1:
        sizes = [rng.randint(80, 120) for _ in range(n)]
    elif shape == 2:
        sizes = [rng.choice([0, 10, 100_000]) for _ in range(n)]
    elif shape == 3:  # a guess from the average lands far off: the fallback's case
        sizes = [0] * (n // 2) + [rng.randint(5000, 10_000) for _ in range(n - n // 2)]
    else:
        sizes = [rng.randint(0, 1000) for _ in range(n)]
    for k in range(20):
        i = rng.randrange(n)
        rest = sum(sizes[i:]) + 8 * (n - i)
        room = rng.randint(1, rest if k % 4 else 2 * rest)  # mostly a cut inside
        got = 0
        j = i
        while j < n and got < room:  # the reference: add events until room is reached
            got += sizes[j] + 8
            j += 1
        assert _cut(sizes, i, room, rest) == (j, got)
    # Empty events, then large ones: the guess is thousands of events off (prefix sums).
    sizes = [0] * 4096 + [8000] * 4096
    assert _cut(sizes, 0, 100_000, sum(sizes) + 8 * 8192) == (4096 + 9, 32_768 + 9 * 8008)


def test_writer_argument_checks() -> None:
    c = _offline_client()
    with pytest.raises(ValueError):
        EventWriter(c, "s", block_size=10)
    with pytest.raises(ValueError):
        EventWriter(c, "s", block_size=1 << 20, max_buffered_bytes=1 << 20)
    with pytest.raises(ValueError):
        EventWriter(c, "s", first_event_number=-1)


@pytest.mark.parametrize("seed", range(20))
def test_reader_parses_records_cut_anywhere(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 8, 9, 100, 5000])) for _ in range(60)]
    data = frame_events(payloads)
    start = 1000  # segment offset of the first record
    reader = EventReader(_offline_client(), "s", start)
    pos = 0
    while pos < len(data):
        step = rng.choice([1, 2, 3, 8, 13, 100, 4096, 20000])
        reader._parse(data[pos : pos + step])
        pos += step
    events = list(reader._events)
    assert [e.data for e in events] == payloads
    offset = start
    for e in events:
        assert e.offset == offset
        offset = e.next_offset
    assert not reader._parts


def test_reader_rejects_non_event_data() -> None:
    reader = EventReader(_offline_client(), "s", 0)
    with pytest.raises(sc.CorruptData, match="raw bytes"):
        reader._parse(b"\x00\x00\x00\x07\x00\x00\x00\x01x")
    assert not sc.CorruptData("x").retriable


def test_position_json() -> None:
    p = sc.Position("sc/st/0.#epoch.0", 4096)
    assert sc.Position.from_json(p.to_json()) == p
    assert p.to_json() == '{"v":1,"segment":"sc/st/0.#epoch.0","offset":4096}'
    for bad in ("[]", '{"v":2,"segment":"s","offset":1}', '{"v":1,"segment":"s","offset":-1}', "{"):
        with pytest.raises(ValueError):
            sc.Position.from_json(bad)
    with pytest.raises(ValueError, match="not 'b'"):
        EventReader(_offline_client(), "b", sc.Position("a", 0))


def test_error_replies_map_to_named_exceptions() -> None:
    seg = "sc/st/0"
    w = uuid.uuid4()
    cases: list[tuple[object, type[errors.SegmentStoreError], bool]] = [
        (protocol.NoSuchSegment(1, seg, "", -1), sc.NoSuchSegment, False),
        (protocol.SegmentAlreadyExists(1, seg), sc.SegmentAlreadyExists, False),
        (protocol.SegmentIsSealed(1, seg, "", 5), sc.SegmentSealed, False),
        (protocol.SegmentIsTruncated(1, seg, 100, "", 50), sc.SegmentTruncated, False),
        (protocol.WrongHost(1, seg), sc.WrongHost, True),
        (protocol.AuthTokenCheckFailed(1, "", 1), sc.TokenExpired, True),
        (protocol.AuthTokenCheckFailed(1, "", 0), sc.AuthenticationFailed, False),
        (protocol.OperationUnsupported(1, "op"), sc.OperationUnsupported, False),
        (protocol.ErrorMessage(1, seg, "bad", 0), sc.InvalidArgument, False),
        (protocol.ErrorMessage(1, seg, "append failed: disk full", -1), sc.ServerFailure, True),
        (protocol.ConditionalCheckFailed(w, 3, 1), sc.ConditionalCheckFailed, False),
        (protocol.InvalidEventNumber(w, 1, "", 3), sc.WriterFenced, False),
        (protocol.TableKeyDoesNotExist(1, seg, ""), sc.TableKeyDoesNotExist, False),
        (protocol.TableKeyBadVersion(1, seg, ""), sc.TableKeyBadVersion, False),
        (protocol.TableSegmentNotEmpty(1, seg, ""), sc.TableNotEmpty, False),
        (protocol.SegmentCreated(1, seg), errors.UnexpectedReply, False),
    ]
    for reply, kind, retriable in cases:
        err = replies.error_from_reply(reply)
        assert type(err) is kind, (reply, err)
        assert err.retriable is retriable, err
        assert isinstance(err, sc.SegmentStoreError)
    truncated = replies.error_from_reply(protocol.SegmentIsTruncated(1, seg, 100, "", 50))
    assert isinstance(truncated, sc.SegmentTruncated) and truncated.start_offset == 100
    sealed = replies.error_from_reply(protocol.SegmentIsSealed(1, seg, "", 5))
    assert isinstance(sealed, sc.SegmentSealed) and sealed.event_number == 5
    assert sc.ConnectionLost("x").retriable and sc.Timeout("x").retriable
    assert isinstance(sc.Timeout("x"), TimeoutError)
    assert sc.ConnectFailed("x").retriable
    assert not sc.IncompatibleServer("x").retriable
    assert isinstance(sc.EventTooLarge("x"), ValueError)
