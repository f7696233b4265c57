"""A connection going away, through the in-memory harness (``harness.py``): what the
mutation check (``scripts/mutate.py``) found unguarded in ``Connection.connection_lost``."""

from __future__ import annotations

import uuid
from pathlib import Path

from segmentstore_client.protocol import CreateTransientSegment, SegmentCreated

from .harness import harness
from .test_harness import create


async def test_transient_segments_go_with_their_connection(tmp_path: Path) -> None:
    """Guards the _drop_transient spawn: a transient segment (reference 6.4) is deleted
    once the connection that created it is gone; other connections' segments stay."""
    async with harness(tmp_path) as h:
        owner, other = h.connect(), h.connect()
        await create(other, "parent")
        owner.send(CreateTransientSegment(60, uuid.uuid4(), "parent", ""))
        await owner.until(lambda: any(isinstance(c, SegmentCreated) for c in owner.received))
        [created] = [c for c in owner.received if isinstance(c, SegmentCreated)]
        store = h.server.ctx.store
        assert store.exists(created.segment) and "#transient." in created.segment
        owner.transport.close()
        await other.until(lambda: not store.exists(created.segment), "transient deleted")
        assert store.exists("parent")
