"""Databus event format: v1 and v2 bytes at the documented offsets (golden layouts built
field by field here, independently of the encoder), JSON form, round trips, and damage."""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from segmentstore_client.formats import databus
from segmentstore_client.formats.databus import DatabusEvent, DatabusFormatError

SCHEMA = bytes(range(16))


def crc(b: bytes) -> bytes:
    return (zlib.crc32(b) & 0xFFFFFFFF).to_bytes(4, "big")


def be(n: int, size: int) -> bytes:
    return n.to_bytes(size, "big", signed=True)


def golden_v1_long_key() -> bytes:
    # The table of databus-event.txt: offsets 0..61, long key at 53, value at 61.
    value = b'{"a":1}'
    total = 61 + len(value)
    after_crc = (
        be(total, 4)  # 5 length
        + be(0x0001, 2)  # 9 attributes: UPSERT
        + be(1234, 8)  # 11 sequence
        + be(3, 2)  # 19 physical partition
        + be(4, 2)  # 21 logical partition
        + be(99, 8)  # 23 timestamp
        + be(101, 2)  # 31 srcId
        + SCHEMA  # 33 schema id
        + crc(value)  # 49 value CRC
        + be(77, 8)  # 53 key
    )
    return b"\x00" + crc(after_crc) + after_crc + value


def golden_v2_bytes_key() -> bytes:
    key, value = b"user-9", b"payload"
    header_len = 45 + 4 + len(key)
    part = be(len(value), 4) + be(5 << 2, 2) + SCHEMA + value  # schema version 5, MD5
    body_crc = crc(part)
    rest = (
        body_crc  # 13 body CRC
        + be(header_len + len(part), 4)  # 17 total length
        + be(2 | (2 << 2) | 0x80, 2)  # 21 attributes: DELETE, bytes key, payload part
        + be(99, 8)  # 23 timestamp
        + be(101, 4)  # 31 source id
        + be(3, 2)  # 35 partition
        + be(1234, 8)  # 37 sequence
        + be(len(key), 4)
        + key  # 45 key
    )
    head = b"\x02" + bytes.fromhex("CAFEDEED") + be(header_len, 4)
    return head + crc(rest) + rest + part


def test_v1_golden_layout() -> None:
    ev = DatabusEvent(1234, 77, b'{"a":1}', 101, "UPSERT", 3, 4, 99, SCHEMA)
    assert databus.encode(ev, version=1) == golden_v1_long_key()
    assert databus.decode(golden_v1_long_key()) == ev
    assert databus.is_databus(golden_v1_long_key())


def test_v2_golden_layout() -> None:
    ev = DatabusEvent(1234, b"user-9", b"payload", 101, "DELETE", 3, 3, 99, SCHEMA, 5)
    assert databus.encode(ev) == golden_v2_bytes_key()
    assert databus.decode(golden_v2_bytes_key()) == ev
    assert databus.is_databus(golden_v2_bytes_key())


def test_v1_byte_key_crc_covers_key_and_value() -> None:
    smallest = databus.encode(DatabusEvent(5, b"", b"", 7), version=1)
    assert len(smallest) == 57 and databus.is_databus(smallest)
    ev = DatabusEvent(5, b"k", b"v", 7)
    data = databus.encode(ev, version=1)
    assert data[53:57] == be(1, 4) and data[57:58] == b"k"
    assert data[49:53] == crc(b"kv")
    assert databus.decode(data) == ev


def test_end_of_period_marker() -> None:
    eop = databus.end_of_period(77, partition=2, timestamp_ns=5)
    assert eop.end_of_period and eop.opcode is None
    for version in (1, 2):
        back = databus.decode(databus.encode(eop, version))
        assert back.end_of_period and back.sequence == 77 and back.opcode is None
    assert databus.to_json(eop)["endOfPeriod"] is True


def test_json_form() -> None:
    ev = DatabusEvent(9, b"\x00k", b'{"x": 1}', 12, "UPSERT", 1, 2, 3, SCHEMA)
    obj = databus.to_json(ev)
    assert obj == {
        "opcode": "UPSERT",
        "keyBytes": base64.b64encode(b"\x00k").decode(),
        "sequence": 9,
        "logicalPartitionId": 2,
        "physicalPartitionId": 1,
        "timestampInNanos": 3,
        "srcId": 12,
        "schemaId": base64.b64encode(SCHEMA).decode(),
        "valueEnc": "JSON",
        "value": base64.b64encode(b'{"x": 1}').decode(),
    }
    assert databus.from_json(json.loads(json.dumps(obj))) == ev
    plain = databus.to_json(ev, value_enc="JSON_PLAIN")
    assert plain["value"] == '{"x": 1}'
    assert databus.from_json(plain) == ev


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"sequence": 1},
        {"key": 1, "sequence": "x", "srcId": 1},
        {"key": 1, "sequence": 1, "srcId": 1, "physicalPartitionId": 0, "logicalPartitionId": 0,
         "timestampInNanos": 0, "schemaId": "!!!"},
        {"key": 1, "sequence": 1, "srcId": 1, "physicalPartitionId": 0, "logicalPartitionId": 0,
         "timestampInNanos": 0, "schemaId": "", "opcode": "MERGE"},
    ],
)  # fmt: skip
def test_bad_json_is_one_clear_error(bad: dict[str, object]) -> None:
    with pytest.raises(DatabusFormatError):
        databus.from_json(bad)


@pytest.mark.parametrize("version", [1, 2])
def test_every_flipped_byte_or_truncation_is_refused(version: int) -> None:
    data = databus.encode(DatabusEvent(3, 5, b"hello world", 9), version)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x40
        with pytest.raises(DatabusFormatError):
            databus.decode(bytes(damaged))
        assert not databus.is_databus(bytes(damaged))
    for n in range(len(data)):
        with pytest.raises(DatabusFormatError):
            databus.decode(data[:n])
        assert not databus.is_databus(data[:n])
    assert not databus.is_databus(b"\x02" + bytes(60))


keys = st.one_of(st.integers(-(2**63), 2**63 - 1), st.binary(max_size=40))
events = st.builds(
    DatabusEvent,
    sequence=st.integers(-(2**63), 2**63 - 1),
    key=keys,
    value=st.binary(max_size=200),
    src_id=st.integers(1, 2**15 - 1),
    opcode=st.sampled_from(["UPSERT", "DELETE"]),
    physical_partition_id=st.integers(-(2**15), 2**15 - 1),
    timestamp_ns=st.integers(0, 2**63 - 1),
    schema_id=st.binary(min_size=16, max_size=16),
)


@given(events)
def test_round_trips(ev: DatabusEvent) -> None:
    v2 = DatabusEvent(**{**_fields(ev), "logical_partition_id": ev.physical_partition_id})
    assert databus.decode(databus.encode(v2)) == v2
    assert databus.decode(databus.encode(ev, version=1)) == ev
    assert databus.from_json(json.loads(json.dumps(databus.to_json(ev)))) == ev
    line = json.dumps(databus.to_json(ev), separators=(",", ":")).encode() + b"\n"
    assert databus.json_line(ev) == line
    eop = databus.end_of_period(ev.sequence)
    assert (
        databus.json_line(eop)
        == json.dumps(databus.to_json(eop), separators=(",", ":")).encode() + b"\n"
    )
    for version in (1, 2):
        peeked = databus.peek(databus.encode(v2, version))
        assert peeked == (ev.sequence, ev.src_id, ev.key, ev.timestamp_ns)


@given(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.binary(max_size=100),
    st.integers(0, 2**15 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-(2**15), 2**15 - 1),
)
def test_fast_encoders_match_encode(
    seq: int, key: int, value: bytes, src: int, ts: int, part: int
) -> None:
    ev = DatabusEvent(seq, key, value, src, "UPSERT", part, part, ts)
    assert databus.encode_upsert(seq, key, value, src, ts, part) == databus.encode(ev)
    eop = databus.end_of_period(seq, part, ts)
    assert databus.encode_end_of_period(seq, part, ts) == databus.encode(eop)


def _fields(ev: DatabusEvent) -> dict[str, object]:
    return {name: getattr(ev, name) for name in DatabusEvent.__slots__}
