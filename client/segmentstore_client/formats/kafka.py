"""Kafka 0.10 messages and message sets (magic 0 and 1), byte for byte.

A message, all integers big-endian::

    CRC        u32   CRC-32 (IEEE) of every byte after it
    MAGIC      i8    0 (Kafka 0.8/0.9) or 1 (0.10)
    ATTRIBUTES i8    bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 timestamp
                     type (0 create time, 1 log-append time; magic 1 only), 4-7 reserved
    TIMESTAMP  i64   milliseconds since the epoch, -1 = none (magic 1 only)
    KEY_SIZE   i32   -1 = null key, then the key
    VALUE_SIZE i32   -1 = null value, then the value

A message set (a ``.log`` segment file, a fetch response) is a run of entries
``OFFSET (i64) | MESSAGE_SIZE (i32) | MESSAGE``. A compressed message (codec bits not 0)
is a *wrapper*: its value is a compressed message set of uncompressed inner messages.
Kafka 0.10's wrapper rules, which this module follows when reading and writing:

- magic 1: inner offsets are relative (0, 1, ...) and the wrapper carries the absolute
  offset of the last inner message, so inner ``i`` sits at
  ``wrapper.offset - last_inner.offset + inner.offset``; magic 0: inner offsets are
  absolute.
- magic 1, create time: each inner message keeps its own timestamp and the wrapper
  carries the largest one; log-append time: the wrapper's timestamp (and type) replaces
  every inner message's.
- inner messages are never compressed themselves, and share the wrapper's magic.

Choices where the format leaves room (tested, and written down in the README): reserved
attribute bits 4-7 are kept as they are and otherwise ignored (Kafka ignores them);
decoding a lone message (:func:`decode_message`) returns a wrapper as it is, while
message-set decoding flattens wrappers into their inner messages; the decoder rejects a
declared message size above ``max_message_size`` before buffering the message.

Every decoding failure is a named error (:mod:`.errors`): :class:`CrcMismatch`,
:class:`TruncatedInput`, :class:`InvalidLayout` (:class:`TooLarge`), or
:class:`CodecUnavailable` for snappy / lz4 without their packages.

Example::

    from segmentstore_client.formats import kafka
    data = kafka.encode_message_set(
        [kafka.Message(b"v1", key=b"k", timestamp=1_700_000_000_000), kafka.Message(b"v2")],
        codec="gzip",
    )
    for m in kafka.decode_message_set(data):
        print(m.offset, m.key, m.value, m.timestamp)
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from ..records import _parse, _render
from . import _compression
from .errors import (
    CodecUnavailable,
    CrcMismatch,
    FormatError,
    InvalidLayout,
    TooLarge,
    TruncatedInput,
)

__all__ = [
    "LOG_ENTRY",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "Codec",
    "CodecUnavailable",
    "Message",
    "MessageSetDecoder",
    "TimestampType",
    "codec_available",
    "decode_message",
    "decode_message_set",
    "encode_message",
    "encode_message_set",
    "iter_messages",
    "validate_message_set",
]

NO_TIMESTAMP: Final = -1
LOG_OVERHEAD: Final = 12
"""Bytes before each message in a message set: offset (8) and size (4)."""
DEFAULT_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024

_CODEC_MASK: Final = 0x07
_TS_TYPE_BIT: Final = 0x08
_CRC: Final = struct.Struct(">I")
LOG_ENTRY: Final = struct.Struct(">qi")
"""The offset and size in front of each message of a message set."""
_HEAD0: Final = struct.Struct(">bbi")  # magic, attributes, key size
_HEAD1: Final = struct.Struct(">bbqi")  # magic, attributes, timestamp, key size
_I32: Final = struct.Struct(">i")
_MIN_SIZE: Final = (4 + _HEAD0.size + 4, 4 + _HEAD1.size + 4)


class Codec(enum.IntEnum):
    """Attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3


class TimestampType(enum.IntEnum):
    """Attribute bit 3 (magic 1)."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def codec_available(codec: str | int) -> bool:
    """True if messages with ``codec`` can be written and read here (snappy and lz4 need
    their packages: ``pip install 'segmentstore[formats]'``).

    Example::

        codec = "lz4" if kafka.codec_available("lz4") else "gzip"
    """
    return _compression.available(_codec(codec))


def _codec(codec: str | int) -> int:
    if isinstance(codec, str):
        try:
            return Codec[codec.upper()].value
        except KeyError:
            raise ValueError(f"unknown Kafka codec {codec!r}: none, gzip, snappy or lz4") from None
    if not 0 <= codec <= 3:
        raise ValueError(f"unknown Kafka codec {codec}")
    return int(codec)


@dataclass(slots=True)
class Message:
    """One Kafka message: what :func:`decode_message_set` yields and what
    :func:`encode_message_set` takes.

    ``timestamp`` is in milliseconds (-1 = none; magic 0 has none). ``attributes`` is the
    raw attribute byte (codec bits, timestamp type bit, reserved bits). ``offset`` is the
    message's absolute offset when decoded from a message set. ``crc`` is the stored CRC
    when decoded (0 otherwise).

    Example::

        m = kafka.Message(b"value", key=b"key", timestamp=1_700_000_000_000)
        assert kafka.decode_message(m.encode()).value == b"value"
    """

    value: bytes | None
    key: bytes | None = None
    timestamp: int = NO_TIMESTAMP
    attributes: int = 0
    magic: int = 1
    offset: int = 0
    crc: int = 0

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType | None:
        """None for magic 0 (no timestamps)."""
        if self.magic == 0:
            return None
        return TimestampType((self.attributes & _TS_TYPE_BIT) >> 3)

    def replace(self, **changes: Any) -> Message:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def encode(self) -> bytes:
        """The message's bytes (no offset and size in front)."""
        return encode_message(
            self.value,
            self.key,
            timestamp=self.timestamp,
            attributes=self.attributes,
            magic=self.magic,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields: key and value as text when UTF-8, else ``{"base64": ...}``.

        Example::

            print(json.dumps(m.to_dict()))
        """
        tst = self.timestamp_type
        return {
            "offset": self.offset,
            "magic": self.magic,
            "attributes": self.attributes,
            "codec": self.codec.name.lower(),
            "timestamp": self.timestamp,
            "timestamp_type": None if tst is None else tst.name.lower(),
            "key": None if self.key is None else _render(self.key),
            "value": None if self.value is None else _render(self.value),
        }

    def to_json(self, **dumps_kwargs: Any) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), **dumps_kwargs)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Message:
        """The message a :meth:`to_dict` dictionary describes (CRC not kept)."""
        try:
            key, value = obj.get("key"), obj.get("value")
            attributes = int(obj.get("attributes", 0))
            if "attributes" not in obj and obj.get("timestamp_type") == "log_append_time":
                attributes |= _TS_TYPE_BIT
            return cls(
                value=None if value is None else _parse(value),
                key=None if key is None else _parse(key),
                timestamp=int(obj.get("timestamp", NO_TIMESTAMP)),
                attributes=attributes,
                magic=int(obj.get("magic", 1)),
                offset=int(obj.get("offset", 0)),
            )
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a Kafka message dictionary: {e!r}") from None


# -- one message -------------------------------------------------------------------------


def encode_message(
    value: bytes | None,
    key: bytes | None = None,
    *,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
    magic: int = 1,
) -> bytes:
    """The bytes of one message (CRC first; no offset and size in front).

    Example::

        data = kafka.encode_message(b"v", b"k", timestamp=1_700_000_000_000)
    """
    if not 0 <= attributes <= 0xFF:
        raise ValueError(f"attributes must fit in one byte, not {attributes}")
    if attributes & _CODEC_MASK > 3:
        raise ValueError(f"attribute codec bits {attributes & _CODEC_MASK} name no codec")
    attrs = attributes - 256 if attributes > 0x7F else attributes
    if magic == 1:
        head = _HEAD1.pack(1, attrs, timestamp, -1 if key is None else len(key))
    elif magic == 0:
        if timestamp != NO_TIMESTAMP:
            raise ValueError("magic 0 messages have no timestamp")
        head = _HEAD0.pack(0, attrs, -1 if key is None else len(key))
    else:
        raise ValueError(f"magic must be 0 or 1, not {magic}")
    parts = [head]
    if key is not None:
        parts.append(key)
    parts.append(_I32.pack(-1 if value is None else len(value)))
    if value is not None:
        parts.append(value)
    body = b"".join(parts)
    return _CRC.pack(zlib.crc32(body)) + body


def decode_message(data: bytes | memoryview, *, offset: int = 0) -> Message:
    """Decode exactly one message (as :func:`encode_message` makes): CRC checked, every
    length checked against the bytes present. A wrapper comes back as it is.

    Example::

        m = kafka.decode_message(data)
    """
    mv = memoryview(data)
    return _decode_one(mv, 0, len(mv), offset)


def _decode_one(mv: memoryview, start: int, end: int, offset: int) -> Message:
    """The message in ``mv[start:end]`` (the one hot path of every decoder here)."""
    n = end - start
    if n < _MIN_SIZE[0]:
        raise TruncatedInput(f"a Kafka message needs at least {_MIN_SIZE[0]} bytes, got {n}")
    magic = mv[start + 4]
    if magic == 1:
        if n < _MIN_SIZE[1]:
            raise TruncatedInput(f"a magic 1 message needs at least {_MIN_SIZE[1]} bytes")
        _, attrs, timestamp, key_size = _HEAD1.unpack_from(mv, start + 4)
        pos = start + 4 + _HEAD1.size
    elif magic == 0:
        _, attrs, key_size = _HEAD0.unpack_from(mv, start + 4)
        timestamp = NO_TIMESTAMP
        pos = start + 4 + _HEAD0.size
    else:
        raise InvalidLayout(f"unknown Kafka message magic {magic} at offset {offset}")
    if attrs & _CODEC_MASK > 3:
        raise InvalidLayout(
            f"unknown codec {attrs & _CODEC_MASK} in the message at offset {offset}"
        )
    key_end = pos + key_size if key_size >= 0 else _null(key_size, pos, "key", offset)
    if key_end + 4 > end:
        raise TruncatedInput(f"Kafka message at offset {offset} ends inside its key or value size")
    (value_size,) = _I32.unpack_from(mv, key_end)
    vstart = key_end + 4
    vend = vstart + value_size if value_size >= 0 else _null(value_size, vstart, "value", offset)
    if vend != end:
        if vend > end:
            raise TruncatedInput(f"the value of the message at offset {offset} is cut short")
        raise InvalidLayout(f"{end - vend} stray bytes after the Kafka message at offset {offset}")
    (crc,) = _CRC.unpack_from(mv, start)
    if zlib.crc32(mv[start + 4 : end]) != crc:
        raise CrcMismatch(f"Kafka message CRC mismatch at offset {offset}")
    return Message(
        None if value_size < 0 else mv[vstart:vend].tobytes(),
        None if key_size < 0 else mv[pos:key_end].tobytes(),
        timestamp,
        attrs & 0xFF,
        magic,
        offset,
        crc,
    )


def _null(size: int, pos: int, what: str, offset: int) -> int:
    if size == -1:
        return pos
    raise InvalidLayout(f"negative {what} size {size} in the message at offset {offset}")


# -- message sets ------------------------------------------------------------------------


def encode_message_set(
    messages: Iterable[Message],
    *,
    codec: str | int = "none",
    magic: int = 1,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int = NO_TIMESTAMP,
    wrapper_offset: int | None = None,
    wrapper_timestamp: int | None = None,
    level: int | None = None,
) -> bytes:
    """A message set of ``messages`` at offsets ``base_offset``, ``base_offset + 1``, ...
    all written with ``magic`` (each message's key, value, timestamp and non-codec
    attribute bits are kept).

    With a ``codec`` the result is one wrapper message holding the compressed inner set,
    built by Kafka 0.10's rules (module docstring). A broker-written log has the wrapper
    at the last inner offset and, for create time, the largest inner timestamp; a
    producer (kafka-python, the Java client) writes offset 0 and timestamp 0 (magic 1) or
    -1: pass ``wrapper_offset`` / ``wrapper_timestamp`` to reproduce those bytes.
    ``timestamp_type=LOG_APPEND_TIME`` marks the wrapper and stamps it with
    ``log_append_time``.

    Example::

        data = kafka.encode_message_set([kafka.Message(b"a"), kafka.Message(b"b")], codec="lz4")
    """
    cid = _codec(codec)
    msgs = list(messages)
    if cid == Codec.NONE:
        if timestamp_type != TimestampType.CREATE_TIME:
            msgs = [m.replace(attributes=m.attributes | _TS_TYPE_BIT) for m in msgs]
        return _plain_set(msgs, magic, base_offset, relative=False)
    if not msgs:
        raise ValueError("a compressed message set needs at least one message")
    if any(m.attributes & _CODEC_MASK for m in msgs):
        raise ValueError("inner messages of a compressed set must not be compressed")
    inner = _plain_set(msgs, magic, base_offset, relative=magic == 1)
    value = _compression.compress(cid, inner, magic, level)
    attrs = cid
    ts = NO_TIMESTAMP
    if magic == 1:
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= _TS_TYPE_BIT
            ts = log_append_time
        else:
            ts = max(m.timestamp for m in msgs)
        if wrapper_timestamp is not None:
            ts = wrapper_timestamp
    off = base_offset + len(msgs) - 1 if wrapper_offset is None else wrapper_offset
    wrapper = encode_message(value, None, timestamp=ts, attributes=attrs, magic=magic)
    return LOG_ENTRY.pack(off, len(wrapper)) + wrapper


def _plain_set(msgs: list[Message], magic: int, base_offset: int, *, relative: bool) -> bytes:
    parts: list[bytes] = []
    first = 0 if relative else base_offset
    for i, m in enumerate(msgs):
        ts = m.timestamp if magic == 1 else NO_TIMESTAMP
        attrs = m.attributes if magic == 1 else m.attributes & ~_TS_TYPE_BIT
        body = encode_message(m.value, m.key, timestamp=ts, attributes=attrs, magic=magic)
        parts.append(LOG_ENTRY.pack(first + i, len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_message_set(
    data: bytes | memoryview, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> list[Message]:
    """Every message of a complete message set, wrappers flattened (module docstring).
    A set that ends inside an entry raises :class:`TruncatedInput`; use
    :class:`MessageSetDecoder` for input that arrives in pieces.

    Example::

        for m in kafka.decode_message_set(open("00000000000000000000.log", "rb").read()):
            print(m.offset, m.value)
    """
    dec = MessageSetDecoder(max_message_size=max_message_size)
    out = dec.feed(data)
    dec.finish()
    return out


def validate_message_set(
    data: bytes | memoryview, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> int:
    """Check every CRC, length and wrapper of a message set; return its message count.

    Example::

        n = kafka.validate_message_set(data)   # raises CrcMismatch, TruncatedInput, ...
    """
    return len(decode_message_set(data, max_message_size=max_message_size))


class MessageSetDecoder:
    """Incremental message-set decoder (no I/O): ``feed`` bytes as they arrive, get the
    messages completed so far; ``finish`` raises :class:`TruncatedInput` if a partial
    entry is left. A declared size above ``max_message_size`` raises :class:`TooLarge`
    before its body is buffered.

    Example::

        dec = kafka.MessageSetDecoder()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                for m in dec.feed(chunk):
                    ...
        dec.finish()
    """

    def __init__(
        self, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, _inner: int | None = None
    ) -> None:
        self.max_message_size = max_message_size
        self._inner = _inner is not None
        self._magic = _inner
        self._error: FormatError | None = None
        self._pos = 0
        self._buf = bytearray()
        self.consumed = 0
        """Bytes of input fully decoded so far."""

    def feed(self, data: bytes | memoryview) -> list[Message]:
        """The messages completed by ``data``. When an entry is damaged, the messages
        before it are returned first and its error is raised by the next ``feed`` or
        ``finish`` (so nothing good is lost); the decoder stays failed."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        whole = not buf  # decode straight from ``data``; keep only a partial tail
        if not whole:
            buf += data
        out: list[Message] = []
        pos = 0
        try:
            with memoryview(data if whole else buf) as mv:
                pos = self._decode(mv, out)
        except FormatError as e:
            if not self._inner:
                e = type(e)(f"{e} (entry at byte {self.consumed + self._pos} of the input)")
            self._error = e
            pos = self._pos
            if not out:
                raise e from None
        if whole:
            buf += memoryview(data)[pos:]
        else:
            del buf[:pos]
        self.consumed += pos
        return out

    def _decode(self, mv: memoryview, out: list[Message]) -> int:
        pos = self._pos = 0
        n = len(mv)
        limit = self.max_message_size
        minimum = _MIN_SIZE[0]
        magic = self._magic
        unpack = LOG_ENTRY.unpack_from
        append = out.append
        while pos + LOG_OVERHEAD <= n:
            offset, size = unpack(mv, pos)
            if not minimum <= size <= limit:
                if size > limit:
                    raise TooLarge(
                        f"message size {size} at offset {offset} exceeds the limit of {limit} bytes"
                    )
                raise InvalidLayout(
                    f"message size {size} at offset {offset} is below the minimum of {minimum}"
                )
            end = pos + LOG_OVERHEAD + size
            if end > n:
                break
            msg = _decode_one(mv, pos + LOG_OVERHEAD, end, offset)
            if msg.attributes & _CODEC_MASK:
                if magic is not None:
                    raise InvalidLayout(
                        f"a compressed wrapper holds the compressed message at offset {offset}"
                    )
                out.extend(self._unwrap(msg))
            elif magic is not None and msg.magic != magic:
                raise InvalidLayout(
                    f"a magic {magic} wrapper holds the magic {msg.magic} message at offset {offset}"
                )
            else:
                append(msg)
            pos = self._pos = end
        return pos

    def finish(self) -> None:
        if self._error is not None:
            raise self._error
        if self._buf:
            raise TruncatedInput(
                f"the message set ends inside an entry ({len(self._buf)} bytes left over "
                f"after byte {self.consumed})"
            )

    def _unwrap(self, w: Message) -> list[Message]:
        if w.value is None:
            raise InvalidLayout(f"compressed wrapper at offset {w.offset} has a null value")
        raw = _compression.decompress(w.codec, w.value, w.magic, self.max_message_size)
        inner = MessageSetDecoder(max_message_size=self.max_message_size, _inner=w.magic)
        msgs = inner.feed(raw) if raw else []
        try:
            inner.finish()
        except TruncatedInput as e:
            raise InvalidLayout(f"wrapper at offset {w.offset}: inner set {e}") from None
        if not msgs:
            raise InvalidLayout(f"wrapper at offset {w.offset} holds no messages")
        if w.magic == 0:
            return msgs
        shift = w.offset - msgs[-1].offset
        log_append = w.attributes & _TS_TYPE_BIT
        for m in msgs:  # fresh objects of our own: adjusted in place
            m.offset += shift
            if log_append:
                m.timestamp = w.timestamp
                m.attributes |= _TS_TYPE_BIT
        return msgs


def iter_messages(
    chunks: Iterable[bytes], *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> Iterator[Message]:
    """The messages of a message set that arrives as ``chunks`` (e.g. file reads).

    Example::

        with open(path, "rb") as f:
            for m in kafka.iter_messages(iter(lambda: f.read(1 << 20), b"")):
                ...
    """
    dec = MessageSetDecoder(max_message_size=max_message_size)
    for chunk in chunks:
        yield from dec.feed(chunk)
    dec.finish()
