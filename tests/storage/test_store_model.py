"""A model-based test of the segment store: hypothesis drives the real ``SegmentStore`` (real
files in a temporary directory, tiny log, chunk and checkpoint sizes so rolls, flushes to
chunk files, cache evictions and checkpoints happen within a run) and a plain-dict model
through the same random operations, and after every step every segment's bytes, info and
attributes must equal the model's, and every refused operation must have raised the exact
``StorageError`` subclass the model names (no generic exception, no silent success).

Operations: create (attributes, segment types, bad types and values); append plain, with a
writer id and event numbers (next, duplicate, older, gap, NULL, out of range), with event
counts (zero, several, out of range) and conditional at the right and at a wrong expected
offset, sizes across 4 KiB blocks, chunk boundaries, the 16 KiB writev and 32 KiB own-block
cut-offs and ``max_append_bytes``; a pipelined batch of those with seals, truncates,
attribute updates, deletes and creates issued in between and a merge at the end, awaited
together (validation in call order, duplicates answered in order); a batch whose log write
or fsync fails (all of it refused with StorageUnavailable, none of it applied, also after a
checkpoint taken meanwhile and in a crash copy); close with appends in flight; reads at any offset and length (below the start,
inside, at and past the end, negative lengths), ``try_read``, tail reads with ``wait`` (timed
out, woken by an append, on a sealed segment); info, ``exists``, ``segment_names``,
``get_attribute``; seal; truncate; merge (sealed first by the store, transient and event
counts, across containers refused); delete and re-create; attribute updates of every type,
several per call (all or nothing); a forced flush and checkpoint; clean close and reopen; a
crash copy of the live directory taken at rest (reopened, it must equal the model, and the
run goes on with it) and with appends in flight (every acknowledged operation present,
each segment's new bytes a prefix of what was in flight, nothing invented).
``test_model_findings.py`` holds a plain reproduction of each defect this test found.

Each example draws its configuration: fsync mode, 1 or 2 containers, chunk files of 4 KiB,
16 KiB or 5000 bytes (not a block multiple: buffered I/O), a tiny or a large read cache,
direct I/O on or off.

CI runs 30 examples of up to 30 steps (10-20 s). A long run:
``SEGMENTSTORE_MODEL_EXAMPLES=2000 .venv/bin/pytest tests/storage/test_store_model.py``
(``tests/model_runs.py``: ``SEGMENTSTORE_MODEL_STEPS`` sets the steps per example,
``SEGMENTSTORE_MODEL_TRACE=1 ... -s`` prints each example's steps and does not shrink, for a
race that fails now and then and so cannot be replayed; the pytest timeout grows with the
examples).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)
from model_runs import examples, model_settings  # tests/model_runs.py

from segmentstore.storage import (
    ATTRIBUTE_SEGMENT_TYPE,
    EVENT_COUNT,
    NULL_ATTRIBUTE_VALUE,
    SEGMENT_TYPE_TABLE,
    SEGMENT_TYPE_TRANSIENT,
    AppendResult,
    AppendTooLarge,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdate,
    BadOffset,
    InvalidOffset,
    ReadResult,
    SegmentExists,
    SegmentNotFound,
    SegmentSealed,
    SegmentStore,
    SegmentTruncated,
    StorageError,
    StorageUnavailable,
)
from segmentstore.storage.store import container_of

from .conftest import small_config

EXAMPLES = examples(30)  # CI; the environment makes long runs (tests/model_runs.py)

NULL = NULL_ATTRIBUTE_VALUE
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
MAX_APPEND = 60_000
# Transactions and transients land in their parent's container, so they can be merged.
NAMES = ["a", "b", "a#transaction.1", "a#transient.2", "b#transaction.3"]
WRITERS = [uuid.UUID(int=0x100), uuid.UUID(int=0x101)]
# Any UUID comes off the wire as a writer id: EVENT_COUNT's too (refused), now and then.
WRITER_IDS = [*WRITERS, *WRITERS, EVENT_COUNT]
# Writer ids are attributes too (their values are the writers' event numbers).
ATTR_IDS = [uuid.UUID(int=0x200), uuid.UUID(int=0x201), WRITERS[0], EVENT_COUNT]
CHECKED_IDS = [*ATTR_IDS, WRITERS[1], ATTRIBUTE_SEGMENT_TYPE]

T = TypeVar("T")


@dataclass
class Seg:
    """What a segment holds, by the rules in api.py: all bytes ever appended (those below
    ``start`` are not readable), and every attribute (writers' event numbers and
    EVENT_COUNT included), absent ones left out."""

    segment_type: int = 0
    data: bytearray = field(default_factory=bytearray)
    start: int = 0
    sealed: bool = False
    attrs: dict[uuid.UUID, int] = field(default_factory=dict)

    def add_events(self, count: int) -> None:
        if count:
            self.attrs[EVENT_COUNT] = self.attrs.get(EVENT_COUNT, 0) + count

    def set_attr(self, key: uuid.UUID, value: int) -> None:
        if value == NULL:
            self.attrs.pop(key, None)
        else:
            self.attrs[key] = value

    def copy(self) -> Seg:
        return Seg(
            self.segment_type, bytearray(self.data), self.start, self.sealed, dict(self.attrs)
        )


def payload(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


# ---------------------------------------------------------------- strategies

# A segment: mostly one that exists (``StoreMachine.name``), sometimes any of NAMES.
names = st.integers(0, 15)
sizes = st.one_of(
    st.integers(0, 300),
    st.integers(0, 5000),
    st.sampled_from([4095, 4096, 4097, 4999, 5000, 5001, 16383, 16384, 16385, 32768]),
    st.integers(16_000, 34_000),
    st.sampled_from([MAX_APPEND, MAX_APPEND + 1]),
)
seeds = st.integers(0, 2**32)
# How an append's event number relates to the writer's last one (or None: no writer id).
event_kinds = st.sampled_from(
    [None, None, "next", "next", "same", "older", "gap", "null", "first", "too_big"]
)
event_counts = st.sampled_from([1, 1, 1, 0, 3, -1, 2**32])
# None: unconditional; "right": the model's length; otherwise that offset from it.
expected_kinds = st.one_of(st.none(), st.none(), st.just("right"), st.integers(-3, 3))
small_i64 = st.integers(-5, 60) | st.sampled_from([NULL, I64_MAX, I64_MIN + 1, 2**63])
attr_updates = st.lists(
    st.tuples(
        st.sampled_from(ATTR_IDS),
        st.sampled_from(list(AttributeUpdateType)),
        small_i64,
        st.integers(-2, 60) | st.just(NULL) | st.just(-1),  # compare value; -1: the current
    ),
    min_size=1,
    max_size=3,
)
# A read's offset: inside the readable range (per mille of it), or that far from an edge.
read_offsets = st.one_of(
    st.tuples(st.just("inside"), st.integers(0, 1000)),
    st.tuples(st.just("inside"), st.integers(0, 1000)),
    st.tuples(st.sampled_from(["zero", "start", "end"]), st.integers(-3, 3)),
    st.tuples(st.sampled_from(["zero", "end"]), st.integers(-40_000, 40_000)),
)
max_lengths = st.sampled_from([0, -1, 1, 4096, 1 << 20]) | st.integers(0, 40_000)

append_ops = st.tuples(
    st.just("append"), names, sizes, seeds, event_kinds, event_counts, expected_kinds
)
batch_ops = st.one_of(
    append_ops,
    append_ops,
    append_ops,
    st.tuples(st.just("seal"), names),
    st.tuples(st.just("truncate"), names, st.integers(0, 1000)),
    st.tuples(st.just("attrs"), names, attr_updates),
    st.tuples(st.just("delete"), names),
    # A name, or (len(NAMES)) the one the operation before was about: delete, re-create.
    st.tuples(st.just("create"), st.integers(0, len(NAMES))),
)


class Outcome:
    """What the model says an operation gives: a value, or an exception of exactly one type."""

    def __init__(self, value: object = None, error: type[StorageError] | None = None) -> None:
        self.value = value
        self.error = error

    def __repr__(self) -> str:
        return f"raises {self.error.__name__}" if self.error else f"returns {self.value!r}"


def check(what: str, outcome: Outcome, got: object) -> None:
    """``got`` (a value, or the exception raised) must be what the model said."""
    if outcome.error is not None:
        assert type(got) is outcome.error, f"{what}: expected {outcome}, got {got!r}"
        return
    if isinstance(got, BaseException):
        raise AssertionError(f"{what}: expected {outcome}, got {got!r}") from got
    assert got == outcome.value, f"{what}: expected {outcome}, got {got!r}"


async def outcome_of(aw: Awaitable[T]) -> T | StorageError:
    try:
        return await aw
    except StorageError as exc:  # anything else is a failure of the test
        return exc


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.dirs = 0
        self.model: dict[str, Seg] = {}
        self.store: SegmentStore | None = None
        self.config = small_config(self.tmp / "none")

    # ------------------------------------------------------------ plumbing

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @property
    def s(self) -> SegmentStore:
        assert self.store is not None
        return self.store

    def teardown(self) -> None:
        try:
            if self.store is not None:
                self.run(self.store.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def new_dir(self) -> Path:
        self.dirs += 1
        return self.tmp / f"data-{self.dirs}"

    async def open(self, data_dir: Path) -> SegmentStore:
        return await SegmentStore.open(small_config(data_dir, **_settings(self.config)))

    @initialize(
        fsync=st.sampled_from(["always", "never"]),
        containers=st.sampled_from([1, 2]),
        chunk=st.sampled_from([4096, 16384, 5000]),
        cache=st.sampled_from([4096, 24 * 1024, 256 * 1024 * 1024]),
        direct=st.booleans(),
        checkpoint=st.sampled_from([24 * 1024, 256 * 1024]),
        first=st.integers(1, len(NAMES)),
    )
    def start(
        self,
        fsync: str,
        containers: int,
        chunk: int,
        cache: int,
        direct: bool,
        checkpoint: int,
        first: int,
    ) -> None:
        self.config = small_config(
            self.new_dir(),
            fsync=fsync,
            container_count=containers,
            chunk_file_bytes=chunk,
            read_cache_bytes=cache,
            direct_io=direct,
            checkpoint_log_bytes=checkpoint,
            flush_bytes=8 * 1024,
            log_file_bytes=32 * 1024,
            max_append_bytes=MAX_APPEND,
        )
        self.store = self.run(self.open(self.config.data_dir))
        for name in NAMES[:first]:
            kind = SEGMENT_TYPE_TRANSIENT if "#transient." in name else 0
            self.run(self.s.create_segment(name, segment_type=kind))
            self.model[name] = Seg(kind)

    # ------------------------------------------------------------ the model's rules

    def append_outcome(
        self,
        name: str,
        n: int,
        writer: uuid.UUID | None,
        event_number: int | None,
        event_count: int,
        expected: int | None,
    ) -> Outcome:
        """The model's answer to an append, in the order the store checks (and applied to
        the model when it succeeds)."""
        seg = self.model.get(name)
        if seg is None:
            return Outcome(error=SegmentNotFound)
        if seg.sealed:
            return Outcome(error=SegmentSealed)
        if n > MAX_APPEND:
            return Outcome(error=AppendTooLarge)
        if writer == EVENT_COUNT and event_number is not None:
            return Outcome(error=InvalidOffset)
        duplicate = event_number is not None and event_number <= seg.attrs.get(writer, NULL)
        if writer is not None and duplicate:
            return Outcome(AppendResult(len(seg.data), True))
        if expected is not None and expected != len(seg.data):
            return Outcome(error=BadOffset)
        if not (I64_MIN <= (event_number or 0) <= I64_MAX and 0 <= event_count < 2**32):
            return Outcome(error=InvalidOffset)
        if seg.attrs.get(EVENT_COUNT, 0) + event_count > I64_MAX:
            return Outcome(error=InvalidOffset)  # no checkpoint could hold the count
        return Outcome(AppendResult(len(seg.data) + n))

    def apply_append(
        self,
        name: str,
        data: bytes,
        writer: uuid.UUID | None,
        event_number: int | None,
        event_count: int,
        outcome: Outcome,
    ) -> None:
        if outcome.error is not None or outcome.value.duplicate:  # type: ignore[attr-defined]
            return
        seg = self.model[name]
        seg.data += data
        if writer is not None and event_number is not None:
            seg.set_attr(writer, event_number)
        seg.add_events(event_count)

    def event_number(self, name: str, writer: uuid.UUID, kind: str) -> int:
        seg = self.model.get(name)
        last = NULL if seg is None else seg.attrs.get(writer, NULL)
        base = -1 if last == NULL else last
        return {
            "next": base + 1,
            "same": last,
            "older": base - 1,
            "gap": base + 5,
            "null": NULL,
            "first": 0,
            "too_big": 2**63,
        }[kind]

    def expected_offset(self, name: str, kind: str | int | None) -> int | None:
        if kind is None:
            return None
        seg = self.model.get(name)
        length = 0 if seg is None else len(seg.data)
        return length if kind == "right" else length + int(kind or 1)

    def truncate_outcome(self, name: str, offset: int) -> Outcome:
        seg = self.model.get(name)
        if seg is None:
            return Outcome(error=SegmentNotFound)
        if not seg.start <= offset <= len(seg.data):
            return Outcome(error=InvalidOffset)
        seg.start = offset
        return Outcome(None)

    def seal_outcome(self, name: str) -> Outcome:
        seg = self.model.get(name)
        if seg is None:
            return Outcome(error=SegmentNotFound)
        if seg.sealed:
            return Outcome(error=SegmentSealed)
        seg.sealed = True
        return Outcome(len(seg.data))

    def delete_outcome(self, name: str) -> Outcome:
        if self.model.pop(name, None) is None:
            return Outcome(error=SegmentNotFound)
        return Outcome(None)

    def updates_for(
        self, name: str, raw: list[tuple[uuid.UUID, AttributeUpdateType, int, int]]
    ) -> list[AttributeUpdate]:
        """The updates; a compare value of -1 means "the current value"."""
        seg = self.model.get(name)
        updates = []
        for key, kind, value, compare in raw:
            if compare == -1 and seg is not None:
                compare = seg.attrs.get(key, NULL)
            updates.append(AttributeUpdate(key, kind, value, compare))
        return updates

    def attrs_outcome(
        self, name: str, raw: list[tuple[uuid.UUID, AttributeUpdateType, int, int]]
    ) -> tuple[list[AttributeUpdate], Outcome]:
        updates = self.updates_for(name, raw)
        return updates, self.attrs_result(name, updates)

    def attrs_result(self, name: str, updates: list[AttributeUpdate]) -> Outcome:
        """Every update sees the ones before it in the call; one refusal refuses them all."""
        seg = self.model.get(name)
        if seg is None:
            return Outcome(error=SegmentNotFound)
        if seg.sealed:
            return Outcome(error=SegmentSealed)
        values: dict[uuid.UUID, int] = {}
        for u in updates:
            if not I64_MIN <= u.value <= I64_MAX:
                return Outcome(error=BadAttributeUpdate)
            current = values.get(u.attribute_id, seg.attrs.get(u.attribute_id, NULL))
            t = u.update_type
            if t == AttributeUpdateType.NONE and current != NULL:
                return Outcome(error=BadAttributeUpdate)
            greater = t == AttributeUpdateType.REPLACE_IF_GREATER
            if greater and current != NULL and u.value <= current:
                return Outcome(error=BadAttributeUpdate)
            if t == AttributeUpdateType.REPLACE_IF_EQUALS and current != u.compare_value:
                return Outcome(error=BadAttributeUpdate)
            new = u.value
            if t == AttributeUpdateType.ACCUMULATE:
                new = (0 if current == NULL else current) + u.value
                if not I64_MIN < new <= I64_MAX:
                    return Outcome(error=BadAttributeUpdate)
            values[u.attribute_id] = new
        for key, value in values.items():
            seg.set_attr(key, value)
        return Outcome(None)

    # ------------------------------------------------------------ rules

    def name(self, pick: int) -> str:
        """Mostly a segment that exists (the model's, in order), else any of NAMES."""
        existing = sorted(self.model)
        if existing and pick < 12:
            return existing[pick % len(existing)]
        return NAMES[pick % len(NAMES)]

    @rule(
        name=st.sampled_from(NAMES),
        segment_type=st.sampled_from([0, 0, SEGMENT_TYPE_TRANSIENT, SEGMENT_TYPE_TABLE, -1]),
        attrs=st.dictionaries(st.sampled_from(ATTR_IDS), small_i64, max_size=2),
    )
    def create(self, name: str, segment_type: int, attrs: dict[uuid.UUID, int]) -> None:
        if name in self.model:
            expect = Outcome(error=SegmentExists)
        elif any(not I64_MIN <= v <= I64_MAX for v in attrs.values()):
            expect = Outcome(error=BadAttributeUpdate)
        elif segment_type < 0:
            expect = Outcome(error=InvalidOffset)
        else:
            expect = Outcome(None)
            self.model[name] = Seg(
                segment_type, attrs={k: v for k, v in attrs.items() if v != NULL}
            )
        got = self.run(
            outcome_of(self.s.create_segment(name, segment_type=segment_type, attributes=attrs))
        )
        check(f"create {name}", expect, got)

    @rule(op=append_ops)
    def append(self, op: tuple[Any, ...]) -> None:
        self.run(self.batch([op]))

    @rule(ops=st.lists(append_ops, min_size=1, max_size=5))
    def appends(self, ops: list[tuple[Any, ...]]) -> None:
        for op in ops:
            self.run(self.batch([op]))

    @rule(
        ops=st.lists(batch_ops, min_size=2, max_size=8),
        # The source: a segment, or (-1) the one the batch's last operation was about, which
        # then has work on its way when the merge starts.
        merge=st.none() | st.none() | st.tuples(names, names | st.just(-1)),
    )
    def pipelined(self, ops: list[tuple[Any, ...]], merge: tuple[int, int] | None) -> None:
        self.run(self.batch(ops, merge))

    @rule(
        into=names,
        source=names,
        appends=st.lists(st.tuples(sizes, seeds), max_size=3),
        then=st.sampled_from(["seal", "truncate", None]),
    )
    def merge_in_flight(
        self, into: int, source: int, appends: list[tuple[int, int]], then: str | None
    ) -> None:
        """A merge of a source with appends, a seal or a truncate still on their way (a
        transaction committed right behind its writer's last events)."""
        ops: list[tuple[Any, ...]] = [
            ("append", source, n, seed, None, 1, None) for n, seed in appends
        ]
        if then is not None:
            ops.append((then, source, 500))
        if ops:
            self.run(self.batch(ops, (into, -1)))

    async def batch(self, ops: list[tuple[Any, ...]], merge: tuple[int, int] | None = None) -> None:
        """Issue ``ops`` in order without waiting for any (an append is ordered when it is
        called; a seal, truncate, attribute update or delete when its task first runs, so
        each gets one loop turn before the next op), then a ``merge`` of two segments (last:
        what it moves is read after its first turn, so a later call could come before it),
        then await them all."""
        waits: list[tuple[str, Outcome, asyncio.Future[Any]]] = []
        if merge is not None:
            ops = [*ops, ("merge", *merge)]
        last = NAMES[0]
        for op in ops:
            kind, name = op[0], self.name(op[1])
            if kind == "append":
                _, _, n, seed, ev_kind, count, exp_kind = op
                writer = event_number = None
                if ev_kind is not None:
                    writer = WRITER_IDS[seed % len(WRITER_IDS)]
                    event_number = self.event_number(name, writer, ev_kind)
                expected = self.expected_offset(name, exp_kind)
                data = payload(seed, n)
                outcome = self.append_outcome(name, n, writer, event_number, count, expected)
                self.apply_append(name, data, writer, event_number, count, outcome)
                fut = self.s.append(
                    name,
                    data,
                    writer_id=writer,
                    event_number=event_number,
                    event_count=count,
                    expected_offset=expected,
                )
                what = f"append {n} to {name} (writer {writer}, event {event_number}, count {count}, expected {expected})"
                waits.append((what, outcome, fut))
                last = name
                continue
            if kind == "seal":
                outcome, coro = self.seal_outcome(name), self.s.seal(name)
            elif kind == "truncate":
                seg = self.model.get(name)
                offset = (
                    0 if seg is None else seg.start + op[2] * (len(seg.data) - seg.start) // 1000
                )
                if op[2] % 7 == 3:
                    offset = (seg.start - 1) if seg is not None and seg.start else offset + 10**6
                outcome, coro = self.truncate_outcome(name, offset), self.s.truncate(name, offset)
            elif kind == "attrs":
                updates, outcome = self.attrs_outcome(name, op[2])
                coro = self.s.update_attributes(name, updates)
            elif kind == "merge":
                target = self.name(op[1])
                source = last if op[2] == -1 else self.name(op[2])
                outcome, coro = self.merge_outcome(target, source), self.s.merge(target, source)
            elif kind == "create":
                name = last if op[1] == len(NAMES) else NAMES[op[1]]
                outcome = Outcome(error=SegmentExists) if name in self.model else Outcome(None)
                self.model.setdefault(name, Seg())
                coro = self.s.create_segment(name)
            else:
                outcome, coro = self.delete_outcome(name), self.s.delete(name)
            waits.append((f"{kind} {name} {op[1:]}", outcome, asyncio.ensure_future(coro)))
            last = name
            await asyncio.sleep(0)  # the task validates and queues now, in call order
        for what, outcome, fut in waits:
            check(what, outcome, await outcome_of(fut))

    @rule(pick=names, seed=seeds)
    def recreate(self, pick: int, seed: int) -> None:
        """Create a missing segment (the create rule mostly finds them there)."""
        missing = [n for n in NAMES if n not in self.model]
        if missing:
            self.create(missing[pick % len(missing)], [0, SEGMENT_TYPE_TRANSIENT][seed % 2], {})

    @rule(pick=names, where=read_offsets, max_length=max_lengths, guard=st.booleans())
    def read(self, pick: int, where: tuple[str, int], max_length: int, guard: bool) -> None:
        name = self.name(pick)
        seg = self.model.get(name)
        anchor, delta = where
        start, end = (0, 0) if seg is None else (seg.start, len(seg.data))
        if anchor == "inside":
            offset = start + delta * (end - start) // 1000
        else:
            offset = {"zero": 0, "start": start, "end": end}[anchor] + delta
        entered: list[int] = []

        def disk_guard(n: int) -> Any:
            entered.append(n)
            return _Nothing()

        got = self.run(
            outcome_of(
                self.s.read(name, offset, max_length, disk_guard=disk_guard if guard else None)
            )
        )
        self.check_read(name, offset, max_length, got)
        assert len(entered) <= 1, f"disk guard entered {len(entered)} times"
        try:
            fast: ReadResult | StorageError | None = self.s.try_read(name, offset, max_length)
        except StorageError as exc:
            fast = exc
        if fast is not None:
            self.check_read(name, offset, max_length, fast)

    def check_read(self, name: str, offset: int, max_length: int, got: object) -> None:
        seg = self.model.get(name)
        what = f"read {name} at {offset} max {max_length}"
        if seg is None:
            check(what, Outcome(error=SegmentNotFound), got)
            return
        length = len(seg.data)
        if offset < seg.start:
            check(what, Outcome(error=SegmentTruncated), got)
            return
        if offset > length:
            check(what, Outcome(error=InvalidOffset), got)
            return
        assert isinstance(got, ReadResult), f"{what}: got {got!r}"
        data = bytes(got.data)
        want = bytes(seg.data[offset : offset + max(0, max_length)])
        assert got.offset == offset, what
        assert want.startswith(data), f"{what}: {len(data)} bytes, not the model's"
        assert data or not want, f"{what}: nothing returned below the end"
        at_end = offset + len(data) == length
        assert (got.at_tail, got.end_of_segment) == (
            at_end and not seg.sealed,
            at_end and seg.sealed,
        ), f"{what}: flags {got}"

    @rule(pick=names, past=st.sampled_from([0, 0, 1, -1]), woken=st.booleans(), seed=seeds)
    def tail_read(self, pick: int, past: int, woken: bool, seed: int) -> None:
        """A read with ``wait`` at (or near) the end: parks on an open segment and returns
        what an append brings, or an empty at_tail result when it times out."""
        name = self.name(pick)
        now = self.model.get(name)
        seg = None if now is None else now.copy()  # as it was when the read was called
        offset = (0 if seg is None else len(seg.data)) + past
        size = 2 + seed % 100
        # Woken (an append lands past the offset): the wait only bounds a slow disk, the
        # read returns as soon as the append lands. Otherwise it times out.
        ok = self.append_outcome(name, size, None, None, 1, None).error is None
        lands = ok and seg is not None and offset < len(seg.data) + size
        wait = 10.0 if woken and lands else 0.01

        async def go() -> None:
            task = asyncio.ensure_future(outcome_of(self.s.read(name, offset, 1 << 20, wait=wait)))
            await asyncio.sleep(0)
            waits = []
            if woken:
                data = payload(seed, size)
                outcome = self.append_outcome(name, len(data), None, None, 1, None)
                self.apply_append(name, data, None, None, 1, outcome)
                waits.append((outcome, self.s.append(name, data)))
            got = await task
            for outcome, fut in waits:
                check(f"append to {name} under a tail read", outcome, await outcome_of(fut))
            what = f"tail read {name} at {offset}"
            cur = self.model.get(name)
            if seg is None or cur is None:
                # Missing: refused. Deleted meanwhile (not here): empty at_tail.
                check(what, Outcome(error=SegmentNotFound), got)
            elif offset < seg.start:
                check(what, Outcome(error=SegmentTruncated), got)
            elif offset < len(seg.data) and len(cur.data) == len(seg.data):
                self.check_read(name, offset, 1 << 20, got)  # not parked, nothing appended
            elif offset < len(seg.data):
                # Not parked: served at once, or from chunk files while the append lands.
                assert isinstance(got, ReadResult) and got.data, f"{what}: {got!r}"
                data = bytes(got.data)
                assert cur.data[offset:].startswith(data), f"{what}: not the model's bytes"
                end = offset + len(data)
                assert end in (len(seg.data), len(cur.data)), f"{what}: {len(data)} bytes"
                assert not got.end_of_segment and (got.at_tail or end < len(cur.data)), what
            elif seg.sealed:
                if offset == len(seg.data):
                    check(what, Outcome(ReadResult(offset, b"", False, True)), got)
                else:
                    check(what, Outcome(error=InvalidOffset), got)
            elif offset < len(cur.data):
                # Woken by the append: its bytes (all of them, from the cache).
                self.check_read(name, offset, 1 << 20, got)
                assert isinstance(got, ReadResult) and got.data, f"{what}: {got}"
            else:
                assert isinstance(got, ReadResult), f"{what}: {got!r}"
                assert (bytes(got.data), got.at_tail, got.end_of_segment) == (b"", True, False), (
                    what
                )

        self.run(go())

    @rule(pick=names)
    def seal(self, pick: int) -> None:
        name = self.name(pick)
        outcome = self.seal_outcome(name)
        check(f"seal {name}", outcome, self.run(outcome_of(self.s.seal(name))))

    @rule(pick=names, at=st.integers(0, 1000), wrong=st.sampled_from([None, None, "below", "past"]))
    def truncate(self, pick: int, at: int, wrong: str | None) -> None:
        name = self.name(pick)
        seg = self.model.get(name)
        offset = 0 if seg is None else seg.start + at * (len(seg.data) - seg.start) // 1000
        if seg is not None and wrong == "below":
            offset = seg.start - 1
        elif seg is not None and wrong == "past":
            offset = len(seg.data) + 1
        outcome = self.truncate_outcome(name, offset)
        check(
            f"truncate {name} at {offset}",
            outcome,
            self.run(outcome_of(self.s.truncate(name, offset))),
        )

    @rule(pick=names)
    def delete(self, pick: int) -> None:
        name = self.name(pick)
        outcome = self.delete_outcome(name)
        check(f"delete {name}", outcome, self.run(outcome_of(self.s.delete(name))))

    @rule(into=names, source_pick=names)
    def merge(self, into: int, source_pick: int) -> None:
        target, source = self.name(into), self.name(source_pick)
        outcome = self.merge_outcome(target, source)
        got = self.run(outcome_of(self.s.merge(target, source)))
        check(f"merge {source} into {target}", outcome, got)
        if isinstance(got, StorageError):
            # A refusal names the segment it is about.
            assert got.segment in (target, source), got

    def merge_outcome(self, target: str, source: str) -> Outcome:
        count = self.config.container_count
        t, s = self.model.get(target), self.model.get(source)
        if container_of(target, count) != container_of(source, count):
            return Outcome(error=StorageError)
        if target == source:
            return Outcome(error=InvalidOffset)
        if t is None or s is None:
            return Outcome(error=SegmentNotFound)
        if t.sealed:
            return Outcome(error=SegmentSealed)
        delta = (
            1 if s.segment_type & SEGMENT_TYPE_TRANSIENT else max(0, s.attrs.get(EVENT_COUNT, 0))
        )
        s.sealed = True  # first, in a record of its own (api.py)
        if t.attrs.get(EVENT_COUNT, 0) + delta > I64_MAX:
            return Outcome(error=InvalidOffset)
        t.data += s.data[s.start :]
        t.add_events(delta)
        del self.model[source]
        return Outcome(len(t.data))

    @rule(pick=names, raw=attr_updates)
    def update_attributes(
        self, pick: int, raw: list[tuple[uuid.UUID, AttributeUpdateType, int, int]]
    ) -> None:
        name = self.name(pick)
        updates, outcome = self.attrs_outcome(name, raw)
        got = self.run(outcome_of(self.s.update_attributes(name, updates)))
        check(f"update {name} {updates}", outcome, got)

    @rule()
    def flush_and_checkpoint(self) -> None:
        """What the flush timer and the checkpoint threshold do, now (no public call)."""

        async def go() -> None:
            for c in self.s._containers:
                await c._flush()
                assert await c._checkpoint()

        self.run(go())

    @rule()
    def reopen(self) -> None:
        async def go() -> None:
            await self.s.close()
            self.store = None
            self.store = await self.open(self.config.data_dir)

        self.run(go())

    @rule(ops=st.lists(append_ops, min_size=1, max_size=5))
    def close_in_flight(self, ops: list[tuple[Any, ...]]) -> None:
        """close() with appends in flight: they become durable and are acknowledged first."""

        async def go() -> None:
            batch = asyncio.ensure_future(self.batch(ops))
            await asyncio.sleep(0)  # every append is called (and ordered) now
            await self.s.close()
            await batch
            self.store = None
            self.store = await self.open(self.config.data_dir)

        self.run(go())

    @rule()
    def crash_at_rest(self) -> None:
        """Open a crash copy of the live directory, go on with it (the live store closes)."""

        async def go() -> None:
            copy = await self.crash_copy()
            await self.s.close()
            shutil.rmtree(self.config.data_dir, ignore_errors=True)
            self.store = None
            self.config = small_config(copy, **_settings(self.config))
            self.store = await self.open(copy)

        self.run(go())

    @rule(ops=st.lists(st.tuples(names, sizes, seeds), min_size=1, max_size=6))
    def crash_in_flight(self, ops: list[tuple[int, int, int]]) -> None:
        """A crash copy taken with plain appends in flight: reopened, every segment holds
        what was acknowledged before plus a prefix of its appends in flight, and nothing
        else. The live store then goes on (its appends all complete)."""

        async def go() -> None:
            before = {name: seg.copy() for name, seg in self.model.items()}
            sent: dict[str, list[bytes]] = {}
            waits = []
            for pick, n, seed in ops:
                name = self.name(pick)
                data = payload(seed, n)
                outcome = self.append_outcome(name, n, None, None, 1, None)
                self.apply_append(name, data, None, None, 1, outcome)
                if outcome.error is None:
                    sent.setdefault(name, []).append(data)
                waits.append((f"append {n} to {name}", outcome, self.s.append(name, data)))
            copy = await self.crash_copy()
            try:
                crashed = await self.open(copy)
                try:
                    for name, seg in before.items():
                        info = crashed.info(name)
                        got = await read_all(crashed, name)
                        old = bytes(seg.data[seg.start :])
                        assert got.startswith(old), f"{name}: acknowledged bytes lost"
                        new, landed = got[len(old) :], b""
                        for data in sent.get(name, []):
                            if len(landed) >= len(new):
                                break
                            landed += data
                        assert new == landed, f"{name}: {len(new)} new bytes, not a prefix"
                        assert info.start_offset == seg.start and info.sealed == seg.sealed
                    assert sorted(crashed.segment_names()) == sorted(before), "segments"
                finally:
                    await crashed.close()
            finally:
                for what, outcome, fut in waits:
                    check(what, outcome, await outcome_of(fut))
                shutil.rmtree(copy, ignore_errors=True)

        self.run(go())

    @rule(
        ops=st.lists(batch_ops, min_size=1, max_size=6),
        fault=st.sampled_from(["wal.write", "wal.fsync"]),
        checkpoint=st.booleans(),
        crash=st.booleans(),
    )
    def failed_batch(
        self, ops: list[tuple[Any, ...]], fault: str, checkpoint: bool, crash: bool
    ) -> None:
        """The log write (or fsync) of one batch fails: every operation in it fails with
        StorageUnavailable and none is applied, also for a checkpoint taken meanwhile and a
        crash copy taken after; the store goes on working. All of it is issued in one loop
        turn so that it is one batch: the tasks (seal, truncate, ...) are made first, but
        validate in their first step, in the next turn, so after the appends, which validate
        when called; that is the order the model checks them in."""
        if any(c._log_thread.native for c in self.s._containers):
            return  # SEGMENTSTORE_NATIVE_LOG=1: batches bypass the faults' hook points
        if fault == "wal.fsync" and self.config.fsync != "always":
            fault = "wal.write"

        async def go() -> None:
            kept = self.model
            self.model = {name: seg.copy() for name, seg in kept.items()}
            fired: list[int] = []

            def failing_once(index: int) -> Callable[[str], None]:
                def hook(op: str) -> None:
                    if op == fault and index not in fired:
                        fired.append(index)  # each container's first batch fails
                        raise OSError(errno.ENOSPC, "injected")

                return hook

            for c in self.s._containers:
                c.set_fault_hook(failing_once(c.index))
            try:
                tasks = []
                appends = []
                last = NAMES[0]
                for op in ops:
                    kind, name = op[0], self.name(op[1])
                    if kind == "append":
                        appends.append((name, op))
                        continue
                    # The call is made now (its task runs after the appends below); the
                    # model's answer is worked out after theirs.
                    args: Any = None
                    if kind == "seal":
                        coro = self.s.seal(name)
                    elif kind == "truncate":
                        seg = self.model.get(name)
                        size = 0 if seg is None else len(seg.data) - seg.start
                        args = (0 if seg is None else seg.start) + op[2] * size // 1000
                        coro = self.s.truncate(name, args)
                    elif kind == "attrs":
                        args = self.updates_for(name, op[2])
                        coro = self.s.update_attributes(name, args)
                    elif kind == "create":
                        name = last if op[1] == len(NAMES) else NAMES[op[1]]
                        coro = self.s.create_segment(name)
                    else:
                        coro = self.s.delete(name)
                    tasks.append((kind, name, args, asyncio.ensure_future(coro)))
                    last = name
                waits = []
                for name, op in appends:
                    _, _, n, seed, _, count, exp_kind = op
                    expected = self.expected_offset(name, exp_kind)
                    data = payload(seed, n)
                    outcome = self.append_outcome(name, n, None, None, count, expected)
                    self.apply_append(name, data, None, None, count, outcome)
                    if outcome.error is None:
                        outcome = Outcome(error=StorageUnavailable)
                    fut = self.s.append(name, data, event_count=count, expected_offset=expected)
                    waits.append((f"append {n} to {name} (expected {expected})", outcome, fut))
                for kind, name, args, task in tasks:
                    queued = True
                    if kind == "seal":
                        outcome = self.seal_outcome(name)
                    elif kind == "truncate":
                        seg = self.model.get(name)
                        queued = seg is None or args != seg.start  # the same start: no record
                        outcome = self.truncate_outcome(name, args)
                    elif kind == "attrs":
                        outcome = self.attrs_result(name, args)
                    elif kind == "create":
                        outcome = Outcome(error=SegmentExists) if name in self.model else Outcome()
                        self.model.setdefault(name, Seg())
                    else:
                        outcome = self.delete_outcome(name)
                    if outcome.error is None and queued:
                        outcome = Outcome(error=StorageUnavailable)
                    waits.append((f"{kind} {name} {args}", outcome, task))
                await asyncio.sleep(0)  # the tasks queue theirs; then the batch goes
                ckpt = asyncio.ensure_future(self.checkpoint()) if checkpoint else None
                for what, outcome, fut in waits:
                    check(what, outcome, await outcome_of(fut))
                if ckpt is not None:
                    await ckpt
                queued = any(o.error is StorageUnavailable for _, o, _ in waits)
                assert bool(fired) == queued, f"fault {fault} fired: {fired}, queued: {queued}"
            finally:
                self.s.set_fault_hook(None)
                self.model = kept
            if crash:
                copy = await self.crash_copy()
                crashed = await self.open(copy)
                try:
                    await self.equals_model(crashed)
                finally:
                    await crashed.close()
                    shutil.rmtree(copy, ignore_errors=True)

        self.run(go())

    async def checkpoint(self) -> None:
        for c in self.s._containers:
            assert await c._checkpoint()

    async def crash_copy(self) -> Path:
        """The live directory as a crash at this moment would leave it. Each container's
        flush lock is held meanwhile: a flush or checkpoint running during a file-by-file
        copy would give a mix of files from different moments that no crash leaves. Log
        files are copied newest first, so a log write running meanwhile can only make an
        older file look further on than a newer one (what a crash between the two writes
        leaves), never the other way round."""
        target = self.new_dir()
        locks = [c._flush_lock for c in self.s._containers]
        for lock in locks:
            await lock.acquire()
        try:
            _copy_like_a_crash(self.config.data_dir, target)
        finally:
            for lock in locks:
                lock.release()
        return target

    # ------------------------------------------------------------ invariants

    @invariant()
    def store_equals_model(self) -> None:
        if self.store is not None:
            self.run(self.equals_model(self.store))

    async def equals_model(self, s: SegmentStore) -> None:
        """Every segment's info, attributes and bytes in ``s`` are the model's."""
        assert sorted(s.segment_names()) == sorted(self.model)
        for name in NAMES:
            seg = self.model.get(name)
            assert s.exists(name) == (seg is not None), name
            if seg is None:
                try:
                    s.info(name)
                except SegmentNotFound:
                    continue
                raise AssertionError(f"{name}: info of a missing segment")
            info = s.info(name)
            got = (info.length, info.start_offset, info.sealed, info.deleted, info.segment_type)
            want = (len(seg.data), seg.start, seg.sealed, False, seg.segment_type)
            assert got == want, f"{name}: info {got}, model {want}"
            assert info.attributes == seg.attrs, f"{name}: attributes"
            for key in CHECKED_IDS:
                value = seg.attrs.get(key, NULL)
                if key == ATTRIBUTE_SEGMENT_TYPE and value == NULL:
                    value = seg.segment_type
                assert s.get_attribute(name, key) == value, f"{name}: attribute {key}"
            data = await read_all(s, name)
            assert data == bytes(seg.data[seg.start :]), f"{name}: bytes differ"


class _Nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


async def read_all(s: SegmentStore, name: str) -> bytes:
    info = s.info(name)
    out = bytearray()
    pos = info.start_offset
    while pos < info.length:
        r = await s.read(name, pos, 1 << 20)
        assert r.offset == pos and r.data, f"{name}: read at {pos} returned {r}"
        out += r.data
        pos += len(r.data)
    return bytes(out)


def _settings(config: Any) -> dict[str, Any]:
    return {
        k: getattr(config, k)
        for k in (
            "fsync",
            "container_count",
            "chunk_file_bytes",
            "read_cache_bytes",
            "direct_io",
            "checkpoint_log_bytes",
            "flush_bytes",
            "log_file_bytes",
            "max_append_bytes",
        )
    }


def _copy_like_a_crash(src: Path, dst: Path) -> None:
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        if rel.name == "log":
            files = sorted(files, reverse=True)
        for f in files:
            # FileNotFoundError: removed meanwhile (a spare log file renamed into use).
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(Path(root) / f, dst / rel / f)
        dirs.sort()


StoreMachine.TestCase.settings = model_settings(30, 30)  # tests/model_runs.py
TestStoreModel = StoreMachine.TestCase
TestStoreModel.pytestmark = [pytest.mark.timeout(max(300, 3 * EXAMPLES))]  # type: ignore[attr-defined]
