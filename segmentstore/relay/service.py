"""The relay's engine: sources, their partitions, the state of each source, and answering
a stream request (``/stream`` and ``/bootstrap``) with no HTTP in it.

Contract: ``stream`` serves whole windows after the checkpoint's position of each source,
up to ``size`` output bytes, in the sources' id order starting at a rotating one (so a
busy source cannot starve the others of a shared budget); at the tail it waits (a long
poll, at most ``hold`` seconds) for a window to close in any requested source and answers
``no_events`` only when the hold ran out. A source too far behind (truncated data)
answers ``too_old`` for the whole request, before any byte is sent.

Source states (``/controlSources``): ``running``; ``paused``: the relay stops serving the
source (its requests wait as at the tail, then answer no-events) while appends go on
being stored, so unpausing loses nothing; ``shutdown``: the source is not served at all
(its requests answer 404) until ``start``. We chose "stop serving" over holding appends:
holding them would need a hook in the wire server's append path and would turn a relay
switch into a write outage.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..controller.metadata import METADATA_TABLE
from ..storage import SegmentNotFound, StorageError
from .bootstrap import BootstrapTables
from .catalogue import Source, SourceCatalogue
from .checkpoint import Checkpoint
from .filters import KeyTest
from .partition import Partition, TooOld
from .stats import RelayStats
from .truncation import check, end_of, gone_ok, settle

if TYPE_CHECKING:
    from ..server.context import ServerContext

STATES = ("running", "paused", "shutdown")
NO_LIMIT = 2**63 - 1


@dataclass(slots=True)
class StreamAnswer:
    checkpoint: Checkpoint
    chunks: list[bytes | memoryview] = field(default_factory=list)
    nbytes: int = 0
    events: int = 0
    filtered: int = 0
    windows: int = 0
    no_events: bool = False
    too_old: str | None = None
    done: bool = False  # bootstrap: every source reached its upper SCN
    by_source: dict[int, list[int]] = field(default_factory=dict)  # [events, bytes, filtered]


class RelayService:
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.catalogue = SourceCatalogue(ctx.store, ctx.tables)
        self.partitions: dict[str, Partition] = {}
        self.state: dict[int, str] = {}
        self.stats = RelayStats()
        self.default_hold = min(ctx.tail_read_timeout, 10.0)
        self._rotation = 0
        self.state_changed = asyncio.Event()
        self.bootstrap = BootstrapTables(self)

    def state_of(self, source: Source) -> str:
        return self.state.get(source.id, "running")

    def set_state(self, source: Source, state: str) -> None:
        if state not in STATES:
            raise ValueError(f"a source state is one of {STATES}, not {state!r}")
        self.state[source.id] = state
        self.state_changed.set()
        self.state_changed = asyncio.Event()

    def partition(self, source: Source, i: int) -> Partition:
        segment = source.partitions[i]
        part = self.partitions.get(segment)
        if part is None or part.src_id != source.id:
            number = source.numbers[i] if source.numbers else 0
            part = self.partitions[segment] = Partition(self.store, segment, source.id, number)
        return part

    async def refreshed(self, source: Source) -> list[Partition]:
        """The source's partitions (in its order) with everything committed indexed."""
        parts = [self.partition(source, i) for i in range(len(source.partitions))]
        for part in parts:
            try:
                await part.catch_up()
            except SegmentNotFound:  # deleted meanwhile: serve nothing more, forget it
                self.partitions.pop(part.segment, None)
            except StorageError:  # e.g. truncated under the read: serve what we have
                pass
        return parts

    async def current(self, sources: list[Source]) -> list[Source]:
        """The requested sources as the catalogue has them now: a stream source gains
        segments when its stream scales."""
        if not any(s.stream for s in sources):
            return sources
        now = {s.id: s for s in await self.catalogue.sources()}
        return [now.get(s.id, s) for s in sources]

    async def stream(
        self,
        sources: list[Source],
        checkpoint: Checkpoint,
        size: int,
        tests: dict[int, KeyTest],
        as_json: bool,
        hold: float,
        from_latest: bool = False,
        upper: dict[str, int] | None = None,
    ) -> StreamAnswer:
        """``upper``: per partition key, the highest SCN to serve (a bootstrap phase)."""
        answer = StreamAnswer(checkpoint)
        deadline = time.monotonic() + hold
        self._rotation += 1
        latest_set = False
        while True:
            sources = await self.current(sources)
            serving = [s for s in sources if self.state_of(s) == "running"]
            every: list[tuple[Source, str, Partition]] = []
            for source in serving:
                for i, part in enumerate(await self.refreshed(source)):
                    every.append((source, source.key(i), part))
            for source in serving:
                if source.stream:
                    too_old = check(source, _of(source, every), checkpoint)
                    if too_old is not None:
                        answer.too_old = too_old
                        return answer
            if from_latest and not latest_set:
                for _source, key, part in every:
                    checkpoint.advance(key, part.max_scn, -1, part.closed_end)
                latest_set = True
            try:
                starts = {key: part.start_of(*checkpoint.position(key)) for _s, key, part in every}
            except TooOld as e:
                answer.too_old = str(e)
                return answer
            parts = _ready(serving, every, starts)
            if parts:
                turn = self._rotation % len(parts)
                order = list(range(turn, len(parts))) + list(range(turn))
            else:
                order = []
            moved = False
            for k in order:
                source, key, part = parts[k]
                limit = NO_LIMIT if upper is None else upper.get(key, -1)
                served = await part.serve(
                    starts[key],
                    size - answer.nbytes,
                    limit,
                    tests.get(source.id),
                    as_json,
                    must_send=answer.nbytes == 0,
                )
                if served.position is not None:
                    checkpoint.advance(key, *served.position, end_of(part, *served.position))
                    moved = True
                answer.chunks.extend(served.chunks)
                answer.nbytes += served.nbytes
                answer.events += served.events
                answer.filtered += served.filtered
                answer.windows += served.windows
                if served.nbytes or served.filtered:
                    mine = answer.by_source.setdefault(source.id, [0, 0, 0])
                    mine[0] += served.events
                    mine[1] += served.nbytes
                    mine[2] += served.filtered
                if answer.nbytes >= size:
                    break
            for source in serving:
                if source.stream:
                    settle(source, checkpoint)
            if upper is not None:
                answer.done = all(
                    _reached(part, checkpoint, key, upper.get(key, -1)) for _s, key, part in every
                )
                return answer
            if moved:
                return answer
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                answer.no_events = True
                return answer
            streams = any(s.stream for s in serving)
            await self._wait([p for _s, _k, p in parts], remaining, streams)

    async def _wait(self, parts: list[Partition], timeout: float, streams: bool) -> None:
        """Until a partition being served gets data, a source changes state, the streams'
        metadata changes (``streams``: a scale adds segments), or timeout."""
        store = self.store
        waits: list[asyncio.Future[object]] = [
            asyncio.ensure_future(store.wait_for_data(p.segment, p.scan_offset, timeout))
            for p in parts
            if not p.broken and not p.complete
        ]
        if streams and self.catalogue.metadata_length >= 0:
            md = store.wait_for_data(METADATA_TABLE, self.catalogue.metadata_length, timeout)
            waits.append(asyncio.ensure_future(md))
        waits.append(asyncio.ensure_future(self.state_changed.wait()))
        try:
            done, _ = await asyncio.wait(
                waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if done and all(not w.cancelled() and w.exception() for w in done):
                await asyncio.sleep(min(timeout, 0.2))  # a segment vanished: do not spin
        finally:
            # the others are cancelled, not awaited: the answer goes out on this loop
            # turn; each finishes on its own and its outcome is read (no log noise)
            for w in waits:
                if not w.done():
                    w.cancel()
                    w.add_done_callback(_quiet)
                elif not w.cancelled():
                    w.exception()


def _quiet(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()


def _of(source: Source, every: list[tuple[Source, str, Partition]]) -> list[tuple[str, Partition]]:
    return [(key, part) for s, key, part in every if s is source]


def _ready(
    sources: list[Source],
    every: list[tuple[Source, str, Partition]],
    starts: dict[str, tuple[int, int]],
) -> list[tuple[Source, str, Partition]]:
    """The partitions that may be served now: all of a segment source's; of a stream
    source's, those whose predecessors are sealed and consumed to their end (or truncated
    away, ``truncation.check`` having passed), so a key's events in a successor never come
    before its events in a predecessor. A predecessor missing for another reason (its
    deletion seen before the stream's new cut) is waited for."""
    finished: dict[str, bool] = {}
    for _source, key, part in every:
        finished[part.segment] = part.complete and starts[key][0] >= len(part.scns)
    out = []
    gone: dict[int, set[str]] = {}
    for source, key, part in every:
        if source.stream:
            i = source.partitions.index(part.segment)
            if source.id not in gone:
                gone[source.id] = gone_ok(source)
            if not all(finished.get(p, p in gone[source.id]) for p in source.preds[i]):
                continue
        out.append((source, key, part))
    return out


def _reached(part: Partition, checkpoint: Checkpoint, key: str, upper: int) -> bool:
    """Whether the partition's next window lies above ``upper`` (or there is none)."""
    i, _skip = part.start_of(*checkpoint.position(key))
    return i >= len(part.scns) or part.scns[i] > upper
