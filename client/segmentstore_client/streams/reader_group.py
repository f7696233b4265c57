"""Reader groups: readers that share a stream's segments (Pravega reader groups, Kafka
consumer groups), with their state in a table segment.

Contract: the group's state (``group_state``) is one entry of the table
``<scope>/_tables/rg.<group>``, changed only by conditional puts (retried on a version
conflict), so no controller RPC is needed and the state survives restarts of readers and
of the server. A :class:`GroupReader` syncs with the state every ``sync_interval`` seconds
(and whenever it runs out of work): heartbeat, offsets, checkpoints, rebalancing. It reads
its segments round robin with ``read_bytes`` and yields :class:`StreamEvent` objects; the
offset of an event counts as passed when the next one is asked for, or when the reader
closes (at-least-once between checkpoints: a reader that dies is replaced from its last
synced offsets). A segment read
to its sealed end is finished; its successors are asked of the controller and become
readable once all their predecessors are finished.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..errors import NoSuchSegment, TableKeyBadVersion, TableKeyDoesNotExist
from ..protocol.events import EventParser
from . import group_state as gs
from .controller_client import segment_name, split_stream
from .stream_cut import StreamCut

if TYPE_CHECKING:
    from ..client import Client
    from ..table import Table

_KEY = "state"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event read by a group reader: its payload and where it was."""

    data: bytes
    stream: str
    segment: int
    offset: int


def _seg(stream: str, sid: int) -> str:
    return f"{stream}/{sid}"


def _unseg(key: str) -> tuple[str, int]:
    stream, _, sid = key.rpartition("/")
    return stream, int(sid)


class ReaderGroup:
    """A reader group; get one with :meth:`Client.reader_group`.

    Example::

        group = await client.reader_group("shop/billing", streams=["shop/orders"])
        async for event in group.reader("reader-1"):
            print(event.stream, event.segment, event.offset, event.data)
    """

    def __init__(
        self,
        client: Client,
        name: str,
        streams: Iterable[str],
        start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut] = "head",
        *,
        reader_timeout: float = 30.0,
        sync_interval: float = 0.5,
    ) -> None:
        self.scope, self.name = split_stream(name)
        self.streams = list(streams)
        for s in self.streams:
            split_stream(s)
        self._client = client
        self._start = _checked_start(start)
        self.reader_timeout = reader_timeout
        self.sync_interval = sync_interval
        self.table: Table = client.table(f"{self.scope}/_tables/rg.{self.name}")

    async def _start_positions(
        self, start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut]
    ) -> dict[str, int]:
        if isinstance(start, StreamCut):
            start = [start]
        if not isinstance(start, str):
            cuts = list(start)
            return {_seg(c.stream, s): o for c in cuts for s, o in c.positions.items()}
        out: dict[str, int] = {}
        for stream in self.streams:
            info = await self._client.stream_info(stream)
            cut = info.head if start == "head" else info.tail
            out.update({_seg(stream, s): o for s, o in cut.positions.items()})
        return out

    async def open(self) -> ReaderGroup:
        """Create the group's state unless it exists (an existing group keeps its state);
        NoSuchStream, and nothing made, when one of a new group's streams is missing."""
        try:
            if await self.table.get(_KEY) is not None:
                return self
        except NoSuchSegment:
            pass  # no table yet
        named = set(self.streams)
        if isinstance(self._start, StreamCut):
            named.add(self._start.stream)
        elif not isinstance(self._start, str):
            self._start = list(self._start)
            named.update(c.stream for c in self._start)
        for stream in sorted(named):
            await self._client.controller.require_stream(*split_stream(stream), "reader group")
        await self.table.create(exist_ok=True)
        if await self.table.get(_KEY) is None:
            state = gs.new_state(await self._start_positions(self._start))
            try:
                await self.table.put(_KEY, json.dumps(state), must_not_exist=True)
            except TableKeyDoesNotExist:
                pass  # another process made it first
            except TableKeyBadVersion:
                pass
        return self

    def __await__(self) -> Any:
        return self.open().__await__()

    async def update(self, fn: Callable[[gs.State], _T]) -> _T:
        """Apply ``fn`` to the state with a conditional put, retrying on conflicts."""
        for _ in range(1000):
            entry = await self.table.get(_KEY)
            if entry is None:
                raise NoSuchSegment(f"reader group {self.scope}/{self.name} has no state")
            st = json.loads(entry.value)
            result = fn(st)
            try:
                await self.table.put(_KEY, json.dumps(st), version=entry.version)
            except TableKeyBadVersion:
                continue
            return result
        raise TimeoutError(f"reader group {self.name}: state kept changing under 1000 tries")

    async def state(self) -> gs.State:
        """The group's shared state (see ``group_state``); ``{}`` if it has none (not
        opened yet, or deleted)."""
        try:
            entry = await self.table.get(_KEY)
        except NoSuchSegment:
            return {}
        return {} if entry is None else dict(json.loads(entry.value))

    def reader(self, reader_id: str, *, read_size: int = 1024 * 1024) -> GroupReader:
        """A member of the group (an async iterator of :class:`StreamEvent`)."""
        return GroupReader(self, reader_id, read_size)

    async def reader_offline(self, reader_id: str, positions: StreamCut | None = None) -> None:
        """Release ``reader_id``'s segments now (at ``positions`` or its last sync)."""
        pos = (
            None
            if positions is None
            else {_seg(positions.stream, s): o for s, o in positions.positions.items()}
        )
        await self.update(lambda st: gs.leave(st, reader_id, pos))

    async def checkpoint(self, name: str, *, timeout: float = 60.0) -> list[StreamCut]:
        """Start checkpoint ``name``; returns, once every reader passed it, one stream cut
        per stream such that every event before it was delivered. A reader that stopped
        syncing (a killed process) leaves after ``reader_timeout`` and the checkpoint
        takes its last synced offsets, even when no live reader is there to expire it."""
        await self.update(lambda st: gs.start_checkpoint(st, name))
        deadline = time.monotonic() + timeout
        while True:
            st = await self.state()
            cut = gs.checkpoint_cut(st, name)
            if cut is not None:
                return self._cuts(cut)
            await self._expire_dead(st["checkpoints"][name]["pending"], st["heartbeats"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"checkpoint {name!r}: readers did not pass it in {timeout}s")
            await asyncio.sleep(min(0.05, self.sync_interval / 4))

    async def _expire_dead(self, pending: list[str], heartbeats: dict[str, float]) -> None:
        """Make readers among ``pending`` that stopped syncing leave the group."""
        now = time.time()
        if any(now - heartbeats.get(r, 0.0) > self.reader_timeout for r in pending):
            await self.update(lambda st: gs.expire(st, now, self.reader_timeout))

    def _cuts(self, positions: dict[str, int]) -> list[StreamCut]:
        per: dict[str, dict[int, int]] = {s: {} for s in self.streams}
        for key, off in positions.items():
            stream, sid = _unseg(key)
            per.setdefault(stream, {})[sid] = off
        return [StreamCut(s, p) for s, p in per.items()]

    async def delete(self, *, missing_ok: bool = False) -> bool:
        """Delete the group's state table (its readers should be closed first); False if
        it was gone and ``missing_ok``.

        Example: ``await group.delete()``
        """
        return await self.table.delete(missing_ok=missing_ok)

    async def reset(self, start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut]) -> None:
        """Start the group again from ``start`` (e.g. a checkpoint's cuts); readers drop
        their segments at their next sync."""
        positions = await self._start_positions(_checked_start(start))
        await self.update(lambda st: gs.reset(st, positions))


def _checked_start(
    start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut],
) -> Literal["head", "tail"] | StreamCut | Iterable[StreamCut]:
    """``start`` as given, unless it is a string other than "head" or "tail": any other
    string (Kafka's "earliest", say) used to mean the tail, so the group skipped every
    event already written."""
    if isinstance(start, str) and start not in ("head", "tail"):
        raise ValueError(f"start must be 'head', 'tail' or stream cuts, not {start!r}")
    return start


class GroupReader:
    """One reader of a group; iterate it (``async for``) and ``close`` it when done."""

    def __init__(self, group: ReaderGroup, reader_id: str, read_size: int) -> None:
        self.group = group
        self.reader_id = reader_id
        self._read_size = read_size
        self._client = group._client
        self._owned: dict[str, int] = {}
        self._lengths: dict[str, int] = {}
        self._generation = -1
        self._closed = False
        self._next_sync = 0.0
        self._handed: tuple[str, int] | None = None

    def _pass_handed(self) -> None:
        if self._handed is not None:
            key, offset = self._handed
            if key in self._owned:
                self._owned[key] = offset
            self._handed = None

    async def join(self) -> GroupReader:
        """Register in the group now (iterating does it too), so that the segments are
        shared with this reader from the others' next sync.

        Example::

            readers = [await group.reader(f"r{i}").join() for i in range(4)]
        """
        await self.group.open()
        now = time.time()
        await self.group.update(lambda st: gs.join(st, self.reader_id, now))
        return self

    async def _sync(self) -> None:
        now = time.time()
        gen_box: list[int] = []

        def apply(st: gs.State) -> dict[str, int]:
            gen_box.append(st["generation"])
            if st["generation"] != self._generation:
                st["assigned"].setdefault(self.reader_id, {})
                positions: dict[str, int] = {}
            else:
                positions = self._owned
            return gs.sync(st, self.reader_id, now, positions, self.group.reader_timeout)

        owned = await self.group.update(apply)
        if gen_box[-1] != self._generation:
            self._generation = gen_box[-1]
        self._owned = owned
        self._next_sync = time.monotonic() + self.group.sync_interval

    async def _finish(self, key: str) -> None:
        stream, sid = _unseg(key)
        scope, name = split_stream(stream)
        succ = await self._client.controller.successors(scope, name, sid)
        successors = {
            _seg(stream, s.range.segment): [_seg(stream, p) for p in s.predecessors] for s in succ
        }
        await self.group.update(lambda st: gs.finish(st, self.reader_id, key, successors))
        self._owned.pop(key, None)

    async def _readable(self, key: str, offset: int) -> bool | None:
        """True: data at ``offset``; False: none yet; None: the segment is finished."""
        length = self._lengths.get(key, -1)
        if offset < length:
            return True
        stream, sid = _unseg(key)
        scope, name = split_stream(stream)
        try:
            info = await self._client.segment_info(segment_name(scope, name, sid))
        except NoSuchSegment:
            return None
        self._lengths[key] = info.length
        if offset < info.length:
            return True
        return None if info.sealed else False

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self.events()

    async def events(self, *, idle_timeout: float | None = None) -> AsyncIterator[StreamEvent]:
        """The group's events for this reader; ends after ``close`` (or after
        ``idle_timeout`` seconds without an event, when given)."""
        async for batch in self.batches(idle_timeout=idle_timeout):
            for event in batch:
                self._hand(event)
                yield event
                self._pass_handed()  # passed: the next one was asked for
                if self._closed:
                    return

    def _hand(self, event: StreamEvent) -> None:
        """Note ``event`` as handed to the application: it counts as passed (for
        checkpoints and offsets) when the next one is asked for or the reader closes."""
        self._handed = (_seg(event.stream, event.segment), event.offset + 8 + len(event.data))

    async def batches(
        self, *, idle_timeout: float | None = None
    ) -> AsyncIterator[list[StreamEvent]]:
        """The group's events for this reader, one read's worth at a time (what the
        blocking twin pulls per thread crossing); asking for the next batch passes every
        event of the previous one.

        Example::

            async for batch in reader.batches(idle_timeout=2):
                handle_all(batch)
        """
        await self.group.open()
        await self._sync()
        idle_since = time.monotonic()
        while not self._closed:
            if time.monotonic() >= self._next_sync:
                await self._sync()
            got = False
            for key in list(self._owned):
                offset = self._owned.get(key)
                if offset is None or time.monotonic() >= self._next_sync:
                    continue
                state = await self._readable(key, offset)
                if state is None:
                    await self._finish(key)
                    self._next_sync = 0.0  # take successors or others' share now
                    continue
                if not state:
                    continue
                stream, sid = _unseg(key)
                scope, name = split_stream(stream)
                chunk = await self._client.read_bytes(
                    segment_name(scope, name, sid), offset, self._read_size
                )
                parser = EventParser(offset)
                batch = [
                    StreamEvent(bytes(payload), stream, sid, ev_offset)
                    for ev_offset, payload in parser.feed(chunk.data)
                ]
                if batch:
                    got = True
                    self._hand(batch[-1])  # events() notes each one as it goes
                    yield batch
                    self._pass_handed()
                    if self._closed:
                        return
            if got:
                idle_since = time.monotonic()
            elif idle_timeout is not None and time.monotonic() - idle_since > idle_timeout:
                return
            elif not got:
                await asyncio.sleep(0.01 if self._owned else self.group.sync_interval / 4)
                self._next_sync = min(self._next_sync, time.monotonic() + 0.05)

    async def close(self) -> None:
        """Leave the group at the offsets passed so far: the segments go to the others."""
        if self._closed:
            return
        self._closed = True
        self._pass_handed()  # closing deliberately: the last event handed out was taken
        owned = dict(self._owned)
        await self.group.update(lambda st: gs.leave(st, self.reader_id, owned))
