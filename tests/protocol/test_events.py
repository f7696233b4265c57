"""``EventParser`` splits a segment's bytes back into events across reads that cut the
event records anywhere, with the segment offset of every record."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segmentstore_client.errors import MalformedCommand
from segmentstore_client.protocol import EventParser, frame_event, frame_events

from .helpers import random_cuts


def expected_events(payloads: list[bytes], start: int) -> list[tuple[int, bytes]]:
    out, offset = [], start
    for p in payloads:
        out.append((offset, p))
        offset += 8 + len(p)
    return out


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=100), max_size=30),
    cuts=st.lists(st.integers(0, 4000), max_size=40),
    start=st.integers(0, 2**50),
)
def test_random_cuts(payloads: list[bytes], cuts: list[int], start: int) -> None:
    stream = frame_events(payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    parser = EventParser(start)
    got: list[tuple[int, bytes]] = []
    for a, b in itertools.pairwise(points):
        got.extend(parser.feed(stream[a:b]))
        assert parser.offset + parser.pending == start + b
    assert got == expected_events(payloads, start)
    assert parser.pending == 0
    assert parser.offset == start + len(stream)


@pytest.mark.parametrize("seed", range(5))
def test_seeded_slicings_with_big_events(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [rng.randbytes(rng.choice([0, 1, 7, 8, 9, 1000, 200_000])) for _ in range(40)]
    stream = frame_events(payloads)
    parser = EventParser(100)
    got = [e for chunk in random_cuts(stream, rng, 70_000) for e in parser.feed(chunk)]
    assert got == expected_events(payloads, 100)


def test_one_byte_at_a_time() -> None:
    payloads = [b"hello", b"", b"world!"]
    stream = frame_events(payloads)
    parser = EventParser()
    got = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    assert got == expected_events(payloads, 0)


def test_frame_event_and_frame_events_agree() -> None:
    payloads: list[bytes | bytearray | memoryview] = [
        b"a",
        b"",
        bytearray(b"bc"),
        memoryview(b"def"),
    ]
    assert frame_events(payloads) == b"".join(frame_event(p) for p in payloads)
    assert frame_event(b"hello") == bytes.fromhex("00000000 00000005 68656c6c6f")


@pytest.mark.parametrize(
    "header",
    [
        bytes.fromhex("00000001 00000000"),  # type 1
        bytes.fromhex("fffffffe 00000004"),  # PartialEvent
        bytes.fromhex("00000000 ffffffff"),  # negative length
        bytes.fromhex("00000000 7fffffff"),  # longer than the limit
    ],
)
def test_bad_header_is_malformed(header: bytes) -> None:
    good = frame_event(b"ok")
    parser = EventParser(10, max_event_size=1 << 20)
    with pytest.raises(MalformedCommand, match="segment offset 20"):
        parser.feed(good + header + b"rest")
    # The same, when the bad header arrives in a later read.
    parser = EventParser(10, max_event_size=1 << 20)
    assert parser.feed(good + header[:3]) == [(10, b"ok")]
    with pytest.raises(MalformedCommand):
        parser.feed(header[3:])


def test_max_event_size_is_inclusive() -> None:
    parser = EventParser(max_event_size=4)
    assert parser.feed(frame_event(b"1234")) == [(0, b"1234")]
    with pytest.raises(MalformedCommand):
        parser.feed(frame_event(b"12345"))
