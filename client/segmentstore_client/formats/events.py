"""The namespaced event format (bromine's event-passing layout), byte for byte.

An event, all integers big-endian::

    total_length   u64   header_length + payload length (the two length fields
                         themselves are not counted)
    header_length  u16
    header               format_version [u8; 3] (we write 0.9.0)
                         id             u64
                         ref_id_exists  u8   0xFF: a ref id follows; 0x00: none
                         ref_id         u64  (only after 0xFF)
                         namespace_len  u16  0 = no namespace, then UTF-8 bytes
                         name_len       u16  then UTF-8 bytes
                         ...                 later fields a newer writer may append
    payload              total_length - header_length bytes

Payloads are raw bytes, a *tandem* of two payloads (``u64 length | bytes`` twice), or a
*serde* payload: one format id byte (0 MessagePack, 1 bincode, 2 postcard, 3 JSON) then
the serialized value.

Choices where the text leaves room (tested, and in the README):

- The table says the payload is "total_length - data_length" bytes; as the reference
  implementation writes it, ``total_length`` counts header and payload but not the ten
  bytes of the two length fields, so the payload is ``total_length - header_length``.
- Forward compatibility: a header longer than the fields known here is accepted; the
  unknown tail is kept in :attr:`Event.header_extra` and written back unchanged. A
  header shorter than its own fields is :class:`TruncatedInput`. A format version whose
  major number is not 0 is refused (the reference reader does the same).
- A ref-id flag other than 0x00 or 0xFF, a name or namespace that is not UTF-8, and a
  ``total_length`` below ``header_length`` are :class:`InvalidLayout`; input that ends
  early is :class:`TruncatedInput`; a ``total_length`` above the decoder's limit is
  :class:`TooLarge` before anything is buffered.
- The format has no checksum: a flipped bit in a length field or the ref-id flag is
  caught, one in the id, a name or the payload is not (store events inside
  :mod:`segmentstore_client.records` if that matters).
- An empty namespace cannot be told from none on the wire: the encoder refuses ``""``.

Example::

    from segmentstore_client.formats import events
    data = events.Event("ping", b"hi", id=7, namespace="health").encode()
    ev = events.decode_event(data)
    assert (ev.namespace, ev.name, ev.data) == ("health", "ping", b"hi")
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import os
import struct
from dataclasses import dataclass
from typing import Any, Final

from ..records import _parse, _render
from .errors import CodecUnavailable, InvalidLayout, TooLarge, TruncatedInput

__all__ = [
    "FORMAT_VERSION",
    "Event",
    "EventDecoder",
    "SerdeFormat",
    "decode_event",
    "decode_serde",
    "decode_tandem",
    "dumps",
    "encode_event",
    "encode_serde",
    "encode_tandem",
    "loads",
    "new_event_id",
]

FORMAT_VERSION: Final = b"\x00\x09\x00"
PREFIX: Final = 10
"""Bytes before the header: total_length (8) and header_length (2)."""
DEFAULT_MAX_EVENT_SIZE: Final = 64 * 1024 * 1024
_MAX_U16: Final = 0xFFFF

_LENGTHS: Final = struct.Struct(">QH")
_ID_FLAG: Final = struct.Struct(">QB")
_U64: Final = struct.Struct(">Q")
_U16: Final = struct.Struct(">H")
_REF: Final = 0xFF


class SerdeFormat(enum.IntEnum):
    """The format id byte of a serde payload."""

    MESSAGEPACK = 0
    BINCODE = 1
    POSTCARD = 2
    JSON = 3


_ids = itertools.count(1)
_id_prefix = int.from_bytes(os.urandom(4), "big") << 32


def new_event_id() -> int:
    """A fresh 64-bit event id: a random 32-bit prefix per process, then a counter, so
    ids from different processes do not collide.

    Example::

        ev = events.Event("ping", id=events.new_event_id())
    """
    return _id_prefix | (next(_ids) & 0xFFFFFFFF)


@dataclass(slots=True)
class Event:
    """One namespaced event. ``ref_id`` names the event this one replies to.

    Example::

        reply = events.Event("pong", b"", id=events.new_event_id(), ref_id=request.id)
    """

    name: str
    data: bytes = b""
    id: int = 0
    ref_id: int | None = None
    namespace: str | None = None
    format_version: bytes = FORMAT_VERSION
    header_extra: bytes = b""

    def replace(self, **changes: Any) -> Event:
        return dataclasses.replace(self, **changes)

    def encode(self) -> bytes:
        """The event's bytes."""
        return encode_event(
            self.name,
            self.data,
            id=self.id,
            ref_id=self.ref_id,
            namespace=self.namespace,
            format_version=self.format_version,
            header_extra=self.header_extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; the payload as text when UTF-8, else ``{"base64": ...}``.

        Example::

            print(json.dumps(ev.to_dict()))
        """
        d: dict[str, Any] = {
            "format_version": ".".join(str(b) for b in self.format_version),
            "id": self.id,
            "ref_id": self.ref_id,
            "namespace": self.namespace,
            "name": self.name,
            "data": _render(self.data),
        }
        if self.header_extra:
            d["header_extra"] = _render(self.header_extra)
        return d

    def to_json(self, **dumps_kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **dumps_kwargs)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Event:
        """The event a :meth:`to_dict` dictionary describes."""
        try:
            version = bytes(int(p) for p in str(obj.get("format_version", "0.9.0")).split("."))
            extra = obj.get("header_extra")
            ref = obj.get("ref_id")
            return cls(
                name=str(obj["name"]),
                data=_parse(obj.get("data", "")),
                id=int(obj.get("id", 0)),
                ref_id=None if ref is None else int(ref),
                namespace=obj.get("namespace"),
                format_version=version,
                header_extra=b"" if extra is None else _parse(extra),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not an event dictionary: {e!r}") from None


def _text(s: str, what: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > _MAX_U16:
        raise ValueError(f"the {what} is {len(b)} bytes; the format allows {_MAX_U16}")
    return b


def encode_event(
    name: str,
    data: bytes = b"",
    *,
    id: int,
    ref_id: int | None = None,
    namespace: str | None = None,
    format_version: bytes = FORMAT_VERSION,
    header_extra: bytes = b"",
) -> bytes:
    """The bytes of one event.

    Example::

        data = events.encode_event("ping", b"", id=1, namespace="health")
    """
    if len(format_version) != 3:
        raise ValueError("format_version must be 3 bytes")
    if namespace == "":
        raise ValueError("an empty namespace reads back as none; pass None")
    ns = b"" if namespace is None else _text(namespace, "namespace")
    nm = _text(name, "name")
    if not 0 <= id < 1 << 64 or (ref_id is not None and not 0 <= ref_id < 1 << 64):
        raise ValueError("event ids are unsigned 64-bit integers")
    parts = [format_version, _ID_FLAG.pack(id, 0 if ref_id is None else _REF)]
    if ref_id is not None:
        parts.append(_U64.pack(ref_id))
    parts += [_U16.pack(len(ns)), ns, _U16.pack(len(nm)), nm, header_extra]
    header = b"".join(parts)
    if len(header) > _MAX_U16:
        raise ValueError(f"the header is {len(header)} bytes; the format allows {_MAX_U16}")
    return _LENGTHS.pack(len(header) + len(data), len(header)) + header + data


def decode_event(
    data: bytes | memoryview, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE
) -> Event:
    """Decode exactly one event (trailing bytes are :class:`InvalidLayout`).

    Example::

        ev = events.decode_event(segment_event.data)
    """
    mv = memoryview(data)
    ev, end = _decode_at(mv, 0, max_event_size)
    if ev is None:
        raise TruncatedInput(f"the event needs {end} bytes, got {len(mv)}")
    if end != len(mv):
        raise InvalidLayout(f"{len(mv) - end} stray bytes after the event")
    return ev


def _decode_at(mv: memoryview, pos: int, limit: int) -> tuple[Event | None, int]:
    """The event at ``pos`` and where it ends, or (None, bytes needed) if incomplete."""
    n = len(mv)
    if pos + PREFIX > n:
        return None, pos + PREFIX
    total, hlen = _LENGTHS.unpack_from(mv, pos)
    if total < hlen:
        raise InvalidLayout(f"total_length {total} is below header_length {hlen}")
    if total > limit:
        raise TooLarge(f"event of {total} bytes exceeds the limit of {limit}")
    end = pos + PREFIX + total
    if end > n:
        return None, end
    hstart = pos + PREFIX
    return _header(mv[hstart : hstart + hlen], mv[hstart + hlen : end]), end


def _header(h: memoryview, payload: memoryview) -> Event:
    n = len(h)
    if n < 3 + _ID_FLAG.size:
        raise TruncatedInput(f"header of {n} bytes ends inside its fixed fields")
    version = h[:3].tobytes()
    if version[0] != FORMAT_VERSION[0]:
        raise InvalidLayout(f"unsupported format version {'.'.join(map(str, version))}")
    ev_id, flag = _ID_FLAG.unpack_from(h, 3)
    pos = 3 + _ID_FLAG.size
    ref: int | None = None
    if flag == _REF:
        if pos + 8 > n:
            raise TruncatedInput("header ends inside the ref id")
        (ref,) = _U64.unpack_from(h, pos)
        pos += 8
    elif flag != 0:
        raise InvalidLayout(f"ref id flag 0x{flag:02x} is neither 0x00 nor 0xFF")
    ns, pos = _string(h, pos, "namespace")
    name, pos = _string(h, pos, "name")
    return Event(
        name=name,
        data=payload.tobytes(),
        id=ev_id,
        ref_id=ref,
        namespace=ns or None,
        format_version=version,
        header_extra=h[pos:].tobytes(),
    )


def _string(h: memoryview, pos: int, what: str) -> tuple[str, int]:
    if pos + 2 > len(h):
        raise TruncatedInput(f"header ends before the {what} length")
    (size,) = _U16.unpack_from(h, pos)
    pos += 2
    if pos + size > len(h):
        raise TruncatedInput(f"header ends inside the {what}")
    try:
        return str(h[pos : pos + size], "utf-8"), pos + size
    except UnicodeDecodeError:
        raise InvalidLayout(f"the {what} is not UTF-8") from None


class EventDecoder:
    """Events from a byte stream (no I/O): ``feed`` bytes, get the events completed so
    far; ``finish`` raises :class:`TruncatedInput` if a partial event is left.

    Example::

        dec = events.EventDecoder()
        for ev in dec.feed(chunk):
            ...
    """

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self.max_event_size = max_event_size
        self._buf = bytearray()

    def feed(self, data: bytes | memoryview) -> list[Event]:
        buf = self._buf
        buf += data
        out: list[Event] = []
        pos = 0
        with memoryview(buf) as mv:
            while True:
                ev, end = _decode_at(mv, pos, self.max_event_size)
                if ev is None:
                    break
                out.append(ev)
                pos = end
        del buf[:pos]
        return out

    def finish(self) -> None:
        if self._buf:
            raise TruncatedInput(f"the stream ends inside an event ({len(self._buf)} bytes)")


# -- payloads ----------------------------------------------------------------------------


def encode_tandem(first: bytes, second: bytes) -> bytes:
    """A tandem payload: two payloads, each with its u64 length.

    Example::

        data = events.encode_tandem(events.encode_serde(SerdeFormat.JSON, b"{}"), raw)
    """
    return _U64.pack(len(first)) + first + _U64.pack(len(second)) + second


def decode_tandem(data: bytes | memoryview) -> tuple[bytes, bytes]:
    """The two payloads of a tandem payload (trailing bytes are :class:`InvalidLayout`)."""
    mv = memoryview(data)
    parts = []
    pos = 0
    for which in ("first", "second"):
        if pos + 8 > len(mv):
            raise TruncatedInput(f"tandem payload ends before the {which} length")
        (size,) = _U64.unpack_from(mv, pos)
        pos += 8
        if size > len(mv) - pos:
            raise TruncatedInput(f"tandem payload ends inside the {which} payload")
        parts.append(mv[pos : pos + size].tobytes())
        pos += size
    if pos != len(mv):
        raise InvalidLayout(f"{len(mv) - pos} stray bytes after the tandem payload")
    return parts[0], parts[1]


def encode_serde(format_id: SerdeFormat | int, payload: bytes) -> bytes:
    """A serde payload: the format id byte, then ``payload`` as serialized.

    Example::

        data = events.encode_serde(SerdeFormat.JSON, json.dumps(obj).encode())
    """
    return bytes([SerdeFormat(format_id)]) + payload


def decode_serde(data: bytes | memoryview) -> tuple[SerdeFormat, bytes]:
    """The format id and serialized bytes of a serde payload (an unknown id is
    :class:`InvalidLayout`)."""
    if not len(data):
        raise TruncatedInput("a serde payload needs its format id byte")
    try:
        fmt = SerdeFormat(data[0])
    except ValueError:
        raise InvalidLayout(f"unknown serde format id {data[0]}") from None
    return fmt, bytes(data[1:])


def dumps(obj: Any, format_id: SerdeFormat = SerdeFormat.JSON) -> bytes:
    """``obj`` as a serde payload in JSON or MessagePack (bincode and postcard are
    Rust-only layouts with no schema on the wire; pass their bytes to
    :func:`encode_serde`).

    Example::

        data = events.dumps({"qty": 3})          # b'\\x03{"qty": 3}'
    """
    if format_id == SerdeFormat.JSON:
        return encode_serde(format_id, json.dumps(obj, separators=(",", ":")).encode())
    if format_id == SerdeFormat.MESSAGEPACK:
        return encode_serde(format_id, _msgpack().packb(obj))
    raise ValueError(f"dumps writes JSON or MessagePack, not {SerdeFormat(format_id).name}")


def loads(data: bytes | memoryview) -> Any:
    """The value of a JSON or MessagePack serde payload.

    Example::

        events.loads(events.dumps([1, 2]))       # [1, 2]
    """
    fmt, body = decode_serde(data)
    try:
        if fmt == SerdeFormat.JSON:
            return json.loads(body)
        if fmt == SerdeFormat.MESSAGEPACK:
            return _msgpack().unpackb(body)
    except ValueError as e:  # json and msgpack errors derive from ValueError
        raise InvalidLayout(f"{fmt.name} payload does not parse: {e}") from None
    raise InvalidLayout(f"loads reads JSON or MessagePack, not {fmt.name}")


def _msgpack() -> Any:
    try:
        import msgpack
    except ImportError:
        raise CodecUnavailable("MessagePack payloads need the 'msgpack' package") from None
    return msgpack
