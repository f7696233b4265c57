"""A model-based test of the controller's metadata: random sequences of ControllerService
calls (the servicer's methods, in process, over a real store) against a small model of
scopes, streams and transactions (hypothesis ``RuleBasedStateMachine``).

Steps: create and delete scopes (refused while streams exist), create streams (fixed N
segments; a malformed config is refused), update the config (a new segment count scales),
seal, delete (only sealed), scale (split a segment, merge two neighbours; a scale that
would leave a gap or names a segment that is not current is refused), write bytes to a
segment, truncate at a stream cut (at or after the head; before the head is refused),
transactions (create, write, commit, abort, ping, state), list scopes and streams page by
page (pages of 2), and restarts: clean, and from a copy of the live data directory (what a
kill -9 leaves). After every step: each listing and get agrees with the model, the
current segments and every epoch cover [0, 1) with no gap or overlap, each segment a scale
replaced has exactly the overlapping new segments as successors, each listing its
overlapping predecessors, status values are Pravega's (official-client.md sections 12-13),
and a refused request left no metadata and no segments behind.

CI runs 30 examples of 25 steps; ``tests/model_runs.py`` says how the environment makes a
long run: ``SEGMENTSTORE_MODEL_EXAMPLES=2000 pytest tests/controller/test_metadata_model.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule
from model_runs import OnDiskMachine, examples, model_settings  # tests/model_runs.py
from segmentstore_client.controller_proto import controller_pb2 as pb

from segmentstore.controller import streams as streams_module
from segmentstore.controller.metadata import Metadata
from segmentstore.controller.model import even_ranges, overlaps
from segmentstore.controller.service import Service
from segmentstore.controller.streams import Streams
from segmentstore.controller.transactions import Transactions
from segmentstore.storage import SegmentStore, StoreConfig
from segmentstore.tables import TableStore

from .conftest import stream_info

MODEL_EXAMPLES = examples(30)  # CI; the environment makes long runs (tests/model_runs.py)

SCOPES = ("s1", "s2", "s3")
STREAMS = ("a", "b", "c")
# Mostly the first scope and stream (made by ``first_stream``).
SCOPE = st.one_of(st.just(SCOPES[0]), st.sampled_from(SCOPES))
STREAM = st.one_of(st.just(STREAMS[0]), st.sampled_from(STREAMS))
# Streams to act on: mostly the first one (made by ``first_stream``), so that scales,
# writes, truncations and transactions pile up on one stream.
KEYS = st.one_of(
    st.just((SCOPES[0], STREAMS[0])), st.tuples(st.sampled_from(SCOPES), st.sampled_from(STREAMS))
)
LEASE = 60_000
EPS = 1e-9
# Small log and chunk files (the default 64 MiB log file is zero-filled at every open).
SMALL_FILES: dict[str, Any] = {
    "log_file_bytes": 1024 * 1024,
    "chunk_file_bytes": 256 * 1024,
    "checkpoint_log_bytes": 4 * 1024 * 1024,
    "flush_bytes": 512 * 1024,
    "flush_interval_s": 0.05,
}


class Aborted(Exception):
    """What ``context.abort`` raises: the gRPC status a call ended with."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code


class Context:
    """The servicer context of an in-process call: only ``abort`` is used."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


@dataclass
class StreamModel:
    segments: int  # minNumSegments of the config
    current: dict[int, tuple[float, float]]  # segment id -> key range
    epoch: int = 0
    next_number: int = 0
    sealed: bool = False
    lengths: dict[int, int] = field(default_factory=dict)  # bytes written per current segment
    head: dict[int, int] | None = None  # the truncation cut; None = never truncated

    def new_epoch(self, sealed: list[int], ranges: list[tuple[float, float]]) -> None:
        """Pravega's ids: the new epoch's segments numbered after every earlier one."""
        self.epoch += 1
        for sid in sealed:
            del self.current[sid]
            self.lengths.pop(sid, None)
        for lo, hi in ranges:
            sid = (self.epoch << 32) | self.next_number
            self.next_number += 1
            self.current[sid] = (lo, hi)
            self.lengths[sid] = 0

    def sorted_ids(self) -> list[int]:
        return sorted(self.current, key=lambda s: self.current[s][0])


@dataclass
class TxnModel:
    scope: str
    stream: str
    high: int
    low: int
    epoch: int
    segments: list[int]
    state: str = "OPEN"
    written: int = 0


class ControllerMachine(OnDiskMachine):
    def __init__(self) -> None:
        super().__init__("ctl-model-")
        self.service: Service | None = None
        self.scopes: set[str] = set()
        self.streams: dict[tuple[str, str], StreamModel] = {}
        self.txns: list[TxnModel] = []
        self.crash_at: int | None = None  # copy the directory this many loop turns into a call
        self.crash_copy: Path | None = None
        self.saved_page = streams_module.LIST_PAGE
        streams_module.LIST_PAGE = 2  # paging with a handful of names
        self.run(self.open(self.data))

    # ------------------------------------------------------------------ plumbing

    async def open(self, data: Path) -> None:
        self.data = data
        # As ``open_in_process`` (startup recovery included), without fsync: a crash copy
        # is taken from the page cache anyway.
        config = StoreConfig(data_dir=data, direct_io=False, fsync="never", **SMALL_FILES)
        store = await SegmentStore.open(config)
        tables = await TableStore.open(store)
        md = await Metadata.open(tables)
        streams = Streams(store, md)
        txns = Transactions(streams, md)
        await streams.recover()
        await txns.recover()
        self.store, self.tables = store, tables
        self.service = Service(streams, txns, ("127.0.0.1", 1), ("127.0.0.1", 2))

    def teardown(self) -> None:
        streams_module.LIST_PAGE = self.saved_page
        super().teardown()

    def append(self, name: str, data: bytes) -> None:
        async def go() -> None:
            assert self.store is not None
            await self.store.append(name, data)

        self.run(go())

    def call(self, method: str, request: Any) -> Any:
        """One RPC in process; an aborted call returns its ``Aborted``. With ``crash_at``
        set, the data directory is copied that many loop turns into the call (a kill -9
        while it runs) and the call goes on."""
        assert self.service is not None

        async def go() -> Any:
            try:
                return await getattr(self.service, method)(request, Context())
            except Aborted as e:
                return e

        async def copy_midway(turns: int) -> None:
            for _ in range(turns):
                await asyncio.sleep(0)
            self.crash_copy = self.take_copy()

        if self.crash_at is None:
            return self.run(go())
        turns, self.crash_at = self.crash_at, None

        async def both() -> Any:
            copier = asyncio.ensure_future(copy_midway(turns))
            try:
                return await go()
            finally:
                await copier

        return self.run(both())

    def take_copy(self) -> Path:
        self.copies += 1
        target = self.dir / f"crash-{self.copies}"
        shutil.copytree(self.data, target, copy_function=copy_if_there)
        return target

    def status(self, method: str, request: Any) -> str:
        reply = self.call(method, request)
        assert not isinstance(reply, Aborted), (method, reply)
        return str(
            reply.DESCRIPTOR.fields_by_name["status"].enum_type.values_by_number[reply.status].name
        )

    def code(self, method: str, request: Any) -> grpc.StatusCode:
        reply = self.call(method, request)
        assert isinstance(reply, Aborted), (method, reply)
        return reply.code

    @staticmethod
    def config(scope: str, stream: str, segments: int) -> Any:
        return pb.StreamConfig(
            streamInfo=stream_info(scope, stream),
            scalingPolicy=pb.ScalingPolicy(scaleType=0, minNumSegments=segments),
        )

    def seg_name(self, scope: str, stream: str, sid: int) -> str:
        return f"{scope}/{stream}/{sid & 0xFFFFFFFF}.#epoch.{sid >> 32}"

    def txn_request(self, t: TxnModel) -> Any:
        return pb.TxnRequest(
            streamInfo=stream_info(t.scope, t.stream),
            txnId=pb.TxnId(highBits=t.high, lowBits=t.low),
        )

    def txn_suffix(self, t: TxnModel) -> str:
        return f"#transaction.{t.high & 0xFFFFFFFFFFFFFFFF:016x}{t.low:016x}"

    # ------------------------------------------------------------------ scopes

    @initialize(n=st.integers(1, 3), txn=st.booleans())
    def first_stream(self, n: int, txn: bool) -> None:
        """The first scope and stream (and maybe a transaction): most steps then have a
        stream to work on."""
        self.create_scope(SCOPES[0])
        self.create_stream(SCOPES[0], STREAMS[0], n)
        if txn:
            self.create_txn((SCOPES[0], STREAMS[0]), 10)

    @rule(scope=st.sampled_from((*SCOPES, "bad/name", "")))
    def create_scope(self, scope: str) -> None:
        got = self.status("createScope", pb.ScopeInfo(scope=scope))
        if scope not in SCOPES:
            assert got == "INVALID_SCOPE_NAME"
        elif scope in self.scopes:
            assert got == "SCOPE_EXISTS"
        else:
            assert got == "SUCCESS"
            self.scopes.add(scope)

    @rule(scope=SCOPE)
    def delete_scope(self, scope: str) -> None:
        got = self.status("deleteScope", pb.ScopeInfo(scope=scope))
        if scope not in self.scopes:
            assert got == "SCOPE_NOT_FOUND"
        elif any(s == scope for s, _ in self.streams):
            assert got == "SCOPE_NOT_EMPTY"
        else:
            assert got == "SUCCESS"
            self.scopes.discard(scope)

    # ------------------------------------------------------------------ streams

    @rule(scope=SCOPE, stream=STREAM, n=st.integers(0, 4))
    def create_stream(self, scope: str, stream: str, n: int) -> None:
        request = self.config(scope, stream, n)
        if scope not in self.scopes:
            assert self.status("createStream", request) == "SCOPE_NOT_FOUND"
        elif n == 0:  # minNumSegments 0: malformed, nothing may be made
            assert self.code("createStream", request) == grpc.StatusCode.INVALID_ARGUMENT
        elif (scope, stream) in self.streams:
            assert self.status("createStream", request) == "STREAM_EXISTS"
        else:
            assert self.status("createStream", request) == "SUCCESS"
            m = StreamModel(n, {})
            for i, r in enumerate(even_ranges(n)):
                m.current[i] = r
                m.lengths[i] = 0
            m.next_number = n
            self.streams[(scope, stream)] = m

    @rule(scope=SCOPE, stream=STREAM, n=st.integers(0, 4))
    def update_stream(self, scope: str, stream: str, n: int) -> None:
        request = self.config(scope, stream, n)
        m = self.streams.get((scope, stream))
        if scope not in self.scopes:
            assert self.status("updateStream", request) == "SCOPE_NOT_FOUND"
        elif n == 0:
            assert self.code("updateStream", request) == grpc.StatusCode.INVALID_ARGUMENT
        elif m is None:
            assert self.status("updateStream", request) == "STREAM_NOT_FOUND"
        elif m.sealed:
            assert self.status("updateStream", request) == "STREAM_SEALED"
        else:
            assert self.status("updateStream", request) == "SUCCESS"
            if n != len(m.current):  # a fixed policy: exactly n segments, by a scale
                m.new_epoch(m.sorted_ids(), even_ranges(n))
            m.segments = n

    @rule(scope=SCOPE, stream=STREAM)
    def seal_stream(self, scope: str, stream: str) -> None:
        got = self.status("sealStream", stream_info(scope, stream))
        m = self.streams.get((scope, stream))
        if scope not in self.scopes:
            assert got == "SCOPE_NOT_FOUND"
        elif m is None:
            assert got == "STREAM_NOT_FOUND"
        else:
            assert got == "SUCCESS"
            m.sealed = True
            for t in self.txns:
                if (t.scope, t.stream) == (scope, stream) and t.state == "OPEN":
                    t.state = "ABORTED"  # sealing aborts open transactions

    @rule(scope=SCOPE, stream=STREAM)
    def delete_stream(self, scope: str, stream: str) -> None:
        got = self.status("deleteStream", stream_info(scope, stream))
        m = self.streams.get((scope, stream))
        if m is None:
            assert got == "STREAM_NOT_FOUND"
        elif not m.sealed:
            assert got == "STREAM_NOT_SEALED"
        else:
            assert got == "SUCCESS"
            del self.streams[(scope, stream)]
            self.txns = [t for t in self.txns if (t.scope, t.stream) != (scope, stream)]

    # ------------------------------------------------------------------ scaling

    @rule(
        key=KEYS,
        kind=st.sampled_from(("split", "merge", "gap", "overlap", "stale")),
        pick=st.integers(0, 7),
    )
    def scale(self, key: tuple[str, str], kind: str, pick: int) -> None:
        m = self.streams.get(key)
        ids = m.sorted_ids() if m is not None else [0]
        first = ids[pick % len(ids)]
        lo, hi = m.current[first] if m is not None else (0.0, 1.0)
        sealed, ranges = [first], [(lo, hi)]
        shape_ok = True
        if kind == "split":
            mid = (lo + hi) / 2
            ranges = [(lo, mid), (mid, hi)]
        elif kind == "merge" and m is not None and len(ids) > 1:
            i = pick % (len(ids) - 1)
            sealed = [ids[i], ids[i + 1]]
            ranges = [(m.current[ids[i]][0], m.current[ids[i + 1]][1])]
        elif kind == "gap":  # the new range leaves part of the old one uncovered
            ranges, shape_ok = [(lo, (lo + hi) / 2)], False
        elif kind == "overlap" and len(ids) > 1:  # the new range reaches into a neighbour
            ranges, shape_ok = [(lo - 0.05, hi)] if lo > 0 else [(lo, hi + 0.05)], False
        elif kind == "stale":  # a segment id that is not current
            sealed, shape_ok = [first + (1 << 40)], False
        ok = m is not None and not m.sealed and shape_ok
        request = pb.ScaleRequest(
            streamInfo=stream_info(*key),
            sealedSegments=sealed,
            newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
        )
        reply = self.call("scale", request)
        assert not isinstance(reply, Aborted), reply
        status = pb.ScaleResponse.ScaleStreamStatus.Name(reply.status)
        event(f"scale {kind}: {status}")
        if not ok:
            assert status == "PRECONDITION_FAILED", (kind, sealed, ranges)
            return
        assert m is not None
        assert status == "STARTED", (kind, sealed, ranges)
        m.new_epoch(sealed, ranges)
        assert reply.epoch == m.epoch
        made = {r.segmentId.segmentId: (r.minKey, r.maxKey) for r in reply.segments}
        assert made == {s: r for s, r in m.current.items() if s >> 32 == m.epoch}

    # ------------------------------------------------------------------ data and truncation

    @rule(key=KEYS, pick=st.integers(0, 7), n=st.integers(1, 300))
    def write(self, key: tuple[str, str], pick: int, n: int) -> None:
        m = self.streams.get(key)
        if m is None or m.sealed:
            return
        sid = m.sorted_ids()[pick % len(m.current)]
        self.append(self.seg_name(*key, sid), b"x" * n)
        m.lengths[sid] += n

    @rule(
        key=KEYS,
        fractions=st.lists(st.floats(0, 1.2), min_size=8, max_size=8),
    )
    def truncate(self, key: tuple[str, str], fractions: list[float]) -> None:
        """At a cut over the current segments (offsets up to a bit past their ends); valid
        when every offset is within its segment and not before the head."""
        m = self.streams.get(key)
        if m is None or not m.current:
            return
        cut = {
            sid: int(m.lengths[sid] * f) for sid, f in zip(m.sorted_ids(), fractions, strict=False)
        }
        head = m.head or {}
        ok = all(off <= m.lengths[s] and off >= head.get(s, 0) for s, off in cut.items())
        request = pb.StreamCut(streamInfo=stream_info(*key), cut=cut)
        event(f"truncate: {'valid' if ok else 'refused'}")
        if key[0] not in self.scopes:
            assert self.status("truncateStream", request) == "SCOPE_NOT_FOUND"
        elif ok:
            assert self.status("truncateStream", request) == "SUCCESS"
            m.head = cut
        else:
            assert self.code("truncateStream", request) == grpc.StatusCode.INVALID_ARGUMENT

    @rule(key=KEYS)
    def truncate_before_head(self, key: tuple[str, str]) -> None:
        """A cut at epoch 0 once the head is past a segment a scale sealed: refused."""
        m = self.streams.get(key)
        if m is None or m.head is None or m.epoch == 0 or set(m.head) != set(m.current):
            return
        epoch0 = self.call(
            "getEpochSegments", pb.GetEpochSegmentsRequest(streamInfo=stream_info(*key), epoch=0)
        )
        ids = [r.segmentId.segmentId for r in epoch0.segmentRanges]
        if set(ids) <= set(m.current):
            return  # epoch 0's segments are all still current: not before the head
        request = pb.StreamCut(streamInfo=stream_info(*key), cut=dict.fromkeys(ids, 0))
        event("truncate before the head")
        assert self.code("truncateStream", request) == grpc.StatusCode.INVALID_ARGUMENT

    # ------------------------------------------------------------------ transactions

    @rule(key=KEYS, n=st.integers(0, 100))
    def create_txn(self, key: tuple[str, str], n: int) -> None:
        m = self.streams.get(key)
        request = pb.CreateTxnRequest(streamInfo=stream_info(*key), lease=LEASE)
        if m is None:
            assert self.code("createTransaction", request) == grpc.StatusCode.NOT_FOUND
            return
        if m.sealed:
            assert self.code("createTransaction", request) == grpc.StatusCode.INVALID_ARGUMENT
            return
        reply = self.call("createTransaction", request)
        assert not isinstance(reply, Aborted), reply
        high, low = reply.txnId.highBits, reply.txnId.lowBits
        assert low >= 0 and high >> 32 == m.epoch  # the client's constraints (section 9)
        ranges = {r.segmentId.segmentId: (r.minKey, r.maxKey) for r in reply.activeSegments}
        assert ranges == m.current
        t = TxnModel(*key, high, low, m.epoch, m.sorted_ids())
        if n:  # some bytes in the transaction's first segment
            self.append(self.seg_name(*key, t.segments[0]) + self.txn_suffix(t), b"t" * n)
            t.written = n
        self.txns.append(t)

    # No preconditions on the model's state: a kill -9 in the middle of a request leaves
    # it done or not at random, and hypothesis needs the same draws when it replays a case.
    @rule(pick=st.integers(0, 20))
    def commit_txn(self, pick: int) -> None:
        if not self.txns:
            return
        t = self.txns[pick % len(self.txns)]
        m = self.streams[(t.scope, t.stream)]
        got = self.status("commitTransaction", self.txn_request(t))
        if t.state == "ABORTED":
            assert got == "FAILURE"
            return
        assert got == "SUCCESS"
        if t.state == "COMMITTED":
            return
        t.state = "COMMITTED"
        event("commit: rolling" if t.epoch != m.epoch else "commit")
        if t.epoch != m.epoch:  # a rolling commit: copies of its epoch, then of the current
            old = dict(m.current)
            m.new_epoch(m.sorted_ids(), [self.txn_ranges(t)[s] for s in t.segments])
            m.new_epoch(m.sorted_ids(), [old[s] for s in sorted(old, key=lambda s: old[s][0])])
        else:
            m.lengths[t.segments[0]] += t.written

    def txn_ranges(self, t: TxnModel) -> dict[int, tuple[float, float]]:
        reply = self.call(
            "getEpochSegments",
            pb.GetEpochSegmentsRequest(streamInfo=stream_info(t.scope, t.stream), epoch=t.epoch),
        )
        return {r.segmentId.segmentId: (r.minKey, r.maxKey) for r in reply.segmentRanges}

    @rule(pick=st.integers(0, 20))
    def abort_txn(self, pick: int) -> None:
        if not self.txns:
            return
        t = self.txns[pick % len(self.txns)]
        got = self.status("abortTransaction", self.txn_request(t))
        if t.state == "COMMITTED":
            assert got == "FAILURE"
        else:
            assert got == "SUCCESS"
            t.state = "ABORTED"

    @rule(pick=st.integers(0, 20))
    def ping_txn(self, pick: int) -> None:
        if not self.txns:
            return
        t = self.txns[pick % len(self.txns)]
        request = pb.PingTxnRequest(
            streamInfo=stream_info(t.scope, t.stream),
            txnId=pb.TxnId(highBits=t.high, lowBits=t.low),
            lease=LEASE,
        )
        expected = {"OPEN": "OK", "COMMITTED": "COMMITTED", "ABORTED": "ABORTED"}[t.state]
        assert self.status("pingTransaction", request) == expected

    # ------------------------------------------------------------------ restarts

    @rule()
    def restart(self) -> None:
        self.run(self.close())
        self.run(self.open(self.data))

    @rule()
    def crash_restart(self) -> None:
        """What a kill -9 leaves: a copy of the live directory (every answered request must
        be in it), opened after the live one is closed."""
        target = self.take_copy()
        self.run(self.close())
        shutil.rmtree(self.data, ignore_errors=True)
        self.run(self.open(target))

    @rule(
        op=st.sampled_from(
            (
                "split",
                "merge",
                "update",
                "seal",
                "delete",
                "create",
                "commit",
                "abort",
                "truncate",
                "txn",
            )
        ),
        turns=st.integers(0, 60),
        pick=st.integers(0, 20),
    )
    def crash_during(self, op: str, turns: int, pick: int) -> None:
        """A kill -9 ``turns`` loop turns into a request whose answer is then lost: after the
        restart the request has happened completely or not at all (recovery finishes what
        it finds half done), and nothing half made is left."""
        before = copy.deepcopy((self.scopes, self.streams, self.txns))
        self.crash_at, self.crash_copy = turns, None
        key = (SCOPES[0], STREAMS[0])
        if op in ("split", "merge"):
            self.scale(key, op, pick)
        elif op == "update":
            self.update_stream(*key, 1 + pick % 4)
        elif op == "seal":
            self.seal_stream(*key)
        elif op == "delete":
            self.delete_stream(*key)
        elif op == "create":
            self.create_stream(*key, 1 + pick % 3)
        elif op == "commit":
            self.commit_txn(pick)
        elif op == "abort":
            self.abort_txn(pick)
        elif op == "truncate":
            self.truncate(key, [(pick % 5) / 4] * 8)
        else:
            self.create_txn(key, 0)
        self.crash_at = None
        target = self.crash_copy or self.take_copy()  # no call made: a crash after the step
        self.run(self.close())
        shutil.rmtree(self.data, ignore_errors=True)
        self.run(self.open(target))
        try:
            self.check_all()
            event(f"crash during {op}: done")
        except AssertionError as done:
            after = (self.scopes, self.streams, self.txns)
            self.scopes, self.streams, self.txns = before
            try:
                self.check_all()
                event(f"crash during {op}: not done")
            except AssertionError as not_done:
                self.scopes, self.streams, self.txns = after
                raise AssertionError(
                    f"after a crash during {op}: neither done ({done!r}) nor not done ({not_done!r})"
                ) from not_done

    def check_all(self) -> None:
        self.listings_agree()
        self.streams_agree()

    # ------------------------------------------------------------------ invariants

    def pages(self, method: str, make: Any, items: str) -> list[Any]:
        out: list[Any] = []
        token = ""
        for _ in range(20):  # bounded: at most 10 names, 2 a page
            reply = self.call(method, make(token))
            assert not isinstance(reply, Aborted), reply
            page = list(getattr(reply, items))
            if not page:
                return out
            assert len(page) <= 2 and reply.continuationToken.token
            out.extend(page)
            token = reply.continuationToken.token
        raise AssertionError("paging did not end")

    @invariant()
    def listings_agree(self) -> None:
        scopes = self.pages(
            "listScopes",
            lambda t: pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=t)),
            "scopes",
        )
        assert scopes == sorted(self.scopes)
        for scope in SCOPES:
            exists = self.call("checkScopeExists", pb.ScopeInfo(scope=scope)).exists
            assert exists == (scope in self.scopes)
            if scope not in self.scopes:
                reply = self.call(
                    "listStreamsInScope", pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=scope))
                )
                assert reply.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND
                continue
            listed = self.pages(
                "listStreamsInScope",
                lambda t, s=scope: pb.StreamsInScopeRequest(
                    scope=pb.ScopeInfo(scope=s), continuationToken=pb.ContinuationToken(token=t)
                ),
                "streams",
            )
            assert [(i.scope, i.stream) for i in listed] == sorted(
                k for k in self.streams if k[0] == scope
            )

    @invariant()
    def streams_agree(self) -> None:
        assert self.store is not None
        names = self.store.segment_names()
        for scope in SCOPES:
            for stream in STREAMS:
                info = stream_info(scope, stream)
                m = self.streams.get((scope, stream))
                assert self.call("checkStreamExists", info).exists == (m is not None)
                prefix = f"{scope}/{stream}/"
                mine = {n for n in names if n.startswith(prefix)}
                if m is None:
                    assert not mine, mine  # nothing half-made or left behind
                    continue
                self.check_stream(scope, stream, m, mine)

    def check_stream(self, scope: str, stream: str, m: StreamModel, mine: set[str]) -> None:
        assert self.store is not None
        info = stream_info(scope, stream)
        cfg = self.call("getStreamConfiguration", info)
        assert cfg.scalingPolicy.minNumSegments == m.segments
        current = self.call("getCurrentSegments", info)
        ranges = {r.segmentId.segmentId: (r.minKey, r.maxKey) for r in current.segmentRanges}
        if m.sealed:
            assert ranges == {}  # sealed: empty, as the clients read it
        else:
            assert ranges == m.current
            tile(list(ranges.values()))
        for sid, length in m.lengths.items():
            seg = self.store.info(self.seg_name(scope, stream, sid))
            assert seg.length == length and seg.sealed == m.sealed, (sid, seg)
        # Every epoch tiles the key space; a segment that leaves an epoch has as successors
        # exactly the next epoch's new segments over its range, each with its predecessors.
        epochs: list[dict[int, tuple[float, float]]] = []
        for e in range(m.epoch + 2):
            r = self.call("getEpochSegments", pb.GetEpochSegmentsRequest(streamInfo=info, epoch=e))
            if e > m.epoch:
                assert isinstance(r, Aborted) and r.code == grpc.StatusCode.INVALID_ARGUMENT
                break
            epochs.append({x.segmentId.segmentId: (x.minKey, x.maxKey) for x in r.segmentRanges})
            tile(list(epochs[-1].values()))
        assert epochs[-1] == m.current
        for e in range(len(epochs) - 1):
            old, new = epochs[e], epochs[e + 1]
            gone = [s for s in old if s not in new]
            made = {s: r for s, r in new.items() if s >> 32 == e + 1}
            assert gone and made and all(s in old for s in new if s not in made)
            for sid in gone:
                r = self.call(
                    "getSegmentsImmediatelyFollowing", pb.SegmentId(streamInfo=info, segmentId=sid)
                )
                succ = {x.segment.segmentId.segmentId: sorted(x.value) for x in r.segments}
                want = {s for s, rng in made.items() if overlaps(rng, old[sid])}
                assert set(succ) == want, (sid, succ, want)
                for s, preds in succ.items():
                    assert preds == sorted(p for p in gone if overlaps(old[p], made[s])), (s, preds)
        for sid in m.current:
            r = self.call(
                "getSegmentsImmediatelyFollowing", pb.SegmentId(streamInfo=info, segmentId=sid)
            )
            assert list(r.segments) == []  # not replaced yet
        # The head: getSegments(0) answers the truncation cut (or epoch 0 from offset 0).
        at = self.call("getSegments", pb.GetSegmentsRequest(streamInfo=info, timestamp=0))
        got = {x.segmentId.segmentId: x.offset for x in at.segments}
        assert got == (m.head if m.head is not None else dict.fromkeys(epochs[0], 0))
        # No segment that is not the stream's (of some epoch) or an open transaction's.
        known = {self.seg_name(scope, stream, s) for e in epochs for s in e}
        open_txns = {
            self.seg_name(scope, stream, s) + self.txn_suffix(t)
            for t in self.txns
            if (t.scope, t.stream) == (scope, stream) and t.state == "OPEN"
            for s in t.segments
        }
        assert mine <= known | open_txns, mine - known - open_txns
        # Transactions: their state, and segments only while open.
        for t in self.txns:
            if (t.scope, t.stream) != (scope, stream):
                continue
            state = self.call("checkTransactionState", self.txn_request(t))
            assert not isinstance(state, Aborted), (t, state)
            assert pb.TxnState.State.Name(state.state) == t.state, t
            segs = {self.seg_name(scope, stream, s) + self.txn_suffix(t) for s in t.segments}
            assert (segs <= mine) if t.state == "OPEN" else not (segs & mine), (t, segs & mine)


def copy_if_there(src: str, dst: str) -> None:
    """Copy a file the store may be renaming or removing meanwhile (a spare log file):
    one that is gone is not in the crash copy, as after a real crash at that moment."""
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(src, dst)


def tile(ranges: list[tuple[float, float]]) -> None:
    """The ranges cover [0, 1) with no gap and no overlap."""
    pos = 0.0
    for lo, hi in sorted(ranges):
        assert abs(lo - pos) <= EPS and hi > lo, sorted(ranges)
        pos = hi
    assert abs(pos - 1.0) <= EPS, sorted(ranges)


ControllerMachine.TestCase.settings = model_settings(30, 25)


@pytest.mark.timeout(max(120, MODEL_EXAMPLES * 6))
class TestControllerModel(ControllerMachine.TestCase):  # type: ignore[name-defined]
    pass
