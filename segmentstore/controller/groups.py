"""Reader groups and key-value tables as Pravega's controller keeps them.

Contract (the status strings are the names of Pravega's enum values):

* A reader group ``S/G`` is a record ``{scope, name, id, generation, config}`` (``config``:
  the client's serialized ``ReaderGroupConfiguration``, kept as sent, base64) plus, as in
  Pravega, the internal stream ``S/_RG<G>`` of one segment that the Java client's state
  synchronizer writes. ``create`` is idempotent: a group that exists answers SUCCESS with
  its stored configuration. ``update`` must name the current ``generation``
  (INVALID_CONFIG otherwise) and bumps it. ``delete`` with a ``readerGroupId`` that is
  not the group's answers RG_NOT_FOUND (another incarnation of the name).
* A key-value table ``S/T`` with ``partitionCount`` P is P table segments named as
  Pravega names them, ``S/T_kvtable/<n>.#epoch.0``, each owning an equal range of the key
  space; the record ``{scope, name, partitions, created_ms}`` follows them.
* Order of durable steps, so a crash leaves nothing a retry cannot finish: create makes
  the segments (or stream) first and writes the record last; delete removes the segments
  first and the record last. Every store step is idempotent.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import uuid
from typing import Any

from ..storage import SegmentExists, SegmentNotFound
from ..tables import TableStore
from .model import StreamConfig, valid_name
from .streams import LIST_PAGE, MAX_SEGMENTS, BadRequest, Streams, now_ms

log = logging.getLogger("segmentstore.controller")

RG_STREAM_PREFIX = "_RG"  # Pravega's internal stream of a reader group's state
# A group's record (its configuration in base64, beside its id) is one metadata value
# (under 1 MB): a larger configuration is refused before anything is made.
MAX_GROUP_CONFIG = 384 * 1024


def check_config_size(config: bytes) -> None:
    if len(config) > MAX_GROUP_CONFIG:
        raise BadRequest(
            f"a reader group configuration of {len(config)} bytes is over the limit of "
            f"{MAX_GROUP_CONFIG}"
        )


def kvt_segment(scope: str, table: str, number: int) -> str:
    return f"{scope}/{table}_kvtable/{number}.#epoch.0"


class Groups:
    def __init__(self, streams: Streams, tables: TableStore) -> None:
        self.streams = streams
        self.md = streams.md
        self.tables = tables

    # ------------------------------------------------------------------ reader groups

    def group(self, scope: str, name: str) -> dict[str, Any] | None:
        return self.md.objects["rg"].get(f"{scope}/{name}")

    @staticmethod
    def config_of(record: dict[str, Any]) -> bytes:
        return base64.b64decode(record["config"])

    async def create_group(
        self, scope: str, name: str, group_id: str, config: bytes
    ) -> tuple[str, dict[str, Any] | None]:
        if scope not in self.md.scopes:
            return "SCOPE_NOT_FOUND", None
        if not valid_name(name):
            return "INVALID_RG_NAME", None
        check_config_size(config)
        key = f"{scope}/{name}"
        async with self.streams.lock(f"rg|{key}"):
            found = self.group(scope, name)
            if found is not None:
                return "SUCCESS", found
            await self.streams.create_stream(
                scope, RG_STREAM_PREFIX + name, StreamConfig(min_segments=1), internal=True
            )
            record = {
                "scope": scope,
                "name": name,
                "id": group_id or str(uuid.uuid4()),
                "generation": 0,
                "created_ms": now_ms(),
                "config": base64.b64encode(config).decode(),
            }
            await self.md.put_object("rg", key, record)
        log.info("created reader group %s", key)
        return "SUCCESS", record

    async def update_group(
        self, scope: str, name: str, generation: int, config: bytes
    ) -> tuple[str, int]:
        check_config_size(config)
        key = f"{scope}/{name}"
        async with self.streams.lock(f"rg|{key}"):
            found = self.group(scope, name)
            if found is None:
                return "RG_NOT_FOUND", 0
            if generation != found["generation"]:
                return "INVALID_CONFIG", int(found["generation"])
            record = {
                **found,
                "generation": generation + 1,
                "config": base64.b64encode(config).decode(),
            }
            await self.md.put_object("rg", key, record)
        return "SUCCESS", generation + 1

    async def delete_group(self, scope: str, name: str, group_id: str) -> str:
        key = f"{scope}/{name}"
        async with self.streams.lock(f"rg|{key}"):
            found = self.group(scope, name)
            if found is None or (group_id and group_id != found["id"]):
                return "RG_NOT_FOUND"
            internal = RG_STREAM_PREFIX + name
            if self.streams.get(scope, internal) is not None:
                await self.streams.seal_stream(scope, internal)
                await self.streams.delete_stream(scope, internal)
            await self.md.remove_object("rg", key)
        log.info("deleted reader group %s", key)
        return "SUCCESS"

    # ------------------------------------------------------------------ key-value tables

    def table(self, scope: str, name: str) -> dict[str, Any] | None:
        return self.md.objects["kvt"].get(f"{scope}/{name}")

    async def create_table(self, scope: str, name: str, partitions: int) -> str:
        if scope not in self.md.scopes:
            return "SCOPE_NOT_FOUND"
        if not valid_name(name):
            return "INVALID_TABLE_NAME"
        if not 1 <= partitions <= MAX_SEGMENTS:
            raise BadRequest(f"partitionCount must be 1..{MAX_SEGMENTS}, not {partitions}")
        key = f"{scope}/{name}"
        async with self.streams.lock(f"kvt|{key}"):
            if self.table(scope, name) is not None:
                return "TABLE_EXISTS"
            for n in range(partitions):
                with contextlib.suppress(SegmentExists):
                    await self.tables.create(kvt_segment(scope, name, n))
            record = {
                "scope": scope,
                "name": name,
                "partitions": partitions,
                "created_ms": now_ms(),
            }
            await self.md.put_object("kvt", key, record)
        log.info("created key-value table %s with %d partition(s)", key, partitions)
        return "SUCCESS"

    async def delete_table(self, scope: str, name: str) -> str:
        key = f"{scope}/{name}"
        async with self.streams.lock(f"kvt|{key}"):
            found = self.table(scope, name)
            if found is None:
                return "TABLE_NOT_FOUND"
            for n in range(int(found["partitions"])):
                with contextlib.suppress(SegmentNotFound):
                    await self.tables.delete(kvt_segment(scope, name, n))
            await self.md.remove_object("kvt", key)
        log.info("deleted key-value table %s", key)
        return "SUCCESS"

    def list_tables(self, scope: str, token: str) -> tuple[list[str], str]:
        names = sorted(r["name"] for r in self.md.objects["kvt"].values() if r["scope"] == scope)
        page = [n for n in names if n > token][:LIST_PAGE]
        return page, page[-1] if page else token
