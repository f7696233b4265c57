"""Every request gets a reply (issue 13 items 3 and 4, issue 15 item 3): replies too long to
encode, unknown attribute update types and bad names are answered with ``ErrorMessage`` and
the connection stays open for the next request."""

from __future__ import annotations

import uuid

import pytest
from segmentstore_client.protocol import (
    Command,
    ConditionalAttributeUpdate,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
    ErrorMessage,
    ErrorReply,
    GetStreamSegmentInfo,
    MergeSegments,
    MergeSegmentsBatch,
    ReadSegment,
    SegmentCreated,
    SetupAppend,
    StreamSegmentInfo,
)
from segmentstore_client.protocol.names import MAX_NAME_BYTES

from .wire import WireClient, next_id, unique

LONGEST_WIRE_NAME = "n" * 65_535  # the largest string the wire can carry
ILLEGAL_ARGUMENT = 0
UNSPECIFIED = -1


async def answered(client: WireClient, command: Command) -> Command:
    """Send ``command``; it must get a reply and the connection must stay usable."""
    reply = await client.request(command, timeout=5)
    assert not client.is_closed
    await client.keepalive()
    return reply


@pytest.mark.parametrize(
    "make",
    [
        lambda rid: MergeSegments(rid, LONGEST_WIRE_NAME, LONGEST_WIRE_NAME, ""),
        lambda rid: MergeSegmentsBatch(rid, LONGEST_WIRE_NAME, (LONGEST_WIRE_NAME,), ""),
        lambda rid: CreateTransientSegment(rid, uuid.uuid4(), LONGEST_WIRE_NAME, ""),
        lambda rid: ReadSegment(LONGEST_WIRE_NAME, 10, 100, "", rid),
        lambda rid: GetStreamSegmentInfo(rid, LONGEST_WIRE_NAME, ""),
        lambda rid: SetupAppend(rid, uuid.uuid4(), LONGEST_WIRE_NAME, ""),
    ],
    ids=["merge", "merge-batch", "transient", "read", "info", "setup-append"],
)
async def test_reply_naming_a_65535_byte_name_is_sent(client: WireClient, make: object) -> None:
    rid = next_id()
    reply = await answered(client, make(rid))  # type: ignore[operator]
    # NoSuchSegment when it still fits in a frame, else an ErrorMessage with the name cut.
    assert isinstance(reply, ErrorReply), reply
    assert getattr(reply, "request_id", None) == rid
    if isinstance(reply, ErrorMessage):
        assert len(reply.segment) < 1000 and reply.segment.startswith("nnn")


async def test_merge_with_unknown_attribute_update_type_gets_illegal_argument(
    client: WireClient,
) -> None:
    target, source = unique("mt"), unique("ms")
    await client.create_segment(target)
    await client.create_segment(source)
    update = ConditionalAttributeUpdate(uuid.uuid4(), 9, 5)
    rid = next_id()
    reply = await answered(client, MergeSegments(rid, target, source, "", (update,)))
    assert isinstance(reply, ErrorMessage) and reply.error_code == ILLEGAL_ARGUMENT, reply
    assert "unknown attribute update type 9" in reply.message
    # Neither segment was touched: the source is still there.
    assert (await client.info(source)).exists


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("scope/str\x00eam/0", "U+0000"),
        ("scope/str\neam/0", "U+000A"),
        ("a\x7fb", "U+007F"),
        ("x" * (MAX_NAME_BYTES + 1), "longer than"),
    ],
    ids=["empty", "nul", "newline", "del", "too-long"],
)
@pytest.mark.parametrize("kind", ["segment", "table", "transient"])
async def test_bad_names_are_refused_with_which_name_and_why(
    client: WireClient, name: str, why: str, kind: str
) -> None:
    rid = next_id()
    command: Command
    if kind == "segment":
        command = CreateSegment(rid, name, 0, 0, "")
    elif kind == "table":
        command = CreateTableSegment(rid, name, "")
    else:
        command = CreateTransientSegment(rid, uuid.uuid4(), name, "")
    reply = await answered(client, command)
    assert isinstance(reply, ErrorMessage), reply
    assert reply.error_code == ILLEGAL_ARGUMENT and reply.request_id == rid
    assert why in reply.message and "invalid segment name" in reply.message
    assert reply.segment == name[:197] + ("..." if len(name) > 200 else "")
    # Nothing was created under that name.
    if name:
        info = await client.request(GetStreamSegmentInfo(next_id(), name, ""))
        assert not isinstance(info, StreamSegmentInfo) or not info.exists


async def test_longest_legal_name_works(client: WireClient) -> None:
    name = "y" * MAX_NAME_BYTES
    reply = await answered(client, CreateSegment(next_id(), name, 0, 0, ""))
    assert isinstance(reply, SegmentCreated) and reply.segment == name
    info = await client.info(name)
    assert info.exists and info.segment_name == name
