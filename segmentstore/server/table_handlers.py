"""Handlers for the table segment requests (reference 6.6, 10, 12.1).

Each handler is ``async (ctx, request) -> reply`` over ``ctx.tables`` (a
:class:`segmentstore.tables.TableStore`). Table outcomes are answered here, one reply per
error class (``_table_error``); storage errors (no such segment, sealed, exists, I/O) pass
through to the connection's mapping in ``errors.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, TypeVar

from segmentstore_client.protocol import (
    NOT_EXISTS,
    CreateTableSegment,
    DeleteTableSegment,
    ErrorMessage,
    GetTableSegmentInfo,
    OperationUnsupported,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    Reply,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsTruncated,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableEntry,
    TableKey,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentInfo,
    TableSegmentNotEmpty,
    UpdateTableEntries,
)

from ..tables import (
    IllegalTableArgument,
    TableError,
    TableKeyNotFound,
    TableKeyVersionMismatch,
    TableNotEmpty,
    TableOffsetMismatch,
    TableOperationUnsupported,
)
from .context import HandlerTable, ServerContext

ILLEGAL_ARGUMENT = 0
UNSPECIFIED = -1

C = TypeVar("C")


def _table_error(request_id: int, segment: str, e: TableError) -> Reply:
    if isinstance(e, TableKeyNotFound):
        return TableKeyDoesNotExist(request_id, segment, "")
    if isinstance(e, TableKeyVersionMismatch):
        return TableKeyBadVersion(request_id, segment, "")
    if isinstance(e, TableNotEmpty):
        return TableSegmentNotEmpty(request_id, segment, "")
    if isinstance(e, TableOffsetMismatch):
        # Java's reply for a failed tableSegmentOffset condition (reference 10.2).
        return SegmentIsTruncated(request_id, segment, e.current, "", e.expected)
    if isinstance(e, TableOperationUnsupported):
        return OperationUnsupported(request_id, e.operation, "")
    if isinstance(e, IllegalTableArgument):
        return ErrorMessage(request_id, segment, str(e), ILLEGAL_ARGUMENT)
    return ErrorMessage(request_id, segment, str(e), UNSPECIFIED)


def _answers_table_errors(
    fn: Callable[[ServerContext, C], Awaitable[Reply]],
) -> Callable[[ServerContext, C], Awaitable[Reply]]:
    @wraps(fn)
    async def handler(ctx: ServerContext, cmd: C) -> Reply:
        try:
            return await fn(ctx, cmd)
        except TableError as e:
            c: Any = cmd
            segment = c.segment_name if isinstance(cmd, GetTableSegmentInfo) else c.segment
            return _table_error(c.request_id, segment, e)

    return handler


@_answers_table_errors
async def create_table_segment(ctx: ServerContext, cmd: CreateTableSegment) -> Reply:
    await ctx.tables.create(cmd.segment, cmd.key_length, cmd.rollover_size_bytes)
    return SegmentCreated(cmd.request_id, cmd.segment)


@_answers_table_errors
async def delete_table_segment(ctx: ServerContext, cmd: DeleteTableSegment) -> Reply:
    await ctx.tables.delete(cmd.segment, cmd.must_be_empty)
    return SegmentDeleted(cmd.request_id, cmd.segment)


@_answers_table_errors
async def get_table_segment_info(ctx: ServerContext, cmd: GetTableSegmentInfo) -> Reply:
    info = await ctx.tables.info(cmd.segment_name)
    return TableSegmentInfo(
        cmd.request_id,
        cmd.segment_name,
        info.start_offset,
        info.length,
        info.entry_count,
        info.key_length,
    )


@_answers_table_errors
async def update_table_entries(ctx: ServerContext, cmd: UpdateTableEntries) -> Reply:
    versions = await ctx.tables.update(
        cmd.segment,
        [(e.key, e.value, e.version) for e in cmd.table_entries],
        cmd.table_segment_offset,
    )
    return TableEntriesUpdated(cmd.request_id, tuple(versions))


@_answers_table_errors
async def remove_table_keys(ctx: ServerContext, cmd: RemoveTableKeys) -> Reply:
    await ctx.tables.remove(
        cmd.segment, [(k.key, k.version) for k in cmd.keys], cmd.table_segment_offset
    )
    return TableKeysRemoved(cmd.request_id, cmd.segment)


@_answers_table_errors
async def read_table(ctx: ServerContext, cmd: ReadTable) -> Reply:
    keys = [bytes(k.key) for k in cmd.keys]
    found = await ctx.tables.get(cmd.segment, keys)
    entries = tuple(
        TableEntry(key, b"", NOT_EXISTS) if f is None else TableEntry(key, f[1], f[0])
        for key, f in zip(keys, found, strict=True)
    )
    return TableRead(cmd.request_id, cmd.segment, entries)


@_answers_table_errors
async def read_table_keys(ctx: ServerContext, cmd: ReadTableKeys) -> Reply:
    a = cmd.args
    keys, token = await ctx.tables.read_keys(
        cmd.segment, cmd.suggested_key_count, a.continuation_token, a.from_key, a.to_key
    )
    return TableKeysRead(cmd.request_id, cmd.segment, tuple(TableKey(k, v) for k, v in keys), token)


@_answers_table_errors
async def read_table_entries(ctx: ServerContext, cmd: ReadTableEntries) -> Reply:
    a = cmd.args
    entries, token = await ctx.tables.read_entries(
        cmd.segment, cmd.suggested_entry_count, a.continuation_token, a.from_key, a.to_key
    )
    return TableEntriesRead(
        cmd.request_id, cmd.segment, tuple(TableEntry(k, v, ver) for k, v, ver in entries), token
    )


@_answers_table_errors
async def read_table_entries_delta(ctx: ServerContext, cmd: ReadTableEntriesDelta) -> Reply:
    d = await ctx.tables.read_delta(cmd.segment, cmd.from_position, cmd.suggested_entry_count)
    return TableEntriesDeltaRead(
        cmd.request_id,
        cmd.segment,
        tuple(TableEntry(k, v, ver) for k, v, ver in d.entries),
        d.should_clear,
        d.reached_end,
        d.last_position,
    )


TABLE_HANDLERS: HandlerTable = {
    CreateTableSegment: create_table_segment,
    DeleteTableSegment: delete_table_segment,
    GetTableSegmentInfo: get_table_segment_info,
    UpdateTableEntries: update_table_entries,
    RemoveTableKeys: remove_table_keys,
    ReadTable: read_table,
    ReadTableKeys: read_table_keys,
    ReadTableEntries: read_table_entries,
    ReadTableEntriesDelta: read_table_entries_delta,
}
