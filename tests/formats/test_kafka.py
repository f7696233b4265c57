"""Kafka 0.10 messages: golden bytes from the spec's table, Hypothesis round trips, every
single-bit flip and every truncation detected, compressed wrappers and their 0.10 rules."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segmentstore_client.formats import _compression, kafka
from segmentstore_client.formats.errors import (
    CrcMismatch,
    FormatError,
    InvalidLayout,
    TooLarge,
    TruncatedInput,
)
from segmentstore_client.formats.kafka import Message, TimestampType

CODECS = ["none", "gzip", "snappy", "lz4"]


def spec_message(
    magic: int, attributes: int, timestamp: int | None, key: bytes | None, value: bytes | None
) -> bytes:
    """A message built field by field from the spec's table (independent of the module)."""
    body = bytes([magic, attributes])
    if magic == 1:
        assert timestamp is not None
        body += timestamp.to_bytes(8, "big", signed=True)
    body += (-1 if key is None else len(key)).to_bytes(4, "big", signed=True) + (key or b"")
    body += (-1 if value is None else len(value)).to_bytes(4, "big", signed=True) + (value or b"")
    return zlib.crc32(body).to_bytes(4, "big") + body


# -- golden bytes --------------------------------------------------------------------------


def test_golden_literal_vectors() -> None:
    # CRC | magic 1 | attrs 0x08 (log-append time) | ts 0x0102030405060708 | key | value
    assert kafka.encode_message(
        b"VAL", b"KEY", timestamp=0x0102030405060708, attributes=0x08
    ) == bytes.fromhex("2b96914901080102030405060708000000034b45590000000356414c")
    # magic 0: no timestamp; null key
    assert kafka.encode_message(b"VAL", None, magic=0) == bytes.fromhex(
        "778086820000ffffffff0000000356414c"
    )
    # empty (not null) key, null value, no timestamp
    assert kafka.encode_message(None, b"", timestamp=-1) == bytes.fromhex(
        "c19cd4750100ffffffffffffffff00000000ffffffff"
    )


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("key", [None, b"", b"key-\x00\xff"])
@pytest.mark.parametrize("value", [None, b"", b"value\x01\x02" * 3])
@pytest.mark.parametrize("bit", [None, 0, 1, 2, 3, 4, 5, 6, 7])
def test_golden_every_field_and_attribute_bit(
    magic: int, key: bytes | None, value: bytes | None, bit: int | None
) -> None:
    attributes = 0 if bit is None else 1 << bit
    if bit == 2:  # codec 4: no such codec in Kafka 0.10
        with pytest.raises(ValueError, match="no codec"):
            kafka.encode_message(value, key, attributes=attributes, magic=magic)
        with pytest.raises(InvalidLayout, match="unknown codec 4"):
            kafka.decode_message(spec_message(magic, attributes, 0 if magic else None, key, value))
        return
    ts = 0x1122334455667788 if magic == 1 else kafka.NO_TIMESTAMP
    expected = spec_message(magic, attributes, ts if magic == 1 else None, key, value)
    got = kafka.encode_message(value, key, timestamp=ts, attributes=attributes, magic=magic)
    assert got == expected
    m = kafka.decode_message(got)
    assert (m.magic, m.attributes, m.timestamp, m.key, m.value) == (
        magic,
        attributes,
        ts,
        key,
        value,
    )
    assert m.crc == int.from_bytes(expected[:4], "big")
    assert m.codec == attributes & 7
    if magic == 0:
        assert m.timestamp_type is None
    else:
        assert m.timestamp_type == TimestampType((attributes >> 3) & 1)


def test_golden_message_set_entries() -> None:
    msgs = [Message(b"a", b"k", 10), Message(None, None, 11), Message(b"c", None, 12)]
    data = kafka.encode_message_set(msgs, base_offset=1000)
    expected = b""
    for i, m in enumerate(msgs):
        body = spec_message(1, 0, m.timestamp, m.key, m.value)
        expected += struct.pack(">qi", 1000 + i, len(body)) + body
    assert data == expected
    got = kafka.decode_message_set(data)
    assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == [
        (1000, b"k", b"a", 10),
        (1001, None, None, 11),
        (1002, None, b"c", 12),
    ]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
def test_golden_wrapper_layout(codec: str, magic: int) -> None:
    """The wrapper's value decompresses to a plain message set with 0.10's inner offsets."""
    msgs = [Message(b"v%d" % i, b"k", 100 + i if magic else -1) for i in range(3)]
    data = kafka.encode_message_set(msgs, codec=codec, magic=magic, base_offset=50)
    offset, size = struct.unpack_from(">qi", data)
    assert offset == 52 and size == len(data) - 12  # wrapper at the last inner offset
    w = kafka.decode_message(data[12:])
    assert w.key is None and w.codec == kafka.Codec[codec.upper()]
    assert w.timestamp == (102 if magic else -1)  # create time: the largest inner timestamp
    assert w.value is not None
    inner = _compression.decompress(w.codec, w.value, magic, 1 << 20)
    first = 0 if magic == 1 else 50  # relative inner offsets in magic 1
    assert inner == kafka.encode_message_set(msgs, magic=magic, base_offset=first)
    got = kafka.decode_message_set(data)
    assert [(m.offset, m.value, m.timestamp) for m in got] == [
        (50 + i, b"v%d" % i, 100 + i if magic else -1) for i in range(3)
    ]


def test_log_append_time_wrapper_stamps_inner_messages() -> None:
    msgs = [Message(b"a", timestamp=1), Message(b"b", timestamp=2)]
    data = kafka.encode_message_set(
        msgs,
        codec="gzip",
        base_offset=7,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=999,
    )
    w = kafka.decode_message(data[12:])
    assert w.attributes == 0x09 and w.timestamp == 999
    got = kafka.decode_message_set(data)
    assert [(m.offset, m.timestamp, m.timestamp_type) for m in got] == [
        (7, 999, TimestampType.LOG_APPEND_TIME),
        (8, 999, TimestampType.LOG_APPEND_TIME),
    ]


# -- round trips --------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_message = st.builds(
    Message,
    value=_bytes,
    key=_bytes,
    timestamp=st.integers(-1, 2**63 - 1),
    attributes=st.sampled_from([0, 0x08, 0x10, 0x80, 0xF0]),
)


@given(m=_message, magic=st.sampled_from([0, 1]))
@settings(max_examples=300, deadline=None)
def test_round_trip_message(m: Message, magic: int) -> None:
    ts = m.timestamp if magic == 1 else -1
    data = kafka.encode_message(m.value, m.key, timestamp=ts, attributes=m.attributes, magic=magic)
    got = kafka.decode_message(data)
    assert (got.value, got.key, got.timestamp, got.attributes, got.magic) == (
        m.value,
        m.key,
        ts,
        m.attributes,
        magic,
    )
    assert got.encode() == data


@given(
    msgs=st.lists(_message, min_size=1, max_size=8),
    codec=st.sampled_from(CODECS),
    magic=st.sampled_from([0, 1]),
    base=st.integers(0, 2**40),
)
@settings(max_examples=150, deadline=None)
def test_round_trip_message_set(msgs: list[Message], codec: str, magic: int, base: int) -> None:
    if codec != "none":
        msgs = [m.replace(value=m.value or b"") for m in msgs]
    data = kafka.encode_message_set(msgs, codec=codec, magic=magic, base_offset=base)
    got = kafka.decode_message_set(data)
    assert [m.offset for m in got] == list(range(base, base + len(msgs)))
    assert [(m.key, m.value) for m in got] == [(m.key, m.value) for m in msgs]
    if magic == 1:
        assert [m.timestamp for m in got] == [m.timestamp for m in msgs]
    # Streaming in small pieces gives the same messages.
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    assert list(kafka.iter_messages(chunks)) == got


def test_json_rendering_round_trip() -> None:
    m = Message(b"\xff\x00", key=b"text", timestamp=5, attributes=0x08, offset=3)
    d = m.to_dict()
    assert d["key"] == "text" and d["value"] == {"base64": "/wA="}
    assert d["timestamp_type"] == "log_append_time" and d["codec"] == "none"
    assert Message.from_dict(d) == m
    assert Message.from_dict(__import__("json").loads(m.to_json())) == m


# -- corruption ---------------------------------------------------------------------------


def _flips(data: bytes, start: int = 0) -> list[bytes]:
    out = []
    for i in range(start, len(data)):
        for b in range(8):
            x = bytearray(data)
            x[i] ^= 1 << b
            out.append(bytes(x))
    return out


@pytest.mark.parametrize("magic", [0, 1])
def test_every_bit_flip_in_a_message_is_detected(magic: int) -> None:
    ts = 1_700_000_000_000 if magic else -1
    data = kafka.encode_message(b"value!" * 5, b"key", timestamp=ts, attributes=0, magic=magic)
    for bad in _flips(data):
        with pytest.raises(FormatError):
            kafka.decode_message(bad)


@pytest.mark.parametrize("codec", CODECS)
def test_every_bit_flip_after_the_offset_field_is_detected(codec: str) -> None:
    """The offset (first 8 bytes of an entry) is not covered by any check in Kafka's
    format; every other bit of an entry is, for plain and compressed sets alike."""
    msgs = [Message(b"value-%d" % i, b"k%d" % i, 1000 + i) for i in range(3)]
    data = kafka.encode_message_set(msgs, codec=codec)
    size = struct.unpack_from(">i", data, 8)[0] + 12  # the first entry
    for bad in _flips(data[:size], start=8):
        with pytest.raises(FormatError):
            kafka.decode_message_set(bad + data[size:])


def test_every_truncation_is_a_named_error() -> None:
    data = kafka.encode_message_set([Message(b"abc", b"k", 1), Message(b"def", None, 2)])
    one = struct.unpack_from(">i", data, 8)[0] + 12
    for n in range(1, len(data)):
        if n == one:
            assert len(kafka.decode_message_set(data[:n])) == 1
            continue
        with pytest.raises(TruncatedInput):
            kafka.decode_message_set(data[:n])
    msg = data[12:one]
    for n in range(len(msg)):
        with pytest.raises(FormatError):
            kafka.decode_message(msg[:n])


def test_bad_layouts_are_named_errors() -> None:
    good = kafka.encode_message(b"v", b"k", timestamp=1)
    with pytest.raises(InvalidLayout, match="magic 2"):
        kafka.decode_message(good[:4] + b"\x02" + good[5:])
    with pytest.raises(InvalidLayout, match="stray"):
        kafka.decode_message(good + b"\x00")
    with pytest.raises(CrcMismatch):
        kafka.decode_message(b"\x00\x00\x00\x00" + good[4:])
    entry = struct.pack(">qi", 0, 2**31 - 1)
    with pytest.raises(TooLarge):
        kafka.MessageSetDecoder(max_message_size=1 << 20).feed(entry)
    with pytest.raises(InvalidLayout, match="below the minimum"):
        kafka.decode_message_set(struct.pack(">qi", 0, 3) + b"abc")


def test_wrapper_rules_are_enforced() -> None:
    inner = kafka.encode_message_set([Message(b"x")])
    nested = kafka.encode_message_set([Message(b"x")], codec="gzip")

    def wrapper(value: bytes | None, magic: int = 1) -> bytes:
        body = kafka.encode_message(value, None, timestamp=0, attributes=1, magic=1)
        return struct.pack(">qi", 0, len(body)) + body

    gz = _compression.compress
    with pytest.raises(InvalidLayout, match="null value"):
        kafka.decode_message_set(wrapper(None))
    with pytest.raises(InvalidLayout, match="compressed message"):
        kafka.decode_message_set(wrapper(gz(1, nested, 1)))
    with pytest.raises(InvalidLayout, match="no messages"):
        kafka.decode_message_set(wrapper(gz(1, b"", 1)))
    with pytest.raises(InvalidLayout, match="inner set"):
        kafka.decode_message_set(wrapper(gz(1, inner[:-1], 1)))
    with pytest.raises(InvalidLayout, match="does not decompress"):
        kafka.decode_message_set(wrapper(b"not gzip at all"))
    magic0 = kafka.encode_message_set([Message(b"x")], magic=0)
    with pytest.raises(InvalidLayout, match="wrapper holds the magic 0 message"):
        kafka.decode_message_set(wrapper(gz(1, magic0, 1)))
    bomb = gz(1, kafka.encode_message_set([Message(bytes(4 << 20))]), 1)
    with pytest.raises(InvalidLayout, match="expands beyond"):
        kafka.MessageSetDecoder(max_message_size=1 << 20).feed(wrapper(bomb))


def test_encoder_refuses_what_kafka_cannot_carry() -> None:
    with pytest.raises(ValueError, match="magic"):
        kafka.encode_message(b"v", magic=2)
    with pytest.raises(ValueError, match="no timestamp"):
        kafka.encode_message(b"v", magic=0, timestamp=5)
    with pytest.raises(ValueError, match="one byte"):
        kafka.encode_message(b"v", attributes=256)
    with pytest.raises(ValueError, match="unknown Kafka codec"):
        kafka.encode_message_set([Message(b"v")], codec="zstd")
    with pytest.raises(ValueError, match="at least one"):
        kafka.encode_message_set([], codec="gzip")


def test_missing_codec_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_snappy(name: str, *a: object, **k: object) -> object:
        if name == "snappy":
            raise ImportError(name)
        return real(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_snappy)
    assert not kafka.codec_available("snappy")
    with pytest.raises(kafka.CodecUnavailable, match="python-snappy"):
        kafka.encode_message_set([Message(b"v")], codec="snappy")


def test_xxh32_known_vectors() -> None:
    assert _compression.xxh32(b"") == 0x02CC5D05
    assert _compression.xxh32(b"a") == 0x550D7456
    assert _compression.xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_decoder_returns_good_messages_before_a_damaged_one() -> None:
    good = kafka.encode_message_set([Message(b"a"), Message(b"b")])
    bad = bytearray(kafka.encode_message_set([Message(b"c")], base_offset=2))
    bad[-1] ^= 1
    dec = kafka.MessageSetDecoder()
    assert [m.value for m in dec.feed(good + bytes(bad))] == [b"a", b"b"]
    with pytest.raises(CrcMismatch, match=f"entry at byte {len(good)} of the input"):
        dec.feed(b"")
    with pytest.raises(CrcMismatch):
        dec.finish()
    with pytest.raises(CrcMismatch):
        kafka.MessageSetDecoder().feed(bytes(bad))
