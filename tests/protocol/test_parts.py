"""segment_read_parts and data_appended_frame build the same frames as encode(SegmentRead)
and encode(DataAppended), without copying data or making the command."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st
from segmentstore_client.protocol import (
    DataAppended,
    SegmentRead,
    data_appended_frame,
    decode,
    encode,
    segment_read_parts,
)


@given(
    segment=st.text(max_size=40),
    offset=st.integers(-(2**63), 2**63 - 1),
    at_tail=st.booleans(),
    end=st.booleans(),
    data=st.binary(max_size=2000),
    rid=st.integers(-(2**63), 2**63 - 1),
)
def test_parts_join_to_the_encoded_frame(
    segment: str, offset: int, at_tail: bool, end: bool, data: bytes, rid: int
) -> None:
    head, body, tail = segment_read_parts(segment, offset, at_tail, end, data, rid)
    frame = b"".join((head, body, tail))
    assert frame == encode(SegmentRead(segment, offset, at_tail, end, data, rid))
    assert decode(frame) == SegmentRead(segment, offset, at_tail, end, data, rid)


def test_data_is_passed_through_not_copied() -> None:
    data = memoryview(bytearray(1 << 20))
    _, body, _ = segment_read_parts("s", 0, True, False, data, 1)
    assert body is data


@given(
    writer=st.uuids(),
    number=st.integers(-(2**63), 2**63 - 1),
    previous=st.integers(-(2**63), 2**63 - 1),
    rid=st.integers(-(2**63), 2**63 - 1),
    offset=st.integers(-(2**63), 2**63 - 1),
)
def test_data_appended_frame_is_the_encoded_ack(
    writer: uuid.UUID, number: int, previous: int, rid: int, offset: int
) -> None:
    frame = data_appended_frame(writer.bytes, number, previous, rid, offset)
    assert frame == encode(DataAppended(writer, number, previous, rid, offset))
    assert decode(frame) == DataAppended(writer, number, previous, rid, offset)
