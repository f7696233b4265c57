"""Records: an optional envelope for event payloads (raw bytes stay the default).

It takes the best of Kafka's record format (attribute bits naming the compression codec
and the timestamp type, a CRC, key, headers) and Databus's event format (an operation
bit telling upserts from deletes, an end-of-window marker closing a consistent batch of
changes). Layout, version 1, all integers big-endian except the CRC::

    offset  size  field
    0       1     format version (1)
    1       1     attributes: bits 0-2 codec (0 none, 1 gzip, 2 lz4, 3 zstd),
                  bit 3 timestamp type (0 create time, 1 log-append time),
                  bit 4 operation (0 upsert, 1 delete), bit 5 end of window, 6-7 zero
    2       8     timestamp, nanoseconds since the Unix epoch (i64)
    10      4     key length (i32; -1 = no key), then the key bytes
    ..      2     header count (u16), then per header: name length (u16), name (UTF-8),
                  value length (i32), value bytes
    ..      ..    value (compressed with the codec; headers and key never are)
    n-4     4     CRC-32C of bytes 0 .. n-4, little-endian

The CRC sits last and little-endian so that checking it is one pass over the whole
record: the CRC-32C of a record followed by its own CRC is a constant (0x48674BC7).

Example::

    from segmentstore_client import records
    payload = records.encode(b'{"qty": 3}', key=b"order-17", headers={"source": b"web"})
    rec = records.decode(payload)        # raises CorruptRecord if any bit flipped
    print(rec.key, rec.value, rec.to_json())
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import CodecUnavailable, CorruptRecord

FORMAT_VERSION: Final = 1
OVERHEAD: Final = 20
"""Bytes a record adds around key, headers and value (no headers)."""

_HEAD: Final = struct.Struct(">BBqi")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
_CRC: Final = struct.Struct("<I")
_NO_HEADERS: Final = b"\x00\x00"
_RESIDUE: Final = 0x48674BC7


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


try:
    from google_crc32c import value as _crc32c

    CRC_IMPLEMENTATION = "google-crc32c"
except ImportError:  # pragma: no cover - exercised only without the package
    _TABLE: Final = _crc32c_table()

    def _crc32c(data: bytes) -> int:
        c = 0xFFFFFFFF
        table = _TABLE
        for b in data:
            c = table[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF

    CRC_IMPLEMENTATION = "pure-python (install google-crc32c for speed)"


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``.

    Example::

        crc32c(b"123456789") == 0xE3069283
    """
    return int(_crc32c(data))


class TimestampType(enum.IntEnum):
    """Who set a record's timestamp: its producer (CREATE) or the appender (LOG_APPEND)."""

    CREATE = 0
    LOG_APPEND = 1


class Operation(enum.IntEnum):
    """What a record means for its key: a new value (UPSERT) or a removal (DELETE)."""

    UPSERT = 0
    DELETE = 1


# -- codecs ------------------------------------------------------------------------------

CODECS: Final = ("none", "gzip", "lz4", "zstd")
"""Codec names by id (attribute bits 0-2)."""

Compress = Callable[[bytes, int | None], bytes]
Decompress = Callable[[bytes], bytes]

_local = threading.local()


def _gzip_compress(data: bytes, level: int | None) -> bytes:
    c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _gzip_decompress(data: bytes) -> bytes:
    return zlib.decompress(data, 31)


def _lz4() -> Any:
    try:
        import lz4.frame
    except ImportError:
        raise CodecUnavailable(
            "the lz4 codec needs the 'lz4' package (pip install 'segmentstore[lz4]')"
        ) from None
    return lz4.frame


def _lz4_compress(data: bytes, level: int | None) -> bytes:
    return bytes(_lz4().compress(data, compression_level=level or 0))


def _lz4_decompress(data: bytes) -> bytes:
    return bytes(_lz4().decompress(data))


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        raise CodecUnavailable(
            "the zstd codec needs the 'zstandard' package (pip install 'segmentstore[zstd]')"
        ) from None
    return zstandard


def _zstd_compress(data: bytes, level: int | None) -> bytes:
    # Compressor objects are not thread-safe: keep one per thread and level.
    cache: dict[int, Any] | None = getattr(_local, "zstd_c", None)
    if cache is None:
        cache = _local.zstd_c = {}
    lvl = 3 if level is None else level
    comp = cache.get(lvl)
    if comp is None:
        comp = cache[lvl] = _zstd().ZstdCompressor(level=lvl)
    return bytes(comp.compress(data))


def _zstd_decompress(data: bytes) -> bytes:
    d = getattr(_local, "zstd_d", None)
    if d is None:
        d = _local.zstd_d = _zstd().ZstdDecompressor()
    return bytes(d.decompress(data))


def _identity(data: bytes, level: int | None = None) -> bytes:
    return data


_COMPRESS: Final[tuple[Compress, ...]] = (_identity, _gzip_compress, _lz4_compress, _zstd_compress)
_DECOMPRESS: Final[tuple[Decompress, ...]] = (
    _identity,
    _gzip_decompress,
    _lz4_decompress,
    _zstd_decompress,
)
_CODEC_IDS: Final = {name: i for i, name in enumerate(CODECS)}


def codec_available(codec: str) -> bool:
    """True if ``codec`` can be used here (lz4 and zstd need their packages).

    Example::

        codec = "zstd" if records.codec_available("zstd") else "gzip"
    """
    cid = _codec_id(codec)
    try:
        if cid == 2:
            _lz4()
        elif cid == 3:
            _zstd()
    except CodecUnavailable:
        return False
    return True


def _codec_id(codec: str) -> int:
    cid = _CODEC_IDS.get(codec)
    if cid is None:
        raise ValueError(f"unknown codec {codec!r}; choose one of {', '.join(CODECS)}")
    return cid


# -- the record --------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    """A decoded record, or one to encode with :meth:`encode`.

    ``timestamp_ns`` None means "now" when encoding. ``codec`` is the codec the value is
    (to be) stored with; decoding returns the value already decompressed.

    Example::

        rec = Record(b"v", key=b"k", headers={"trace": b"abc"}, codec="zstd")
        payload = rec.encode()
        assert records.decode(payload).value == b"v"
    """

    value: bytes
    key: bytes | None = None
    headers: dict[str, bytes] = field(default_factory=dict)
    timestamp_ns: int | None = None
    timestamp_type: TimestampType = TimestampType.CREATE
    operation: Operation = Operation.UPSERT
    end_of_window: bool = False
    codec: str = "none"

    def encode(self, level: int | None = None) -> bytes:
        """The record's wire bytes (see :func:`encode`).

        Example::

            payload = Record(b"v", key=b"k").encode()
        """
        return encode(
            self.value,
            self.key,
            headers=self.headers,
            timestamp_ns=self.timestamp_ns,
            timestamp_type=self.timestamp_type,
            operation=self.operation,
            end_of_window=self.end_of_window,
            codec=self.codec,
            level=level,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: key, values and headers are text when they are valid
        UTF-8 and ``{"base64": ...}`` otherwise; None stays null.

        Example::

            Record(b"hi", key=b"\\xff").to_dict()["key"]    # {'base64': '/w=='}
        """
        return {
            "version": FORMAT_VERSION,
            "codec": self.codec,
            "timestamp_ns": self.timestamp_ns,
            "timestamp_type": self.timestamp_type.name.lower(),
            "operation": self.operation.name.lower(),
            "end_of_window": self.end_of_window,
            "key": None if self.key is None else _render(self.key),
            "headers": {k: _render(v) for k, v in self.headers.items()},
            "value": _render(self.value),
        }

    def to_json(self, **dumps_kwargs: Any) -> str:
        """The JSON rendering of :meth:`to_dict`.

        Example::

            print(records.decode(event.data).to_json(indent=2))
        """
        return json.dumps(self.to_dict(), **dumps_kwargs)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Record:
        """The record a :meth:`to_dict` dictionary describes.

        Example::

            Record.from_dict(rec.to_dict()) == rec
        """
        try:
            key = obj.get("key")
            headers = obj.get("headers") or {}
            return cls(
                value=_parse(obj["value"]),
                key=None if key is None else _parse(key),
                headers={str(k): _parse(v) for k, v in headers.items()},
                timestamp_ns=obj.get("timestamp_ns"),
                timestamp_type=TimestampType[str(obj.get("timestamp_type", "create")).upper()],
                operation=Operation[str(obj.get("operation", "upsert")).upper()],
                end_of_window=bool(obj.get("end_of_window", False)),
                codec=str(obj.get("codec", "none")),
            )
        except (KeyError, TypeError, AttributeError, binascii.Error) as e:
            raise ValueError(f"not a record dictionary: {e!r}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Record:
        """Parse :meth:`to_json` output.

        Example::

            Record.from_json(rec.to_json()) == rec
        """
        return cls.from_dict(json.loads(text))


def _render(b: bytes) -> str | dict[str, str]:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(b).decode("ascii")}


def _parse(x: object) -> bytes:
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, dict) and isinstance(x.get("base64"), str):
        return base64.b64decode(x["base64"], validate=True)
    raise TypeError(f"expected text or {{'base64': ...}}, got {x!r}")


# -- encoding and decoding ---------------------------------------------------------------


def _encode_headers(headers: Mapping[str, bytes]) -> bytes:
    if len(headers) > 0xFFFF:
        raise ValueError("a record has at most 65535 headers")
    parts = [_U16.pack(len(headers))]
    for name, value in headers.items():
        nb = name.encode("utf-8")
        if len(nb) > 0xFFFF:
            raise ValueError(f"header name too long: {name[:40]!r}...")
        parts.append(_U16.pack(len(nb)))
        parts.append(nb)
        parts.append(_I32.pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def encode(
    value: bytes,
    key: bytes | None = None,
    *,
    headers: Mapping[str, bytes] | None = None,
    timestamp_ns: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE,
    operation: Operation = Operation.UPSERT,
    end_of_window: bool = False,
    codec: str = "none",
    level: int | None = None,
) -> bytes:
    """Wrap ``value`` in a record; returns the bytes to write as an event.

    ``codec`` compresses the value ("none", "gzip", "lz4", "zstd"; lz4 and zstd need
    their packages, else :class:`CodecUnavailable`); ``level`` is the codec's level.

    Example::

        await writer.write(records.encode(b"payload", key=b"user-7", codec="gzip"))
    """
    cid = _CODEC_IDS.get(codec)
    if cid is None:
        cid = _codec_id(codec)
    if cid:
        value = _COMPRESS[cid](value, level)
    attrs = cid | (timestamp_type << 3) | (operation << 4) | (end_of_window << 5)
    ts = time.time_ns() if timestamp_ns is None else timestamp_ns
    hb = _encode_headers(headers) if headers else _NO_HEADERS
    if key is None:
        body = b"".join((_HEAD.pack(FORMAT_VERSION, attrs, ts, -1), hb, value))
    else:
        body = b"".join((_HEAD.pack(FORMAT_VERSION, attrs, ts, len(key)), key, hb, value))
    return body + _CRC.pack(_crc32c(body))


def decode(payload: bytes) -> Record:
    """Check and unwrap a record; raises :class:`CorruptRecord` if the CRC-32C does not
    match (any flipped bit) or the bytes are not a record.

    Example::

        async for event in client.reader("orders/0"):
            rec = records.decode(event.data)
    """
    if type(payload) is not bytes:
        payload = bytes(payload)
    n = len(payload)
    if n < OVERHEAD:
        raise CorruptRecord(f"{n} bytes are too few for a record")
    if _crc32c(payload) != _RESIDUE:
        raise CorruptRecord("record CRC-32C mismatch: the record is corrupt")
    version, attrs, ts, klen = _HEAD.unpack_from(payload, 0)
    if version != FORMAT_VERSION:
        raise CorruptRecord(f"unsupported record format version {version}")
    end = n - 4
    pos = 14
    try:
        if klen == -1:
            key = None
        elif 0 <= klen <= end - pos:
            key = payload[pos : pos + klen]
            pos += klen
        else:
            raise CorruptRecord(f"record key length {klen} is out of range")
        (count,) = _U16.unpack_from(payload, pos)
        pos += 2
        headers: dict[str, bytes] = {}
        for _ in range(count):
            (nlen,) = _U16.unpack_from(payload, pos)
            pos += 2
            name = payload[pos : pos + nlen].decode("utf-8")
            pos += nlen
            (vlen,) = _I32.unpack_from(payload, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise CorruptRecord("record header runs past the record")
            headers[name] = payload[pos : pos + vlen]
            pos += vlen
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptRecord(f"record headers do not parse: {e}") from None
    if pos > end:
        raise CorruptRecord("record fields run past the record")
    cid = attrs & 7
    if cid >= len(CODECS):
        raise CorruptRecord(f"unknown record codec id {cid}")
    value = payload[pos:end]
    if cid:
        try:
            value = _DECOMPRESS[cid](value)
        except CodecUnavailable:
            raise
        except Exception as e:
            raise CorruptRecord(f"record value does not decompress with {CODECS[cid]}: {e}") from e
    return Record(
        value,
        key,
        headers,
        ts,
        TimestampType((attrs >> 3) & 1),
        Operation((attrs >> 4) & 1),
        bool(attrs & 32),
        CODECS[cid],
    )


def encode_batch(records: Iterable[Record], *, level: int | None = None) -> list[bytes]:
    """Encode many records (what a sink does per batch); same bytes as :func:`encode`.

    Example::

        await writer.write_many(records.encode_batch(Record(v, key=k) for k, v in rows))
    """
    ts_now = time.time_ns()
    out: list[bytes] = []
    append = out.append
    head_pack = _HEAD.pack
    crc = _crc32c
    crc_pack = _CRC.pack
    join = b"".join
    for r in records:
        cid = _CODEC_IDS.get(r.codec)
        if cid is None:
            cid = _codec_id(r.codec)
        value = _COMPRESS[cid](r.value, level) if cid else r.value
        attrs = cid | (r.timestamp_type << 3) | (r.operation << 4) | (r.end_of_window << 5)
        ts = ts_now if r.timestamp_ns is None else r.timestamp_ns
        hb = _encode_headers(r.headers) if r.headers else _NO_HEADERS
        key = r.key
        if key is None:
            body = join((head_pack(FORMAT_VERSION, attrs, ts, -1), hb, value))
        else:
            body = join((head_pack(FORMAT_VERSION, attrs, ts, len(key)), key, hb, value))
        append(body + crc_pack(crc(body)))
    return out


def encode_values(
    values: Iterable[bytes],
    keys: Iterable[bytes | None] | None = None,
    *,
    timestamp_ns: int | None = None,
    codec: str = "none",
    level: int | None = None,
) -> list[bytes]:
    """Encode plain values (and optional keys) as records without building Record
    objects: the fastest path for sinks. All share one timestamp (default: now).

    Example::

        payloads = records.encode_values([b"a", b"b"], keys=[b"1", b"2"], codec="lz4")
    """
    cid = _codec_id(codec)
    compress = _COMPRESS[cid]
    ts = time.time_ns() if timestamp_ns is None else timestamp_ns
    head_pack = _HEAD.pack
    crc = _crc32c
    crc_pack = _CRC.pack
    join = b"".join
    out: list[bytes] = []
    append = out.append
    if keys is None:
        for v in values:
            if cid:
                v = compress(v, level)
            body = join((head_pack(FORMAT_VERSION, cid, ts, -1), _NO_HEADERS, v))
            append(body + crc_pack(crc(body)))
        return out
    for v, k in zip(values, keys, strict=True):
        if cid:
            v = compress(v, level)
        if k is None:
            body = join((head_pack(FORMAT_VERSION, cid, ts, -1), _NO_HEADERS, v))
        else:
            body = join((head_pack(FORMAT_VERSION, cid, ts, len(k)), k, _NO_HEADERS, v))
        append(body + crc_pack(crc(body)))
    return out


def decode_batch(payloads: Iterable[bytes]) -> list[Record]:
    """Decode many records; raises :class:`CorruptRecord` at the first bad one.

    Example::

        recs = records.decode_batch(e.data for e in await reader.read_batch())
    """
    return [decode(p) for p in payloads]


def is_record(payload: bytes) -> bool:
    """True if ``payload`` is a well-formed record (its CRC checks out).

    Example::

        data = records.decode(p).value if records.is_record(p) else p
    """
    return (
        len(payload) >= OVERHEAD
        and payload[0] == FORMAT_VERSION
        and _crc32c(bytes(payload)) == _RESIDUE
    )
