"""segment_read_parts builds the same frame as encode(SegmentRead) without copying data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from segmentstore_client.protocol import SegmentRead, decode, encode, segment_read_parts


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
