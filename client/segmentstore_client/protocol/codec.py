"""Turning commands into frames and byte streams into commands, with no I/O.

``encode(command) -> bytes`` gives one whole frame. ``FrameDecoder`` is fed any slicing of
a byte stream and returns whole commands. It checks each frame header (known type code,
0 <= length <= the maximum) *before* buffering the body, as h2's frame buffer does. A
frame whose body is large and incomplete moves into a buffer of its own, so its byte
fields come out as zero-copy views of that buffer: decoding a 1 MiB SegmentRead costs the
one copy out of the socket's chunks and nothing more (pieces fed as immutable ``bytes``,
as asyncio delivers them, are kept as views until the frame is complete and joined once;
small pieces are copied, so memory follows the bytes that arrived, never the declared length).
Small frames are decoded in place from the bytes fed; only the start of an incomplete
frame is copied into a buffer, which is trimmed once per ``feed`` and not once per frame.
"""

from __future__ import annotations

import struct
from typing import Final

from ..errors import FrameTooLarge, LocalProtocolError, MalformedCommand, UnknownCommandType
from .commands import DECODERS, ENCODERS, Command
from .commands_data import AppendBlockEnd
from .primitives import HEADER, Buffer, encode_str

MAX_WIRECOMMAND_SIZE: Final = 0x00FFFFFF
MAX_PAYLOAD_TO_SERVER: Final = MAX_WIRECOMMAND_SIZE - 8
"""Largest payload a Java server takes (its limit counts the 8-byte header)."""
MAX_PAYLOAD_FROM_SERVER: Final = MAX_WIRECOMMAND_SIZE
"""Largest payload a Java client takes; our client accepts the same."""

WIRE_VERSION: Final = 17
OLDEST_COMPATIBLE_VERSION: Final = 5


def encode(command: Command) -> bytes:
    """Encode one command as a complete frame (8-byte header + payload)."""
    try:
        return ENCODERS[type(command)](command)
    except KeyError:
        raise LocalProtocolError(f"{type(command).__name__} is not a wire command") from None
    except (struct.error, AttributeError, TypeError, OverflowError, ValueError) as e:
        raise LocalProtocolError(f"cannot encode {command!r}: {e}") from e


def decode(frame: Buffer) -> Command:
    """Decode exactly one whole frame; trailing bytes after its payload are an error."""
    mv = memoryview(frame)
    if len(mv) < 8:
        raise MalformedCommand(f"a frame needs 8 header bytes, got {len(mv)}")
    type_code, length = HEADER.unpack_from(mv, 0)
    if len(mv) != 8 + length:
        raise MalformedCommand(f"frame declares {length} payload bytes, has {len(mv) - 8}")
    dec = DECODERS.get(type_code)
    if dec is None:
        raise UnknownCommandType(f"unknown wire command type {type_code}")
    try:
        return dec(mv[8:], False)  # type: ignore[no-any-return]
    except (struct.error, ValueError, IndexError) as e:
        raise MalformedCommand(f"malformed type-{type_code} payload: {e}") from e


# Pieces of a big frame smaller than this are copied rather than kept as views.
_MIN_VIEW: Final = 16 * 1024


class FrameDecoder:
    """Streaming decoder: ``feed(data)`` returns every command completed by ``data``.

    After it has raised a :class:`RemoteProtocolError` the decoder is poisoned and raises
    the same error again on every later ``feed``: the connection must be closed.
    """

    __slots__ = (
        "_big",
        "_big_fill",
        "_big_len",
        "_big_threshold",
        "_big_type",
        "_buf",
        "_error",
        "_max",
    )

    def __init__(
        self, max_payload: int = MAX_PAYLOAD_FROM_SERVER, big_frame_threshold: int = 64 * 1024
    ) -> None:
        self._max = max_payload
        self._big_threshold = big_frame_threshold
        self._buf = bytearray()
        # The body of a big frame in progress, as pieces: views of immutable ``bytes``
        # the caller fed (kept, not copied) and bytearrays of copied mutable input.
        self._big: list[Buffer] | None = None
        self._big_type = 0
        self._big_len = 0
        self._big_fill = 0
        self._error: MalformedCommand | FrameTooLarge | UnknownCommandType | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as commands."""
        big_header = 8 if self._big is not None else 0
        return len(self._buf) + big_header + self._big_fill

    def feed(self, data: Buffer) -> list[Command]:
        if self._error is not None:
            raise self._error
        out: list[Command] = []
        if self._big is not None:
            data = self._fill_big(data, out)
            if not data:
                return out
        buf = self._buf
        own = bool(buf)
        if own:  # an incomplete frame is waiting: append to it
            buf += data
            mv = memoryview(buf)
        else:  # parse in place; only an incomplete tail gets copied
            mv = memoryview(data)
            if mv.format != "B":
                mv = mv.cast("B")
        n = len(mv)
        pos = 0
        try:
            while n - pos >= 8:
                type_code, length = HEADER.unpack_from(mv, pos)
                dec = DECODERS.get(type_code)
                if dec is None:
                    raise UnknownCommandType(f"unknown wire command type {type_code}")
                if length < 0 or length > self._max:
                    raise FrameTooLarge(f"frame length {length} outside 0..{self._max}")
                end = pos + 8 + length
                if end > n:
                    if length >= self._big_threshold:
                        self._start_big(type_code, length, mv[pos + 8 : n])
                        pos = n
                    break
                out.append(dec(mv[pos + 8 : end], False))
                pos = end
            if not own and pos < n:
                buf += mv[pos:]
        except (MalformedCommand, FrameTooLarge, UnknownCommandType) as e:
            self._error = e
            raise
        except (struct.error, ValueError, IndexError) as e:
            self._error = MalformedCommand(f"malformed payload: {e}")
            raise self._error from e
        finally:
            mv.release()
        if own and pos:
            del buf[:pos]
        return out

    def _start_big(self, type_code: int, length: int, have: memoryview) -> None:
        self._big, self._big_type, self._big_len, self._big_fill = [], type_code, length, 0
        self._add_piece(have)

    def _add_piece(self, piece: memoryview) -> None:
        parts = self._big
        assert parts is not None
        self._big_fill += len(piece)
        if not piece:
            return
        obj = piece.obj
        if type(obj) is bytes and len(piece) >= _MIN_VIEW and 2 * len(piece) >= len(obj):
            # Immutable, large, and most of its object: keep the view, copy once at the end.
            # Small pieces (a peer trickling a frame) are copied, so a partial frame costs
            # the bytes that arrived, not an object and a view per piece.
            parts.append(piece)
            return
        last = parts[-1] if parts else None
        if isinstance(last, bytearray):
            last += piece
        else:
            parts.append(bytearray(piece))

    def _fill_big(self, data: Buffer, out: list[Command]) -> Buffer:
        src = memoryview(data)
        if src.format != "B":
            src = src.cast("B")
        take = min(self._big_len - self._big_fill, len(src))
        self._add_piece(src if take == len(src) else src[:take])
        if self._big_fill < self._big_len:
            return b""
        parts = self._big
        assert parts is not None
        self._big, self._big_fill = None, 0
        try:
            big = None
            if self._big_type == _BLOCK_END:
                big = _block_end_with_own_data(parts, self._big_len)
            if big is None:
                # One copy joins the pieces into the frame's own buffer (none for a single
                # piece of immutable bytes); byte fields are then views of it.
                body = parts[0] if len(parts) == 1 else b"".join(parts)
                big = DECODERS[self._big_type](memoryview(body), True)
            out.append(big)
        except MalformedCommand as e:
            self._error = e
            raise
        except (struct.error, ValueError, IndexError) as e:
            self._error = MalformedCommand(f"malformed payload: {e}")
            raise self._error from e
        return src[take:]


# A big AppendBlockEnd (a server's biggest frames: the SDK's blocks of large events). Its
# body: writer id (16), sizeOfWholeEvents (i32), the data's length (i32), the data, then
# the fixed fields after it. The data is joined from the pieces into a ``bytes`` of its own,
# the one copy of it on the way in: the store takes a ``bytes`` as it is (for the log's
# CRC, its writev and the read cache), where a view of a joined body would be copied again.
_BLOCK_END: Final = AppendBlockEnd.TYPE
_BLOCK_END_HEAD: Final = 24
_I32: Final = struct.Struct(">i")


def _block_end_with_own_data(parts: list[Buffer], length: int) -> Command | None:
    """Decode a complete big AppendBlockEnd's ``parts`` with its data as a ``bytes`` of its
    own, or None when its data's length is out of range (the general decoder then raises
    what it raises for any frame)."""
    if length < _BLOCK_END_HEAD:
        return None
    head = b"".join(_span(parts, 0, _BLOCK_END_HEAD))
    (n,) = _I32.unpack_from(head, _BLOCK_END_HEAD - 4)
    stop = _BLOCK_END_HEAD + n
    if n < 0 or stop > length:
        return None
    data = b"".join(_span(parts, _BLOCK_END_HEAD, stop))
    # The other fields, decoded by the generated decoder (same checks, same defaults) from
    # the head with an empty byte array and the bytes after the data.
    rest = head[:-4] + _I32.pack(0) + b"".join(_span(parts, stop, length))
    command = DECODERS[_BLOCK_END](memoryview(rest), True)
    object.__setattr__(command, "data", data)  # a frozen dataclass's field, set once here
    return command  # type: ignore[no-any-return]


def _span(parts: list[Buffer], start: int, stop: int) -> list[memoryview]:
    """Views of bytes ``[start, stop)`` of the concatenation of ``parts`` (no copy)."""
    out: list[memoryview] = []
    pos = 0
    for part in parts:
        size = len(part)
        lo, hi = max(start - pos, 0), min(stop - pos, size)
        if lo < hi:
            out.append(memoryview(part)[lo:hi])
        pos += size
        if pos >= stop:
            break
    return out


_SEGMENT_READ_MID: Final = struct.Struct(">q??i")
_I64: Final = struct.Struct(">q")


def segment_read_parts(
    segment: str, offset: int, at_tail: bool, end_of_segment: bool, data: Buffer, request_id: int
) -> tuple[bytes, Buffer, bytes]:
    """A SegmentRead frame as (head, data, tail) so that ``data`` is never copied.

    ``b"".join(parts)`` equals ``encode(SegmentRead(...))``; a server hands the three pieces
    to ``transport.writelines`` and the read's data goes to the socket straight from the
    read cache.
    """
    name = encode_str(segment)
    n = len(data)
    head = (
        HEADER.pack(10, len(name) + 22 + n)
        + name
        + _SEGMENT_READ_MID.pack(offset, at_tail, end_of_segment, n)
    )
    return head, data, _I64.pack(request_id)
