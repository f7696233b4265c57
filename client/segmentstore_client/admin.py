"""Administration requests: segments, attributes and tables (create, inspect, change).

Contract: every method is one request/reply exchange over a pooled connection. Requests
that can be repeated without changing the outcome (info, attribute reads, seal, truncate,
merge, and creates/deletes that tolerate "already so") are retried across reconnects;
the others raise :class:`ConnectionLost` (retriable) and leave the decision to the caller,
because the request may have been applied before the connection broke.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .connection import ConnectionOptions, Endpoint, next_request_id
from .errors import (
    AttributeConflict,
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    NoSuchSegment,
    OperationUnsupported,
    SegmentAlreadyExists,
    SegmentSealed,
    SegmentStoreError,
    ServerError,
    Timeout,
)
from .naming import checked_name, writer_uuid
from .pool import Backoff, ConnectionPool, within
from .protocol import (
    NULL_ATTRIBUTE_VALUE,
    AuthTokenCheckFailed,
    Command,
    ConditionalAttributeUpdate,
    CreateSegment,
    CreateTableSegment,
    DeleteSegment,
    DeleteTableSegment,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    GetTableSegmentInfo,
    MergeSegments,
    ReadTableKeys,
    SealSegment,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentsMerged,
    SegmentTruncated,
    StreamSegmentInfo,
    TableIteratorArgs,
    TableKeysRead,
    TableSegmentInfo,
    TruncateSegment,
    UpdateSegmentAttribute,
)
from .protocol import (
    SegmentSealed as SegmentSealedReply,
)
from .protocol.names import SEGMENT_LISTING_TABLE, decode_name, encode_name
from .replies import error_from_reply

EVENT_COUNT_ATTRIBUTE: Final = uuid.UUID("80000000-0000-0000-0000-000000000001")
"""Core attribute: number of events appended to a segment (merges included)."""

AttributeId = uuid.UUID | str


def attribute_uuid(attribute_id: AttributeId) -> uuid.UUID:
    """An attribute id as a UUID (UUID strings are parsed, other strings hashed).

    Example: ``attribute_uuid("owner") == attribute_uuid("owner")``
    """
    return writer_uuid(attribute_id)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What the server knows about a segment (``client.segment_info(name)``).

    ``length`` is the offset of the next appended byte (truncation does not reduce it);
    ``start_offset`` the first readable offset; ``last_modified`` ms since the epoch.
    """

    name: str
    length: int
    start_offset: int
    sealed: bool
    last_modified: int


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What the server knows about a table (``client.table_info(name)``)."""

    name: str
    length: int
    start_offset: int
    entry_count: int
    key_length: int


def token_expired(reply: Command) -> bool:
    return isinstance(reply, AuthTokenCheckFailed) and reply.error_code == 1


def with_token(make: Callable[[int], Command], token: str) -> Callable[[int], Command]:
    def remade(rid: int) -> Command:
        return dataclasses.replace(make(rid), delegation_token=token)  # type: ignore[type-var]

    return remade


class AdminClient:
    """Connections and administration requests; :class:`Client` builds on it."""

    def __init__(self, endpoint: str | Endpoint, options: ConnectionOptions) -> None:
        self.endpoint = endpoint if isinstance(endpoint, Endpoint) else Endpoint.parse(endpoint)
        self.options = options
        self._pool = ConnectionPool(self.endpoint, options)

    def _forget_writer(self, writer: object) -> None:
        """A writer made by this client closed (the client stops tracking it)."""

    def _forget_reader(self, reader: object) -> None:
        """A reader made by this client closed (the client stops tracking it)."""

    async def _call(
        self,
        make: Callable[[int], Command],
        *,
        retry: bool,
        timeout: float | None = None,
        limit: float | None = None,
    ) -> Command:
        """One request/reply exchange; ``retry`` repeats it across reconnects.

        ``timeout`` bounds each attempt's wait for its reply (as :meth:`Connection.call`);
        ``limit`` bounds the whole call, reconnects included (the caller's ``timeout=``).
        """
        return await within(limit, self._exchange(make, retry, timeout))

    async def refresh_token(self) -> str:
        """Fetch a fresh delegation token from ``options.controller`` with
        ``options.credentials`` (README "Security"); later requests carry it.

        Example: ``await client.refresh_token()``
        """
        from .auth import fetch_token

        creds = self.options.credentials
        if creds is None or not self.options.controller:
            raise ValueError("refresh_token needs credentials= and controller=")
        token = await fetch_token(self.options.controller, creds, options=self.options)
        self.options = dataclasses.replace(self.options, delegation_token=token)
        return token

    async def _renew_expired(self, reply: Command, used: str) -> bool:
        """True if ``reply`` says the token ``used`` expired and the client can go on
        with a fresh one: fetched now, unless another request already replaced ``used``
        (many writers and readers meeting expiry together fetch one token, not one each).
        Writers (SetupAppend) and readers (ReadSegment) retry once on True.

        Example: ``if await client._renew_expired(reply, token): continue`` (internal)
        """
        if not token_expired(reply) or self.options.credentials is None:
            return False
        if self.options.delegation_token == used:
            await self.refresh_token()
        return True

    async def _exchange(
        self, make: Callable[[int], Command], retry: bool, timeout: float | None
    ) -> Command:
        backoff: Backoff | None = None
        refreshed = False
        while True:
            rid = next_request_id()
            try:
                # One reconnect budget for the whole call, counted from the first failure.
                conn = await self._pool.acquire(None if backoff is None else backoff.remaining())
                reply = await conn.call(make(rid), rid, timeout)
                if refreshed or not token_expired(reply) or self.options.credentials is None:
                    return reply
                refreshed = True  # a fresh token, and the request once more with it
                token = await self.refresh_token()
                make = with_token(make, token)
            except ConnectFailed:
                raise  # the pool already retried for what was left of the budget
            except (ConnectionLost, Timeout) as e:
                if self._pool.closed:
                    raise ClientClosed("the client is closed") from e
                if not retry:
                    raise
                backoff = backoff or Backoff(self.options)
                await backoff.wait(e)

    async def _idempotent(
        self,
        make: Callable[[int], Command],
        done: type[Command],
        tolerated: type[SegmentStoreError],
        tolerate: bool,
        limit: float | None = None,
    ) -> bool:
        """Create/delete: True if done now, False if ``tolerate`` and it already was
        (``tolerated`` names that outcome); only then is the request safe to retry."""
        reply = await self._call(make, retry=tolerate, limit=limit)
        if isinstance(reply, done):
            return True
        error = error_from_reply(reply)
        if tolerate and isinstance(error, tolerated):
            return False
        raise error

    # -- segments --------------------------------------------------------------------

    async def create_segment(
        self,
        segment: str,
        *,
        exist_ok: bool = False,
        scale_type: int = 0,
        target_rate: int = 0,
        rollover_size: int = 0,
        timeout: float | None = None,
    ) -> bool:
        """Create an empty segment; returns False if it existed and ``exist_ok``.

        Raises :class:`SegmentAlreadyExists` otherwise. Example::

            await client.create_segment("orders/0", exist_ok=True)
        """
        checked_name(segment)
        token = self.options.delegation_token
        return await self._idempotent(
            lambda rid: CreateSegment(rid, segment, target_rate, scale_type, token, rollover_size),
            SegmentCreated,
            SegmentAlreadyExists,
            exist_ok,
            limit=timeout,
        )

    async def segment_info(self, segment: str, *, timeout: float | None = None) -> SegmentInfo:
        """Length, start offset, sealed flag and modification time of a segment.

        Raises :class:`NoSuchSegment`. Example::

            info = await client.segment_info("orders/0")
            print(info.length, info.sealed)
        """
        checked_name(segment)
        token = self.options.delegation_token
        reply = await self._call(
            lambda rid: GetStreamSegmentInfo(rid, segment, token), retry=True, limit=timeout
        )
        if isinstance(reply, StreamSegmentInfo):
            if not reply.exists or reply.is_deleted:
                raise NoSuchSegment(f"segment {segment!r} does not exist", segment, reply)
            return SegmentInfo(
                reply.segment_name,
                reply.write_offset,
                reply.start_offset,
                reply.is_sealed,
                reply.last_modified,
            )
        raise error_from_reply(reply)

    async def seal(self, segment: str, *, timeout: float | None = None) -> None:
        """Seal a segment: no more appends; readers stop at its end. Sealing a sealed
        segment is not an error.

        Example::

            await client.seal("orders/0")
        """
        checked_name(segment)
        token = self.options.delegation_token
        reply = await self._call(
            lambda rid: SealSegment(rid, segment, token), retry=True, limit=timeout
        )
        if isinstance(reply, SegmentSealedReply):
            return
        error = error_from_reply(reply)
        if isinstance(error, SegmentSealed):
            return
        raise error

    async def truncate(self, segment: str, offset: int, *, timeout: float | None = None) -> None:
        """Drop the data before ``offset`` (an event boundary); readers starting earlier
        get :class:`SegmentTruncated`. Raises SegmentTruncated if ``offset`` lies outside
        start offset .. length.

        Example::

            await client.truncate("orders/0", reader.position.offset)
        """
        checked_name(segment)
        token = self.options.delegation_token
        reply = await self._call(
            lambda rid: TruncateSegment(rid, segment, offset, token), retry=True, limit=timeout
        )
        if isinstance(reply, SegmentTruncated):
            return
        raise error_from_reply(reply)

    async def delete(
        self, segment: str, *, missing_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """Delete a segment; returns False if it was missing and ``missing_ok``.

        Example::

            await client.delete("scratch/0", missing_ok=True)
        """
        checked_name(segment)
        token = self.options.delegation_token
        return await self._idempotent(
            lambda rid: DeleteSegment(rid, segment, token),
            SegmentDeleted,
            NoSuchSegment,
            missing_ok,
            limit=timeout,
        )

    async def merge(self, target: str, source: str, *, timeout: float | None = None) -> int:
        """Append all of ``source`` to ``target`` atomically and delete ``source``
        (how transactions commit). Returns the target's new length (-1 if the server
        did not say). Errors name the segment they are about (a sealed target, a
        missing source).

        Example::

            length = await client.merge("orders/0", "orders/0#txn.1")
        """
        checked_name(target)
        checked_name(source)
        token = self.options.delegation_token
        reply = await self._call(
            lambda rid: MergeSegments(rid, target, source, token), retry=True, limit=timeout
        )
        if isinstance(reply, SegmentsMerged):
            return reply.new_target_write_offset
        raise await self._merge_error(reply, target, source)

    async def _merge_error(self, reply: Command, target: str, source: str) -> SegmentStoreError:
        """A merge's error reply as an exception that names the segment it is about: a
        sealed-segment reply names the request's source, but a sealed target is the
        usual cause (the merge seals the source itself), so ask which one it is."""
        error = error_from_reply(reply)
        if isinstance(error, SegmentSealed):
            with contextlib.suppress(SegmentStoreError):
                if (await self.segment_info(target)).sealed:
                    return SegmentSealed(
                        f"cannot merge {source!r} into {target!r}: the target {target!r} is sealed",
                        target,
                        reply,
                    )
        if isinstance(error, ServerError) and error.segment:
            error.args = (f"merge of {source!r} into {target!r}: {error.args[0]}",)
        return error

    async def list_segments(self, prefix: str = "", *, timeout: float | None = None) -> list[str]:
        """Names of the segments (tables included) that start with ``prefix``, sorted by
        their UTF-8 bytes. Paged on the wire (a segmentstore extension: a ReadTableKeys
        on the virtual table ``SEGMENT_LISTING_TABLE``); a server without it raises
        :class:`OperationUnsupported`.

        Example::

            for name in await client.list_segments("orders/"):
                print(name)
        """
        return await within(timeout, self._list_segments(encode_name(prefix)))

    async def _list_segments(self, prefix: bytes) -> list[str]:
        names: list[str] = []
        cont = b""
        while True:
            reply = await self._call(self._listing_request(prefix, cont), retry=True)
            if not isinstance(reply, TableKeysRead):
                error = error_from_reply(reply)
                if isinstance(error, NoSuchSegment | OperationUnsupported):
                    raise OperationUnsupported(
                        f"{self.endpoint} cannot list segments ({error})", "", reply
                    )
                raise error
            names.extend(decode_name(bytes(k.key)) for k in reply.keys)
            cont = bytes(reply.continuation_token)
            if not reply.keys or not cont:
                return names

    def _listing_request(self, prefix: bytes, cont: bytes) -> Callable[[int], Command]:
        token = self.options.delegation_token
        args = TableIteratorArgs(cont, prefix)
        return lambda rid: ReadTableKeys(rid, SEGMENT_LISTING_TABLE, token, 1000, args)

    # -- attributes ------------------------------------------------------------------

    async def get_attribute(
        self, segment: str, attribute_id: AttributeId, *, timeout: float | None = None
    ) -> int | None:
        """The value of a segment attribute, or None if it is not set.

        Example::

            count = await client.get_attribute("orders/0", EVENT_COUNT_ATTRIBUTE)
        """
        checked_name(segment)
        token = self.options.delegation_token
        aid = attribute_uuid(attribute_id)
        reply = await self._call(
            lambda rid: GetSegmentAttribute(rid, segment, aid, token), retry=True, limit=timeout
        )
        if isinstance(reply, SegmentAttribute):
            return None if reply.value == NULL_ATTRIBUTE_VALUE else reply.value
        raise error_from_reply(reply)

    async def compare_and_set_attribute(
        self,
        segment: str,
        attribute_id: AttributeId,
        new_value: int | None,
        expected: int | None,
        *,
        timeout: float | None = None,
    ) -> bool:
        """Set an attribute to ``new_value`` (None removes it) if it currently equals
        ``expected`` (None: it must be unset). Returns False when the comparison failed.

        Not retried across reconnects (a retry after success would report False); on
        :class:`ConnectionLost` read the attribute to learn the outcome. Example::

            ok = await client.compare_and_set_attribute("s", "owner", 2, expected=1)
        """
        checked_name(segment)
        token = self.options.delegation_token
        aid = attribute_uuid(attribute_id)
        new = NULL_ATTRIBUTE_VALUE if new_value is None else new_value
        old = NULL_ATTRIBUTE_VALUE if expected is None else expected
        reply = await self._call(
            lambda rid: UpdateSegmentAttribute(rid, segment, aid, new, old, token),
            retry=False,
            limit=timeout,
        )
        if isinstance(reply, SegmentAttributeUpdated):
            return reply.success
        raise error_from_reply(reply)

    async def last_event_number(
        self, segment: str, writer_id: str | uuid.UUID, *, timeout: float | None = None
    ) -> int | None:
        """The last event number the segment durably holds from a writer (None: none).

        Example::

            done = await client.last_event_number("orders/0", "spark-task-3")
        """
        return await self.get_attribute(segment, writer_uuid(writer_id), timeout=timeout)

    async def event_count(self, segment: str, *, timeout: float | None = None) -> int:
        """How many events were appended to a segment (merged ones included).

        Example::

            n = await client.event_count("orders/0")
        """
        return await self.get_attribute(segment, EVENT_COUNT_ATTRIBUTE, timeout=timeout) or 0

    async def merge_with_attribute(
        self,
        target: str,
        source: str,
        attribute_id: AttributeId,
        new_value: int,
        expected: int | None,
        *,
        timeout: float | None = None,
    ) -> int:
        """Merge ``source`` into ``target`` and, atomically with it, compare-and-set an
        attribute of the target; raises :class:`AttributeConflict` if the comparison
        failed (nothing merged). Returns the target's new length.

        Example::

            await client.merge_with_attribute("out/0", "out/0#txn.7", "commit", 7, 6)
        """
        checked_name(target)
        checked_name(source)
        token = self.options.delegation_token
        update = ConditionalAttributeUpdate(
            attribute_uuid(attribute_id),
            4,
            new_value,
            NULL_ATTRIBUTE_VALUE if expected is None else expected,
        )
        reply = await self._call(
            lambda rid: MergeSegments(rid, target, source, token, (update,)),
            retry=False,
            limit=timeout,
        )
        if isinstance(reply, SegmentsMerged):
            return reply.new_target_write_offset
        if isinstance(reply, SegmentAttributeUpdated) and not reply.success:
            raise AttributeConflict(
                f"merge of {source!r} into {target!r}: attribute comparison failed",
                target,
                reply,
            )
        raise await self._merge_error(reply, target, source)

    # -- tables ----------------------------------------------------------------------

    async def create_table(
        self,
        name: str,
        *,
        key_length: int = 0,
        exist_ok: bool = False,
        timeout: float | None = None,
    ) -> bool:
        """Create a table (a key-value table segment); ``key_length`` > 0 fixes the key
        size and allows key-range iteration. Returns False if it existed and ``exist_ok``.

        Example::

            await client.create_table("app/_tables/settings", exist_ok=True)
        """
        checked_name(name, "table")
        token = self.options.delegation_token
        return await self._idempotent(
            lambda rid: CreateTableSegment(rid, name, token, False, key_length),
            SegmentCreated,
            SegmentAlreadyExists,
            exist_ok,
            limit=timeout,
        )

    async def delete_table(
        self,
        name: str,
        *,
        must_be_empty: bool = False,
        missing_ok: bool = False,
        timeout: float | None = None,
    ) -> bool:
        """Delete a table; returns False if it was missing and ``missing_ok``.
        ``must_be_empty`` raises :class:`TableNotEmpty` if keys remain.

        Example::

            await client.delete_table("app/_tables/settings", missing_ok=True)
        """
        checked_name(name, "table")
        token = self.options.delegation_token
        return await self._idempotent(
            lambda rid: DeleteTableSegment(rid, name, must_be_empty, token),
            SegmentDeleted,
            NoSuchSegment,
            missing_ok,
            limit=timeout,
        )

    async def table_info(self, name: str, *, timeout: float | None = None) -> TableInfo:
        """Size and entry count of a table.

        Example::

            print((await client.table_info("app/_tables/settings")).entry_count)
        """
        checked_name(name, "table")
        token = self.options.delegation_token
        reply = await self._call(
            lambda rid: GetTableSegmentInfo(rid, name, token), retry=True, limit=timeout
        )
        if isinstance(reply, TableSegmentInfo):
            return TableInfo(
                reply.segment_name,
                reply.length,
                reply.start_offset,
                reply.entry_count,
                reply.key_length,
            )
        raise error_from_reply(reply)
