"""Append blocks (reference 7.4/7.5): ``build_blocks`` cuts records the way the Java
client does, ``AppendAssembler`` puts them back, and every protocol violation of 7.5
raises :class:`RemoteProtocolError`."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from segmentstore_client.errors import MalformedCommand, RemoteProtocolError
from segmentstore_client.protocol import (
    Append,
    AppendAssembler,
    AppendBlock,
    AppendBlockEnd,
    Command,
    ConditionalAppend,
    ConditionalBlockEnd,
    FrameDecoder,
    KeepAlive,
    Padding,
    PartialEvent,
    SetupAppend,
    block_end,
    build_blocks,
    decode,
    encode,
    frame_event,
    frame_events,
)

from .helpers import hexbytes

W = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
W2 = uuid.UUID(int=2)
SEG = "sc/st/0.#epoch.0"


def assembler(*writers: uuid.UUID) -> AppendAssembler:
    a = AppendAssembler()
    for w in writers or (W,):
        a.setup(w, SEG)
    return a


def over_the_wire(commands: list[Command]) -> list[Command]:
    """Encode the frames and decode them again as a server would receive them."""
    return FrameDecoder().feed(b"".join(encode(c) for c in commands))


def assemble(commands: list[Command], a: AppendAssembler | None = None) -> list[Append]:
    a = a or assembler()
    out = [a.feed(c) for c in over_the_wire(commands)]
    assert not a.block_open
    return [x for x in out if x is not None]


def check_blocks(records: list[bytes], block_size: int, first: int = 1) -> list[Append]:
    commands = build_blocks(W, records, first, 5, block_size)
    for blk, end in zip(commands[::2], commands[1::2], strict=True):
        assert isinstance(blk, AppendBlock) and isinstance(end, AppendBlockEnd)
        # Java's reserved block: W + 8 + r = B + 8 (7.4, shape 3)
        assert len(blk.data) == block_size + 8
        assert end.writer_id == blk.writer_id == W
        assert end.request_id == 5
    appends = assemble(commands)
    assert b"".join(bytes(a.data) for a in appends) == b"".join(records)
    assert sum(a.event_count for a in appends) == len(records)
    numbers = [a.event_number for a in appends]
    assert numbers == sorted(numbers)
    assert numbers[-1] == first + len(records) - 1
    running = first - 1
    for a in appends:
        running += a.event_count
        assert a.event_number == running
        assert (a.segment, a.writer_id, a.expected_offset, a.request_id) == (SEG, W, None, 5)
    return appends


def _sub_frame(blk: Command) -> tuple[int, int]:
    assert isinstance(blk, AppendBlock)
    return tuple(int.from_bytes(x, "big", signed=True) for x in (blk.data[:4], blk.data[4:8]))  # type: ignore[return-value]


def test_partial_event_split() -> None:
    records = [frame_event(b"x" * 12)] * 3  # 20 bytes each
    commands = build_blocks(W, records, 1, 5, 50)
    blk, end = commands[0], commands[1]
    assert isinstance(blk, AppendBlock) and isinstance(end, AppendBlockEnd)
    assert end.size_of_whole_events == 40
    assert _sub_frame(AppendBlock(W, bytes(blk.data[40:]))) == (PartialEvent.TYPE, 10)
    assert bytes(end.data) == records[2][10:]
    assert (end.num_events, end.last_event_number) == (3, 3)
    appends = check_blocks(records, 50)
    assert len(appends) == 1


def test_split_exactly_at_a_record_boundary() -> None:
    """r == L: the whole record goes into the PartialEvent and the end's data is empty."""
    records = [frame_event(b"y" * 12)] * 3
    commands = build_blocks(W, records, 1, 5, 60)
    end = commands[1]
    assert isinstance(end, AppendBlockEnd)
    assert end.size_of_whole_events == 40
    assert bytes(end.data) == b""
    assert end.num_events == 3
    check_blocks(records, 60)


def test_padding_closes_a_block_that_runs_out_of_records() -> None:
    records = [frame_event(b"z" * 12)] * 2
    commands = build_blocks(W, records, 1, 5, 100)
    assert len(commands) == 2
    blk, end = commands
    assert isinstance(blk, AppendBlock) and isinstance(end, AppendBlockEnd)
    assert _sub_frame(AppendBlock(W, bytes(blk.data[40:]))) == (Padding.TYPE, 60)
    assert bytes(blk.data[48:]) == bytes(60)
    assert (end.size_of_whole_events, bytes(end.data), end.num_events) == (40, b"", 2)
    check_blocks(records, 100)


def test_record_larger_than_the_block() -> None:
    records = [frame_event(b"L" * 200), frame_event(b"s")]
    commands = build_blocks(W, records, 7, 5, 30)
    end = commands[1]
    assert isinstance(end, AppendBlockEnd)
    assert (end.size_of_whole_events, len(end.data), end.last_event_number) == (0, 178, 7)
    appends = check_blocks(records, 30, first=7)
    assert [a.event_number for a in appends] == [7, 8]


def test_split_inside_the_record_header() -> None:
    records = [frame_event(b"a" * 12), frame_event(b"b" * 12)]
    commands = build_blocks(W, records, 1, 5, 25)  # room for 5 bytes of the second header
    blk, end = commands[0], commands[1]
    assert isinstance(blk, AppendBlock) and isinstance(end, AppendBlockEnd)
    assert bytes(blk.data[28:]) == records[1][:5]
    assert bytes(end.data) == records[1][5:]
    check_blocks(records, 25)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=30),
    block_size=st.integers(1, 1000),
    first=st.integers(0, 2**40),
)
def test_build_blocks_round_trip(sizes: list[int], block_size: int, first: int) -> None:
    records = [frame_event(bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    check_blocks(records, block_size, first)


def test_build_blocks_rejects_a_non_positive_block_size() -> None:
    with pytest.raises(ValueError):
        build_blocks(W, [frame_event(b"x")], 1, 1, 0)


# --- the reference's examples -----------------------------------------------------------

EVENTS = frame_events([b"hello", b"world!"])
REF_14_4 = hexbytes(
    """00 00 00 04 00 00 00 47 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff
       00 00 00 1b 00 00 00 1b 00 00 00 00 00 00 00 05 68 65 6c 6c 6f 00 00 00
       00 00 00 00 06 77 6f 72 6c 64 21 00 00 00 02 00 00 00 00 00 00 00 02
       00 00 00 00 00 00 00 01"""
)
REF_14_5 = hexbytes(
    """00 00 00 03 00 00 00 2b 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff
       00 00 00 00 00 00 00 05 68 65 6c 6c 6f 00 00 00 00 00 00 00 06 77 6f 72 6c 64 21
       00 00 00 04 00 00 00 2c 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff
       00 00 00 1b 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 02
       00 00 00 00 00 00 00 01"""
)


@pytest.mark.parametrize("stream", [REF_14_4, REF_14_5], ids=["14.4 end-only", "14.5 block"])
def test_reference_examples_through_the_assembler(stream: bytes) -> None:
    a = assembler()
    out = [a.feed(c) for c in FrameDecoder().feed(stream)]
    appends = [x for x in out if x is not None]
    assert len(appends) == 1
    got = appends[0]
    assert bytes(got.data) == EVENTS
    assert len(EVENTS) == 27
    assert (got.segment, got.writer_id, got.event_number, got.event_count) == (SEG, W, 2, 2)
    assert (got.expected_offset, got.request_id) == (None, 1)


def test_block_end_helper_is_the_end_only_shape() -> None:
    assert encode(block_end(W, EVENTS, 2, 2, 1)) == REF_14_4


def test_conditional_appends() -> None:
    a = assembler()
    got = a.feed(ConditionalAppend(W, 4, 100, b"payload", 8))
    assert got is not None
    assert bytes(got.data) == frame_event(b"payload")
    assert (got.event_number, got.event_count, got.expected_offset, got.request_id) == (
        4,
        1,
        100,
        8,
    )
    raw = b"raw bytes, no framing"
    got = a.feed(ConditionalBlockEnd(W, 5, 115, raw, 9))
    assert got is not None
    assert bytes(got.data) == raw
    assert (got.event_number, got.event_count, got.expected_offset, got.request_id) == (
        5,
        1,
        115,
        9,
    )


def test_writers_are_independent_and_setup_repoints() -> None:
    a = assembler(W, W2)
    a.feed(block_end(W, EVENTS, 2, 10, 1))
    got = a.feed(block_end(W2, EVENTS, 2, 1, 1))  # W2 has its own floor
    assert got is not None and got.event_number == 1
    a.setup(W, "other")  # re-pointed, floor reset to 0
    got = a.feed(block_end(W, EVENTS, 2, 3, 1))
    assert got is not None and (got.segment, got.event_number) == ("other", 3)
    assert a.segment_of(W) == "other"
    a.forget(W)
    assert a.segment_of(W) is None
    with pytest.raises(RemoteProtocolError):
        a.feed(block_end(W, EVENTS, 2, 4, 1))


# --- 7.5 protocol violations ------------------------------------------------------------


def _violations() -> dict[str, tuple[list[uuid.UUID], list[Command]]]:
    rec = frame_event(b"e" * 12)  # 20 bytes
    partial = AppendBlock(W, rec + b"\xff\xff\xff\xfe\x00\x00\x00\x04" + rec[:4])
    padded = AppendBlock(W, rec + b"\xff\xff\xff\xff\x00\x00\x00\x04" + bytes(4))
    plain = AppendBlock(W, rec)
    return {
        "block before setup": ([], [plain]),
        "block end before setup": ([], [block_end(W, rec, 1, 1, 1)]),
        "conditional append before setup": ([], [ConditionalAppend(W, 1, 0, b"x", 1)]),
        "conditional block end before setup": ([], [ConditionalBlockEnd(W, 1, 0, b"x", 1)]),
        "data after forget": ([W], [block_end(W2, rec, 1, 1, 1)]),
        "keep-alive inside a block": ([W], [plain, KeepAlive()]),
        "padding inside a block": ([W], [plain, Padding(4)]),
        "second block inside a block": ([W], [plain, plain]),
        "conditional append inside a block": ([W], [plain, ConditionalAppend(W, 1, 0, b"x", 1)]),
        "conditional block end inside a block": (
            [W],
            [plain, ConditionalBlockEnd(W, 1, 0, b"", 1)],
        ),
        "writer mismatch": ([W, W2], [plain, AppendBlockEnd(W2, 20, b"", 1, 1, 1)]),
        "sizeOfWholeEvents negative": ([W], [plain, AppendBlockEnd(W, -1, b"", 1, 1, 1)]),
        "sizeOfWholeEvents past the block": ([W], [plain, AppendBlockEnd(W, 21, b"", 1, 1, 1)]),
        "data after a block with no split": ([W], [plain, AppendBlockEnd(W, 20, b"x", 1, 1, 1)]),
        "data after padding": ([W], [padded, AppendBlockEnd(W, 20, b"x", 1, 1, 1)]),
        "sub-frame of type EVENT": ([W], [plain, AppendBlockEnd(W, 0, b"", 1, 1, 1)]),
        "sub-frame of type 3": (
            [W],
            [
                AppendBlock(W, b"\x00\x00\x00\x03\x00\x00\x00\x00"),
                AppendBlockEnd(W, 0, b"", 1, 1, 1),
            ],
        ),
        "sub-frame header cut short": ([W], [plain, AppendBlockEnd(W, 15, b"", 1, 1, 1)]),
        "sub-frame longer than the block": (
            [W],
            [AppendBlock(W, partial.data[:-1]), AppendBlockEnd(W, 20, b"", 1, 1, 1)],  # type: ignore[index]
        ),
        "sub-frame shorter than the block": (
            [W],
            [AppendBlock(W, bytes(partial.data) + b"!"), AppendBlockEnd(W, 20, b"", 1, 1, 1)],
        ),
        "sub-frame with negative length": (
            [W],
            [
                AppendBlock(W, b"\xff\xff\xff\xfe\xff\xff\xff\xff"),
                AppendBlockEnd(W, 0, b"", 1, 1, 1),
            ],
        ),
        "numEvents zero": ([W], [block_end(W, rec, 0, 1, 1)]),
        "numEvents negative": ([W], [block_end(W, rec, -1, 1, 1)]),
        "numEvents zero after a block": ([W], [plain, AppendBlockEnd(W, 20, b"", 0, 1, 1)]),
        "first event number negative": ([W], [block_end(W, rec, 1, -1, 1)]),
        "event number backwards": ([W], [block_end(W, rec, 1, 5, 1), block_end(W, rec, 1, 4, 1)]),
        "event number backwards after a block": (
            [W],
            [block_end(W, rec, 1, 5, 1), partial, AppendBlockEnd(W, 20, rec[4:], 2, 4, 1)],
        ),
        "conditional append backwards": (
            [W],
            [ConditionalAppend(W, 5, 0, b"x", 1), ConditionalAppend(W, 4, 0, b"x", 1)],
        ),
        "conditional block end backwards": (
            [W],
            [block_end(W, rec, 1, 5, 1), ConditionalBlockEnd(W, 4, 0, b"x", 1)],
        ),
        "not append data": ([W], [SetupAppend(1, W, SEG)]),
    }


VIOLATIONS = _violations()


def violation(case: str) -> tuple[AppendAssembler, list[Command], Command]:
    """An assembler set up for ``case``, the frames before the bad one, the bad one."""
    writers, commands = VIOLATIONS[case]
    a = AppendAssembler()
    for w in writers:
        a.setup(w, SEG)
    if case == "data after forget":
        a.setup(W2, SEG)
        a.forget(W2)
    *ok, bad = over_the_wire(commands)
    return a, ok, bad


@pytest.mark.parametrize("case", list(VIOLATIONS))
def test_protocol_violation(case: str) -> None:
    a, ok, bad = violation(case)
    for c in ok:
        a.feed(c)
    with pytest.raises(RemoteProtocolError):
        a.feed(bad)


END_ONLY_VIOLATIONS = [
    case
    for case, (_, commands) in VIOLATIONS.items()
    if isinstance(commands[-1], AppendBlockEnd)
    and not any(isinstance(c, AppendBlock) for c in commands)
]


@pytest.mark.parametrize("case", END_ONLY_VIOLATIONS)
def test_end_only_refuses_what_feed_refuses(case: str) -> None:
    """The server's one-call path for an end-only AppendBlockEnd (``end_only``) keeps
    every check of ``feed``."""
    a, ok, bad = violation(case)
    for c in ok:
        a.end_only(c)  # type: ignore[arg-type]
    assert isinstance(bad, AppendBlockEnd) and not a.block_open
    with pytest.raises(RemoteProtocolError):
        a.end_only(bad)


def test_end_only_gives_what_feed_gives() -> None:
    assert len(END_ONLY_VIOLATIONS) >= 6  # before setup, forgotten, numEvents, backwards
    rec = frame_event(b"e" * 12)
    fed, one_call = assembler(W, W2), assembler(W, W2)
    for end in over_the_wire(
        [block_end(W, rec, 1, 3, 7), block_end(W2, rec + rec, 2, 2, 8), block_end(W, rec, 1, 3, 9)]
    ):
        assert isinstance(end, AppendBlockEnd)
        assert one_call.end_only(end) == fed.feed(end)
    with pytest.raises(RemoteProtocolError):  # the floor moved in both
        one_call.end_only(block_end(W, rec, 1, 2, 10))


def test_the_same_frames_without_the_violation_are_fine() -> None:
    """Guards the violation cases above: the frames they start from are valid."""
    rec = frame_event(b"e" * 12)
    a = assembler()
    a.feed(AppendBlock(W, rec))
    assert a.feed(AppendBlockEnd(W, 20, b"", 1, 1, 1)) is not None
    a.feed(AppendBlock(W, rec + b"\xff\xff\xff\xfe\x00\x00\x00\x04" + rec[:4]))
    got = a.feed(AppendBlockEnd(W, 20, rec[4:], 2, 3, 1))
    assert got is not None and bytes(got.data) == rec + rec
    assert a.feed(block_end(W, rec, 1, 3, 1)) is not None  # equal number: allowed (>= floor)


def test_conditional_append_with_a_non_event_record_is_malformed() -> None:
    frame = bytearray(encode(ConditionalAppend(W, 1, 0, b"data", 2)))
    assert frame[40:44] == b"\x00\x00\x00\x00"  # 8 header + 16 writer + 8 + 8
    frame[40:44] = b"\x00\x00\x00\x01"
    with pytest.raises(MalformedCommand):
        decode(bytes(frame))
    with pytest.raises(MalformedCommand):
        FrameDecoder().feed(bytes(frame))


# --- state table ------------------------------------------------------------------------
#
# States of one writer on a connection: NONE (never set up), READY (set up, no block open),
# BLOCK (an AppendBlock waits for its AppendBlockEnd). Every (state, input) pair is
# listed; "error" means RemoteProtocolError (the connection closes), "+" means the input
# completed an Append.

NONE, READY, BLOCK, ERROR = "none", "ready", "block", "error"
REC = frame_event(b"state")


def _inputs() -> dict[str, Callable[[AppendAssembler, int], Append | None]]:
    return {
        "setup": lambda a, n: a.setup(W, SEG),
        "block": lambda a, n: a.feed(AppendBlock(W, REC)),
        "end of block": lambda a, n: a.feed(AppendBlockEnd(W, len(REC), b"", 1, n, 1)),
        "end only": lambda a, n: a.feed(block_end(W, REC, 1, n, 1)),
        "conditional append": lambda a, n: a.feed(ConditionalAppend(W, n, 0, b"state", 1)),
        "conditional block end": lambda a, n: a.feed(ConditionalBlockEnd(W, n, 0, REC, 1)),
        "padding": lambda a, n: a.feed(Padding(8)),
        "other command": lambda a, n: a.feed(KeepAlive()),
    }


TABLE: dict[tuple[str, str], str] = {
    (NONE, "setup"): READY,
    (NONE, "block"): ERROR,
    (NONE, "end of block"): ERROR,
    (NONE, "end only"): ERROR,
    (NONE, "conditional append"): ERROR,
    (NONE, "conditional block end"): ERROR,
    (NONE, "padding"): NONE,
    (NONE, "other command"): ERROR,
    (READY, "setup"): READY,
    (READY, "block"): BLOCK,
    (READY, "end of block"): READY + "+",  # sizeOfWholeEvents ignored, data = end's data
    (READY, "end only"): READY + "+",
    (READY, "conditional append"): READY + "+",
    (READY, "conditional block end"): READY + "+",
    (READY, "padding"): READY,
    (READY, "other command"): ERROR,
    (BLOCK, "setup"): ERROR,
    (BLOCK, "block"): ERROR,
    (BLOCK, "end of block"): READY + "+",
    (BLOCK, "end only"): ERROR,  # data after a block with no split
    (BLOCK, "conditional append"): ERROR,
    (BLOCK, "conditional block end"): ERROR,
    (BLOCK, "padding"): ERROR,
    (BLOCK, "other command"): ERROR,
}


def _enter(state: str) -> AppendAssembler:
    a = AppendAssembler()
    if state in (READY, BLOCK):
        a.setup(W, SEG)
    if state == BLOCK:
        a.feed(AppendBlock(W, REC))
    return a


def _state_of(a: AppendAssembler) -> str:
    if a.block_open:
        return BLOCK
    return READY if a.segment_of(W) is not None else NONE


def test_state_table_is_complete() -> None:
    assert set(TABLE) == {(s, i) for s in (NONE, READY, BLOCK) for i in _inputs()}


@pytest.mark.parametrize(("state", "event"), list(TABLE), ids=[f"{s}-{i}" for s, i in TABLE])
def test_state_table(state: str, event: str) -> None:
    a = _enter(state)
    assert _state_of(a) == state
    expected = TABLE[(state, event)]
    step = _inputs()[event]
    if expected == ERROR:
        with pytest.raises(RemoteProtocolError):
            step(a, 1)
        return
    result = step(a, 1)
    assert _state_of(a) == expected.rstrip("+")
    assert (result is not None) == expected.endswith("+")
    if result is not None:
        assert (result.writer_id, result.segment, result.event_number) == (W, SEG, 1)
