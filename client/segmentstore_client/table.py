"""Tables: versioned key-value maps stored in table segments (``client.table(name)``).

Contract: keys and values are bytes (``str`` is accepted and encoded as UTF-8). Every
update returns the key's new version, an opaque integer that changes on every update;
passing it back as ``version=`` makes the next update conditional (optimistic
concurrency). A batch (``put_many``/``remove_many``) is one request, applied all or
nothing when any of its entries carries a condition. Reads and unconditional updates are
retried across reconnects; conditional ones are not (a retry after success would report
a conflict), they raise :class:`ConnectionLost` and the caller re-reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Final

from .admin import AdminClient, TableInfo
from .errors import SegmentStoreError, TableConditionFailed, UnexpectedReply
from .naming import checked_name
from .protocol import (
    NO_VERSION,
    NOT_EXISTS,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableIteratorArgs,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    UpdateTableEntries,
)
from .protocol import TableEntry as WireEntry
from .protocol import TableKey as WireKey
from .replies import error_from_reply

Key = bytes | str
Value = bytes | str

ANY_VERSION: Final = NO_VERSION
"""``version=`` value meaning "unconditional" (the default)."""
MUST_NOT_EXIST: Final = NOT_EXISTS
"""``version=`` value meaning "only if the key is absent"."""


def _b(x: Key) -> bytes:
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, bytes | bytearray | memoryview):
        return bytes(x)
    raise TypeError(f"table keys and values are bytes or str, not {type(x).__name__}")


def _keyed_error(reply: object, keys: list[tuple[bytes, int]]) -> SegmentStoreError:
    """The exception for an update's error reply; a failed condition names the batch's
    conditional keys and the versions they required."""
    error = error_from_reply(reply)
    if isinstance(error, TableConditionFailed):
        conditions = [(k, v) for k, v in keys if v != NO_VERSION]
        error.keys = tuple(k for k, _ in conditions)
        shown = ", ".join(
            f"{k!r} ({'must not exist' if v == NOT_EXISTS else f'version {v}'})"
            for k, v in conditions[:5]
        )
        more = f" and {len(conditions) - 5} more" if len(conditions) > 5 else ""
        noun = "key" if len(conditions) == 1 else "keys"
        error.args = (f"{error.args[0]}; conditional {noun}: {shown}{more}",)
    return error


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A key, its value and its current version.

    Example::

        entry = await table.get("color")
        if entry: print(entry.value, entry.version)
    """

    key: bytes
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class TableKeyVersion:
    """A key and its current version (what :meth:`Table.keys` yields)."""

    key: bytes
    version: int


@dataclass(frozen=True, slots=True)
class TableChanges:
    """One page of a table's change log (see :meth:`Table.changes`).

    ``entries`` holds the newest value of each key updated in the scanned range (removals
    are not listed); ``position`` is where to continue; ``reset`` says the position was
    older than the table's compaction point, so cached state must be rebuilt;
    ``at_end`` says the scan reached the end of the table.
    """

    entries: list[TableEntry]
    position: int
    reset: bool
    at_end: bool


class Table:
    """A key-value table on the server; get one with :meth:`Client.table`.

    Example::

        table = client.table("app/_tables/settings")
        await table.create(exist_ok=True)
        v1 = await table.put("color", "blue")
        await table.put("color", "green", version=v1)    # only if nobody changed it
    """

    def __init__(self, client: AdminClient, name: str) -> None:
        self._client = client
        self.name = checked_name(name, "table")

    def __repr__(self) -> str:
        return f"<Table {self.name!r}>"

    # -- lifecycle -------------------------------------------------------------------

    async def create(
        self, *, key_length: int = 0, exist_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """Create this table (see :meth:`Client.create_table`).

        Example::

            await client.table("app/_tables/t").create(exist_ok=True)
        """
        return await self._client.create_table(
            self.name, key_length=key_length, exist_ok=exist_ok, timeout=timeout
        )

    async def delete(
        self, *, must_be_empty: bool = False, missing_ok: bool = False, timeout: float | None = None
    ) -> bool:
        """Delete this table (see :meth:`Client.delete_table`).

        Example::

            await table.delete(missing_ok=True)
        """
        return await self._client.delete_table(
            self.name, must_be_empty=must_be_empty, missing_ok=missing_ok, timeout=timeout
        )

    async def info(self, *, timeout: float | None = None) -> TableInfo:
        """Size and entry count (see :meth:`Client.table_info`).

        Example::

            print((await table.info()).entry_count)
        """
        return await self._client.table_info(self.name, timeout=timeout)

    # -- reads -----------------------------------------------------------------------

    async def get(self, key: Key, *, timeout: float | None = None) -> TableEntry | None:
        """The entry for ``key``, or None if it is absent.

        Example::

            entry = await table.get(b"k")
        """
        return (await self.get_many([key], timeout=timeout))[0]

    async def get_many(
        self, keys: Iterable[Key], *, timeout: float | None = None
    ) -> list[TableEntry | None]:
        """Entries for several keys in one request (None where absent), in order.

        Example::

            a, b = await table.get_many(["a", "b"])
        """
        wire_keys = tuple(WireKey(_b(k), NO_VERSION) for k in keys)
        if not wire_keys:
            return []
        token = self._client.options.delegation_token
        reply = await self._client._call(
            lambda rid: ReadTable(rid, self.name, token, wire_keys), retry=True, limit=timeout
        )
        if not isinstance(reply, TableRead):
            raise error_from_reply(reply)
        if len(reply.entries) != len(wire_keys):
            raise UnexpectedReply(
                f"asked for {len(wire_keys)} keys, got {len(reply.entries)}", self.name, reply
            )
        return [
            None if e.version == NOT_EXISTS else TableEntry(bytes(e.key), bytes(e.value), e.version)
            for e in reply.entries
        ]

    async def keys(self, *, batch_size: int = 1000) -> AsyncIterator[TableKeyVersion]:
        """Iterate over every key with its version (hash order; not a snapshot).

        Example::

            async for k in table.keys():
                print(k.key, k.version)
        """
        cont: bytes | None = b""
        while cont is not None:
            page, cont = await self.keys_page(cont, batch_size=batch_size)
            for k in page:
                yield k

    async def items(self, *, batch_size: int = 1000) -> AsyncIterator[TableEntry]:
        """Iterate over every entry (hash order; not a snapshot).

        Example::

            settings = {e.key: e.value async for e in table.items()}
        """
        cont: bytes | None = b""
        while cont is not None:
            page, cont = await self.items_page(cont, batch_size=batch_size)
            for e in page:
                yield e

    async def keys_page(
        self, continuation: bytes = b"", *, batch_size: int = 1000, timeout: float | None = None
    ) -> tuple[list[TableKeyVersion], bytes | None]:
        """One page of keys and the token for the next page (None after the last).

        Example::

            page, token = await table.keys_page()
            while token is not None:
                more, token = await table.keys_page(token)
        """
        token = self._client.options.delegation_token
        args = TableIteratorArgs(continuation)
        reply = await self._client._call(
            lambda rid: ReadTableKeys(rid, self.name, token, batch_size, args),
            retry=True,
            limit=timeout,
        )
        if not isinstance(reply, TableKeysRead):
            raise error_from_reply(reply)
        if not reply.keys:
            return [], None
        cont = bytes(reply.continuation_token)
        page = [TableKeyVersion(bytes(k.key), k.version) for k in reply.keys]
        return page, (cont or None)

    async def items_page(
        self, continuation: bytes = b"", *, batch_size: int = 1000, timeout: float | None = None
    ) -> tuple[list[TableEntry], bytes | None]:
        """One page of entries and the token for the next page (None after the last).

        Example::

            page, token = await table.items_page()
        """
        token = self._client.options.delegation_token
        args = TableIteratorArgs(continuation)
        reply = await self._client._call(
            lambda rid: ReadTableEntries(rid, self.name, token, batch_size, args),
            retry=True,
            limit=timeout,
        )
        if not isinstance(reply, TableEntriesRead):
            raise error_from_reply(reply)
        if not reply.entries:
            return [], None
        cont = bytes(reply.continuation_token)
        page = [TableEntry(bytes(e.key), bytes(e.value), e.version) for e in reply.entries]
        return page, (cont or None)

    async def changes(
        self, since: int = 0, *, limit: int = 1000, timeout: float | None = None
    ) -> TableChanges:
        """Keys updated since log position ``since`` (0: from the beginning), one page.

        Call again with the returned ``position`` until ``at_end``. Example::

            page = await table.changes(saved_position)
            for e in page.entries: cache[e.key] = e.value
            saved_position = page.position
        """
        token = self._client.options.delegation_token
        reply = await self._client._call(
            lambda rid: ReadTableEntriesDelta(rid, self.name, token, since, limit),
            retry=True,
            limit=timeout,
        )
        if not isinstance(reply, TableEntriesDeltaRead):
            raise error_from_reply(reply)
        entries = [TableEntry(bytes(e.key), bytes(e.value), e.version) for e in reply.entries]
        # An empty page reports position 0 (a server quirk): keep ours then.
        position = reply.last_position if entries or reply.last_position > since else since
        return TableChanges(entries, position, reply.should_clear, reply.reached_end)

    # -- updates ---------------------------------------------------------------------

    async def put(
        self,
        key: Key,
        value: Value,
        *,
        version: int | None = None,
        must_not_exist: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Set ``key`` to ``value``; returns the new version.

        ``version=v`` updates only if the key's version is ``v``; ``must_not_exist``
        inserts only if absent. A failed condition raises :class:`TableKeyBadVersion` or
        :class:`TableKeyDoesNotExist` (both :class:`TableConditionFailed`). Example::

            v = await table.put("color", "blue", must_not_exist=True)
            v = await table.put("color", "red", version=v)
        """
        if must_not_exist:
            if version is not None:
                raise ValueError("give either version= or must_not_exist=True, not both")
            version = NOT_EXISTS
        return (await self.put_many([(key, value, version)], timeout=timeout))[0]

    async def put_many(
        self,
        entries: Iterable[tuple[Key, Value] | tuple[Key, Value, int | None]],
        *,
        timeout: float | None = None,
    ) -> list[int]:
        """Set several keys in one all-or-nothing request; returns their new versions.

        Each entry is ``(key, value)`` or ``(key, value, version)`` where version is
        None (unconditional), :data:`MUST_NOT_EXIST` or a version. Example::

            await table.put_many([("a", "1"), ("b", "2", MUST_NOT_EXIST)])
        """
        wire: list[WireEntry] = []
        conditional = False
        for entry in entries:
            version = entry[2] if len(entry) > 2 else None  # type: ignore[misc]
            if version is None:
                version = NO_VERSION
            else:
                conditional = True
            wire.append(WireEntry(_b(entry[0]), _b(entry[1]), version))
        if not wire:
            return []
        items = tuple(wire)
        token = self._client.options.delegation_token
        reply = await self._client._call(
            lambda rid: UpdateTableEntries(rid, self.name, token, items),
            retry=not conditional,
            limit=timeout,
        )
        if isinstance(reply, TableEntriesUpdated):
            return list(reply.updated_versions)
        raise _keyed_error(reply, [(bytes(e.key), e.version) for e in items])

    async def remove(
        self, key: Key, *, version: int | None = None, timeout: float | None = None
    ) -> None:
        """Remove ``key`` (absent keys are fine unless ``version`` is given).

        Example::

            await table.remove("color")
        """
        await self.remove_many([(key, version)], timeout=timeout)

    async def remove_many(
        self, keys: Iterable[Key | tuple[Key, int | None]], *, timeout: float | None = None
    ) -> None:
        """Remove several keys in one all-or-nothing request; each item is a key or
        ``(key, version)``.

        Example::

            await table.remove_many(["a", ("b", v_b)])
        """
        wire: list[WireKey] = []
        conditional = False
        for item in keys:
            if isinstance(item, tuple):
                key, version = item
            else:
                key, version = item, None
            if version is None:
                version = NO_VERSION
            else:
                conditional = True
            wire.append(WireKey(_b(key), version))
        if not wire:
            return
        items = tuple(wire)
        token = self._client.options.delegation_token
        reply = await self._client._call(
            lambda rid: RemoveTableKeys(rid, self.name, token, items),
            retry=not conditional,
            limit=timeout,
        )
        if isinstance(reply, TableKeysRemoved):
            return
        raise _keyed_error(reply, [(bytes(k.key), k.version) for k in items])
