"""The table request handlers in process: each command's success reply and every error reply
(reference 6.6, 10, 12.1), and that each reply encodes to a frame that decodes back equal."""

from __future__ import annotations

import pytest
from segmentstore_client.protocol import (
    NO_VERSION,
    NOT_EXISTS,
    Command,
    CreateTableSegment,
    DeleteTableSegment,
    ErrorMessage,
    GetTableSegmentInfo,
    NoSuchSegment,
    OperationUnsupported,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    Reply,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsTruncated,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableEntry,
    TableIteratorArgs,
    TableKey,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentInfo,
    TableSegmentNotEmpty,
    UpdateTableEntries,
    decode,
    encode,
)

from segmentstore.server.context import ServerContext
from segmentstore.server.errors import error_reply
from segmentstore.server.metrics import Metrics
from segmentstore.server.table_handlers import TABLE_HANDLERS
from segmentstore.storage import SegmentStore, StorageError
from segmentstore.tables import TableStore

T = "sc/_tables/t1"
F = "sc/_tables/fixed"


@pytest.fixture
def ctx(store: SegmentStore, tables: TableStore) -> ServerContext:
    return ServerContext(store, tables, Metrics())


async def call(ctx: ServerContext, cmd: Command) -> Reply:
    """Serve ``cmd`` as the connection does: handler, else storage error mapping."""
    try:
        reply = await TABLE_HANDLERS[type(cmd)](ctx, cmd)
    except StorageError as e:
        mapped = error_reply(cmd, e)
        assert mapped is not None, e
        reply = mapped
    assert decode(encode(reply)) == reply  # every field laid out, decodable
    return reply


def test_every_table_command_has_a_handler() -> None:
    assert set(TABLE_HANDLERS) == {
        CreateTableSegment,
        DeleteTableSegment,
        GetTableSegmentInfo,
        UpdateTableEntries,
        RemoveTableKeys,
        ReadTable,
        ReadTableKeys,
        ReadTableEntries,
        ReadTableEntriesDelta,
    }


async def test_create_info_delete(ctx: ServerContext) -> None:
    assert await call(ctx, CreateTableSegment(1, T, "")) == SegmentCreated(1, T)
    assert await call(ctx, CreateTableSegment(2, T, "")) == SegmentAlreadyExists(2, T, "")
    assert await call(ctx, CreateTableSegment(3, F, "", False, 16)) == SegmentCreated(3, F)
    reply = await call(ctx, CreateTableSegment(4, "sc/_tables/big", "", False, 257))
    assert isinstance(reply, ErrorMessage) and reply.error_code == 0
    assert await call(ctx, GetTableSegmentInfo(5, F, "")) == TableSegmentInfo(5, F, 0, 0, 0, 16)
    assert await call(ctx, GetTableSegmentInfo(6, "nope", "")) == NoSuchSegment(6, "nope", "", -1)
    await call(ctx, UpdateTableEntries(7, T, "", (TableEntry(b"k", b"v", NO_VERSION),)))
    info = await call(ctx, GetTableSegmentInfo(8, T, ""))
    assert isinstance(info, TableSegmentInfo) and info.entry_count == 1 and info.length > 0
    assert await call(ctx, DeleteTableSegment(9, T, True, "")) == TableSegmentNotEmpty(9, T, "")
    assert await call(ctx, DeleteTableSegment(10, F, True, "")) == OperationUnsupported(
        10, "deleteTableSegment", ""
    )
    assert await call(ctx, DeleteTableSegment(11, T, False, "")) == SegmentDeleted(11, T)
    assert await call(ctx, DeleteTableSegment(12, T, False, "")) == NoSuchSegment(12, T, "", -1)
    # A plain stream segment is not a table.
    await ctx.store.create_segment("sc/st/0.#epoch.0")
    reply = await call(ctx, GetTableSegmentInfo(13, "sc/st/0.#epoch.0", ""))
    assert isinstance(reply, ErrorMessage) and reply.error_code == 0


async def test_updates_removals_and_reads(ctx: ServerContext) -> None:
    await call(ctx, CreateTableSegment(1, T, ""))
    reply = await call(
        ctx,
        UpdateTableEntries(
            2, T, "", (TableEntry(b"a", b"1", NOT_EXISTS), TableEntry(b"b", b"2", NOT_EXISTS))
        ),
    )
    assert isinstance(reply, TableEntriesUpdated)
    va, vb = reply.updated_versions
    assert await call(
        ctx, UpdateTableEntries(3, T, "", (TableEntry(b"a", b"x", NOT_EXISTS),))
    ) == TableKeyBadVersion(3, T, "")
    assert await call(
        ctx,
        UpdateTableEntries(4, T, "", (TableEntry(b"a", b"x", va + 1), TableEntry(b"z", b"", 7))),
    ) == TableKeyDoesNotExist(4, T, "")
    reply = await call(ctx, UpdateTableEntries(5, T, "", (TableEntry(b"a", b"x", -5),)))
    assert isinstance(reply, ErrorMessage) and reply.error_code == 0 and reply.segment == T
    # tableSegmentOffset mismatch -> SegmentIsTruncated(startOffset = current length).
    length = (await ctx.tables.info(T)).length
    assert await call(
        ctx, UpdateTableEntries(6, T, "", (TableEntry(b"a", b"x", NO_VERSION),), 3)
    ) == SegmentIsTruncated(6, T, length, "", 3)
    assert await call(
        ctx, RemoveTableKeys(7, T, "", (TableKey(b"a", NO_VERSION),), 5)
    ) == SegmentIsTruncated(7, T, length, "", 5)
    assert await call(ctx, ReadTable(8, T, "", (TableKey(b"b"), TableKey(b"nope")))) == TableRead(
        8, T, (TableEntry(b"b", b"2", vb), TableEntry(b"nope", b"", NOT_EXISTS))
    )
    assert await call(ctx, RemoveTableKeys(9, T, "", (TableKey(b"a", vb),))) == TableKeyBadVersion(
        9, T, ""
    )
    assert await call(
        ctx, RemoveTableKeys(10, T, "", (TableKey(b"zz", 0),))
    ) == TableKeyDoesNotExist(10, T, "")
    assert await call(
        ctx, RemoveTableKeys(11, T, "", (TableKey(b"a", va), TableKey(b"gone", NO_VERSION)))
    ) == TableKeysRemoved(11, T)
    assert await call(
        ctx, UpdateTableEntries(12, "nope", "", (TableEntry(b"a", b"x"),), 4)
    ) == NoSuchSegment(12, "nope", "", 4)
    reply = await call(ctx, ReadTable(13, T, "", (TableKey(b""),)))
    assert isinstance(reply, ErrorMessage) and reply.error_code == 0


async def test_iteration_replies(ctx: ServerContext) -> None:
    await call(ctx, CreateTableSegment(1, T, ""))
    entries = tuple(TableEntry(b"k%d" % i, b"v%d" % i, NO_VERSION) for i in range(5))
    reply = await call(ctx, UpdateTableEntries(2, T, "", entries))
    assert isinstance(reply, TableEntriesUpdated)
    versions = dict(zip([e.key for e in entries], reply.updated_versions, strict=True))
    keys: list[TableKey] = []
    token: bytes = b""
    for rid in range(3, 20):
        r = await call(ctx, ReadTableKeys(rid, T, "", 2, TableIteratorArgs(token)))
        assert isinstance(r, TableKeysRead)
        if not r.keys:
            assert bytes(r.continuation_token) == b""
            break
        keys.extend(r.keys)
        token = bytes(r.continuation_token)
    assert [(bytes(k.key), k.version) for k in keys] == sorted(versions.items())
    r = await call(ctx, ReadTableEntries(30, T, "", 10, TableIteratorArgs()))
    assert isinstance(r, TableEntriesRead) and len(r.entries) == 5
    assert r.entries[0] == TableEntry(b"k0", b"v0", versions[b"k0"])
    r = await call(ctx, ReadTableKeys(31, T, "", 10, TableIteratorArgs(b"", b"", b"k1", b"")))
    assert isinstance(r, ErrorMessage) and r.error_code == 0
    r = await call(ctx, ReadTableEntries(32, T, "", 10, TableIteratorArgs(b"\x07bogus")))
    assert isinstance(r, ErrorMessage) and r.error_code == 0
    await call(ctx, CreateTableSegment(33, F, "", False, 2))
    await call(
        ctx, UpdateTableEntries(34, F, "", (TableEntry(b"ab", b"1"), TableEntry(b"zz", b"2")))
    )
    r = await call(ctx, ReadTableKeys(35, F, "", 10, TableIteratorArgs(b"", b"", b"ac", b"zz")))
    assert isinstance(r, TableKeysRead) and [bytes(k.key) for k in r.keys] == [b"zz"]
    r = await call(ctx, ReadTableEntriesDelta(36, F, "", 0, 10))
    assert r == OperationUnsupported(36, "readTableEntriesDelta", "")


async def test_delta_replies(ctx: ServerContext) -> None:
    await call(ctx, CreateTableSegment(1, T, ""))
    reply = await call(ctx, UpdateTableEntries(2, T, "", (TableEntry(b"a", b"1", NOT_EXISTS),)))
    assert isinstance(reply, TableEntriesUpdated)
    length = (await ctx.tables.info(T)).length
    assert await call(ctx, ReadTableEntriesDelta(3, T, "", 0, 10)) == TableEntriesDeltaRead(
        3, T, (TableEntry(b"a", b"1", reply.updated_versions[0]),), False, True, length
    )
    assert await call(ctx, ReadTableEntriesDelta(4, T, "", length, 10)) == TableEntriesDeltaRead(
        4, T, (), False, True, 0
    )
    r = await call(ctx, ReadTableEntriesDelta(5, T, "", length + 1, 10))
    assert isinstance(r, ErrorMessage) and r.error_code == 0
    assert await call(ctx, ReadTableEntriesDelta(6, "nope", "", 0, 10)) == NoSuchSegment(
        6, "nope", "", -1
    )
