"""Stream transactions over the controller's transaction RPCs.

Contract: ``begin`` asks the controller for a transaction (``createTransaction``), which
creates one transaction segment per segment of the current epoch, named
``<segment>#transaction.<32 hex digits of the id>``. Events are routed by key over the
transaction's ranges, exactly as the stream writer routes them, to one writer per
transaction segment. ``commit`` flushes every writer (all events durable in the
transaction segments) and asks the controller to merge them into the stream, atomically
per segment; ``abort`` drops them. Nothing is visible to readers before the commit.
"""

from __future__ import annotations

import random
import uuid
from typing import TYPE_CHECKING, Any

from ..errors import WriterClosed
from ..writer import EventWriter
from .controller_client import segment_name
from .routing import KeyRange, KeyRanges, key_hash

if TYPE_CHECKING:
    from ..client import Client


def txn_suffix(high: int, low: int) -> str:
    return f"#transaction.{high & 0xFFFFFFFFFFFFFFFF:016x}{low & 0xFFFFFFFFFFFFFFFF:016x}"


class Transaction:
    """An open transaction of a stream; get one with ``StreamWriter.begin()``.

    Example::

        txn = await writer.begin()
        await txn.write(b"debit", routing_key="acct-1")
        await txn.write(b"credit", routing_key="acct-2")
        await txn.commit()       # both visible at once, or (abort) neither
    """

    def __init__(
        self,
        client: Client,
        scope: str,
        stream: str,
        reply: Any,
        writer_id: str,
        ranges: list[KeyRange],  # reply.activeSegments, checked (ControllerClient.ranges)
    ) -> None:
        self._client = client
        self._scope, self._stream = scope, stream
        self.high, self.low = reply.txnId.highBits, reply.txnId.lowBits
        self.id = uuid.UUID(txn_suffix(self.high, self.low).split(".")[1])
        self._ranges = KeyRanges(ranges)
        self._key_ranges = ranges
        self._writers: dict[int, EventWriter] = {}
        self._writer_id = writer_id
        self.state = "open"

    def _txn_request(self) -> Any:
        c = self._client.controller
        pb = c.messages()
        return pb.TxnRequest(
            streamInfo=c.info(self._scope, self._stream),
            txnId=pb.TxnId(highBits=self.high, lowBits=self.low),
            writerId=self._writer_id,
        )

    def _writer(self, sid: int) -> EventWriter:
        w = self._writers.get(sid)
        if w is None:
            name = segment_name(self._scope, self._stream, sid) + txn_suffix(self.high, self.low)
            w = self._writers[sid] = self._client.writer(name, f"{self._writer_id}/{name}")
        return w

    async def write(self, data: bytes, routing_key: str | None = None) -> None:
        """Add one event to the transaction (durable at ``commit``)."""
        if self.state != "open":
            raise WriterClosed(f"transaction {self.id} is {self.state}")
        h = random.random() if routing_key is None else key_hash(routing_key)
        await self._writer(self._ranges.route(h)).write(data)

    @property
    def key_ranges(self) -> list[KeyRange]:
        """The transaction's segments and their key ranges (its epoch's, fixed at ``begin``)."""
        return list(self._key_ranges)

    async def flush(self) -> None:
        """Wait until every event written so far is durable in the transaction's segments
        (still invisible to readers until ``commit``)."""
        if self.state != "open":
            raise WriterClosed(f"transaction {self.id} is {self.state}")
        for w in self._writers.values():
            await w.flush()

    async def commit(self) -> None:
        """Make every event durable, then merge them into the stream (all or none)."""
        if self.state != "open":
            raise WriterClosed(f"transaction {self.id} is {self.state}")
        for w in self._writers.values():
            await w.close()
        c = self._client.controller
        c.check(await c.call("commitTransaction", self._txn_request()), f"commit {self.id}")
        self.state = "committed"

    async def abort(self) -> None:
        """Drop the transaction's events."""
        if self.state != "open":
            return
        for w in self._writers.values():
            w.abort()
        c = self._client.controller
        c.check(await c.call("abortTransaction", self._txn_request()), f"abort {self.id}")
        self.state = "aborted"

    async def check_state(self) -> str:
        """The controller's view: ``OPEN``, ``COMMITTING``, ``COMMITTED``, ``ABORTED``..."""
        c = self._client.controller
        reply = await c.call("checkTransactionState", self._txn_request())
        field = reply.DESCRIPTOR.fields_by_name["state"]
        return str(field.enum_type.values_by_number[reply.state].name)
