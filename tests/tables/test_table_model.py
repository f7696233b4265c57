"""A model-based test of table segments: random sequences of table requests, served by the
wire handlers over a real store, against a dict model (hypothesis ``RuleBasedStateMachine``).

Each step is one request (create, conditional and unconditional put and remove batches,
get, paged key and entry reads, delete with and without mustBeEmpty, info), a clean reopen
or a crash reopen (a copy of the live data directory, what a kill -9 leaves). After every
step the reply is the one the model predicts: values and versions equal, a version a put
returned is the one a later conditional put needs, refusals are the protocol's replies
(TableKeyDoesNotExist, TableKeyBadVersion, TableSegmentNotEmpty, OperationUnsupported,
NoSuchSegment, ErrorMessage code 0) and change nothing, and paging returns every key once.

CI runs 60 examples of 25 steps; ``tests/model_runs.py`` says how the environment makes a
long run: ``SEGMENTSTORE_MODEL_EXAMPLES=2000 pytest tests/tables/test_table_model.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule
from model_runs import OnDiskMachine, examples, model_settings  # tests/model_runs.py
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
    ReadTableKeys,
    RemoveTableKeys,
    Reply,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentDeleted,
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
)

from segmentstore.server.context import ServerContext
from segmentstore.server.errors import error_reply
from segmentstore.server.metrics import Metrics
from segmentstore.server.table_handlers import TABLE_HANDLERS
from segmentstore.storage import SegmentStore, StorageError
from segmentstore.tables import TableStore

from .conftest import table_config

MODEL_EXAMPLES = examples(60)  # CI; the environment makes long runs (tests/model_runs.py)

FIXED = "sc/_tables/fixed"  # keys of exactly 2 bytes
TABLES = ("sc/_tables/a", "sc/_tables/b", FIXED)
KEY_LENGTH = {FIXED: 2}
# Mostly 2-byte keys (valid in every table), some of other lengths (variable tables only).
KEYS = (b"aa", b"ab", b"b\x00", b"zz", b"\x00\x01", b"\xff\xff", b"a", b"abc", b"\xff" * 9)
# Small values live in the index; ones over 1 KiB (inline_value_bytes) are read from the
# segment when asked for.
VALUES = st.one_of(st.binary(max_size=12), st.binary(min_size=1100, max_size=1300))
CONDITIONS = ("none", "right", "wrong", "absent")
# A key as drawn: an index into KEYS, or (at KEYS and above) into the table's present keys,
# so that conditional writes meet existing keys often.
KEY_CHOICE = st.integers(0, 2 * len(KEYS) - 1)
# Mostly the first table (made by ``first_table``), so that its keys pile up.
TABLE = st.one_of(st.just(TABLES[0]), st.sampled_from(TABLES))

Model = dict[str, dict[bytes, tuple[bytes, int]]]  # table -> key -> (value, version)


class TableMachine(OnDiskMachine):
    def __init__(self) -> None:
        super().__init__("table-model-")
        self.ctx: ServerContext | None = None
        self.model: Model = {}
        self.rid = 0
        self.run(self.open(self.data))

    # ------------------------------------------------------------------ plumbing

    async def open(self, data: Path) -> None:
        self.data = data
        self.store = await SegmentStore.open(table_config(data, fsync="never", direct_io=False))
        self.tables = await TableStore.open(self.store)
        self.ctx = ServerContext(self.store, self.tables, Metrics())

    def call(self, cmd: Command) -> Reply:
        """Serve ``cmd`` as a connection does: its handler, else the storage error mapping."""

        async def serve() -> Reply:
            assert self.ctx is not None
            try:
                return await TABLE_HANDLERS[type(cmd)](self.ctx, cmd)
            except StorageError as e:
                mapped = error_reply(cmd, e)
                assert mapped is not None, e
                return mapped

        return self.run(serve())  # type: ignore[no-any-return]

    def next_id(self) -> int:
        self.rid += 1
        return self.rid

    def valid_key(self, table: str, key: bytes) -> bool:
        return len(key) == KEY_LENGTH.get(table, len(key))

    def version_for(self, table: str, key: bytes, condition: str) -> int:
        """The condition sent for ``key``: unconditional ("none"), one that holds ("right":
        its version, or "must not exist" when absent), one that does not ("wrong": a version
        it does not have), or "must not exist" ("absent")."""
        current = self.model[table].get(key)
        if condition == "none":
            return NO_VERSION
        if condition == "absent":
            return NOT_EXISTS
        if condition == "right":  # the condition that holds
            return current[1] if current is not None else NOT_EXISTS
        # wrong: another key's version, or one past the current one, never the right one
        others = [v for k, (_, v) in self.model[table].items() if k != key]
        wrong = others[0] if others else (current[1] + 1 if current is not None else 5)
        return wrong if current is None or wrong != current[1] else wrong + 1

    def expected_refusal(self, table: str, conditions: list[tuple[bytes, int]]) -> type | None:
        """The reply class a batch with these conditions gets, None if it is accepted."""
        rows = self.model[table]
        missing = bad = False
        for key, version in conditions:
            if version == NO_VERSION:
                continue
            current = rows.get(key)
            if version == NOT_EXISTS:
                bad |= current is not None
            elif current is None:
                missing = True
            else:
                bad |= current[1] != version
        if missing:
            return TableKeyDoesNotExist
        return TableKeyBadVersion if bad else None

    def check_table(self, table: str) -> None:
        rows = self.model[table]
        keys = [k for k in KEYS if self.valid_key(table, k)]
        reply = self.call(ReadTable(self.next_id(), table, "", tuple(TableKey(k) for k in keys)))
        assert isinstance(reply, TableRead), reply
        for key, entry in zip(keys, reply.entries, strict=True):
            assert bytes(entry.key) == key
            if key in rows:
                assert (bytes(entry.value), entry.version) == rows[key], key
            else:
                assert (bytes(entry.value), entry.version) == (b"", NOT_EXISTS), key
        info = self.call(GetTableSegmentInfo(self.next_id(), table, ""))
        assert isinstance(info, TableSegmentInfo), info
        assert info.entry_count == len(rows) and info.key_length == KEY_LENGTH.get(table, 0)

    # ------------------------------------------------------------------ table lifecycle

    @initialize(keys=st.lists(st.sampled_from(KEYS[:6]), max_size=5, unique=True))
    def first_table(self, keys: list[bytes]) -> None:
        """The first table, with some keys: most steps then have keys to work on."""
        self.create(TABLES[0])
        if keys:
            self.put(TABLES[0], [(k, b"v0-" + k, "absent") for k in keys])

    @rule(table=st.sampled_from(TABLES))
    def create(self, table: str) -> None:
        rid = self.next_id()
        reply = self.call(CreateTableSegment(rid, table, "", False, KEY_LENGTH.get(table, 0)))
        if table in self.model:
            assert reply == SegmentAlreadyExists(rid, table, ""), reply
        else:
            assert reply == SegmentCreated(rid, table), reply
            self.model[table] = {}

    @rule(table=st.sampled_from(TABLES), must_be_empty=st.booleans())
    def delete(self, table: str, must_be_empty: bool) -> None:
        rid = self.next_id()
        reply = self.call(DeleteTableSegment(rid, table, must_be_empty, ""))
        if table not in self.model:
            assert reply == NoSuchSegment(rid, table, "", -1), reply
        elif must_be_empty and table in KEY_LENGTH:
            assert reply == OperationUnsupported(rid, "deleteTableSegment", ""), reply
        elif must_be_empty and self.model[table]:
            assert reply == TableSegmentNotEmpty(rid, table, ""), reply
        else:
            assert reply == SegmentDeleted(rid, table), reply
            del self.model[table]

    # ------------------------------------------------------------------ writes

    def key(self, table: str, choice: int | bytes) -> bytes:
        if isinstance(choice, bytes):
            return choice
        present = sorted(self.model.get(table, {}))
        if choice < len(KEYS) or not present:
            return KEYS[choice % len(KEYS)]
        return present[choice % len(present)]

    @rule(
        table=TABLE,
        choices=st.lists(
            st.tuples(KEY_CHOICE, VALUES, st.sampled_from(CONDITIONS)), min_size=1, max_size=3
        ),
    )
    def put(self, table: str, choices: list[tuple[int | bytes, bytes, str]]) -> None:
        writes: list[tuple[bytes, bytes, str]] = []
        for choice, value, condition in choices:
            key = self.key(table, choice)
            if key not in [w[0] for w in writes]:  # one entry per key
                writes.append((key, value, condition))
        rid = self.next_id()
        if table not in self.model:
            entries = tuple(TableEntry(k, v, NO_VERSION) for k, v, _ in writes)
            reply = self.call(UpdateTableEntries(rid, table, "", entries))
            assert reply == NoSuchSegment(rid, table, "", -1), reply
            return
        entries = tuple(TableEntry(k, v, self.version_for(table, k, c)) for k, v, c in writes)
        reply = self.call(UpdateTableEntries(rid, table, "", entries))
        if not all(self.valid_key(table, k) for k, _, _ in writes):
            assert isinstance(reply, ErrorMessage) and reply.error_code == 0, reply
            return
        refusal = self.expected_refusal(table, [(e.key, e.version) for e in entries])
        event(f"put: {refusal.__name__ if refusal else 'done'}")
        if refusal is not None:
            assert reply == refusal(rid, table, ""), reply
            return
        assert isinstance(reply, TableEntriesUpdated), reply
        assert len(reply.updated_versions) == len(entries)
        for (key, value, _), version in zip(writes, reply.updated_versions, strict=True):
            old = self.model[table].get(key)
            assert version >= 0 and (old is None or version > old[1]), (key, old, version)
            self.model[table][key] = (value, version)

    @rule(
        table=TABLE,
        pick=st.integers(0, 20),
        value=VALUES,
        condition=st.sampled_from(("right", "wrong", "absent")),
        remove=st.booleans(),
    )
    def conditional(
        self, table: str, pick: int, value: bytes, condition: str, remove: bool
    ) -> None:
        """A conditional put or removal of one present key (of any key if none is)."""
        present = sorted(self.model.get(table, {})) or list(KEYS)
        key = present[pick % len(present)]
        if remove:
            self.remove(table, [(key, condition)])
        else:
            self.put(table, [(key, value, condition)])

    @rule(table=TABLE, choice=KEY_CHOICE, value=VALUES, right=st.booleans())
    def put_one(self, table: str, choice: int, value: bytes, right: bool) -> None:
        """One key, with the condition that holds or none: the writes that succeed."""
        self.put(table, [(choice, value, "right" if right else "none")])

    @rule(
        table=TABLE,
        choices=st.lists(
            st.tuples(KEY_CHOICE, st.sampled_from(CONDITIONS)), min_size=1, max_size=3
        ),
    )
    def remove(self, table: str, choices: list[tuple[int | bytes, str]]) -> None:
        removals: list[tuple[bytes, str]] = []
        for choice, condition in choices:
            key = self.key(table, choice)
            if key not in [r[0] for r in removals]:
                removals.append((key, condition))
        rid = self.next_id()
        if table not in self.model:
            reply = self.call(
                RemoveTableKeys(rid, table, "", tuple(TableKey(k) for k, _ in removals))
            )
            assert reply == NoSuchSegment(rid, table, "", -1), reply
            return
        keys = tuple(TableKey(k, self.version_for(table, k, c)) for k, c in removals)
        reply = self.call(RemoveTableKeys(rid, table, "", keys))
        if not all(self.valid_key(table, k) for k, _ in removals):
            assert isinstance(reply, ErrorMessage) and reply.error_code == 0, reply
            return
        refusal = self.expected_refusal(table, [(k.key, k.version) for k in keys])
        event(f"remove: {refusal.__name__ if refusal else 'done'}")
        if refusal is not None:
            assert reply == refusal(rid, table, ""), reply
            return
        assert reply == TableKeysRemoved(rid, table), reply
        for key, _ in removals:
            self.model[table].pop(key, None)

    # ------------------------------------------------------------------ reads

    @rule(table=TABLE, keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
    def get(self, table: str, keys: list[bytes]) -> None:
        rid = self.next_id()
        reply = self.call(ReadTable(rid, table, "", tuple(TableKey(k) for k in keys)))
        if table not in self.model:
            assert reply == NoSuchSegment(rid, table, "", -1), reply
            return
        if not all(self.valid_key(table, k) for k in keys):
            assert isinstance(reply, ErrorMessage) and reply.error_code == 0, reply
            return
        rows = self.model[table]
        expected = tuple(
            TableEntry(k, *rows[k]) if k in rows else TableEntry(k, b"", NOT_EXISTS) for k in keys
        )
        assert isinstance(reply, TableRead) and reply.entries == expected, (reply, expected)

    @rule(
        table=TABLE,
        limit=st.integers(1, 4),
        entries=st.booleans(),
        write_between=st.none() | st.tuples(st.sampled_from(KEYS[:6]), st.booleans()),
        bounds=st.none() | st.tuples(st.sampled_from(KEYS[:6]), st.sampled_from(KEYS[:6])),
    )
    def page_through(
        self,
        table: str,
        limit: int,
        entries: bool,
        write_between: tuple[bytes, bool] | None,
        bounds: tuple[bytes, bytes] | None,
    ) -> None:
        """Read every key (within ``bounds`` [fromKey, toKey], fixed-key tables only) in
        pages of ``limit``; ``write_between``: after the first page, put (True) or remove
        (False) one key, as another client might."""
        low, high = bounds or (b"", b"")
        if table not in self.model:
            rid = self.next_id()
            reply = self.call(ReadTableKeys(rid, table, "", limit, TableIteratorArgs()))
            assert reply == NoSuchSegment(rid, table, "", -1), reply
            return
        if bounds is not None and table not in KEY_LENGTH:
            args = TableIteratorArgs(b"", b"", low, high)
            reply = self.call(ReadTableKeys(self.next_id(), table, "", limit, args))
            assert isinstance(reply, ErrorMessage) and reply.error_code == 0, reply
            return

        def wanted(rows: dict[bytes, tuple[bytes, int]]) -> dict[bytes, tuple[bytes, int]]:
            if bounds is None:
                return dict(rows)
            return {k: v for k, v in rows.items() if low <= k <= high}

        before = wanted(self.model[table])
        got: list[tuple[bytes, bytes | None, int]] = []
        token = b""
        for n in range(len(KEYS) + 3):  # bounded: one page per key at least, plus the end
            rid = self.next_id()
            args = TableIteratorArgs(token, b"", low, high)
            page: list[tuple[bytes, bytes | None, int]]
            if entries:
                r = self.call(ReadTableEntries(rid, table, "", limit, args))
                assert isinstance(r, TableEntriesRead), r
                page = [(bytes(e.key), bytes(e.value), e.version) for e in r.entries]
            else:
                k = self.call(ReadTableKeys(rid, table, "", limit, args))
                assert isinstance(k, TableKeysRead), k
                r = k  # type: ignore[assignment]
                page = [(bytes(x.key), None, x.version) for x in k.keys]
            assert len(page) <= limit
            if not page:
                assert bytes(r.continuation_token) == b""
                break
            assert bytes(r.continuation_token) != b""
            got.extend(page)
            token = bytes(r.continuation_token)
            if n == 0 and write_between is not None:
                key, put = write_between
                if self.valid_key(table, key):
                    if put:
                        self.put(table, [(key, b"between", "none")])
                    else:
                        self.remove(table, [(key, "none")])
        else:
            raise AssertionError("paging did not end")
        keys = [k for k, _, _ in got]
        assert keys == sorted(keys) and len(keys) == len(set(keys)), keys  # each key once
        after = wanted(self.model[table])
        # Every key present throughout is returned, with its value at the time or later.
        for key in set(before) & set(after):
            assert key in keys, key
        for key, value, version in got:
            assert key in before or key in after, key
            states = [s[key] for s in (before, after) if key in s]
            assert (value, version) in states or (
                value is None and version in [s[1] for s in states]
            )
        if write_between is None:
            assert keys == sorted(after)

    # ------------------------------------------------------------------ restarts

    @rule()
    def reopen(self) -> None:
        self.run(self.close())
        self.run(self.open(self.data))
        for table in self.model:
            self.check_table(table)

    @rule()
    def crash_reopen(self) -> None:
        """What a kill -9 leaves: a copy of the live directory, opened after the live one
        is closed (every acknowledged request must be in it)."""
        self.copies += 1
        copy = self.dir / f"crash-{self.copies}"
        shutil.copytree(self.data, copy)
        self.run(self.close())
        shutil.rmtree(self.data, ignore_errors=True)
        self.run(self.open(copy))
        for table in self.model:
            self.check_table(table)

    @invariant()
    def listed_tables(self) -> None:
        assert self.tables is not None
        for table in TABLES:
            exists = self.store is not None and self.store.exists(table)
            assert exists == (table in self.model), table


TableMachine.TestCase.settings = model_settings(60, 25)


@pytest.mark.timeout(max(120, MODEL_EXAMPLES * 6))
class TestTableModel(TableMachine.TestCase):  # type: ignore[name-defined]
    pass
