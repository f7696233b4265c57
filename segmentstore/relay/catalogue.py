"""The relay's source catalogue: which Databus sources the store has, their ids and names.

Contract: until streams exist every stream segment (not a table, not transient, not one of
the relay's own) is one Databus source whose only physical partition is that segment.
A source's id is in [1, 32767] (Databus's data source ids) and stable across restarts:
the first time the relay sees a segment it gives it the next free id and stores it in the
segment's ``RELAY_SOURCE_ID`` attribute (through the log, so it is durable); a sealed
segment cannot take attributes, so it gets an id for this process only. The source name
is the segment name with ``/`` written as ``.`` (``scope/stream/0`` -> ``scope.stream.0``);
requests may name a source by id or by either spelling. A stream listing replaces this
class later through the same methods (``sources``, ``find``).

Schemas: a source's schemas live in the table segment ``SCHEMA_TABLE``, key
``<source name>\\x00<version>``, value the schema text (``segmentstore_client.relay
.set_schema`` writes them).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from ..storage import (
    SEGMENT_TYPE_TABLE,
    SEGMENT_TYPE_TRANSIENT,
    AttributeUpdate,
    AttributeUpdateType,
    SegmentStore,
    StorageError,
)
from ..storage.api import NULL_ATTRIBUTE_VALUE

log = logging.getLogger("segmentstore.relay")

RELAY_SOURCE_ID = uuid.uuid5(uuid.NAMESPACE_URL, "segmentstore:relay:source-id")
SCHEMA_TABLE = "_relay/schemas"
MAX_SOURCE_ID = 32767


@dataclass(frozen=True, slots=True)
class Source:
    id: int
    name: str
    partitions: tuple[str, ...]  # segment names (physical partitions)


def source_name(segment: str) -> str:
    return segment.replace("/", ".")


class SourceCatalogue:
    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self._ids: dict[str, int] = {}  # segment -> source id

    def _eligible(self, name: str) -> bool:
        if name.startswith("_relay/") or name.startswith("_system/"):
            return False
        try:
            info = self.store.info(name)
        except StorageError:
            return False
        return not info.deleted and not info.segment_type & (
            SEGMENT_TYPE_TABLE | SEGMENT_TYPE_TRANSIENT
        )

    async def sources(self) -> list[Source]:
        """Every source, ordered by id (new segments get their ids here)."""
        names = sorted(n for n in self.store.segment_names() if self._eligible(n))
        for name in names:
            if name not in self._ids:
                stored = self.store.get_attribute(name, RELAY_SOURCE_ID)
                if stored != NULL_ATTRIBUTE_VALUE and 1 <= stored <= MAX_SOURCE_ID:
                    self._ids[name] = stored
        for name in names:
            if name not in self._ids:
                await self._assign(name)
        live = set(names)
        return sorted(
            (Source(i, source_name(n), (n,)) for n, i in self._ids.items() if n in live),
            key=lambda s: s.id,
        )

    async def _assign(self, name: str) -> None:
        used = set(self._ids.values())
        new_id = next((i for i in range(max(used, default=0) + 1, MAX_SOURCE_ID + 1)), None)
        if new_id is None:
            new_id = next((i for i in range(1, MAX_SOURCE_ID + 1) if i not in used), None)
        if new_id is None:
            log.warning("no Databus source id left for %r; it is not served", name)
            return
        self._ids[name] = new_id
        update = AttributeUpdate(RELAY_SOURCE_ID, AttributeUpdateType.NONE, new_id)
        try:
            await self.store.update_attributes(name, [update])
        except StorageError as e:  # sealed or deleted meanwhile: this process only
            log.info("source id %d of %r not stored (%s)", new_id, name, e)
        stored = self.store.get_attribute(name, RELAY_SOURCE_ID) if self._eligible(name) else -1
        if stored != NULL_ATTRIBUTE_VALUE and stored > 0 and stored != new_id:
            self._ids[name] = stored  # someone else set it first

    async def find(self, token: str) -> Source | None:
        """The source named by ``token``: its id, its name, or its segment name."""
        token = token.strip()
        for source in await self.sources():
            if token in (str(source.id), source.name) or token in source.partitions:
                return source
        return None
