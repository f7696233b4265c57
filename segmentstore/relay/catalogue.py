"""The relay's source catalogue: which Databus sources the store has, their ids and names.

Contract. Two kinds of source:

* Streams (when the controller keeps metadata, ``--controller-port`` >= 0): every stream
  is one source named ``scope.stream``; its physical partitions are all its segments that
  exist, of every epoch, in (epoch, number) order, each with its checkpoint key
  ``<source id>:<segment number>`` and its predecessors (the segments of the previous
  epoch it replaced whose key ranges overlap its own). The relay reads the controller's
  metadata table read-only and re-reads it only when that table grew.
* Every other stream segment (not a table, not transient, not the relay's or the system's,
  not a segment or transaction segment of a stream) is a source of its own whose only
  physical partition is that segment (checkpoint key ``<source id>``).

A source id is in [1, 32767] (Databus's data source ids) and stable across restarts: a
segment source keeps it in the segment's ``RELAY_SOURCE_ID`` attribute (through the log,
so it is durable; a sealed segment cannot take attributes, so it gets an id for this
process only), a stream source in the relay's table ``STREAM_ID_TABLE`` (key
``scope/stream``). Every stored id is loaded before a new one is given, so the two kinds
never share an id. Segment source names are the segment name with ``/`` written as ``.``
(``scope/stream/0`` -> ``scope.stream.0``); requests may name a source by id, by name or
by one of its segment names.

Schemas: a source's schemas live in the table segment ``SCHEMA_TABLE``, key
``<source name>\\x00<version>``, value the schema text (``segmentstore_client.relay
.set_schema`` writes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field

from ..controller.metadata import METADATA_TABLE
from ..controller.model import StreamRecord, epoch_of, number_of, overlaps
from ..storage import (
    SEGMENT_TYPE_TABLE,
    SEGMENT_TYPE_TRANSIENT,
    AttributeUpdate,
    AttributeUpdateType,
    SegmentNotFound,
    SegmentStore,
    StorageError,
)
from ..storage.api import NULL_ATTRIBUTE_VALUE
from ..tables import NO_VERSION, TableStore

log = logging.getLogger("segmentstore.relay")

RELAY_SOURCE_ID = uuid.uuid5(uuid.NAMESPACE_URL, "segmentstore:relay:source-id")
SCHEMA_TABLE = "_relay/schemas"
STREAM_ID_TABLE = "_relay/stream-source-ids"
MAX_SOURCE_ID = 32767
_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Source:
    id: int
    name: str
    partitions: tuple[str, ...]  # segment names (physical partitions)
    stream: str = ""  # "scope/stream" for a stream source
    keys: tuple[str, ...] = ()  # stream source: each partition's checkpoint key
    preds: tuple[tuple[str, ...], ...] = ()  # stream source: each partition's predecessors
    numbers: tuple[int, ...] = ()  # stream source: each partition's segment number
    # stream source: its truncation cut now (segment number, offset; empty: never
    # truncated) and the numbers of its segments that cut deleted
    head: tuple[tuple[int, int], ...] = ()
    gone: tuple[int, ...] = ()
    record: StreamRecord | None = field(default=None, compare=False, repr=False)

    def key(self, i: int) -> str:
        """The checkpoint key of partition ``i``."""
        return self.keys[i] if self.keys else str(self.id)


def source_name(segment: str) -> str:
    return segment.replace("/", ".")


class SourceCatalogue:
    def __init__(self, store: SegmentStore, tables: TableStore | None = None) -> None:
        self.store = store
        self.tables = tables
        self._ids: dict[str, int] = {}  # segment -> source id
        self._kinds: dict[str, bool] = {}  # segment -> of a kind that is a source
        self._segment_sources: dict[str, Source] = {}  # segment -> its Source
        self._stream_ids: dict[str, int] = {}  # "scope/stream" -> source id
        self._streams: dict[str, StreamRecord] = {}
        self._md_length = -1
        self._stream_ids_loaded = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ streams

    @property
    def metadata_length(self) -> int:
        """The controller metadata table's length when last read (-1: no controller)."""
        return self._md_length

    async def _load_streams(self) -> dict[str, StreamRecord]:
        """The controller's stream records, re-read when its table grew."""
        if self.tables is None:
            return {}
        try:
            info = self.store.info(METADATA_TABLE)
        except StorageError:
            return {}
        if info.length == self._md_length:
            return self._streams
        streams: dict[str, StreamRecord] = {}
        token = b""
        try:
            for _ in range(1_000_000):  # bounded: one page per turn
                page, token = await self.tables.read_entries(METADATA_TABLE, _PAGE, token)
                if not page:
                    break
                for key, value, _version in page:
                    kind, _, name = key.decode("utf-8", "replace").partition("|")
                    if kind == "stream":
                        try:
                            streams[name] = StreamRecord.from_json(value)
                        except (ValueError, KeyError, TypeError) as e:
                            log.warning("relay: stream record %r not understood: %s", name, e)
        except StorageError as e:
            log.info("relay: controller metadata not readable now: %s", e)
            return self._streams
        self._streams, self._md_length = streams, info.length
        return streams

    async def _load_stream_ids(self) -> None:
        if self._stream_ids_loaded or self.tables is None:
            return
        token = b""
        try:
            for _ in range(1_000_000):
                page, token = await self.tables.read_entries(STREAM_ID_TABLE, _PAGE, token)
                if not page:
                    break
                for key, value, _version in page:
                    if value.isdigit() and 1 <= int(value) <= MAX_SOURCE_ID:
                        self._stream_ids[key.decode()] = int(value)
        except StorageError:
            pass  # no stream has an id yet
        self._stream_ids_loaded = True

    async def _store_stream_id(self, stream: str, new_id: int) -> None:
        assert self.tables is not None
        entry = [(stream.encode(), str(new_id).encode(), NO_VERSION)]
        try:
            try:
                await self.tables.update(STREAM_ID_TABLE, entry)
            except SegmentNotFound:
                with contextlib.suppress(StorageError):  # made meanwhile
                    await self.tables.create(STREAM_ID_TABLE)
                await self.tables.update(STREAM_ID_TABLE, entry)
        except StorageError as e:
            log.warning("relay: source id %d of stream %r not stored (%s)", new_id, stream, e)

    def _stream_source(self, src_id: int, rec: StreamRecord) -> Source:
        order = sorted(rec.segments, key=lambda s: (epoch_of(s), number_of(s)))
        names, keys, preds, numbers, gone = [], [], [], [], []
        head = _head(rec)
        for sid in order:
            name = rec.seg_name(sid)
            try:
                missing = self.store.info(name).deleted
            except StorageError:
                missing = True
            if missing:  # truncated away (gone), or not made yet
                if head and rec.before_cut(sid, head):
                    gone.append(number_of(sid))
                continue
            names.append(name)
            keys.append(f"{src_id}:{number_of(sid)}")
            numbers.append(number_of(sid))
            preds.append(tuple(rec.seg_name(p) for p in _predecessors(rec, sid)))
        return Source(
            src_id,
            source_name(rec.key),
            tuple(names),
            rec.key,
            tuple(keys),
            tuple(preds),
            tuple(numbers),
            tuple(sorted((number_of(sid), off) for sid, off in head.items())),
            tuple(gone),
            rec,
        )

    # ------------------------------------------------------------------ segments

    def _kind_ok(self, name: str) -> bool:
        """Whether a segment is of a kind that is a source (cached: a segment's type and
        name do not change while it exists)."""
        ok = self._kinds.get(name)
        if ok is None:
            if name.startswith(("_relay/", "_system/")):
                ok = False
            else:
                try:
                    info = self.store.info(name)
                except StorageError:
                    return False  # gone meanwhile: not cached
                ok = not info.deleted and not info.segment_type & (
                    SEGMENT_TYPE_TABLE | SEGMENT_TYPE_TRANSIENT
                )
            self._kinds[name] = ok
        return ok

    def _eligible(self, name: str, stream_keys: set[str]) -> bool:
        if stream_keys:
            scope, _, rest = name.partition("/")
            if f"{scope}/{rest.partition('/')[0]}" in stream_keys:
                return False  # a stream's segment (or transaction segment): the stream's
        return self._kind_ok(name)

    async def sources(self) -> list[Source]:
        """Every source, ordered by id (new segments and streams get their ids here).
        Costs one pass over the segment names; only segments not seen before are looked
        at further, and their new ids are stored in one batch."""
        async with self._lock:
            streams = await self._load_streams()
            if streams:
                await self._load_stream_ids()
            every = self.store.segment_names()
            if len(self._kinds) > 2 * len(every) + 1000:  # forget deleted segments
                live_all = set(every)
                self._kinds = {n: k for n, k in self._kinds.items() if n in live_all}
            keys = set(streams)
            names = [n for n in every if self._eligible(n, keys)]
            new = [n for n in names if n not in self._ids]
            for name in new:
                stored = self.store.get_attribute(name, RELAY_SOURCE_ID)
                if stored != NULL_ATTRIBUTE_VALUE and 1 <= stored <= MAX_SOURCE_ID:
                    self._ids[name] = stored
            missing = sorted(n for n in new if n not in self._ids)
            if missing:
                await self._assign(missing)
            for key in sorted(streams):
                if key not in self._stream_ids:
                    new_id = self._free_id()
                    if new_id is None:
                        log.warning("no Databus source id left for stream %r", key)
                        continue
                    self._stream_ids[key] = new_id
                    await self._store_stream_id(key, new_id)
        out = []
        for n in names:
            src_id = self._ids.get(n)
            if src_id is None:
                continue
            source = self._segment_sources.get(n)
            if source is None or source.id != src_id:
                source = self._segment_sources[n] = Source(src_id, source_name(n), (n,))
            out.append(source)
        if len(self._segment_sources) > 2 * len(out) + 1000:
            self._segment_sources = {s.partitions[0]: s for s in out}
        out += [
            self._stream_source(self._stream_ids[k], r)
            for k, r in streams.items()
            if k in self._stream_ids
        ]
        return sorted(out, key=lambda s: s.id)

    def _free_id(self) -> int | None:
        used = set(self._ids.values()) | set(self._stream_ids.values())
        return _next_free(used, max(used, default=0))

    async def _assign(self, names: list[str]) -> None:
        """Give each segment the next free id and store them all at once (one group
        commit, in chunks)."""
        used = set(self._ids.values()) | set(self._stream_ids.values())
        last = max(used, default=0)
        given: list[tuple[str, int]] = []
        for name in names:
            new_id = _next_free(used, last)
            if new_id is None:
                log.warning("no Databus source id left for %r; it is not served", name)
                break
            used.add(new_id)
            last = new_id
            self._ids[name] = new_id
            given.append((name, new_id))
        for i in range(0, len(given), 500):
            chunk = given[i : i + 500]
            await asyncio.gather(*(self._store_id(name, new_id) for name, new_id in chunk))

    async def _store_id(self, name: str, new_id: int) -> None:
        update = AttributeUpdate(RELAY_SOURCE_ID, AttributeUpdateType.NONE, new_id)
        try:
            await self.store.update_attributes(name, [update])
        except StorageError as e:  # sealed or deleted meanwhile: this process only
            log.info("source id %d of %r not stored (%s)", new_id, name, e)
        try:
            stored = self.store.get_attribute(name, RELAY_SOURCE_ID)
        except StorageError:
            stored = NULL_ATTRIBUTE_VALUE
        if stored != NULL_ATTRIBUTE_VALUE and stored > 0 and stored != new_id:
            self._ids[name] = stored  # someone else set it first

    async def find(self, token: str) -> Source | None:
        """The source named by ``token``: its id, its name, or one of its segment names."""
        token = token.strip()
        for source in await self.sources():
            if token in (str(source.id), source.name) or token in source.partitions:
                return source
        return None


def _next_free(used: set[int], last: int) -> int | None:
    """The first id above ``last`` not in ``used``, else the lowest free one."""
    for i in range(last + 1, MAX_SOURCE_ID + 1):
        if i not in used:
            return i
    return next((i for i in range(1, MAX_SOURCE_ID + 1) if i not in used), None)


def _head(rec: StreamRecord) -> dict[int, int]:
    """The stream's truncation cut (segment id -> offset; empty: never truncated), the one
    being applied if a truncation is under way (its deletes come before its record)."""
    pending = rec.pending or {}
    if pending.get("op") == "truncate":
        try:
            return {int(s): int(o) for s, o in pending["cut"]}
        except (KeyError, TypeError, ValueError):
            pass
    return dict(rec.head) if rec.head else {}


def _predecessors(rec: StreamRecord, sid: int) -> list[int]:
    """The segments ``sid`` replaced: of the epoch before the one that made it, those not
    kept by that epoch whose key ranges overlap its own."""
    made = epoch_of(sid)
    if made == 0 or made >= len(rec.epochs):
        return []
    epoch, previous = rec.epochs[made], rec.epochs[made - 1]
    seg = rec.segments[sid]
    return [
        p
        for p in previous.segments
        if p not in epoch.segments and overlaps(rec.segments[p].key_range, seg.key_range)
    ]
