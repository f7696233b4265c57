"""The built-in formats of the registry, as :class:`RecordFormat` objects.

Contract: each class maps one record to the bytes of one segment event and back with
the format module's own encoder and decoder (no layout is written here), and renders a
record as a JSON-ready dict and reads that dict back (``from_dict``). ``DatabusFormat``
imports ``formats.databus`` only when it is made (``formats.get("databus")``).
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from .. import records
from . import Columns, RecordFormat, events, kafka


class KafkaFormat(RecordFormat):
    """One Kafka message per event. ``write(value, key, timestamp=ms)``; ``timestamp``
    defaults to now (magic 1); ``magic=0`` writes a 0.8/0.9 message; Kafka 0.10 has no
    headers, so ``headers`` must be empty."""

    name = "kafka"

    def encode(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> bytes:
        headers = fields.pop("headers", None)
        if headers:
            raise ValueError("Kafka 0.10 messages have no headers")
        magic = fields.pop("magic", 1)
        ts = fields.pop("timestamp", None)
        if ts is None:
            ts = time.time_ns() // 1_000_000 if magic == 1 else kafka.NO_TIMESTAMP
        attributes = fields.pop("attributes", 0)
        if fields:
            raise TypeError(f"unknown Kafka message fields: {', '.join(fields)}")
        return kafka.encode_message(value, key, timestamp=ts, attributes=attributes, magic=magic)

    def decode(self, payload: bytes) -> kafka.Message:
        return kafka.decode_message(payload)

    def from_dict(self, obj: dict[str, Any]) -> kafka.Message:
        return kafka.Message.from_dict(obj)

    def columns(self, record: kafka.Message) -> Columns:
        ts = None if record.timestamp == kafka.NO_TIMESTAMP else record.timestamp
        return Columns(record.key, record.value, ts, {})

    def encode_columns(self, columns: Columns) -> bytes:
        if columns.headers:
            raise ValueError("Kafka 0.10 messages have no headers")
        ts = kafka.NO_TIMESTAMP if columns.timestamp is None else columns.timestamp
        return kafka.encode_message(columns.value, columns.key, timestamp=ts)


class EventsFormat(RecordFormat):
    """One namespaced event per event: ``write(data, name=..., namespace=None,
    id=None, ref_id=None)``; ``id`` defaults to :func:`events.new_event_id`."""

    name = "events"

    def encode(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> bytes:
        if key is not None:
            raise ValueError("namespaced events have no key (they have a name)")
        if "name" not in fields:
            raise TypeError("a namespaced event needs name=...")
        ev_id = fields.pop("id", None)
        return events.encode_event(
            data=value or b"", id=events.new_event_id() if ev_id is None else ev_id, **fields
        )

    def decode(self, payload: bytes) -> events.Event:
        return events.decode_event(payload)

    def from_dict(self, obj: dict[str, Any]) -> events.Event:
        return events.Event.from_dict(obj)

    def columns(self, record: events.Event) -> Columns:
        """Payload as value; name, namespace, id and ref_id as UTF-8 headers."""
        headers = {"name": record.name.encode(), "id": str(record.id).encode()}
        if record.namespace is not None:
            headers["namespace"] = record.namespace.encode()
        if record.ref_id is not None:
            headers["ref_id"] = str(record.ref_id).encode()
        return Columns(None, record.data, None, headers)

    def encode_columns(self, columns: Columns) -> bytes:
        h = columns.headers
        if "name" not in h:
            raise ValueError("a namespaced event needs a 'name' header")
        ns, ref, ev_id = h.get("namespace"), h.get("ref_id"), h.get("id")
        return events.encode_event(
            h["name"].decode(),
            columns.value or b"",
            id=events.new_event_id() if ev_id is None else int(ev_id),
            ref_id=None if ref is None else int(ref),
            namespace=None if ns is None else ns.decode(),
        )


class RecordsFormat(RecordFormat):
    """This SDK's record envelope (:mod:`segmentstore_client.records`)."""

    name = "records"

    def encode(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> bytes:
        return records.encode(value or b"", key, **fields)

    def decode(self, payload: bytes) -> records.Record:
        return records.decode(payload)

    def from_dict(self, obj: dict[str, Any]) -> records.Record:
        return records.Record.from_dict(obj)

    def columns(self, record: records.Record) -> Columns:
        ts = None if record.timestamp_ns is None else record.timestamp_ns // 1_000_000
        return Columns(record.key, record.value, ts, dict(record.headers))

    def encode_columns(self, columns: Columns) -> bytes:
        ts = None if columns.timestamp is None else columns.timestamp * 1_000_000
        return records.encode(
            columns.value or b"", columns.key, headers=columns.headers, timestamp_ns=ts
        )


class DatabusFormat(RecordFormat):
    """Databus change events (:mod:`.databus`), written as binary v2.

    ``write(value, key, sequence=0, timestamp=ms, src_id=1, opcode="UPSERT", ...)``: the
    key is ``bytes`` (a byte key) or an ``int`` (a long key); ``timestamp`` (ms) sets
    ``timestamp_ns`` unless that is given; the other fields are
    :class:`~.databus.DatabusEvent`'s (``version=1`` writes binary v1). JSON is Databus's
    own serialization (``databus.to_json``). As columns: key (a long key as its decimal
    digits, with header ``key_type=long``), value, timestamp in ms, and the Databus
    fields as UTF-8 headers (``sequence``, ``src_id``, ``opcode``, ``partition``,
    ``timestamp_ns``, ``schema_id`` in hex, ``schema_version``).
    """

    name = "databus"

    def __init__(self) -> None:
        self._mod = importlib.import_module("segmentstore_client.formats.databus")

    def encode(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> bytes:
        version = fields.pop("version", 2)
        headers = fields.pop("headers", None)
        if headers:
            raise ValueError("Databus events have no headers (give their fields by name)")
        if key is None:
            raise TypeError("a Databus event needs a key (bytes, or an int for a long key)")
        ts = fields.pop("timestamp", None)
        if ts is not None:
            fields.setdefault("timestamp_ns", ts * 1_000_000)
        fields.setdefault("sequence", 0)
        event = self._mod.DatabusEvent(key=key, value=value or b"", **fields)
        data: bytes = self._mod.encode(event, version)
        return data

    def encode_record(self, record: Any) -> bytes:
        data: bytes = self._mod.encode(record)
        return data

    def decode(self, payload: bytes) -> Any:
        return self._mod.decode(payload)

    def to_dict(self, record: Any) -> dict[str, Any]:
        d: dict[str, Any] = self._mod.to_json(record)
        return d

    def from_dict(self, obj: dict[str, Any]) -> Any:
        return self._mod.from_json(obj)

    def columns(self, record: Any) -> Columns:
        long_key = isinstance(record.key, int)
        headers = {
            "sequence": str(record.sequence).encode(),
            "src_id": str(record.src_id).encode(),
            "opcode": (record.opcode or "").encode(),
            "partition": str(record.physical_partition_id).encode(),
            "timestamp_ns": str(record.timestamp_ns).encode(),
            "schema_id": record.schema_id.hex().encode(),
            "schema_version": str(record.schema_version).encode(),
        }
        if long_key:
            headers["key_type"] = b"long"
        key = str(record.key).encode() if long_key else record.key
        return Columns(key, record.value, record.timestamp_ns // 1_000_000, headers)

    def encode_columns(self, columns: Columns) -> bytes:
        h = columns.headers
        if columns.key is None:
            raise ValueError("a Databus event needs a key")
        key: int | bytes = int(columns.key) if h.get("key_type") == b"long" else columns.key
        ts_ns = h.get("timestamp_ns")
        fields: dict[str, Any] = {
            "sequence": int(h.get("sequence", b"0")),
            "src_id": int(h.get("src_id", b"1")),
            "opcode": h.get("opcode", b"UPSERT").decode() or None,
            "physical_partition_id": int(h.get("partition", b"0")),
            "logical_partition_id": int(h.get("partition", b"0")),
            "schema_version": int(h.get("schema_version", b"0")),
        }
        if "schema_id" in h:
            fields["schema_id"] = bytes.fromhex(h["schema_id"].decode())
        if ts_ns is not None:
            fields["timestamp_ns"] = int(ts_ns)
        elif columns.timestamp is not None:
            fields["timestamp_ns"] = columns.timestamp * 1_000_000
        data: bytes = self._mod.encode(
            self._mod.DatabusEvent(key=key, value=columns.value or b"", **fields)
        )
        return data
