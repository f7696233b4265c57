"""Table segments over TCP against a real ``segmentstore serve`` process: every table command
and error reply, a replay of the official client's reader-group traces, kill -9 + restart."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from segmentstore_client.protocol import (
    NO_VERSION,
    NOT_EXISTS,
    Command,
    CreateSegment,
    CreateTableSegment,
    DeleteTableSegment,
    ErrorMessage,
    GetTableSegmentInfo,
    Hello,
    NoSuchSegment,
    OperationUnsupported,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
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
)

from .rawclient import RawClient

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

# The traces are kept in the repo (tests/protocol/vectors) so a bare clone can run them.
VECTORS = Path(__file__).resolve().parents[1] / "protocol" / "vectors"

T = "sc/_tables/wire"
F = "sc/_tables/wirefixed"


async def test_every_table_command_and_error_over_tcp(server: ServerProcess) -> None:
    c = await RawClient.connect(server.host, server.port)
    try:
        assert await c.request(CreateTableSegment(1, T, "")) == SegmentCreated(1, T)
        assert await c.request(CreateTableSegment(2, T, "")) == SegmentAlreadyExists(2, T, "")
        assert await c.request(CreateTableSegment(3, F, "", False, 4)) == SegmentCreated(3, F)
        r = await c.request(CreateTableSegment(4, "sc/_tables/x", "", False, 300))
        assert isinstance(r, ErrorMessage) and r.error_code == 0

        r = await c.request(
            UpdateTableEntries(
                5, T, "", (TableEntry(b"a", b"1", NOT_EXISTS), TableEntry(b"b", b"2", NOT_EXISTS))
            )
        )
        assert isinstance(r, TableEntriesUpdated) and len(r.updated_versions) == 2
        va, vb = r.updated_versions
        assert await c.request(
            UpdateTableEntries(6, T, "", (TableEntry(b"a", b"x", NOT_EXISTS),))
        ) == TableKeyBadVersion(6, T, "")
        assert await c.request(
            UpdateTableEntries(7, T, "", (TableEntry(b"zz", b"x", 12),))
        ) == TableKeyDoesNotExist(7, T, "")
        r = await c.request(UpdateTableEntries(8, T, "", (TableEntry(b"a", b"x", -7),)))
        assert isinstance(r, ErrorMessage) and r.error_code == 0
        info = await c.request(GetTableSegmentInfo(9, T, ""))
        assert isinstance(info, TableSegmentInfo)
        assert (info.start_offset, info.entry_count, info.key_length) == (0, 2, 0)
        assert await c.request(
            UpdateTableEntries(10, T, "", (TableEntry(b"a", b"x", NO_VERSION),), 1)
        ) == SegmentIsTruncated(10, T, info.length, "", 1)
        r = await c.request(
            UpdateTableEntries(11, T, "", (TableEntry(b"a", b"3", va),), info.length)
        )
        assert isinstance(r, TableEntriesUpdated)
        [va2] = r.updated_versions
        assert va2 == info.length

        assert await c.request(
            ReadTable(12, T, "", (TableKey(b"a"), TableKey(b"nope")))
        ) == TableRead(12, T, (TableEntry(b"a", b"3", va2), TableEntry(b"nope", b"", NOT_EXISTS)))
        r = await c.request(ReadTableKeys(13, T, "", 1, TableIteratorArgs()))
        assert isinstance(r, TableKeysRead) and r.keys == (TableKey(b"a", va2),)
        r = await c.request(ReadTableEntries(14, T, "", 5, TableIteratorArgs(r.continuation_token)))
        assert isinstance(r, TableEntriesRead) and r.entries == (TableEntry(b"b", b"2", vb),)
        r = await c.request(ReadTableEntries(15, T, "", 5, TableIteratorArgs(r.continuation_token)))
        assert r == TableEntriesRead(15, T, (), b"")
        r = await c.request(ReadTableKeys(16, T, "", 5, TableIteratorArgs(b"", b"", b"a", b"")))
        assert isinstance(r, ErrorMessage) and r.error_code == 0

        r = await c.request(ReadTableEntriesDelta(17, T, "", 0, 10))
        assert isinstance(r, TableEntriesDeltaRead)
        assert r.entries == (TableEntry(b"a", b"3", va2), TableEntry(b"b", b"2", vb))
        length = r.last_position
        assert r.reached_end and not r.should_clear
        assert await c.request(ReadTableEntriesDelta(18, T, "", length, 10)) == (
            TableEntriesDeltaRead(18, T, (), False, True, 0)
        )
        r = await c.request(ReadTableEntriesDelta(19, T, "", length + 1, 10))
        assert isinstance(r, ErrorMessage) and r.error_code == 0

        assert await c.request(
            RemoveTableKeys(20, T, "", (TableKey(b"a", va),))
        ) == TableKeyBadVersion(20, T, "")
        assert await c.request(
            RemoveTableKeys(21, T, "", (TableKey(b"q", 0),))
        ) == TableKeyDoesNotExist(21, T, "")
        assert await c.request(
            RemoveTableKeys(22, T, "", (TableKey(b"a", NO_VERSION),), 3)
        ) == SegmentIsTruncated(22, T, length, "", 3)
        assert await c.request(
            RemoveTableKeys(23, T, "", (TableKey(b"a", va2), TableKey(b"never")))
        ) == TableKeysRemoved(23, T)
        assert await c.request(DeleteTableSegment(24, T, True, "")) == TableSegmentNotEmpty(
            24, T, ""
        )

        # Fixed-key table: ordered ranges, no delta reads, no mustBeEmpty delete.
        keys = [bytes([0, 0, 0, i]) for i in (9, 1, 5)]
        r = await c.request(UpdateTableEntries(25, F, "", tuple(TableEntry(k, k) for k in keys)))
        assert isinstance(r, TableEntriesUpdated)
        r = await c.request(
            ReadTableKeys(26, F, "", 10, TableIteratorArgs(b"", b"", b"\0\0\0\2", b"\0\0\0\x09"))
        )
        assert isinstance(r, TableKeysRead)
        assert [bytes(k.key) for k in r.keys] == [b"\0\0\0\5", b"\0\0\0\x09"]
        r = await c.request(UpdateTableEntries(27, F, "", (TableEntry(b"abc", b""),)))
        assert isinstance(r, ErrorMessage) and r.error_code == 0
        assert await c.request(ReadTableEntriesDelta(28, F, "", 0, 10)) == OperationUnsupported(
            28, "readTableEntriesDelta", ""
        )
        assert await c.request(DeleteTableSegment(29, F, True, "")) == OperationUnsupported(
            29, "deleteTableSegment", ""
        )
        assert await c.request(DeleteTableSegment(30, F, False, "")) == SegmentDeleted(30, F)

        # Missing segments and non-table segments.
        for rid, cmd in enumerate(
            [
                GetTableSegmentInfo(31, "nope", ""),
                ReadTable(31, "nope", "", (TableKey(b"a"),)),
                ReadTableKeys(31, "nope", "", 10, TableIteratorArgs()),
                ReadTableEntries(31, "nope", "", 10, TableIteratorArgs()),
                ReadTableEntriesDelta(31, "nope", "", 0, 10),
                DeleteTableSegment(31, "nope", False, ""),
                RemoveTableKeys(31, "nope", "", (TableKey(b"a"),)),
            ],
            start=31,
        ):
            cmd = dataclasses.replace(cmd, request_id=rid)  # type: ignore[type-var]
            assert await c.request(cmd) == NoSuchSegment(rid, "nope", "", -1)
        assert await c.request(
            UpdateTableEntries(40, "nope", "", (TableEntry(b"a", b""),), 6)
        ) == NoSuchSegment(40, "nope", "", 6)
        await c.request(CreateSegment(41, "sc/st/0.#epoch.0", 0, 0, ""))
        r = await c.request(ReadTable(42, "sc/st/0.#epoch.0", "", (TableKey(b"a"),)))
        assert isinstance(r, ErrorMessage) and r.error_code == 0

        # Delete when empty, then everything on it is NoSuchSegment.
        r = await c.request(RemoveTableKeys(43, T, "", (TableKey(b"b", vb),)))
        assert r == TableKeysRemoved(43, T)
        assert await c.request(DeleteTableSegment(44, T, True, "")) == SegmentDeleted(44, T)
        assert await c.request(ReadTable(45, T, "", (TableKey(b"b"),))) == NoSuchSegment(
            45, T, "", -1
        )
    finally:
        await c.close()


# ---------------------------------------------------------------------- trace replay

TABLE_REQUESTS = (
    CreateTableSegment,
    DeleteTableSegment,
    GetTableSegmentInfo,
    UpdateTableEntries,
    RemoveTableKeys,
    ReadTable,
    ReadTableKeys,
    ReadTableEntries,
    ReadTableEntriesDelta,
)


def load_trace(name: str) -> list[tuple[str, str, bytes]]:
    out = []
    for line in (VECTORS / name).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        direction, conn, _type, _name, hexdata = line.split()[:5]
        out.append((direction, conn, bytes.fromhex(hexdata)))
    return out


def translate(cmd: Command, versions: dict[int, int], positions: dict[int, int]) -> Command:
    """The trace's request with the fake store's versions/positions replaced by ours."""
    if isinstance(cmd, UpdateTableEntries):
        entries = tuple(
            dataclasses.replace(e, version=versions[e.version]) if e.version >= 0 else e
            for e in cmd.table_entries
        )
        return dataclasses.replace(cmd, table_entries=entries)
    if isinstance(cmd, RemoveTableKeys):
        keys = tuple(
            dataclasses.replace(k, version=versions[k.version]) if k.version >= 0 else k
            for k in cmd.keys
        )
        return dataclasses.replace(cmd, keys=keys)
    if isinstance(cmd, ReadTableEntriesDelta) and cmd.from_position > 0:
        return dataclasses.replace(cmd, from_position=positions[cmd.from_position])
    return cmd


@pytest.mark.parametrize(
    "trace", ["official-client-reader-group.hex", "official-client-reader-group-tail.hex"]
)
async def test_reader_group_trace_replay(server: ServerProcess, trace: str) -> None:
    """Replay every table request the official client made for a reader group; each reply
    must have the trace's type and outcome. Versions and positions are this server's own,
    so the ones the client echoes are mapped from the trace's numbering to ours."""
    frames = load_trace(trace)
    table_conns = {
        conn for d, conn, data in frames if d == "C>S" and isinstance(decode(data), TABLE_REQUESTS)
    }
    versions: dict[int, int] = {}
    positions: dict[int, int] = {}
    conns: dict[str, RawClient] = {}
    expected: dict[int, Command] = {
        rid: cmd
        for d, _c, data in frames
        if d == "S>C" and (rid := getattr(cmd := decode(data), "request_id", None)) is not None
    }
    written: dict[tuple[str, bytes], bytes] = {}
    checked = 0
    try:
        for direction, conn, data in frames:
            if direction != "C>S" or conn not in table_conns:
                continue
            cmd = decode(data)
            if conn not in conns:
                conns[conn] = await RawClient.connect(server.host, server.port, hello=False)
            client = conns[conn]
            if isinstance(cmd, Hello):
                client.send_raw(data)  # the client's own bytes
                assert await client.next(lambda c: isinstance(c, Hello)) == Hello(17, 5)
                continue
            if not isinstance(cmd, TABLE_REQUESTS):
                continue  # reads/appends of the stream itself: not this test's business
            ours = translate(cmd, versions, positions)
            if ours == cmd:
                client.send_raw(data)
            else:
                client.send(ours)
            actual = await client.reply_to(cmd.request_id)
            want = expected[cmd.request_id]
            where = f"{trace} request {cmd.request_id}"
            assert type(actual) is type(want), f"{where}: {actual!r} != {want!r}"
            if isinstance(want, TableEntriesUpdated):
                assert isinstance(actual, TableEntriesUpdated)
                assert len(actual.updated_versions) == len(want.updated_versions), where
                versions.update(zip(want.updated_versions, actual.updated_versions, strict=True))
                assert isinstance(cmd, UpdateTableEntries)
                for e in cmd.table_entries:
                    written[(cmd.segment, bytes(e.key))] = bytes(e.value)
            elif isinstance(want, TableEntriesDeltaRead):
                assert isinstance(actual, TableEntriesDeltaRead)
                got = [(bytes(e.key), bytes(e.value)) for e in actual.entries]
                assert got == [(bytes(e.key), bytes(e.value)) for e in want.entries], where
                for w, a in zip(want.entries, actual.entries, strict=True):
                    assert versions[w.version] == a.version, where
                assert (actual.should_clear, actual.reached_end) == (
                    want.should_clear,
                    want.reached_end,
                ), where
                if want.entries:
                    positions[want.last_position] = actual.last_position
                else:
                    assert actual.last_position == 0, where  # reference 10.4
            else:
                assert actual == want, f"{where}: {actual!r} != {want!r}"
            checked += 1
        assert checked >= 8
        # The table holds what the client last wrote to each key.
        client = next(iter(conns.values()))
        by_segment: dict[str, list[bytes]] = {}
        for seg, key in written:
            by_segment.setdefault(seg, []).append(key)
        for seg, keys in by_segment.items():
            r = await client.request(ReadTable(999_999, seg, "", tuple(TableKey(k) for k in keys)))
            assert isinstance(r, TableRead)
            assert [(bytes(e.key), bytes(e.value)) for e in r.entries] == [
                (k, written[(seg, k)]) for k in keys
            ]
    finally:
        for c in conns.values():
            await c.close()


# ---------------------------------------------------------------------- crash


async def test_acknowledged_table_writes_survive_kill_9(
    server_factory: type[ServerProcess],
) -> None:
    srv = server_factory()
    srv.start()
    c = await RawClient.connect(srv.host, srv.port)
    acked: dict[bytes, tuple[int, bytes]] = {}
    try:
        assert await c.request(CreateTableSegment(1, T, "")) == SegmentCreated(1, T)
        rid = 10
        for i in range(200):
            key = b"k%d" % (i % 25)
            cond = acked[key][0] if key in acked else NOT_EXISTS
            value = b"v%d" % i
            rid += 1
            r = await c.request(UpdateTableEntries(rid, T, "", (TableEntry(key, value, cond),)))
            assert isinstance(r, TableEntriesUpdated), r
            acked[key] = (r.updated_versions[0], value)
        rid += 1
        r = await c.request(RemoveTableKeys(rid, T, "", (TableKey(b"k0", acked[b"k0"][0]),)))
        assert r == TableKeysRemoved(rid, T)
        del acked[b"k0"]
        # Writes in flight at the kill may or may not land; acknowledged ones must.
        for i in range(20):
            c.send(UpdateTableEntries(5000 + i, T, "", (TableEntry(b"inflight%d" % i, b"x"),)))
    finally:
        await c.close()
    srv.kill()
    srv.restart()
    c = await RawClient.connect(srv.host, srv.port)
    try:
        keys = [*sorted(acked), b"k0"]
        r = await c.request(ReadTable(1, T, "", tuple(TableKey(k) for k in keys)))
        assert isinstance(r, TableRead)
        got = {bytes(e.key): (e.version, bytes(e.value)) for e in r.entries}
        assert got == {**acked, b"k0": (NOT_EXISTS, b"")}
        # Old versions are rejected, current ones accepted, new versions keep growing.
        k1_version = acked[b"k1"][0]
        r = await c.request(UpdateTableEntries(2, T, "", (TableEntry(b"k1", b"new", k1_version),)))
        assert isinstance(r, TableEntriesUpdated)
        assert r.updated_versions[0] > max(v for v, _ in acked.values())
        r = await c.request(UpdateTableEntries(3, T, "", (TableEntry(b"k1", b"x", k1_version),)))
        assert r == TableKeyBadVersion(3, T, "")
    finally:
        await c.close()
