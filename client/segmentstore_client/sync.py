"""The blocking client: the async client's methods, for scripts, notebooks and Spark.

Contract: ``segmentstore_client.sync.connect(...)`` starts a private event loop (uvloop
when installed) in a daemon thread and runs the async client there; every blocking method
hands its coroutine to that loop and waits. All objects are safe to use from several
threads. The writer does not cross threads per event: ``write`` appends to a local batch
under a lock and wakes the loop only when that batch was empty, so a thread writing in a
loop hands over thousands of events per wake-up; ``write`` blocks when the writer holds
its byte bound (backpressure). Readers fetch a batch of events per crossing.

Example::

    from segmentstore_client import sync

    with sync.connect("tcp://127.0.0.1:12345") as client:
        client.create_segment("orders/0", exist_ok=True)
        with client.writer("orders/0") as w:
            w.write(b"hello")
        for event in client.reader("orders/0"):
            print(event.data)
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Iterable, Iterator
from typing import overload

from .admin import AttributeId, SegmentInfo, TableInfo
from .client import Client
from .client import connect as async_connect
from .connection import ConnectionOptions
from .errors import SegmentStoreError
from .formats import RecordFormat
from .formats._sync import SyncFormattedReader, SyncFormattedWriter
from .position import Position
from .reader import ReadChunk
from .streams.sync_streams import SyncStreamAdmin
from .sync_loop import LoopThread
from .sync_reader import SyncEventReader
from .sync_writer import SyncAck, SyncEventWriter
from .table import Key, Table, TableChanges, TableEntry, TableKeyVersion, Value
from .writer import EventWriter

log = logging.getLogger("segmentstore_client")

__all__ = [
    "SyncAck",
    "SyncClient",
    "SyncEventReader",
    "SyncEventWriter",
    "SyncTable",
    "connect",
]


class SyncTable:
    """Blocking :class:`Table`; get one with :meth:`SyncClient.table`.

    Example::

        t = client.table("app/_tables/settings")
        v = t.put("color", "blue")
        t.get("color").value      # b'blue'
    """

    def __init__(self, lt: LoopThread, table: Table) -> None:
        self._lt = lt
        self._table = table
        self.name = table.name

    def create(
        self, *, key_length: int = 0, exist_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """See :meth:`Table.create`. Example: ``t.create(exist_ok=True)``."""
        return self._lt.run(
            self._table.create(key_length=key_length, exist_ok=exist_ok, timeout=timeout)
        )

    def delete(
        self, *, must_be_empty: bool = False, missing_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """See :meth:`Table.delete`. Example: ``t.delete(missing_ok=True)``."""
        return self._lt.run(
            self._table.delete(must_be_empty=must_be_empty, missing_ok=missing_ok, timeout=timeout)
        )

    def info(self, *, timeout: float | None = None) -> TableInfo:
        """See :meth:`Table.info`. Example: ``t.info().entry_count``."""
        return self._lt.run(self._table.info(timeout=timeout))

    def get(self, key: Key, *, timeout: float | None = None) -> TableEntry | None:
        """See :meth:`Table.get`. Example: ``t.get("k")``."""
        return self._lt.run(self._table.get(key, timeout=timeout))

    def get_many(
        self, keys: Iterable[Key], *, timeout: float | None = None
    ) -> list[TableEntry | None]:
        """See :meth:`Table.get_many`. Example: ``a, b = t.get_many(["a", "b"])``."""
        return self._lt.run(self._table.get_many(list(keys), timeout=timeout))

    def put(
        self,
        key: Key,
        value: Value,
        *,
        version: int | None = None,
        must_not_exist: bool = False,
        timeout: float | None = None,
    ) -> int:
        """See :meth:`Table.put`. Example: ``v = t.put("k", "v", must_not_exist=True)``."""
        return self._lt.run(
            self._table.put(
                key, value, version=version, must_not_exist=must_not_exist, timeout=timeout
            )
        )

    def put_many(
        self,
        entries: Iterable[tuple[Key, Value] | tuple[Key, Value, int | None]],
        *,
        timeout: float | None = None,
    ) -> list[int]:
        """See :meth:`Table.put_many`. Example: ``t.put_many([("a", "1"), ("b", "2")])``."""
        return self._lt.run(self._table.put_many(list(entries), timeout=timeout))

    def remove(self, key: Key, *, version: int | None = None, timeout: float | None = None) -> None:
        """See :meth:`Table.remove`. Example: ``t.remove("k")``."""
        self._lt.run(self._table.remove(key, version=version, timeout=timeout))

    def remove_many(
        self, keys: Iterable[Key | tuple[Key, int | None]], *, timeout: float | None = None
    ) -> None:
        """See :meth:`Table.remove_many`. Example: ``t.remove_many(["a", "b"])``."""
        self._lt.run(self._table.remove_many(list(keys), timeout=timeout))

    def keys(self, *, batch_size: int = 1000) -> Iterator[TableKeyVersion]:
        """See :meth:`Table.keys`. Example: ``[k.key for k in t.keys()]``."""
        cont: bytes | None = b""
        while cont is not None:
            page, cont = self._lt.run(self._table.keys_page(cont, batch_size=batch_size))
            yield from page

    def items(self, *, batch_size: int = 1000) -> Iterator[TableEntry]:
        """See :meth:`Table.items`. Example: ``{e.key: e.value for e in t.items()}``."""
        cont: bytes | None = b""
        while cont is not None:
            page, cont = self._lt.run(self._table.items_page(cont, batch_size=batch_size))
            yield from page

    def changes(
        self, since: int = 0, *, limit: int = 1000, timeout: float | None = None
    ) -> TableChanges:
        """See :meth:`Table.changes`. Example: ``page = t.changes(saved)``."""
        return self._lt.run(self._table.changes(since, limit=limit, timeout=timeout))


class SyncClient(SyncStreamAdmin):
    """A blocking client; make one with :func:`connect`. Safe to share across threads.

    Example::

        client = sync.connect("tcp://127.0.0.1:12345")
        client.create_segment("orders/0", exist_ok=True)
        client.close()
    """

    def __init__(self, lt: LoopThread, client: Client) -> None:
        self._lt = lt
        self._client = client
        self._closed = False
        self._writers: weakref.WeakSet[SyncEventWriter] = weakref.WeakSet()

    @property
    def endpoint(self) -> str:
        """The server's endpoint. Example: ``print(client.endpoint)``"""
        return str(self._client.endpoint)

    @property
    def state(self) -> str:
        """``"connected"``, ``"disconnected"`` or ``"closed"`` (see :attr:`Client.state`).

        Example: ``assert client.state == "connected"``
        """
        return "closed" if self._closed else self._client.state

    def refresh_token(self) -> str:
        """See :meth:`Client.refresh_token`. Example: ``client.refresh_token()``."""
        return self._lt.run(self._client.refresh_token())

    def ping(self, *, timeout: float | None = None) -> float:
        """Round trip to the server in seconds (see :meth:`Client.ping`).

        Example: ``print(client.ping(timeout=2))``
        """
        return self._lt.run(self._client.ping(timeout=timeout))

    def __repr__(self) -> str:
        return f"<SyncClient {self._client.endpoint} {self.state}>"

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close writers, close the connections, stop the loop thread.

        Example::

            client.close()
        """
        if self._closed:
            return
        self._closed = True
        try:

            async def stop_connecting() -> None:  # as Client.close() does first
                self._client._pool.stop_connecting()

            self._lt.run(stop_connecting())
            for w in list(self._writers):  # hand their queued events over, then flush
                try:
                    w.close()
                except SegmentStoreError as e:
                    log.warning("closing %r failed: %s", w, e)
            self._lt.run(self._client.close())
        finally:
            self._lt.stop()
            for w in list(self._writers):
                w._client_closed()

    @overload
    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = ...,
        *,
        first_event_number: int | None = ...,
        block_size: int = ...,
        linger: float = ...,
        max_buffered_bytes: int = ...,
        format: None = ...,
    ) -> SyncEventWriter: ...
    @overload
    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = ...,
        *,
        first_event_number: int | None = ...,
        block_size: int = ...,
        linger: float = ...,
        max_buffered_bytes: int = ...,
        format: str | RecordFormat,
    ) -> SyncFormattedWriter: ...
    def writer(
        self,
        segment: str,
        writer_id: str | uuid.UUID | None = None,
        *,
        first_event_number: int | None = None,
        block_size: int = 1024 * 1024,
        linger: float = 0.002,
        max_buffered_bytes: int = 32 * 1024 * 1024,
        format: str | RecordFormat | None = None,
    ) -> SyncEventWriter | SyncFormattedWriter:
        """A blocking writer (see :meth:`Client.writer`); ``format`` gives a writer of
        records of that format.

        Example::

            with client.writer("orders/0", writer_id="job-7") as w:
                w.write_many(payloads, first_event_number=1)
        """

        async def make() -> EventWriter:  # on the loop: the client's writer set is not locked
            return self._client.writer(
                segment,
                writer_id,
                first_event_number=first_event_number,
                block_size=block_size,
                linger=linger,
                max_buffered_bytes=max_buffered_bytes,
            )

        w = SyncEventWriter(self._lt, self._lt.run(make()))
        self._writers.add(w)
        return w if format is None else SyncFormattedWriter(w, format)

    @overload
    def reader(
        self,
        segment: str,
        offset: int | Position = ...,
        *,
        follow: bool = ...,
        read_size: int = ...,
        format: None = ...,
    ) -> SyncEventReader: ...
    @overload
    def reader(
        self,
        segment: str,
        offset: int | Position = ...,
        *,
        follow: bool = ...,
        read_size: int = ...,
        format: str | RecordFormat,
    ) -> SyncFormattedReader: ...
    def reader(
        self,
        segment: str,
        offset: int | Position = 0,
        *,
        follow: bool = False,
        read_size: int = 1024 * 1024,
        format: str | RecordFormat | None = None,
    ) -> SyncEventReader | SyncFormattedReader:
        """A blocking reader (see :meth:`Client.reader`); ``format`` yields decoded
        records of that format.

        Example::

            for event in client.reader("orders/0"):
                print(event.data)
        """
        r = self._client.reader(segment, offset, follow=follow, read_size=read_size)
        sr = SyncEventReader(self._lt, r)
        return sr if format is None else SyncFormattedReader(sr, format)

    def read_bytes(
        self, segment: str, offset: int, length: int, *, timeout: float | None = None
    ) -> ReadChunk:
        """Up to ``length`` raw bytes of ``segment`` from ``offset``, no event parsing
        (see :meth:`Client.read_bytes`).

        Example::

            chunk = client.read_bytes("orders/0", 0, 8)
            kind, length = struct.unpack(">ii", chunk.data)
        """
        return self._lt.run(self._client.read_bytes(segment, offset, length, timeout=timeout))

    def table(self, name: str) -> SyncTable:
        """A blocking table handle (see :meth:`Client.table`).

        Example::

            client.table("app/_tables/t").put("k", "v")
        """
        return SyncTable(self._lt, self._client.table(name))

    # -- admin -----------------------------------------------------------------------

    def create_segment(
        self,
        segment: str,
        *,
        exist_ok: bool = False,
        scale_type: int = 0,
        target_rate: int = 0,
        rollover_size: int = 0,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.create_segment`. Example: ``client.create_segment("s", exist_ok=True)``."""
        return self._lt.run(
            self._client.create_segment(
                segment,
                exist_ok=exist_ok,
                scale_type=scale_type,
                target_rate=target_rate,
                rollover_size=rollover_size,
                timeout=timeout,
            )
        )

    def list_segments(self, prefix: str = "", *, timeout: float | None = None) -> list[str]:
        """See :meth:`Client.list_segments`. Example: ``client.list_segments("orders/")``."""
        return self._lt.run(self._client.list_segments(prefix, timeout=timeout))

    def segment_info(self, segment: str, *, timeout: float | None = None) -> SegmentInfo:
        """See :meth:`Client.segment_info`. Example: ``client.segment_info("s").length``."""
        return self._lt.run(self._client.segment_info(segment, timeout=timeout))

    def seal(self, segment: str, *, timeout: float | None = None) -> None:
        """See :meth:`Client.seal`. Example: ``client.seal("s")``."""
        self._lt.run(self._client.seal(segment, timeout=timeout))

    def truncate(self, segment: str, offset: int, *, timeout: float | None = None) -> None:
        """See :meth:`Client.truncate`. Example: ``client.truncate("s", 4096)``."""
        self._lt.run(self._client.truncate(segment, offset, timeout=timeout))

    def delete(
        self, segment: str, *, missing_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """See :meth:`Client.delete`. Example: ``client.delete("s", missing_ok=True)``."""
        return self._lt.run(self._client.delete(segment, missing_ok=missing_ok, timeout=timeout))

    def merge(self, target: str, source: str, *, timeout: float | None = None) -> int:
        """See :meth:`Client.merge`. Example: ``client.merge("s", "s#txn")``."""
        return self._lt.run(self._client.merge(target, source, timeout=timeout))

    def merge_with_attribute(
        self,
        target: str,
        source: str,
        attribute_id: AttributeId,
        new_value: int,
        expected: int | None,
        *,
        timeout: float | None = None,
    ) -> int:
        """See :meth:`Client.merge_with_attribute`.
        Example: ``client.merge_with_attribute("s", "s#t", "commit", 2, 1)``."""
        return self._lt.run(
            self._client.merge_with_attribute(
                target, source, attribute_id, new_value, expected, timeout=timeout
            )
        )

    def get_attribute(
        self, segment: str, attribute_id: AttributeId, *, timeout: float | None = None
    ) -> int | None:
        """See :meth:`Client.get_attribute`. Example: ``client.get_attribute("s", "owner")``."""
        return self._lt.run(self._client.get_attribute(segment, attribute_id, timeout=timeout))

    def compare_and_set_attribute(
        self,
        segment: str,
        attribute_id: AttributeId,
        new_value: int | None,
        expected: int | None,
        *,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.compare_and_set_attribute`.
        Example: ``client.compare_and_set_attribute("s", "owner", 1, None)``."""
        return self._lt.run(
            self._client.compare_and_set_attribute(
                segment, attribute_id, new_value, expected, timeout=timeout
            )
        )

    def last_event_number(
        self, segment: str, writer_id: str | uuid.UUID, *, timeout: float | None = None
    ) -> int | None:
        """See :meth:`Client.last_event_number`. Example: ``client.last_event_number("s", "w")``."""
        return self._lt.run(self._client.last_event_number(segment, writer_id, timeout=timeout))

    def event_count(self, segment: str, *, timeout: float | None = None) -> int:
        """See :meth:`Client.event_count`. Example: ``client.event_count("s")``."""
        return self._lt.run(self._client.event_count(segment, timeout=timeout))

    def create_table(
        self,
        name: str,
        *,
        key_length: int = 0,
        exist_ok: bool = False,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.create_table`. Example: ``client.create_table("a/_tables/t")``."""
        return self._lt.run(
            self._client.create_table(
                name, key_length=key_length, exist_ok=exist_ok, timeout=timeout
            )
        )

    def delete_table(
        self,
        name: str,
        *,
        must_be_empty: bool = False,
        missing_ok: bool = False,
        timeout: float | None = None,
    ) -> bool:
        """See :meth:`Client.delete_table`. Example: ``client.delete_table("a/_tables/t")``."""
        return self._lt.run(
            self._client.delete_table(
                name, must_be_empty=must_be_empty, missing_ok=missing_ok, timeout=timeout
            )
        )

    def table_info(self, name: str, *, timeout: float | None = None) -> TableInfo:
        """See :meth:`Client.table_info`. Example: ``client.table_info("a/_tables/t")``."""
        return self._lt.run(self._client.table_info(name, timeout=timeout))


def connect(
    endpoint: str = "tcp://127.0.0.1:12345",
    *,
    connect_timeout: float = 10.0,
    request_timeout: float = 30.0,
    reconnect_timeout: float = 60.0,
    keepalive_interval: float = 10.0,
    pool_size: int = 2,
    delegation_token: str = "",
    credentials: tuple[str, str] | str | None = None,
    controller: str = "",
    tls_ca_file: str = "",
    options: ConnectionOptions | None = None,
) -> SyncClient:
    """A blocking client of the segment store at ``endpoint``; the arguments are those of
    :func:`segmentstore_client.connect`. Opens the first connection now: a server that
    refuses it raises :class:`ConnectFailed` at once.

    Example::

        with sync.connect("tcp://127.0.0.1:12345", reconnect_timeout=20) as client:
            print(client.segment_info("orders/0"))
    """
    lt = LoopThread()
    try:

        async def make() -> Client:
            client = async_connect(
                endpoint,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
                reconnect_timeout=reconnect_timeout,
                keepalive_interval=keepalive_interval,
                pool_size=pool_size,
                delegation_token=delegation_token,
                credentials=credentials,
                controller=controller,
                tls_ca_file=tls_ca_file,
                options=options,
            )
            try:
                return await client.open()
            except BaseException:
                await client.close()
                raise

        client = lt.run(make())
    except BaseException:
        lt.stop()
        raise
    return SyncClient(lt, client)
