"""Property tests: every command type round-trips through encode and decode, both by
``decode()`` (copying) and by the ``FrameDecoder`` big-frame path (zero-copy views)."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from segmentstore_client.errors import LocalProtocolError, MalformedCommand
from segmentstore_client.protocol import (
    COMMAND_TYPES,
    NO_VERSION,
    Command,
    CreateSegment,
    DataAppended,
    FrameDecoder,
    Hello,
    Padding,
    ReadTable,
    RemoveTableKeys,
    SegmentAttribute,
    SegmentRead,
    SetupAppend,
    TableEntry,
    TableKey,
    TableKeysRead,
    TableRead,
    UpdateTableEntries,
    decode,
    encode,
)

from .helpers import hexbytes
from .strategies import command_strategy, wire_field_names

CLASSES = sorted(COMMAND_TYPES.values(), key=lambda c: c.TYPE)
ROUND_TRIP = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_every_command_is_covered() -> None:
    """70 type codes (reference section 5), each with a strategy for every field."""
    assert len(CLASSES) == 70
    for cls in CLASSES:
        assert len(cls.SPEC.split()) == len(wire_field_names(cls))
        assert COMMAND_TYPES[cls.TYPE] is cls


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
@ROUND_TRIP
@given(data=st.data())
def test_round_trip(cls: type[Command], data: st.DataObject) -> None:
    command = data.draw(command_strategy(cls))
    frame = encode(command)
    assert int.from_bytes(frame[:4], "big", signed=True) == cls.TYPE
    assert int.from_bytes(frame[4:8], "big", signed=True) == len(frame) - 8
    back = decode(frame)
    assert type(back) is cls
    assert back == command
    assert getattr(back, "wire_omitted", 0) == 0  # we write every field
    assert encode(back) == frame

    # The same frame split in two through a decoder whose big-frame threshold is 0:
    # the body lands in its own buffer and byte fields come out as views of it.
    cut = data.draw(st.integers(8, len(frame)), label="cut")
    dec = FrameDecoder(big_frame_threshold=0)
    got = dec.feed(frame[:cut]) + dec.feed(frame[cut:])
    assert got == [command]
    assert encode(got[0]) == frame


OPTIONAL = [c for c in CLASSES if any(f.name == "wire_omitted" for f in dataclasses.fields(c))]  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", OPTIONAL, ids=[c.__name__ for c in OPTIONAL])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_short_forms_re_encode_exactly(cls: type[Command], data: st.DataObject) -> None:
    """Cut a full frame anywhere in its last 80 payload bytes (where the optional
    trailing fields are): if the short frame decodes, it re-encodes to its longest prefix
    made of whole fields (stray bytes that cannot form the next field are ignored, as 2.4
    says), and ``wire_omitted`` counts the optional fields it lacks."""
    command = data.draw(command_strategy(cls))
    frame = encode(command)
    payload = frame[8:]
    optional = sum(k.endswith(("?", "+")) for k in cls.SPEC.split())
    for cut in range(max(0, len(payload) - 80), len(payload) + 1):
        short = frame[:4] + cut.to_bytes(4, "big") + payload[:cut]
        try:
            back = decode(short)
        except MalformedCommand:
            continue
        again = encode(back)
        kept = len(again) - 8
        assert kept <= cut
        assert again == frame[:4] + kept.to_bytes(4, "big") + payload[:kept]
        assert decode(again) == back
        omitted = back.wire_omitted  # type: ignore[attr-defined]
        assert 0 <= omitted <= optional
        assert (omitted == 0) == (kept == len(payload))


def test_round_trip_keeps_field_values_exactly() -> None:
    """Non-default values land in the right fields (a swap of two same-typed fields would
    survive a round trip, so compare against hand-made expectations)."""
    w = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
    cmd = DataAppended(w, 5, 4, 3, 2)
    payload = encode(cmd)[8:]
    assert payload == w.bytes + b"".join(n.to_bytes(8, "big") for n in (5, 4, 3, 2))
    fields = [getattr(cmd, n) for n in wire_field_names(type(cmd))]
    assert fields == [w, 5, 4, 3, 2]


# --- TableKey with an empty key -----------------------------------------------------------


def test_empty_table_key_has_no_version_on_the_wire() -> None:
    """An empty key is written ``00 00 00 0c 00 00 00 00`` (size claims 12, no version);
    whatever version it carried, it decodes as NO_VERSION."""
    cmd = RemoveTableKeys(1, "t", "", (TableKey(b"", 42), TableKey(b"k", 7)), 5)
    frame = encode(cmd)
    keys_on_wire = hexbytes(
        """00 00 00 02
           00 00 00 0c 00 00 00 00
           00 00 00 0d 00 00 00 01 6b 00 00 00 00 00 00 00 07"""
    )
    assert keys_on_wire in frame
    back = decode(frame)
    assert isinstance(back, RemoveTableKeys)
    assert back.keys == (TableKey(b"", NO_VERSION), TableKey(b"k", 7))
    assert back.table_segment_offset == 5
    assert encode(back) == frame


def test_empty_key_in_entries_and_empty_values() -> None:
    entries = (TableEntry(b"", b"v", 3), TableEntry(b"k", b"", 4), TableEntry(b"", b"", -1))
    for cmd in (
        UpdateTableEntries(1, "t", "", entries, -1),
        TableRead(2, "t", entries),
    ):
        frame = encode(cmd)
        back = decode(frame)
        got = back.table_entries if isinstance(back, UpdateTableEntries) else back.entries  # type: ignore[attr-defined]
        assert got == (
            TableEntry(b"", b"v", NO_VERSION),
            TableEntry(b"k", b"", 4),
            TableEntry(b"", b"", NO_VERSION),
        )
        assert encode(back) == frame
    assert hexbytes("00 00 00 04 00 00 00 00") in encode(TableRead(2, "t", entries))


def test_empty_key_lists() -> None:
    for cmd in (ReadTable(1, "t", "", ()), TableKeysRead(1, "t", (TableKey(b""),), b"")):
        assert decode(encode(cmd)) == cmd


# --- encoding errors ------------------------------------------------------------------------

STR_FIELDS = [
    (cls, name)
    for cls in CLASSES
    for kind, name in zip(cls.SPEC.split(), wire_field_names(cls), strict=True)
    if kind in ("str", "str?")
]


@pytest.mark.parametrize(
    ("cls", "name"), STR_FIELDS, ids=[f"{c.__name__}.{n}" for c, n in STR_FIELDS]
)
@settings(max_examples=1, deadline=None, database=None)
@given(data=st.data())
def test_oversize_string_in_any_field_is_a_local_error(
    cls: type[Command], name: str, data: st.DataObject
) -> None:
    command = data.draw(command_strategy(cls))
    too_long = dataclasses.replace(command, **{name: "€" * 21846})  # type: ignore[type-var]
    with pytest.raises(LocalProtocolError, match="65535"):
        encode(too_long)


@pytest.mark.parametrize(
    "command",
    [
        Padding(-1),
        Hello(2**31, 5),  # i32 overflow
        CreateSegment(1, "s", 0, 128),  # scaleType is an i8
        SegmentAttribute(2**63, 0),  # i64 overflow
        SetupAppend(1, "not a uuid", "s"),  # type: ignore[arg-type]
        SegmentRead("s", 0, True, False, "not bytes"),  # type: ignore[arg-type]
    ],
    ids=["padding", "i32", "i8", "i64", "uuid", "bytes"],
)
def test_unencodable_values_are_local_errors(command: Command) -> None:
    with pytest.raises(LocalProtocolError):
        encode(command)


def test_encode_rejects_non_commands() -> None:
    with pytest.raises(LocalProtocolError):
        encode(TableKey(b"k"))  # type: ignore[arg-type]
