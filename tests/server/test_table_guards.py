"""A table segment's bytes are an entry log only the table layer may write: raw appends,
merges and truncation of a table segment are refused with OperationUnsupported, and
deleting one with DeleteSegment leaves no stale table state behind."""

from __future__ import annotations

import uuid

from segmentstore_client.protocol import (
    CreateTableSegment,
    DeleteSegment,
    MergeSegments,
    MergeSegmentsBatch,
    OperationUnsupported,
    ReadTable,
    SegmentCreated,
    SegmentDeleted,
    SetupAppend,
    TableEntriesUpdated,
    TableEntry,
    TableKey,
    TableRead,
    TruncateSegment,
    UpdateTableEntries,
)

from .wire import WireClient, next_id, unique


async def _table_with_key(client: WireClient) -> str:
    table = unique("guard") + "/_tables/t"
    await client.expect(CreateTableSegment(next_id(), table), SegmentCreated)
    entry = TableEntry(b"k", b"v")
    await client.expect(UpdateTableEntries(next_id(), table, "", (entry,)), TableEntriesUpdated)
    return table


async def test_raw_writes_to_a_table_segment_are_refused(client: WireClient) -> None:
    table = await _table_with_key(client)
    stream = unique("guard-stream")
    await client.create_segment(stream)
    refused = [
        SetupAppend(next_id(), uuid.uuid4(), table),
        TruncateSegment(next_id(), table, 1),
        MergeSegments(next_id(), stream, table),
        MergeSegments(next_id(), table, stream),
        MergeSegmentsBatch(next_id(), stream, (table,)),
    ]
    for cmd in refused:
        reply = await client.expect(cmd, OperationUnsupported)
        assert reply.request_id == cmd.request_id  # type: ignore[attr-defined]
    # The table is untouched and still serves its key.
    read = await client.expect(ReadTable(next_id(), table, "", (TableKey(b"k"),)), TableRead)
    assert [bytes(e.value) for e in read.entries] == [b"v"]
    assert not client.is_closed


async def test_delete_segment_of_a_table_then_recreate_is_empty(client: WireClient) -> None:
    table = await _table_with_key(client)
    await client.expect(DeleteSegment(next_id(), table), SegmentDeleted)
    await client.expect(CreateTableSegment(next_id(), table), SegmentCreated)
    read = await client.expect(ReadTable(next_id(), table, "", (TableKey(b"k"),)), TableRead)
    assert [e.version for e in read.entries] == [-1]  # NOT_EXISTS: no stale key survived
