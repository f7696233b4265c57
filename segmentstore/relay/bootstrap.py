"""Bootstrap snapshots from a compacted table: the latest event of every key of a source.

Contract. For each source the relay keeps the table segment ``_relay/bootstrap/<source
id>``: row key = the event key (``i`` + the long key as 8 bytes offset by 2**63, so rows
sort in numeric order, or ``s`` + the string key; an event made from a non-Databus record
is keyed by its partition and SCN, see ``_rows``), row value = the window SCN (8 bytes),
the partition's checkpoint key (1 byte length + text) and the event's Databus v2 bytes as
``/stream`` serves them; the row ``\\x00applied`` holds, as JSON, the position of every
partition the table reflects (``{"<checkpoint key>": [windowScn, windowOffset]}``). Rows
and that position are written in one table batch, so after a crash the table is exactly
the log up to its stored position (durable under the server's fsync mode), and the
table store compacts superseded rows away by itself.

``apply(source)`` brings the table up to the source's committed tail, partition by
partition in (epoch, number) order, so a key's row ends up holding its newest event; it
runs when ``/startSCN`` asks (one apply at a time per source) and returns the position.
That position is the snapshot's start: ``snapshot`` serves, in key order and from a
continuation token, the rows at or below it (a row that an apply after the start moved
past it is left to the catch-up phase, which replays the log from the start position),
so snapshot + catch-up give each key's latest state with no gap, and an event counted in
the snapshot is never served again by catch-up. DELETE events remove nothing from the
table (rows are only written) but are not served by the snapshot.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from segmentstore_client.formats import databus

from ..storage import SegmentNotFound
from ..tables import NO_VERSION
from ..tables.records import MAX_KEY_LENGTH
from .catalogue import Source
from .checkpoint import Checkpoint
from .filters import KeyTest
from .partition import Partition, TooOld

if TYPE_CHECKING:
    from .service import RelayService

log = logging.getLogger("segmentstore.relay")

TABLE_PREFIX: Final = "_relay/bootstrap/"
APPLIED: Final = b"\x00applied"
APPLY_BUDGET: Final = 256 * 1024
MAX_ROW: Final = 1_000_000  # below the table store's value limit
NO_LIMIT: Final = 2**63 - 1
_TOKEN: Final = b"\x01"  # the table store's continuation token: version byte + last key
_SCN: Final = struct.Struct(">q")
_PAGE: Final = 500

Positions = dict[str, tuple[int, int]]


def table_name(source: Source) -> str:
    return f"{TABLE_PREFIX}{source.id}"


def row_key(key: int | bytes) -> bytes:
    if isinstance(key, int):
        return b"i" + (key + 2**63).to_bytes(8, "big")
    return b"s" + key


@dataclass(slots=True)
class Snapshot:
    chunks: list[bytes | memoryview] = field(default_factory=list)
    nbytes: int = 0
    events: int = 0
    filtered: int = 0
    token: bytes = b""
    done: bool = False


class BootstrapTables:
    def __init__(self, service: RelayService) -> None:
        self.service = service
        self.tables = service.ctx.tables
        self._locks: dict[int, asyncio.Lock] = {}
        self.applied_events = 0  # rows written since start (for /relayStats)

    async def applied(self, source: Source) -> Positions:
        """The positions the source's table reflects ({} when it has none yet)."""
        try:
            (found,) = await self.tables.get(table_name(source), [APPLIED])
        except SegmentNotFound:
            return {}
        if found is None:
            return {}
        raw = json.loads(found[1])
        return {k: (int(v[0]), int(v[1])) for k, v in raw.items()}

    async def apply(self, source: Source) -> Positions:
        """Write every committed event of the source not yet in its table; the new
        positions."""
        lock = self._locks.setdefault(source.id, asyncio.Lock())
        async with lock:
            name = table_name(source)
            try:
                await self.tables.info(name)
            except SegmentNotFound:
                await self.tables.create(name)
            cp = Checkpoint(partitions=await self.applied(source))
            parts = await self.service.refreshed(source)
            for i, part in enumerate(parts):
                key = source.key(i)
                for _ in range(1_000_000):  # bounded; each turn moves or stops
                    try:
                        start = part.start_of(*cp.position(key))
                    except TooOld:  # retention went past the table: go on from what is kept
                        log.warning("relay: bootstrap table of %s missed truncated data", name)
                        start = part.start_of(-1, -1)
                    served = await part.serve(start, APPLY_BUDGET, NO_LIMIT, None, False, True)
                    if served.position is None:
                        break
                    rows = _rows(served.chunks, served.position[0], key, part)
                    cp.advance(key, *served.position)
                    entries = [(k, v, NO_VERSION) for k, v in rows.items()]
                    state = json.dumps({k: list(v) for k, v in cp.partitions.items()})
                    entries.append((APPLIED, state.encode(), NO_VERSION))
                    await self.tables.update(name, entries)
                    self.applied_events += len(rows)
            out = {source.key(i): (-1, -1) for i in range(len(parts))}  # empty: from the start
            out.update(cp.partitions)
            return out

    async def snapshot(
        self,
        source: Source,
        start: Positions,
        token: bytes,
        budget: int,
        test: KeyTest | None,
        as_json: bool,
    ) -> Snapshot:
        """Rows at or below ``start``, in key order from ``token``, up to ``budget`` bytes
        (at least one row); ``done`` once the table has no more."""
        out = Snapshot(token=token)
        name = table_name(source)
        for _ in range(1_000_000):  # bounded: one page a turn
            try:
                page, _next = await self.tables.read_entries(name, _PAGE, out.token)
            except SegmentNotFound:
                page = []
            if not page:
                out.done = True
                break
            for key, value, _version in page:
                if key != APPLIED:
                    chunk, sent = _snapshot_row(value, start, test, as_json)
                    if chunk and out.events and out.nbytes + len(chunk) > budget:
                        return out
                    if chunk:
                        out.chunks.append(chunk)
                        out.nbytes += len(chunk)
                        out.events += 1
                    elif sent:
                        out.filtered += 1
                out.token = _TOKEN + key
            if out.nbytes >= budget:
                break
        return out


def _rows(
    chunks: list[bytes | memoryview], last_scn: int, pkey: str, part: Partition
) -> dict[bytes, bytes]:
    """Row key -> row value of the data events of served chunks (one event each); a
    window's SCN is its end marker's sequence (``last_scn`` for a window served in part).
    An event the relay made from a non-Databus record has no key of its own (its key is
    its SCN, unique in its partition only): its row key is ``r`` + partition + SCN."""
    rows: dict[bytes, bytes] = {}
    pending: list[tuple[bytes, bytes]] = []
    tag = bytes((len(pkey),)) + pkey.encode()

    def close(scn: int) -> None:
        i = bisect.bisect_left(part.scns, scn)
        derived = i < len(part.scns) and part.scns[i] == scn and part.kinds[i] == 0
        for key, data in pending:
            if derived:
                key = b"r" + tag + _SCN.pack(scn)
            if len(key) > MAX_KEY_LENGTH:
                log.warning("relay: a %d-byte key is not kept in a bootstrap table", len(key))
            elif len(data) <= MAX_ROW:
                rows.pop(key, None)  # the newest write of a key goes last
                rows[key] = _SCN.pack(scn) + tag + data
            else:
                log.warning("relay: a %d-byte event is not kept in a bootstrap table", len(data))
        pending.clear()

    for chunk in chunks:
        event = databus.decode(chunk)
        if event.end_of_period:
            close(event.sequence)
        elif event.src_id >= 0:
            pending.append((row_key(event.key), bytes(chunk)))
    close(last_scn)
    return rows


def _snapshot_row(
    value: bytes, start: Positions, test: KeyTest | None, as_json: bool
) -> tuple[bytes, bool]:
    """(output bytes, False) for a row to serve; (b"", True) filtered out; (b"", False)
    not part of the snapshot (past its start, or a DELETE)."""
    (scn,) = _SCN.unpack_from(value, 0)
    n = value[8]
    pkey = value[9 : 9 + n].decode()
    at = start.get(pkey)
    if at is None or scn > at[0]:
        return b"", False  # catch-up serves it
    data = memoryview(value)[9 + n :]
    event = databus.decode(data)
    if event.opcode == "DELETE":
        return b"", False
    if test is not None and not test(event.key):
        return b"", True
    return (databus.json_line(event) if as_json else bytes(data)), False
