"""TableStore on the real storage engine: every operation, condition and error (reference 10)."""

from __future__ import annotations

import asyncio

import pytest

from segmentstore.storage import (
    SEGMENT_TYPE_FIXED_KEY_TABLE,
    SEGMENT_TYPE_TABLE,
    SegmentExists,
    SegmentNotFound,
    SegmentSealed,
    SegmentStore,
)
from segmentstore.tables import (
    NO_VERSION,
    NOT_EXISTS,
    IllegalTableArgument,
    NotATableSegment,
    TableKeyNotFound,
    TableKeyVersionMismatch,
    TableNotEmpty,
    TableOffsetMismatch,
    TableOperationUnsupported,
    TableStore,
)
from segmentstore.tables.records import HEAD_SIZE, MAX_KEY_LENGTH, MAX_VALUE_LENGTH

from .conftest import MakeTable, Opened


def record_size(key: bytes, value: bytes = b"") -> int:
    return HEAD_SIZE + len(key) + len(value)


# ---------------------------------------------------------------------- lifecycle


async def test_create_and_info(tables: TableStore, store: SegmentStore) -> None:
    await tables.create("sc/_tables/h")
    await tables.create("sc/_tables/f", key_length=8)
    assert store.info("sc/_tables/h").segment_type == SEGMENT_TYPE_TABLE
    assert store.info("sc/_tables/f").segment_type == SEGMENT_TYPE_FIXED_KEY_TABLE
    info = await tables.info("sc/_tables/h")
    assert (info.start_offset, info.length, info.entry_count, info.key_length) == (0, 0, 0, 0)
    assert (await tables.info("sc/_tables/f")).key_length == 8
    await tables.update("sc/_tables/h", [(b"a", b"1", NO_VERSION), (b"b", b"2", NO_VERSION)])
    info = await tables.info("sc/_tables/h")
    assert info.entry_count == 2
    assert info.length == record_size(b"a", b"1") + record_size(b"b", b"2")


async def test_create_errors(tables: TableStore, store: SegmentStore) -> None:
    await tables.create("sc/_tables/x")
    with pytest.raises(SegmentExists):
        await tables.create("sc/_tables/x")
    await store.create_segment("sc/st/0.#epoch.0")
    with pytest.raises(SegmentExists):
        await tables.create("sc/st/0.#epoch.0")
    for bad in (-1, 257):
        with pytest.raises(IllegalTableArgument):
            await tables.create("sc/_tables/bad", key_length=bad)
    await tables.create("sc/_tables/k256", key_length=256)


async def test_missing_and_non_table_segments(tables: TableStore, store: SegmentStore) -> None:
    with pytest.raises(SegmentNotFound):
        await tables.get("nope", [b"k"])
    with pytest.raises(SegmentNotFound):
        await tables.update("nope", [(b"k", b"v", NO_VERSION)])
    with pytest.raises(SegmentNotFound):
        await tables.delete("nope")
    with pytest.raises(SegmentNotFound):
        await tables.read_delta("nope", 0, 10)
    await store.create_segment("sc/st/0.#epoch.0")
    with pytest.raises(NotATableSegment):
        await tables.update("sc/st/0.#epoch.0", [(b"k", b"v", NO_VERSION)])
    with pytest.raises(NotATableSegment):
        await tables.info("sc/st/0.#epoch.0")


async def test_delete(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    await tables.update(name, [(b"k", b"v", NO_VERSION)])
    with pytest.raises(TableNotEmpty):
        await tables.delete(name, must_be_empty=True)
    await tables.remove(name, [(b"k", NO_VERSION)])
    await tables.delete(name, must_be_empty=True)
    with pytest.raises(SegmentNotFound):
        await tables.get(name, [b"k"])
    with pytest.raises(SegmentNotFound):
        await tables.delete(name)
    # Non-empty delete without mustBeEmpty, then the name can be reused, empty.
    name2 = await make_table()
    await tables.update(name2, [(b"k", b"v", NO_VERSION)])
    await tables.delete(name2, must_be_empty=False)
    await tables.create(name2)
    assert await tables.get(name2, [b"k"]) == [None]


async def test_delete_must_be_empty_on_fixed_key_table_is_unsupported(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table(key_length=4)
    with pytest.raises(TableOperationUnsupported):
        await tables.delete(name, must_be_empty=True)
    await tables.delete(name, must_be_empty=False)


async def test_segment_deleted_underneath_is_not_found(
    tables: TableStore, store: SegmentStore, make_table: MakeTable
) -> None:
    name = await make_table()
    await tables.update(name, [(b"k", b"v", NO_VERSION)])
    await store.delete(name)
    with pytest.raises(SegmentNotFound):
        await tables.get(name, [b"k"])


async def test_sealed_table_refuses_writes_and_keeps_reads(
    tables: TableStore, store: SegmentStore, make_table: MakeTable
) -> None:
    name = await make_table()
    [v] = await tables.update(name, [(b"k", b"v", NO_VERSION)])
    await store.seal(name)
    with pytest.raises(SegmentSealed):
        await tables.update(name, [(b"k", b"w", NO_VERSION)])
    assert await tables.get(name, [b"k"]) == [(v, b"v")]


# ---------------------------------------------------------------------- updates and versions


async def test_versions_are_record_offsets_and_grow(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table()
    v = await tables.update(name, [(b"a", b"1", NO_VERSION), (b"bb", b"22", NO_VERSION)])
    assert v == [0, record_size(b"a", b"1")]
    v2 = await tables.update(name, [(b"a", b"333", NO_VERSION)])
    assert v2 == [record_size(b"a", b"1") + record_size(b"bb", b"22")]
    assert await tables.get(name, [b"a", b"bb", b"zz"]) == [(v2[0], b"333"), (v[1], b"22"), None]


async def test_conditions(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    [v1] = await tables.update(name, [(b"k", b"1", NOT_EXISTS)])
    with pytest.raises(TableKeyVersionMismatch):
        await tables.update(name, [(b"k", b"x", NOT_EXISTS)])
    [v2] = await tables.update(name, [(b"k", b"2", v1)])
    assert v2 > v1
    with pytest.raises(TableKeyVersionMismatch):
        await tables.update(name, [(b"k", b"x", v1)])  # stale
    with pytest.raises(TableKeyNotFound):
        await tables.update(name, [(b"absent", b"x", 0)])
    assert await tables.get(name, [b"k"]) == [(v2, b"2")]


async def test_conditional_batch_is_all_or_nothing(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table()
    [va, vb] = await tables.update(name, [(b"a", b"1", NO_VERSION), (b"b", b"1", NO_VERSION)])
    length = (await tables.info(name)).length
    with pytest.raises(TableKeyVersionMismatch):
        await tables.update(
            name, [(b"a", b"2", va), (b"new", b"2", NO_VERSION), (b"b", b"2", vb + 1)]
        )
    assert await tables.get(name, [b"a", b"b", b"new"]) == [(va, b"1"), (vb, b"1"), None]
    assert (await tables.info(name)).length == length
    with pytest.raises(TableKeyVersionMismatch):
        await tables.remove(name, [(b"a", va), (b"b", vb + 1)])
    assert await tables.get(name, [b"a", b"b"]) == [(va, b"1"), (vb, b"1")]


async def test_key_does_not_exist_has_precedence(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    [va] = await tables.update(name, [(b"a", b"1", NO_VERSION)])
    with pytest.raises(TableKeyNotFound):
        await tables.update(name, [(b"a", b"2", va + 1), (b"absent", b"2", 5)])
    with pytest.raises(TableKeyNotFound):
        await tables.remove(name, [(b"a", NOT_EXISTS), (b"absent", 5)])


async def test_illegal_arguments(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    for bad_version in (-2, -100, NO_VERSION + 1):
        with pytest.raises(IllegalTableArgument):
            await tables.update(name, [(b"k", b"v", bad_version)])
        with pytest.raises(IllegalTableArgument):
            await tables.remove(name, [(b"k", bad_version)])
    with pytest.raises(IllegalTableArgument):
        await tables.update(name, [(b"", b"v", NO_VERSION)])
    with pytest.raises(IllegalTableArgument):
        await tables.update(name, [(b"k" * (MAX_KEY_LENGTH + 1), b"v", NO_VERSION)])
    with pytest.raises(IllegalTableArgument):
        await tables.update(name, [(b"k", b"v" * (MAX_VALUE_LENGTH + 1), NO_VERSION)])
    with pytest.raises(IllegalTableArgument):
        await tables.get(name, [b""])
    # Nothing was written by any of those.
    assert (await tables.info(name)).length == 0


async def test_largest_key_and_value(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    key = b"K" * MAX_KEY_LENGTH
    value = bytes(range(256)) * (MAX_VALUE_LENGTH // 256)
    assert len(value) == MAX_VALUE_LENGTH
    [v, vs] = await tables.update(name, [(key, value, NOT_EXISTS), (b"small", b"", NO_VERSION)])
    assert vs == v + record_size(key, value)
    assert await tables.get(name, [key, b"small"]) == [(v, value), (vs, b"")]
    entries, _ = await tables.read_entries(name, 10)
    assert entries == [(key, value, v), (b"small", b"", vs)]


async def test_table_segment_offset_condition(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    await tables.update(name, [(b"k", b"v", NO_VERSION)], table_offset=0)
    length = (await tables.info(name)).length
    with pytest.raises(TableOffsetMismatch) as e:
        await tables.update(name, [(b"k", b"w", NO_VERSION)], table_offset=0)
    assert (e.value.expected, e.value.current) == (0, length)
    with pytest.raises(TableOffsetMismatch):
        await tables.remove(name, [(b"k", NO_VERSION)], table_offset=length + 1)
    # Key conditions are checked before the offset condition (as Java does).
    with pytest.raises(TableKeyNotFound):
        await tables.update(name, [(b"absent", b"w", 3)], table_offset=0)
    [v] = await tables.update(name, [(b"k", b"w", NO_VERSION)], table_offset=length)
    assert v == length
    await tables.remove(name, [(b"k", NO_VERSION)], table_offset=(await tables.info(name)).length)
    assert await tables.get(name, [b"k"]) == [None]


async def test_remove(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    await tables.remove(name, [(b"never", NO_VERSION)])  # no-op success, nothing written
    assert (await tables.info(name)).length == 0
    [va, vb] = await tables.update(name, [(b"a", b"1", NO_VERSION), (b"b", b"2", NO_VERSION)])
    with pytest.raises(TableKeyVersionMismatch):
        await tables.remove(name, [(b"a", va + 1)])
    with pytest.raises(TableKeyNotFound):
        await tables.remove(name, [(b"never", 0)])
    await tables.remove(name, [(b"a", va), (b"never", NOT_EXISTS)])
    await tables.remove(name, [(b"b", NO_VERSION)])
    assert await tables.get(name, [b"a", b"b"]) == [None, None]
    assert (await tables.info(name)).entry_count == 0
    # Re-insert after removal: NOT_EXISTS holds again, the version is new.
    [va2] = await tables.update(name, [(b"a", b"3", NOT_EXISTS)])
    assert va2 > vb


async def test_empty_batches(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    assert await tables.update(name, []) == []
    await tables.remove(name, [])
    assert await tables.get(name, []) == []


# ---------------------------------------------------------------------- concurrency


async def test_racing_conditional_updates_exactly_one_wins(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table()
    [v] = await tables.update(name, [(b"k", b"0", NO_VERSION)])

    async def attempt(i: int) -> int | None:
        try:
            [nv] = await tables.update(name, [(b"k", str(i).encode(), v)])
            return nv
        except TableKeyVersionMismatch:
            return None

    for racers in (2, 50):
        results = await asyncio.gather(*(attempt(i) for i in range(racers)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        [(version, _value)] = await tables.get(name, [b"k"])  # type: ignore[misc]
        assert version == winners[0]
        v = version

    # Inserts racing on an absent key: exactly one NOT_EXISTS insert wins.
    async def insert(i: int) -> bool:
        try:
            await tables.update(name, [(b"fresh", str(i).encode(), NOT_EXISTS)])
            return True
        except TableKeyVersionMismatch:
            return False

    assert sum(await asyncio.gather(*(insert(i) for i in range(20)))) == 1


async def test_pipelined_writes_keep_order_and_versions(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table()
    results = await asyncio.gather(
        *(tables.update(name, [(b"k%03d" % i, b"v%d" % i, NOT_EXISTS)]) for i in range(200))
    )
    versions = [r[0] for r in results]
    assert versions == sorted(versions) and len(set(versions)) == 200
    got = await tables.get(name, [b"k%03d" % i for i in range(200)])
    assert got == [(versions[i], b"v%d" % i) for i in range(200)]
    # A counter incremented by read-modify-write with retries ends exact.
    await tables.update(name, [(b"counter", b"0", NOT_EXISTS)])

    async def increment() -> None:
        for _ in range(1000):  # bounded retries
            [(ver, val)] = await tables.get(name, [b"counter"])  # type: ignore[misc]
            try:
                await tables.update(name, [(b"counter", str(int(val) + 1).encode(), ver)])
                return
            except TableKeyVersionMismatch:
                # No backoff: the next get waits for the winner's write to settle.
                continue
        raise AssertionError("too many conflicts")

    await asyncio.gather(*(increment() for _ in range(30)))
    assert (await tables.get(name, [b"counter"]))[0][1] == b"30"  # type: ignore[index]


async def test_cancelled_caller_still_applies_its_write(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table()
    task = asyncio.ensure_future(tables.update(name, [(b"k", b"v", NOT_EXISTS)]))
    await asyncio.sleep(0)  # accepted by the engine, not yet durable
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):  # bounded wait for the write to land
        if await tables.get(name, [b"k"]) != [None]:
            break
        await asyncio.sleep(0.01)
    assert await tables.get(name, [b"k"]) == [(0, b"v")]
    [v] = await tables.update(name, [(b"k", b"w", 0)])
    assert v > 0


async def test_failed_log_write_fails_batch_and_table_recovers(
    tables: TableStore, store: SegmentStore, make_table: MakeTable
) -> None:
    from segmentstore.storage import StorageUnavailable

    name = await make_table()
    [v0] = await tables.update(name, [(b"k", b"0", NO_VERSION)])
    failing = {"on": True}

    def hook(op: str) -> None:
        if failing["on"] and op == "wal.write":
            raise OSError(28, "No space left on device")

    store.set_fault_hook(hook)
    results = await asyncio.gather(
        tables.update(name, [(b"k", b"1", v0)]),
        tables.update(name, [(b"other", b"1", NO_VERSION)]),
        return_exceptions=True,
    )
    assert all(isinstance(r, StorageUnavailable) for r in results), results
    failing["on"] = False
    assert await tables.get(name, [b"k", b"other"]) == [(v0, b"0"), None]
    [v1] = await tables.update(name, [(b"k", b"1", v0)])
    assert v1 == (await tables.info(name)).length - record_size(b"k", b"1")
    assert await tables.get(name, [b"k"]) == [(v1, b"1")]


# ---------------------------------------------------------------------- iteration


async def collect_keys(tables: TableStore, name: str, limit: int, **kw: bytes) -> list[bytes]:
    out: list[bytes] = []
    token = b""
    for _ in range(100_000):  # bounded: far more pages than any test makes
        page, token = await tables.read_keys(name, limit, token, **kw)
        if not page:
            assert token == b""
            return out
        out.extend(k for k, _ in page)
    raise AssertionError("iteration did not end")


async def test_iteration_pages_and_end(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    keys = [b"key-%04d" % i for i in range(250)]
    versions = await tables.update(name, [(k, k + b"!", NO_VERSION) for k in keys])
    page, token = await tables.read_keys(name, 100)
    assert len(page) == 100 and token
    assert page[0] == (keys[0], versions[0])
    assert sorted(await collect_keys(tables, name, 7)) == keys
    entries: list[tuple[bytes, bytes, int]] = []
    token = b""
    for _ in range(1000):
        chunk, token = await tables.read_entries(name, 64, token)
        if not chunk:
            break
        entries.extend(chunk)
    assert entries == [(k, k + b"!", v) for k, v in zip(keys, versions, strict=True)]
    assert await tables.read_keys(name, 0) == ([], b"")


async def test_iteration_arguments(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    await tables.update(name, [(b"a", b"", NO_VERSION)])
    with pytest.raises(IllegalTableArgument):
        await tables.read_keys(name, 10, from_key=b"a")
    with pytest.raises(IllegalTableArgument):
        await tables.read_entries(name, 10, to_key=b"a")
    for bad_token in (b"\x02abc", b"\x01", b"garbage"):
        with pytest.raises(IllegalTableArgument):
            await tables.read_keys(name, 10, bad_token)
    empty = await make_table()
    assert await tables.read_keys(empty, 10) == ([], b"")
    assert await tables.read_entries(empty, 10) == ([], b"")


async def test_fixed_key_table(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table(key_length=4)
    with pytest.raises(IllegalTableArgument):
        await tables.update(name, [(b"abc", b"v", NO_VERSION)])
    with pytest.raises(IllegalTableArgument):
        await tables.get(name, [b"abcde"])
    keys = [i.to_bytes(4, "big") for i in (0, 1, 255, 256, 65535, 2**32 - 1)]
    await tables.update(name, [(k, b"v" + k, NO_VERSION) for k in reversed(keys)])
    assert await collect_keys(tables, name, 2) == keys  # unsigned byte order
    lo, hi = (1).to_bytes(4, "big"), (65535).to_bytes(4, "big")
    assert await collect_keys(tables, name, 2, from_key=lo, to_key=hi) == keys[1:5]
    page, _ = await tables.read_entries(name, 10, from_key=hi)
    assert [(k, v) for k, v, _ in page] == [(k, b"v" + k) for k in keys[4:]]
    # The Java client continues with fromKey = lastKey + 1.
    page, _ = await tables.read_keys(name, 3)
    nxt = (int.from_bytes(page[-1][0], "big") + 1).to_bytes(4, "big")
    page2, _ = await tables.read_keys(name, 10, from_key=nxt)
    assert [k for k, _ in page + page2] == keys
    with pytest.raises(IllegalTableArgument):
        await tables.read_keys(name, 10, from_key=b"\x00")
    with pytest.raises(TableOperationUnsupported):
        await tables.read_delta(name, 0, 10)


async def test_iteration_with_concurrent_updates_yields_each_key_once(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table()
    stable = [b"s%05d" % i for i in range(10_000)]
    for i in range(0, len(stable), 500):
        await tables.update(name, [(k, b"x", NO_VERSION) for k in stable[i : i + 500]])
    churn_removed = [b"s%05d-gone" % i for i in range(0, 10_000, 7)]
    await tables.update(name, [(k, b"x", NO_VERSION) for k in churn_removed])
    stop = asyncio.Event()

    rounds = [0]

    async def churn() -> None:
        i = 0
        while not stop.is_set() and i < 100_000:  # bounded
            await tables.update(
                name,
                [
                    (stable[(i * 37) % len(stable)], b"y%d" % i, NO_VERSION),
                    (b"s%05d-new%d" % ((i * 53) % 10_000, i), b"n", NO_VERSION),
                ],
            )
            if i < len(churn_removed):
                await tables.remove(name, [(churn_removed[i], NO_VERSION)])
            i += 1
            rounds[0] = i

    churner = asyncio.ensure_future(churn())
    seen: list[bytes] = []
    token = b""
    for _ in range(100_000):
        page, token = await tables.read_keys(name, 97, token)
        if not page:
            break
        seen.extend(k for k, _ in page)
        await asyncio.sleep(0.002)  # let the churner interleave with every page
    stop.set()
    await churner
    assert rounds[0] >= 20, "the churn did not overlap the iteration"
    assert len(seen) == len(set(seen)), "a key came back twice"
    seen_set = set(seen)
    assert all(k in seen_set for k in stable), "a key that existed throughout was skipped"


# ---------------------------------------------------------------------- delta reads


async def test_delta_reads(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    [va, vb] = await tables.update(name, [(b"a", b"1", NO_VERSION), (b"b", b"1", NO_VERSION)])
    d = await tables.read_delta(name, 0, 10)
    end1 = (await tables.info(name)).length
    assert d.entries == [(b"a", b"1", va), (b"b", b"1", vb)]
    assert (d.should_clear, d.reached_end, d.last_position) == (False, True, end1)
    # Nothing new: Java's quirk, lastPosition 0.
    d = await tables.read_delta(name, end1, 10)
    assert (d.entries, d.should_clear, d.reached_end, d.last_position) == ([], False, True, 0)
    [va2] = await tables.update(name, [(b"a", b"2", va)])
    [vc] = await tables.update(name, [(b"c", b"3", NOT_EXISTS)])
    await tables.remove(name, [(b"b", vb)])
    end2 = (await tables.info(name)).length
    d = await tables.read_delta(name, end1, 10)
    # Newest update per key; the removal of b is not reported (b's update is before end1).
    assert d.entries == [(b"a", b"2", va2), (b"c", b"3", vc)]
    assert (d.reached_end, d.last_position) == (True, end2)
    # From 0: b was updated and then removed inside the range, so it drops out of the reply.
    d = await tables.read_delta(name, 0, 10)
    assert d.entries == [(b"a", b"2", va2), (b"c", b"3", vc)]
    # The limit is checked before each record: 1 entry, then stop.
    d = await tables.read_delta(name, 0, 1)
    assert d.entries == [(b"a", b"1", va)]
    assert (d.reached_end, d.last_position) == (False, va + record_size(b"a", b"1"))
    d2 = await tables.read_delta(name, d.last_position, 1)
    assert d2.entries == [(b"b", b"1", vb)]
    assert await tables.read_delta(name, 0, 0) == type(d)([], False, True, 0)


async def test_delta_read_positions(
    tables: TableStore, store: SegmentStore, make_table: MakeTable
) -> None:
    name = await make_table()
    [_va, vb] = await tables.update(name, [(b"a", b"1", NO_VERSION), (b"b", b"2", NO_VERSION)])
    length = (await tables.info(name)).length
    with pytest.raises(IllegalTableArgument):
        await tables.read_delta(name, length + 1, 10)
    with pytest.raises(IllegalTableArgument):
        await tables.read_delta(name, -1, 10)
    with pytest.raises(IllegalTableArgument):
        await tables.read_delta(name, 3, 10)  # inside a record
    # Below the compaction point (the segment's start offset): shouldClear.
    await store.truncate(name, vb)
    d = await tables.read_delta(name, 0, 10)
    assert d.should_clear and d.entries == [(b"b", b"2", vb)] and d.last_position == length


async def test_delta_reads_follow_a_long_log(tables: TableStore, make_table: MakeTable) -> None:
    name = await make_table()
    latest: dict[bytes, tuple[bytes, int]] = {}
    for i in range(300):
        key = b"k%d" % (i % 40)
        [v] = await tables.update(name, [(key, b"v%d" % i, NO_VERSION)])
        latest[key] = (b"v%d" % i, v)
    # A follower folding pages (the Rust reader group's loop) ends with the latest state.
    state: dict[bytes, tuple[bytes, int]] = {}
    pos = 0
    for _ in range(1000):
        d = await tables.read_delta(name, pos, 10)
        if not d.entries:
            break
        for k, val, ver in d.entries:
            state[k] = (val, ver)
        pos = d.last_position
    assert state == latest


# ---------------------------------------------------------------------- durability


async def test_reopen_keeps_everything(env: Opened, tmp_path: object) -> None:
    tables = env.tables
    assert tables is not None
    await tables.create("sc/_tables/h")
    await tables.create("sc/_tables/f", key_length=2)
    big = b"B" * 200_000
    v = await tables.update(
        "sc/_tables/h",
        [(b"a", b"1", NO_VERSION), (b"b", b"2", NO_VERSION), (b"big", big, NO_VERSION)],
    )
    [va2] = await tables.update("sc/_tables/h", [(b"a", b"11", v[0])])
    await tables.remove("sc/_tables/h", [(b"b", v[1])])
    [vf] = await tables.update("sc/_tables/f", [(b"xy", b"f", NOT_EXISTS)])
    await tables.create("sc/_tables/gone")
    await tables.delete("sc/_tables/gone")
    info = await tables.info("sc/_tables/h")

    for _ in range(2):
        tables = await env.reopen()
        assert await tables.get("sc/_tables/h", [b"a", b"b", b"big"]) == [
            (va2, b"11"),
            None,
            (v[2], big),
        ]
        assert await tables.info("sc/_tables/h") == info
        assert await tables.get("sc/_tables/f", [b"xy"]) == [(vf, b"f")]
        assert (await tables.info("sc/_tables/f")).key_length == 2
        with pytest.raises(SegmentNotFound):
            await tables.get("sc/_tables/gone", [b"a"])
        with pytest.raises(TableKeyVersionMismatch):
            await tables.update("sc/_tables/h", [(b"a", b"x", v[0])])
        d = await tables.read_delta("sc/_tables/h", 0, 10)
        # First-seen order (Java's LinkedHashMap): a was updated at 0, again later.
        assert d.entries == [(b"a", b"11", va2), (b"big", big, v[2])]
    # Versions keep growing after a restart.
    [va3] = await tables.update("sc/_tables/h", [(b"a", b"111", va2)])
    assert va3 >= info.length > va2
    tables = await env.reopen(inline_value_bytes=0)  # every value read from the segment
    assert await tables.get("sc/_tables/h", [b"a", b"big"]) == [(va3, b"111"), (v[2], big)]


# ---------------------------------------------------------------------- compaction


async def test_compaction_keeps_live_entries_and_truncates(env: Opened) -> None:
    tables = await env.reopen(compaction_min_bytes=8 * 1024, compaction_chunk_bytes=4 * 1024)
    name = "sc/_tables/compacted"
    await tables.create(name)
    stable = {b"stable-%d" % i: b"s" * 30 for i in range(20)}
    first = await tables.update(name, [(k, v, NOT_EXISTS) for k, v in stable.items()])
    await tables.update(name, [(b"removed", b"r", NOT_EXISTS)])
    await tables.remove(name, [(b"removed", NO_VERSION)])
    latest: dict[bytes, bytes] = {}
    for i in range(600):  # ~60 KiB of updates to 10 hot keys
        key = b"hot-%d" % (i % 10)
        latest[key] = b"value-%d-" % i + b"x" * 60
        await tables.update(name, [(key, latest[key], NO_VERSION)])
    await tables.wait_idle()
    info = await tables.info(name)
    assert info.start_offset > 0, "no compaction happened"
    assert info.length - info.start_offset < 2 * 8 * 1024 + 4 * 1024 + 2048
    expected = {**stable, **latest}
    keys = sorted(expected)
    got = await tables.get(name, keys)
    assert [g[1] if g else None for g in got] == [expected[k] for k in keys]
    assert await tables.get(name, [b"removed"]) == [None]
    assert info.entry_count == len(expected)
    # Moved entries got new versions (as in Java): the old version is now stale.
    new_version = (await tables.get(name, [b"stable-0"]))[0]
    assert new_version is not None and new_version[0] > first[0] >= 0
    with pytest.raises(TableKeyVersionMismatch):
        await tables.update(name, [(b"stable-0", b"x", first[0])])
    # Delta reads from below the compaction point: shouldClear, then the full live state.
    d = await tables.read_delta(name, 0, 1000)
    assert d.should_clear and d.reached_end
    assert {k: v for k, v, _ in d.entries} == expected
    # Iteration sees each live key once.
    assert await collect_keys(tables, name, 7) == keys
    tables = await env.reopen(compaction_min_bytes=8 * 1024, compaction_chunk_bytes=4 * 1024)
    assert await tables.info(name) == info
    got = await tables.get(name, keys)
    assert [g[1] if g else None for g in got] == [expected[k] for k in keys]
    assert await tables.get(name, [b"removed"]) == [None]


async def test_compaction_under_concurrent_conditional_updates(env: Opened) -> None:
    tables = await env.reopen(
        compaction_min_bytes=4 * 1024, compaction_chunk_bytes=2 * 1024, inline_value_bytes=16
    )
    name = "sc/_tables/busy"
    await tables.create(name)
    moved_under_writer = [0]

    async def writer(w: int) -> dict[bytes, bytes]:
        mine: dict[bytes, bytes] = {}
        versions: dict[bytes, int] = {}
        for i in range(150):
            # A cold key (written at 0 and 120: compaction moves it in between) and hot keys.
            key = b"w%d-cold" % w if i in (0, 120) else b"w%d-k%d" % (w, i % 3)
            value = b"w%d-i%d-" % (w, i) + b"y" * 40  # longer than inline: read from disk
            for _ in range(50):  # bounded: a compaction may move the key under us
                cond = versions.get(key, NOT_EXISTS)
                try:
                    [versions[key]] = await tables.update(name, [(key, value, cond)])
                    break
                except (TableKeyVersionMismatch, TableKeyNotFound):
                    [cur] = await tables.get(name, [key])
                    assert cur is not None and cur[1] == mine[key]  # moved, not changed
                    versions[key] = cur[0]
                    moved_under_writer[0] += 1
            else:
                raise AssertionError("could not update")
            mine[key] = value
        return mine

    results = await asyncio.gather(*(writer(w) for w in range(8)))
    await tables.wait_idle()
    assert moved_under_writer[0] > 0
    expected = {k: v for r in results for k, v in r.items()}
    assert (await tables.info(name)).start_offset > 0
    keys = sorted(expected)
    got = await tables.get(name, keys)
    assert [g[1] if g else None for g in got] == [expected[k] for k in keys]
    entries, _ = await tables.read_entries(name, 1000)
    assert {k: v for k, v, _ in entries} == expected
    tables = await env.reopen()
    got = await tables.get(name, keys)
    assert [g[1] if g else None for g in got] == [expected[k] for k in keys]


async def test_foreign_bytes_make_a_table_read_only(
    env: Opened, tables: TableStore, store: SegmentStore, make_table: MakeTable
) -> None:
    from segmentstore.tables import TableCorrupted

    name = await make_table()
    [v] = await tables.update(name, [(b"k", b"v", NO_VERSION)])
    await store.append(name, b"not a table record")
    with pytest.raises(TableCorrupted):
        await tables.update(name, [(b"k", b"w", NO_VERSION)])
    assert await tables.get(name, [b"k"]) == [(v, b"v")]
    tables = await env.reopen()
    assert await tables.get(name, [b"k"]) == [(v, b"v")]
    with pytest.raises(TableCorrupted):
        await tables.update(name, [(b"k", b"w", NO_VERSION)])


async def test_forgotten_table_is_reloaded_from_its_segment(
    tables: TableStore, make_table: MakeTable
) -> None:
    name = await make_table(key_length=3)
    [v] = await tables.update(name, [(b"abc", b"1", NOT_EXISTS)])
    await tables.remove(name, [(b"abc", v)])
    [v2] = await tables.update(name, [(b"xyz", b"2", NOT_EXISTS)])
    tables.forget(name)
    results = await asyncio.gather(*(tables.get(name, [b"abc", b"xyz"]) for _ in range(3)))
    assert results == [[None, (v2, b"2")]] * 3
    assert (await tables.info(name)).key_length == 3
    assert tables.stats()["table_keys"] >= 1
