"""Blocking twins of the stream API, for :class:`~segmentstore_client.sync.SyncClient`.

Contract: every method hands the async client's coroutine to the client's loop thread and
waits (``LoopThread.run``); signatures equal the async ones (a test checks it). A
:class:`SyncStreamWriter` crosses threads once per call, so prefer ``write_many``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from .policies import RetentionPolicy, ScalingPolicy, StreamInfo
from .routing import KeyRange
from .stream_cut import StreamCut
from .stream_writer import StreamAck, StreamWriter
from .sync_groups import SyncReaderGroup, SyncTransaction

if TYPE_CHECKING:
    from ..client import Client
    from ..sync_loop import LoopThread


class SyncStreamAck:
    """Blocking :class:`StreamAck`: ``ack.wait()`` returns once the events are durable."""

    __slots__ = ("_ack", "_lt")

    def __init__(self, lt: LoopThread, ack: StreamAck) -> None:
        self._lt = lt
        self._ack = ack

    def wait(self, timeout: float | None = None) -> None:
        async def wait() -> None:
            await self._ack

        self._lt.run(wait(), timeout)


class SyncStreamWriter:
    """Blocking :class:`StreamWriter`; get one with ``SyncClient.stream_writer``.

    Example::

        with client.stream_writer("shop/orders") as w:
            w.write_many(payloads, routing_keys=keys)
    """

    def __init__(self, lt: LoopThread, writer: StreamWriter) -> None:
        self._lt = lt
        self._w = writer

    @property
    def stream(self) -> str:
        return self._w.stream

    @property
    def segments(self) -> set[int]:
        return self._w.segments

    def start(self) -> SyncStreamWriter:
        self._lt.run(self._w.start())
        return self

    def __enter__(self) -> SyncStreamWriter:
        return self.start()

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        else:
            self.abort()

    def write(self, data: bytes, routing_key: str | None = None) -> SyncStreamAck:
        return SyncStreamAck(self._lt, self._lt.run(self._w.write(data, routing_key)))

    def write_many(
        self, events: Iterable[bytes], *, routing_keys: Iterable[str | None] | None = None
    ) -> SyncStreamAck:
        data, keys = list(events), None if routing_keys is None else list(routing_keys)
        return SyncStreamAck(self._lt, self._lt.run(self._w.write_many(data, routing_keys=keys)))

    def begin(self, lease_ms: int = 30_000) -> SyncTransaction:
        """See :meth:`StreamWriter.begin`. Example: ``txn = writer.begin()``."""
        return SyncTransaction(self._lt, self._lt.run(self._w.begin(lease_ms)))

    def flush(self) -> None:
        self._lt.run(self._w.flush())

    def close(self) -> None:
        self._lt.run(self._w.close())

    def abort(self) -> None:
        async def abort() -> None:
            self._w.abort()

        self._lt.run(abort())


class SyncStreamAdmin:
    """The stream methods of :class:`~segmentstore_client.sync.SyncClient` (see the
    async ones on :class:`~segmentstore_client.Client` for what they do)."""

    _lt: LoopThread
    _client: Client

    def create_scope(self, scope: str, *, exist_ok: bool = False) -> bool:
        return self._lt.run(self._client.create_scope(scope, exist_ok=exist_ok))

    def delete_scope(self, scope: str, *, missing_ok: bool = False) -> bool:
        return self._lt.run(self._client.delete_scope(scope, missing_ok=missing_ok))

    def list_scopes(self) -> list[str]:
        return self._lt.run(self._client.list_scopes())

    def list_streams(self, scope: str) -> list[str]:
        return self._lt.run(self._client.list_streams(scope))

    def create_stream(
        self,
        stream: str,
        segments: int = 1,
        *,
        scaling: ScalingPolicy | None = None,
        retention: RetentionPolicy | None = None,
        tags: Sequence[str] = (),
        exist_ok: bool = False,
    ) -> bool:
        return self._lt.run(
            self._client.create_stream(
                stream,
                segments,
                scaling=scaling,
                retention=retention,
                tags=tags,
                exist_ok=exist_ok,
            )
        )

    def stream_tags(self, stream: str) -> list[str]:
        return self._lt.run(self._client.stream_tags(stream))

    def seal_stream(self, stream: str) -> None:
        self._lt.run(self._client.seal_stream(stream))

    def delete_stream(self, stream: str, *, missing_ok: bool = False) -> bool:
        return self._lt.run(self._client.delete_stream(stream, missing_ok=missing_ok))

    def truncate_stream(self, cut: StreamCut) -> None:
        self._lt.run(self._client.truncate_stream(cut))

    def scale_stream(
        self,
        stream: str,
        new_ranges: int | Sequence[tuple[float, float]],
        *,
        sealed: Sequence[int] | None = None,
    ) -> list[KeyRange]:
        return self._lt.run(self._client.scale_stream(stream, new_ranges, sealed=sealed))

    def stream_info(self, stream: str) -> StreamInfo:
        return self._lt.run(self._client.stream_info(stream))

    def stream_writer(
        self,
        stream: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
        exactly_once: bool = False,
    ) -> SyncStreamWriter:
        async def make() -> StreamWriter:
            return self._client.stream_writer(
                stream,
                writer_id,
                block_size=block_size,
                linger=linger,
                max_buffered_bytes=max_buffered_bytes,
                exactly_once=exactly_once,
            )

        return SyncStreamWriter(self._lt, self._lt.run(make()))

    def reader_group(
        self,
        name: str,
        streams: Iterable[str],
        start: Literal["head", "tail"] | StreamCut | Iterable[StreamCut] = "head",
        *,
        reader_timeout: float = 30.0,
        sync_interval: float = 0.5,
    ) -> SyncReaderGroup:
        """See :meth:`Client.reader_group`; the blocking group is opened at once (its
        state made from ``start`` unless it exists).

        Example::

            group = client.reader_group("shop/billing", ["shop/orders"])
            for event in group.reader("reader-1").events(idle_timeout=2):
                print(event.data)
        """
        group = self._client.reader_group(
            name,
            list(streams),
            start if isinstance(start, str | StreamCut) else list(start),
            reader_timeout=reader_timeout,
            sync_interval=sync_interval,
        )
        return SyncReaderGroup(self._lt, group).open()
