"""The commit intent of a stream write that has a marker (``writeId``, streaming batches).

Contract: before the driver commits the transactions of write scope ``scope`` at sequence
``seq``, it records their ids as attributes of the stream's marker segment: two per
transaction (the id's high and low 64 bits) and then a count, written last, whose
presence makes the intent complete. A later commit of the same ``(scope, seq)`` (Spark
replaying a micro-batch after the driver died between committing and raising the
marker) that finds a complete intent commits the recorded transactions (a no-op for
those already committed) and aborts its own, so the batch lands exactly once. After the
marker is raised the intent's attributes are removed (best effort: a leftover intent is
below the marker and never read again). Attribute values are int64; the one value the
protocol reserves for "unset" (``-2**63``) cannot be a transaction id's half here
because the controller keeps ``lowBits`` non-negative and an epoch in ``highBits``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Final

from ..client import Client
from ..errors import SegmentStoreError
from .options import NAMESPACE

log = logging.getLogger("segmentstore_client.spark")

_TRIES: Final = 20
TxnId = tuple[int, int]
"""``(high bits, low bits)`` of a transaction id."""


def _attr(scope: str, seq: int, what: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"intent|{scope}|{seq}|{what}")


async def _put(client: Client, seg: str, attr: uuid.UUID, value: int | None) -> None:
    for _ in range(_TRIES):  # bounded: only a crashed driver's leftovers differ
        current = await client.get_attribute(seg, attr)
        if current == value:
            return
        if await client.compare_and_set_attribute(seg, attr, value, current):
            return
    raise SegmentStoreError(f"could not set an intent attribute on {seg!r}")


async def recorded(client: Client, seg: str, scope: str, seq: int) -> list[TxnId] | None:
    """The transactions of a complete intent of ``(scope, seq)``, or None."""
    count = await client.get_attribute(seg, _attr(scope, seq, "count"))
    if count is None:
        return None
    out: list[TxnId] = []
    for i in range(count):
        high = await client.get_attribute(seg, _attr(scope, seq, f"{i}.high"))
        low = await client.get_attribute(seg, _attr(scope, seq, f"{i}.low"))
        if high is None or low is None:
            raise SegmentStoreError(f"the commit intent on {seg!r} lacks transaction {i}")
        out.append((high, low))
    return out


async def record(client: Client, seg: str, scope: str, seq: int, txns: list[TxnId]) -> None:
    """Record ``txns`` as the intent of ``(scope, seq)`` (the count last)."""
    for i, (high, low) in enumerate(txns):
        await _put(client, seg, _attr(scope, seq, f"{i}.high"), high)
        await _put(client, seg, _attr(scope, seq, f"{i}.low"), low)
    await _put(client, seg, _attr(scope, seq, "count"), len(txns))


async def clear(client: Client, seg: str, scope: str, seq: int, n: int) -> None:
    """Remove the intent of ``(scope, seq)`` (the count first); failures are logged."""
    names = ["count", *(f"{i}.{h}" for i in range(n) for h in ("high", "low"))]
    try:
        for name in names:
            await _put(client, seg, _attr(scope, seq, name), None)
    except SegmentStoreError as e:
        log.warning("removing the commit intent of %s/%d failed: %s", scope, seq, e)
