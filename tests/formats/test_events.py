"""Namespaced events: golden bytes from the spec's tables, forward-compatible headers,
Hypothesis round trips, bit flips in every checked field, truncations, payload kinds."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segmentstore_client.formats import events
from segmentstore_client.formats.errors import FormatError, InvalidLayout, TooLarge, TruncatedInput
from segmentstore_client.formats.events import Event, SerdeFormat


def spec_event(
    version: bytes,
    id: int,
    ref: int | None,
    ns: bytes,
    name: bytes,
    data: bytes,
    extra: bytes = b"",
) -> bytes:
    """An event built field by field from the spec's tables (independent of the module)."""
    header = version + id.to_bytes(8, "big")
    header += b"\x00" if ref is None else b"\xff" + ref.to_bytes(8, "big")
    header += len(ns).to_bytes(2, "big") + ns + len(name).to_bytes(2, "big") + name + extra
    total = len(header) + len(data)
    return total.to_bytes(8, "big") + len(header).to_bytes(2, "big") + header + data


def test_golden_literal_vector() -> None:
    data = events.encode_event(
        "NAME", b"DATA", id=0x0102030405060708, ref_id=0x1112131415161718, namespace="NS"
    )
    assert data == bytes.fromhex(
        "0000000000000022"  # total_length 34 = header 30 + payload 4
        "001e"  # header_length 30
        "000900"  # format version 0.9.0
        "0102030405060708"  # id
        "ff"
        "1112131415161718"  # ref id present
        "0002"
        "4e53"  # namespace "NS"
        "0004"
        "4e414d45"  # name "NAME"
        "44415441"  # payload "DATA"
    )
    ev = events.decode_event(data)
    assert ev == Event("NAME", b"DATA", 0x0102030405060708, 0x1112131415161718, "NS")


@pytest.mark.parametrize("ref", [None, 0, 2**64 - 1])
@pytest.mark.parametrize("ns", [None, "ns", "é☃"])
@pytest.mark.parametrize("name", ["", "event-name", "名前"])
@pytest.mark.parametrize("data", [b"", b"\x00\xffpayload"])
def test_golden_every_field(ref: int | None, ns: str | None, name: str, data: bytes) -> None:
    got = events.encode_event(name, data, id=0xA1B2C3D4E5F60718, ref_id=ref, namespace=ns)
    ns_b = b"" if ns is None else ns.encode()
    assert got == spec_event(b"\x00\x09\x00", 0xA1B2C3D4E5F60718, ref, ns_b, name.encode(), data)
    ev = events.decode_event(got)
    assert (ev.id, ev.ref_id, ev.namespace, ev.name, ev.data) == (
        0xA1B2C3D4E5F60718,
        ref,
        ns,
        name,
        data,
    )


def test_longer_header_is_read_and_kept() -> None:
    """Forward compatibility: fields appended by a newer writer are skipped, kept, and
    written back unchanged; minor and patch versions may differ."""
    extra = b"\x01\x02new-field"
    data = spec_event(b"\x00\x0a\x07", 5, 6, b"ns", b"name", b"payload", extra)
    ev = events.decode_event(data)
    assert (ev.id, ev.ref_id, ev.namespace, ev.name, ev.data) == (5, 6, "ns", "name", b"payload")
    assert ev.header_extra == extra and ev.format_version == b"\x00\x0a\x07"
    assert ev.encode() == data


def test_payload_kinds_golden() -> None:
    assert events.encode_tandem(b"ab", b"c") == bytes.fromhex(
        "00000000000000026162000000000000000163"
    )
    assert events.decode_tandem(events.encode_tandem(b"", b"xyz")) == (b"", b"xyz")
    assert events.encode_serde(SerdeFormat.JSON, b"{}") == b"\x03{}"
    assert events.decode_serde(b"\x00\x91\x01") == (SerdeFormat.MESSAGEPACK, b"\x91\x01")
    assert events.dumps({"a": [1, 2]}) == b'\x03{"a":[1,2]}'
    assert events.loads(events.dumps({"a": [1, 2]})) == {"a": [1, 2]}
    pytest.importorskip("msgpack")
    assert events.dumps([1], SerdeFormat.MESSAGEPACK) == b"\x00\x91\x01"
    assert events.loads(b"\x00\x91\x01") == [1]


def test_payload_errors_are_named() -> None:
    t = events.encode_tandem(b"ab", b"cd")
    for n in range(len(t)):
        with pytest.raises(TruncatedInput):
            events.decode_tandem(t[:n])
    with pytest.raises(InvalidLayout, match="stray"):
        events.decode_tandem(t + b"x")
    with pytest.raises(InvalidLayout, match="unknown serde format id 9"):
        events.decode_serde(b"\x09")
    with pytest.raises(TruncatedInput):
        events.decode_serde(b"")
    with pytest.raises(InvalidLayout, match="does not parse"):
        events.loads(b"\x03{nope")
    with pytest.raises(InvalidLayout, match="BINCODE"):
        events.loads(b"\x01\x00")


_text = st.text(max_size=40)


@given(
    name=_text,
    data=st.binary(max_size=300),
    id=st.integers(0, 2**64 - 1),
    ref=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    ns=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    extra=st.binary(max_size=20),
)
@settings(max_examples=300, deadline=None)
def test_round_trip(
    name: str, data: bytes, id: int, ref: int | None, ns: str | None, extra: bytes
) -> None:
    ev = Event(name, data, id, ref, ns, header_extra=extra)
    try:
        ns.encode() if ns else None  # lone surrogates are not UTF-8
        name.encode()
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            ev.encode()
        return
    assert events.decode_event(ev.encode()) == ev
    assert Event.from_dict(json.loads(ev.to_json())) == ev


@given(
    evs=st.lists(
        st.builds(
            Event,
            name=st.sampled_from(["a", "bb"]),
            data=st.binary(max_size=50),
            id=st.integers(0, 9),
        ),
        max_size=6,
    ),
    step=st.integers(1, 40),
)
@settings(max_examples=100, deadline=None)
def test_stream_decoder(evs: list[Event], step: int) -> None:
    stream = b"".join(e.encode() for e in evs)
    dec = events.EventDecoder()
    got = []
    for i in range(0, len(stream), step):
        got += dec.feed(stream[i : i + step])
    dec.finish()
    assert got == evs


def _flip(data: bytes, byte: int, bit: int) -> bytes:
    x = bytearray(data)
    x[byte] ^= 1 << bit
    return bytes(x)


def test_bit_flips_in_checked_fields_are_detected() -> None:
    """The format has no checksum. Every flip of total_length, of the ref-id flag (both
    states) and of the version's major byte is caught; so is every flip of header_length
    that shortens it and every flip of the namespace or name length that lengthens it
    past the header. Flips elsewhere (ids, text, payload) change the event undetected:
    that is the format, written down in the module docstring."""
    for ref in (None, 99):
        data = events.encode_event("name", b"payload", id=7, ref_id=ref, namespace="ns")
        flag = 10 + 3 + 8
        checked = [*range(0, 8), 10, flag]  # total_length, version major, flag
        for byte in checked:
            for bit in range(8):
                with pytest.raises(FormatError):
                    events.decode_event(_flip(data, byte, bit))
        hlen = struct.unpack_from(">H", data, 8)[0]
        for bit in range(16):
            if hlen & (1 << bit):  # a set bit cleared: the header gets shorter
                with pytest.raises(FormatError):
                    events.decode_event(_flip(data, 8 + (1 - bit // 8), bit % 8))
        ns_len = flag + 1 + (8 if ref else 0)
        name_len = ns_len + 2 + 2
        for pos in (ns_len, name_len):
            size = struct.unpack_from(">H", data, pos)[0]
            for bit in range(16):
                if not size & (1 << bit) and (1 << bit) > hlen:
                    with pytest.raises(TruncatedInput):
                        events.decode_event(_flip(data, pos + (1 - bit // 8), bit % 8))


def test_every_truncation_is_a_named_error() -> None:
    data = events.encode_event("name", b"payload", id=1, ref_id=2, namespace="ns")
    for n in range(len(data)):
        with pytest.raises(TruncatedInput):
            events.decode_event(data[:n])
    dec = events.EventDecoder()
    assert dec.feed(data[:-1]) == []
    with pytest.raises(TruncatedInput):
        dec.finish()


def test_bad_layouts_are_named_errors() -> None:
    good = events.encode_event("n", b"", id=1)
    with pytest.raises(InvalidLayout, match="stray"):
        events.decode_event(good + b"\x00")
    with pytest.raises(InvalidLayout, match="below header_length"):
        events.decode_event(struct.pack(">QH", 1, 5) + b"\x00" * 5)
    with pytest.raises(InvalidLayout, match=r"version 1\.9\.0"):
        events.decode_event(good[:10] + b"\x01" + good[11:])
    with pytest.raises(InvalidLayout, match="flag 0x01"):
        events.decode_event(good[:21] + b"\x01" + good[22:])
    bad_utf8 = spec_event(b"\x00\x09\x00", 1, None, b"", b"\xff\xfe", b"")
    with pytest.raises(InvalidLayout, match="not UTF-8"):
        events.decode_event(bad_utf8)
    with pytest.raises(TruncatedInput, match="fixed fields"):
        events.decode_event(struct.pack(">QH", 3, 3) + b"\x00\x09\x00")
    huge = struct.pack(">QH", 2**63, 20)
    with pytest.raises(TooLarge):
        events.EventDecoder(max_event_size=1 << 20).feed(huge)


def test_encoder_refuses_what_the_format_cannot_carry() -> None:
    with pytest.raises(ValueError, match="empty namespace"):
        events.encode_event("n", id=1, namespace="")
    with pytest.raises(ValueError, match="65535"):
        events.encode_event("x" * 70000, id=1)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        events.encode_event("n", id=-1)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        events.encode_event("n", id=1, ref_id=2**64)
    with pytest.raises(ValueError, match="header is"):
        events.encode_event("x" * 40000, id=1, namespace="y" * 40000)


def test_event_ids_are_unique_and_64_bit() -> None:
    ids = {events.new_event_id() for _ in range(10000)}
    assert len(ids) == 10000 and all(0 < i < 2**64 for i in ids)
