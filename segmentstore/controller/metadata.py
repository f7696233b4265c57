"""Durable controller metadata in one of the store's own table segments.

Contract: ``Metadata.open(tables)`` creates the table ``_system/controller/metadata`` if
needed and loads every record. Keys are ``scope|<scope>``, ``stream|<scope>/<stream>``,
``txn|<scope>/<stream>/<id>``, ``rg|<scope>/<group>`` and ``kvt|<scope>/<table>``; values
are the JSON of the records in ``model.py`` (reader groups and key-value tables: plain
JSON objects, ``groups.py``). Each
``put``/``remove`` returns once the table write is durable (under the server's fsync
mode), so a record the controller acted on survives SIGTERM and kill -9. The controller
is the table's only writer, so writes are unconditional; the in-memory dicts are the
cache every read is served from.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..storage import SegmentNotFound
from ..tables import NO_VERSION, TableStore
from .model import StreamRecord, TxnRecord

log = logging.getLogger("segmentstore.controller")

METADATA_TABLE = "_system/controller/metadata"
_PAGE = 1000


class Metadata:
    def __init__(self, tables: TableStore) -> None:
        self._tables = tables
        self.scopes: dict[str, int] = {}  # scope -> creation time (ms)
        self.streams: dict[str, StreamRecord] = {}  # "scope/stream" -> record
        self.txns: dict[str, TxnRecord] = {}  # TxnRecord.key -> record
        # "rg" -> {"scope/group": record}, "kvt" -> {"scope/table": record} (groups.py)
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"rg": {}, "kvt": {}}

    @classmethod
    async def open(cls, tables: TableStore) -> Metadata:
        md = cls(tables)
        try:
            await tables.info(METADATA_TABLE)
        except SegmentNotFound:
            await tables.create(METADATA_TABLE)
        token = b""
        for _ in range(1_000_000):  # bounded: one page per iteration
            page, token = await tables.read_entries(METADATA_TABLE, _PAGE, token)
            if not page:
                break
            for key, value, _version in page:
                md._load(key.decode(), value)
        log.info(
            "controller metadata: %d scope(s), %d stream(s), %d transaction(s)",
            len(md.scopes),
            len(md.streams),
            len(md.txns),
        )
        return md

    def _load(self, key: str, value: bytes) -> None:
        kind, _, name = key.partition("|")
        if kind == "scope":
            self.scopes[name] = int(value)
        elif kind == "stream":
            self.streams[name] = StreamRecord.from_json(value)
        elif kind == "txn":
            self.txns[name] = TxnRecord.from_json(value)
        elif kind in self.objects:
            self.objects[kind][name] = json.loads(value)
        else:
            log.warning("controller metadata: unknown key %r ignored", key)

    async def put_scope(self, scope: str, created_ms: int) -> None:
        await self._put(f"scope|{scope}", str(created_ms).encode())
        self.scopes[scope] = created_ms

    async def remove_scope(self, scope: str) -> None:
        await self._remove([f"scope|{scope}"])
        self.scopes.pop(scope, None)

    async def put_stream(self, rec: StreamRecord) -> None:
        await self._put(f"stream|{rec.key}", rec.to_json())
        self.streams[rec.key] = rec

    async def remove_stream(self, rec: StreamRecord) -> None:
        txns = [t for t in self.txns.values() if (t.scope, t.stream) == (rec.scope, rec.stream)]
        await self._remove([f"stream|{rec.key}"] + [f"txn|{t.key}" for t in txns])
        self.streams.pop(rec.key, None)
        for t in txns:
            self.txns.pop(t.key, None)

    async def put_txn(self, txn: TxnRecord) -> None:
        await self._put(f"txn|{txn.key}", txn.to_json())
        self.txns[txn.key] = txn

    async def remove_txns(self, txns: list[TxnRecord]) -> None:
        await self._remove([f"txn|{t.key}" for t in txns])
        for t in txns:
            self.txns.pop(t.key, None)

    async def put_object(self, kind: str, name: str, record: dict[str, Any]) -> None:
        await self._put(f"{kind}|{name}", json.dumps(record, separators=(",", ":")).encode())
        self.objects[kind][name] = record

    async def remove_object(self, kind: str, name: str) -> None:
        await self._remove([f"{kind}|{name}"])
        self.objects[kind].pop(name, None)

    async def _put(self, key: str, value: bytes) -> None:
        await self._tables.update(METADATA_TABLE, [(key.encode(), value, NO_VERSION)])

    async def _remove(self, keys: list[str]) -> None:
        if keys:
            await self._tables.remove(METADATA_TABLE, [(k.encode(), NO_VERSION) for k in keys])
