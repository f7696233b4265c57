"""Interop with kafka-python's legacy record code (code nobody here wrote): sets encoded
here decode there and the reverse, byte for byte wherever both write the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segmentstore_client.formats import kafka
from segmentstore_client.formats.kafka import Message

legacy = pytest.importorskip("kafka.record.legacy_records")
memory_records = pytest.importorskip("kafka.record.memory_records")

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def _needs(codec: str, magic: int) -> None:
    if codec == "lz4" and magic == 0:
        pytest.importorskip("xxhash")  # kafka-python's Kafka 0.8/0.9 lz4 framing


def their_set(msgs: list[Message], magic: int, codec: str, base: int = 0) -> bytes:
    """kafka-python's producer bytes for ``msgs``."""
    b = legacy.LegacyRecordBatchBuilder(magic, CODEC_IDS[codec], 1 << 30)
    for i, m in enumerate(msgs):
        offset = i if codec != "none" and magic == 1 else base + i
        assert b.append(offset, m.timestamp if magic else None, m.key, m.value) is not None
    return bytes(b.build())


def their_read(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    out = []
    records = memory_records.MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        for r in batch:
            assert r.validate_crc()
            out.append((r.offset, r.timestamp, r.key, r.value, r.timestamp_type))
    return out


MSGS = [
    Message(b"value-0", b"key-0", 1_700_000_000_000),
    Message(None, b"key-1", 1_700_000_000_005),
    Message(b"", None, 1_700_000_000_003),
    Message(bytes(range(256)) * 4, b"", 1_700_000_000_009),
]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_their_bytes_decode_here(magic: int, codec: str) -> None:
    _needs(codec, magic)
    msgs = MSGS if codec == "none" else [m.replace(value=m.value or b"") for m in MSGS]
    data = their_set(msgs, magic, codec, base=40)
    got = kafka.decode_message_set(data)
    assert [(m.key, m.value) for m in got] == [(m.key, m.value) for m in msgs]
    if magic == 1:
        assert [m.timestamp for m in got] == [m.timestamp for m in msgs]
    if codec == "none":
        assert [m.offset for m in got] == [40, 41, 42, 43]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_our_bytes_decode_there(magic: int, codec: str) -> None:
    _needs(codec, magic)
    msgs = MSGS if codec == "none" else [m.replace(value=m.value or b"") for m in MSGS]
    data = kafka.encode_message_set(msgs, codec=codec, magic=magic, base_offset=40)
    got = their_read(data)
    assert [(o, k, v) for o, _, k, v, _ in got] == [
        (40 + i, m.key, m.value) for i, m in enumerate(msgs)
    ]
    if magic == 1:
        assert [t for _, t, _, _, _ in got] == [m.timestamp for m in msgs]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "snappy", "lz4"])
def test_same_bytes_as_kafka_python(magic: int, codec: str) -> None:
    """gzip differs only in the header's mtime and level; the others match exactly when we
    place the wrapper where a producer does (offset 0, timestamp 0)."""
    _needs(codec, magic)
    msgs = MSGS if codec == "none" else [m.replace(value=m.value or b"") for m in MSGS]
    extra = {} if codec == "none" else {"wrapper_offset": 0, "wrapper_timestamp": 0}
    ours = kafka.encode_message_set(msgs, codec=codec, magic=magic, base_offset=0, **extra)
    assert ours == their_set(msgs, magic, codec)


def test_log_append_time_wrapper_reads_the_same_there() -> None:
    msgs = [Message(b"a", timestamp=1), Message(b"b", timestamp=2)]
    data = kafka.encode_message_set(
        msgs,
        codec="gzip",
        base_offset=9,
        timestamp_type=kafka.TimestampType.LOG_APPEND_TIME,
        log_append_time=777,
    )
    assert their_read(data) == [(9, 777, None, b"a", 1), (10, 777, None, b"b", 1)]
    assert [(m.offset, m.timestamp) for m in kafka.decode_message_set(data)] == [
        (9, 777),
        (10, 777),
    ]


_bytes = st.one_of(st.none(), st.binary(max_size=200))


@given(
    msgs=st.lists(
        st.builds(
            Message, value=st.binary(max_size=200), key=_bytes, timestamp=st.integers(0, 2**50)
        ),
        min_size=1,
        max_size=6,
    ),
    codec=st.sampled_from(["none", "gzip", "snappy", "lz4"]),
)
@settings(max_examples=60, deadline=None)
def test_round_trips_through_kafka_python(msgs: list[Message], codec: str) -> None:
    theirs = their_set(msgs, 1, codec)
    got = kafka.decode_message_set(theirs)
    assert [(m.key, m.value, m.timestamp) for m in got] == [
        (m.key, m.value, m.timestamp) for m in msgs
    ]
    ours = kafka.encode_message_set(msgs, codec=codec)
    assert [(k, v, t) for _, t, k, v, _ in their_read(ours)] == [
        (m.key, m.value, m.timestamp) for m in msgs
    ]
