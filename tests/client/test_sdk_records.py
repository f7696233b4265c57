"""Record envelope: round trips with every codec, CRC-32C catches every flipped bit,
JSON rendering, batch helpers."""

from __future__ import annotations

import json
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segmentstore_client import CodecUnavailable, CorruptRecord, records
from segmentstore_client.records import Operation, Record, TimestampType

CODECS = ["none", "gzip", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec: str) -> None:
    value = b'{"order": 17, "items": ["a", "b"]}' * 50
    rec = Record(
        value,
        key=b"order-17",
        headers={"source": b"web", "trace": bytes(range(256))},
        timestamp_ns=1_700_000_000_123_456_789,
        timestamp_type=TimestampType.LOG_APPEND,
        operation=Operation.DELETE,
        end_of_window=True,
        codec=codec,
    )
    payload = rec.encode()
    if codec != "none":
        assert len(payload) < len(value)  # the value really is compressed
    assert records.decode(payload) == rec
    assert records.is_record(payload)


@pytest.mark.parametrize("codec", CODECS)
def test_defaults_and_empty_parts(codec: str) -> None:
    payload = records.encode(b"", codec=codec, timestamp_ns=0)
    rec = records.decode(payload)
    assert rec == Record(b"", None, {}, 0, TimestampType.CREATE, Operation.UPSERT, False, codec)
    empty_key = records.decode(records.encode(b"v", b"", timestamp_ns=5))
    assert empty_key.key == b"" and empty_key.value == b"v"


def test_timestamp_defaults_to_now() -> None:
    import time

    before = time.time_ns()
    rec = records.decode(records.encode(b"x"))
    assert rec.timestamp_ns is not None and before <= rec.timestamp_ns <= time.time_ns()


@pytest.mark.parametrize("codec", CODECS)
def test_every_flipped_bit_fails_the_crc(codec: str) -> None:
    payload = records.encode(
        b"value-bytes", key=b"k", headers={"h": b"1"}, timestamp_ns=42, codec=codec
    )
    for i in range(len(payload)):
        for bit in range(8):
            broken = bytearray(payload)
            broken[i] ^= 1 << bit
            with pytest.raises(CorruptRecord):
                records.decode(bytes(broken))
            assert not records.is_record(bytes(broken))


def test_truncated_and_garbage_inputs() -> None:
    payload = records.encode(b"value", key=b"key", timestamp_ns=1)
    for n in range(len(payload)):
        with pytest.raises(CorruptRecord):
            records.decode(payload[:n])
    with pytest.raises(CorruptRecord):
        records.decode(b"not a record at all, just some bytes")


def test_crc32c_known_vector() -> None:
    assert records.crc32c(b"123456789") == 0xE3069283


def test_json_rendering_text_and_base64() -> None:
    rec = Record(
        b"\xff\x00binary",
        key=b"text-key",
        headers={"utf8": "h\u00e9llo".encode(), "bin": b"\x80"},
        timestamp_ns=7,
        codec="gzip",
    )
    obj = json.loads(rec.to_json())
    assert obj["key"] == "text-key"
    assert obj["value"] == {"base64": "/wBiaW5hcnk="}
    assert obj["headers"] == {"utf8": "h\u00e9llo", "bin": {"base64": "gA=="}}
    assert obj["codec"] == "gzip" and obj["timestamp_type"] == "create"
    assert obj["operation"] == "upsert" and obj["end_of_window"] is False
    assert Record.from_json(rec.to_json()) == rec
    assert json.loads(Record(b"v").to_json())["key"] is None
    with pytest.raises(ValueError):
        Record.from_json('{"value": 3}')


@pytest.mark.parametrize("codec", CODECS)
def test_batch_helpers_match_single_encode(codec: str) -> None:
    recs = [
        Record(b"v%d" % i, key=None if i % 3 == 0 else b"k%d" % i, timestamp_ns=i, codec=codec)
        for i in range(100)
    ]
    batch = records.encode_batch(recs)
    assert batch == [r.encode() for r in recs]
    assert records.decode_batch(batch) == recs
    values = [b"value-%d" % i for i in range(50)]
    keys = [b"key-%d" % i if i % 2 else None for i in range(50)]
    fast = records.encode_values(values, keys, timestamp_ns=99, codec=codec)
    assert fast == [
        records.encode(v, k, timestamp_ns=99, codec=codec)
        for v, k in zip(values, keys, strict=True)
    ]
    no_keys = records.encode_values(values, timestamp_ns=99, codec=codec)
    assert [r.value for r in records.decode_batch(no_keys)] == values


def test_missing_codec_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    monkeypatch.setattr(records, "_local", threading.local())  # drop cached compressors
    for codec, package in (("lz4", "lz4"), ("zstd", "zstandard")):
        assert not records.codec_available(codec)
        with pytest.raises(CodecUnavailable, match=package):
            records.encode(b"x", codec=codec)
    assert records.codec_available("gzip") and records.codec_available("none")
    assert not CodecUnavailable("x").retriable


def test_unknown_codec_name() -> None:
    with pytest.raises(ValueError, match="unknown codec"):
        records.encode(b"x", codec="snappy")


@settings(max_examples=200, deadline=None)
@given(
    value=st.binary(max_size=300),
    key=st.none() | st.binary(max_size=40),
    headers=st.dictionaries(st.text(max_size=10), st.binary(max_size=20), max_size=4),
    ts=st.integers(-(2**63), 2**63 - 1),
    codec=st.sampled_from(CODECS),
    op=st.sampled_from(list(Operation)),
    tt=st.sampled_from(list(TimestampType)),
    eow=st.booleans(),
)
def test_round_trip_property(
    value: bytes,
    key: bytes | None,
    headers: dict[str, bytes],
    ts: int,
    codec: str,
    op: Operation,
    tt: TimestampType,
    eow: bool,
) -> None:
    rec = Record(value, key, headers, ts, tt, op, eow, codec)
    assert records.decode(rec.encode()) == rec
    assert Record.from_dict(json.loads(rec.to_json())) == rec
