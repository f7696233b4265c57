"""Databus events: binary formats v1 and v2 and the JSON serialization.

The layouts follow LinkedIn Databus 2.0 (``../shared/formats/databus-event.txt`` for v1;
v2 as Databus's ``DbusEventV2`` lays it out). Integers are big-endian (Java's default byte
order); CRCs are CRC-32 (zlib's, as ``java.util.zip.CRC32``), stored as unsigned 32-bit.

v1 (version byte 0)::

    0  version (0)        1  header CRC (4)     5  total length (4)   9  attributes (2)
    11 sequence (8)       19 physical partition (2)                   21 logical partition (2)
    23 timestamp ns (8)   31 source id (2)      33 schema id (16)     49 value CRC (4)
    53 long key (8), or key length (4) + key bytes; then the value to the end

  attributes: bit 0 UPSERT, bit 1 DELETE, bit 2 trace, bit 3 byte[] key, bit 8 externally
  replicated. The header CRC covers bytes 5 up to the value (long key) or up to the key
  bytes (byte[] key); the value CRC covers the value (long key) or key bytes + value.

v2 (version byte 2)::

    0  version (2)   1 magic 0xCAFEDEED (4)   5 header length (4)   9 header CRC (4)
    13 body CRC (4)  17 total length (4)      21 attributes (2)     23 timestamp ns (8)
    31 source id (4) 35 partition id (2)      37 sequence (8)
    45 long key (8), or key length (4) + key bytes            (end of header)
    then optional parts: metadata, payload; a part is
    data length (4) | attributes (2: schema version << 2 | digest type, 0 = MD5 16 bytes,
    1 = CRC-32 4 bytes) | digest | data

  attributes: bits 0-1 opcode (1 UPSERT, 2 DELETE, 0 control event), bits 2-3 key type
  (1 long, 2 string/bytes), 0x10 replicated, 0x20 trace, 0x40 has metadata part, 0x80 has
  payload part. The body CRC covers everything after the header; the header CRC covers
  bytes 13 to the end of the header (so it includes the body CRC).

An end-of-window marker is a control event with source id -2 (``EOP_SOURCE_ID``), key 0,
no opcode; :func:`end_of_period` builds one. v2 has one partition id: decoding sets the
physical and logical ids to it, encoding writes the physical one.

JSON (Databus's JSON serialization): ``opcode``, ``key`` (long keys) or ``keyBytes``
(base64), ``sequence``, ``logicalPartitionId``, ``physicalPartitionId``,
``timestampInNanos``, ``srcId``, ``schemaId`` (base64), ``valueEnc`` (``JSON``: ``value``
is base64; ``JSON_PLAIN``: ``value`` is the literal string), ``endOfPeriod``; and, our
addition so v2 round-trips, ``schemaVersion`` when it is not 0.

Example::

    from segmentstore_client.formats import databus
    ev = databus.DatabusEvent(sequence=42, key=7, value=b'{"qty": 3}', src_id=101)
    data = databus.encode(ev)                 # v2 bytes
    assert databus.decode(data) == ev
    line = databus.to_json(ev)                # dict, json.dumps-able
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from dataclasses import dataclass, replace
from typing import Any, Final

from ..errors import CorruptRecord

__all__ = [
    "EOP_SOURCE_ID",
    "DatabusEvent",
    "DatabusFormatError",
    "decode",
    "encode",
    "encode_end_of_period",
    "encode_upsert",
    "end_of_period",
    "from_json",
    "is_databus",
    "json_line",
    "peek",
    "to_json",
]

EOP_SOURCE_ID: Final = -2
V1: Final = 0  # the version byte of format v1 (historical)
V2: Final = 2  # the version byte of format v2
MAGIC: Final = 0xCAFEDEED
ZERO_DIGEST: Final = bytes(16)

_V1_FIXED: Final = struct.Struct(">BIIHqhhqh16sI")  # through the value CRC: 53 bytes
_V2_FIXED: Final = struct.Struct(">BIIIIIHqihq")  # 45 bytes
_PART_HEAD: Final = struct.Struct(">iH")
_I32: Final = struct.Struct(">i")
_Q: Final = struct.Struct(">q")
_U32: Final = struct.Struct(">I")

_V1_UPSERT, _V1_DELETE, _V1_TRACE, _V1_BYTE_KEY, _V1_REPL = 0x01, 0x02, 0x04, 0x08, 0x100
_V2_OPCODES: Final = {1: "UPSERT", 2: "DELETE", 0: None}
_V2_KEY_LONG, _V2_KEY_BYTES = 1, 2
_V2_REPL, _V2_TRACE, _V2_HAS_META, _V2_HAS_PAYLOAD = 0x10, 0x20, 0x40, 0x80


class DatabusFormatError(CorruptRecord):
    """Bytes or JSON that are not a valid Databus event (bad CRC, length, version...)."""


@dataclass(frozen=True, slots=True)
class DatabusEvent:
    """One Databus event. ``key`` is an ``int`` (long key) or ``bytes`` (string key);
    ``opcode`` is ``"UPSERT"``, ``"DELETE"`` or ``None`` (control events)."""

    sequence: int
    key: int | bytes
    value: bytes = b""
    src_id: int = 1
    opcode: str | None = "UPSERT"
    physical_partition_id: int = 0
    logical_partition_id: int = 0
    timestamp_ns: int = 0
    schema_id: bytes = ZERO_DIGEST
    schema_version: int = 0
    trace: bool = False
    ext_replicated: bool = False
    metadata: bytes | None = None  # v2 metadata part's data, if any

    @property
    def end_of_period(self) -> bool:
        """True for an end-of-window marker."""
        return self.src_id == EOP_SOURCE_ID


def end_of_period(sequence: int, partition: int = 0, timestamp_ns: int = 0) -> DatabusEvent:
    """The marker that closes window ``sequence``.

    Example: ``writer.write(databus.encode(databus.end_of_period(42)))``
    """
    return DatabusEvent(
        sequence,
        0,
        b"",
        EOP_SOURCE_ID,
        None,
        partition,
        partition,
        timestamp_ns,
    )


def _crc(data: bytes | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def encode(event: DatabusEvent, version: int = 2) -> bytes:
    """The event in binary format ``version`` (2 or 1).

    Example: ``data = encode(DatabusEvent(1, key=b"user-9", value=b"{}"), version=1)``
    """
    if version == 2:
        return _encode_v2(event)
    if version == 1:
        return _encode_v1(event)
    raise ValueError(f"Databus event version must be 1 or 2, not {version}")


def _key_bytes(event: DatabusEvent) -> tuple[bool, bytes]:
    key = event.key
    if isinstance(key, bool) or not isinstance(key, int | bytes | bytearray):
        raise ValueError(f"a Databus key is an int or bytes, not {type(key).__name__}")
    if isinstance(key, int):
        return True, _Q.pack(key)
    return False, _I32.pack(len(key)) + bytes(key)


def _encode_v1(e: DatabusEvent) -> bytes:
    if e.metadata is not None or e.schema_version:
        raise ValueError("format v1 has no metadata part or schema version; use v2")
    long_key, key = _key_bytes(e)
    attrs = {"UPSERT": _V1_UPSERT, "DELETE": _V1_DELETE, None: 0}.get(e.opcode, -1)
    if attrs < 0:
        raise ValueError(f"unknown opcode {e.opcode!r}")
    attrs |= (_V1_TRACE if e.trace else 0) | (0 if long_key else _V1_BYTE_KEY)
    attrs |= _V1_REPL if e.ext_replicated else 0
    if len(e.schema_id) != 16:
        raise ValueError("a v1 schema id is 16 bytes")
    total = _V1_FIXED.size + len(key) + len(e.value)
    value_crc = _crc(e.value) if long_key else _crc(key[4:] + e.value)
    head = _V1_FIXED.pack(
        V1, 0, total, attrs, e.sequence, e.physical_partition_id, e.logical_partition_id,
        e.timestamp_ns, e.src_id, e.schema_id, value_crc,
    )  # fmt: skip
    header = head + (key if long_key else key[:4])
    header_crc = _crc(header[5:])
    return (
        header[:1]
        + struct.pack(">I", header_crc)
        + header[5:]
        + (b"" if long_key else key[4:])
        + e.value
    )


def _part(data: bytes, digest: bytes, schema_version: int) -> bytes:
    digest_type = 0 if len(digest) == 16 else 1
    if len(digest) not in (4, 16):
        raise ValueError("a schema digest is 16 (MD5) or 4 (CRC-32) bytes")
    return _PART_HEAD.pack(len(data), (schema_version << 2) | digest_type) + digest + data


def _encode_v2(e: DatabusEvent) -> bytes:
    long_key, key = _key_bytes(e)
    opcode = {"UPSERT": 1, "DELETE": 2, None: 0}.get(e.opcode, -1)
    if opcode < 0:
        raise ValueError(f"unknown opcode {e.opcode!r}")
    if e.src_id >= 0 and opcode == 0:
        opcode = 1  # a data event always has an opcode (Databus defaults to UPSERT)
    attrs = opcode | ((_V2_KEY_LONG if long_key else _V2_KEY_BYTES) << 2)
    attrs |= (_V2_TRACE if e.trace else 0) | (_V2_REPL if e.ext_replicated else 0)
    body = b""
    if e.metadata is not None:
        attrs |= _V2_HAS_META
        body += _part(e.metadata, ZERO_DIGEST, 0)
    if e.value or e.schema_version or e.schema_id != ZERO_DIGEST:
        attrs |= _V2_HAS_PAYLOAD
        body += _part(e.value, e.schema_id, e.schema_version)
    header_len = _V2_FIXED.size + len(key)
    fixed = _V2_FIXED.pack(
        V2, MAGIC, header_len, 0, _crc(body), header_len + len(body), attrs,
        e.timestamp_ns, e.src_id, e.physical_partition_id, e.sequence,
    )  # fmt: skip
    header = fixed + key
    header_crc = _crc(header[13:])
    return header[:9] + struct.pack(">I", header_crc) + header[13:] + body


_UPSERT_LONG_ATTRS: Final = 1 | (_V2_KEY_LONG << 2)
_FIXED_AND_KEY: Final = struct.Struct(">BIIIIIHqihqq")  # v2 fixed header + a long key


def encode_upsert(
    sequence: int,
    key: int,
    value: bytes | memoryview,
    src_id: int,
    timestamp_ns: int = 0,
    partition: int = 0,
) -> bytes:
    """The v2 bytes of ``DatabusEvent(sequence, key, value, src_id, "UPSERT", partition,
    partition, timestamp_ns)`` (zero schema id), built in one pass: the relay's path for
    events it converts. Equal to :func:`encode` of that event."""
    has_payload = len(value) > 0
    body = _PART_HEAD.pack(len(value), 0) + ZERO_DIGEST + value if has_payload else b""
    attrs = _UPSERT_LONG_ATTRS | (_V2_HAS_PAYLOAD if has_payload else 0)
    header = _FIXED_AND_KEY.pack(
        V2, MAGIC, 53, 0, _crc(body), 53 + len(body), attrs, timestamp_ns, src_id, partition,
        sequence, key,
    )  # fmt: skip
    return header[:9] + _U32.pack(_crc(header[13:])) + header[13:] + body


def encode_end_of_period(sequence: int, partition: int = 0, timestamp_ns: int = 0) -> bytes:
    """The v2 bytes of :func:`end_of_period` (``encode(end_of_period(...))``), fast."""
    header = _FIXED_AND_KEY.pack(
        V2, MAGIC, 53, 0, 0, 53, _V2_KEY_LONG << 2, timestamp_ns, EOP_SOURCE_ID, partition,
        sequence, 0,
    )  # fmt: skip
    return header[:9] + _U32.pack(_crc(header[13:])) + header[13:]


def is_databus(data: bytes | memoryview) -> bool:
    """Whether ``data`` is exactly one valid Databus event (both CRCs and the layout
    checked, as :func:`decode` does). The relay uses it to tell Databus events from other
    payloads; a cheap look at the version byte and magic/length rejects most others."""
    n = len(data)
    if n < 45:
        return False
    v = data[0]
    if v == V2:
        if data[1:5] != b"\xca\xfe\xde\xed" or _I32.unpack_from(data, 17)[0] != n:
            return False
    elif v != V1 or n < 57 or _I32.unpack_from(data, 5)[0] != n:
        return False
    try:
        decode(data)
    except DatabusFormatError:
        return False
    return True


def peek(data: bytes | memoryview) -> tuple[int, int, int | bytes, int]:
    """``(sequence, source id, key, timestamp ns)`` of an event that passed
    :func:`is_databus`, read straight from its bytes (the relay's filter fast path)."""
    key: int | bytes
    if data[0] == V2:
        ts, src, _part, seq = struct.unpack_from(">qihq", data, 23)
        if (data[22] >> 2) & 3 == _V2_KEY_LONG:
            (key,) = _Q.unpack_from(data, 45)
        else:
            (klen,) = _I32.unpack_from(data, 45)
            key = bytes(data[49 : 49 + klen])
        return seq, src, key, ts
    (attrs, seq) = struct.unpack_from(">Hq", data, 9)
    ts, src = struct.unpack_from(">qh", data, 23)
    if attrs & _V1_BYTE_KEY:
        (klen,) = _I32.unpack_from(data, 53)
        key = bytes(data[57 : 57 + klen])
    else:
        (key,) = _Q.unpack_from(data, 53)
    return seq, src, key, ts


def decode(data: bytes | memoryview) -> DatabusEvent:
    """One event from ``data`` (exactly its bytes), v1 or v2, both CRCs checked.

    Raises :class:`DatabusFormatError` on anything malformed.
    """
    data = bytes(data)
    if not data:
        raise DatabusFormatError("empty input is not a Databus event")
    try:
        if data[0] == V2:
            return _decode_v2(data)
        if data[0] == V1:
            return _decode_v1(data)
    except (struct.error, IndexError) as e:
        raise DatabusFormatError(f"truncated Databus event ({len(data)} bytes): {e}") from e
    raise DatabusFormatError(f"unknown Databus event version {data[0]}")


def _decode_v1(data: bytes) -> DatabusEvent:
    (_, header_crc, total, attrs, seq, ppart, lpart, ts, src, schema, value_crc) = (
        _V1_FIXED.unpack_from(data)
    )
    if total != len(data):
        raise DatabusFormatError(f"v1 event says {total} bytes, got {len(data)}")
    if attrs & _V1_BYTE_KEY:
        (klen,) = _I32.unpack_from(data, 53)
        if klen < 0 or 57 + klen > total:
            raise DatabusFormatError(f"v1 key length {klen} out of range")
        header_end, key, value_start = 57, data[57 : 57 + klen], 57 + klen
        crc_from = 57
    else:
        header_end = value_start = crc_from = 61
        (key,) = _Q.unpack_from(data, 53)
    if _crc(data[5:header_end]) != header_crc:
        raise DatabusFormatError("v1 header CRC mismatch")
    if _crc(data[crc_from:]) != value_crc:
        raise DatabusFormatError("v1 value CRC mismatch")
    opcode = "DELETE" if attrs & _V1_DELETE else "UPSERT" if attrs & _V1_UPSERT else None
    return DatabusEvent(
        seq, key, data[value_start:], src, opcode, ppart, lpart, ts, schema, 0,
        bool(attrs & _V1_TRACE), bool(attrs & _V1_REPL),
    )  # fmt: skip


def _read_part(data: bytes, pos: int) -> tuple[bytes, bytes, int, int]:
    """(data, digest, schema version, next position)"""
    length, pattrs = _PART_HEAD.unpack_from(data, pos)
    digest_len = 16 if pattrs & 3 == 0 else 4 if pattrs & 3 == 1 else -1
    end = pos + 6 + max(digest_len, 0) + length
    if digest_len < 0 or length < 0 or end > len(data):
        raise DatabusFormatError(f"bad v2 event part at byte {pos}")
    digest = data[pos + 6 : pos + 6 + digest_len]
    return data[pos + 6 + digest_len : end], digest, pattrs >> 2, end


def _decode_v2(data: bytes) -> DatabusEvent:
    (_, magic, header_len, header_crc, body_crc, total, attrs, ts, src, part, seq) = (
        _V2_FIXED.unpack_from(data)
    )
    if magic != MAGIC:
        raise DatabusFormatError(f"v2 magic is {magic:#x}, not {MAGIC:#x}")
    if total != len(data) or not 45 <= header_len <= total:
        raise DatabusFormatError(f"v2 lengths (header {header_len}, total {total}) do not fit")
    if _crc(data[13:header_len]) != header_crc:
        raise DatabusFormatError("v2 header CRC mismatch")
    if _crc(data[header_len:]) != body_crc:
        raise DatabusFormatError("v2 body CRC mismatch")
    key_type = (attrs >> 2) & 3
    key: int | bytes
    if key_type == _V2_KEY_LONG:
        (key,) = _Q.unpack_from(data, 45)
        key_end = 53
    elif key_type == _V2_KEY_BYTES:
        (klen,) = _I32.unpack_from(data, 45)
        key_end = 49 + klen
        key = data[49:key_end]
        if klen < 0 or key_end > header_len:
            raise DatabusFormatError(f"v2 key length {klen} out of range")
    else:
        raise DatabusFormatError(f"v2 key type {key_type} is not supported (long or bytes)")
    if key_end != header_len:
        raise DatabusFormatError("v2 header length does not match its key")
    pos, metadata = header_len, None
    if attrs & _V2_HAS_META:
        metadata, _d, _v, pos = _read_part(data, pos)
    value, schema, version = b"", ZERO_DIGEST, 0
    if attrs & _V2_HAS_PAYLOAD:
        value, schema, version, pos = _read_part(data, pos)
    if pos != total:
        raise DatabusFormatError(f"{total - pos} stray bytes after the v2 event's parts")
    return DatabusEvent(
        seq, key, value, src, _V2_OPCODES[attrs & 3], part, part, ts, schema, version,
        bool(attrs & _V2_TRACE), bool(attrs & _V2_REPL), metadata,
    )  # fmt: skip


def to_json(event: DatabusEvent, value_enc: str = "JSON") -> dict[str, Any]:
    """Databus's JSON serialization (a dict for ``json.dumps``). ``value_enc="JSON_PLAIN"``
    puts the value in as a UTF-8 string instead of base64."""
    out: dict[str, Any] = {}
    if event.opcode is not None:
        out["opcode"] = event.opcode
    if isinstance(event.key, int):
        out["key"] = event.key
    else:
        out["keyBytes"] = base64.b64encode(event.key).decode()
    out.update(
        sequence=event.sequence,
        logicalPartitionId=event.logical_partition_id,
        physicalPartitionId=event.physical_partition_id,
        timestampInNanos=event.timestamp_ns,
        srcId=event.src_id,
        schemaId=base64.b64encode(event.schema_id).decode(),
        valueEnc=value_enc,
    )
    if event.end_of_period:
        out["endOfPeriod"] = True
    if value_enc == "JSON":
        out["value"] = base64.b64encode(event.value).decode()
    elif value_enc == "JSON_PLAIN":
        out["value"] = event.value.decode("utf-8", "surrogateescape")
    else:
        raise ValueError(f"valueEnc must be JSON or JSON_PLAIN, not {value_enc!r}")
    if event.schema_version:
        out["schemaVersion"] = event.schema_version
    return out


def json_line(event: DatabusEvent) -> bytes:
    """``json.dumps(to_json(event), separators=(",", ":"))`` + newline, as UTF-8, built by
    formatting (every value is an int, a fixed word or base64, so nothing needs escaping):
    the relay's JSON output path."""
    b64 = base64.b64encode
    parts = []
    if event.opcode is not None:
        parts.append(f'"opcode":"{event.opcode}"')
    if isinstance(event.key, int):
        parts.append(f'"key":{event.key}')
    else:
        parts.append(f'"keyBytes":"{b64(event.key).decode()}"')
    parts.append(
        f'"sequence":{event.sequence},"logicalPartitionId":{event.logical_partition_id},'
        f'"physicalPartitionId":{event.physical_partition_id},'
        f'"timestampInNanos":{event.timestamp_ns},"srcId":{event.src_id},'
        f'"schemaId":"{b64(event.schema_id).decode()}","valueEnc":"JSON"'
    )
    if event.src_id == EOP_SOURCE_ID:
        parts.append('"endOfPeriod":true')
    parts.append(f'"value":"{b64(event.value).decode()}"')
    if event.schema_version:
        parts.append(f'"schemaVersion":{event.schema_version}')
    return ("{" + ",".join(parts) + "}\n").encode()


def _b64(obj: dict[str, Any], name: str) -> bytes:
    try:
        return base64.b64decode(str(obj[name]), validate=True)
    except (binascii.Error, ValueError) as e:
        raise DatabusFormatError(f"{name} is not base64") from e


def from_json(obj: dict[str, Any]) -> DatabusEvent:
    """The event of a :func:`to_json` dict; raises :class:`DatabusFormatError` when a
    required attribute is missing or has the wrong type."""
    try:
        if "key" in obj:
            key: int | bytes = int(obj["key"])
        elif "keyBytes" in obj:
            key = _b64(obj, "keyBytes")
        else:
            raise DatabusFormatError("a JSON Databus event needs key or keyBytes")
        enc = obj.get("valueEnc", "JSON")
        raw = obj.get("value", "")
        if enc == "JSON":
            value = _b64(obj, "value") if raw else b""
        elif enc == "JSON_PLAIN":
            value = str(raw).encode("utf-8", "surrogateescape")
        else:
            raise DatabusFormatError(f"unknown valueEnc {enc!r}")
        opcode = obj.get("opcode")
        if opcode not in ("UPSERT", "DELETE", None):
            raise DatabusFormatError(f"unknown opcode {opcode!r}")
        event = DatabusEvent(
            sequence=int(obj["sequence"]),
            key=key,
            value=value,
            src_id=int(obj["srcId"]),
            opcode=opcode,
            physical_partition_id=int(obj["physicalPartitionId"]),
            logical_partition_id=int(obj["logicalPartitionId"]),
            timestamp_ns=int(obj["timestampInNanos"]),
            schema_id=_b64(obj, "schemaId"),
            schema_version=int(obj.get("schemaVersion", 0)),
        )
    except KeyError as e:
        raise DatabusFormatError(f"a JSON Databus event needs {e.args[0]}") from e
    except (TypeError, ValueError) as e:
        if isinstance(e, DatabusFormatError):
            raise
        raise DatabusFormatError(f"bad JSON Databus event: {e}") from e
    if obj.get("endOfPeriod") and not event.end_of_period:
        event = replace(event, src_id=EOP_SOURCE_ID, opcode=None)
    return event
