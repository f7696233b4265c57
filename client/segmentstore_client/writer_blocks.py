"""Append blocks of an event writer: records framed as AppendBlockEnd frames, the
acknowledgements that resolve with them, and where a batch is cut into blocks.

Contract: no I/O and no session state. A :class:`Block` holds contiguous event numbers
``last - count + 1 .. last`` as one ready-to-send frame (built with one join around the
head and tail from ``protocol.append_block_end_parts``), or, for a block of a few large
events, as the frame's parts (the caller's payloads themselves, never copied here: sent
with ``writelines``, which uvloop hands to one ``writev``); :func:`trim_block` drops the
events a server already holds; :class:`Ack` is the awaitable handed to callers, shared by
the events of one block. A block's future is an :class:`AckFuture`: settling it settles
each awaiting Ack's own waiter at once, so the awaiting task resumes one loop turn after
the ack's bytes are read (``asyncio.shield`` took two: its inner callback, then the task).
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from bisect import bisect_left
from collections.abc import Callable, Generator
from operator import add
from typing import Any, Final

from .errors import EventTooLarge
from .protocol import (
    APPEND_BLOCK_END_HEAD_SIZE,
    APPEND_BLOCK_END_TAIL_SIZE,
    append_block_end_parts,
)
from .protocol.events import MAX_EVENT_SIZE

_EVENT_HEADER: Final = struct.Struct(">ii")


class _HeaderCache(dict[int, bytes]):
    """Event record headers by payload length: events of a stream mostly repeat a few
    lengths, and a dict lookup from C (``map``) beats packing a struct per event."""

    def __missing__(self, length: int) -> bytes:
        if len(self) >= 65536:
            self.clear()
        header = self[length] = _EVENT_HEADER.pack(0, length)
        return header


event_header = _HeaderCache().__getitem__
MAX_BLOCK: Final = 4 * 1024 * 1024
ONLY_BYTES: Final = {bytes}
# A block of at most PARTS_MAX_EVENTS events holding at least PARTS_MIN_BYTES stays in
# parts (issue 19, round 7): joining 1 MiB into fresh memory cost the client a page fault
# per 4 KiB (221-280 per MiB measured) besides the copy.
PARTS_MIN_BYTES: Final = 256 * 1024
PARTS_MAX_EVENTS: Final = 64
Frame = bytes | tuple[bytes, ...]  # one frame's bytes, joined or as its parts in order


def event_too_large(size: int) -> EventTooLarge:
    """The error for an event of ``size`` bytes, over the wire's maximum.

    Example: ``raise event_too_large(len(data))``
    """
    return EventTooLarge(f"event of {size} bytes exceeds the {MAX_EVENT_SIZE}-byte maximum")


class AckFuture(asyncio.Future[None]):
    """The future of a batch of events, which several :class:`Ack` awaits may share.

    Each await registers a waiter future of its own; settling this future settles every
    waiter in the same call (no callback hop). Cancelling an awaiting task cancels only its
    waiter, never the shared ack (what ``asyncio.shield`` guaranteed).
    """

    __slots__ = ("waiters",)

    def __init__(self, *, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.waiters: list[asyncio.Future[None]] | None = None

    def set_result(self, result: None, /) -> None:
        super().set_result(result)
        # _wake's success case, inlined: the ack of every event runs it
        waiters = self.waiters
        if waiters:
            self.waiters = None
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def set_exception(self, exception: type | BaseException, /) -> None:
        super().set_exception(exception)
        self._wake()

    def cancel(self, msg: Any | None = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:
            self._wake()
        return cancelled

    def _wake(self) -> None:
        waiters = self.waiters
        if not waiters:
            return
        self.waiters = None
        if self.cancelled():
            for w in waiters:
                w.cancel()
            return
        exc = self.exception()  # retrieved here: each waiter's task gets it
        for w in waiters:
            if not w.done():
                if exc is None:
                    w.set_result(None)
                else:
                    w.set_exception(exc)


class Ack:
    """Awaitable acknowledgement of a write: resolves when the server made the event
    durable (awaiting returns None), or raises the error that stopped it.

    Events batched together share one Ack, so waiting costs nothing per event; awaiting
    is shielded, so cancelling one waiter (``asyncio.wait_for``) never cancels the ack.

    Example::

        ack = await writer.write(b"event")
        await ack                    # durable now
        ack.done()                   # True
    """

    __slots__ = ("_fut",)

    def __init__(self, fut: asyncio.Future[None]) -> None:
        self._fut = fut

    def __await__(self) -> Generator[Any, None, None]:
        fut = self._fut
        if not fut.done():
            if type(fut) is AckFuture:
                waiter: asyncio.Future[None] = fut.get_loop().create_future()
                if fut.waiters is None:
                    fut.waiters = [waiter]
                else:
                    fut.waiters.append(waiter)
                yield from waiter.__await__()
            else:
                yield from asyncio.shield(fut).__await__()
        return fut.result()

    def done(self) -> bool:
        """True once the event is durable or failed. Example: ``if ack.done(): ...``"""
        return self._fut.done()

    def exception(self) -> BaseException | None:
        """The error that stopped the event (None if durable); only once ``done()``."""
        return self._fut.exception()

    def add_done_callback(self, fn: Callable[[Ack], object]) -> None:
        """Call ``fn(ack)`` (on the event loop) once the ack is settled.

        Example::

            ack.add_done_callback(lambda a: print("durable" if a.exception() is None else "failed"))
        """
        self._fut.add_done_callback(lambda _f: fn(self))

    def __repr__(self) -> str:
        if not self._fut.done():
            return "<Ack pending>"
        exc = self._fut.exception()
        return "<Ack durable>" if exc is None else f"<Ack failed: {exc!r}>"


class Block:
    """A sealed append: contiguous event numbers ``last - count + 1 .. last``."""

    __slots__ = ("conditional", "count", "frame", "fut", "last", "size")

    def __init__(
        self,
        last: int,
        count: int,
        frame: Frame,
        size: int,
        fut: asyncio.Future[None],
        conditional: bool = False,
    ) -> None:
        self.last = last
        self.count = count
        self.frame = frame
        self.size = size
        self.fut = fut
        self.conditional = conditional


def resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def reject(fut: asyncio.Future[None], error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)
        fut.exception()  # mark retrieved: the writer reports errors through flush/close too


def frame_block(
    wid: bytes, rid: int, payloads: list[bytes], sizes: list[int], size: int, last: int
) -> Frame:
    """One AppendBlockEnd frame of ``payloads`` (``sizes`` their lengths, ``size`` their
    record bytes, ``last`` the number of the last one) for writer ``wid`` (16 bytes) on
    the session of request id ``rid``: built with one join, or, for a few large events,
    its parts (``PARTS_MIN_BYTES``, ``PARTS_MAX_EVENTS``)."""
    count = len(payloads)
    head, tail = append_block_end_parts(wid, size, count, last, rid)
    parts: list[bytes] = [b""] * (2 * count + 2)
    parts[0] = head
    parts[1 : 2 * count : 2] = map(event_header, sizes)
    parts[2 : 2 * count + 1 : 2] = payloads
    parts[-1] = tail
    if count <= PARTS_MAX_EVENTS and size >= PARTS_MIN_BYTES:
        return tuple(parts)
    return b"".join(parts)


def frame_bytes(frame: Frame) -> bytes:
    """The frame's bytes, joined if it is kept in parts."""
    return frame if isinstance(frame, bytes) else b"".join(frame)


def trim_block(block: Block, skip: int, wid: bytes, rid: int) -> int:
    """Drop the first ``skip`` events of ``block`` (the server has them); return the
    record bytes freed."""
    frame = frame_bytes(block.frame)
    mv = memoryview(frame)[APPEND_BLOCK_END_HEAD_SIZE : len(frame) - APPEND_BLOCK_END_TAIL_SIZE]
    pos = 0
    payloads: list[bytes] = []
    sizes: list[int] = []
    for i in range(block.count):
        _, length = _EVENT_HEADER.unpack_from(mv, pos)
        if i >= skip:
            payloads.append(bytes(mv[pos + 8 : pos + 8 + length]))
            sizes.append(length)
        pos += 8 + length
    count = len(payloads)
    size = sum(sizes) + 8 * count
    freed = block.size - size
    block.frame = frame_block(wid, rid, payloads, sizes, size, block.last)
    block.count = count
    block.size = size
    return freed


def cut(sizes: list[int], i: int, room: int, rest: int) -> tuple[int, int]:
    """Where the open batch's block fills: ``(j, added)`` with ``j`` the end of the
    fewest events from ``i`` whose records (8-byte header + payload, ``added`` bytes in
    all) reach ``room`` bytes, or the end of ``sizes`` if all of them (``rest`` bytes)
    do not.

    Events of a stream mostly have similar sizes, so a guess from the average record
    size is usually within a few events of the cut: sum the guess (in C), step to the
    exact cut, and fall back to prefix sums after 64 steps.

    Example: ``cut([100] * 10, 0, 300, 1080) == (3, 324)``
    """
    n = len(sizes)
    if rest < room:
        return n, rest
    # rest >= room: the cut exists, so while got < room there is an event at j to add.
    j = min(n, i + max(1, int(room * (n - i) / rest)))
    got = sum(sizes[i:j]) + 8 * (j - i)
    for _ in range(64):
        if got < room:
            got += sizes[j] + 8
            j += 1
        elif j - i > 1 and got - sizes[j - 1] - 8 >= room:
            j -= 1
            got -= sizes[j] + 8
        else:
            return j, got
    cum = list(itertools.accumulate(map(add, sizes[i:], itertools.repeat(8))))
    k = bisect_left(cum, room)
    return i + k + 1, cum[k]


def as_bytes(data: object) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)  # copy: the caller may reuse a mutable buffer
    raise TypeError(f"an event is bytes, not {type(data).__name__}")
